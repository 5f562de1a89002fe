"""What every agent of ``pglab.load_checkpoint`` does with a bad observation: one
:class:`pglab.agent.ObservationError` (a ``ValueError``; :class:`ObservationTypeError`, also
a ``TypeError``, for the wrong kind of object) naming what was expected and what arrived,
never a failure inside torch or a silent action; and what it does with a good observation
of another dtype: the same action as the dtype it computes in.

One tiny checkpoint per kind, trained once per module."""

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

import pglab
from pglab.agent import ObservationError, ObservationTypeError
from pglab.errors import TensorContractError

QUIET = dict(echo=lambda *a, **k: None)
NAN, INF = math.nan, math.inf


# -- one tiny agent per kind -----------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return tmp_path_factory.mktemp("agent-inputs")


@pytest.fixture(scope="module")
def ghm(runs):
    from pglab.algos.ghm_train import train_ghm
    from pglab.configs.ghm import GHMTrainConfig

    fields = dict(n_trajectories=16, T=0.1, dt=0.01, eval_interval=1000, eval_quick_paths=0, final_eval=False)
    fields |= dict(plots=False)
    train_ghm(GHMTrainConfig(n_iterations=1, log_dir=runs / "ghm", device="cpu", fd_nodes=400, **fields), **QUIET)
    return pglab.load_checkpoint(runs / "ghm", device="cpu"), torch.tensor([[0.1], [0.5], [1.7]])


@pytest.fixture(scope="module")
def ppo(runs):
    from pglab.algos.ppo import train_ppo
    from pglab.configs.ppo import PPOConfig
    from pglab.run.config import make_config

    fields = dict(num_envs=2, num_steps=32, num_minibatches=2, ppo_epochs=2, hidden_dims=(16,), tensorboard=False)
    train_ppo(make_config(PPOConfig, total_steps=64, eval_episodes=0, log_dir=runs / "ppo", **fields))
    return pglab.load_checkpoint(runs / "ppo", device="cpu"), torch.randn(
        16, 4, generator=torch.Generator().manual_seed(0)
    )


@pytest.fixture(scope="module")
def a2c(runs):
    from pglab.algos.a2c import A2CTrainConfig, train_a2c
    from pglab.configs.a2c import PixelGoalConfig

    grid = PixelGoalConfig(grid_size=4)
    train_a2c(
        A2CTrainConfig(total_env_steps=4, log_dir=runs / "a2c", num_envs=4, pixel_goal=grid, device="cpu"), **QUIET
    )
    agent = pglab.load_checkpoint(runs / "a2c", device="cpu")
    pixels = torch.randint(0, 256, (16, 1, 8, 8), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    return agent, pixels


@pytest.fixture(scope="module")
def forecast(runs):
    from pglab.algos.forecast import train_forecast
    from pglab.configs.forecast import ForecastTrainConfig
    from pglab.run.config import make_config

    config = make_config(ForecastTrainConfig, source="synthetic", horizon=5, episodes=2, log_dir=runs / "forecast")
    train_forecast(config, **QUIET)
    agent = pglab.load_checkpoint(runs / "forecast", device="cpu")
    return agent, torch.tensor([[100.0, 0.5, 0.2], [101.0, -1.0, -0.3], [99.5, 2.0, 0.0]], dtype=torch.float64)


@pytest.fixture(scope="module")
def pso(runs):
    from pglab.algos.pso_tsp import PSOTSPTrainConfig, train_pso_tsp
    from pglab.envs.pso_tsp import PSOTSPEnv, random_instances
    from pglab.run.config import make_config
    from pglab.run.seeding import make_generator

    tiny = dict(num_cities=8, knn=4, n_particles=4, pso_iterations=3, emb_dim=8, num_heads=2, node_layers=1)
    config = make_config(
        PSOTSPTrainConfig,
        **tiny,
        instances_per_iteration=2,
        eval_instances=4,
        eval_interval=0,
        algo="ppo",
        device="cpu",
        controller="edge_policy",
        n_iterations=1,
        log_dir=runs / "pso",
    )
    train_pso_tsp(config, **QUIET)
    agent = pglab.load_checkpoint(runs / "pso", device="cpu")
    head = agent.model.policy_head[-1].weight
    with torch.no_grad():  # coefficients that depend on the swarm
        head.copy_(0.1 * torch.randn(head.shape, generator=make_generator(2)))
    env = PSOTSPEnv(agent.config.env, agent.device, make_generator(0), decode="greedy")
    return agent, env.reset(random_instances(2, 8, make_generator(1), agent.device))


@pytest.fixture(scope="module")
def maxk(runs):
    pytest.importorskip("rl4co")
    from pglab.cli import main

    argv = ["--num-loc", "6", "--k", "3", "--batch-size", "4", "--embed-dim", "16", "--num-encoder-layers", "1"]
    argv += ["--num-heads", "2", "--device", "cpu", "--n-steps", "1", "--log-dir", str(runs / "maxk")]
    assert main(["train", "maxk-pomo", *argv]) == 0
    locs = torch.rand(3, 6, 2, generator=torch.Generator().manual_seed(0))
    return pglab.load_checkpoint(runs / "maxk", device="cpu"), locs


def agent_and_obs(request, kind):
    return request.getfixturevalue(kind)


def with_value(obs: torch.Tensor, index, value) -> torch.Tensor:
    changed = obs.double().clone()
    changed[index] = value
    return changed


# -- bad tensors, for the kinds whose observation is one tensor --------------------------
# (kind, case, bad observation from the good one, error, what the message must say)
TENSOR_CASES = [
    ("ghm", "bool", lambda o: o > 1, ObservationError, r"cash expected float32\[B, 1\], got bool\[3, 1\]"),
    ("ghm", "nan", lambda o: with_value(o, (1, 0), NAN), ObservationError, r"finite values, got nan at \[1, 0\]"),
    ("ghm", "inf", lambda o: with_value(o, (2, 0), -INF), ObservationError, r"finite values, got -inf at \[2, 0\]"),
    ("ghm", "no batch", lambda o: o[:, 0], ObservationError, r"cash expected tensor\[B, 1\], got float32\[3\]"),
    ("ghm", "wide", lambda o: o.repeat(1, 2), ObservationError, r"cash expected tensor\[B, 1\], got float32\[3, 2\]"),
    (
        "ghm",
        "list",
        lambda o: o.tolist(),
        ObservationTypeError,
        r"cash expected a torch.Tensor float32\[B, 1\], got list",
    ),
    ("ghm", "None", lambda o: None, ObservationTypeError, r"expected a torch.Tensor .*, got NoneType"),
    (  # booleans are read as 0/1 (MinAtar's boards); complex numbers are not numbers it reads
        "ppo",
        "complex",
        lambda o: o.to(torch.complex64),
        ObservationError,
        r"obs expected float32\[B, \.\.\. \(4 numbers per row\)\], got complex64",
    ),
    ("ppo", "nan", lambda o: with_value(o, (3, 2), NAN), ObservationError, r"finite values, got nan at \[3, 2\]"),
    ("ppo", "inf", lambda o: with_value(o, (0, 1), INF), ObservationError, r"finite values, got inf at \[0, 1\]"),
    ("ppo", "huge", lambda o: with_value(o, (0, 0), 1e300), ObservationError, r"finite values, got 1e\+300"),
    ("ppo", "no batch", lambda o: o[0], ObservationError, r"4 numbers per row\)\], got float32\[4\]"),
    ("ppo", "wide", lambda o: o[:, :3], ObservationError, r"4 numbers per row\)\], got float32\[16, 3\]"),
    ("ppo", "dict", lambda o: {"obs": o}, ObservationTypeError, r"obs expected a torch.Tensor .*, got dict"),
    ("a2c", "bool", lambda o: o > 0, ObservationError, r"uint8 pixels 0\.\.255 \[B, 1, 8, 8\], got bool"),
    ("a2c", "above 255", lambda o: with_value(o, (2, 0, 3, 4), 300).long(), ObservationError, r"in 0\.\.255, got 300"),
    ("a2c", "negative", lambda o: with_value(o, (0, 0, 0, 0), -1).long(), ObservationError, r"in 0\.\.255, got -1 "),
    ("a2c", "fraction", lambda o: o / 255, ObservationError, r"pixels as integers 0\.\.255, got 0\.\d+"),
    ("a2c", "nan", lambda o: with_value(o, (1, 0, 0, 0), NAN), ObservationError, r"integers 0\.\.255, got nan"),
    ("a2c", "no batch", lambda o: o[0], ObservationError, r"expected tensor\[B, 1, 8, 8\], got uint8\[1, 8, 8\]"),
    ("a2c", "channels last", lambda o: o.permute(0, 2, 3, 1), ObservationError, r"got uint8\[16, 8, 8, 1\]"),
    ("a2c", "list", lambda o: o.tolist(), ObservationTypeError, r"expected a torch.Tensor uint8 pixels .*, got list"),
    ("maxk", "bool", lambda o: o > 0.5, ObservationError, r"locs expected float32\[B, \*, 2\], got bool\[3, 6, 2\]"),
    (
        "maxk",
        "nan",
        lambda o: with_value(o, (0, 4, 1), NAN),
        ObservationError,
        r"finite values, got nan at \[0, 4, 1\]",
    ),
    ("maxk", "no batch", lambda o: o[0], ObservationError, r"locs expected tensor\[B, \*, 2\], got float32\[6, 2\]"),
    ("maxk", "one node", lambda o: o[:, :1], ObservationError, r"n >= 2, got \[3, 1, 2\]"),
    ("maxk", "3-d coordinates", lambda o: o.repeat(1, 1, 2)[..., :3], ObservationError, r"got float32\[3, 6, 3\]"),
    ("maxk", "None", lambda o: None, ObservationTypeError, r"locs expected a torch.Tensor .*, got NoneType"),
    ("forecast", "key -1", lambda o: torch.tensor([0, -1]), ObservationError, r"state keys in 0\.\.8, got -1 at \[1\]"),
    ("forecast", "huge key", lambda o: torch.tensor([10**9]), ObservationError, r"in 0\.\.8, got 1000000000"),
    ("forecast", "first key out", lambda o: torch.tensor([9]), ObservationError, r"in 0\.\.8, got 9"),
    (
        "forecast",
        "float keys",
        lambda o: torch.tensor([1.0, 2.0]),
        ObservationError,
        r"int64 keys 0\.\.8 \[B\], got float",
    ),
    ("forecast", "bool keys", lambda o: torch.tensor([True]), ObservationError, r"int64 keys 0\.\.8 \[B\], got bool"),
    ("forecast", "nan", lambda o: with_value(o, (2, 1), NAN), ObservationError, r"finite values, got nan at \[2, 1\]"),
    ("forecast", "wide", lambda o: o.repeat(1, 2), ObservationError, r"expected tensor\[B, 3\], got float64\[3, 6\]"),
    ("forecast", "no batch", lambda o: o[None], ObservationError, r"expected tensor\[B, 3\], got float64\[1, 3, 3\]"),
    ("forecast", "list", lambda o: o.tolist(), ObservationTypeError, r"a torch.Tensor float64\[B, 3\], got list"),
]


@pytest.mark.parametrize(
    ("kind", "case", "make", "error", "message"), TENSOR_CASES, ids=[f"{c[0]}-{c[1]}" for c in TENSOR_CASES]
)
def test_a_bad_observation_is_one_clear_error(request, kind, case, make, error, message):
    agent, good = agent_and_obs(request, kind)
    methods = [agent.act] if kind in ("maxk",) else [agent.act, agent.value]
    for method in methods:
        with pytest.raises(error, match=message) as caught:
            method(make(good))
        where = f"{type(agent).__name__}.{method.__name__}: "
        assert str(caught.value).startswith(where) and "\n" not in str(caught.value)


def test_the_errors_are_value_errors_and_the_type_error_a_type_error_too():
    assert issubclass(ObservationError, TensorContractError) and issubclass(ObservationError, ValueError)
    assert issubclass(ObservationTypeError, ObservationError) and issubclass(ObservationTypeError, TypeError)


# -- predict: arrays that are not numbers ---------------------------------------------------
PREDICT_CASES = [
    ("strings", lambda a: np.full(a.shape, "x"), r"NumPy array of numbers, got an array of dtype <U1 shape \["),
    ("objects", lambda a: np.array([None, 1.0], dtype=object), r"got an array of dtype object shape \[2\]"),
    ("ragged", lambda a: [[1.0, 2.0], [3.0]], r"NumPy array of numbers, got .*inhomogeneous"),
    ("dict", lambda a: {"obs": a}, r"NumPy array of numbers, got dict"),
    ("None", lambda a: None, r"NumPy array of numbers, got NoneType"),
]


@pytest.mark.parametrize("kind", ["ghm", "ppo", "a2c", "maxk", "forecast"])
@pytest.mark.parametrize(("case", "make", "message"), PREDICT_CASES, ids=[c[0] for c in PREDICT_CASES])
def test_predict_refuses_what_is_not_an_array_of_numbers(request, kind, case, make, message):
    agent, good = agent_and_obs(request, kind)
    with pytest.raises(ObservationTypeError, match=message) as caught:
        agent.predict(make(good.numpy()))
    assert str(caught.value).startswith(f"{type(agent).__name__}.predict: obs expected ")


def test_predict_refuses_a_nan_as_act_does(ppo):
    agent, good = ppo
    with pytest.raises(ObservationError, match=r"PPOAgent\.act: obs expected finite values, got nan"):
        agent.predict(with_value(good, (0, 0), NAN).numpy())


# -- good observations of another dtype -------------------------------------------------------
@pytest.mark.parametrize("kind", ["ghm", "ppo", "maxk"])
def test_float64_and_integer_observations_act_as_float32(request, kind):
    agent, good = agent_and_obs(request, kind)
    reference = agent.act(good)
    assert torch.equal(agent.act(good.double()), reference)
    np.testing.assert_array_equal(agent.predict(good.double().numpy()), reference.numpy())
    if kind != "maxk":  # (a TSP needs distinct cities)
        whole = good.round()
        assert torch.equal(agent.act(whole.long()), agent.act(whole))
    if kind != "maxk":
        assert torch.equal(agent.value(good.double()), agent.value(good))


def test_float64_and_integer_pixels_act_as_uint8(a2c):
    agent, pixels = a2c
    reference = agent.act(pixels)
    assert agent.value(pixels).unique().numel() == len(pixels)  # values that depend on the pixels
    for other in (pixels.double(), pixels.long(), pixels.int()):
        assert torch.equal(agent.act(other), reference)
        assert torch.equal(agent.value(other), agent.value(pixels))
    np.testing.assert_array_equal(agent.predict(pixels.numpy().astype(np.int64)), reference.numpy())
    np.testing.assert_array_equal(agent.predict(pixels.tolist()), reference.numpy())


def test_forecast_observations_of_integers_and_keys_in_range_are_read(forecast):
    agent, rows = forecast
    whole = rows.round()
    assert torch.equal(agent.value(whole.long()), agent.value(whole))
    # greedy ties are broken by the table's own RNG: give each call the same RNG state
    same = [copy.deepcopy(agent) for _ in range(2)]
    assert torch.equal(same[0].act(whole.long()), same[1].act(whole))
    every_key = torch.arange(agent.key_count)
    same = [copy.deepcopy(agent) for _ in range(2)]
    actions = same[0].act(every_key)
    assert agent.value(every_key).shape == (agent.key_count,) and actions.shape == (agent.key_count,)
    np.testing.assert_array_equal(same[1].predict(every_key.numpy()), actions.numpy())


# -- pso-tsp: the observation is a SwarmState -------------------------------------------------
def swarm_with(state, **fields):
    return dataclasses.replace(state, **fields)


PSO_CASES = [
    ("tensor", lambda s: s.position, ObservationTypeError, r"obs expected a SwarmState .*, got Tensor"),
    ("dict", lambda s: vars(s), ObservationTypeError, r"obs expected a SwarmState .*, got dict"),
    ("None", lambda s: None, ObservationTypeError, r"obs expected a SwarmState .*, got NoneType"),
    ("list field", lambda s: swarm_with(s, velocity=s.velocity.tolist()), ObservationTypeError, r"velocity .*got list"),
    ("nan", lambda s: swarm_with(s, position=with_value(s.position, (1, 2, 3), NAN)), ObservationError, r"position"),
    ("inf cost", lambda s: swarm_with(s, cost=with_value(s.cost, (0, 1), INF)), ObservationError, r"cost expected fin"),
    ("neighbour 8", lambda s: swarm_with(s, neighbours=s.neighbours + 1), ObservationError, r"keys in 0\.\.7, got 8"),
    ("float neighbours", lambda s: swarm_with(s, neighbours=s.neighbours.float()), ObservationError, r"neighbours"),
    ("short edges", lambda s: swarm_with(s, pbest=s.pbest[..., :5]), ObservationError, r"pbest expected tensor\[B, P"),
    (
        "particles",
        lambda s: swarm_with(s, cost=s.cost[:, :2]),
        ObservationError,
        r"cost expected tensor\[B, P\] with P=4",
    ),
    ("bool gbest", lambda s: swarm_with(s, gbest=s.gbest > 0), ObservationError, r"gbest expected float32\[B, 32\]"),
    (
        "iteration -1",
        lambda s: swarm_with(s, iteration=-1),
        ObservationError,
        r"iteration expected an int >= 0, got -1",
    ),
    ("iteration True", lambda s: swarm_with(s, iteration=True), ObservationError, r"an int >= 0, got True"),
]


@pytest.mark.parametrize(("case", "make", "error", "message"), PSO_CASES, ids=[c[0] for c in PSO_CASES])
def test_a_bad_swarm_is_one_clear_error(pso, case, make, error, message):
    agent, state = pso
    for method in (agent.act, agent.value):
        with pytest.raises(error, match=message) as caught:
            method(make(state))
        assert str(caught.value).startswith(f"PSOTSPAgent.{method.__name__}: ")


def test_a_float64_swarm_acts_as_float32_and_predict_refuses_strings(pso):
    agent, state = pso
    reference = agent.act(state)
    doubled = {k: v.double() for k, v in vars(state).items() if isinstance(v, torch.Tensor) and v.is_floating_point()}
    assert torch.equal(agent.act(swarm_with(state, **doubled)), reference)
    assert torch.equal(agent.value(swarm_with(state, **doubled)), agent.value(state))
    as_numpy = {k: v.numpy() for k, v in vars(state).items() if isinstance(v, torch.Tensor)}
    np.testing.assert_array_equal(agent.predict(swarm_with(state, **as_numpy)), reference.numpy())
    with pytest.raises(ObservationTypeError, match=r"PSOTSPAgent\.predict: gbest expected a NumPy array of numbers"):
        agent.predict(swarm_with(state, **{**as_numpy, "gbest": np.full(state.gbest.shape, "x")}))
    with pytest.raises(ObservationTypeError, match=r"PSOTSPAgent\.predict: obs expected a SwarmState"):
        agent.predict(as_numpy["position"])


def test_boolean_boards_are_read_as_zeros_and_ones_only_where_the_spec_allows_them():
    from pglab.agent import ObsSpec, check_observation

    board = torch.tensor([[True, False, True]])
    vector = ObsSpec(None, "real", torch.float32, per_row=3, booleans=True)
    assert torch.equal(check_observation(board, vector, where="t"), torch.tensor([[1.0, 0.0, 1.0]]))
    with pytest.raises(ObservationError, match="got bool"):
        check_observation(board, ObsSpec(None, "real", torch.float32, per_row=3), where="t")

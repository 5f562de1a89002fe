"""Models with several states: the d-dimensional interface, the simulator, the three
solvers, the final evaluation, ``pglab evaluate``, the agent and the sweep.

Each test pins one side against an independent computation: the simulator against a
Python loop over paths and steps (correlated noise, a regime switch drawn from scipy's
``expm``, divisions killed between grid times), GHM's closed-form held steps against the
generic diffusion-matrix step, one division against plain GHM bit for bit, the HJB
residual of several states against sums of one-state residuals, and the reference of N
divisions against the sum of independent 1-D FD solutions.
"""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import scipy.linalg
import torch
from test_ghm import TINY, rows_without_perf

import pglab
from pglab.agent import ObservationError
from pglab.algos.actor_critic import optimal_hjb_residual
from pglab.algos.ghm_sweep import build_trials
from pglab.algos.ghm_train import GHMTrainConfig, train_ghm
from pglab.algos.mc_pg import MonteCarloPolicyGradient
from pglab.bench import ghm_multi
from pglab.cli import main as pglab_main
from pglab.configs.sweep import GHMSweepConfig
from pglab.envs.dynamics import ContinuousTimeModel, ControlSpec, MarkovRegimes
from pglab.envs.ghm import GHMModel, GHMParams
from pglab.envs.ghm_divisions import GHMDivisionsModel
from pglab.envs.ghm_regimes import RegimeGHMModel, RegimeGHMParams
from pglab.envs.simulator import RolloutNoise, TrajectorySimulator
from pglab.errors import TensorContractError
from pglab.hjb.fd import solve_hjb_1d_extrapolated
from pglab.hjb.residual_nd import hjb_residual_nd
from pglab.nets import GaussianPolicy, ValueNetwork
from pglab.run.checkpoint import load_checkpoint_file

QUIET = dict(echo=lambda *args, **kwargs: None)
DT = 0.05


class CorrelatedRegimes(ContinuousTimeModel):
    """Cash absorbed at 0, a level whose noise is correlated with the cash's, and a regime
    that switches fast (so a few steps see switches); the volatility depends on the regime
    and on a control."""

    state_names = ("cash", "level", "regime")
    diagonal_noise = False
    control = ControlSpec(("pay", "raise"), (0.0, 0.0), (1.0, 0.5))
    discount_rate = 0.1
    state_low, state_high = (0.05, -0.5, 0.0), (0.6, 0.5, 1.0)
    regimes = MarkovRegimes(coordinate=2, rates=((0.0, 3.0), (5.0, 0.0)))

    @property
    def noise_dim(self) -> int:
        return 2

    def drift(self, states, controls):
        cash = 0.1 + 0.2 * states[:, 1] + 0.3 * states[:, 2] - controls[:, 0] + controls[:, 1]
        return torch.stack([cash, -0.5 * states[:, 1], torch.zeros_like(cash)], 1)

    def diffusion_matrix(self, states, controls):
        zero = torch.zeros_like(states[:, 0])
        rows = [
            [0.3 + 0.2 * states[:, 2], zero],
            [torch.full_like(zero, 0.1), 0.2 + 0.1 * controls[:, 0]],
            [zero, zero],
        ]
        return torch.stack([torch.stack(row, 1) for row in rows], 1)

    def reward_rate(self, states, controls):
        return controls[:, 0] * (1.0 + states[:, 2]) - 1.2 * controls[:, 1]

    def terminated(self, states):
        return states[:, 0] <= 0.0


def _toy_step(x, u, eps, uniforms):
    """The toy model's step by hand: Euler-Maruyama, then the regime from expm(Q dt)."""
    cash, level, regime = x
    drift = [0.1 + 0.2 * level + 0.3 * regime - u[0] + u[1], -0.5 * level]
    matrix = [[0.3 + 0.2 * regime, 0.0], [0.1, 0.2 + 0.1 * u[0]]]
    moved = [x[i] + drift[i] * DT + math.sqrt(DT) * sum(matrix[i][k] * eps[k] for k in range(2)) for i in range(2)]
    row = scipy.linalg.expm(np.array([[-3.0, 3.0], [5.0, -5.0]]) * DT)[int(regime)]
    next_regime = 0.0 if uniforms[0] < row[0] else 1.0
    reward = (u[0] * (1.0 + regime) - 1.2 * u[1]) * DT
    return [*moved, next_regime], reward


DIVISIONS = tuple(GHMParams(sigma=s, mu=m, initial_cash_high=0.25) for s, m in ((0.6, 0.1), (0.5, 0.05), (0.6, 0.1)))


def _division_step(x, u, eps, uniforms):
    """Three divisions by hand: each moves while its cash is positive and is killed between
    grid times when its uniform is at least its Brownian-bridge survival probability."""
    out, reward = [], 0.0
    for j, p in enumerate(DIVISIONS):
        if x[j] <= 0.0:
            out.append(x[j])
            continue
        reward += (u[2 * j] - (1 + p.lambda_dilution) * u[2 * j + 1]) * DT
        moved = x[j] + (p.mu + p.r * x[j] - u[2 * j] + u[2 * j + 1]) * DT + p.sigma * math.sqrt(DT) * eps[j]
        survival = 1.0 - math.exp(-2.0 * x[j] * max(moved, 0.0) / (p.sigma**2 * DT))
        out.append(min(moved, 0.0) if uniforms[j] >= survival else moved)
    return out, reward


class LinearPolicy:
    """mean = x W + b, std 0.3: different controls in different states."""

    def __init__(self, state_dim: int, action_dim: int):
        generator = torch.Generator().manual_seed(0)
        self.weight = torch.randn((state_dim, action_dim), generator=generator, dtype=torch.float64)
        self.bias = torch.full((action_dim,), 0.3, dtype=torch.float64)

    def mean_std(self, states):
        mean = states @ self.weight + self.bias
        return mean, torch.full_like(mean, 0.3)


def _loop_rollout(model, policy, initial, noise, step, action_repeat):
    """Path by path, step by step: states [B, T+1, d], rewards and masks [B, T]."""
    low, high = model.control.low, model.control.high
    all_states, all_rewards, all_masks = [], [], []
    for i in range(initial.shape[0]):
        x, alive = initial[i].tolist(), True
        states, rewards, masks = [x], [], []
        for t in range(noise.state_noise.shape[1]):
            if t % action_repeat == 0:
                mean, std = policy.mean_std(torch.tensor([x], dtype=torch.float64))
                raw = (mean + std * noise.action_noise[i, t]).tolist()[0]
                u = [min(max(a, lo), hi) for a, lo, hi in zip(raw, low, high, strict=True)]
            masks.append(1.0 if alive else 0.0)
            if alive:
                x, reward = step(x, u, noise.state_noise[i, t].tolist(), noise.jump_noise[i, t].tolist())
                alive = not model.terminated(torch.tensor([x]))[0]
                rewards.append(reward)
            else:
                rewards.append(0.0)
            states.append(x)
        all_states.append(states)
        all_rewards.append(rewards)
        all_masks.append(masks)
    return tuple(torch.tensor(values, dtype=torch.float64) for values in (all_states, all_rewards, all_masks))


@pytest.mark.parametrize(
    "case",
    [
        (CorrelatedRegimes(), _toy_step, "grid"),
        (GHMDivisionsModel(DIVISIONS), _division_step, "bridge"),
    ],
    ids=["correlated-noise-and-regimes", "divisions-killed-between-grid-times"],
)
def test_the_batched_rollout_is_the_loop_over_paths_and_steps(case):
    model, step, absorption = case
    simulator = TrajectorySimulator(model, DT, 12 * DT, action_repeat=2, absorption=absorption)
    generator = torch.Generator().manual_seed(5)
    initial = model.initial_states(6, generator, dtype=torch.float64)
    noise = simulator.draw_noise(6, generator, device="cpu", dtype=torch.float64)
    assert noise.jump_noise is not None and noise.survival_noise is None  # the parts' and the regime's uniforms
    policy = LinearPolicy(model.state_dim, model.action_dim)
    paths = simulator.rollout(policy, initial, noise=noise)
    states, rewards, masks = _loop_rollout(model, policy, initial, noise, step, action_repeat=2)
    torch.testing.assert_close(paths.masks, masks.to(paths.masks.dtype))
    torch.testing.assert_close(paths.rewards, rewards, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(paths.states, states, rtol=1e-9, atol=1e-12)
    coordinate = -1 if isinstance(model, CorrelatedRegimes) else 0
    varied = (paths.states[:, 1:, coordinate] != paths.states[:, :-1, coordinate]).any()
    assert bool(varied) and 0 < float(masks.sum()) < masks.numel()  # switches (or kills) and absorptions happen


def test_the_control_variate_subtracts_the_brownian_increments_across_jumps():
    """mc's martingale terms at every alive step are gamma V'(x) . Sigma sqrt(dt) eps, the
    Brownian increment computed from the noise itself (V' at the step's decision state),
    also in the steps where a division was killed between grid times (its state after the
    jump is not the Euler step's)."""
    model = GHMDivisionsModel(DIVISIONS)
    simulator = TrajectorySimulator(model, DT, 12 * DT, action_repeat=2, absorption="bridge")
    torch.manual_seed(2)
    policy, baseline = GaussianPolicy(3, 6, (8,)).double(), ValueNetwork(3, (8,)).double()
    solver = MonteCarloPolicyGradient(policy, simulator, baseline, control_variate="martingale")
    generator = torch.Generator().manual_seed(5)
    initial = model.initial_states(6, generator, dtype=torch.float64)
    noise = simulator.draw_noise(6, generator, device="cpu", dtype=torch.float64)
    with torch.no_grad():
        paths = simulator.rollout(policy, initial, noise=noise)
    terms, exploration = solver.control_variate_terms(paths, policy)
    assert paths.euler_states is not None
    killed = (paths.euler_states != paths.states[:, 1:]).any(2) & (paths.masks > 0)
    assert bool(killed.any())  # some alive step ends in a kill
    decision = paths.states[:, :-1:2].repeat_interleave(2, dim=1).reshape(-1, 3).requires_grad_(True)
    (slope,) = torch.autograd.grad(baseline(decision).sum(), decision)
    states, controls = paths.states[:, :-1].reshape(-1, 3), paths.controls.reshape(-1, 6)
    shock = model.shock(states, controls, math.sqrt(DT) * noise.state_noise.reshape(-1, 3))
    expected = simulator.discount * (slope * shock).sum(1).view(6, 12) * paths.masks
    torch.testing.assert_close(terms - exploration, expected, rtol=1e-10, atol=1e-12)


def test_ghm_closed_form_held_steps_are_the_generic_diffusion_matrix_steps():
    """GHM's fast path (one cumulative sum) against the base class's step loop through a
    1 x 1 diffusion matrix: the same Euler recursion, to float64 rounding."""

    class MatrixGHM(GHMModel):
        diagonal_noise = False

        def diffusion_matrix(self, states, controls):
            return torch.full((states.shape[0], 1, 1), self.params.sigma, dtype=states.dtype)

    generator = torch.Generator().manual_seed(1)
    states = torch.rand((7, 1), generator=generator, dtype=torch.float64)
    controls = torch.rand((7, 2), generator=generator, dtype=torch.float64)
    noise = torch.randn((7, 9, 1), generator=generator, dtype=torch.float64)
    fast = GHMModel(GHMParams(r=0.3, rho=0.4)).held_control_steps(states, controls, noise, 0.1)
    generic = MatrixGHM(GHMParams(r=0.3, rho=0.4)).held_control_steps(states, controls, noise, 0.1)
    for a, b in zip(fast, generic, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


def test_model_outputs_and_noise_of_the_wrong_shape_are_refused_by_name():
    class WrongDrift(CorrelatedRegimes):
        def drift(self, states, controls):
            return super().drift(states, controls)[:, :2]

    simulator = TrajectorySimulator(WrongDrift(), DT, 4 * DT)
    policy = LinearPolicy(3, 2)
    with pytest.raises(TensorContractError, match=r"WrongDrift\.drift expected float32\|float64\[B, 3\]"):
        simulator.rollout(policy, torch.full((2, 3), 0.2, dtype=torch.float64), torch.Generator())
    model = CorrelatedRegimes()
    simulator = TrajectorySimulator(model, DT, 4 * DT)
    noise = simulator.draw_noise(2, torch.Generator(), device="cpu", dtype=torch.float64)
    initial = torch.full((2, 3), 0.2, dtype=torch.float64)
    wide = RolloutNoise(torch.zeros(2, 4, 3, dtype=torch.float64), noise.action_noise, None, noise.jump_noise)
    with pytest.raises(TensorContractError, match=r"state_noise expected float64\[B, 4, 2\]"):
        simulator.rollout(policy, initial, noise=wide)
    with pytest.raises(ValueError, match=r"needs noise\.jump_noise \[B, T, 1\]"):
        simulator.rollout(policy, initial, noise=RolloutNoise(noise.state_noise, noise.action_noise))


def test_the_residual_of_several_states_is_the_sum_of_one_state_residuals():
    """Divisions: rho V - max_u H separates into the divisions' own residuals. Regimes: the
    regime's own one-state residual less the switching term q (V_other - V)."""
    g = lambda x: 3.0 * torch.tanh(1.5 * x) + 0.2 * x**2  # noqa: E731  (a smooth trial value)
    points = torch.tensor([[0.3, 1.2], [0.9, 0.1], [2.0, 0.7]], dtype=torch.float64)
    divisions = GHMDivisionsModel([GHMParams(), GHMParams(sigma=0.3, mu=0.15)])
    joint = hjb_residual_nd(divisions, lambda x: g(x).sum(1), points)
    one_state = [
        optimal_hjb_residual(GHMModel(p), lambda x: g(x[:, 0]), points[:, j : j + 1])
        for j, p in enumerate(divisions.divisions)
    ]
    torch.testing.assert_close(joint, one_state[0] + one_state[1], rtol=1e-10, atol=1e-10)
    params = RegimeGHMParams(q01=0.7, q10=1.9, mu_1=0.02, sigma_1=0.35)
    value = lambda x: g(x[:, 0]) * (1.0 + 0.5 * x[:, 1])  # noqa: E731
    states = torch.tensor([[0.4, 0.0], [0.4, 1.0], [1.3, 1.0]], dtype=torch.float64)
    switched = states.clone()
    switched[:, 1] = 1.0 - switched[:, 1]
    expected = torch.stack(
        [
            optimal_hjb_residual(
                GHMModel(params.regime(int(s[1]))), lambda x, s=s: g(x[:, 0]) * (1.0 + 0.5 * s[1]), s[None, :1]
            )[0]
            for s in states
        ]
    ) - torch.tensor([0.7, 1.9, 1.9], dtype=torch.float64) * (value(switched) - value(states))
    torch.testing.assert_close(hjb_residual_nd(RegimeGHMModel(params), value, states), expected, rtol=1e-10, atol=1e-10)


# -- training runs ---------------------------------------------------------------------------------

# Two iterations of small networks; issuance off and a high initial dividend rate, so the
# untrained policy's paths are liquidated within a few time units and the final evaluation
# (simulated until the tail is small) stays short.
RUN = {
    **TINY,
    "dt": 0.1,
    "n_iterations": 4,
    "policy_hidden_dims": (8,),
    "baseline_hidden_dims": (8,),
    "final_eval": True,
    "eval_paths": 64,
    "eval_tail_tolerance": 0.5,
    "eval_dt": 0.1,
    "eval_cash": (0.5, 1.0),
    "initial_rate_fraction": 0.9,
    "params": GHMParams(a_E_max=0.0),
}


def test_one_division_trains_bit_for_bit_as_plain_ghm(tmp_path):
    """N = 1: the same seed gives the same weights, metrics rows and final evaluation (the
    simulated and the exact value at each cash level) as --model ghm (whose threshold
    refinement, a one-state step after training, is off here)."""
    runs = {}
    plain = {"refine_thresholds": False}
    for name, extra in (("ghm", plain), ("divisions", {"model": "divisions", "divisions": 1})):
        result = train_ghm(GHMTrainConfig(log_dir=tmp_path / name, **{**RUN, "n_iterations": 2, **extra}), **QUIET)
        runs[name] = (load_checkpoint_file(result.run_dir)["models"], rows_without_perf(result.run_dir / "metrics.csv"))
        runs[name] += (result.final_rows,)
    (ghm_models, ghm_metrics, ghm_rows), (one_models, one_metrics, one_rows) = runs["ghm"], runs["divisions"]
    for network in ghm_models:
        for key, tensor in ghm_models[network].items():
            assert torch.equal(tensor, one_models[network][key]), f"{network}.{key}"
    assert ghm_metrics == one_metrics and len(ghm_metrics) == 2
    assert [row["label"] for row in one_rows] == ["c0.5", "c1"]
    for ghm_row, one_row in zip(ghm_rows, one_rows, strict=True):
        for key in ("value", "stderr", "fd_optimum", "exact_value"):
            assert ghm_row[key] == one_row[key], key


@pytest.mark.parametrize(
    ("fields", "critic"),
    [
        ({"model": "divisions", "divisions": 2}, (8, 3e-3)),
        ({"model": "divisions", "divisions": 16}, (8, 3e-3)),
        ({"model": "divisions", "divisions": 1}, (1, 1e-3)),  # one division is GHM, bit for bit
        ({"model": "ghm"}, (1, 1e-3)),
        ({"model": "regimes"}, (1, 1e-3)),
        ({"model": "divisions", "divisions": 4, "algo": "pathwise"}, (4, 1e-3)),
        ({"model": "divisions", "divisions": 4, "baseline_steps": 2, "lr_baseline": 1e-4}, (2, 1e-4)),
    ],
)
def test_mc_on_several_divisions_trains_its_critic_harder(tmp_path, fields, critic):
    """--algo mc on N >= 2 divisions: 8 critic steps per iteration at 3e-3 by default; every
    other model, one division, the other solvers and flags given keep theirs."""
    config = GHMTrainConfig(log_dir=tmp_path / "run", **fields)
    assert (config.baseline_steps, config.lr_baseline) == critic


@pytest.fixture(scope="module")
def divisions_run(tmp_path_factory):
    """N = 2 divisions, four iterations in one go."""
    root = tmp_path_factory.mktemp("divisions")
    config = GHMTrainConfig(log_dir=root / "full", model="divisions", divisions=2, **RUN)
    return train_ghm(config, **QUIET)


def test_a_divisions_run_resumes_bit_for_bit(divisions_run, tmp_path):
    config = GHMTrainConfig(log_dir=tmp_path / "split", model="divisions", divisions=2, **RUN)
    assert train_ghm(config, stop_after=2, **QUIET).interrupted
    resumed = train_ghm(GHMTrainConfig(resume=tmp_path / "split", **RUN), **QUIET)
    full, split = load_checkpoint_file(divisions_run.run_dir), load_checkpoint_file(resumed.run_dir)
    for network in full["models"]:
        for key, tensor in full["models"][network].items():
            assert torch.equal(tensor, split["models"][network][key]), f"{network}.{key}"
    assert rows_without_perf(divisions_run.run_dir / "metrics.csv") == rows_without_perf(
        resumed.run_dir / "metrics.csv"
    )
    assert resumed.final_rows == divisions_run.final_rows


def test_the_divisions_reference_is_the_sum_of_one_division_fd_optima(divisions_run):
    evaluation = json.loads((divisions_run.run_dir / "evaluation.json").read_text())
    optimum = solve_hjb_1d_extrapolated(GHMModel(RUN["params"]), x_max=6.0, num_nodes=TINY["fd_nodes"])
    labels = [row["label"] for row in evaluation["rows"]]
    assert labels == ["c0.5", "c1", "mix0", "mix1"]
    for row in evaluation["rows"]:
        state = row["initial_state"]
        assert row["fd_optimum"] == pytest.approx(float(optimum.value_at(state).sum()), rel=1e-12)
        assert "exact_pct_of_optimum" not in row  # a joint policy of two divisions has no 1-D FD value
    assert evaluation["rows"][2]["initial_state"] == [0.5, 1.0]
    text = (divisions_run.run_dir / "eval.csv").read_text().splitlines()
    assert "value/max_abs_error_at_eval_points" in text[0]


def test_the_reference_solves_each_distinct_division_once(monkeypatch):
    import pglab.hjb.fd as fd

    solved = []

    def spy(model, **kwargs):
        solved.append((model.params, fd.solve_hjb_1d_extrapolated.__wrapped__(model, **kwargs)))
        return solved[-1][1]

    spy.__wrapped__ = fd.solve_hjb_1d_extrapolated
    monkeypatch.setattr(fd, "solve_hjb_1d_extrapolated", spy)
    reference = GHMDivisionsModel(DIVISIONS).reference(x_max=6.0, num_nodes=100)
    assert [params for params, _ in solved] == [DIVISIONS[0], DIVISIONS[1]] and reference.part_of == (0, 1, 0)
    states = np.array([[0.3, 0.8, 1.1], [1.7, 0.05, 0.4]])
    (_, first), (_, second) = solved
    expected = [first.value_at(s[0]) + second.value_at(s[1]) + first.value_at(s[2]) for s in states]
    np.testing.assert_allclose(reference.value_at(states), expected, rtol=1e-13)


def test_the_divisions_agent_acts_on_every_divisions_cash(divisions_run):
    agent = pglab.load_checkpoint(divisions_run.run_dir, device="cpu")
    cash = torch.tensor([[0.5, 1.0], [1.5, 0.2]])
    rates = agent.act(cash)
    assert rates.shape == (2, 4)
    with torch.no_grad():
        mean = agent.policy.mean_std(cash)[0]
    torch.testing.assert_close(rates, agent.model.control.clip(mean))
    assert agent.value(cash).shape == (2,)
    with pytest.raises(ObservationError):
        agent.act(torch.tensor([[0.5]]))


def test_pglab_evaluate_a_divisions_run_reports_each_point(divisions_run, capsys):
    code = pglab_main(["evaluate", str(divisions_run.run_dir), "--json", "--device", "cpu", "--cash", "0.75"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["label"] for row in report["rows"]] == ["c0.75"]
    assert report["rows"][0]["initial_state"] == [0.75, 0.75]
    assert 0 < report["rows"][0]["fd_optimum"] < 100


def test_a_divisions_sweep_passes_the_number_of_divisions_to_every_run(tmp_path):
    sweep = GHMSweepConfig(model="divisions", divisions=(1, 3), backend="serial", log_dir=tmp_path / "s")
    trials = build_trials(sweep, tmp_path / "s")
    assert [(trial.name, trial.config["divisions"]) for trial in trials] == [
        ("divisions1-mc-s0", 1),
        ("divisions3-mc-s0", 3),
    ]


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--model", "divisions", "--divisions", "0"], "divisions"),
        (["--mu-1", "0.2"], "mu_1"),
        (["--model", "ou", "--q01", "0.2"], "q01"),
        (["--model", "divisions", "--critic-boundary", "hard"], "critic_boundary"),
        (["--model", "regimes", "--q10", "-1"], "q10"),
    ],
)
def test_bad_model_flags_exit_2_naming_the_field(tmp_path, capsys, argv, field):
    tiny = ["--n-iterations", "1", "--n-trajectories", "8", "--T", "0.1", "--fd-nodes", "400", "--no-final-eval"]
    code = pglab_main(["train", "ghm", *argv, *tiny, "--device", "cpu", "--log-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"{field}:" in err[0], err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("model", ["regimes", "ou"])
def test_each_two_state_model_trains_resumes_and_reports_its_fd_reference(tmp_path, model):
    pytest.importorskip(f"pglab.hjb.{'fd_regimes' if model == 'regimes' else 'fd2d'}")
    config = {**RUN, "n_iterations": 2, "model": model, "algo": "pathwise"}
    full = train_ghm(GHMTrainConfig(log_dir=tmp_path / "full", **config), **QUIET)
    stopped = train_ghm(
        GHMTrainConfig(log_dir=tmp_path / "split", **{**config, "final_eval": False}), stop_after=1, **QUIET
    )
    assert stopped.interrupted
    train_ghm(GHMTrainConfig(resume=tmp_path / "split", **{**config, "final_eval": False}), **QUIET)
    for network, tensors in load_checkpoint_file(full.run_dir)["models"].items():
        for key, tensor in tensors.items():
            assert torch.equal(tensor, load_checkpoint_file(tmp_path / "split")["models"][network][key])
    assert rows_without_perf(full.run_dir / "metrics.csv") == rows_without_perf(tmp_path / "split" / "metrics.csv")
    reference = pglab.load_checkpoint(full.run_dir, device="cpu").model.reference(x_max=6.0, num_nodes=TINY["fd_nodes"])
    states = np.array([row["initial_state"] for row in full.final_rows])
    np.testing.assert_allclose([row["fd_optimum"] for row in full.final_rows], reference.value_at(states))
    assert len(full.final_rows) == (4 if model == "regimes" else 6)


def test_the_multi_bench_reads_a_finished_run_and_refuses_an_unfinished_one(divisions_run, tmp_path, capsys):
    folder = tmp_path / "bench"
    run_dir = folder / "divisions-n2-s3"
    shutil.copytree(divisions_run.run_dir, run_dir)
    checks = [(1, 97.0), (2, 98.5), (3, 97.5), (4, 99.0)]  # the first check at 98% counts, not the last
    (run_dir / "eval.jsonl").write_text(
        "".join(
            json.dumps({"iteration": i, "wall_time": 10.0 * i, "eval/pct_optimal_min": p}) + "\n" for i, p in checks
        )
    )
    measured = {"command": "pglab train ghm", "wall_s": 12.0, "cpu_s": 7.5, "load_average_before": 1.0}
    (run_dir / ghm_multi.MEASUREMENT).write_text(json.dumps({**measured, "load_average_after": 2.0}))
    config = ghm_multi.GHMMultiBenchConfig(divisions=(2,), seeds=(3,), log_dir=folder)
    (row,) = ghm_multi.measure(config, folder, echo=print)  # read, not trained: no pglab train runs here
    evaluation = json.loads((run_dir / "evaluation.json").read_text())["rows"]
    worst = min(evaluation, key=lambda entry: entry["pct_of_optimum"])
    assert (row["worst_pct"], row["worst_label"], row["points"]) == (worst["pct_of_optimum"], worst["label"], 4)
    assert row["reaches_target"] == (worst["pct_of_optimum"] >= 98.0)
    assert (row["quick_check_iteration_to_target"], row["quick_check_wall_s_to_target"]) == (2, 20.0)
    steps = [json.loads(line).get("perf/step_s") for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert row["step_s_median"] == float(np.median([step for step in steps if step is not None]))
    assert (row["divisions"], row["seed"], row["cpu_s"], row["iterations"]) == (2, 3, 7.5, 4)
    summary = ghm_multi.summarise([row, {**row, "seed": 4, "worst_pct": 99.5, "reaches_target": True}])
    assert summary["worst_pct"] == row["worst_pct"] and summary["runs"] == 2 and summary["points_per_run"] == 4
    assert summary["by_size"][0]["runs_at_target"] == 1 + row["reaches_target"]
    (run_dir / ghm_multi.MEASUREMENT).unlink()  # a run the bench did not finish: refused, one line, exit 2
    code = ghm_multi.main(["--divisions", "2", "--seeds", "3", "--log-dir", str(folder), "--json"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "divisions-n2-s3: holds a run the bench did not finish" in err[0], err


def test_the_multi_bench_extends_a_record_from_its_runs(divisions_run, tmp_path, monkeypatch, capsys):
    # a run whose training command the record holds is read from it: nothing is trained, and
    # the record is rewritten with the bench's own command (without --extend) and figures
    folder = tmp_path / "bench"
    shutil.copytree(divisions_run.run_dir, folder / "divisions-n2-s3")
    measured = {"command": "pglab train ghm", "wall_s": 12.0, "cpu_s": 7.5, "load_average_before": 1.0}
    (folder / "divisions-n2-s3" / ghm_multi.MEASUREMENT).write_text(json.dumps({**measured, "load_average_after": 2.0}))
    config = ghm_multi.GHMMultiBenchConfig(divisions=(2,), seeds=(3,), train_flags="--eval_dt 0.01")
    (row,) = ghm_multi.measure(config, folder, echo=print)
    row["command"] = "pglab " + " ".join(ghm_multi.training_argv(ghm_multi.run_names(config)[0][1], 200))
    description = {
        "system": "GHM cash management",
        "title": "N = 2 divisions",
        "kind": "result",
        "command": "python bench/ghm_multi.py --seeds 9",
        "reads": "stdout",
        "headline": "worst {summary[worst_pct]:.2f}% of V*",
        "docs": "ghm-models.md",
    }
    record = tmp_path / "divisions.json"
    record.write_text(json.dumps({**description, "figures": {"runs": [row]}}))

    def no_training(*args):
        raise AssertionError("a recorded run was trained again")

    monkeypatch.setattr(ghm_multi, "train", no_training)
    argv = ["--divisions", "2", "--seeds", "3", "--train_flags=--eval_dt 0.01", "--log-dir", str(tmp_path / "new")]
    argv += ["--extend", str(record), "--json"]
    assert ghm_multi.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    stored = json.loads(record.read_text())
    assert out == stored["figures"] and out["runs"] == [row] and out["summary"]["worst_pct"] == row["worst_pct"]
    assert stored["title"] == "N = 2 divisions" and "date" in stored and "machine" in stored
    expected = (
        'python bench/ghm_multi.py --model divisions --divisions 2 --seeds 3 --train_flags="--eval_dt 0.01" --json'
    )
    assert stored["command"] == expected
    # a run the record does not hold would be trained; a file that is not a record: one line, exit 2
    (tmp_path / "other.json").write_text("{}")
    assert ghm_multi.main([*argv[:-3], "--extend", str(tmp_path / "other.json")]) == 2
    assert not (tmp_path / "new" / "divisions-n2-s3").exists()  # read from the record, not trained
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "other.json: not a record of this bench" in err[0], err

"""GHM threshold refinement (pglab.algos.ghm_refine): the search against the FD optimum, the
simulated value against the exact one, the policy that carries the rule, and the trainer."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from test_ghm import TINY

import pglab
from pglab.algos.ghm_refine import (
    BARRIER_SEARCH,
    LineSearch,
    RefinablePolicy,
    RegimeRule,
    SearchSimulation,
    Thresholds,
    fitted_peak,
    line_search,
    refine_thresholds,
    simulated_values,
)
from pglab.algos.ghm_train import GHMTrainConfig, train_ghm
from pglab.configs.ghm import GHMParams
from pglab.envs.ghm import GHMModel
from pglab.errors import ConfigError
from pglab.hjb.fd import FDSolution, evaluate_policy_1d, solve_hjb_1d
from pglab.run.checkpoint import load_checkpoint_file
from pglab.run.seeding import make_generator

QUIET = dict(echo=lambda *a, **k: None)
PATHS, STEPS = 256, 300  # the search's test size
SMALL = dict(TINY, n_trajectories=16, T=0.2, refine_thresholds=True)  # training runs: 64 paths x 40 steps in the search


class TableCritic(torch.nn.Module):
    """A value function given on a uniform grid, linearly interpolated (differentiable):
    the exact V* standing in for the learned critic."""

    def __init__(self, solution: FDSolution):
        super().__init__()
        self.values = torch.as_tensor(solution.value, dtype=torch.float32)
        self.step = solution.step

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        position = (states[:, 0] / self.step).clamp(0.0, len(self.values) - 1.0)
        index = position.detach().floor().clamp(max=len(self.values) - 2).long()
        weight = position - index
        return self.values[index] * (1 - weight) + self.values[index + 1] * weight


# The default calibration's FD thresholds (24,000 intervals on [0, 6]; docs/ghm.md).
FD_BARRIER, FD_ISSUANCE = 0.3415, 0.13875


@pytest.fixture(scope="module")
def default_optimum():
    """The default calibration's model, its FD optimum (step 0.002) and thresholds."""
    model = GHMModel(GHMParams())
    solution = solve_hjb_1d(model, x_max=6.0, num_nodes=3000)
    thresholds = solution.thresholds()
    assert thresholds["dividend_rate"] == pytest.approx(FD_BARRIER, abs=0.01)
    return model, solution, thresholds["dividend_rate"], thresholds["issuance_rate"]


def _simulation(model, solution, *, paths, steps, seed=0):
    return SearchSimulation(
        model=model,
        critic=TableCritic(solution),
        num_paths=paths,
        num_steps=steps,
        dt=0.01,
        seed=seed,
        bridge=True,
        device=torch.device("cpu"),
    )


# -- the search against the FD optimum ----------------------------------------------------------


def test_the_search_from_a_barrier_of_half_finds_the_fd_thresholds(default_optimum):
    """From the barrier 0.5 (FD 0.3415) and an issuance point 0.05 off, the search lands within
    0.03 of the FD barrier and 0.02 of the issuance point (with V* at the horizon; 256 paths)."""
    model, solution, _, _ = default_optimum
    simulation = _simulation(model, solution, paths=PATHS, steps=STEPS)
    refined = refine_thresholds(simulation, Thresholds(0.5, FD_ISSUANCE + 0.05), upper=2.0)
    assert refined.barrier is not None and refined.issuance is not None
    assert abs(refined.barrier - FD_BARRIER) < 0.03, refined
    assert abs(refined.issuance - FD_ISSUANCE) < 0.02, refined


def test_simulated_values_match_the_exact_value_of_the_rule(default_optimum):
    """The search's estimate of a rule's value (with the rule's own exact value at the
    horizon), averaged over its initial cash, against the FD value of the same rule: the
    payout (dividends minus (1 + lambda) x issuance), the discount, the absorption and the
    control variate (mean zero) all enter it. With V* at the horizon the optimal rule scores
    above rules off in either threshold."""
    model, solution, barrier, issuance = default_optimum
    rules = [Thresholds(barrier, issuance), Thresholds(barrier + 0.15, issuance), Thresholds(barrier, issuance + 0.08)]
    cash = model.initial_states(2000, make_generator(0, torch.device("cpu")))[:, 0].double().numpy()  # the paths'
    for rule in rules:
        exact = evaluate_policy_1d(
            model,
            lambda states, rule=rule: np.stack([states >= rule.barrier, states < rule.issuance], axis=1) * 1.0,
            num_nodes=1200,
        )
        value = simulated_values(_simulation(model, exact, paths=2000, steps=300), [rule])[0]
        assert value == pytest.approx(float(exact.value_at(cash).mean()), rel=0.003), rule
    values = simulated_values(_simulation(model, solution, paths=2000, steps=300), rules)
    assert values[0] > values[1] and values[0] > values[2]


def test_simulated_values_share_their_noise_across_candidates(default_optimum):
    """Common random numbers: a candidate's value does not depend on the others beside it."""
    model, solution, barrier, issuance = default_optimum
    simulation = _simulation(model, solution, paths=64, steps=50)
    alone = simulated_values(simulation, [Thresholds(0.4, issuance)])
    together = simulated_values(simulation, [Thresholds(0.3, issuance), Thresholds(0.4, issuance)])
    assert alone[0] == pytest.approx(together[1], rel=1e-6)


# -- the line search ------------------------------------------------------------------------------


def test_fitted_peak_is_the_maximum_of_the_fitted_polynomial():
    points = np.linspace(0.0, 0.3, 16)
    assert fitted_peak(points, -((points - 0.137) ** 2), 2) == pytest.approx(0.137, abs=1e-4)
    cubic = -((points - 0.2) ** 2) * (1 + points)  # asymmetric: maximum at 0.2
    assert fitted_peak(points, cubic, 3) == pytest.approx(0.2, abs=1e-4)
    assert fitted_peak(points[:1], cubic[:1], 3) == 0.0  # one point: itself


def test_line_search_extends_its_window_to_a_peak_outside_it_and_keeps_to_its_bounds():
    calls = []

    def evaluate(points):
        calls.append(len(points))
        return -((np.asarray(points) - 0.83) ** 2)

    search = LineSearch(step=0.02, below=0.1, above=0.1, half_width=0.1, degree=2)
    assert line_search(evaluate, 0.5, search, 0.0, 2.0) == pytest.approx(0.83, abs=1e-4)
    assert len(calls) > 2  # the first window [0.4, 0.6] did not hold the peak
    assert line_search(evaluate, 0.5, search, 0.0, 0.7) == pytest.approx(0.7, abs=1e-9)  # bounded above
    assert line_search(evaluate, 0.5, BARRIER_SEARCH, 0.9, 0.9) == pytest.approx(0.9)  # a single candidate


# -- the policy that carries the rule --------------------------------------------------------------


def _policy():
    torch.manual_seed(0)
    return RefinablePolicy(1, 2, (8,), action_high=(1.0, 1.0), mean_shift=(0.5, 0.5), log_std_init=-1.0)


def test_a_refined_policy_applies_the_rule_and_carries_it_in_its_state_dict():
    policy = _policy()
    cash = torch.tensor([[0.0], [0.1], [0.2], [0.39], [0.4], [1.5]])
    network = policy.act(cash, deterministic=True)
    policy.thresholds = Thresholds(barrier=0.4, issuance=0.15)
    rates = policy.act(cash, deterministic=True)
    assert rates.tolist() == [[0.0, 1.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0]]
    assert torch.equal(policy.network_mean_std(cash)[0], torch.nn.functional.softplus(policy.mean_net(cash)) - 0.5)
    copy = _policy()
    copy.load_state_dict(policy.state_dict())
    assert copy.thresholds == Thresholds(0.4, 0.15) and torch.equal(copy.act(cash, deterministic=True), rates)
    policy.thresholds = None
    assert torch.equal(policy.act(cash, deterministic=True), network)  # unrefined: the network itself
    policy.thresholds = Thresholds(barrier=None, issuance=None)  # a rule that never acts
    assert policy.thresholds == Thresholds(None, None) and not policy.act(cash, deterministic=True).any()


# -- the trainer ------------------------------------------------------------------------------------


def test_refine_thresholds_defaults_to_mc_on_ghm_and_is_refused_where_it_cannot_apply():
    assert GHMTrainConfig(algo="mc").refine_thresholds is True
    assert GHMTrainConfig(algo="pathwise").refine_thresholds is False
    assert GHMTrainConfig(algo="mc", model="credit-line").refine_thresholds is False
    assert GHMTrainConfig(algo="mc", model="regimes").refine_thresholds is True
    assert GHMTrainConfig(algo="mc", model="ou").refine_thresholds is True
    assert GHMTrainConfig(algo="mc", no_baseline=True).refine_thresholds is False
    for bad in (dict(model="credit-line"), dict(model="divisions"), dict(no_baseline=True)):
        with pytest.raises(ConfigError, match="refine_thresholds"):
            GHMTrainConfig(algo="mc", refine_thresholds=True, **bad)


def test_a_stopped_and_resumed_run_ends_with_the_same_refined_rule(tmp_path):
    """The rule is found inside the last iteration, so its checkpoint holds it; a run stopped
    before it and resumed finds the same one; the agent and the final table use it."""
    final = dict(final_eval=True, eval_paths=20, eval_cash=(0.5,), eval_tail_tolerance=0.5, eval_dt=0.01)
    train_ghm(GHMTrainConfig(n_iterations=2, log_dir=tmp_path / "straight", **{**SMALL, **final}), **QUIET)
    train_ghm(GHMTrainConfig(n_iterations=2, log_dir=tmp_path / "run", **SMALL), stop_after=1, **QUIET)
    train_ghm(GHMTrainConfig(n_iterations=2, resume=tmp_path / "run", **SMALL), **QUIET)
    stored = [
        load_checkpoint_file(tmp_path / name / "checkpoints" / "checkpoint_latest.pt")["models"]["policy"]
        for name in ("straight", "run")
    ]
    assert torch.equal(stored[0]["threshold_rule"], stored[1]["threshold_rule"]) and stored[0]["threshold_rule"][0] == 1
    agent = pglab.load_checkpoint(tmp_path / "run", device="cpu")
    rule = agent.policy.thresholds
    assert isinstance(agent.policy, RefinablePolicy) and rule is not None and rule.barrier is not None
    assert agent.act(torch.tensor([[rule.barrier + 0.01]]))[0, 0] == 1.0
    evaluation = json.loads((tmp_path / "straight" / "evaluation.json").read_text())
    assert "network_thresholds" in evaluation


def test_the_reported_thresholds_read_the_rule_at_the_fd_grid_spacing():
    """The half-max rule reads the learned policy on the FD grid's spacing, as it reads V*'s
    controls: a refined rule is reported to within one FD step, not rounded to the policy
    figure's 0.01."""
    from types import SimpleNamespace

    from pglab.algos.ghm_train import build_model, final_thresholds, model_reference

    config = GHMTrainConfig(fd_nodes=6000, device="cpu")  # an FD step of 0.001
    model = build_model(config)
    policy = _policy()
    policy.thresholds = Thresholds(barrier=0.4037, issuance=0.1412)
    training = SimpleNamespace(
        model=model, reference=model_reference(config, model), policy=policy, baseline=None, device=torch.device("cpu")
    )
    learned, fd = final_thresholds(training)
    step = config.fd_x_max / config.fd_nodes
    assert 0.4037 <= learned["dividend_rate"] < 0.4037 + step + 1e-6
    assert 0.1412 - step - 1e-6 < learned["issuance_rate"] < 0.1412
    assert abs(fd["dividend_rate"] - 0.342) < 0.01  # the FD barrier, read by the same rule


def test_a_checkpoint_without_the_field_loads_unrefined(tmp_path):
    """A run made before refine_thresholds existed was trained without it: its checkpoint
    loads as the plain Gaussian policy (the trainer's stored default)."""
    plain = {**SMALL, "refine_thresholds": False}
    train_ghm(GHMTrainConfig(n_iterations=1, log_dir=tmp_path / "run", **plain), **QUIET)
    path = tmp_path / "run" / "checkpoints" / "checkpoint_latest.pt"
    checkpoint = load_checkpoint_file(path)
    del checkpoint["config"]["refine_thresholds"]
    from pglab.algos.ghm_agent import agent_from_checkpoint

    agent = agent_from_checkpoint(checkpoint)
    assert not isinstance(agent.policy, RefinablePolicy) and not math.isnan(float(agent.act(torch.ones(1, 1))[0, 0]))


# -- a rule per regime (--model regimes) -------------------------------------------------------------


class RegimeTableCritic(torch.nn.Module):
    """The coupled FD optimum as the critic of (cash, regime) states: each regime's :class:`TableCritic`."""

    def __init__(self, solution):
        super().__init__()
        self.tables = torch.nn.ModuleList(TableCritic(regime) for regime in solution.regimes)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        values = torch.stack([table(states) for table in self.tables], dim=1)
        return values.gather(1, states[:, 1:].long())[:, 0]


@pytest.fixture(scope="module")
def regime_optimum():
    from pglab.configs.ghm_multi import RegimeGHMParams
    from pglab.envs.ghm_regimes import RegimeGHMModel
    from pglab.hjb.fd_regimes import solve_regimes

    params = RegimeGHMParams()
    return RegimeGHMModel(params), solve_regimes(params, x_max=6.0, num_nodes=3000)


def test_the_search_finds_each_regimes_fd_thresholds(regime_optimum):
    """From each regime's FD barrier 0.15 too high and its issuance point 0.04 too high, the
    search lands within 0.03 of every FD barrier and 0.02 of every issuance point (the coupled
    FD optimum at the horizon; the regimes switch along the paths)."""
    model, solution = regime_optimum
    fd = solution.thresholds()
    assert fd[0]["dividend_rate"] != pytest.approx(fd[1]["dividend_rate"], abs=0.05)  # the regimes differ
    start = RegimeRule(
        tuple(Thresholds(t["dividend_rate"] + 0.15, (t["issuance_rate"] or 0.0) + 0.04) for t in fd), coordinate=1
    )
    simulation = SearchSimulation(
        model=model,
        critic=RegimeTableCritic(solution),
        num_paths=PATHS,
        num_steps=STEPS,
        dt=0.01,
        seed=0,
        bridge=True,
        device=torch.device("cpu"),
    )
    refined = refine_thresholds(simulation, start, upper=2.0)
    assert isinstance(refined, RegimeRule) and refined.coordinate == 1
    for rule, optimum in zip(refined.rules, fd, strict=True):
        assert rule.barrier is not None and abs(rule.barrier - optimum["dividend_rate"]) < 0.03, (rule, optimum)
        assert rule.issuance is not None and abs(rule.issuance - (optimum["issuance_rate"] or 0.0)) < 0.02, rule


def test_a_regime_rule_acts_in_each_regime_and_survives_the_state_dict():
    rule = RegimeRule((Thresholds(0.3, 0.1), Thresholds(0.6, None)), coordinate=1)
    policy = RefinablePolicy(2, 2, (8,), action_high=(1.0, 1.0), mean_shift=(0.1, 0.1), regimes=2)
    policy.thresholds = rule
    states = torch.tensor([[0.05, 0.0], [0.05, 1.0], [0.4, 0.0], [0.4, 1.0], [0.7, 1.0]])
    expected = torch.tensor([[0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    assert torch.equal(policy.act(states, deterministic=True), expected)
    copy = RefinablePolicy(2, 2, (8,), action_high=(1.0, 1.0), mean_shift=(0.1, 0.1), regimes=2)
    copy.load_state_dict(policy.state_dict())
    assert copy.thresholds == rule
    with pytest.raises(ValueError, match="one rule for each of 2 regime"):
        policy.thresholds = Thresholds(0.3, 0.1)


def test_a_regimes_run_refines_a_rule_per_regime(tmp_path):
    """--model regimes: the last iteration's checkpoint holds one rule per regime, and the
    agent acts by it in each regime (a resume's rule: the one-state test above)."""
    train_ghm(GHMTrainConfig(log_dir=tmp_path / "run", **dict(SMALL, model="regimes", n_iterations=1)), **QUIET)
    stored = load_checkpoint_file(tmp_path / "run" / "checkpoints" / "checkpoint_latest.pt")["models"]["policy"]
    assert stored["threshold_rule"].shape == (2, 3) and bool((stored["threshold_rule"][:, 0] == 1).all())
    agent = pglab.load_checkpoint(tmp_path / "run", device="cpu")
    rule = agent.policy.thresholds
    assert isinstance(rule, RegimeRule)
    for regime, own in enumerate(rule.rules):
        assert own.barrier is not None
        assert agent.act(torch.tensor([[own.barrier + 0.01, float(regime)]]))[0, 0] == 1.0
        assert agent.act(torch.tensor([[own.barrier - 0.01, float(regime)]]))[0, 0] == 0.0


def test_an_ou_run_refines_one_rule_in_cash_for_every_profitability(tmp_path):
    """--model ou: one rule on the cash, applied whatever the profitability."""
    train_ghm(GHMTrainConfig(log_dir=tmp_path / "run", **dict(SMALL, model="ou", n_iterations=1)), **QUIET)
    agent = pglab.load_checkpoint(tmp_path / "run", device="cpu")
    rule = agent.policy.thresholds
    assert isinstance(rule, Thresholds) and rule.barrier is not None
    for mu in (-0.1, 0.1, 0.3):
        assert agent.act(torch.tensor([[rule.barrier + 0.01, mu]]))[0, 0] == 1.0
        assert agent.act(torch.tensor([[rule.barrier - 0.01, mu]]))[0, 0] == 0.0

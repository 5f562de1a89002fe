"""The martingale control variate of the Monte Carlo policy gradient (``--control_variate``).

Its two promises, checked on simulated GHM batches by the score-function gradient itself
(per path, ``g = sum_t score_t * A_t``, ``A_t = G_t - V(x_t)``, with ``score_t = (a_t - mu(x_t)) / sigma^2``, the
gradient of ``log pi`` with respect to the mean):

* **unbiased whatever the critic**: subtracting the noise terms (and adding back each
  decision's own exploration term) changes ``g`` by a quantity of mean zero, with a critic
  that is far from the value (a random network);
* **lower variance with a good critic**: with the FD value ``V*`` as the critic, the
  variance of ``g`` falls several-fold.

The exact per-step formula is pinned against slow loops in
``tests/test_update_rules_ghm.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pglab.algos.mc_pg import MonteCarloPolicyGradient
from pglab.envs.ghm import GHMModel, GHMParams
from pglab.envs.simulator import TrajectorySimulator
from pglab.estimators import reward_to_go
from pglab.hjb.fd import solve_hjb_1d
from pglab.nets import GaussianPolicy, ValueNetwork

PARAMS = GHMParams(sigma=0.3, initial_cash_low=0.05, initial_cash_high=1.0)


class _InterpolatedValue(torch.nn.Module):
    """A critic that is a table of values, linearly interpolated (differentiable in x)."""

    def __init__(self, grid: np.ndarray, values: np.ndarray):
        super().__init__()
        self.grid = torch.as_tensor(grid, dtype=torch.float32)
        self.values = torch.as_tensor(values, dtype=torch.float32)
        self.unused = torch.nn.Parameter(torch.zeros(()))  # the solver builds an optimiser for it

    def forward(self, states):
        x = states[:, 0].clamp(float(self.grid[0]), float(self.grid[-1]) - 1e-6)
        step = float(self.grid[1] - self.grid[0])
        index = (x / step).floor().long()
        weight = x / step - index
        return self.values[index] * (1 - weight) + self.values[index + 1] * weight


class _BarrierPolicy(torch.nn.Module):
    """The FD optimum's shape, kept inside the box: dividends at 0.95 above the barrier
    (0.05 below), issuance at 0.95 below the issuance point (0.05 above); std 0.1."""

    def __init__(self, barrier: float, issuance_point: float):
        super().__init__()
        self.barrier, self.issuance_point = barrier, issuance_point
        self.unused = torch.nn.Parameter(torch.zeros(()))

    def mean_std(self, states):
        cash = states[:, 0]
        mean = torch.stack(
            [torch.where(cash > self.barrier, 0.95, 0.05), torch.where(cash < self.issuance_point, 0.95, 0.05)], 1
        )
        return mean, torch.full_like(mean, 0.1)


def _policy():
    torch.manual_seed(3)
    # the mean shift puts the mean outside the control box at some cash levels, so both
    # branches of the exploration term (inside / clipped) are exercised
    return GaussianPolicy(1, 2, (16,), log_std_init=-1.0, mean_init=(0.3, 0.2), mean_shift=(0.25, 0.25))


def _gradient_samples(critic, policy=None, *, num_paths=20_000, dt=0.05, action_repeat=2, seed=0):
    """Per-path score-function gradients with respect to the mean of each control, without
    and with the control variate: ``(g_plain [B, 2], g_cv [B, 2])``."""
    model = GHMModel(PARAMS)
    simulator = TrajectorySimulator(model, dt=dt, horizon=1.5, action_repeat=action_repeat)
    policy = policy or _policy()
    solver = MonteCarloPolicyGradient(policy, simulator, critic, control_variate="martingale")
    generator = torch.Generator().manual_seed(seed)
    initial = model.initial_states(num_paths, generator)
    with torch.no_grad():
        paths = simulator.rollout(policy, initial, generator)
        bootstrap = critic(paths.final_states) * paths.alive_at_end.float()
        plain = reward_to_go(paths.rewards, paths.dones, paths.discount, bootstrap)
        terms, own = solver.control_variate_terms(paths, policy)
        adjusted = reward_to_go(paths.rewards - terms, paths.dones, paths.discount, bootstrap) + own
        # advantages A_t = G_t - V(x_t), as the solver scores them
        values = critic(paths.states[:, :-1].reshape(-1, 1)).view(num_paths, -1)
        plain, adjusted = plain - values, adjusted - values
        mean, std = policy.mean_std(paths.states[:, :-1].reshape(-1, 1))
        score = ((paths.actions.reshape(-1, 2) - mean) / std**2).view(num_paths, -1, 2)
        decision = paths.decision_masks.unsqueeze(2)
        g_plain = (score * decision * plain.unsqueeze(2)).sum(1)
        g_cv = (score * decision * adjusted.unsqueeze(2)).sum(1)
    # the batch must hold both liquidations and survivors, clipped and unclipped means
    assert 0.02 < paths.dones[:, -1].float().mean() < 0.98
    return g_plain, g_cv, paths


def test_control_variate_leaves_the_policy_gradient_unbiased_with_a_poor_critic():
    torch.manual_seed(11)
    critic = ValueNetwork(1, (8,))
    with torch.no_grad():
        for p in critic.parameters():
            p.mul_(4.0)  # a wiggly critic: V'' is large, V' far from the value's slope
    g_plain, g_cv, paths = _gradient_samples(critic)
    difference = g_plain - g_cv  # [B, 2]
    standard_error = difference.std(0) / difference.shape[0] ** 0.5
    # mean zero within 4 standard errors for both controls ...
    assert (difference.mean(0).abs() < 4 * standard_error).all(), (difference.mean(0), standard_error)
    # ... and not because the difference is trivially 0 or the gradient itself vanishes
    assert (difference.std(0) > 0.05 * g_plain.std(0)).all()
    assert (g_plain.mean(0).abs() > 4 * g_plain.std(0) / g_plain.shape[0] ** 0.5).any()


def test_control_variate_cuts_the_gradient_variance_with_the_fd_value_as_critic():
    # near the optimum (the FD policy's shape, the FD value as critic) the Brownian noise is
    # most of the return's variance, and the control variate removes most of it
    solution = solve_hjb_1d(GHMModel(PARAMS), x_max=4.0, num_nodes=4000)
    critic = _InterpolatedValue(solution.grid, solution.value)
    policy = _BarrierPolicy(*_fd_thresholds(solution))
    g_plain, g_cv, _ = _gradient_samples(critic, policy, dt=0.01, action_repeat=5)
    ratio = g_cv.var(0) / g_plain.var(0)
    assert (ratio < 0.3).all(), ratio
    # the same gradient: the means agree within 4 standard errors of their difference
    difference = g_plain - g_cv
    assert (difference.mean(0).abs() < 4 * difference.std(0) / difference.shape[0] ** 0.5).all()


def _fd_thresholds(solution) -> tuple[float, float]:
    """(dividend barrier, issuance point) of an FD solution: where each optimal rate switches."""
    grid, controls = solution.grid, solution.controls
    barrier = grid[np.argmax(controls[:, 0] > 0.5)]
    issuance_point = grid[np.argmax(controls[:, 1] < 0.5)]
    return float(barrier), float(issuance_point)


def test_control_variate_needs_a_baseline_and_per_step_returns():
    model = GHMModel(PARAMS)
    simulator = TrajectorySimulator(model, dt=0.05, horizon=0.5)
    with pytest.raises(ValueError, match="needs a baseline"):
        MonteCarloPolicyGradient(_policy(), simulator, None, control_variate="martingale")
    with pytest.raises(ValueError, match="reward_to_go"):
        MonteCarloPolicyGradient(
            _policy(), simulator, ValueNetwork(1, (4,)), advantage="trajectory", control_variate="martingale"
        )
    with pytest.raises(ValueError, match="control_variate"):
        MonteCarloPolicyGradient(_policy(), simulator, ValueNetwork(1, (4,)), control_variate="antithetic")


@pytest.mark.parametrize(
    "flags, message",
    [
        (dict(algo="pathwise", control_variate="martingale"), "--algo mc"),
        (dict(no_baseline=True, control_variate="martingale"), "no-baseline"),
        (dict(advantage="trajectory", control_variate="martingale"), "reward_to_go"),
    ],
)
def test_control_variate_config_errors_name_the_field(flags, message):
    from pglab.configs.ghm import GHMTrainConfig
    from pglab.errors import ConfigError

    with pytest.raises(ConfigError, match="control_variate") as error:
        GHMTrainConfig(**flags)
    assert message in str(error.value)


def test_control_variate_defaults_follow_the_solver():
    from pglab.configs.ghm import GHMTrainConfig

    # off where it cannot apply (no critic slope, per-path returns, pathwise gradients)
    assert GHMTrainConfig(no_baseline=True).control_variate == "none"
    assert GHMTrainConfig(advantage="trajectory").control_variate == "none"
    assert GHMTrainConfig(algo="pathwise").control_variate == "none"
    assert GHMTrainConfig(control_variate="martingale").control_variate == "martingale"

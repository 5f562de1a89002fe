"""The batched held-action rollout against a slow step-by-step reference.

``TrajectorySimulator.rollout`` advances all steps of a held action in one call
(``GHMModel.held_control_steps``: the affine Euler recursion as one cumulative sum) and
applies absorption once to the whole path. The reference below is the textbook loop: one
Euler step at a time, absorption checked after each step, the state frozen afterwards.
"""

from __future__ import annotations

import math

import pytest
import torch

from pglab.envs.ghm import GHMModel, GHMParams
from pglab.envs.ghm_credit_line import CreditLineParams, GHMCreditLineModel
from pglab.envs.simulator import RolloutNoise, TabulatedPolicy, TrajectorySimulator
from pglab.nets import GaussianPolicy


class _LinearPolicy:
    """mean = a + b * cash (so the action depends on the state), fixed std."""

    def __init__(self, intercept, slope, std):
        self.intercept, self.slope, self.std = torch.tensor(intercept), torch.tensor(slope), torch.tensor(std)

    def mean_std(self, states):
        mean = self.intercept.to(states) + self.slope.to(states) * states
        return mean, self.std.to(states).expand_as(mean)


def _step_by_step(model: GHMModel, policy, initial, noise: RolloutNoise, dt: float, action_repeat: int):
    """Reference: states [B, T+1], rewards [B, T], masks [B, T] from a loop over steps."""
    p = model.params
    num_paths, num_steps = noise.state_noise.shape[:2]
    cash = initial[:, 0].clone()
    alive = cash > 0
    states, rewards, masks = [cash.clone()], [], []
    for t in range(num_steps):
        if t % action_repeat == 0:
            mean, std = policy.mean_std(cash.unsqueeze(1))
            controls = (mean + std * noise.action_noise[:, t]).clamp(min=0.0)
            controls = torch.minimum(controls, torch.tensor([p.a_L_max, p.a_E_max], dtype=cash.dtype))
        a_L, a_E = controls[:, 0], controls[:, 1]
        masks.append(alive.to(cash.dtype))
        rewards.append((a_L - (1 + p.lambda_dilution) * a_E) * dt * alive)
        step = cash + (p.mu + p.r * cash - a_L + a_E) * dt + p.sigma * math.sqrt(dt) * noise.state_noise[:, t, 0]
        cash = torch.where(alive, step, cash)
        alive = alive & (cash > 0)
        states.append(cash.clone())
    return torch.stack(states, 1), torch.stack(rewards, 1), torch.stack(masks, 1)


@pytest.mark.parametrize("action_repeat", [1, 5, 7])  # 7 does not divide 60: a short last interval
def test_batched_held_rollout_equals_the_step_by_step_loop_path_by_path(action_repeat):
    model = GHMModel(GHMParams(sigma=0.3))
    simulator = TrajectorySimulator(model, dt=0.01, horizon=0.6, action_repeat=action_repeat)
    generator = torch.Generator().manual_seed(7)
    initial = torch.cat([torch.tensor([[0.0], [0.02], [0.05]]), model.initial_states(397, generator)])
    initial = initial.double()
    noise = simulator.draw_noise(400, generator, device="cpu", dtype=torch.float64)
    policy = _LinearPolicy([0.8, 0.1], [0.5, -0.3], [0.4, 0.3])
    paths = simulator.rollout(policy, initial, noise=noise)
    states, rewards, masks = _step_by_step(model, policy, initial, noise, 0.01, action_repeat)
    # float64: the cumulative-sum form of the recursion agrees with it to rounding
    torch.testing.assert_close(paths.states[:, :, 0], states, rtol=0, atol=1e-12)
    torch.testing.assert_close(paths.rewards, rewards, rtol=0, atol=1e-14)
    assert torch.equal(paths.masks, masks)
    assert torch.equal(paths.dones, torch.cat([masks[:, 1:], (states[:, -1:] > 0) & (masks[:, -1:] > 0)], 1) == 0)
    absorbed = paths.dones[:, -1]
    assert 20 < int(absorbed.sum()) < 380  # both absorbed and surviving paths are compared
    assert bool(paths.dones[0, 0]) and paths.masks[0].sum() == 0  # starts at 0: absorbed at once, earns nothing


def test_held_steps_are_the_euler_recursion_exactly_without_noise():
    """sigma = 0: the closed form c_j = g^j (c_0 + sum m_i g^-(i+1)) is the recursion
    c_{j+1} = c_j + (mu + r c_j - a_L + a_E) dt (float64, to rounding)."""
    p = GHMParams(sigma=0.0, r=0.05)
    model = GHMModel(p)
    cash0 = torch.tensor([[0.3], [1.7]], dtype=torch.float64)
    controls = torch.tensor([[0.6, 0.0], [0.0, 0.9]], dtype=torch.float64)
    path, rewards = model.held_control_steps(cash0, controls, torch.zeros(2, 40, 1, dtype=torch.float64), 0.05)
    cash = cash0[:, 0].clone()
    for j in range(40):
        cash = cash + (p.mu + p.r * cash - controls[:, 0] + controls[:, 1]) * 0.05
        torch.testing.assert_close(path[:, j, 0], cash, rtol=1e-13, atol=0)
    torch.testing.assert_close(rewards, ((controls[:, 0] - 1.1 * controls[:, 1]) * 0.05).unsqueeze(1).expand(-1, 40))


def test_held_rollout_statistics_match_independent_step_by_step_paths():
    """Independent noise: end cash mean/variance, survival and the discounted payout of the
    batched rollout agree with the step-by-step loop within 4.5 standard errors."""
    model = GHMModel(GHMParams())
    simulator = TrajectorySimulator(model, dt=0.01, horizon=1.0, action_repeat=5)
    policy = _LinearPolicy([0.2, 0.2], [0.3, -0.4], [0.3, 0.3])
    num_paths = 20_000
    initial = torch.full((num_paths, 1), 0.3)
    first = simulator.rollout(policy, initial, torch.Generator().manual_seed(1))
    states, rewards, masks = _step_by_step(
        model, policy, initial, simulator.draw_noise(num_paths, torch.Generator().manual_seed(2), device="cpu"), 0.01, 5
    )
    gamma = simulator.discount
    discounts = gamma ** torch.arange(simulator.num_steps, dtype=torch.float32)
    batched = {
        "end cash": first.states[:, -1, 0],
        "alive": (~first.dones[:, -1]).float(),
        "payout": (first.rewards * discounts).sum(1),
    }
    reference = {
        "end cash": states[:, -1],
        "alive": ((states[:, -1] > 0) & (masks[:, -1] > 0)).float(),
        "payout": (rewards * discounts).sum(1),
    }
    for name in batched:
        a, b = batched[name].double(), reference[name].double()
        se = math.sqrt(a.var() / num_paths + b.var() / num_paths)
        assert abs(a.mean() - b.mean()) < 4.5 * se, name
    var_a, var_b = batched["end cash"].double().var(), reference["end cash"].double().var()
    assert abs(var_a / var_b - 1) < 0.06  # the variance ratio's SE is ~sqrt(2 * 2 / n) ~ 0.014 plus kurtosis
    assert 0.05 < batched["alive"].mean() < 0.95


def test_a_subclass_with_another_drift_is_stepped_one_step_at_a_time():
    """The credit-line model's drift is not GHM's affine one (drawn credit costs r + spread),
    so it must not get the GHM closed form."""
    model = GHMCreditLineModel(CreditLineParams(credit_spread=0.5))
    states = torch.tensor([[-0.1], [0.2]], dtype=torch.float64)
    controls = torch.tensor([[0.3, 0.1], [0.0, 0.0]], dtype=torch.float64)
    noise = torch.randn(2, 6, 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    path, _ = model.held_control_steps(states, controls, noise, 0.01)
    state = states
    for j in range(6):
        state = state + model.drift(state, controls) * 0.01 + model.diffusion(state, controls) * 0.1 * noise[:, j]
        torch.testing.assert_close(path[:, j], state, rtol=0, atol=1e-14)


def test_tabulated_policy_is_within_its_interpolation_bound_and_exact_outside_the_table():
    torch.manual_seed(0)
    policy = GaussianPolicy(1, 2, (16, 16), action_high=(1.0, 1.0))
    table = TabulatedPolicy(policy, 0.0, 4.0, 801)
    states = torch.cat([torch.rand(500, 1) * 4.0, torch.tensor([[-0.5], [4.5], [9.0]])])
    mean, std = table.mean_std(states)
    exact_mean, exact_std = policy.mean_std(states)
    # linear interpolation: |error| <= h^2 / 8 max |f''|, and max_error() measures it at the midpoints
    assert (mean - exact_mean).abs().max() <= table.max_error() + 1e-7
    assert table.max_error() < 1e-4
    torch.testing.assert_close(std, exact_std)
    assert torch.equal(mean[-3:], exact_mean[-3:])  # outside [low, high]: the network itself
    # the table's nodes are the network's values
    nodes = torch.tensor([[0.0], [2.0], [4.0]])
    torch.testing.assert_close(table.mean_std(nodes)[0], policy.mean_std(nodes)[0], rtol=0, atol=1e-6)
    # the mean-only lookup of the evaluation: mean_std's mean bit for bit, inside the table
    # and outside it (the network), and nothing for no states
    assert torch.equal(table.mean(states), mean)
    inside = states[:500]
    assert torch.equal(table.mean(inside), table.mean_std(inside)[0])
    assert table.mean(states[:0]).shape == (0, mean.shape[1])
    above_only = torch.tensor([[1.0], [9.0]])  # only beyond the top: still the network there
    assert torch.equal(table.mean(above_only)[1], policy.mean_std(above_only)[0][1])


def test_evaluation_with_the_policy_table_matches_the_network_path_for_path():
    """Same seed, same paths: reading the deterministic policy from its table changes the
    estimated value by no more than the table's (reported) interpolation error allows."""
    from pglab.algos.ghm_eval import simulate_policy_value

    torch.manual_seed(3)
    model = GHMModel(GHMParams())
    policy = GaussianPolicy(1, 2, (16, 16), action_high=(1.0, 1.0), mean_shift=[0.5, 0.5])
    policy_fn = lambda states: policy.mean_std(states)[0]  # noqa: E731
    common = dict(num_paths=200, dt=0.01, tail_tolerance=0.5, max_time=3.0, chunk_steps=50)
    exact = simulate_policy_value(model, policy_fn, [0.3, 1.0], generator=torch.Generator().manual_seed(5), **common)
    tabulated = simulate_policy_value(
        model, policy_fn, [0.3, 1.0], generator=torch.Generator().manual_seed(5), table_points=2001, **common
    )
    assert exact.table_error is None and 0 < tabulated.table_error < 1e-5
    assert tabulated.simulated_time == exact.simulated_time
    for a, b in zip(tabulated.mean, exact.mean, strict=False):
        assert a == pytest.approx(b, abs=1e-5)
    assert min(abs(m) for m in exact.mean) > 0.05  # the policy pays or issues: the comparison is not 0 == 0

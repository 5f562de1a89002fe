"""Estimators against slow, obviously-correct reference loops and closed forms."""

import math

import pytest
import torch

from pglab.errors import TensorContractError
from pglab.estimators import (
    compute_gae,
    discount_powers,
    discounted_return,
    normalize_advantages,
    reward_to_go,
    td0_targets,
)


def slow_reward_to_go(rewards, dones, gamma, bootstrap):
    B, T = rewards.shape
    out = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        running = 0.0 if bootstrap is None else float(bootstrap[b])
        for t in reversed(range(T)):
            if dones[b, t]:
                running = 0.0
            running = float(rewards[b, t]) + gamma * running
            out[b, t] = running
    return out


def slow_gae(rewards, values, dones, truncs, next_values, gamma, lam):
    B, T = rewards.shape
    adv = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            nonterminal = 0.0 if dones[b, t] else 1.0
            delta = float(rewards[b, t]) + gamma * nonterminal * float(next_values[b, t]) - float(values[b, t])
            carry = 0.0 if (dones[b, t] or truncs[b, t]) else 1.0
            running = delta + gamma * lam * carry * running
            adv[b, t] = running
    return adv


def ghm_like_batch(B=6, T=12, seed=0):
    """Paths absorbed at random steps (d=1 from absorption on, rewards 0 after)."""
    g = torch.Generator().manual_seed(seed)
    rewards = torch.rand(B, T, generator=g, dtype=torch.float64)
    dones = torch.zeros(B, T, dtype=torch.bool)
    for b in range(B):
        if b % 2 == 0:  # absorbed at step k
            k = int(torch.randint(0, T, (1,), generator=g))
            dones[b, k:] = True
            rewards[b, k + 1 :] = 0.0
    bootstrap = torch.rand(B, generator=g, dtype=torch.float64) * 3
    return rewards, dones, bootstrap


@pytest.mark.parametrize("gamma", [math.exp(-0.1 * 0.01), 0.9, 1.0, 0.0])
def test_reward_to_go_matches_reference_with_absorbed_and_truncated_paths(gamma):
    rewards, dones, bootstrap = ghm_like_batch()
    got = reward_to_go(rewards, dones, gamma, bootstrap)
    want = slow_reward_to_go(rewards, dones, gamma, bootstrap)
    torch.testing.assert_close(got, want)
    # Absorbed paths ignore the bootstrap; surviving (truncated) paths use it.
    no_boot = reward_to_go(rewards, dones, gamma, None)
    absorbed = dones[:, -1]
    torch.testing.assert_close(got[absorbed], no_boot[absorbed])
    if gamma > 0:
        assert not torch.allclose(got[~absorbed], no_boot[~absorbed])


def test_discounted_return_equals_first_reward_to_go_and_per_step_discount():
    rho, dt = 0.1, 0.01
    gamma = math.exp(-rho * dt)
    rewards, dones, bootstrap = ghm_like_batch(B=8, T=300, seed=3)
    total = discounted_return(rewards, dones, gamma, bootstrap)
    torch.testing.assert_close(total, reward_to_go(rewards, dones, gamma, bootstrap)[:, 0])
    # gamma**t == exp(-rho * t * dt): the per-step discount is the continuous one.
    powers = discount_powers(300, gamma, dtype=torch.float64)
    torch.testing.assert_close(powers, torch.exp(-rho * dt * torch.arange(300, dtype=torch.float64)))
    # A surviving path: sum_t e^{-rho t dt} r_t + e^{-rho T} V(c_T).
    b = int((~dones[:, -1]).nonzero()[0])
    manual = sum(math.exp(-rho * t * dt) * float(rewards[b, t]) for t in range(300)) + math.exp(-rho * 3.0) * float(
        bootstrap[b]
    )
    assert abs(float(total[b]) - manual) < 1e-9


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
def test_gae_matches_reference_with_terminations_and_truncations(lam):
    g = torch.Generator().manual_seed(1)
    B, T, gamma = 5, 9, 0.97
    rewards = torch.randn(B, T, generator=g, dtype=torch.float64)
    values = torch.randn(B, T, generator=g, dtype=torch.float64)
    dones = torch.rand(B, T, generator=g) < 0.15
    truncs = (torch.rand(B, T, generator=g) < 0.15) & ~dones
    last_value = torch.randn(B, generator=g, dtype=torch.float64)
    # V of the true successor: next row's value, except at truncations (pre-reset state).
    next_values = torch.cat([values[:, 1:], last_value[:, None]], 1)
    final_obs_values = torch.randn(B, T, generator=g, dtype=torch.float64)
    next_values = torch.where(truncs, final_obs_values, next_values)
    adv, ret = compute_gae(rewards, values, dones, truncs, last_value, gamma, lam, next_values=next_values)
    want = slow_gae(rewards, values, dones, truncs, next_values, gamma, lam)
    torch.testing.assert_close(adv, want)
    torch.testing.assert_close(ret, want + values)


def test_gae_closed_forms():
    g = torch.Generator().manual_seed(2)
    B, T, gamma = 4, 7, 0.9
    rewards = torch.randn(B, T, generator=g, dtype=torch.float64)
    values = torch.randn(B, T, generator=g, dtype=torch.float64)
    dones = torch.rand(B, T, generator=g) < 0.2
    last_value = torch.randn(B, generator=g, dtype=torch.float64)
    # lam = 1: Monte Carlo returns (bootstrapped at the end) minus values.
    adv1, _ = compute_gae(rewards, values, dones, None, last_value, gamma, 1.0)
    torch.testing.assert_close(adv1, reward_to_go(rewards, dones, gamma, last_value) - values)
    # lam = 0: one-step TD errors.
    adv0, _ = compute_gae(rewards, values, dones, None, last_value, gamma, 0.0)
    next_values = torch.cat([values[:, 1:], last_value[:, None]], 1)
    torch.testing.assert_close(adv0, td0_targets(rewards, next_values, dones, gamma) - values)


def test_gae_truncation_at_last_step_uses_last_value_and_mid_truncation_needs_next_values():
    rewards = torch.ones(1, 3)
    values = torch.zeros(1, 3)
    dones = torch.zeros(1, 3, dtype=torch.bool)
    truncs = torch.tensor([[False, False, True]])
    adv, _ = compute_gae(rewards, values, dones, truncs, torch.tensor([10.0]), 0.5, 1.0)
    # A_2 = 1 + 0.5 * 10 = 6; A_1 = 1 + 0.5 * 6 = 4; A_0 = 1 + 0.5 * 4 = 3
    torch.testing.assert_close(adv, torch.tensor([[3.0, 4.0, 6.0]]))
    with pytest.raises(ValueError, match="next_values"):
        compute_gae(rewards, values, dones, torch.tensor([[False, True, False]]), torch.tensor([0.0]), 0.5, 1.0)


def test_normalize_advantages_with_mask_ignores_padding():
    adv = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    out = normalize_advantages(adv, mask)
    torch.testing.assert_close(out[0, :3], torch.tensor([-1.0, 0.0, 1.0]), atol=1e-6, rtol=0)
    assert out[0, 3] == 0
    plain = normalize_advantages(torch.tensor([1.0, 2.0, 3.0]))
    torch.testing.assert_close(plain, torch.tensor([-1.0, 0.0, 1.0]), atol=1e-6, rtol=0)


def test_estimator_contracts_name_the_argument():
    with pytest.raises(TensorContractError, match=r"dones expected .*\[B, T\] with B=2"):
        reward_to_go(torch.zeros(2, 3), torch.zeros(3, 3, dtype=torch.bool), 0.9)
    with pytest.raises(ValueError, match="discount must lie in"):
        reward_to_go(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bool), 1.5)
    with pytest.raises(TensorContractError, match="rewards expected"):
        compute_gae(
            torch.zeros(2, 3, dtype=torch.int64), torch.zeros(2, 3), torch.zeros(2, 3), None, torch.zeros(2), 0.9, 0.9
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gae_on_the_cpu_gives_the_torch_recursions_numbers_bit_for_bit(dtype):
    """The CPU path runs the recursion on NumPy views; tensors that need gradients take the
    torch loop. Both give the same numbers, bit for bit (terminations and truncations included)."""
    generator = torch.Generator().manual_seed(0)
    rewards, values = (torch.randn(3, 200, generator=generator, dtype=dtype) for _ in range(2))
    dones, truncs = (torch.rand(3, 200, generator=generator) < 0.05 for _ in range(2))
    last_value = torch.randn(3, generator=generator, dtype=dtype)
    next_values = torch.randn(3, 200, generator=generator, dtype=dtype)
    args = (dones, truncs, last_value, 0.99, 0.95)
    fast = compute_gae(rewards, values, *args, next_values=next_values)
    tracked = compute_gae(rewards, values.requires_grad_(), *args, next_values=next_values)
    assert tracked[0].requires_grad  # the torch loop ran
    assert torch.equal(fast[0], tracked[0].detach()) and torch.equal(fast[1], tracked[1].detach())

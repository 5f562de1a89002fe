"""Loss functions against hand-computed values."""

import math

import pytest
import torch

from pglab.errors import TensorContractError
from pglab.losses.a2c import a2c_td0_losses
from pglab.losses.maxk import maxk_policy_loss
from pglab.losses.ppo import ppo_clip_loss
from pglab.losses.reinforce import reinforce_loss, value_regression_loss


def test_reinforce_loss_value_and_gradient():
    log_probs = torch.tensor([[-1.0, -2.0], [-0.5, -0.1]], requires_grad=True)
    advantages = torch.tensor([2.0, -1.0])  # one per path, broadcast over time
    masks = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    out = reinforce_loss(log_probs, advantages, masks)
    # -(1/B) * [2*(-1) + 2*(-2) + (-1)*(-0.5) + 0] = -(1/2) * (-5.5) = 2.75
    assert math.isclose(out["loss"].item(), 2.75)
    out["loss"].backward()
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-1.0, -1.0], [0.5, 0.0]]))


def test_value_regression_loss_masked():
    pred = torch.tensor([1.0, 2.0, 3.0])
    out = value_regression_loss(pred, torch.tensor([0.0, 2.0, 0.0]), torch.tensor([1, 1, 0]))
    assert math.isclose(out["loss"].item(), 0.5)


def test_ppo_clip_loss_hand_computed():
    old = torch.log(torch.tensor([0.5, 0.5]))
    new = torch.log(torch.tensor([0.75, 0.25])).requires_grad_()
    adv = torch.tensor([1.0, 1.0])
    values = torch.tensor([0.0, 1.0], requires_grad=True)
    returns = torch.tensor([1.0, 1.0])
    entropy = torch.tensor([0.6, 0.6])
    out = ppo_clip_loss(
        new, old, adv, values, returns, entropy=entropy, clip_coef=0.2, value_coef=0.5, entropy_coef=0.01
    )
    # ratios 1.5 and 0.5; clipped to 1.2 and 0.8; min(r*A, clip*A) = 1.2 and 0.5
    assert math.isclose(out["loss/policy"].item(), -(1.2 + 0.5) / 2, rel_tol=1e-6)
    assert math.isclose(out["loss/value"].item(), 0.5 * (1.0 + 0.0) / 2, rel_tol=1e-6)
    assert math.isclose(out["stats/clipfrac"].item(), 1.0)
    kl = ((1.5 - 1) - math.log(1.5) + (0.5 - 1) - math.log(0.5)) / 2
    assert math.isclose(out["stats/approx_kl"].item(), kl, rel_tol=1e-6)
    total = -(1.2 + 0.5) / 2 + 0.5 * 0.25 - 0.01 * 0.6
    assert math.isclose(out["loss"].item(), total, rel_tol=1e-6)
    out["loss"].backward()
    # The first ratio is clipped (no gradient); the second is not: d/dlogp(-r*A/2) = -0.5*0.5
    torch.testing.assert_close(new.grad, torch.tensor([0.0, -0.25]))


def test_ppo_value_clipping():
    new_values = torch.tensor([2.0])
    out = ppo_clip_loss(
        torch.zeros(1),
        torch.zeros(1),
        torch.zeros(1),
        new_values,
        torch.tensor([0.0]),
        old_values=torch.tensor([0.0]),
        value_clip_coef=0.5,
    )
    # unclipped error 4, clipped prediction 0.5 -> error 0.25; max is 4 -> 0.5 * 4
    assert math.isclose(out["loss/value"].item(), 2.0)


def test_a2c_td0_losses_hand_computed():
    logits = torch.log(torch.tensor([[0.25, 0.75], [0.5, 0.5]]))
    actions = torch.tensor([1, 0], dtype=torch.int32)
    values = torch.tensor([1.0, 2.0], requires_grad=True)
    rewards = torch.tensor([1.0, 0.5])
    done = torch.tensor([False, False])
    trunc = torch.tensor([False, True])
    v_next = torch.tensor([3.0, 100.0])
    out = a2c_td0_losses(
        logits, actions, values, rewards, done, trunc, v_next, gamma=0.5, value_coef=0.5, entropy_coef=0.1
    )
    # targets: 1 + 0.5*3 = 2.5 ; 0.5 (truncated -> no bootstrap). adv: 1.5, -1.5
    lp = [math.log(0.75), math.log(0.5)]
    policy = -(lp[0] * 1.5 + lp[1] * -1.5) / 2
    value = 0.5 * (1.5**2 + 1.5**2) / 2
    ent = (-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)) + math.log(2)) / 2
    assert math.isclose(out["loss/policy"].item(), policy, rel_tol=1e-6)
    assert math.isclose(out["loss/value"].item(), value, rel_tol=1e-6)
    assert math.isclose(out["stats/entropy"].item(), ent, rel_tol=1e-6)
    assert math.isclose(out["loss"].item(), policy + value - 0.1 * ent, rel_tol=1e-6)


def test_a2c_contracts_reject_wrong_dtypes_and_grad_targets():
    args = dict(gamma=0.9, value_coef=0.5, entropy_coef=0.0)
    good = [
        torch.zeros(3, 4),
        torch.zeros(3, dtype=torch.int32),
        torch.zeros(3),
        torch.zeros(3),
        torch.zeros(3, dtype=torch.bool),
        torch.zeros(3, dtype=torch.bool),
        torch.zeros(3),
    ]
    bad_done = list(good)
    bad_done[4] = torch.zeros(3)
    with pytest.raises(TensorContractError, match="done expected bool"):
        a2c_td0_losses(*bad_done, **args)
    bad_actions = list(good)
    bad_actions[1] = torch.zeros(3)
    with pytest.raises(TensorContractError, match="actions expected int32\\|int64"):
        a2c_td0_losses(*bad_actions, **args)
    bad_shape = list(good)
    bad_shape[3] = torch.zeros(4)
    with pytest.raises(TensorContractError, match="rewards expected .* with N=3"):
        a2c_td0_losses(*bad_shape, **args)
    grad_next = list(good)
    grad_next[6] = torch.zeros(3, requires_grad=True)
    with pytest.raises(ValueError, match="no_grad"):
        a2c_td0_losses(*grad_next, **args)


def _subset_weights(row: list[float], k: int, mode: str) -> list[float]:
    """Max@K sample weights by enumerating every k-subset (independent of pglab)."""
    import itertools

    n = len(row)
    subsets = list(itertools.combinations(range(n), k))

    def rho(values):
        subs = list(itertools.combinations(range(len(values)), k))
        return sum(max(values[j] for j in s) for s in subs) / len(subs)

    out = []
    for i in range(n):
        containing = [s for s in subsets if i in s]
        s_i = sum(max(row[j] for j in s) for s in containing) / len(subsets)
        if mode == "none":
            out.append(s_i)
        elif mode == "sample_loo":
            out.append(s_i - (k / n) * rho([row[j] for j in range(n) if j != i]))
        else:  # subloo
            out.append(
                sum(max(row[j] for j in s) - max(row[j] for j in s if j != i) for s in containing) / len(subsets)
            )
    return out


@pytest.mark.parametrize("mode", [None, "none", "sample_loo", "subloo"])
def test_maxk_policy_loss_value_gradient_and_stats_against_subset_enumeration(mode):
    rewards = torch.tensor([[0.3, -1.0, 2.0, 0.7], [5.0, 4.0, 1.5, 4.5]], dtype=torch.float64)
    log_likelihood = torch.tensor(
        [[-1.0, -2.0, -0.5, -3.0], [-0.2, -0.4, -0.8, -1.6]], dtype=torch.float64, requires_grad=True
    )
    k = 2
    kwargs = {} if mode is None else {"variance_reduction": mode}  # None: the default, "none"
    out = maxk_policy_loss(log_likelihood, rewards, k, **kwargs)
    weights = torch.tensor([_subset_weights(r, k, mode or "none") for r in rewards.tolist()], dtype=torch.float64)
    # L = -(1/B) sum_b sum_i w_bi log p_bi, so dL/dlog p = -w / B
    want_loss = -(weights * log_likelihood.detach()).sum() / 2
    assert math.isclose(out["loss"].item(), want_loss.item(), rel_tol=1e-12)
    assert math.isclose(out["loss/policy"].item(), want_loss.item(), rel_tol=1e-12)
    out["loss"].backward()
    torch.testing.assert_close(log_likelihood.grad, -weights / 2, rtol=1e-12, atol=1e-12)
    # rho_hat: mean over rows of the mean over pairs of the pair's best
    pairs = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    rho = [sum(max(r[i], r[j]) for i, j in pairs) / 6 for r in rewards.tolist()]
    assert math.isclose(out["stats/rho_hat"].item(), sum(rho) / 2, rel_tol=1e-12)
    assert math.isclose(out["stats/max_reward"].item(), (2.0 + 5.0) / 2, rel_tol=1e-12)
    assert math.isclose(out["stats/mean_reward"].item(), rewards.mean().item(), rel_tol=1e-12)
    assert math.isclose(out["stats/weight_abs_mean"].item(), weights.abs().mean().item(), rel_tol=1e-12)
    for key, value in out.items():
        assert value.requires_grad == (key == "loss"), key  # only the loss carries a gradient

"""Loss functions against hand-computed values."""
import math

import pytest
import torch

from pglab.errors import TensorContractError
from pglab.losses.a2c import a2c_td0_losses
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
    out = ppo_clip_loss(new, old, adv, values, returns, entropy=entropy, clip_coef=0.2, value_coef=0.5, entropy_coef=0.01)
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
    out = ppo_clip_loss(torch.zeros(1), torch.zeros(1), torch.zeros(1), new_values, torch.tensor([0.0]),
                        old_values=torch.tensor([0.0]), value_clip_coef=0.5)
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
    out = a2c_td0_losses(logits, actions, values, rewards, done, trunc, v_next, gamma=0.5, value_coef=0.5, entropy_coef=0.1)
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
    good = [torch.zeros(3, 4), torch.zeros(3, dtype=torch.int32), torch.zeros(3), torch.zeros(3),
            torch.zeros(3, dtype=torch.bool), torch.zeros(3, dtype=torch.bool), torch.zeros(3)]
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

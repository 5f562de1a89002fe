"""Tests that kill mutmut's surviving mutants in pglab/estimators and pglab/losses.

``make mutants`` (docs/mutation-testing.md) mutates those modules and runs the fast tests
that cover them. What survived the hand-computed and reference-loop tests was mostly the
argument checking: each public function checks every tensor it takes (name, dtype,
rank, and that symbolic sizes such as ``B`` agree between arguments) and names itself
in the message. The table below drives every such check with a bad tensor and compares
the whole message prefix with one written out here, so a wrong name, a dropped dtype, a
dropped ``dims`` binding or a wrong ``where`` each fail a test.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch

from pglab.errors import TensorContractError
from pglab.estimators import (
    compute_gae,
    discount_powers,
    discounted_return,
    maxk_gradient_weights,
    maxk_reward_estimate,
    normalize_advantages,
    reward_to_go,
    td0_targets,
)
from pglab.estimators.maxk import pass_at_k_estimate
from pglab.losses.a2c import a2c_td0_losses
from pglab.losses.maxk import maxk_policy_loss
from pglab.losses.ppo import ppo_clip_loss
from pglab.losses.reinforce import reinforce_loss, value_regression_loss

FLOATS = "float16|bfloat16|float32|float64"
B, T = 3, 4


def f64(*shape):
    return torch.zeros(*shape, dtype=torch.float64)


def flags(*shape):
    return torch.zeros(*shape, dtype=torch.bool)


@dataclass
class Arg:
    """One checked tensor argument: its message name and expected description."""

    name: str
    desc: str  # e.g. "float16|bfloat16|float32|float64[B, T]"
    dtype_checked: bool = True
    rank_checked: bool = True
    # The size a mismatched first axis is reported against ("B=3 (from an earlier
    # argument)"); None where the first axis is not bound by an earlier argument.
    bound: str | None = None


@dataclass
class Spec:
    where: str
    fn: Callable
    make: Callable[[], dict]  # good keyword arguments
    args: dict[str, Arg] = field(default_factory=dict)
    # (keyword, message name of the argument that reports the mismatch, its desc):
    # changing the first binder's leading size must be caught at the next argument.
    binder: tuple[str, str, str, str] | None = None


SPECS = [
    Spec(
        "compute_gae",
        compute_gae,
        lambda: dict(
            rewards=f64(B, T),
            values=f64(B, T),
            dones=flags(B, T),
            truncs=flags(B, T),
            last_value=f64(B),
            gamma=0.9,
            lam=0.9,
            next_values=f64(B, T),
        ),
        {
            "rewards": Arg("rewards", f"{FLOATS}[B, T]"),
            "values": Arg("values", f"{FLOATS}[B, T]", bound="B=3"),
            "dones": Arg("dones", "tensor[B, T]", dtype_checked=False, bound="B=3"),
            "truncs": Arg("truncs", "tensor[B, T]", dtype_checked=False, bound="B=3"),
            "last_value": Arg("last_value", f"{FLOATS}[B]", bound="B=3"),
            "next_values": Arg("next_values", f"{FLOATS}[B, T]", bound="B=3"),
        },
        binder=("rewards", "values", f"{FLOATS}[B, T]", "B=4"),
    ),
    Spec(
        "td0_targets",
        td0_targets,
        lambda: dict(rewards=f64(B, T), next_values=f64(B, T), terminated=flags(B, T), gamma=0.9),
        {
            "rewards": Arg("rewards", f"{FLOATS}[]", rank_checked=False),
            "next_values": Arg("next_values", f"{FLOATS}[3, 4]"),
            "terminated": Arg("terminated", "tensor[3, 4]", dtype_checked=False),
        },
    ),
    Spec(
        "reward_to_go",
        reward_to_go,
        lambda: dict(rewards=f64(B, T), dones=flags(B, T), discount=0.9, bootstrap_value=f64(B)),
        {
            "rewards": Arg("rewards", f"{FLOATS}[B, T]"),
            "dones": Arg("dones", "tensor[B, T]", dtype_checked=False, bound="B=3"),
            "bootstrap_value": Arg("bootstrap_value", f"{FLOATS}[B]", bound="B=3"),
        },
        binder=("rewards", "dones", "tensor[B, T]", "B=4"),
    ),
    Spec(
        "discounted_return",
        discounted_return,
        lambda: dict(rewards=f64(B, T), dones=flags(B, T), discount=0.9, bootstrap_value=f64(B)),
        {
            "rewards": Arg("rewards", f"{FLOATS}[B, T]"),
            "dones": Arg("dones", "tensor[B, T]", dtype_checked=False, bound="B=3"),
            "bootstrap_value": Arg("bootstrap_value", f"{FLOATS}[B]", bound="B=3"),
        },
        binder=("rewards", "dones", "tensor[B, T]", "B=4"),
    ),
    Spec(
        "normalize_advantages",
        normalize_advantages,
        lambda: dict(advantages=f64(B, T), mask=flags(B, T)),
        {
            "advantages": Arg("advantages", f"{FLOATS}[]", rank_checked=False),
            "mask": Arg("mask", "tensor[3, 4]", dtype_checked=False),
        },
    ),
    Spec(
        "maxk_reward_estimate",
        maxk_reward_estimate,
        lambda: dict(rewards=f64(B, T), k=2),
        {"rewards": Arg("rewards", f"{FLOATS}[B, n]")},
    ),
    Spec(
        "maxk_gradient_weights",
        maxk_gradient_weights,
        lambda: dict(rewards=f64(B, T), k=2),
        {"rewards": Arg("rewards", f"{FLOATS}[B, n]")},
    ),
    Spec(
        "a2c_td0_losses",
        a2c_td0_losses,
        lambda: dict(
            logits=torch.zeros(B, 2),
            actions=torch.zeros(B, dtype=torch.int64),
            values=torch.zeros(B),
            rewards=torch.zeros(B),
            done=flags(B),
            trunc=flags(B),
            v_next=torch.zeros(B),
            gamma=0.9,
            value_coef=0.5,
            entropy_coef=0.01,
        ),
        {
            "logits": Arg("logits", "float32[N, A]"),
            "actions": Arg("actions", "int32|int64[N]", bound="N=3"),
            "values": Arg("values", "float32[N]", bound="N=3"),
            "rewards": Arg("rewards", "float32[N]", bound="N=3"),
            "done": Arg("done", "bool[N]", bound="N=3"),
            "trunc": Arg("trunc", "bool[N]", bound="N=3"),
            "v_next": Arg("v_next", "float32[N]", bound="N=3"),
        },
        binder=("logits", "actions", "int32|int64[N]", "N=4"),
    ),
    Spec(
        "reinforce_loss",
        reinforce_loss,
        lambda: dict(log_probs=f64(B, T), advantages=f64(B, T), masks=flags(B, T)),
        {
            "log_probs": Arg("log_probs", f"{FLOATS}[B, T]"),
            "advantages": Arg("advantages", f"{FLOATS}[B, T]", bound="B=3"),
            "masks": Arg("masks", "tensor[B, T]", dtype_checked=False, bound="B=3"),
        },
        binder=("log_probs", "advantages", f"{FLOATS}[B, T]", "B=4"),
    ),
    Spec(
        "reinforce_loss",
        reinforce_loss,
        lambda: dict(log_probs=f64(B, T), advantages=f64(B)),  # one advantage per path
        {"advantages": Arg("advantages", f"{FLOATS}[B]", rank_checked=False, bound="B=3")},
        binder=("log_probs", "advantages", f"{FLOATS}[B]", "B=4"),
    ),
    Spec(
        "value_regression_loss",
        value_regression_loss,
        lambda: dict(predicted=f64(B, T), targets=f64(B, T), mask=flags(B, T)),
        {
            "predicted": Arg("predicted", f"{FLOATS}[]", rank_checked=False),
            "targets": Arg("targets", f"{FLOATS}[3, 4]"),
            "mask": Arg("mask", "tensor[3, 4]", dtype_checked=False),
        },
    ),
    Spec(
        "ppo_clip_loss",
        ppo_clip_loss,
        lambda: dict(
            new_log_probs=f64(B),
            old_log_probs=f64(B),
            advantages=f64(B),
            new_values=f64(B),
            returns=f64(B),
            entropy=f64(B),
            old_values=f64(B),
            value_clip_coef=0.2,
        ),
        {
            "new_log_probs": Arg("new_log_probs", f"{FLOATS}[N]"),
            "old_log_probs": Arg("old_log_probs", f"{FLOATS}[N]", bound="N=3"),
            "advantages": Arg("advantages", f"{FLOATS}[N]", bound="N=3"),
            "new_values": Arg("new_values", f"{FLOATS}[N]", bound="N=3"),
            "returns": Arg("returns", f"{FLOATS}[N]", bound="N=3"),
            "old_values": Arg("old_values", f"{FLOATS}[N]", bound="N=3"),
            "entropy": Arg("entropy", f"{FLOATS}[N]", bound="N=3"),
        },
        binder=("new_log_probs", "old_log_probs", f"{FLOATS}[N]", "N=4"),
    ),
    Spec(
        "maxk_policy_loss",
        maxk_policy_loss,
        lambda: dict(log_likelihood=f64(B, T), rewards=f64(B, T), k=2),
        {
            "log_likelihood": Arg("log_likelihood", f"{FLOATS}[B, n]"),
            "rewards": Arg("rewards", f"{FLOATS}[B, n]", bound="B=3"),
        },
        binder=("log_likelihood", "rewards", f"{FLOATS}[B, n]", "B=4"),
    ),
]


def _cases():
    for spec in SPECS:
        for key, arg in spec.args.items():
            if arg.dtype_checked:
                yield pytest.param(spec, key, "dtype", id=f"{spec.where}-{key}-dtype")
            if arg.rank_checked:
                yield pytest.param(spec, key, "rank", id=f"{spec.where}-{key}-rank")
            if arg.bound:
                yield pytest.param(spec, key, "size", id=f"{spec.where}-{key}-size")
        if spec.binder:
            yield pytest.param(spec, spec.binder[0], "binder", id=f"{spec.where}-{spec.binder[0]}-binds")


def _bad(good: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "dtype":
        # float32-only arguments get float64; float or int arguments get a float or a bool
        if good.dtype == torch.float32:
            return good.to(torch.float64)
        if good.dtype in (torch.int32, torch.int64):
            return good.to(torch.float32)
        return good.to(torch.int64) if good.dtype != torch.bool else good.to(torch.float32)
    if kind == "rank":
        return good.unsqueeze(-1)
    return torch.cat([good, good[:1]])  # one more row: a first axis that disagrees


@pytest.mark.parametrize("spec,key,kind", list(_cases()))
def test_every_tensor_argument_is_checked_by_name_in_its_function(spec, key, kind):
    kwargs = spec.make()
    kwargs[key] = _bad(kwargs[key], kind)
    if kind == "binder":
        _, reporter, desc, bound = spec.binder
        prefix = f"{spec.where}: {reporter} expected {desc} with {bound} (from an earlier argument), got "
    else:
        arg = spec.args[key]
        prefix = f"{spec.where}: {arg.name} expected {arg.desc}"
        prefix += f" with {arg.bound} (from an earlier argument), got " if kind == "size" else ", got "
    with pytest.raises(TensorContractError) as info:
        spec.fn(**kwargs)
    assert str(info.value).startswith(prefix), f"{info.value!s}\n  wanted the prefix {prefix!r}"


def test_every_spec_is_valid_with_good_arguments():
    for spec in SPECS:
        spec.fn(**spec.make())  # the table's good arguments raise nothing


# -- error messages and argument values ------------------------------------------------


def test_value_errors_say_what_is_wrong():
    z = f64(2, 3)
    for gamma in (1.5, -0.1, float("nan"), "0.9"):
        with pytest.raises(ValueError, match=r"^compute_gae: gamma must lie in \[0, 1\], got "):
            compute_gae(z, z, flags(2, 3), None, f64(2), gamma, 0.9)  # type: ignore[arg-type]  # "0.9": a str on purpose
    with pytest.raises(ValueError, match=r"^compute_gae: lam must lie in \[0, 1\], got 2"):
        compute_gae(z, z, flags(2, 3), None, f64(2), 0.9, 2)
    with pytest.raises(ValueError, match=r"^reward_to_go: discount must lie in \[0, 1\], got 1.01$"):
        reward_to_go(z, flags(2, 3), 1.01)
    with pytest.raises(ValueError, match=r"^discounted_return: discount must lie in \[0, 1\], got 2$"):
        discounted_return(z, flags(2, 3), 2)
    with pytest.raises(ValueError, match=r"^td0_targets: gamma must lie in \[0, 1\], got -1$"):
        td0_targets(z, z, flags(2, 3), -1)
    mid = torch.tensor([[False, True, False], [False, False, False]])
    with pytest.raises(ValueError) as info:
        compute_gae(z, z, flags(2, 3), mid, f64(2), 0.9, 0.9)
    assert str(info.value) == (
        "compute_gae: truncs has truncations before the last step, so V of the "
        "pre-reset final states is needed: pass next_values [B, T]"
    )
    with pytest.raises(ValueError) as info:
        ppo_clip_loss(f64(2), f64(2), f64(2), f64(2), f64(2), clip_coef=0.0)
    assert str(info.value) == "ppo_clip_loss: clip_coef must be > 0, got 0.0"
    with pytest.raises(ValueError) as info:
        ppo_clip_loss(f64(2), f64(2), f64(2), f64(2), f64(2), value_clip_coef=0.2)
    assert str(info.value) == "ppo_clip_loss: value clipping needs old_values"
    with pytest.raises(ValueError) as info:
        maxk_gradient_weights(f64(1, 3), 2, variance_reduction="loo")  # type: ignore[arg-type]  # an unknown mode on purpose
    assert str(info.value) == (
        "maxk_gradient_weights: variance_reduction must be one of 'none', 'sample_loo', 'subloo', got 'loo'"
    )
    with pytest.raises(ValueError) as info:
        pass_at_k_estimate(5, torch.tensor([1]), 6)
    assert str(info.value) == "pass_at_k_estimate: k must satisfy 1 <= k <= n=5, got k=6"
    for bad in (-1, 6):
        with pytest.raises(ValueError) as info:
            pass_at_k_estimate(5, torch.tensor([2, bad]), 2)
        assert str(info.value) == "pass_at_k_estimate: num_correct must lie in [0, 5]"


def test_pass_at_k_estimate_closed_form_dtype_and_bounds():
    n, k = 6, 3
    counts = torch.arange(n + 1)  # every count 0..n is valid, including both ends
    got = pass_at_k_estimate(n, counts, k)
    want = torch.tensor([1 - math.comb(n - c, k) / math.comb(n, k) for c in range(n + 1)], dtype=torch.float32)
    assert got.dtype == torch.float32  # integer counts give float32
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    half = pass_at_k_estimate(n, counts.to(torch.float16), k)
    assert half.dtype == torch.float16  # float counts keep their dtype
    got64 = pass_at_k_estimate(n, counts.to(torch.float64), k)
    assert got64.dtype == torch.float64
    want64 = torch.tensor([1 - math.comb(n - c, k) / math.comb(n, k) for c in range(n + 1)], dtype=torch.float64)
    torch.testing.assert_close(got64, want64, rtol=1e-12, atol=1e-12)


# -- numerics the reference tests left open ----------------------------------------------


def test_normalize_advantages_reference_with_non_unit_spread_and_small_counts():
    adv = torch.tensor([[0.0, 4.0, 8.0, 20.0], [1.0, -3.0, 2.0, 5.0]], dtype=torch.float64)
    eps = 0.5  # large, so that its sign and place are visible
    out = normalize_advantages(adv, eps=eps)
    flat = adv.flatten()
    mean = sum(flat.tolist()) / 8
    std = math.sqrt(sum((a - mean) ** 2 for a in flat.tolist()) / 7)
    torch.testing.assert_close(out, (adv - mean) / (std + eps), rtol=1e-12, atol=1e-12)
    two = normalize_advantages(torch.tensor([0.0, 4.0], dtype=torch.float64), eps=0.0)  # std = sqrt(8)
    torch.testing.assert_close(two, torch.tensor([-2.0, 2.0], dtype=torch.float64) / math.sqrt(8))
    one = normalize_advantages(torch.tensor([5.0], dtype=torch.float64))
    torch.testing.assert_close(one, torch.tensor([0.0], dtype=torch.float64))
    # masked: statistics over the valid entries only, Bessel-corrected
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 0, 1]], dtype=torch.bool)
    valid = [0.0, 4.0, 8.0, -3.0, 5.0]
    m = sum(valid) / 5
    s = math.sqrt(sum((a - m) ** 2 for a in valid) / 4)
    want = torch.where(mask, (adv - m) / (s + eps), torch.zeros_like(adv))
    torch.testing.assert_close(normalize_advantages(adv, mask, eps=eps), want, rtol=1e-12, atol=1e-12)
    # two valid entries: the Bessel divisor is 1; one valid entry: centred to exactly 0
    pair = torch.tensor([[0, 1, 1, 0], [0, 0, 0, 0]], dtype=torch.bool)
    got = normalize_advantages(adv, pair, eps=0.0)
    torch.testing.assert_close(got[0, 1:3], torch.tensor([-2.0, 2.0], dtype=torch.float64) / math.sqrt(8))
    single = torch.zeros(2, 4, dtype=torch.bool)
    single[1, 3] = True
    assert normalize_advantages(adv, single).abs().max().item() == 0.0


def _slow_discounted(rewards, dones, gamma, bootstrap):
    out = []
    for b in range(rewards.shape[0]):
        total, power = 0.0, 1.0
        for t in range(rewards.shape[1]):
            total += power * float(rewards[b, t])
            if dones[b, t]:
                break
            power *= gamma
        else:
            total += power * float(bootstrap[b])
        out.append(total)
    return torch.tensor(out, dtype=torch.float64)


def test_discounted_return_with_rewards_after_termination_and_a_last_step_done():
    # Nonzero rewards after a termination must be ignored; row 1 terminates at the last
    # step (no bootstrap), row 2 never (bootstrap), row 0 in the middle.
    rewards = torch.tensor([[1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 1.0], [0.5, -1.0, 2.0, 1.0]], dtype=torch.float64)
    dones = torch.tensor([[False, True, False, True], [False, False, False, True], [False, False, False, False]])
    boot = torch.tensor([10.0, 20.0, 30.0], dtype=torch.float64)
    gamma = 0.9
    want = _slow_discounted(rewards, dones, gamma, boot)
    torch.testing.assert_close(discounted_return(rewards, dones, gamma, boot), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(reward_to_go(rewards, dones, gamma, boot)[:, 0], want, rtol=1e-12, atol=1e-12)
    # float32 rewards stay float32 whatever the bootstrap's dtype
    r32 = rewards.float()
    assert discounted_return(r32, dones, gamma, boot).dtype == torch.float32
    assert reward_to_go(r32, dones, gamma, boot).dtype == torch.float32


def test_discount_powers_dtype_and_values():
    got = discount_powers(5, 0.5)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.tensor([1.0, 0.5, 0.25, 0.125, 0.0625]))
    assert discount_powers(3, 0.5, dtype=torch.float64).dtype == torch.float64


def test_single_step_paths():
    rewards = torch.tensor([[2.0], [3.0]], dtype=torch.float64)
    dones = torch.tensor([[True], [False]])
    boot = torch.tensor([100.0, 10.0], dtype=torch.float64)
    torch.testing.assert_close(
        reward_to_go(rewards, dones, 0.5, boot), torch.tensor([[2.0], [8.0]], dtype=torch.float64)
    )
    values = torch.tensor([[1.0], [1.0]], dtype=torch.float64)
    adv, ret = compute_gae(rewards, values, dones, None, boot, 0.5, 0.9)
    torch.testing.assert_close(adv, torch.tensor([[1.0], [7.0]], dtype=torch.float64))
    torch.testing.assert_close(ret, torch.tensor([[2.0], [8.0]], dtype=torch.float64))


# -- losses -------------------------------------------------------------------------------


def test_ppo_clip_loss_defaults_both_clip_sides_and_value_clipping_both_ways():
    ratios = torch.tensor([1.5, 0.5, 1.1, 0.7, 1.25], dtype=torch.float64)
    old = torch.full((5,), -1.0, dtype=torch.float64)
    new = (old + ratios.log()).requires_grad_()
    adv = torch.tensor([2.0, -3.0, 0.5, 4.0, -1.0], dtype=torch.float64)
    returns = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    old_values = torch.tensor([0.0, 2.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    new_values = torch.tensor([2.0, 0.0, 1.5, 0.1, -1.0], dtype=torch.float64, requires_grad=True)
    entropy = torch.tensor([0.3, 0.6, 0.9, 1.2, 1.5], dtype=torch.float64)
    out = ppo_clip_loss(new, old, adv, new_values, returns, entropy=entropy, old_values=old_values, value_clip_coef=0.5)
    clipped = ratios.clamp(0.8, 1.2)  # the default clip_coef is 0.2
    policy = -torch.min(ratios * adv, clipped * adv).mean()
    # value clipping: V_old + clip(V - V_old, -0.5, 0.5), the larger error of the two kept
    v_clip = torch.tensor([0.5, 1.5, 1.5, 0.1, -0.5], dtype=torch.float64)
    value = 0.5 * torch.max((new_values.detach() - returns) ** 2, (v_clip - returns) ** 2).mean()
    total = policy + 0.5 * value - 0.01 * entropy.mean()  # default value_coef 0.5, entropy_coef 0.01
    assert math.isclose(out["loss/policy"].item(), policy.item(), rel_tol=1e-12)
    assert math.isclose(out["loss/value"].item(), value.item(), rel_tol=1e-12)
    assert math.isclose(out["loss/entropy"].item(), -0.01 * entropy.mean().item(), rel_tol=1e-12)
    assert math.isclose(out["stats/entropy"].item(), entropy.mean().item(), rel_tol=1e-12)
    assert math.isclose(out["loss"].item(), total.item(), rel_tol=1e-12)
    assert math.isclose(out["stats/clipfrac"].item(), 4 / 5, rel_tol=1e-12)  # all but 1.1
    out["loss"].backward()
    # policy: d(-r A / 5)/dlog r = -r A / 5 only where the unclipped term is the minimum:
    # rows 2 (1.1, inside), 3 (0.7 < 0.8 with A > 0) and 4 (1.25 > 1.2 with A < 0)
    want = torch.tensor([0.0, 0.0, -1.1 * 0.5, -0.7 * 4.0, 1.25 * 1.0], dtype=torch.float64) / 5
    torch.testing.assert_close(new.grad, want, rtol=1e-12, atol=1e-12)
    # value: autograd of the value-clipping formula written out here
    nv = new_values.detach().clone().requires_grad_()
    ref = 0.25 * torch.max((nv - returns) ** 2, (old_values + (nv - old_values).clamp(-0.5, 0.5) - returns) ** 2).mean()
    ref.backward()
    torch.testing.assert_close(new_values.grad, nv.grad, rtol=1e-12, atol=1e-12)
    assert set(out) == {
        "loss",
        "loss/policy",
        "loss/value",
        "loss/entropy",
        "stats/entropy",
        "stats/approx_kl",
        "stats/clipfrac",
    }


def test_ppo_without_entropy_has_a_zero_entropy_term_in_the_input_dtype():
    out = ppo_clip_loss(f64(3), f64(3), f64(3), f64(3), f64(3))
    assert out["stats/entropy"].dtype == torch.float64 and out["stats/entropy"].item() == 0.0
    assert out["loss"].dtype == torch.float64


def test_a2c_entropy_and_keys_with_more_actions_than_states():
    logits = torch.tensor([[0.0, 1.0, 2.0], [0.5, -1.0, 0.0]])
    actions = torch.tensor([2, 1])
    values = torch.tensor([0.5, -0.5], requires_grad=True)
    out = a2c_td0_losses(
        logits,
        actions,
        values,
        torch.tensor([1.0, 2.0]),
        flags(2),
        flags(2),
        torch.tensor([0.0, 1.0]),
        gamma=0.5,
        value_coef=1.0,
        entropy_coef=0.1,
    )
    p = torch.softmax(logits.double(), dim=1)
    ent = -(p * p.log()).sum(1).mean().item()
    assert math.isclose(out["stats/entropy"].item(), ent, rel_tol=1e-6)
    assert math.isclose(out["loss/entropy"].item(), -0.1 * ent, rel_tol=1e-6)
    adv = [1.0 - 0.5, 2.0 + 0.5 * 1.0 + 0.5]
    assert math.isclose(out["stats/advantage_mean"].item(), sum(adv) / 2, rel_tol=1e-6)
    assert math.isclose(out["stats/value_mean"].item(), 0.0, abs_tol=1e-7)
    assert set(out) == {
        "loss",
        "loss/policy",
        "loss/value",
        "loss/entropy",
        "stats/entropy",
        "stats/advantage_mean",
        "stats/value_mean",
    }


def test_reinforce_and_value_regression_with_unequal_batch_and_time():
    log_probs = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.25, -4.0]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float64)
    masks = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]], dtype=torch.float32)
    out = reinforce_loss(log_probs, adv, masks)
    want = -(-1.0 * 1 + -2.0 * 2 + -0.5 * 4 + -4.0 * 6) / 2  # divided by B = 2, not T = 3
    assert math.isclose(out["loss"].item(), want, rel_tol=1e-12)
    assert out["loss"].dtype == torch.float64
    assert set(out) == {"loss", "loss/policy"} and math.isclose(out["loss/policy"].item(), want, rel_tol=1e-12)
    pred = torch.tensor([1.0, 3.0, -1.0], dtype=torch.float64)
    targets = torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64)
    plain = value_regression_loss(pred, targets)
    assert math.isclose(plain["loss"].item(), (1 + 4 + 4) / 3, rel_tol=1e-12)
    assert set(plain) == {"loss", "loss/value"} and math.isclose(plain["loss/value"].item(), 3.0)
    one = value_regression_loss(pred, targets, torch.tensor([0, 1, 0]))
    assert math.isclose(one["loss"].item(), 4.0, rel_tol=1e-12)  # one valid entry: divide by 1
    assert value_regression_loss(pred, targets, torch.tensor([0.0, 1.0, 1.0]))["loss"].dtype == torch.float64


# -- Max@K internals ---------------------------------------------------------------------


def test_share_within_ties_on_a_batch_of_batches():
    from pglab.estimators.maxk import _share_within_ties

    ordered = torch.tensor(
        [[[1.0, 1.0, 2.0, 2.0, 2.0], [0.0, 1.0, 1.0, 3.0, 3.0]], [[5.0, 5.0, 5.0, 5.0, 5.0], [1.0, 2.0, 3.0, 4.0, 5.0]]]
    )
    weights = torch.arange(20, dtype=torch.float32).reshape(2, 2, 5)
    got = _share_within_ties(ordered, weights)
    want = torch.tensor(
        [[[0, 0, 2, 2, 2], [5, 6, 6, 8, 8]], [[10, 10, 10, 10, 10], [15, 16, 17, 18, 19]]], dtype=torch.float32
    )
    torch.testing.assert_close(got, want)


def test_ppo_value_clipping_where_the_clipped_error_is_the_larger_and_clipfrac_is_strict():
    # V_old = 0, V = 1.2 -> clipped 0.5; V_old = 2, V = 0.8 -> clipped 1.5; R = 1: the
    # clipped errors (0.25) beat the unclipped ones (0.04), so each clip bound counts.
    new_values = torch.tensor([1.2, 0.8], dtype=torch.float64)
    out = ppo_clip_loss(
        f64(2),
        f64(2),
        f64(2),
        new_values,
        torch.ones(2, dtype=torch.float64),
        old_values=torch.tensor([0.0, 2.0], dtype=torch.float64),
        value_clip_coef=0.5,
    )
    assert math.isclose(out["loss/value"].item(), 0.5 * 0.25, rel_tol=1e-12)
    # |ratio - 1| equal to clip_coef is on the boundary, not outside: clipfrac counts 2.0 only
    ratios = torch.tensor([1.25, 0.75, 2.0], dtype=torch.float64)
    out = ppo_clip_loss(ratios.log(), f64(3), f64(3), f64(3), f64(3), clip_coef=0.25)
    assert math.isclose(out["stats/clipfrac"].item(), 1 / 3, rel_tol=1e-12)


def test_losses_keep_the_dtype_of_the_differentiated_input():
    # A float64 mask or reward must not promote a float32 loss to float64.
    m64 = torch.ones(2, 3, dtype=torch.float64)
    assert reinforce_loss(torch.zeros(2, 3), torch.ones(2, 3), m64)["loss"].dtype == torch.float32
    assert value_regression_loss(torch.zeros(2, 3), torch.ones(2, 3), m64)["loss"].dtype == torch.float32
    assert normalize_advantages(torch.arange(6.0).reshape(2, 3), m64).dtype == torch.float32
    rewards = torch.tensor([[0.1, 0.7, 0.4]], dtype=torch.float64)
    assert maxk_policy_loss(torch.zeros(1, 3), rewards, 2)["loss"].dtype == torch.float32

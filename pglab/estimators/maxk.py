"""Unbiased Max@K estimators: the expected best of k samples and its policy gradient.

Setting (Walder & Karkhanis 2025, "Pass@K Policy Optimization"): a policy ``p_theta``
draws ``n`` i.i.d. solutions ``x_1..x_n`` of one problem instance with rewards
``g_i = g(x_i)``. The quantity deployed with sampling is the best of ``k <= n`` draws,

    max@k(theta) = E[ max(g(x_1), ..., g(x_k)) ],   x_j ~ p_theta i.i.d.

Averaging ``max`` over all ``C(n, k)`` size-k subsets ``S`` of the n samples gives
unbiased estimators (U-statistics). With the rewards sorted ascending,
``g_(1) <= ... <= g_(n)`` (1-based ranks), the subset sums collapse to

    rho_hat = (1 / C(n, k)) * sum_{i=k}^{n} C(i-1, k-1) * g_(i)                  (value)

    s_(i)   = (1 / C(n, k)) * sum_{S : i in S} max_{j in S} g_j                  (weights)
            = (1 / C(n, k)) * [ C(i-1, k-1) * g_(i) + sum_{m > i} C(m-2, k-2) * g_(m) ]

and ``sum_i s_i * grad log p(x_i)`` is an unbiased estimate of ``grad max@k``.
Baselines that do not depend on ``x_i`` keep it unbiased (``E[b_i grad log p(x_i)] = 0``):

* ``"sample_loo"``: ``w_i = s_i - (k / n) * rho_hat_k(x_{-i})``, the Max@K estimate of
  the other n-1 samples, scaled like ``s_i = (k/n) * mean_{S ni i} max_S``. Needs n > k.
  For k = 1 it is the RLOO estimator ``(g_i - mean_{j != i} g_j) / n``.
* ``"subloo"``: ``w_i = (1 / C(n, k)) * sum_{S ni i} [max_S - max_{S \\ i}]``, i.e. each
  subset is baselined by the best of its other k-1 members. Needs k >= 2. In sorted
  order ``w_(i) = (1 / C(n, k)) * sum_{q < i} C(q-1, k-2) * (g_(i) - g_(q))``: the weights
  are >= 0, zero for the k-1 worst samples, and only a sample that beats others is
  pushed up.

Both baselined modes are invariant to adding a constant to every reward (``"none"`` is
not: it shifts every weight by ``c * k / n``), which is why they have lower variance.

**Binary rewards are pass@k.** For ``g in {0, 1}`` with ``c`` successes among n,
``rho_hat = 1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021's pass@k estimator), and the
``"none"`` weights are ``k/n`` for a success and ``(k/n) * (1 - C(n-1-c, k-1) /
C(n-1, k-1))`` for a failure.

**Multi-start (POMO) samples.** When sample i is drawn from a stratum of its own (POMO
forces a distinct first node per sample) the same formulas are unbiased for the
best of k samples with k distinct, uniformly chosen strata, with the same weights: the
subset-average argument only needs the samples to be independent.

Computation: one sort per row, then every mode's weights are one or two cumulative sums
over the gaps ``g_(r+1) - g_(r) >= 0`` between neighbouring sorted rewards (derived in
:func:`_weights_in_sorted_order`; e.g. subloo is
``w_(p) = (1 / C(n, k)) * sum_{r=2}^{p} C(r-1, k-1) (g_(r) - g_(r-1))``, 1-based). Each
sum adds terms of one sign, so float32 needs no care (no cancellation; the baselined
modes need no centring, and a large common offset of the rewards does not enter at all).
O(n log n) per row, batched over rows, on any device. On the CPU, float32 rows are
sorted by NumPy's SIMD sort as float64 keys that carry each sample's position in their
spare mantissa bits (~20x faster than ``torch.sort``; ~0.4 ms for all of
``maxk_gradient_weights`` at B=512, n=128 on one core, ``bench/maxk.py``). Binomial
ratios come from ``lgamma`` in float64 (no binomial is ever materialised, so n = 4096
with any k is fine), cached per (n, k, device), and cast to the rewards' dtype;
half-precision rewards are processed in float32.

Ties: all three estimators are symmetric in tied values, so any tie order gives the
same exact result. In floating point too: a run of equal rewards has zero gaps, so its
members get bit-identical weights, whatever order the sort gave them (on the CPU, where
cumulative sums are sequential; on other devices one member's weight is copied to the
run). ``stable_sort`` is ``torch.sort``'s flag where that sort is used (CUDA, float64);
the CPU float32 sort orders ties deterministically by position.
"""

from __future__ import annotations

import functools
from typing import Literal

import numpy as np
import torch

from pglab.contracts import check_tensor
from pglab.estimators._checks import FLOATS

VarianceReduction = Literal["none", "sample_loo", "subloo"]
VARIANCE_REDUCTIONS: tuple[VarianceReduction, ...] = ("none", "sample_loo", "subloo")


# -- binomial-coefficient ratios ------------------------------------------------------


def _log_binomial(top: torch.Tensor, bottom: torch.Tensor) -> torch.Tensor:
    """``log C(top, bottom)`` elementwise (float64); ``-inf`` where the binomial is 0."""
    valid = (bottom >= 0) & (top >= bottom)
    top_ = torch.where(valid, top, torch.zeros_like(top))
    bottom_ = torch.where(valid, bottom, torch.zeros_like(bottom))
    value = torch.lgamma(top_ + 1) - torch.lgamma(bottom_ + 1) - torch.lgamma(top_ - bottom_ + 1)
    return torch.where(valid, value, torch.full_like(value, float("-inf")))


def _binomial_ratio(top: torch.Tensor, bottom: int, total_top: int, total_bottom: int) -> torch.Tensor:
    """``C(top, bottom) / C(total_top, total_bottom)`` for a vector of ``top`` values."""
    bottom_ = torch.full_like(top, float(bottom))
    log_den = _log_binomial(
        torch.tensor(float(total_top), dtype=torch.float64, device=top.device),
        torch.tensor(float(total_bottom), dtype=torch.float64, device=top.device),
    )
    return torch.exp(_log_binomial(top, bottom_) - log_den)


def _reverse_cumsum(values: torch.Tensor) -> torch.Tensor:
    """``out[..., p] = sum_{j >= p} values[..., j]`` (summed from the top)."""
    return torch.flip(torch.cumsum(torch.flip(values, dims=(-1,)), dim=-1), dims=(-1,))


@functools.lru_cache(maxsize=128)
def _coefficients(n: int, k: int, device: torch.device, dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    """Per-rank coefficients, in ``dtype``: the value estimate's (0-based rank r = 0..n-1)
    and, per mode, the weight of each gap ``g_(r+1) - g_(r)`` (r = 0..n-2) in the
    weights of the ranks above it (``*_below``: r < p) or at and below it (``*_above``:
    r >= p); see :func:`_weights_in_sorted_order`::

        value[r]            = C(r, k-1) / C(n, k)
        none_above[r]       = sum_{q > r} C(q-1, k-2) / C(n, k)
        subloo_below[r]     = C(r+1, k-1) / C(n, k)
        sample_loo_below[r] = (k/n) C(r+1, k) / C(n-1, k)                     (n > k)
        sample_loo_above[r] = -(k/n) C(r, k-1) / C(n-1, k-1) * (n-1-r)/(n-k)  (n > k)

    Ratios of binomials from ``lgamma`` in float64 (never a binomial, so n = 4096 with any
    k is fine), every one a product or a sum of non-negative terms (no cancellation);
    cast once and cached per (n, k, device, dtype): rebuilding them costs a handful of
    small kernels per call, a visible share of a ~0.1 ms estimator.
    """
    rank = torch.arange(n, dtype=torch.float64, device=device)
    gap = rank[:-1]  # the gap between ranks r and r+1, r = 0..n-2
    above_rank = _binomial_ratio(rank - 1, k - 2, n, k) if k >= 2 else torch.zeros_like(rank)
    table = {
        "value": _binomial_ratio(rank, k - 1, n, k),
        # sum over the ranks q > r: a cumulative sum from the top of non-negative terms
        "none_above": _reverse_cumsum(above_rank)[1:],
        "subloo_below": _binomial_ratio(gap + 1, k - 1, n, k),
    }
    if n > k:
        table["sample_loo_below"] = (k / n) * _binomial_ratio(gap + 1, k, n - 1, k)
        table["sample_loo_above"] = -(k / n) * _binomial_ratio(gap, k - 1, n - 1, k - 1) * (n - 1 - gap) / (n - k)
    return {name: value.to(dtype) for name, value in table.items()}


# -- argument checks ------------------------------------------------------------------


def _check_arguments(where: str, rewards: torch.Tensor, k: int) -> None:
    check_tensor("rewards", rewards, ("B", "n"), FLOATS, where=where)
    n = rewards.shape[1]
    if isinstance(k, bool) or not isinstance(k, int):
        raise ValueError(f"{where}: k must be an integer, got {k!r}")
    if not 1 <= k <= n:
        raise ValueError(f"{where}: k must satisfy 1 <= k <= n (samples per row, n={n}), got k={k}")


def _working_dtype(rewards: torch.Tensor) -> torch.dtype:
    # float16/bfloat16 cumulative sums lose too much; compute in float32 and cast back.
    return rewards.dtype if rewards.dtype in (torch.float32, torch.float64) else torch.float32


# The sort order each mode's weights are computed in: the one where its sum over gaps
# runs over the gaps before each sample, a plain cumulative sum (a sum over the gaps
# after it would need two flips as well): "none" sums the gaps above a sample.
_DESCENDING = {"none": True, "subloo": False, "sample_loo": False}


@functools.lru_cache(maxsize=128)
def _sorted_coefficients(
    n: int, k: int, mode: str, device: torch.device, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """:func:`_coefficients`' gap weights of one mode laid out over the positions of the
    mode's sort order (``_DESCENDING``), for :func:`_weights_in_sorted_order`:
    ``forward[j]`` (and, for sample_loo, ``total[j]``) multiplies the step
    ``g_j - g_{j-1}`` into position j (``[n]`` each, 0 at j = 0, where there is no step)."""
    coef = _coefficients(n, k, device)
    zero = torch.zeros(1, dtype=torch.float64, device=device)
    if mode == "none":
        # Descending: the step into position j >= 1 is -(gap of rank n-1-j), and the
        # ranks at or below that gap are the positions j and after.
        out = {"forward": torch.cat([zero, -torch.flip(coef["none_above"], dims=(0,))])}
    else:
        # Ascending: the step into position j >= 1 is the gap of rank j-1.
        out = {"forward": torch.cat([zero, coef[f"{mode}_below"]])}
        if mode == "sample_loo":
            # sum_{r>=p} above_r d_r = (row total) - sum_{r<p} above_r d_r: one forward sum
            out["total"] = torch.cat([zero, coef["sample_loo_above"]])
            out["forward"] = out["forward"] - out["total"]
    return {name: vector.to(dtype).contiguous() for name, vector in out.items()}


def _weights_in_sorted_order(ordered: torch.Tensor, k: int, mode: str) -> torch.Tensor:
    """One mode's weights for rewards sorted along the last axis (``[B, n]``, in the
    mode's order, ``_DESCENDING``), in that order.

    Every mode is written over the gaps ``d_r = g_(r+1) - g_(r) >= 0`` between
    neighbouring sorted rewards (ascending rank order, 0-based; the gap weights are
    :func:`_coefficients`'), by ``g_(q) = g_(p) +- (the gaps between them)``:

    * ``"none"``:   ``s_(p) = (k/n) g_(p) + sum_{r >= p} none_above_r d_r``, as
      ``value_p g_(p) + sum_{q>p} above_q g_(q)`` with ``value_p + sum_{q>p} above_q = k/n``.
    * ``"subloo"``: ``w_(p) = sum_{r < p} subloo_below_r d_r``, from
      ``sum_{q<p} below_q (g_(p) - g_(q))`` with ``sum_{q<=r} below_q = C(r+1, k-1)/C(n, k)``.
    * ``"sample_loo"``: ``w_(p) = sum_{r < p} sample_loo_below_r d_r +
      sum_{r >= p} sample_loo_above_r d_r``: the reward itself cancels, as the mode is
      shift-invariant.

    sample_loo is evaluated as ``sum_r above_r d_r + sum_{r<p} (below_r - above_r) d_r``
    (``above_r <= 0 <= below_r``): one forward sum and a row total.

    This form is why the weights need no care in float32: each cumulative sum adds terms
    of one sign (no cancellation; the only subtraction left, sample_loo's total plus its
    partial sum, errs by at most ~eps times the sum of |coefficient| x gap), a common
    offset of the rewards never enters the baselined modes (so no centring), and a run of
    equal rewards has zero gaps, so on the CPU (whose cumulative sums run sequentially)
    its members get bit-identical weights.
    """
    n = ordered.shape[-1]
    coef = _sorted_coefficients(n, k, mode, ordered.device, ordered.dtype)
    steps = torch.diff(ordered, dim=-1, prepend=ordered[..., :1])  # g_j - g_{j-1}; 0 at j = 0
    total = steps @ coef["total"] if mode == "sample_loo" else None  # [B]: sum_r above_r d_r
    weights = steps.mul_(coef["forward"]).cumsum_(dim=-1)
    if mode == "none":
        weights.add_(ordered, alpha=k / n)
    elif total is not None:
        weights += total[..., None]
    return weights


def _share_within_ties(ordered: torch.Tensor, weights_sorted: torch.Tensor) -> torch.Tensor:
    """Give every member of a run of equal rewards the weight of the run's first member.

    Tied samples are exchangeable, so their exact weights are equal, and the gap form of
    :func:`_weights_in_sorted_order` adds exact zeros across a run; but a parallel scan
    reaches the members along different rounding paths. Copying one value makes equal
    rewards get bit-identical weights there too.
    """
    n = ordered.shape[-1]
    # run_start[j] = the first position of j's run = max over i <= j of i * [g_i != g_{i-1}]
    run_start = torch.zeros(ordered.shape, dtype=torch.int64, device=ordered.device)
    torch.ne(ordered[..., 1:], ordered[..., :-1], out=run_start[..., 1:])
    run_start *= torch.arange(n, device=ordered.device)
    return weights_sorted.gather(-1, torch.cummax(run_start, dim=-1).values)


# A float32 widened to float64 has 52 - 23 = 29 low mantissa bits that are always zero:
# room for the sample's position in its row. Positions stay below 2**28 so that the bits
# are less than half a float32 ulp and rounding the key back to float32 gives the reward.
_INDEX_MASK = 2**29 - 1
_MAX_PACKED_N = 2**28


def _uses_packed_sort(work: torch.Tensor) -> bool:
    return work.device.type == "cpu" and work.dtype == torch.float32 and work.shape[-1] <= _MAX_PACKED_N


@functools.lru_cache(maxsize=64)
def _position_bits(n: int, negate: bool = False) -> torch.Tensor:
    """int64 ``[n]``: the positions 0..n-1, with the sign bit set when ``negate``.
    XOR-ed into float64 keys whose low bits are zero, they store each position and
    optionally negate the key, in one pass."""
    positions = torch.arange(n, dtype=torch.int64)
    return positions | torch.iinfo(torch.int64).min if negate else positions


def _packed_sort(work: torch.Tensor, descending: bool, stable: bool) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Sort the rows of a float32 CPU tensor ``[B, n]`` as float64 keys that carry each
    sample's position in their spare low mantissa bits; NumPy's SIMD sort does the work
    (~20x faster than ``torch.sort`` here). Descending is an ascending sort of the
    negated rewards (the negation is the same pass that stores the positions).

    Returns ``(values, order)``: float32 ``[B, n]`` sorted rewards and int64 ``[B, n]``
    positions, or ``None`` where the keys cannot carry positions (an infinite reward
    turns NaN when bits are set; NaN rewards).

    The position bits make every key distinct, so equal rewards come out ordered by their
    bits. Setting low bits of a negative key makes it smaller, so plain positions give
    the stable order only where the key is non-negative; ``stable`` stores the position
    complemented under negative keys (a few more array passes; the caller asks for it
    only when a tie is present). The element-wise steps are torch's (vectorised, about
    twice as fast as NumPy's casting loops here); only the sort is NumPy's.
    """
    keys = work.detach().to(torch.float64, copy=True)  # exact; the low 29 bits are zero
    bits = keys.view(torch.int64)
    n = keys.shape[-1]
    if stable:
        keys += 0.0  # -0.0 -> +0.0: all zeros then share one sign, like other ties
        if descending:
            keys.neg_()
        # (bits >> 63) is all ones under a negative key: complement the position there,
        # within the bits that positions use (so the bits stay below half a float32 ulp).
        complement = (1 << max(n - 1, 1).bit_length()) - 1
        bits |= ((bits >> 63) & complement) ^ _position_bits(n)
    else:
        bits ^= _position_bits(n, negate=descending)
    keys.numpy().sort(axis=-1)
    # Only a key with the exponent all ones is NaN, and NaN sorts last.
    if np.isnan(keys.numpy()[:, -1]).any():
        return None
    order = bits & _INDEX_MASK
    if stable:
        order ^= (bits >> 63) & complement
    # Round-to-nearest drops the position bits (< half a float32 ulp).
    values = keys.to(torch.float32)
    if descending:
        values.neg_()
    return values, order


def _has_ties(ordered: torch.Tensor) -> bool:
    """Whether any row of a row-sorted CPU tensor holds two equal values.

    By NumPy, flat first (one contiguous pass, ~4x cheaper than row-wise, and ~5x cheaper
    than torch's comparison to bool); the flat pass also compares each row's last value
    with the next row's first, so a hit is confirmed row by row.
    """
    values = ordered.detach().numpy()
    flat = values.reshape(-1)
    if not (flat[1:] == flat[:-1]).any():
        return False
    return bool((values[..., 1:] == values[..., :-1]).any())


def _sort_rows(
    work: torch.Tensor, stable: bool, descending: bool = False, *, exact_tie_order: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort each row: ``(values, indices)`` as from ``torch.sort(work, dim=-1,
    descending=descending, stable=stable)``.

    On the CPU, float32 rows go through :func:`_packed_sort` (NumPy's SIMD sort of
    float64 keys with the position in the spare mantissa bits: ~0.15 ms against ~2 ms
    for ``torch.sort`` at 512 x 128). It orders tied rewards deterministically, by their
    position bits; with ``stable`` and ``exact_tie_order`` that is made the stable order
    (a second sort, where a tie is present). A caller whose result cannot depend on the
    order of ties passes ``exact_tie_order=False``. Without autograd the sorted values are
    read off the keys; with it they are gathered from ``work`` so that autograd sees the
    sort.
    """
    packed = _packed_sort(work, descending, stable=False) if _uses_packed_sort(work) else None
    if packed is None:
        return torch.sort(work, dim=-1, descending=descending, stable=stable)
    values, indices = packed
    if stable and exact_tie_order and _has_ties(values):
        repacked = _packed_sort(work, descending, stable=True)
        assert repacked is not None  # the same rewards packed into keys a moment ago
        values, indices = repacked
    if work.requires_grad:
        return work.gather(-1, indices), indices
    return values, indices


def _sorted_values(work: torch.Tensor, stable: bool) -> torch.Tensor:
    """Each row's values in ascending order (no permutation needed: the value estimate).

    A plain NumPy sort of float32 values (SIMD) on the CPU when autograd is not
    involved, ~15x faster than ``torch.sort``; otherwise :func:`_sort_rows`.
    """
    if _uses_packed_sort(work) and not work.requires_grad:
        return torch.from_numpy(np.sort(work.contiguous().numpy(), axis=-1))
    return _sort_rows(work, stable, exact_tie_order=False)[0]  # values only: tie order is moot


# -- public estimators ----------------------------------------------------------------


def maxk_reward_estimate(rewards: torch.Tensor, k: int, *, stable_sort: bool = True) -> torch.Tensor:
    """Unbiased estimate of ``E[max of k i.i.d. rewards]`` for each row.

    ``rho_hat = (1 / C(n, k)) * sum_{i=k}^{n} C(i-1, k-1) * g_(i)`` (ascending order,
    1-based ranks) = the mean of ``max`` over all ``C(n, k)`` subsets of size k.
    For 0/1 rewards this is the pass@k estimator ``1 - C(n-c, k) / C(n, k)``.

    Args:
        rewards: float ``[B, n]``, n samples per row (instance/prompt), any device.
        k: subset size, ``1 <= k <= n``.
        stable_sort: ``torch.sort``'s ``stable`` flag where it is used; the result does
            not depend on the tie order (tied samples share one weight).

    Returns:
        float ``[B]`` in the rewards' dtype and device.
    """
    where = "maxk_reward_estimate"
    _check_arguments(where, rewards, k)
    work = rewards.to(_working_dtype(rewards))
    n = work.shape[1]
    ordered = _sorted_values(work, stable_sort)
    value = _coefficients(n, k, work.device, work.dtype)["value"]
    return (ordered * value).sum(dim=-1).to(rewards.dtype)


def maxk_gradient_weights(
    rewards: torch.Tensor,
    k: int,
    *,
    variance_reduction: VarianceReduction = "none",
    stable_sort: bool = True,
) -> torch.Tensor:
    """Per-sample weights ``w`` with ``E[sum_i w_i grad log p(x_i)] = grad E[max of k]``.

    ``"none"``:        ``w_i = (1 / C(n, k)) * sum_{|S|=k, S ni i} max_{j in S} g_j``
    ``"sample_loo"``:  ``w_i = s_i - (k / n) * rho_hat_k(g_{-i})``              (n > k)
    ``"subloo"``:      ``w_i = (1 / C(n, k)) * sum_{S ni i} (max_S g - max_{S \\ i} g)``  (k >= 2)

    (see the module docstring for the derivations). Use them as REINFORCE advantages:
    ``loss = -(w.detach() * log_likelihood).sum(-1).mean()``.

    Args:
        rewards: float ``[B, n]`` (larger is better; pass ``-tour_length`` for TSP).
        k: subset size, ``1 <= k <= n``.
        variance_reduction: ``"none"``, ``"sample_loo"`` or ``"subloo"``.
        stable_sort: ``torch.sort``'s ``stable`` flag where it is used; the result does
            not depend on the tie order (tied samples share one weight).

    Returns:
        float ``[B, n]``, in the original sample order, rewards' dtype and device.

    Raises:
        ValueError: bad shape/dtype, k outside [1, n], an unknown mode, ``"sample_loo"``
            with n <= k, or ``"subloo"`` with k < 2.
    """
    where = "maxk_gradient_weights"
    _check_arguments(where, rewards, k)
    n = rewards.shape[1]
    if variance_reduction not in VARIANCE_REDUCTIONS:
        raise ValueError(
            f"{where}: variance_reduction must be one of {', '.join(map(repr, VARIANCE_REDUCTIONS))}, "
            f"got {variance_reduction!r}"
        )
    if variance_reduction == "sample_loo" and not n > k:
        raise ValueError(
            f"{where}: variance_reduction='sample_loo' needs n > k (a k-subset without sample i), got n={n}, k={k}"
        )
    if variance_reduction == "subloo" and k < 2:
        raise ValueError(f"{where}: variance_reduction='subloo' needs k >= 2 (a non-empty S minus i), got k={k}")

    work = rewards.to(_working_dtype(rewards))
    # Tied rewards get equal weights whatever their order in the sort, so the packed CPU
    # sort's one-pass order serves.
    ordered, order = _sort_rows(work, stable_sort, descending=_DESCENDING[variance_reduction], exact_tie_order=False)
    weights_sorted = _weights_in_sorted_order(ordered, k, variance_reduction)
    if ordered.device.type != "cpu":
        # Parallel scans (CUDA) add a zero gap along another rounding path: copy. Done
        # unconditionally (a no-op without ties): testing for ties first would cost a
        # host sync on every call.
        weights_sorted = _share_within_ties(ordered, weights_sorted)
    weights = torch.empty_like(weights_sorted).scatter_(-1, order, weights_sorted)
    return weights.to(rewards.dtype)


def pass_at_k_estimate(num_samples: int, num_correct: torch.Tensor, k: int) -> torch.Tensor:
    """Closed-form pass@k estimator ``1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021).

    Equal to :func:`maxk_reward_estimate` on 0/1 rewards with ``c`` ones; provided for
    callers that only have counts. ``num_correct``: integer or float tensor of any shape.
    """
    if not 1 <= k <= num_samples:
        raise ValueError(f"pass_at_k_estimate: k must satisfy 1 <= k <= n={num_samples}, got k={k}")
    correct = num_correct.to(torch.float64)
    if bool(((correct < 0) | (correct > num_samples)).any()):
        raise ValueError(f"pass_at_k_estimate: num_correct must lie in [0, {num_samples}]")
    failures = torch.full_like(correct, float(num_samples)) - correct
    all_fail = torch.exp(
        _log_binomial(failures, torch.full_like(failures, float(k)))
        - _log_binomial(
            torch.tensor(float(num_samples), dtype=torch.float64), torch.tensor(float(k), dtype=torch.float64)
        )
    )
    return (1.0 - all_fail).to(num_correct.dtype if num_correct.is_floating_point() else torch.float32)

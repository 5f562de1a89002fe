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

Two identities the computation uses (both follow from the subset sums above):

* ``"sample_loo"`` is the ``"none"`` weights centred and rescaled,
  ``w_i = n/(n-k) * (s_i - mean_j s_j)``: a subset without i is any subset minus one
  with i, ``C(n-1, k) rho_hat_k(g_{-i}) = C(n, k) (rho_hat - s_i)``, and
  ``sum_i s_i = k rho_hat``.
* ``"subloo"`` is a cumulative sum over the gaps between neighbouring sorted rewards,
  ``w_(p) = (1 / C(n, k)) * sum_{r=2}^{p} C(r-1, k-1) (g_(r) - g_(r-1))`` (1-based):
  every term is >= 0, so it has no cancellation at all.

Computation: one sort per row plus one or two cumulative sums, O(n log n) per row,
batched over rows, on any device. On the CPU, float32 rows are sorted by NumPy's SIMD
sort as float64 keys that carry each sample's position in their spare mantissa bits
(~20x faster than ``torch.sort``; ~0.4 ms for all of ``maxk_gradient_weights`` at
B=512, n=128 on one core, ``bench/maxk.py``). Binomial ratios are formed as
``exp(lgamma(..) - lgamma(..))`` in float64 (no binomial is ever materialised, so
n = 4096 with any k is fine), cached per (n, k, device), and cast to the rewards' dtype;
half-precision rewards are processed in float32. Exclusive sums are cumulative sums over
a slice, never ``cumsum - x`` (that cancels catastrophically in float32 when a
coefficient is ~n times the partial sum, as at k near n).

Ties: all three estimators are symmetric in tied values (Pascal's rule makes the rank
formulas agree for equal rewards), so any tie order gives the same exact result. In
floating point, members of a run of equal rewards are given the weight computed for one
member of the run, so equal rewards get bit-identical weights and the result does not
depend on the tie order at all. ``stable_sort`` makes the sort itself order ties by
position (deterministic and stable, as ``torch.sort(stable=True)``).
"""
from __future__ import annotations

import functools
from typing import Literal

import numpy as np
import torch

from pglab.contracts import check_tensor
from pglab.estimators._checks import FLOATS

VarianceReduction = Literal["none", "sample_loo", "subloo"]
VARIANCE_REDUCTIONS: tuple[str, ...] = ("none", "sample_loo", "subloo")


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


@functools.lru_cache(maxsize=128)
def _coefficients(n: int, k: int, device: torch.device, dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    """Per-rank coefficients (0-based rank r = 0..n-1), ``[n]`` each, in ``dtype``.

    ``value[r]   = C(r, k-1)   / C(n, k)``     weight of g_(r) in rho_hat and diagonal of s
    ``above[r]   = C(r-1, k-2) / C(n, k)``     weight of a higher-ranked g_(r) in s below it
    ``loo_lo[r]  = C(r, k-1)   / C(n-1, k)``   rho_hat_k(x_{-p}) weight of g_(r), r < p
    ``loo_hi[r]  = C(r-1, k-1) / C(n-1, k)``   rho_hat_k(x_{-p}) weight of g_(r), r > p

    Computed in float64 and cast once; cached per (n, k, device, dtype) because they
    depend on nothing else and rebuilding (or even re-casting) them costs a handful of
    small kernels per call, a visible share of a ~0.1 ms estimator.
    """
    rank = torch.arange(n, dtype=torch.float64, device=device)
    table = {
        "value": _binomial_ratio(rank, k - 1, n, k),
        "above": _binomial_ratio(rank - 1, k - 2, n, k) if k >= 2 else torch.zeros_like(rank),
    }
    if n > k:
        table["loo_lo"] = _binomial_ratio(rank, k - 1, n - 1, k)
        table["loo_hi"] = _binomial_ratio(rank - 1, k - 1, n - 1, k)
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


def _exclusive_cumsum(values: torch.Tensor) -> torch.Tensor:
    """``out[..., p] = sum_{j < p} values[..., j]`` (used for the run ids of tied rewards)."""
    inclusive = torch.cumsum(values, dim=-1)
    out = torch.zeros_like(inclusive)
    out[..., 1:] = inclusive[..., :-1]
    return out


def _reverse_cumsum(values: torch.Tensor) -> torch.Tensor:
    """``out[..., p] = sum_{j >= p} values[..., j]`` (summed from the top)."""
    return torch.flip(torch.cumsum(torch.flip(values, dims=(-1,)), dim=-1), dims=(-1,))


def _sample_loo_from_none(n: int, k: int) -> bool:
    """Whether ``"sample_loo"`` is computed as ``n/(n-k) * (s - mean(s))``.

    That identity costs one cheap pass over the ``"none"`` weights instead of a second
    cumulative sum, but it cancels: the spread of ``s`` across a row shrinks like
    ``(n - k) / n`` as k nears n (every subset then holds the best sample), so the
    rounding error of ``s`` is amplified ~``n / (n - k)``-fold. For ``2k <= n`` that is
    at most 2x; beyond it the ranks-below/ranks-above sums are used (stable for every k).
    """
    return 2 * k <= n


def _sorts_descending(mode: str, n: int, k: int) -> bool:
    """The sort order each mode's weights are computed in: the one where its sum over
    other ranks runs over the positions *before* each sample, a plain cumulative sum (a
    sum over the positions after it needs two flips as well)."""
    return mode == "none" or (mode == "sample_loo" and _sample_loo_from_none(n, k))


@functools.lru_cache(maxsize=128)
def _sorted_coefficients(n: int, k: int, mode: str, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The per-position coefficient vectors :func:`_weights_in_sorted_order` uses for
    one mode, in its sort order (:func:`_sorts_descending`); formed in float64 from
    :func:`_coefficients`, cast once, cached."""
    coef = _coefficients(n, k, device)
    if mode == "subloo":
        # Ascending; the weight of the gap g_(r) - g_(r-1) is value_r (0 for r = 0).
        out = {"gap": torch.cat([coef["value"].new_zeros(1), coef["value"][1:]])}
    elif _sorts_descending(mode, n, k):
        scale = n / (n - k) if mode == "sample_loo" else 1.0
        # Descending: position j holds rank n-1-j. The rank's own `above` term is moved
        # from the diagonal into the (then inclusive) cumulative sum.
        value, above = (scale * torch.flip(coef[name], dims=(0,)) for name in ("value", "above"))
        out = {"diagonal": value - above, "above": above}
    else:  # sample_loo, 2k > n: ascending, exclusive sums over the ranks below and above
        out = {
            "value": coef["value"],
            "below": -(k / n) * coef["loo_lo"][:-1],  # (the baseline's lower ranks)
            "above": (coef["above"] - (k / n) * coef["loo_hi"])[1:],
        }
    return {name: vector.to(dtype).contiguous() for name, vector in out.items()}


def _weights_in_sorted_order(ordered: torch.Tensor, k: int, mode: str) -> torch.Tensor:
    """One mode's weights for rewards sorted along the last axis (``[B, n]``, in the
    mode's order, :func:`_sorts_descending`), in that order.

    In ascending rank order ``g_(0) <= ... <= g_(n-1)`` (``value``, ``above``, ``loo_lo``,
    ``loo_hi`` are :func:`_coefficients`; ``below_q = C(q, k-2) / C(n, k)``):

    * ``"none"``:   ``s_(p) = value_p g_(p) + sum_{q>p} above_q g_(q)``. Computed
      descending, where the sum runs over earlier positions, as an inclusive cumulative
      sum with ``above_p`` moved out of the diagonal: safe, as ``above_r / value_r =
      (k-1)/r <= 1``, so the extra rounding is at most that of the diagonal term.
    * ``"subloo"``: ``w_(p) = sum_{q<p} below_q (g_(p) - g_(q)) = sum_{r=1}^{p} value_r
      (g_(r) - g_(r-1))`` (write each difference as a sum of gaps between neighbours;
      ``sum_{q<r} below_q = value_r``). Every term is >= 0: no cancellation at all,
      weights >= 0 and non-decreasing in rank, and no need to centre the rewards.
    * ``"sample_loo"``: ``w_(p) = s_(p) - (k/n) [sum_{q<p} loo_lo_q g_(q) + sum_{q>p}
      loo_hi_q g_(q)]``, which equals ``n/(n-k) (s_(p) - mean_q s_(q))`` (used where
      :func:`_sample_loo_from_none`). The general form takes exclusive sums over slices
      (never ``cumsum - x``, which cancels in float32 when a coefficient is ~n times the
      partial sum, as at k near n).
    """
    n = ordered.shape[-1]
    coef = _sorted_coefficients(n, k, mode, ordered.device, ordered.dtype)
    if mode == "subloo":
        weights = torch.diff(ordered, dim=-1, prepend=ordered[..., :1])  # g_(r) - g_(r-1); 0 at r = 0
        weights *= coef["gap"]
        return weights.cumsum_(dim=-1)
    if "diagonal" in coef:
        weights = torch.addcmul(torch.cumsum(coef["above"] * ordered, dim=-1), coef["diagonal"], ordered)
        if mode == "sample_loo":
            weights -= weights.mean(dim=-1, keepdim=True)
        return weights
    weights = coef["value"] * ordered
    weights[..., 1:] += torch.cumsum(coef["below"] * ordered[..., :-1], dim=-1)
    weights[..., :-1] += _reverse_cumsum(coef["above"] * ordered[..., 1:])
    return weights


def _share_within_ties(ordered: torch.Tensor, weights_sorted: torch.Tensor, has_ties: bool) -> torch.Tensor:
    """Give every member of a run of equal rewards the weight of the run's top rank.

    Tied samples are exchangeable, so their exact weights are equal (Pascal's rule makes
    the rank formulas agree); the cumulative sums reach them along different rounding
    paths, though. Copying one value makes equal rewards get bit-identical weights, so
    the result does not depend on how the sort ordered the ties.
    """
    if not has_ties:  # the common case for continuous rewards
        return weights_sorted
    tied_with_next = ordered[..., 1:] == ordered[..., :-1]
    # run_id[p] = number of runs that end before p; each run's weight is read at its end.
    run_ends = torch.ones_like(ordered, dtype=torch.bool)
    run_ends[..., :-1] = ~tied_with_next
    run_id = _exclusive_cumsum(run_ends.to(torch.int64))
    at_end = torch.where(run_ends, weights_sorted, torch.zeros_like(weights_sorted))
    run_weight = torch.zeros_like(weights_sorted).scatter_add_(-1, run_id, at_end)
    return run_weight.gather(-1, run_id)


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


def _has_adjacent_equal(ordered: np.ndarray) -> bool:
    """Whether any row of a row-sorted NumPy array holds two equal values.

    A flat comparison first (one contiguous pass, ~4x cheaper than the row-wise one);
    it also compares each row's last value with the next row's first, so a hit is
    confirmed row by row.
    """
    flat = ordered.reshape(-1)
    if not (flat[1:] == flat[:-1]).any():
        return False
    return bool((ordered[:, 1:] == ordered[:, :-1]).any())


def _sort_rows(work: torch.Tensor, stable: bool, descending: bool = False) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Sort each row: ``(values, indices, has_ties)``.

    ``values, indices`` are as from ``torch.sort(work, dim=-1, descending=descending,
    stable=stable)``; ``has_ties`` says whether any row holds two equal rewards.

    On the CPU, float32 rows go through :func:`_packed_sort` (NumPy's SIMD sort of
    float64 keys with the position in the spare mantissa bits: ~0.15 ms against ~2 ms
    for ``torch.sort`` at 512 x 128). Tied rewards come out in the stable order whenever
    ``stable`` is set (re-sorted with the stable encoding when a tie is found). Without
    autograd the sorted values are read off the keys; with it they are gathered from
    ``work`` so that autograd sees the sort.
    """
    packed = _packed_sort(work, descending, stable=False) if _uses_packed_sort(work) else None
    if packed is None:
        values, indices = torch.sort(work, dim=-1, descending=descending, stable=stable)
        has_ties = bool((values[..., 1:] == values[..., :-1]).any())
        return values, indices, has_ties
    values, indices = packed
    has_ties = _has_adjacent_equal(values.numpy())
    if has_ties and stable:
        values, indices = _packed_sort(work, descending, stable=True)
    if work.requires_grad:
        return work.gather(-1, indices), indices, has_ties
    return values, indices, has_ties


def _sorted_values(work: torch.Tensor, stable: bool) -> torch.Tensor:
    """Each row's values in ascending order (no permutation needed: the value estimate).

    A plain NumPy sort of float32 values (SIMD) on the CPU when autograd is not
    involved, ~15x faster than ``torch.sort``; otherwise :func:`_sort_rows`.
    """
    if _uses_packed_sort(work) and not work.requires_grad:
        return torch.from_numpy(np.sort(work.contiguous().numpy(), axis=-1))
    return _sort_rows(work, stable)[0]


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
        raise ValueError(f"{where}: variance_reduction='sample_loo' needs n > k (a k-subset without sample i), got n={n}, k={k}")
    if variance_reduction == "subloo" and k < 2:
        raise ValueError(f"{where}: variance_reduction='subloo' needs k >= 2 (a non-empty S minus i), got k={k}")

    work = rewards.to(_working_dtype(rewards))
    ordered, order, has_ties = _sort_rows(work, stable_sort, descending=_sorts_descending(variance_reduction, n, k))
    centred = ordered
    if variance_reduction == "sample_loo":
        # The mode is invariant to a constant shift of the rewards; centring each row on
        # its median removes the cancellation between s_i and its baseline when
        # |rewards| >> spread. A shift keeps the order, so it is applied after the sort,
        # to the sorted row (where the median is the middle entry). subloo needs none.
        centred = ordered - ordered[..., n // 2 : n // 2 + 1]
    weights_sorted = _weights_in_sorted_order(centred, k, variance_reduction)
    weights_sorted = _share_within_ties(ordered, weights_sorted, has_ties)
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
        - _log_binomial(torch.tensor(float(num_samples), dtype=torch.float64), torch.tensor(float(k), dtype=torch.float64))
    )
    return (1.0 - all_fail).to(num_correct.dtype if num_correct.is_floating_point() else torch.float32)

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

Computation: one sort per row plus cumulative sums, O(n log n) per row, batched over
rows, on any device (CPU float32 rows use NumPy's SIMD sort, ~5-15x faster than
``torch.sort``). Binomial ratios are formed as ``exp(lgamma(..) - lgamma(..))`` in
float64 (no binomial is ever materialised, so n = 4096 with any k is fine), cached per
(n, k, device), and cast to the rewards' dtype; half-precision rewards are processed in
float32. Exclusive prefix sums are shifted, never ``cumsum - x`` (that cancels
catastrophically in float32 when a coefficient is ~n times the partial sum).

Ties: all three estimators are symmetric in tied values (Pascal's rule makes the rank
formulas agree for equal rewards), so any tie order gives the same exact result. In
floating point, members of a run of equal rewards are given the weight computed for the
run's top rank, so equal rewards get bit-identical weights and the result does not
depend on the tie order at all; ``stable_sort`` only selects ``torch.sort``'s algorithm
where that is used (non-CPU or float64 rows).
"""
from __future__ import annotations

import functools
from typing import Literal

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
    ``below[r]   = C(r, k-2)   / C(n, k)``     subloo: weight of a lower-ranked g_(r)

    Computed in float64 and cast once; cached per (n, k, device, dtype) because they
    depend on nothing else and rebuilding (or even re-casting) them costs a handful of
    small kernels per call, a visible share of a ~0.1 ms estimator.
    """
    rank = torch.arange(n, dtype=torch.float64, device=device)
    table = {
        "value": _binomial_ratio(rank, k - 1, n, k),
        "above": _binomial_ratio(rank - 1, k - 2, n, k) if k >= 2 else torch.zeros_like(rank),
        "below": _binomial_ratio(rank, k - 2, n, k) if k >= 2 else torch.zeros_like(rank),
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
    """``out[..., p] = sum_{j < p} values[..., j]``.

    Shifted, not ``cumsum - values``: the last coefficients can be ~n times larger than
    the partial sum they would be subtracted from (catastrophic cancellation in float32).
    """
    inclusive = torch.cumsum(values, dim=-1)
    out = torch.zeros_like(inclusive)
    out[..., 1:] = inclusive[..., :-1]
    return out


def _exclusive_reverse_cumsum(values: torch.Tensor) -> torch.Tensor:
    """``out[..., p] = sum_{j > p} values[..., j]`` (summed from the top, shifted)."""
    inclusive = torch.flip(torch.cumsum(torch.flip(values, dims=(-1,)), dim=-1), dims=(-1,))
    out = torch.zeros_like(inclusive)
    out[..., :-1] = inclusive[..., 1:]
    return out


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


def _uses_packed_sort(work: torch.Tensor) -> bool:
    return work.device.type == "cpu" and work.dtype == torch.float32 and work.shape[-1] < 2**32


@functools.lru_cache(maxsize=32)
def _positions(n: int):
    import numpy as np

    return np.arange(n, dtype=np.uint64)


def _sort_rows(work: torch.Tensor, stable: bool) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Ascending sort of each row: ``(values, indices, has_ties)``.

    ``values, indices`` are as from ``torch.sort(dim=-1)``; ``has_ties`` says whether
    any row holds two equal rewards.

    On the CPU, float32 rows are sorted as packed 64-bit integer keys
    ``(monotone_bits(g) << 32) | index`` by NumPy's SIMD sort: ~5x faster than
    ``torch.sort`` here (the sort dominates the estimator's cost), and the index in the
    low bits breaks ties by position, i.e. the result is always the stable order. The
    monotone map is the usual one for IEEE floats: flip every bit of a negative number,
    only the sign bit of a non-negative one (``+ 0.0`` first turns -0.0 into +0.0).
    Ties are read off the sorted high words (equal keys <=> equal floats). Values are
    gathered from ``work`` so autograd still sees the sort.
    """
    if not _uses_packed_sort(work):
        values, indices = torch.sort(work, dim=-1, stable=stable)
        has_ties = bool((values[..., 1:] == values[..., :-1]).any())
        return values, indices, has_ties
    import numpy as np

    u32, u64 = np.uint32, np.uint64
    bits = (work.detach() + 0.0).contiguous().numpy().view(u32)
    keys = bits ^ ((u32(0) - (bits >> u32(31))) | u32(0x80000000))
    packed = keys.astype(u64)
    packed <<= u64(32)
    packed |= _positions(work.shape[-1])
    packed.sort(axis=-1)
    # Little-endian words of each packed key: [index, key].
    words = packed.view(u32)
    high = words[..., 1::2]
    has_ties = bool((high[..., 1:] == high[..., :-1]).any())
    order = torch.from_numpy(words[..., 0::2].astype(np.int64))
    return work.gather(-1, order), order, has_ties


def _sorted_values(work: torch.Tensor, stable: bool) -> torch.Tensor:
    """Each row's values in ascending order (no permutation needed: the value estimate).

    A plain NumPy sort of float32 values (SIMD) on the CPU when autograd is not
    involved, ~15x faster than ``torch.sort``; otherwise :func:`_sort_rows`.
    """
    if _uses_packed_sort(work) and not work.requires_grad:
        import numpy as np

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
    if variance_reduction != "none":
        # Both baselined modes are invariant to a constant shift of the rewards; centring
        # first removes the cancellation between s_i and its baseline when |mean| >> spread.
        work = work - work.mean(dim=-1, keepdim=True)
    ordered, order, has_ties = _sort_rows(work, stable_sort)
    coef = _coefficients(n, k, work.device, work.dtype)

    if variance_reduction == "subloo":
        # w_(p) = C(p, k-1)/C(n,k) * g_(p) - sum_{q < p} C(q, k-2)/C(n,k) * g_(q)
        weights_sorted = coef["value"] * ordered - _exclusive_cumsum(coef["below"] * ordered)
    else:
        # s_(p) = C(p, k-1)/C(n,k) * g_(p) + sum_{q > p} C(q-1, k-2)/C(n,k) * g_(q)
        weights_sorted = coef["value"] * ordered + _exclusive_reverse_cumsum(coef["above"] * ordered)
        if variance_reduction == "sample_loo":
            # rho_hat_k without sample p: ranks below p keep their rank, ranks above drop by one.
            leave_one_out = _exclusive_cumsum(coef["loo_lo"] * ordered) + _exclusive_reverse_cumsum(
                coef["loo_hi"] * ordered
            )
            weights_sorted = weights_sorted - (k / n) * leave_one_out

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

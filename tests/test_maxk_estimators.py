"""Max@K estimators against brute-force subset enumeration and exact expectations.

References used here:
* subsets: ``itertools.combinations`` over all C(n, k) subsets of the n samples;
* unbiasedness: every n-tuple of draws from a small categorical distribution is
  enumerated with its probability, so expectations are exact sums, not Monte Carlo;
* the exact objective ``E[max of k]`` is differentiated by autograd.
"""

import functools
import itertools
import math

import pytest
import torch

from pglab.errors import TensorContractError
from pglab.estimators import maxk_gradient_weights, maxk_reward_estimate
from pglab.estimators.maxk import pass_at_k_estimate

MODES = ("none", "sample_loo", "subloo")


# -- brute-force references -----------------------------------------------------------


def brute_rho(row: list[float], k: int) -> float:
    subsets = list(itertools.combinations(range(len(row)), k))
    return sum(max(row[j] for j in s) for s in subsets) / len(subsets)


def brute_weights(row: list[float], k: int, mode: str) -> list[float]:
    n = len(row)
    subsets = list(itertools.combinations(range(n), k))
    total = len(subsets)
    out = []
    for i in range(n):
        containing = [s for s in subsets if i in s]
        if mode == "none":
            out.append(sum(max(row[j] for j in s) for s in containing) / total)
        elif mode == "sample_loo":
            s_i = sum(max(row[j] for j in s) for s in containing) / total
            others = [row[j] for j in range(n) if j != i]
            out.append(s_i - (k / n) * brute_rho(others, k))
        else:  # subloo: each subset baselined by the best of its other k-1 members
            out.append(sum(max(row[j] for j in s) - max(row[j] for j in s if j != i) for s in containing) / total)
    return out


def mode_allowed(mode: str, n: int, k: int) -> bool:
    return not ((mode == "sample_loo" and n <= k) or (mode == "subloo" and k < 2))


# -- agreement with subset enumeration ------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_value_and_weights_match_subset_enumeration_including_ties(n):
    gen = torch.Generator().manual_seed(n)
    # Integer-valued rewards in a small range: many exact ties in every row.
    tied = torch.randint(-2, 3, (3, n), generator=gen).to(torch.float64)
    continuous = torch.randn(3, n, generator=gen, dtype=torch.float64)
    rewards = torch.cat([tied, continuous, torch.full((1, n), 0.5, dtype=torch.float64)])
    for k in range(1, n + 1):
        rho = maxk_reward_estimate(rewards, k)
        want_rho = torch.tensor([brute_rho(r.tolist(), k) for r in rewards], dtype=torch.float64)
        torch.testing.assert_close(rho, want_rho, rtol=1e-12, atol=1e-12)
        for mode in MODES:
            if not mode_allowed(mode, n, k):
                continue
            got = maxk_gradient_weights(rewards, k, variance_reduction=mode)
            want = torch.tensor([brute_weights(r.tolist(), k, mode) for r in rewards], dtype=torch.float64)
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=f"mode={mode} n={n} k={k}")


def test_tied_samples_get_identical_weights_and_order_does_not_matter():
    rewards = torch.tensor([[3.0, 1.0, 3.0, 2.0, 1.0, 3.0, 0.0]], dtype=torch.float64)
    perm = torch.tensor([4, 6, 0, 2, 5, 1, 3])
    for mode in MODES:
        w = maxk_gradient_weights(rewards, 3, variance_reduction=mode)
        # Equal rewards are exchangeable: their weights must be exactly equal.
        assert w[0, 0] == w[0, 2] == w[0, 5]
        assert w[0, 1] == w[0, 4]
        # Permuting the samples permutes the weights (original order is kept).
        w_perm = maxk_gradient_weights(rewards[:, perm], 3, variance_reduction=mode)
        torch.testing.assert_close(w_perm, w[:, perm], rtol=1e-14, atol=1e-14)
        unstable = maxk_gradient_weights(rewards, 3, variance_reduction=mode, stable_sort=False)
        torch.testing.assert_close(unstable, w, rtol=1e-14, atol=1e-14)


def test_all_equal_rewards_give_zero_baselined_weights():
    rewards = torch.full((2, 6), -4.25, dtype=torch.float64)
    assert torch.all(maxk_gradient_weights(rewards, 3, variance_reduction="sample_loo") == 0)
    assert torch.all(maxk_gradient_weights(rewards, 3, variance_reduction="subloo") == 0)
    # Without a baseline every sample is pushed with the common value times k/n.
    torch.testing.assert_close(
        maxk_gradient_weights(rewards, 3), torch.full((2, 6), -4.25 * 3 / 6, dtype=torch.float64)
    )


def test_k_equal_one_reduces_to_mean_and_rloo():
    gen = torch.Generator().manual_seed(1)
    rewards = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    n = rewards.shape[1]
    torch.testing.assert_close(maxk_reward_estimate(rewards, 1), rewards.mean(-1))
    torch.testing.assert_close(maxk_gradient_weights(rewards, 1), rewards / n)
    loo_mean = (rewards.sum(-1, keepdim=True) - rewards) / (n - 1)
    torch.testing.assert_close(
        maxk_gradient_weights(rewards, 1, variance_reduction="sample_loo"), (rewards - loo_mean) / n
    )
    # k = n: the estimate is the row maximum.
    torch.testing.assert_close(maxk_reward_estimate(rewards, n), rewards.max(-1).values)


def test_batched_rows_are_independent():
    gen = torch.Generator().manual_seed(2)
    rewards = torch.randn(5, 9, generator=gen, dtype=torch.float64)
    for mode in MODES:
        whole = maxk_gradient_weights(rewards, 4, variance_reduction=mode)
        rows = torch.cat([maxk_gradient_weights(r[None], 4, variance_reduction=mode) for r in rewards])
        torch.testing.assert_close(whole, rows, rtol=0, atol=1e-14)


# -- exact unbiasedness ---------------------------------------------------------------


def exact_expectations(logits: torch.Tensor, values: torch.Tensor, n: int, k: int):
    """Enumerate all m**n sample tuples of a categorical(softmax(logits)) with per-outcome
    reward ``values``. Returns E[rho_hat], {mode: E[gradient estimate]} and
    {mode: trace Cov[gradient estimate]} (all exact)."""
    m = logits.shape[0]
    probs = torch.softmax(logits, -1)
    tuples = torch.tensor(list(itertools.product(range(m), repeat=n)))  # [m**n, n]
    tuple_prob = probs[tuples].prod(-1)  # [m**n]
    rewards = values[tuples]  # [m**n, n]
    # d log softmax(logits)[x] / d logits = onehot(x) - probs
    scores = torch.nn.functional.one_hot(tuples, m).to(torch.float64) - probs  # [m**n, n, m]
    mean_rho = (tuple_prob * maxk_reward_estimate(rewards, k)).sum()
    mean_grad, var_grad = {}, {}
    for mode in MODES:
        if not mode_allowed(mode, n, k):
            continue
        w = maxk_gradient_weights(rewards, k, variance_reduction=mode)
        estimate = (w.unsqueeze(-1) * scores).sum(1)  # [m**n, m]
        mean = (tuple_prob[:, None] * estimate).sum(0)
        mean_grad[mode] = mean
        var_grad[mode] = (tuple_prob[:, None] * (estimate - mean) ** 2).sum()
    return mean_rho, mean_grad, var_grad


def exact_max_at_k(logits: torch.Tensor, values: torch.Tensor, k: int) -> torch.Tensor:
    """E[max of k i.i.d. draws] via the CDF: sum_v v * (F(v)^k - F(v-)^k) over sorted values."""
    probs = torch.softmax(logits, -1)
    order = torch.argsort(values)
    cdf = torch.cumsum(probs[order], 0)
    below = torch.cat([cdf.new_zeros(1), cdf[:-1]])
    return (values[order] * (cdf**k - below**k)).sum()


@pytest.mark.parametrize(("n", "k"), [(4, 2), (5, 3), (4, 4), (3, 1)])
def test_value_and_gradient_are_unbiased_by_exact_enumeration(n, k):
    # Four outcomes, two of them with the same reward (ties), and a large offset so that
    # the unbaselined estimator is noticeably noisier than the baselined ones.
    values = torch.tensor([10.0, 11.5, 11.5, 13.0], dtype=torch.float64)
    logits = torch.tensor([0.3, -0.2, 0.5, -0.7], dtype=torch.float64, requires_grad=True)
    target = exact_max_at_k(logits, values, k)
    (true_grad,) = torch.autograd.grad(target, logits)
    with torch.no_grad():
        mean_rho, mean_grad, _ = exact_expectations(logits.detach(), values, n, k)
    torch.testing.assert_close(mean_rho, target.detach(), rtol=1e-12, atol=1e-12)
    assert mean_grad, "at least one mode applies"
    for mode, grad in mean_grad.items():
        torch.testing.assert_close(grad, true_grad, rtol=1e-10, atol=1e-12, msg=f"mode={mode}")


def test_baselines_reduce_exact_gradient_variance_with_offset_rewards():
    values = torch.tensor([10.0, 11.5, 11.5, 13.0], dtype=torch.float64)
    logits = torch.tensor([0.3, -0.2, 0.5, -0.7], dtype=torch.float64)
    _, _, var = exact_expectations(logits, values, 5, 2)
    # Exact variances (trace of covariance); the baselined modes remove the offset.
    assert var["sample_loo"] < 0.05 * var["none"]
    assert var["subloo"] < 0.05 * var["none"]
    # "none" is not shift-invariant: moving all rewards by -10 changes its variance only.
    _, _, var_shift = exact_expectations(logits, values - 10.0, 5, 2)
    torch.testing.assert_close(var_shift["sample_loo"], var["sample_loo"])
    torch.testing.assert_close(var_shift["subloo"], var["subloo"])
    assert var_shift["none"] < var["none"]


# -- pass@k ---------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "k"), [(10, 1), (10, 4), (16, 16), (200, 8)])
def test_binary_rewards_are_the_pass_at_k_estimator(n, k):
    gen = torch.Generator().manual_seed(n + k)
    rewards = (torch.rand(32, n, generator=gen) < torch.linspace(0, 1, 32)[:, None]).to(torch.float64)
    correct = rewards.sum(-1)
    closed = torch.tensor([1 - math.comb(n - int(c), k) / math.comb(n, k) for c in correct], dtype=torch.float64)
    torch.testing.assert_close(maxk_reward_estimate(rewards, k), closed, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(pass_at_k_estimate(n, correct, k), closed, rtol=1e-10, atol=1e-12)
    # "none" weights: k/n for a success, (k/n)(1 - C(n-1-c, k-1)/C(n-1, k-1)) for a failure.
    w = maxk_gradient_weights(rewards, k)
    fail = torch.tensor(
        # (a row without failures has no failure weight to check: use 0 there)
        [(k / n) * (1 - math.comb(n - 1 - int(c), k - 1) / math.comb(n - 1, k - 1)) if c < n else 0.0 for c in correct],
        dtype=torch.float64,
    )
    want = torch.where(rewards > 0, torch.full_like(rewards, k / n), fail[:, None].expand_as(rewards))
    torch.testing.assert_close(w, want, rtol=1e-10, atol=1e-12)


# -- numerics -------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 8, 1000, 4095, 4096])
def test_float32_with_n_4096_is_finite_and_matches_float64(k):
    gen = torch.Generator().manual_seed(k)
    # Negative tour lengths around -4 with spread 0.1: the regime of TSP rewards.
    rewards64 = -4.0 + 0.1 * torch.randn(4, 4096, generator=gen, dtype=torch.float64)
    rewards32 = rewards64.float()
    rho32 = maxk_reward_estimate(rewards32, k)
    assert rho32.dtype == torch.float32 and torch.isfinite(rho32).all()
    torch.testing.assert_close(rho32.double(), maxk_reward_estimate(rewards32.double(), k), rtol=1e-5, atol=1e-5)
    for mode in MODES:
        if not mode_allowed(mode, 4096, k):
            continue
        w32 = maxk_gradient_weights(rewards32, k, variance_reduction=mode)
        w64 = maxk_gradient_weights(rewards32.double(), k, variance_reduction=mode)
        assert w32.dtype == torch.float32 and torch.isfinite(w32).all()
        scale = w64.abs().max().clamp_min(1e-30)
        assert float((w32.double() - w64).abs().max() / scale) < 1e-5, mode
        # The weights of one row sum to k * rho_hat's own "sum" identity for "none":
        # sum_i s_i = k * rho_hat (each subset is counted once per member).
        if mode == "none":
            torch.testing.assert_close(w64.sum(-1), k * maxk_reward_estimate(rewards32.double(), k))


def test_half_precision_inputs_keep_their_dtype():
    rewards = torch.randn(3, 16).to(torch.bfloat16)
    assert maxk_reward_estimate(rewards, 4).dtype == torch.bfloat16
    assert maxk_gradient_weights(rewards, 4, variance_reduction="subloo").dtype == torch.bfloat16


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_matches_cpu():
    rewards = torch.randn(64, 128, dtype=torch.float64)
    rewards[32:] = torch.round(rewards[32:] * 4) / 4  # ties: shared on the GPU by copying
    for dtype in (torch.float64, torch.float32):
        for mode in MODES:
            cpu = maxk_gradient_weights(rewards.to(dtype), 8, variance_reduction=mode)
            gpu = maxk_gradient_weights(rewards.to(dtype).cuda(), 8, variance_reduction=mode)
            assert gpu.device.type == "cuda"
            torch.testing.assert_close(gpu.cpu(), cpu)
            same = rewards[:, :, None] == rewards[:, None, :]
            assert torch.all((gpu[:, :, None] == gpu[:, None, :])[same.cuda()])


def test_share_within_ties_copies_the_first_weight_of_each_run():
    from pglab.estimators.maxk import _share_within_ties

    ordered = torch.tensor(
        [[1.0, 1.0, 2.0, 3.0, 3.0, 3.0], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [5.0, 5.0, 5.0, 5.0, 2.0, 2.0]]
    )
    weights = torch.arange(18, dtype=torch.float32).reshape(3, 6) + 0.5
    want = weights.clone()
    for row in range(3):
        for j in range(1, 6):
            if ordered[row, j] == ordered[row, j - 1]:
                want[row, j] = want[row, j - 1]
    assert torch.equal(_share_within_ties(ordered, weights), want)


# -- argument errors ------------------------------------------------------------------


def test_invalid_arguments_raise_value_error():
    rewards = torch.randn(2, 4)
    with pytest.raises(ValueError, match="sample_loo.*n > k"):
        maxk_gradient_weights(rewards, 4, variance_reduction="sample_loo")
    with pytest.raises(ValueError, match="subloo.*k >= 2"):
        maxk_gradient_weights(rewards, 1, variance_reduction="subloo")
    with pytest.raises(ValueError, match="variance_reduction"):
        maxk_gradient_weights(rewards, 2, variance_reduction="loo")  # type: ignore[arg-type]
    for bad_k in (0, 5, 2.0, True):
        with pytest.raises(ValueError, match="k must"):
            maxk_reward_estimate(rewards, bad_k)  # type: ignore[arg-type]
    with pytest.raises(TensorContractError, match=r"rewards expected"):
        maxk_reward_estimate(torch.randn(4), 2)
    with pytest.raises(TensorContractError):
        maxk_gradient_weights(torch.ones(2, 4, dtype=torch.long), 2)
    assert issubclass(TensorContractError, ValueError)


def test_packed_cpu_sort_equals_torch_stable_sort():
    from pglab.estimators.maxk import _sort_rows

    gen = torch.Generator().manual_seed(5)
    rewards = torch.randint(-3, 4, (64, 33), generator=gen).float() * 0.5
    rewards[0, :4] = torch.tensor([-0.0, 0.0, float("inf"), -float("inf")])
    rewards[1] = torch.randn(33, generator=gen) * 1e30
    values, indices = _sort_rows(rewards, True)
    want_values, want_indices = torch.sort(rewards, dim=-1, stable=True)
    assert torch.equal(values, want_values)
    # -0.0 and 0.0 compare equal: both orders are valid stable sorts of that pair.
    assert torch.equal(indices[1:], want_indices[1:])
    assert torch.equal(indices[0, 2:], want_indices[0, 2:])


def test_fast_cpu_sorts_agree_with_torch_sort_and_detect_ties():
    from pglab.estimators.maxk import _has_ties, _sort_rows, _sorted_values

    gen = torch.Generator().manual_seed(6)
    distinct = torch.randn(16, 40, generator=gen)
    values, indices = _sort_rows(distinct, True)
    assert not _has_ties(values)
    assert torch.equal(values, torch.sort(distinct, dim=-1).values)
    assert torch.equal(_sorted_values(distinct, True), values)
    # One repeated value in one row is a tie (on either path); equal values in
    # neighbouring rows (row 0's last, row 1's first) are not.
    distinct[7, 3] = distinct[7, 30]
    assert _has_ties(_sort_rows(distinct, True)[0])
    assert _has_ties(_sort_rows(distinct.double(), True)[0])
    rows = torch.tensor([[1.0, 2.0], [2.0, 3.0]])
    assert not _has_ties(rows) and not _has_ties(rows.double())
    # With autograd the values are gathered, so gradients flow through the estimate.
    leaf = torch.randn(4, 10, generator=gen, requires_grad=True)
    torch.testing.assert_close(_sorted_values(leaf, True), torch.sort(leaf.detach(), dim=-1).values)
    assert _sorted_values(leaf, True).requires_grad


def _tricky_float32_rows(seed: int) -> torch.Tensor:
    """float32 rows exercising the packed CPU sort: ties among negative and positive
    rewards, both zeros, denormals, huge magnitudes and neighbouring floats."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randint(-3, 4, (48, 33), generator=gen).float() * 0.5  # many ties, both signs
    rows[0] = -4.0 - torch.rand(33, generator=gen)  # negative, like -tour_length
    rows[0, ::3] = rows[0, 1]  # a run of equal negative rewards
    rows[1] = torch.randn(33, generator=gen) * 1e30
    rows[2] = torch.randn(33, generator=gen) * 1e-40  # float32 denormals
    rows[3] = torch.nextafter(torch.full((33,), 1.0), torch.tensor(2.0)) * torch.arange(33).remainder(2)
    rows[4, :6] = torch.tensor([0.0, 0.0, 1e-45, -1e-45, 0.0, 0.0])
    return rows


@pytest.mark.parametrize("descending", [False, True])
def test_packed_cpu_sort_is_the_stable_sort_in_both_directions(descending):
    from pglab.estimators.maxk import _sort_rows

    rewards = _tricky_float32_rows(7)
    want_values, want_indices = torch.sort(rewards, dim=-1, descending=descending, stable=True)
    values, indices = _sort_rows(rewards, True, descending=descending)
    assert torch.equal(values, want_values)
    assert torch.equal(indices, want_indices)
    # Without `stable` the order of ties is only deterministic; values and the
    # permutation still agree.
    values, indices = _sort_rows(rewards, True, descending=descending, exact_tie_order=False)
    assert torch.equal(values, want_values)
    assert torch.equal(rewards.gather(-1, indices), values)
    assert torch.equal(indices.sort(-1).values, torch.arange(33).expand(48, 33))
    # A row without ties takes the one-sort path and is still the stable order.
    distinct = rewards[1:2]
    values, indices = _sort_rows(distinct, True, descending=descending)
    assert torch.equal(indices, torch.sort(distinct, descending=descending).indices)


def test_packed_cpu_sort_falls_back_for_infinities_and_nan():
    from pglab.estimators.maxk import _packed_sort, _sort_rows

    rewards = torch.randn(3, 9, generator=torch.Generator().manual_seed(8))
    rewards[0, 0] = float("inf")  # at position 0 no bits are set: still a valid key
    assert _packed_sort(rewards, descending=False, stable=False) is not None
    rewards[1, 4] = -float("inf")  # becomes NaN with its position bits: not packable
    assert _packed_sort(rewards, descending=False, stable=False) is None
    for descending in (False, True):
        values, indices = _sort_rows(rewards, True, descending=descending)
        want = torch.sort(rewards, dim=-1, descending=descending, stable=True)
        assert torch.equal(values, want.values) and torch.equal(indices, want.indices)
    rewards[2, 2] = float("nan")
    values, _ = _sort_rows(rewards, True)
    assert torch.equal(values.isnan(), torch.sort(rewards, dim=-1).values.isnan())


@pytest.mark.parametrize("n", [2, 5, 8])
def test_float32_cpu_path_matches_subset_enumeration_and_shares_ties_exactly(n):
    gen = torch.Generator().manual_seed(10 + n)
    tied = torch.randint(-2, 3, (4, n), generator=gen).float() * 0.75 - 4.0
    continuous = torch.randn(4, n, generator=gen) * 0.3 - 4.0
    rewards = torch.cat([tied, continuous, -tied])
    for k in range(1, n + 1):
        for mode in MODES:
            if not mode_allowed(mode, n, k):
                continue
            got = maxk_gradient_weights(rewards, k, variance_reduction=mode)
            assert got.dtype == torch.float32
            want = torch.tensor([brute_weights(r.double().tolist(), k, mode) for r in rewards], dtype=torch.float64)
            torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6, msg=f"mode={mode} n={n} k={k}")
            # Equal rewards get bit-identical weights, whichever sort order is used.
            same = rewards[:, :, None] == rewards[:, None, :]
            assert torch.all((got[:, :, None] == got[:, None, :])[same])
            unstable = maxk_gradient_weights(rewards, k, variance_reduction=mode, stable_sort=False)
            assert torch.equal(unstable, got)


@pytest.mark.parametrize(("n", "k"), [(6, 1), (6, 3), (6, 5), (40, 8), (40, 39)])
def test_sample_loo_is_the_centred_rescaled_none_weights(n, k):
    """w_i = s_i - (k/n) rho_hat_k(g_{-i}) = n/(n-k) (s_i - mean_j s_j), since
    C(n-1, k) rho_hat_k(g_{-i}) = C(n, k) (rho_hat - s_i) and sum_i s_i = k rho_hat."""
    gen = torch.Generator().manual_seed(n * k)
    rewards = torch.randn(6, n, generator=gen, dtype=torch.float64) - 4.0
    loo = maxk_gradient_weights(rewards, k, variance_reduction="sample_loo")
    none = maxk_gradient_weights(rewards, k)
    torch.testing.assert_close(loo, n / (n - k) * (none - none.mean(-1, keepdim=True)), rtol=1e-10, atol=1e-12)
    # The explicit definition, one row at a time: rho_hat_k of the other n-1 samples.
    for i in range(n):
        others = torch.cat([rewards[0, :i], rewards[0, i + 1 :]])[None]
        want = none[0, i] - (k / n) * maxk_reward_estimate(others, k)[0]
        torch.testing.assert_close(loo[0, i], want, rtol=1e-10, atol=1e-12)


def test_subloo_weights_are_nonnegative_nondecreasing_and_zero_for_the_worst():
    gen = torch.Generator().manual_seed(11)
    rewards = torch.randn(64, 128, generator=gen) * 0.3 - 4.0
    k = 8
    w = maxk_gradient_weights(rewards, k, variance_reduction="subloo")
    assert torch.all(w >= 0)
    by_rank = w.gather(-1, rewards.argsort(-1))
    assert torch.all(by_rank[:, 1:] >= by_rank[:, :-1])
    assert torch.all(by_rank[:, : k - 1] == 0) and torch.all(by_rank[:, k - 1 :] > 0)


@pytest.mark.parametrize("offset", [0.0, 1e3, -1e4])
def test_float32_baselined_weights_survive_a_large_reward_offset(offset):
    gen = torch.Generator().manual_seed(12)
    rewards32 = (offset + 0.05 * torch.randn(16, 128, generator=gen, dtype=torch.float64)).float()
    for mode in ("sample_loo", "subloo"):
        w32 = maxk_gradient_weights(rewards32, 8, variance_reduction=mode)
        w64 = maxk_gradient_weights(rewards32.double(), 8, variance_reduction=mode)
        assert float((w32.double() - w64).abs().max() / w64.abs().max()) < 1e-5, mode


def test_weights_are_differentiable_through_the_rewards():
    """Autograd sees the sort on both paths (float64: torch.sort; float32 CPU: packed
    keys, values gathered from the input), and both give the same gradient."""
    gen = torch.Generator().manual_seed(13)
    rewards = torch.randn(3, 9, generator=gen, dtype=torch.float64)
    cotangent = torch.randn(3, 9, generator=gen, dtype=torch.float64)
    for mode in MODES:
        leaf = rewards.clone().requires_grad_(True)
        assert torch.autograd.gradcheck(functools.partial(maxk_gradient_weights, k=3, variance_reduction=mode), (leaf,))
        (grad64,) = torch.autograd.grad(
            (maxk_gradient_weights(leaf, 3, variance_reduction=mode) * cotangent).sum(), leaf
        )
        leaf32 = rewards.float().requires_grad_(True)
        weights32 = maxk_gradient_weights(leaf32, 3, variance_reduction=mode)
        (grad32,) = torch.autograd.grad((weights32 * cotangent.float()).sum(), leaf32)
        torch.testing.assert_close(grad32.double(), grad64, rtol=1e-5, atol=1e-6)

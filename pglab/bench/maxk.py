"""Max@K estimator speed and memory: vectorised (sort + cumsum) vs brute-force subsets.

``python bench/maxk.py`` prints, for ``rewards[B, n]`` with k samples per subset:

* ms per call of ``maxk_reward_estimate`` and of ``maxk_gradient_weights`` in each mode,
  and once more for rewards rounded to 0.01 (ties in every row);
* peak extra memory of one call (CPU: tracemalloc cannot see torch's allocator, so the
  number is the sum of the sizes of the intermediate tensors the algorithm creates,
  measured with ``torch.profiler``'s memory profiling, which does not see NumPy arrays
  (the value estimate's sorted copy); CUDA: ``max_memory_allocated``);
* the brute-force reference (a ``[C(n, k), k]`` index table, gathered per row): it is
  timed on a smaller case (``--brute-n``) because C(128, 8) = 1.4e12 subsets cannot be
  enumerated; the table reports its cost per subset and the extrapolated time.
* ``--rl4co``: one MaxKPOMO vs POMO training step on TSP (overhead of the Max@K loss);
* ``--variance DRAWS``: empirical gradient variance of each mode on TSP20;
* ``--json``: the same figures as JSON.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import time
from collections.abc import Callable

import torch

from pglab.estimators.maxk import (
    VARIANCE_REDUCTIONS,
    VarianceReduction,
    maxk_gradient_weights,
    maxk_reward_estimate,
)
from pglab.extras import require


def _time(fn, repeats: int, device: torch.device, *, clock=time.perf_counter) -> float:
    """Median time of ``fn()`` in ms (after two warm-up calls) on ``clock``."""
    for _ in range(2):
        fn()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = clock()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        samples.append((clock() - start) * 1e3)
    samples.sort()
    return samples[len(samples) // 2]


def _cpu_time(fn, repeats: int, device: torch.device) -> float:
    """Median CPU time of this thread per call in ms: on a shared, oversubscribed machine
    wall time mostly measures the scheduler; CPU time measures the work (1 thread)."""
    if device.type != "cpu":
        return float("nan")
    return _time(fn, repeats, device, clock=time.thread_time)


def _peak_memory_mb(fn, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated(device) - base) / 2**20
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    # Sum of positive allocations = every intermediate tensor (an upper bound on the peak).
    allocated = sum(max(event.cpu_memory_usage, 0) for event in prof.key_averages())
    return allocated / 2**20


def brute_force_weights(rewards: torch.Tensor, k: int) -> torch.Tensor:
    """Reference ``"none"`` weights: gather every k-subset and average its max (vectorised
    over the batch, O(C(n, k) * k) per row)."""
    n = rewards.shape[1]
    subsets = torch.tensor(list(itertools.combinations(range(n), k)), device=rewards.device)  # [S, k]
    subset_max = rewards[:, subsets].max(dim=-1).values  # [B, S]
    membership = torch.zeros(subsets.shape[0], n, dtype=rewards.dtype, device=rewards.device)
    membership.scatter_(1, subsets, 1.0)
    return subset_max @ membership / subsets.shape[0]


def _tiny_tsp_models(device: torch.device):
    import warnings

    from rl4co.envs import TSPEnv
    from rl4co.models.zoo.pomo import POMO

    from pglab.algos.maxk_pomo import MaxKPOMO

    warnings.filterwarnings("ignore", message=r".*self\.log\(\).*")
    warnings.filterwarnings("ignore", message=r".*is an instance of `nn.Module`.*")
    env = TSPEnv(generator_params={"num_loc": 20})
    policy_kwargs = {"embed_dim": 64, "num_encoder_layers": 3, "num_heads": 4}
    torch.manual_seed(0)
    models = {"pomo": POMO(env, policy_kwargs=policy_kwargs)}
    for mode in VARIANCE_REDUCTIONS:
        models[f"maxk-pomo/{mode}"] = MaxKPOMO(env, policy_kwargs=policy_kwargs, k=8, variance_reduction=mode)
        models[f"maxk-pomo/{mode}"].load_state_dict(models["pomo"].state_dict())
    return {name: model.to(device) for name, model in models.items()}


def _rl4co_overhead(device: torch.device, repeats: int) -> list[dict]:
    """Median ms of one training step (decode 64 x 20 tours, loss, backward) per model,
    timed in interleaved rounds so that load drifts hit every model alike; and the median
    ms of ``calculate_loss`` alone on the same ``[64, 20]`` tensors."""
    from tensordict import TensorDict

    models = _tiny_tsp_models(device)
    generator = torch.Generator().manual_seed(0)
    locs = torch.rand(64, 20, 2, generator=generator).to(device)
    # CPU time of this thread on the CPU (1 thread; robust to other jobs on a shared box).
    clock = time.thread_time if device.type == "cpu" else time.perf_counter
    step_ms: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(repeats + 1):
        for name, model in models.items():
            batch = TensorDict({"locs": locs}, batch_size=[locs.shape[0]], device=device)
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = clock()
            out = model.training_step(batch, 0)
            out["loss"].backward()
            if device.type == "cuda":
                torch.cuda.synchronize()
            step_ms[name].append((clock() - start) * 1e3)
            model.zero_grad(set_to_none=True)
    reward = -4 - torch.rand(64, 20, generator=generator).to(device)
    log_likelihood = torch.randn(64, 20, generator=generator).to(device).requires_grad_(True)
    rows = []
    for name, model in models.items():
        loss_ms = _time(
            lambda model=model: model.calculate_loss(None, {}, {}, reward, log_likelihood),
            repeats * 4,
            device,
            clock=clock,
        )
        samples = sorted(step_ms[name][1:])
        rows.append({"model": name, "step_ms": samples[len(samples) // 2], "loss_ms": loss_ms})
    return rows


def _gradient_variance(device: torch.device, draws: int) -> list[dict]:
    """Empirical variance of the Max@K gradient per mode on TSP20 (random-init policy).

    The same batch of 16 instances is decoded ``draws`` times (20 starts each); for each
    draw, the three modes' gradients are computed from the *same* tours (common random
    numbers). Reported: squared norm of the mean gradient, total variance
    ``E||g - mean g||^2`` and the variance relative to ``||target||^2``, the target
    being the mean over the draws of both baselined modes (lower: fewer samples for the
    same signal). All three estimate the same gradient; with few draws the "none" mean
    is itself noisy (its squared norm is inflated by about variance / draws).
    """
    from rl4co.utils.ops import unbatchify
    from tensordict import TensorDict

    from pglab.losses.maxk import maxk_policy_loss

    model = _tiny_tsp_models(device)["maxk-pomo/none"]
    params = [p for p in model.parameters() if p.requires_grad]
    generator = torch.Generator().manual_seed(1)
    locs = torch.rand(16, 20, 2, generator=generator).to(device)
    grads: dict[VarianceReduction, list[torch.Tensor]] = {mode: [] for mode in VARIANCE_REDUCTIONS}
    torch.manual_seed(2)
    for _ in range(draws):
        td = model.env.reset(TensorDict({"locs": locs}, batch_size=[16], device=device))
        out = model.policy(td, model.env, phase="train", num_starts=20)
        reward = unbatchify(out["reward"], 20)
        log_likelihood = unbatchify(out["log_likelihood"], 20)
        for mode in VARIANCE_REDUCTIONS:
            loss = maxk_policy_loss(log_likelihood, reward, 8, variance_reduction=mode)["loss"]
            parts = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
            flat = torch.cat(
                [(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(params, parts, strict=False)]
            )
            grads[mode].append(-flat.detach())
    # The common target gradient, estimated from the two low-variance modes.
    target = torch.stack(grads["sample_loo"] + grads["subloo"]).double().mean(0)
    rows = []
    for mode, samples in grads.items():
        stacked = torch.stack(samples).double()
        mean = stacked.mean(0)
        variance = float(((stacked - mean) ** 2).sum(1).mean())
        relative = variance / float(target.pow(2).sum())
        rows.append(
            {"mode": mode, "mean_sq_norm": float(mean.pow(2).sum()), "variance": variance, "relative": relative}
        )
    return rows


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/maxk.py", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--batch", type=int, default=512, help="B, rows (instances)")
    parser.add_argument("--n", type=int, default=128, help="samples per row")
    parser.add_argument("--k", type=int, default=8, help="subset size")
    parser.add_argument("--brute-n", type=int, default=14, help="n for the brute-force reference (C(n, k) subsets)")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--device", default="cpu", help="cpu | cuda")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--rl4co", action="store_true", help="also time one MaxKPOMO vs POMO training step")
    parser.add_argument(
        "--variance",
        type=int,
        default=0,
        metavar="DRAWS",
        help="also measure the gradient variance of each mode on TSP20 (needs rl4co)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of the tables")
    return parser.parse_args(argv)


def _estimator_timings(args: argparse.Namespace, rewards: torch.Tensor, device: torch.device) -> list[dict]:
    """Wall, CPU time and peak memory of each estimator call, and with ties in every row."""
    cases: list[tuple[str, Callable[[], torch.Tensor]]] = [
        ("maxk_reward_estimate", lambda: maxk_reward_estimate(rewards, args.k))
    ]
    for mode in VARIANCE_REDUCTIONS:
        weights = functools.partial(maxk_gradient_weights, rewards, args.k, variance_reduction=mode)
        cases.append((f"maxk_gradient_weights[{mode}]", weights))
    # Rewards on a grid of 0.01: ties in every row (tied samples then share one weight).
    tied = torch.round(rewards * 100) / 100
    cases.append(
        (
            "maxk_gradient_weights[subloo], ties",
            lambda: maxk_gradient_weights(tied, args.k, variance_reduction="subloo"),
        )
    )
    return [
        {
            "function": name,
            "wall_ms": _time(fn, args.repeats, device),
            "cpu_ms": _cpu_time(fn, args.repeats, device),
            "alloc_mb": _peak_memory_mb(fn, device),
        }
        for name, fn in cases
    ]


def _brute_force(args: argparse.Namespace, rewards: torch.Tensor, device: torch.device) -> dict:
    """The brute-force reference at ``--brute-n`` (checked against the vectorised
    weights), and its cost extrapolated to ``--n``."""
    brute_rewards = rewards[:, : args.brute_n]
    subsets = math.comb(args.brute_n, args.k)
    brute_ms = _time(lambda: brute_force_weights(brute_rewards, args.k), max(3, args.repeats // 10), device)
    fast_small_ms = _time(lambda: maxk_gradient_weights(brute_rewards, args.k), args.repeats, device)
    torch.testing.assert_close(
        maxk_gradient_weights(brute_rewards.double(), args.k), brute_force_weights(brute_rewards.double(), args.k)
    )
    per_subset_ns = brute_ms * 1e6 / (subsets * args.batch)
    full_subsets = math.comb(args.n, args.k)
    return {
        "n": args.brute_n,
        "subsets_per_row": subsets,
        "ms_per_call": brute_ms,
        "vectorised_ms_per_call": fast_small_ms,
        "ns_per_subset_row": per_subset_ns,
        "extrapolated_n": args.n,
        "extrapolated_subsets_per_row": full_subsets,
        "extrapolated_s_per_call": per_subset_ns * full_subsets * args.batch / 1e9,
    }


def _print_timings(args: argparse.Namespace, device: torch.device, result: dict) -> None:
    print(
        f"Max@K estimators: B={args.batch}, n={args.n}, k={args.k}, {args.dtype}, device={device}, "
        f"threads={args.threads}"
    )
    print(f"{'function':<40} {'wall ms':>10} {'cpu ms':>10} {'alloc MB':>10}")
    for row in result["estimators"]:
        print(f"{row['function']:<40} {row['wall_ms']:>10.3f} {row['cpu_ms']:>10.3f} {row['alloc_mb']:>10.2f}")
    brute = result["brute_force"]
    print()
    print(
        f"brute force, n={brute['n']} ({brute['subsets_per_row']} subsets/row): {brute['ms_per_call']:.2f} ms/call "
        f"(vectorised at the same n: {brute['vectorised_ms_per_call']:.3f} ms; results agree)"
    )
    print(
        f"brute force extrapolated to n={brute['extrapolated_n']} ({brute['extrapolated_subsets_per_row']:.3g} "
        f"subsets/row): {brute['extrapolated_s_per_call']:.3g} s/call "
        f"({brute['ns_per_subset_row']:.2f} ns per subset-row)"
    )


def _print_rl4co_overhead(rows: list[dict]) -> None:
    print()
    print("training step (TSP20, batch 64, 20 starts, embed 64, 3 layers), forward + backward,")
    print("median of interleaved rounds (CPU time on the CPU, wall time on CUDA); calculate_loss alone on [64, 20]:")
    base_step, base_loss = rows[0]["step_ms"], rows[0]["loss_ms"]
    print(f"{'model':<24} {'step ms':>9} {'vs pomo':>9} {'loss ms':>9} {'loss - pomo loss, % of step':>28}")
    for row in rows:
        print(
            f"{row['model']:<24} {row['step_ms']:>9.1f} {100 * (row['step_ms'] / base_step - 1):>+8.1f}% "
            f"{row['loss_ms']:>9.3f} {100 * (row['loss_ms'] - base_loss) / base_step:>+27.2f}%"
        )


def _print_gradient_variance(rows: list[dict], draws: int) -> None:
    print()
    print(f"gradient variance, TSP20 random-init policy, 16 instances x 20 starts, k=8, {draws} draws:")
    print(f"{'mode':<12} {'|mean grad|^2':>14} {'E|g - mean|^2':>14} {'var/|target|^2':>15}")
    for row in rows:
        print(f"{row['mode']:<12} {row['mean_sq_norm']:>14.4g} {row['variance']:>14.4g} {row['relative']:>15.3g}")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.rl4co or args.variance:
        require("rl4co", needed_by="pglab bench maxk --rl4co / --variance")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    generator = torch.Generator().manual_seed(0)
    rewards = (-4.0 + 0.3 * torch.randn(args.batch, args.n, generator=generator)).to(device=device, dtype=dtype)
    result: dict = {
        "batch": args.batch,
        "n": args.n,
        "k": args.k,
        "dtype": args.dtype,
        "device": str(device),
        "threads": args.threads,
        "estimators": _estimator_timings(args, rewards, device),
        "brute_force": _brute_force(args, rewards, device),
    }
    if args.rl4co:
        result["training_step"] = _rl4co_overhead(device, max(5, args.repeats // 5))
    if args.variance:
        result["gradient_variance"] = _gradient_variance(device, args.variance)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    _print_timings(args, device, result)
    if args.rl4co:
        _print_rl4co_overhead(result["training_step"])
    if args.variance:
        _print_gradient_variance(result["gradient_variance"], args.variance)
    return 0

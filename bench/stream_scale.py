"""Does scale pay? The batched A2C on many environments against the single-stream reference, in wall time.

    python bench/stream_scale.py --reference-steps 1000000 --seeds 41 42 43 \
        --work runs/scale --record results/stream-scale.json --json
    python bench/stream_scale.py --figure        # only redraw the figure from the record

The single stream is the reference code of Elsayed, Vasan & Mahmood (2024)
(``stream_ac_discrete_minatar.py``, its defaults, ``--seed``/``--total_steps``), run for
``--reference-steps`` env steps on one thread exactly as ``bench/stream_vs_reference.py``
runs it (the same child, the same ``--work`` layout, so a run of that bench is reused). Its
target is the mean return of its last ``--last`` episodes at the end of the run; its time is
the run's CPU seconds, which on an idle core is its wall time (it computes on one thread and
waits for nothing).

The batched learner is ``pglab train a2c --env ENV --num-envs N`` with ``--a2c-flags`` on
torch's default threads (every core of the machine), one run per ``--seeds`` seed, in a
process of its own that records every finished episode of every environment (env step,
return, wall and CPU seconds since the start, as the reference's child does). A run's
*time to the target* is the first wall-clock moment at which the mean return of its last
``--last`` episodes reaches the target; the figure of merit is that time divided by the
reference's time, and scale pays when it is at most 1/10 (``pays``) on every seed.

The record (``--record``, the format of ``tools/results_tables.py``) keeps both sides' totals
and their curves at the ends of 100 equal bins of each run's env steps (the mean return of the
last ``--last`` episodes ended by then, with the wall and CPU seconds of the last of them),
from which ``--figure`` draws ``docs/figures/stream_scale.png``: return against seconds (log
scale: the batched runs' wall seconds, the single stream's CPU seconds) and against env steps.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stream_vs_reference import (  # noqa: E402  (the sibling bench: its children and helpers)
    BINS,
    ROOT,
    add_output_arguments,
    one_run,
    recording_child,
    reference_checkout,
    results_tables,
    usage_error,
)

DEFAULT_RECORD = ROOT / "results" / "stream-scale.json"
DEFAULT_FIGURE = ROOT / "docs" / "figures" / "stream_scale.png"
DEFAULT_A2C_FLAGS = "--update-every 1 --gamma 0.99 --obs-norm --reward-scale --layer-norm"
PAYS = 0.1
"""the largest time ratio (batched to reference) at which scale pays"""


def batched_child(argv: list[str], out: Path) -> None:
    """Run ``pglab train a2c`` with ``argv`` in this process, recording every finished episode."""
    import pglab.algos.a2c as a2c

    recording_child(a2c, argv, out)


def batched_argv(env: str, seed: int, steps: int, num_envs: int, flags: str, log_dir: Path) -> list[str]:
    """The batched learner's ``pglab`` arguments."""
    return [
        *("train", "a2c", "--env", env, "--num-envs", str(num_envs), "--seed", str(seed)),
        *("--total-env-steps", str(steps), "--threads", "0", "--log-dir", str(log_dir)),
        *shlex.split(flags),
    ]


def batched_run(env: str, seed: int, steps: int, num_envs: int, flags: str, work: Path) -> dict[str, Any]:
    """One batched run, stored in ``work`` (a stored run of the same arguments is read)."""
    argv = batched_argv(env, seed, steps, num_envs, flags, Path("LOG"))
    tag = hashlib.sha256(shlex.join(argv).encode()).hexdigest()[:8]  # runs of other settings stay apart
    folder = work / env.replace(":", "-") / f"batched-{num_envs}-{seed}-{tag}"
    out = folder / "batched.json"
    if out.exists() and json.loads(out.read_text()).get("argv") == argv:
        return {"seed": seed, **json.loads(out.read_text())}
    subprocess.run(["rm", "-rf", str(folder)], check=True)
    folder.mkdir(parents=True)
    env_vars = {**os.environ, "PGLAB_NO_PROGRESS": "1"}
    env_vars["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # torch's default threads: every core
        env_vars.pop(name, None)
    real = batched_argv(env, seed, steps, num_envs, flags, folder / "run")
    load = os.getloadavg()[0]
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(out), "--", *real]
    process = subprocess.Popen(command, env=env_vars, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"stream_scale: the batched run exited with {code}: {shlex.join(real)}")
    stored = json.loads(out.read_text())
    stored.update(argv=argv, process_cpu_s=usage.ru_utime + usage.ru_stime, load_average_1min=load)
    out.write_text(json.dumps(stored))
    return {"seed": seed, **stored}


def last_mean_at_end(episodes: list[list[float]], last: int) -> float:
    """The mean return of the run's last ``last`` episodes."""
    tail = [row[1] for row in episodes[-last:]]
    return sum(tail) / len(tail)


def time_to(episodes: list[list[float]], target: float, last: int) -> list[float] | None:
    """``[env_step, wall_s, cpu_s]`` of the first episode end at which the mean of the last
    ``last`` episodes reaches ``target``; None if it never does."""
    window: collections.deque[float] = collections.deque(maxlen=last)
    total = 0.0
    for step, value, wall, cpu in episodes:
        if len(window) == last:
            total -= window[0]
        window.append(value)
        total += value
        if len(window) == last and total / last >= target:
            return [step, wall, cpu]
    return None


def smoothed(episodes: list[list[float]], steps: int, last: int) -> list[list[float | None]]:
    """``[bin_end_step, mean return of the last episodes ended by it, wall_s, cpu_s]`` at the
    ends of :data:`BINS` equal bins of the budget (the times of the last episode ended by
    then; None before the first)."""
    rows: list[list[float | None]] = []
    index = 0
    for bin_ in range(1, BINS + 1):
        end = steps * bin_ / BINS
        while index < len(episodes) and episodes[index][0] <= end:
            index += 1
        tail = episodes[max(0, index - last) : index]
        if tail:
            rows.append([round(end), sum(row[1] for row in tail) / len(tail), tail[-1][2], tail[-1][3]])
        else:
            rows.append([round(end), None, None, None])
    return rows


def side_summary(run: dict[str, Any], steps: int, last: int) -> dict[str, Any]:
    """A run's totals and its curve."""
    return {
        "seed": run["seed"],
        "steps": steps,
        "episodes": len(run["episodes"]),
        "return_at_end": last_mean_at_end(run["episodes"], last),
        "wall_s": round(run["wall_s"], 1),
        "cpu_s": round(run["cpu_s"], 1),
        "load_average_1min": run["load_average_1min"],
        "curve": smoothed(run["episodes"], steps, last),
    }


def compare(args: argparse.Namespace, reference_dir: Path, work: Path) -> dict[str, Any]:
    """The reference run, the batched runs, and each batched run's time to the reference's return."""
    stream = one_run("reference", args.env, args.reference_seed, args.reference_steps, reference_dir, work)
    reference = side_summary(stream, args.reference_steps, args.last)
    target, reference_s = reference["return_at_end"], reference["cpu_s"]
    batched = []
    for seed in args.seeds:
        run = batched_run(args.env, seed, args.steps, args.num_envs, args.a2c_flags, work)
        row = side_summary(run, args.steps, args.last)
        reached = time_to(run["episodes"], target, args.last)
        row["to_target"] = None if reached is None else dict(zip(("env_step", "wall_s", "cpu_s"), reached, strict=True))
        row["ratio"] = None if reached is None else reached[1] / reference_s
        batched.append(row)
        print(f"batched seed {seed}: {json.dumps({k: v for k, v in row.items() if k != 'curve'})}", file=sys.stderr)
    ratios = [row["ratio"] for row in batched]
    return {
        "env": args.env,
        "last_episodes": args.last,
        "target": target,
        "reference_s": reference_s,
        "reference": reference,
        "num_envs": args.num_envs,
        "a2c_flags": args.a2c_flags,
        "batched": batched,
        "worst_ratio": None if None in ratios else max(ratios),
        "pays": None not in ratios and max(ratios) <= PAYS,
    }


def headline(figures: dict[str, Any]) -> str:
    """One line: the target, the reference's time, the batched runs' times."""
    reached = [row["to_target"]["wall_s"] for row in figures["batched"] if row["to_target"] is not None]
    times = ", ".join(f"{value:,.0f}" for value in reached) or "none"
    missed = len(figures["batched"]) - len(reached)
    return (
        f"{figures['env']}: the single stream's {figures['reference']['steps']:,}-step return "
        f"{figures['target']:.2f} took {figures['reference_s']:,.0f} s; batched A2C on {figures['num_envs']:,} "
        f"envs reached it in {times} s" + (f" ({missed} of {len(figures['batched'])} seeds never)" if missed else "")
    )


def write_record(
    path: Path, figures: dict[str, Any], command: str, wall_s: float, load: dict[str, Any], kind: str
) -> None:
    tables = results_tables()
    setting = "" if kind == "benchmark" else f", {figures['num_envs']:,} envs"
    record = {
        "system": "Streaming A2C and stream-AC",
        "title": f"Scale: batched A2C against the single stream, in wall time{setting}",
        "kind": kind,
        "command": command,
        "reads": "stdout",
        "headline": "{headline}",
        "docs": "a2c.md#scale-batched-a2c-against-the-single-stream",
        "date": tables.now(),
        "commit": tables.commit(),
        "machine": load,
        "wall_s": wall_s,
        "figures": {"headline": headline(figures), **figures},
    }
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def draw_figure(record_path: Path, figure_path: Path) -> None:
    """Return against wall seconds (log scale) and against env steps, both sides."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = json.loads(record_path.read_text())["figures"]
    fig, (by_time, by_steps) = plt.subplots(1, 2, figsize=(11, 3.6))
    # the single stream against its CPU seconds (its wall time on an idle core, as in the ratio)
    runs = [("single stream (reference, 1 thread, CPU s)", "tab:blue", figures["reference"], 3)]
    runs += [(f"batched A2C, {figures['num_envs']:,} envs", "tab:orange", row, 2) for row in figures["batched"]]
    seen: set[str] = set()
    for label, colour, run, clock in runs:
        points = [bin_ for bin_ in run["curve"] if bin_[1] is not None]
        name = None if label in seen else label
        seen.add(label)
        by_time.plot([p[clock] for p in points], [p[1] for p in points], color=colour, lw=1, label=name)
        by_steps.plot([p[0] for p in points], [p[1] for p in points], color=colour, lw=1, label=name)
    by_time.axhline(figures["target"], color="grey", ls=":", lw=1)
    by_time.axvline(figures["reference_s"] * PAYS, color="grey", ls="--", lw=1)
    by_time.set(xscale="log", xlabel="seconds", ylabel="episode return", title=f"{figures['env']}: against time")
    by_steps.set(xscale="log", xlabel="env steps", ylabel="episode return", title="against env steps")
    by_time.legend(fontsize=8)
    fig.tight_layout()
    figure_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure_path, dpi=90)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--env", default="minatar:breakout", help="a minatar:GAME")
    parser.add_argument("--reference-steps", type=int, default=1_000_000, help="the single stream's env steps")
    parser.add_argument("--reference-seed", type=int, default=31)
    parser.add_argument("--steps", type=int, default=2_000_000, help="each batched run's env steps")
    parser.add_argument("--num-envs", type=int, default=512, help="the batched runs' environments")
    parser.add_argument("--a2c-flags", default=DEFAULT_A2C_FLAGS, help="further flags of the batched runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[41, 42, 43], help="the batched runs' seeds")
    parser.add_argument("--last", type=int, default=500, help="episodes averaged for a return")
    add_output_arguments(parser, DEFAULT_RECORD, DEFAULT_FIGURE)
    parser.add_argument(
        "--kind",
        choices=("benchmark", "study"),
        default="benchmark",
        help="the record's kind: the benchmark (results/stream-scale.json) or a study of another setting",
    )
    args = parser.parse_args(argv)
    if min(args.reference_steps, args.steps, args.num_envs, args.last) < 1:
        parser.error("--reference-steps, --steps, --num-envs and --last must be positive")
    if not args.env.startswith("minatar:"):
        parser.error(f"--env: expected minatar:GAME (got {args.env!r})")
    return args


def command_of(args: argparse.Namespace) -> str:
    flags = [
        *("--env", args.env, "--reference-steps", str(args.reference_steps)),
        *("--reference-seed", str(args.reference_seed), "--steps", str(args.steps)),
        *("--num-envs", str(args.num_envs), "--a2c-flags", args.a2c_flags, "--last", str(args.last)),
        *("--seeds", *map(str, args.seeds)),
        *(("--kind", args.kind) if args.kind != "benchmark" else ()),
    ]
    return "python bench/stream_scale.py " + shlex.join([*flags, "--record", str(args.record), "--json"])


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:  # --child OUT -- ARGS
        batched_child(argv[3:], Path(argv[1]))
        return 0
    args = parse(argv)
    if args.figure:
        if not (args.record or DEFAULT_RECORD).is_file():
            usage_error(f"--record: no such record {args.record or DEFAULT_RECORD}")
        draw_figure(args.record or DEFAULT_RECORD, args.figure_path)
        return 0
    load = results_tables().machine()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="streaming-drl-") as folder, tempfile.TemporaryDirectory() as scratch:
        reference_dir = reference_checkout(args, Path(folder))
        figures = compare(args, reference_dir, args.work if args.work is not None else Path(scratch))
    print(headline(figures), file=sys.stderr)
    if args.record is not None:
        wall_s = round(time.perf_counter() - start, 1)
        write_record(args.record, figures, command_of(args), wall_s, load, args.kind)
        if args.kind == "benchmark":  # a study's record leaves the benchmark's figure alone
            draw_figure(args.record, args.figure_path)
    if args.json:
        print(json.dumps({"headline": headline(figures), **figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

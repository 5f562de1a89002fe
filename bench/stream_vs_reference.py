"""pglab's stream-AC(lambda) side by side with the reference code of Elsayed, Vasan & Mahmood (2024).

    python bench/stream_vs_reference.py                        # Breakout, 2,000 steps, seed 31: a smoke check
    python bench/stream_vs_reference.py --env minatar:breakout --steps 300000 --seeds 31 32 33 \
        --work runs/stream-vs-ref --record results/stream-ac-vs-reference.json
    python bench/stream_vs_reference.py --env gym:Hopper-v4 --steps 100000 \
        --record results/stream-ac-vs-reference.json
    python bench/stream_vs_reference.py --figure               # only redraw the figure from the record
    python bench/stream_vs_reference.py --reference ~/streaming-drl --env minatar:freeway --steps 20000

For every seed it runs the reference script (``stream_ac_discrete_minatar.py`` for
``minatar:GAME`` on ``MinAtar/Game-v1``; ``stream_ac_discrete.py`` or
``stream_ac_continuous.py`` for ``gym:ID``, by the action space) with its defaults and
``--seed``/``--total_steps``, then ``pglab train a2c --algo stream-ac --env ENV`` with
``--seed``, ``--total-env-steps`` and ``--threads 1`` only (and the reference script's own
time limit, ``--max-episode-steps 10000`` for ``stream_ac_discrete.py``), one after the other (so both
see the same machine load), each in a process of its own with one torch thread
(``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``).

Each process records every episode that ends: the env step, the undiscounted return, and
the wall-clock and CPU seconds since its start (pglab: through
:func:`pglab.algos.a2c_common.finished_episodes`; the reference: through its
``RecordEpisodeStatistics`` wrapper). The reference was written for gymnasium 0.29; the
child that runs it makes three adjustments for the gymnasium this checkout has (1.x),
none of which touches the algorithm: ``RecordEpisodeStatistics`` returns the episode's
statistics as one-element arrays and carries ``num_envs = 1`` (as 0.29's did, which the
reference reads); the ``minatar`` package's Gymnasium ids are registered; and the
reference writes its own pickle into a temporary folder.

The summary at 10%, 50% and 100% of the budget is, per seed, the mean return of the last
``--last`` episodes that ended by that step; per side, the mean over seeds and the seed
spread (min, max); ``within`` says whether pglab's mean lies inside the reference's
spread. The record (``--record``, e.g. ``results/stream-ac-vs-reference.json``, the format
of ``tools/results_tables.py``; without it nothing is written) keeps one entry per environment under
``figures.tasks`` by environment and budget (``minatar:breakout@50000``; a run replaces its
own entry and keeps the others), each with
its command, date, commit, machine and load, each run's speed (env steps per wall second
and per CPU second of the child, timed from after its imports; the whole process's CPU
seconds and the load average at its start beside them), and the curves in 100 bins of the budget (mean return of the
episodes that end in each bin, with the wall and CPU seconds at the bin's end), from
which ``--figure`` draws ``docs/figures/stream_ac_vs_reference.png``.

``--work DIR`` keeps every run's episodes there (``ENV/SIDE-SEED/SIDE.json``) and reuses a
stored run at least as long instead of running it again (cut at ``--steps``), so a
comparison can be continued, extended by seeds, or summarised at a shorter budget.
``--extend`` keeps the seeds of ``--record``'s entry for the same environment and budget that
the run does not run again, with their recorded figures (per-seed values, speeds and curves),
and stores the entry of all of them, so seeds can be added on a machine without the earlier
runs' ``--work``; the entry's command then names every seed.
``--side reference|pglab`` runs one side only into ``--work``, so two processes can run the
two sides at once; the run without ``--side`` then reuses both.

The reference: ``--reference DIR`` (a checkout of ``mohmdelsayed/streaming-drl``), or, by
default, ``git archive`` of the Python files of ``--reference-git`` (a clone or mirror) into a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

from pglab.bench import results_tables

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RECORD = ROOT / "results" / "stream-ac-vs-reference.json"
DEFAULT_FIGURE = ROOT / "docs" / "figures" / "stream_ac_vs_reference.png"
DEFAULT_REFERENCE_GIT = Path("/work/.mirror/mohmdelsayed+streaming-drl/repo")
FRACTIONS = (0.1, 0.5, 1.0)
BINS = 100
SIDES = ("reference", "pglab")


# -- the child processes ---------------------------------------------------------------------------


class Episodes:
    """Every finished episode of this process: ``[env_step, return, wall_s, cpu_s]``."""

    def __init__(self) -> None:
        self.rows: list[list[float]] = []
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()

    def add(self, step: int, episode_return: float) -> None:
        self.rows.append([step, episode_return, time.perf_counter() - self.wall0, time.process_time() - self.cpu0])

    def dump(self, path: Path, steps: int) -> None:
        totals = {"wall_s": time.perf_counter() - self.wall0, "cpu_s": time.process_time() - self.cpu0}
        path.write_text(json.dumps({"steps": steps, "episodes": self.rows, **totals}))


def reference_child(script: Path, argv: list[str], out: Path) -> None:
    """Run the reference ``script`` with ``argv`` in this process, recording its episodes."""
    import gymnasium as gym
    import numpy as np
    import torch

    torch.set_num_threads(1)
    episodes = Episodes()
    counter = {"steps": 0}

    class RecordEpisodeStatistics(gym.wrappers.RecordEpisodeStatistics):
        """Gymnasium's wrapper with 0.29's interface: ``num_envs``, one-element arrays."""

        def __init__(self, env: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(env, *args, **kwargs)
            self.num_envs, self.is_vector_env = 1, False

        def step(self, action: Any) -> Any:
            obs, reward, terminated, truncated, info = super().step(action)
            counter["steps"] += 1
            if terminated or truncated:
                stats = info["episode"]
                info["episode"] = {key: np.array([value]) for key, value in stats.items()}
                episodes.add(counter["steps"], float(stats["r"]))
            return obs, reward, terminated, truncated, info

    gym.wrappers.RecordEpisodeStatistics = RecordEpisodeStatistics  # type: ignore[misc]  # the child's own copy
    if not any(name.startswith("MinAtar/") for name in gym.registry):
        import minatar.gym

        minatar.gym.register_envs()
    sys.path.insert(0, str(script.parent))
    sys.argv = [str(script), *argv]
    with tempfile.TemporaryDirectory(prefix="stream-reference-") as work:
        os.chdir(work)  # the reference pickles its returns into the working directory
        runpy.run_path(str(script), run_name="__main__")
    episodes.dump(out, counter["steps"])


def recording_child(module: Any, argv: list[str], out: Path) -> None:
    """Run ``pglab`` with ``argv`` in this process, recording every episode that ends in any
    environment, through ``module.finished_episodes`` (the trainer's module: its own copy)."""
    from pglab.cli import main

    episodes = Episodes()
    counter = {"steps": 0}
    finished_episodes = module.finished_episodes

    def recording(*args: Any) -> Any:
        returns, lengths, ended, succeeded = finished_episodes(*args)
        counter["steps"] += int(ended.shape[0])  # one env step of every environment
        for value in returns[ended].tolist():
            episodes.add(counter["steps"], float(value))
        return returns, lengths, ended, succeeded

    module.finished_episodes = recording
    code = main(argv)
    if code != 0:
        raise SystemExit(code)
    episodes.dump(out, counter["steps"])


def pglab_child(argv: list[str], out: Path) -> None:
    """Run ``pglab train a2c --algo stream-ac`` with ``argv`` in this process, recording its episodes."""
    import pglab.algos.stream_ac as stream_ac

    recording_child(stream_ac, argv, out)


# -- running one comparison ---------------------------------------------------------------------------


def reference_script(env: str) -> tuple[str, str]:
    """``(script, env id)`` of the reference for pglab's ``env``."""
    kind, _, name = env.partition(":")
    if kind == "minatar":
        return "stream_ac_discrete_minatar.py", f"MinAtar/{name.title().replace('_', '')}-v1"
    if kind == "gym":
        import gymnasium as gym

        probe = gym.make(name)
        discrete = isinstance(probe.action_space, gym.spaces.Discrete)
        probe.close()
        return ("stream_ac_discrete.py" if discrete else "stream_ac_continuous.py"), name
    raise SystemExit(f"stream_vs_reference: --env: expected minatar:GAME or gym:ID (got {env!r})")


REFERENCE_TIME_LIMITS = {"stream_ac_discrete.py": 10_000}
"""the episodes' step limit a reference script sets itself (``gym.make(env_name,
max_episode_steps=10_000)``); pglab's side is given the same (``--max-episode-steps``)"""


def child_argv(side: str, env: str, seed: int, steps: int, reference: Path, log_dir: Path) -> list[str]:
    """The argument list of one side's child (after ``--child SIDE OUT``)."""
    script, env_id = reference_script(env)
    if side == "reference":
        return [str(reference / script), "--env_name", env_id, "--seed", str(seed), "--total_steps", str(steps)]
    limit = REFERENCE_TIME_LIMITS.get(script)
    return [
        *("train", "a2c", "--algo", "stream-ac", "--env", env),
        *("--seed", str(seed), "--total-env-steps", str(steps), "--threads", "1", "--log-dir", str(log_dir)),
        *(("--max-episode-steps", str(limit)) if limit is not None else ()),
    ]


def run_child(side: str, argv: list[str], out: Path) -> dict[str, Any]:
    """One run in a child process, stored in ``out``: the child's episodes and totals, with the
    CPU seconds of the whole process (interpreter start and imports included) and the load
    average at its start."""
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PGLAB_NO_PROGRESS": "1"}
    env["PYTHONPATH"] = python_path
    command = [sys.executable, str(Path(__file__).resolve()), "--child", side, str(out), "--", *argv]
    load = os.getloadavg()[0]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"stream_vs_reference: {side} exited with {process.returncode}: {shlex.join(argv)}")
    result = json.loads(out.read_text())
    result["process_cpu_s"] = usage.ru_utime + usage.ru_stime
    result["load_average_1min"] = load
    out.write_text(json.dumps(result))
    return result


def one_run(side: str, env: str, seed: int, steps: int, reference: Path, work: Path) -> dict[str, Any]:
    """The run of ``side`` on ``env`` with ``seed`` for ``steps`` steps: a run of at least
    ``steps`` stored in ``work``, cut at ``steps`` (neither side has a schedule that depends on
    the budget, so a run's first ``steps`` are a run of ``steps``), else a new run (stored)."""
    folder = work / env.replace(":", "-").replace("/", "-") / f"{side}-{seed}"
    out = folder / f"{side}.json"
    if out.exists() and json.loads(out.read_text())["steps"] >= steps:
        stored = json.loads(out.read_text())
    else:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        stored = run_child(side, child_argv(side, env, seed, steps, reference, folder / "run"), out)
    episodes = [row for row in stored["episodes"] if row[0] <= steps]
    return {"seed": seed, **stored, "run_steps": stored["steps"], "steps": steps, "episodes": episodes}


def last_mean(episodes: list[list[float]], step: float, last: int) -> float | None:
    """The mean return of the last ``last`` episodes that ended by ``step`` (None: none did)."""
    ended = [row[1] for row in episodes if row[0] <= step]
    return statistics.fmean(ended[-last:]) if ended else None


def binned(episodes: list[list[float]], steps: int) -> list[list[float | None]]:
    """``[bin_end_step, mean return of the episodes ending in the bin, wall_s, cpu_s]`` for
    :data:`BINS` equal bins of the budget (the times of the bin's last episode; None where none ended)."""
    rows: list[list[float | None]] = []
    width = steps / BINS
    for index in range(BINS):
        low, high = index * width, (index + 1) * width
        inside = [row for row in episodes if low < row[0] <= high]
        mean = statistics.fmean(row[1] for row in inside) if inside else None
        wall, cpu = (inside[-1][2], inside[-1][3]) if inside else (None, None)
        rows.append([round(high), mean, wall, cpu])
    return rows


def side_stats(per_seed: list[float | None]) -> dict[str, Any]:
    """The per-seed values of one side at one summary point, with their mean and spread."""
    values = [value for value in per_seed if value is not None]
    return {
        "per_seed": per_seed,
        "mean": statistics.fmean(values) if values else None,
        "min": min(values) if values else None,
        "max": max(values) if values else None,
    }


def summarise(rows: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """The summary at each of :data:`FRACTIONS` of the budget (module docstring) over the
    per-seed ``rows`` (:func:`seed_row`)."""
    points = []
    for index, fraction in enumerate(FRACTIONS):
        point: dict[str, Any] = {"fraction": fraction, "env_step": round(fraction * steps)}
        for side in SIDES:
            point[side] = side_stats([row["points"][side][index] for row in rows])
        ours, theirs = point["pglab"]["mean"], point["reference"]
        point["within"] = ours is not None and theirs["min"] is not None and theirs["min"] <= ours <= theirs["max"]
        points.append(point)
    return {"points": points, "within_all": all(point["within"] for point in points)}


def speed(run: dict[str, Any]) -> dict[str, Any]:
    """A run's speed: env steps per wall second and per CPU second of the child from after
    its imports to its end (environment and network construction included), over the whole
    stored run (``run_steps``); ``episodes`` counts those within the budget."""
    load, process = run.get("load_average_1min"), run.get("process_cpu_s")
    return {
        "seed": run["seed"],
        "episodes": len(run["episodes"]),
        "wall_s": round(run["wall_s"], 1),
        "cpu_s": round(run["cpu_s"], 1),
        "process_cpu_s": None if process is None else round(process, 1),
        "run_steps": run["run_steps"],
        "steps_per_wall_s": round(run["run_steps"] / run["wall_s"], 1),
        "steps_per_cpu_s": round(run["run_steps"] / run["cpu_s"], 1),
        "load_average_1min": None if load is None else round(load, 2),
    }


def seed_row(seed: int, runs: dict[str, dict[str, Any]], steps: int, last: int) -> dict[str, Any]:
    """One seed's figures, both sides: its value at each summary point, its speed and its curve."""
    return {
        "seed": seed,
        "points": {side: [last_mean(runs[side]["episodes"], f * steps, last) for f in FRACTIONS] for side in SIDES},
        "speed": {side: speed(runs[side]) for side in SIDES},
        "curves": {side: binned(runs[side]["episodes"], steps) for side in SIDES},
    }


def task_rows(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-seed rows of a record's task entry (the inverse of :func:`assemble`)."""
    return [
        {
            "seed": seed,
            "points": {side: [point[side]["per_seed"][index] for point in task["points"]] for side in SIDES},
            "speed": {side: task["speed"][side][index] for side in SIDES},
            "curves": {side: task["curves"][side][index] for side in SIDES},
        }
        for index, seed in enumerate(task["seeds"])
    ]


def assemble(env: str, steps: int, last: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The record's task entry for the per-seed ``rows``."""
    return {
        "env": env,
        "reference_script": reference_script(env)[0],
        "seeds": [row["seed"] for row in rows],
        "steps": steps,
        "last_episodes": last,
        **summarise(rows, steps),
        "speed": {side: [row["speed"][side] for row in rows] for side in SIDES},
        "curves": {side: [row["curves"][side] for row in rows] for side in SIDES},
    }


def extend(task: dict[str, Any], recorded: dict[str, Any]) -> dict[str, Any]:
    """``task`` with the seeds of the ``recorded`` entry (same environment, budget and
    ``--last``) that it does not run again, as recorded; seeds in increasing order."""
    if recorded["last_episodes"] != task["last_episodes"]:
        raise SystemExit(
            f"stream_vs_reference: --extend: the recorded entry averages the last {recorded['last_episodes']} "
            f"episodes, this run {task['last_episodes']}; pass --last {recorded['last_episodes']}"
        )
    kept = [row for row in task_rows(recorded) if row["seed"] not in task["seeds"]]
    rows = sorted([*kept, *task_rows(task)], key=lambda row: row["seed"])
    return assemble(task["env"], task["steps"], task["last_episodes"], rows)


def compare(env: str, seeds: list[int], steps: int, reference: Path, last: int, work: Path) -> dict[str, Any]:
    """Both sides on ``env`` for every seed (reference first; runs stored in ``work``); the record's task entry."""
    rows = []
    for seed in seeds:
        runs = {}
        for side in SIDES:
            runs[side] = one_run(side, env, seed, steps, reference, work)
            print(f"{env} seed {seed} {side}: {json.dumps(speed(runs[side]))}", file=sys.stderr, flush=True)
        rows.append(seed_row(seed, runs, steps, last))
    return assemble(env, steps, last, rows)


# -- the record and the figure ---------------------------------------------------------------------------


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def task_headline(task: dict[str, Any]) -> str:
    inside = sum(point["within"] for point in task["points"])
    final = task["points"][-1]
    return (
        f"{task['env']}: pglab {final['pglab']['mean']:.1f}, reference {final['reference']['mean']:.1f} "
        f"[{final['reference']['min']:.1f}, {final['reference']['max']:.1f}] at {task['steps']:,} steps "
        f"({plural(len(task['seeds']), 'seed')}); within the reference's spread at {inside} of "
        f"{len(task['points'])} points"
    )


def write_record(path: Path, task: dict[str, Any], command: str, wall_s: float, load: dict[str, Any]) -> None:
    """Store ``task`` in the record at ``path`` under ``ENV@STEPS`` (other entries are kept); the
    headline is the Breakout entry with the most seeds."""
    tables = results_tables()
    task = {
        **task,
        "command": command,
        "date": tables.now(),
        "commit": tables.commit(),
        "machine": load,
        "wall_s": wall_s,
    }
    tasks = json.loads(path.read_text())["figures"]["tasks"] if path.exists() else {}
    tasks[f"{task['env']}@{task['steps']}"] = task
    breakout = [entry for entry in tasks.values() if entry["env"] == "minatar:breakout"]
    first = max(breakout, key=lambda entry: (len(entry["seeds"]), entry["steps"]), default=task)
    record = {
        "system": "Streaming A2C and stream-AC",
        "title": "stream-AC(λ) side by side with the reference code",
        "kind": "result",
        "command": first["command"],
        "reads": "stdout",
        "headline": "{headline}",
        "docs": "a2c.md#stream-ac-side-by-side-with-the-reference-code",
        "date": first["date"],
        "commit": first["commit"],
        "machine": first["machine"],
        "wall_s": first["wall_s"],
        "figures": {"headline": task_headline(first), "tasks": tasks},
    }
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def draw_figure(record_path: Path, figure_path: Path) -> None:
    """Returns against env steps and against CPU seconds, one row per environment of the record."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = json.loads(record_path.read_text())["figures"]["tasks"]
    fig, axes = plt.subplots(len(tasks), 2, figsize=(10, 3.2 * len(tasks)), squeeze=False)
    colours = {"reference": "tab:blue", "pglab": "tab:orange"}
    for row, task in zip(axes, tasks.values(), strict=True):
        for side in SIDES:
            for index, curve in enumerate(task["curves"][side]):
                points = [bin_ for bin_ in curve if bin_[1] is not None]
                label = side if index == 0 else None
                for axis, column in ((row[0], 0), (row[1], 3)):
                    xs = [point[column] for point in points]
                    axis.plot(xs, [point[1] for point in points], color=colours[side], alpha=0.7, lw=1, label=label)
        runs = plural(len(task["seeds"]), "seed")
        row[0].set(
            title=f"{task['env']}, {runs}: return against env steps", xlabel="env steps", ylabel="episode return"
        )
        row[1].set(title="against CPU seconds (one thread)", xlabel="CPU seconds", ylabel="episode return")
        row[0].legend()
    fig.tight_layout()
    figure_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure_path, dpi=90)


def usage_error(message: str) -> NoReturn:
    """One line on stderr naming the bad argument, then exit 2 (a usage error)."""
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def reference_checkout(args: argparse.Namespace, folder: Path) -> Path:
    """``--reference``, or ``git archive`` of ``--reference-git`` unpacked into ``folder``."""
    if args.reference is not None:
        checkout = Path(args.reference).resolve()
        if not (checkout / "stream_ac_discrete_minatar.py").is_file():
            usage_error(f"--reference: {checkout} is not a checkout of mohmdelsayed/streaming-drl")
        return checkout
    git = Path(args.reference_git)
    if not git.exists():
        raise SystemExit(f"stream_vs_reference: --reference-git: no such repository {git} (give --reference DIR)")
    tree = ["git", "--git-dir", str(git)]
    listed = subprocess.run([*tree, "ls-tree", "--name-only", "HEAD"], check=True, capture_output=True, text=True)
    sources = [name for name in listed.stdout.split() if name.endswith(".py")]  # the mirror may lack the media
    archive = subprocess.run([*tree, "archive", "HEAD", *sources], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def add_output_arguments(parser: argparse.ArgumentParser, record: Path, figure: Path) -> None:
    """The flags both benches share: where the reference code and the runs are, and the outputs."""
    parser.add_argument("--reference", default=None, help="a checkout of mohmdelsayed/streaming-drl")
    parser.add_argument("--reference-git", default=str(DEFAULT_REFERENCE_GIT), help="its git directory")
    parser.add_argument("--work", type=Path, default=None, help="keep the runs here; stored runs are reused")
    parser.add_argument("--record", type=Path, default=None, help=f"store the result here (e.g. {record})")
    parser.add_argument("--figure-path", type=Path, default=figure)
    parser.add_argument("--figure", action="store_true", help="only draw the figure from --record")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--env", default="minatar:breakout", help="pglab environment (minatar:GAME or gym:ID)")
    parser.add_argument("--steps", type=int, default=2000, help="env steps per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[31])
    parser.add_argument("--last", type=int, default=50, help="episodes averaged at each summary point")
    add_output_arguments(parser, DEFAULT_RECORD, DEFAULT_FIGURE)
    parser.add_argument(
        "--side",
        choices=SIDES,
        default=None,
        help="run this side only, into --work (two processes can run the two sides at once; a later run "
        "without --side reuses both)",
    )
    parser.add_argument(
        "--extend",
        action="store_true",
        help="keep the seeds of --record's entry for this environment and budget that this run does not "
        "run again (their stored figures), so that seeds can be added on another machine",
    )
    args = parser.parse_args(argv)
    if args.extend and args.record is None:
        parser.error("--extend needs --record (the entry it extends)")
    if args.steps < 1 or args.last < 1:
        parser.error("--steps and --last must be positive")
    if args.side is not None and (args.work is None or args.record is not None):
        parser.error("--side needs --work (where the run is kept) and takes no --record")
    return args


def run_side(args: argparse.Namespace) -> None:
    """``--side``: that side's runs alone, stored in ``--work``."""
    with tempfile.TemporaryDirectory(prefix="streaming-drl-") as folder:
        reference = reference_checkout(args, Path(folder))
        for seed in args.seeds:
            run = one_run(args.side, args.env, seed, args.steps, reference, args.work)
            print(f"{args.env} seed {seed} {args.side}: {json.dumps(speed(run))}", file=sys.stderr, flush=True)


def recorded_task(path: Path, key: str) -> dict[str, Any]:
    """The task entry ``key`` (``ENV@STEPS``) of the record at ``path``; exit 2 if it has none."""
    tasks = json.loads(path.read_text())["figures"]["tasks"] if path.exists() else {}
    if key not in tasks:
        raise SystemExit(f"stream_vs_reference: --extend: {path} has no entry {key}")
    return tasks[key]


def run_comparison(args: argparse.Namespace) -> dict[str, Any]:
    """The comparison of ``args``; stored in ``--record`` when given. Returns the figures."""
    load = results_tables().machine()
    start = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="streaming-drl-") as folder,
        tempfile.TemporaryDirectory(prefix="stream-vs-reference-") as scratch,
    ):
        reference = reference_checkout(args, Path(folder))
        work = args.work if args.work is not None else Path(scratch)
        task = compare(args.env, args.seeds, args.steps, reference, args.last, work)
    if args.extend:
        task = extend(task, recorded_task(args.record, f"{task['env']}@{task['steps']}"))
    print(task_headline(task), file=sys.stderr)
    if args.record is None:
        return {"headline": task_headline(task), "tasks": {f"{task['env']}@{task['steps']}": task}}
    flags = ["--env", args.env, "--steps", str(args.steps), "--seeds", *map(str, task["seeds"])]
    command = "python bench/stream_vs_reference.py " + shlex.join([*flags, "--record", str(args.record), "--json"])
    write_record(args.record, task, command, round(time.perf_counter() - start, 1), load)
    draw_figure(args.record, args.figure_path)
    return json.loads(args.record.read_text())["figures"]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:  # --child SIDE OUT -- ARGS
        side, out, rest = argv[1], Path(argv[2]), argv[4:]
        if side == "reference":
            reference_child(Path(rest[0]), rest[1:], out)
        else:
            pglab_child(rest, out)
        return 0
    args = parse(argv)
    if args.figure:
        if not (args.record or DEFAULT_RECORD).is_file():
            usage_error(f"--record: no such record {args.record or DEFAULT_RECORD}")
        draw_figure(args.record or DEFAULT_RECORD, args.figure_path)
        return 0
    if args.side is not None:
        run_side(args)
        return 0
    figures = run_comparison(args)
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

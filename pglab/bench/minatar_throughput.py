"""``pglab bench minatar``: environment steps per second of the batched MinAtar games.

For each game and each ``N`` in ``sizes``, three implementations with uniformly random
actions from the minimal action set (sticky actions 0.1, the package's default):

* ``pglab``: :class:`pglab.envs.minatar.MinAtarEnv` with ``N`` copies, one batched
  ``step`` per step (observations and auto-reset included), timed for at least
  ``seconds``;
* ``minatar``: the ``minatar`` package, a Python loop of ``act`` + ``state()`` (+
  ``reset()`` at the end of an episode) over the copies. Its cost per environment step
  does not depend on ``N``, so it runs ``min(N, package_envs)`` environments for
  ``package_steps`` environment steps and reports that rate for every ``N`` (the JSON
  line says ``"scaled": true`` where fewer than ``N`` environments ran);
* ``gymnax``: gymnax's JAX MinAtar (``jit`` of ``vmap`` over ``N``, 16 steps per
  ``lax.scan``), where ``import gymnax`` works; otherwise one line says it is absent. Its
  compilation is not timed. gymnax 1.0 requires ``gymnasium < 1.4``, older than pglab's,
  so it is installed apart and found through ``gymnax_path`` (searched after pglab's own
  packages, so pglab's gymnasium and numpy stay)::

      pip install --target ~/gymnax-libs "jax[cpu]" flax && pip install --target ~/gymnax-libs --no-deps gymnax
      pglab bench minatar --gymnax_path ~/gymnax-libs

With ``threads 1`` (the default) the process is pinned to one CPU core where the system
allows it, so that every implementation runs on one core, XLA's thread pool included.

Every measurement prints one JSON line (with the torch thread count and the load average
before and after it: the figures are only as good as the machine is idle); a table
follows. With ``--json`` the command prints one JSON document instead (``config``,
``rows``, ``summary``: the rates by ``GAME@N`` and implementation, ``load`` and
``load_after``), the form ``tools/results_tables.py`` records.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pglab.errors import ConfigError
from pglab.report import split_json_flag
from pglab.run.config import parse_config
from pglab.validation import check_choice, check_device, check_int, check_positive

GYMNAX_IDS = {
    "asterix": "Asterix-MinAtar",
    "breakout": "Breakout-MinAtar",
    "freeway": "Freeway-MinAtar",
    "seaquest": "Seaquest-MinAtar",
    "space_invaders": "SpaceInvaders-MinAtar",
}
GYMNAX_SCAN = 16


@dataclass(frozen=True)
class MinAtarBenchConfig:
    games: tuple[str, ...] = ("breakout", "freeway", "asterix", "seaquest", "space_invaders")
    """games to time (one not available in this build is reported as such)"""
    sizes: tuple[int, ...] = (1, 1024, 4096, 16384)
    """numbers of copies N"""
    seconds: float = 1.0
    """least time of each pglab and gymnax measurement"""
    package_envs: int = 256
    """package environments stepped in the Python loop (at most N)"""
    package_steps: int = 20000
    """environment steps timed for the package, per game and N"""
    threads: int = 1
    """torch CPU threads (0: torch's default)"""
    device: str = "cpu"
    """cpu, cuda or cuda:N (pglab's environments)"""
    implementations: tuple[str, ...] = ("pglab", "minatar", "gymnax")
    """which implementations to time"""
    gymnax_path: str | None = None
    """a folder holding gymnax and jax (``pip install --target``), searched after pglab's packages"""

    def __post_init__(self):
        from pglab.envs.minatar import GAMES

        for game in self.games:
            check_choice("games", game, GAMES)
        for size in self.sizes:
            check_int("sizes", size, minimum=1)
        check_positive("seconds", self.seconds)
        check_int("package_envs", self.package_envs, minimum=1)
        check_int("package_steps", self.package_steps, minimum=1)
        check_int("threads", self.threads, minimum=0)
        check_device("device", self.device)
        for implementation in self.implementations:
            check_choice("implementations", implementation, ("pglab", "minatar", "gymnax"))
        if self.gymnax_path is not None and not os.path.isdir(os.path.expanduser(self.gymnax_path)):
            raise ConfigError("gymnax_path", self.gymnax_path, "an existing folder")


def _load() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def _timed(run: Callable[[int], None], seconds: float, first: int = 1) -> tuple[int, float, float]:
    """Call ``run(count)`` with doubling counts until ``seconds`` have passed in total;
    returns ``(count, wall seconds, CPU seconds)``."""
    total, wall, cpu, count = 0, 0.0, 0.0, first
    while wall < seconds:
        start, start_cpu = time.perf_counter(), time.process_time()
        run(count)
        wall += time.perf_counter() - start
        cpu += time.process_time() - start_cpu
        total += count
        count *= 2
    return total, wall, cpu


def time_pglab(config: MinAtarBenchConfig, game: str, num_envs: int, device: torch.device) -> dict[str, Any]:
    """Batched steps of ``MinAtarEnv`` (random actions drawn beforehand, on the device)."""
    from pglab.envs.minatar import make_minatar_env

    env = make_minatar_env(game, num_envs, device=device, seed=0)
    env.reset()
    generator = torch.Generator(device=device).manual_seed(1)
    actions = torch.randint(env.action_spec.num_actions or 1, (16, num_envs), generator=generator, device=device)

    def run(count: int) -> None:
        for step in range(count):
            env.step(actions[step % len(actions)])
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    run(3)  # warm-up
    steps, wall, cpu = _timed(run, config.seconds)
    return {"env_steps_timed": steps * num_envs, "seconds": wall, "cpu_seconds": cpu, "scaled": False}


def time_package(config: MinAtarBenchConfig, game: str, num_envs: int) -> dict[str, Any]:
    """A Python loop over package environments: ``act``, ``state()``, ``reset()`` at the end."""
    import minatar

    count = min(num_envs, config.package_envs)
    envs = [minatar.Environment(game) for _ in range(count)]
    rng = np.random.RandomState(0)
    for index, env in enumerate(envs):
        env.seed(index)
        env.reset()
    minimal = envs[0].minimal_action_set()
    loops = max(1, -(-config.package_steps // count))
    actions = [[minimal[i] for i in rng.randint(len(minimal), size=count)] for _ in range(16)]
    start, start_cpu = time.perf_counter(), time.process_time()
    for loop in range(loops):
        for env, action in zip(envs, actions[loop % 16], strict=True):
            _, done = env.act(action)
            if done:
                env.reset()
            env.state()
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    return {"env_steps_timed": loops * count, "seconds": wall, "cpu_seconds": cpu, "scaled": count < num_envs}


def time_gymnax(config: MinAtarBenchConfig, game: str, num_envs: int) -> dict[str, Any]:
    """gymnax: ``jit(vmap(step))`` inside a ``lax.scan`` of ``GYMNAX_SCAN`` steps; the
    observations stay in the carry so that they are computed."""
    import gymnax
    import jax

    env, params = gymnax.make(GYMNAX_IDS[game])
    batched_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    key = jax.random.PRNGKey(0)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), params)

    def one(carry: Any, _: Any) -> tuple[Any, None]:
        key, state, _obs = carry
        key, action_key, step_key = jax.random.split(key, 3)
        actions = jax.random.randint(action_key, (num_envs,), 0, env.num_actions)
        obs, state, *_ = batched_step(
            jax.random.split(step_key, num_envs), state, actions, params
        )  # gymnax 1.0: 6 outputs
        return (key, state, obs), None

    scan = jax.jit(lambda carry: jax.lax.scan(one, carry, None, length=GYMNAX_SCAN)[0])
    carry = [jax.block_until_ready(scan((key, state, obs)))]  # compiles
    carry[0] = jax.block_until_ready(scan(carry[0]))  # the carry's own types can trace once more

    def run(count: int) -> None:
        for _ in range(count):
            carry[0] = scan(carry[0])
        jax.block_until_ready(carry[0])

    scans, wall, cpu = _timed(run, config.seconds)
    return {"env_steps_timed": scans * GYMNAX_SCAN * num_envs, "seconds": wall, "cpu_seconds": cpu, "scaled": False}


def _gymnax_available(config: MinAtarBenchConfig) -> str | None:
    """``None`` where ``import gymnax`` works (from ``gymnax_path`` if given), else why not."""
    if config.gymnax_path is not None:
        folder = os.path.expanduser(config.gymnax_path)
        if folder not in sys.path:
            sys.path.append(folder)
    try:
        import gymnax  # noqa: F401 - only whether it imports
    except ImportError as error:
        return f"absent ({error})"
    return None


def _measure(config: MinAtarBenchConfig, implementation: str, game: str, num_envs: int, device: torch.device):
    if implementation == "pglab":
        return time_pglab(config, game, num_envs, device)
    if implementation == "minatar":
        return time_package(config, game, num_envs)
    return time_gymnax(config, game, num_envs)


def run_bench(config: MinAtarBenchConfig, emit: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """Every measurement of ``config``, each given to ``emit`` as it completes."""
    from pglab.envs.minatar import game_class

    device = torch.device(config.device)
    gymnax_missing = _gymnax_available(config) if "gymnax" in config.implementations else None
    common = {"bench": "minatar_throughput", "threads": torch.get_num_threads(), "device": str(device)}
    rows = []
    for game in config.games:
        try:
            game_class(game)
        except ConfigError:
            rows.append({**common, "game": game, "status": "not available in this build"})
            emit(rows[-1])
            continue
        for implementation in config.implementations:
            if implementation == "gymnax" and gymnax_missing is not None:
                rows.append({**common, "impl": "gymnax", "game": game, "status": gymnax_missing})
                emit(rows[-1])
                continue
            for num_envs in config.sizes:
                load_before = _load()
                timing = _measure(config, implementation, game, num_envs, device)
                row = {**common, "impl": implementation, "game": game, "num_envs": num_envs, **timing}
                row["env_steps_per_s"] = timing["env_steps_timed"] / timing["seconds"]
                row["env_steps_per_cpu_s"] = timing["env_steps_timed"] / max(timing["cpu_seconds"], 1e-9)
                row.update(load_before=load_before, load_after=_load())
                rows.append(row)
                emit(row)
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """``{"GAME@N": {implementation: {"per_s": ..., "per_cpu_s": ...}}}`` over the timed rows."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    for row in rows:
        if "env_steps_per_s" in row:
            cell = {"per_s": row["env_steps_per_s"], "per_cpu_s": row["env_steps_per_cpu_s"]}
            table.setdefault(f"{row['game']}@{row['num_envs']}", {})[row["impl"]] = cell
    return table


def _table(config: MinAtarBenchConfig, rows: list[dict[str, Any]]) -> str:
    """Rates per wall second (per CPU second of this process in brackets, steadier on a busy machine)."""
    timed = {(r["impl"], r["game"], r["num_envs"]): r for r in rows if "env_steps_per_s" in r}
    lines = [f"{'game':<15}{'N':>7}{'pglab':>24}{'minatar':>22}{'ratio':>8}{'gymnax':>22}"]
    for game in config.games:
        for num_envs in config.sizes:
            cells = [timed.get((impl, game, num_envs)) for impl in ("pglab", "minatar", "gymnax")]
            if cells == [None, None, None]:
                continue
            shown = [
                f"{cell['env_steps_per_s']:>11,.0f} ({cell['env_steps_per_cpu_s']:>9,.0f})" if cell else f"{'-':>22}"
                for cell in cells
            ]
            pglab, package = cells[0], cells[1]
            ratio = f"{pglab['env_steps_per_s'] / package['env_steps_per_s']:>7.1f}x" if pglab and package else "-"
            lines.append(f"{game:<15}{num_envs:>7}  {shown[0]}{shown[1]}{ratio:>8}{shown[2]}")
    lines += [f"{r.get('impl', 'pglab')} {r['game']}: {r['status']}" for r in rows if "status" in r]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    as_json, argv = split_json_flag(argv)
    config = parse_config(MinAtarBenchConfig, argv, prog="pglab bench minatar", description=__doc__)
    if config.threads:
        torch.set_num_threads(config.threads)
    if config.threads == 1 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core for every implementation
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    header = {"bench": "minatar_throughput", "config": config.__dict__, "cores": cores, "load": _load()}
    if as_json:
        rows = run_bench(config, lambda row: None)
        print(json.dumps({**header, "rows": rows, "summary": summary(rows), "load_after": _load()}), flush=True)
        return 0
    print(json.dumps(header), flush=True)
    rows = run_bench(config, lambda row: print(json.dumps(row), flush=True))
    print(
        f"\nenv steps per second, and (per CPU second of this process); torch threads: {torch.get_num_threads()}, "
        f"device: {config.device}, load average {_load()}; the package's rate is per environment step, timed on "
        f"at most {config.package_envs} environments"
    )
    print(_table(config, rows))
    return 0

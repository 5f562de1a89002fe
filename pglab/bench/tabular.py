"""``pglab bench tabular``: tabular learner speed and the WoLF-PHC vs PHC convergence experiment.

Prints two tables (``--json``: the same figures as JSON):

1. updates/s of ``QTableAgent.update`` and ``WoLFPHCAgent.update`` (pre-drawn random
   transitions over ``n_states`` states, 21 actions, so only the update is timed), and
   game steps/s of ``TrainingLoop`` (act + game + update) on the macrodata series;
2. distance to the mixed Nash equilibrium over time in self-play on matching pennies and
   rock-paper-scissors, WoLF-PHC (delta_lose = 4 delta_win) vs PHC (delta_lose = delta_win),
   and, with ``--plot PATH``, the same as a figure.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from pglab.validation import check_int


@dataclasses.dataclass(frozen=True)
class TabularBenchConfig:
    updates: int = 200_000
    """timed updates per agent"""
    n_states: tuple[int, ...] = (100, 2500)
    """table sizes to time"""
    repeats: int = 3
    """timing repeats (the best is reported: the least disturbed by other processes)"""
    convergence_steps: int = 20_000
    """self-play rounds per matrix game (0 skips the experiment)"""
    plot: Path | None = None
    """write the convergence figure here (PNG)"""
    seed: int = 0
    """seed of the transitions and the agents"""
    json: bool = False
    """print JSON instead of the tables"""

    def __post_init__(self):
        check_int("updates", self.updates, minimum=1)
        check_int("repeats", self.repeats, minimum=1)
        check_int("convergence_steps", self.convergence_steps, minimum=0)
        for n in self.n_states:
            check_int("n_states", n, minimum=1)


def time_updates(agent, n_states: int, updates: int, seed: int, repeats: int) -> float:
    """Best-of-``repeats`` updates per second of ``agent.update`` on random transitions."""
    rng = np.random.default_rng(seed)
    states = rng.integers(n_states, size=updates + 1).tolist()
    actions = rng.integers(agent.n_actions, size=updates).tolist()
    rewards = (-np.abs(rng.normal(size=updates))).tolist()
    update = agent.update
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for i in range(updates):
            update(states[i], actions[i], rewards[i], states[i + 1])
        best = min(best, time.perf_counter() - start)
    return updates / best


def time_training_loop(episodes: int = 100) -> float:
    from pglab.algos.tabular import QTableAgent, TrainingLoop
    from pglab.data import load_series
    from pglab.envs.forecast_game import SimulationConfig, forecaster_space

    config = SimulationConfig(horizon=80)
    series = load_series("macrodata")
    agent = QTableAgent(forecaster_space(config), gamma=0.0, seed=0)
    start = time.perf_counter()
    TrainingLoop(config, n_episodes=episodes, seed=0).run(agent, series=series)
    return episodes * config.horizon / (time.perf_counter() - start)


@dataclasses.dataclass(frozen=True)
class SelfPlaySetting:
    """A self-play experiment: the learning rate, WoLF's winning step and each player's
    starting policy (away from the equilibrium)."""

    alpha: float
    delta_win: float
    start: tuple[list[float], list[float]]


CONVERGENCE = {  # the settings of tests/test_matrix_games.py
    "matching_pennies": SelfPlaySetting(alpha=0.1, delta_win=0.0005, start=([0.9, 0.1], [0.2, 0.8])),
    "rock_paper_scissors": SelfPlaySetting(alpha=0.2, delta_win=0.0005, start=([0.8, 0.1, 0.1], [0.1, 0.1, 0.8])),
}


def convergence(name: str, ratio: float, steps: int, seed: int) -> dict[str, np.ndarray]:
    from pglab.algos.tabular import WoLFPHCAgent
    from pglab.envs.matrix_games import make_game, self_play

    settings = CONVERGENCE[name]
    agents = []
    for k, start in enumerate(settings.start):
        agent = WoLFPHCAgent(
            len(start),
            alpha=settings.alpha,
            gamma=0.0,
            epsilon=0.05,
            epsilon_decay=1.0,
            epsilon_min=0.05,
            delta_win=settings.delta_win,
            delta_lose=ratio * settings.delta_win,
            seed=seed + 1 + k,
        )
        agent.set_policy(0, start)
        agents.append(agent)
    return self_play(make_game(name), *agents, n_steps=steps, record_every=max(1, steps // 200))


def main(argv: list[str]) -> int:
    from pglab.run.config import parse_config

    config = parse_config(TabularBenchConfig, argv, prog="pglab bench tabular")
    result: dict[str, Any] = {"updates_per_s": update_rates(config), "training_loop_steps_per_s": time_training_loop()}
    curves: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    if config.convergence_steps:
        curves = {
            (name, label): convergence(name, ratio, config.convergence_steps, config.seed)
            for name in CONVERGENCE
            for label, ratio in (("wolf-phc", 4.0), ("phc", 1.0))
        }
        result["convergence_steps"] = config.convergence_steps
        result["nash_distance_by_fifth"] = [
            {
                "game": name,
                "learner": label,
                "fifths": [float(c.mean()) for c in np.array_split(curve["nash_distance"], 5)],
            }
            for (name, label), curve in curves.items()
        ]
    if config.json:
        print(json.dumps(result, indent=2))
    else:
        print_result(result)
    if config.plot is not None and curves:
        plot_convergence(curves, config.plot)
        print(f"plot: {config.plot}", file=sys.stderr if config.json else sys.stdout)
    return 0


def update_rates(config: TabularBenchConfig) -> list[dict[str, Any]]:
    """Updates per second of each tabular agent at each table size."""
    from pglab.algos.tabular import QTableAgent, WoLFPHCAgent

    return [
        {
            "agent": label,
            "states": n_states,
            "updates_per_s": time_updates(
                cls(21, seed=config.seed), n_states, config.updates, config.seed, config.repeats
            ),
        }
        for n_states in config.n_states
        for label, cls in (("q-learning", QTableAgent), ("wolf-phc", WoLFPHCAgent))
    ]


def print_result(result: dict[str, Any]) -> None:
    print(f"{'agent':<14} {'states':>7} {'updates/s':>12}")
    for row in result["updates_per_s"]:
        print(f"{row['agent']:<14} {row['states']:>7} {row['updates_per_s']:>12,.0f}")
    loop_rate = result["training_loop_steps_per_s"]
    print(f"{'TrainingLoop (q, macrodata, act+game+update)':<46} {loop_rate:>12,.0f} steps/s")
    if "nash_distance_by_fifth" not in result:
        return
    print()
    steps = result["convergence_steps"]
    print(f"distance to the mixed Nash equilibrium (mean over each fifth of {steps} self-play rounds)")
    print(f"{'game':<20} {'learner':<9} " + " ".join(f"{f'{k}/5':>7}" for k in range(1, 6)))
    for row in result["nash_distance_by_fifth"]:
        print(f"{row['game']:<20} {row['learner']:<9} " + " ".join(f"{value:7.3f}" for value in row["fifths"]))


def plot_convergence(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = sorted({name for name, _ in curves})
    fig, axes = plt.subplots(1, len(games), figsize=(6 * len(games), 3.5), squeeze=False)
    for ax, name in zip(axes[0], games, strict=False):
        for (game, label), out in curves.items():
            if game == name:
                ax.plot(out["steps"], out["nash_distance"], lw=1, label=label)
        ax.set_title(f"{name}: self-play")
        ax.set_xlabel("round")
        ax.set_ylabel("distance to Nash (current policies)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

"""bench/stream_vs_reference.py's summary of the side-by-side runs: the value of each seed at
each summary point, and the record entry that ``--extend`` grows by seeds."""

import importlib.util
import json
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("stream_vs_reference", ROOT / "bench" / "stream_vs_reference.py")
assert _spec is not None and _spec.loader is not None
svr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(svr)


def fake_run(seed: int, returns: list[float], steps: int) -> dict:
    """A run whose episodes end evenly over ``steps`` with ``returns``."""
    every = steps // len(returns)
    episodes = [[every * (i + 1), value, 0.1 * i, 0.1 * i] for i, value in enumerate(returns)]
    return {"seed": seed, "episodes": episodes, "wall_s": 10.0, "cpu_s": 8.0, "run_steps": steps}


def seed_rows(seeds: list[int], steps: int = 1000, last: int = 3) -> list[dict]:
    rows = []
    for seed in seeds:
        ours = [float(seed + i) for i in range(20)]
        theirs = [float(seed * 2 + i) for i in range(20)]
        runs = {"pglab": fake_run(seed, ours, steps), "reference": fake_run(seed, theirs, steps)}
        rows.append(svr.seed_row(seed, runs, steps, last))
    return rows


def test_each_point_is_the_mean_of_the_last_episodes_ended_by_it():
    (row,) = seed_rows([5])
    # 20 episodes, one every 50 steps: by step 100 two ended (5, 6), by 500 ten (the last 3: 12, 13, 14)
    assert row["points"]["pglab"] == [pytest.approx(5.5), pytest.approx(13.0), pytest.approx(23.0)]
    assert row["points"]["reference"] == [pytest.approx(10.5), pytest.approx(18.0), pytest.approx(28.0)]


def test_the_spread_and_within_are_taken_over_seeds():
    task = svr.assemble("minatar:breakout", 1000, 3, seed_rows([1, 4, 6]))
    final = task["points"][-1]
    assert final["pglab"]["per_seed"] == [19.0, 22.0, 24.0]
    assert final["reference"]["min"] == 20.0 and final["reference"]["max"] == 30.0
    assert final["pglab"]["mean"] == pytest.approx(statistics.fmean([19.0, 22.0, 24.0]))
    assert final["within"] is True  # 21.67 in [20, 30]
    assert task["points"][0]["pglab"]["mean"] == pytest.approx(statistics.fmean([1.5, 4.5, 6.5]))
    alone = svr.assemble("minatar:breakout", 1000, 3, seed_rows([1]))
    assert [point["within"] for point in alone["points"]] == [False, False, False]  # 1 below 2 at every point
    assert alone["within_all"] is False and task["within_all"] is True


def test_a_record_entry_splits_into_seeds_and_reassembles_unchanged():
    record = json.loads((ROOT / "results" / "stream-ac-vs-reference.json").read_text())
    for task in record["figures"]["tasks"].values():
        rebuilt = svr.assemble(task["env"], task["steps"], task["last_episodes"], svr.task_rows(task))
        for key in ("seeds", "points", "within_all", "speed", "curves"):
            assert rebuilt[key] == task[key], (task["env"], key)


def test_extend_keeps_the_recorded_seeds_it_does_not_rerun():
    recorded = svr.assemble("minatar:breakout", 1000, 3, seed_rows([1, 4]))
    new = svr.assemble("minatar:breakout", 1000, 3, seed_rows([4, 6]))
    whole = svr.assemble("minatar:breakout", 1000, 3, seed_rows([1, 4, 6]))
    assert svr.extend(new, recorded) == whole
    with pytest.raises(SystemExit, match="--last 3"):
        svr.extend(svr.assemble("minatar:breakout", 1000, 5, seed_rows([6], last=5)), recorded)

"""bench/stream_scale.py: the time at which the batched learner reaches the single stream's
return, its smoothed curves, the verdict, and the child that records the batched run's episodes."""

import importlib.util
import json
import random
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
_spec = importlib.util.spec_from_file_location("stream_scale", ROOT / "bench" / "stream_scale.py")
assert _spec is not None and _spec.loader is not None
scale = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scale)


def episodes(returns: list[float], every: int = 10, seconds: float = 0.5) -> list[list[float]]:
    """``[env_step, return, wall_s, cpu_s]`` rows, one episode every ``every`` steps."""
    return [[every * (i + 1), value, seconds * (i + 1), 0.9 * seconds * (i + 1)] for i, value in enumerate(returns)]


def window_mean(rows: list[list[float]], index: int, last: int) -> float:
    return statistics.fmean(row[1] for row in rows[index + 1 - last : index + 1])


def test_time_to_is_the_first_episode_whose_window_mean_reaches_the_target():
    rng = random.Random(7)
    rows = episodes([rng.uniform(0, 1) + i / 200 for i in range(400)])
    for last in (1, 5, 30):
        for target in (0.4, 0.9, 1.6, 3.0):
            brute = next(
                (
                    [row[0], row[2], row[3]]
                    for index, row in enumerate(rows)
                    if index + 1 >= last
                    and statistics.fmean(r[1] for r in rows[index + 1 - last : index + 1]) >= target
                ),
                None,
            )
            reached = scale.time_to(rows, target, last)
            assert reached == (None if brute is None else pytest.approx(brute))
    assert scale.time_to(rows, 3.0, 5) is None


def test_the_smoothed_curve_is_the_mean_of_the_last_episodes_ended_by_each_bin_end():
    rng = random.Random(3)
    rows = episodes([rng.uniform(0, 5) for _ in range(137)], every=7)
    steps = 1000
    curve = scale.smoothed(rows, steps, 12)
    assert len(curve) == scale.BINS
    for end, value, wall, cpu in curve:
        ended = [row for row in rows if row[0] <= end]
        if not ended:
            assert (value, wall, cpu) == (None, None, None)
            continue
        assert value == pytest.approx(statistics.fmean(row[1] for row in ended[-12:]))
        assert (wall, cpu) == (ended[-1][2], ended[-1][3])


def test_scale_pays_only_when_every_seed_reaches_the_target_in_a_tenth_of_the_reference_time(monkeypatch, tmp_path):
    reference = {"seed": 31, "episodes": episodes([1.0] * 40), "wall_s": 60.0, "cpu_s": 50.0, "load_average_1min": 0}

    def fast_or_slow(env, seed, steps, num_envs, flags, work):
        seconds = {1: 0.1, 2: 0.2, 3: 0.5}[seed]  # reaches 1.0 at its 5th episode
        rows = episodes([0.0] * 4 + [5.0] * 40, seconds=seconds)
        return {"seed": seed, "episodes": rows, "wall_s": 9.0, "cpu_s": 9.0, "load_average_1min": 0}

    monkeypatch.setattr(scale, "one_run", lambda *args: reference)
    monkeypatch.setattr(scale, "batched_run", fast_or_slow)
    flags = ["--last", "5", "--steps", "440", "--reference-steps", "400"]
    args = scale.parse([*flags, "--seeds", "1", "2"])
    figures = scale.compare(args, tmp_path, tmp_path)
    assert figures["target"] == 1.0 and figures["reference_s"] == 50.0
    # the window of the last 5 reaches mean 1.0 at the 5th episode: (0+0+0+0+5)/5
    assert [row["to_target"]["wall_s"] for row in figures["batched"]] == pytest.approx([0.5, 1.0])
    assert figures["worst_ratio"] == pytest.approx(1.0 / 50.0)
    assert figures["pays"] is True
    slow = scale.compare(scale.parse([*flags, "--seeds", "1", "3"]), tmp_path, tmp_path)
    assert slow["worst_ratio"] == pytest.approx(2.5 / 50.0) and slow["pays"] is True
    monkeypatch.setattr(scale, "PAYS", 0.015)  # now seed 2's 1.0 s of the reference's 50 s is too slow
    assert scale.compare(args, tmp_path, tmp_path)["pays"] is False
    assert "return 1.00 took 50 s" in scale.headline(figures) and "never" not in scale.headline(figures)


def test_a_seed_that_never_reaches_the_target_means_scale_does_not_pay(monkeypatch, tmp_path):
    reference = {"seed": 31, "episodes": episodes([2.0] * 40), "wall_s": 60.0, "cpu_s": 50.0, "load_average_1min": 0}
    never = {"seed": 1, "episodes": episodes([1.0] * 40), "wall_s": 1.0, "cpu_s": 1.0, "load_average_1min": 0}
    monkeypatch.setattr(scale, "one_run", lambda *args: reference)
    monkeypatch.setattr(scale, "batched_run", lambda *args: never)
    figures = scale.compare(scale.parse(["--seeds", "1", "--last", "5"]), tmp_path, tmp_path)
    assert figures["batched"][0]["to_target"] is None
    assert figures["worst_ratio"] is None and figures["pays"] is False
    assert "1 of 1 seeds never" in scale.headline(figures)


def test_the_batched_child_records_every_episode_the_trainer_counts(tmp_path):
    out = tmp_path / "batched.json"
    argv = ["train", "a2c", "--env", "minatar:breakout", "--num-envs", "8", "--seed", "3"]
    argv += ["--total-env-steps", "800", "--threads", "1", "--log-dir", str(tmp_path / "run")]
    scale.batched_child(argv, out)
    recorded = json.loads(out.read_text())
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    counted = [(row["episode/count"], row.get("return/mean")) for row in rows if row.get("episode/count")]
    assert recorded["steps"] == 800
    assert len(recorded["episodes"]) == sum(count for count, _ in counted) > 0
    total = sum(count * mean for count, mean in counted)
    assert sum(row[1] for row in recorded["episodes"]) == pytest.approx(total)
    assert all(0 < row[0] <= 800 for row in recorded["episodes"])

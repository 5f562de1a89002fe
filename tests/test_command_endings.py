"""Every ``pglab train`` and ``pglab evaluate`` ends with the human summary (result,
reference, verdict where a target exists, run directory); ``--json`` prints one JSON
document with the same figures. One tiny run per system, shared by its tests (maxk-pomo's
endings are asserted in tests/test_maxk_cli.py, on the runs that test trains anyway)."""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from pglab.cli import main as cli_main
from pglab.commands.a2c import REFERENCE_EPISODES
from pglab.configs.ghm import TARGET_PCT, THRESHOLD_TOLERANCE
from pglab.report import Figure, Summary, split_json_flag

GHM_FLAGS = [
    "--n_iterations", "1", "--n_trajectories", "32", "--T", "0.5", "--dt", "0.05", "--eval_dt", "0.05",
    "--eval_paths", "8", "--eval_cash", "0.5", "--eval_tail_tolerance", "0.5", "--eval_interval", "1000",
    "--eval_quick_paths", "0", "--fd_nodes", "400", "--device", "cpu", "--seed", "3",
]  # fmt: skip
A2C_FLAGS = [
    "--num-envs", "4", "--update-every", "1", "--pixel-goal.grid-size", "4", "--hidden", "16", "--device", "cpu",
    "--total-env-steps", "10",
]  # fmt: skip
PPO_FLAGS = [
    "--env", "gym:CartPole-v1", "--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--ppo-epochs", "1",
    "--hidden-dims", "8", "--no-tensorboard", "--eval-episodes", "2", "--total-steps", "40", "--device", "cpu",
]  # fmt: skip
FORECAST_FLAGS = ["--source", "synthetic", "--horizon", "5", "--episodes", "2"]
PSO_FLAGS = [
    "--num_cities", "6", "--knn", "3", "--n_particles", "3", "--pso_iterations", "2", "--emb_dim", "8",
    "--num_heads", "2", "--node_layers", "1", "--instances_per_iteration", "2", "--eval_instances", "2",
    "--eval_interval", "0", "--algo", "reinforce_raw", "--controller", "edge_policy", "--train_decode", "sample",
    "--reward", "tour_length", "--n_iterations", "1", "--device", "cpu",
]  # fmt: skip


def run(argv: list[str]) -> tuple[str, str]:
    """``pglab ARGV``'s stdout and stderr (every warning shown); it must exit 0."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("always")
        code = cli_main(argv)
    assert code == 0, err.getvalue()
    return out.getvalue(), err.getvalue()


def summary_lines(out: str) -> dict[str, str]:
    """The summary's labelled lines (``result:``, ``reference:``, ...) at the end of ``out``."""
    lines = {}
    for line in out.splitlines():
        head, _, rest = line.partition(":")
        if head in ("result", "reference", "verdict", "note", "run", "next"):
            lines[head] = rest.strip() if head not in lines else lines[head] + " | " + rest.strip()
    return lines


def machine(out: str) -> dict:
    """``--json``'s stdout: one JSON document, nothing else."""
    return json.loads(out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return tmp_path_factory.mktemp("endings")


def trained(runs: Path, name: str, argv: list[str]) -> tuple[Path, str, str]:
    """One training run per system and module: ``(run directory, stdout, stderr)``."""
    run_dir = runs / name
    out, err = run([*argv, "--log-dir", str(run_dir)])
    return run_dir, out, err


@pytest.fixture(scope="module")
def ghm_run(runs):
    return trained(runs, "ghm", ["train", "ghm", *GHM_FLAGS])


@pytest.fixture(scope="module")
def a2c_run(runs):
    return trained(runs, "a2c", ["train", "a2c", *A2C_FLAGS])


@pytest.fixture(scope="module")
def ppo_run(runs):
    return trained(runs, "ppo", ["train", "ppo", *PPO_FLAGS, "--json"])


@pytest.fixture(scope="module")
def forecast_run(runs):
    return trained(runs, "fc", ["train", "forecast", *FORECAST_FLAGS])


@pytest.fixture(scope="module")
def pso_run(runs):
    return trained(runs, "pso", ["train", "pso-tsp", *PSO_FLAGS])


# -- the summary itself --------------------------------------------------------------------------
def test_summary_renders_each_part_and_its_json_holds_the_same_figures():
    summary = Summary(
        "title",
        [Figure("worst", 97.456, ".2f", "%"), Figure("none yet", None), Figure("nan", float("nan"))],
        [Figure("V*", 100.0, ".0f", "%")],
        verdict="target: not met",
        run_dir=Path("runs/x"),
        next="pglab evaluate runs/x",
        details={"rows": [1]},
    )
    assert summary.render().splitlines() == [
        "title",
        "result:    worst 97.46%; none yet none; nan n/a",
        "reference: V* 100%",
        "verdict:   target: not met",
        "run:       runs/x",
        "next:      pglab evaluate runs/x",
    ]
    form = summary.as_json()
    assert form["rows"] == [1]
    assert form["summary"]["result"] == {"worst": 97.456, "none yet": None, "nan": None}
    assert form["summary"]["verdict"] == "target: not met" and form["summary"]["run_dir"] == "runs/x"
    assert Summary("t", [Figure("x", 1.0)]).render() == "t\nresult:    x 1"  # no verdict, no run: no lines
    assert split_json_flag(["a", "--json", "b"]) == (True, ["a", "b"])
    assert split_json_flag(["a"]) == (False, ["a"])


# -- ghm -----------------------------------------------------------------------------------------
def test_ghm_train_and_evaluate_end_with_the_verdict_against_v_star(ghm_run):
    ghm_run, out, _ = ghm_run
    lines = summary_lines(out)
    evaluation = json.loads((ghm_run / "evaluation.json").read_text())
    worst = min(row["pct_of_optimum"] for row in evaluation["rows"])
    assert f"worst % of V* over 1 initial states {worst:.2f}%" in lines["result"]
    assert "dividend barrier (cash)" in lines["result"] and "FD dividend barrier" in lines["reference"]
    assert lines["reference"].startswith("V* (finite-difference optimum) 100%")
    met = "met" if worst >= TARGET_PCT else "not met"
    target, *thresholds = lines["verdict"].split("; ")
    assert target == f">= {TARGET_PCT:g}% of V* at every initial state: {met} (worst {worst:.2f}%)"
    learned, fd = evaluation["learned_thresholds"], evaluation["fd_thresholds"]
    judged = [
        key for key in ("dividend_rate", "issuance_rate") if learned.get(key) is not None and fd.get(key) is not None
    ]
    assert len(thresholds) == len(judged) and judged  # one verdict per threshold both have
    for key, line in zip(judged, thresholds, strict=True):
        within = "yes" if abs(learned[key] - fd[key]) <= THRESHOLD_TOLERANCE else "no"
        assert line.endswith(
            f"within {THRESHOLD_TOLERANCE:g} of FD: {within} (|learned - FD| {abs(learned[key] - fd[key]):.3f})"
        )
    assert lines["run"] == str(ghm_run) and lines["next"] == f"pglab evaluate {ghm_run}"
    assert out.rstrip().endswith(f"next:      pglab evaluate {ghm_run}")  # the summary is the last thing

    out, _ = run(["evaluate", str(ghm_run), "--device", "cpu", "--json"])
    report = machine(out)
    assert report["rows"][0]["initial_cash"] == 0.5  # the evaluation report, as before
    assert report["summary"]["result"]["worst % of V* over 1 initial states"] == pytest.approx(worst)
    assert report["summary"]["verdict"].startswith(f">= {TARGET_PCT:g}% of V*")
    assert report["summary"]["run_dir"] == str(ghm_run)


# -- a2c -----------------------------------------------------------------------------------------
def test_a2c_train_warns_of_the_rounded_budget_and_ends_with_the_summary(a2c_run):
    run_dir, out, err = a2c_run
    assert (
        "pglab: warning: total_env_steps 10 is not a whole number of optimiser steps "
        "(num_envs x update_every transitions = 4 each): training 3 optimiser steps, 12 in all" in err
    )
    lines = summary_lines(out)
    assert lines["result"].startswith("mean return of the last training episodes")
    assert lines["run"] == str(run_dir) and lines["next"] == f"pglab evaluate {run_dir}"
    # the reference: evaluate's random policy on REFERENCE_EPISODES episodes of the same environment
    episodes = str(REFERENCE_EPISODES)
    out, _ = run(["evaluate", str(run_dir), "--policy", "random", "--episodes", episodes, "--num-envs", episodes])
    random = json.loads((run_dir / "evaluation_random.json").read_text())
    assert lines["reference"] == (
        f"random policy mean return {random['return_mean']:.3f} ({REFERENCE_EPISODES} episodes); "
        f"random policy success rate {100 * random['success_rate']:.1f}%"
    )


def test_a2c_train_json_and_a_board_game_without_success(runs):
    """stream-AC on a MinAtar board: the same ending; no success rate where the game
    defines none, in the result or the reference."""
    flags = ["--algo", "stream-ac", "--env", "minatar:breakout", "--hidden", "8", "--total-env-steps", "4"]
    run_dir, out, _ = trained(runs, "board", ["train", "a2c", *flags, "--device", "cpu", "--json"])
    summary = machine(out)["summary"]
    assert summary["title"].startswith("pglab train a2c (a2c-stream-ac)")
    assert list(summary["reference"]) == ["random policy mean return"]
    assert machine(out)["random_policy"]["episodes"] == REFERENCE_EPISODES
    assert "success_rate" not in machine(out)["random_policy"]
    assert not any("success" in label for label in summary["result"])


def test_a2c_summary_reports_the_last_window_that_ended_episodes(runs):
    """A last logged window in which no episode ended (here seed 1's 30th) does not leave the
    summary without a return: it reports the most recent window's episodes."""
    flags = ["--env", "minatar:breakout", "--num-envs", "2", "--update-every", "1", "--total-env-steps", "60"]
    run_dir, out, _ = trained(runs, "quiet-end", ["train", "a2c", *flags, "--seed", "1", "--device", "cpu", "--json"])
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    with_episodes = [row for row in rows if row.get("episode/count", 0) > 0]
    assert rows[-1]["episode/count"] == 0 and with_episodes
    last = machine(out)["last"]
    assert {name: last.get(name) for name in ("episode/count", "return/mean", "episode/length")} == {
        name: with_episodes[-1][name] for name in ("episode/count", "return/mean", "episode/length")
    }
    assert last["env_steps"] == 60
    assert machine(out)["summary"]["result"] == {"mean return of the last training episodes": last["return/mean"]}


def test_latest_keeps_the_episode_metrics_of_the_previous_record_only_where_none_ended():
    from pglab.algos.a2c_common import latest

    earlier = {"env_steps": 10.0, "episode/count": 3.0, "return/mean": 2.5, "return/std": 0.5, "episode/length": 7.0}
    quiet = {"env_steps": 20.0, "episode/count": 0.0, "loss": 0.1}
    assert latest(earlier, quiet) == {**quiet, **{k: v for k, v in earlier.items() if k != "env_steps"}}
    busy = {"env_steps": 30.0, "episode/count": 1.0, "return/mean": 4.0, "return/std": 0.0, "episode/length": 9.0}
    assert latest(earlier, busy) == busy
    assert latest({}, quiet) == quiet


def test_a2c_evaluate_judges_the_policy_against_a_random_one(a2c_run):
    run_dir = a2c_run[0]
    flags = ["--episodes", "4", "--num-envs", "4", "--device", "cpu"]
    out, _ = run(["evaluate", str(run_dir), *flags])
    lines = summary_lines(out)
    written = json.loads((run_dir / "evaluation_trained.json").read_text())
    assert f"trained (deterministic) success rate {100 * written['success_rate']:.1f}%" in lines["result"]
    assert lines["reference"].startswith("random policy mean return")
    assert "verdict" not in lines  # no target: no verdict
    out, _ = run(["evaluate", str(run_dir), *flags, "--json"])
    report = machine(out)
    assert report["success_rate"] == written["success_rate"]  # the result as written to the run
    random = report["random_policy"]
    assert report["summary"]["reference"]["random policy success rate"] == pytest.approx(100 * random["success_rate"])
    assert f"random policy success rate {100 * random['success_rate']:.1f}%" in lines["reference"]


def test_a2c_has_no_random_reference_in_an_unbounded_action_box(tmp_path):
    from types import SimpleNamespace

    from pglab.commands.a2c import NO_RANDOM_POLICY, run_policy, train_summary
    from pglab.configs.a2c import A2CEvaluateConfig
    from pglab.envs.base import ActionSpec

    box = ActionSpec("continuous", shape=(1,), low=(-1.0,), high=(float("inf"),), dtype=torch.float32)
    agent = SimpleNamespace(make_env=lambda num_envs, seed, device: SimpleNamespace(action_spec=box))
    assert run_policy(A2CEvaluateConfig(tmp_path, episodes=2), agent, "random", "cpu") is None
    result = {"run_dir": "r", "opt_steps": 1, "env_steps": 2, "last": {"return/mean": 0.5}}
    summary = train_summary(result, "a2c-stream-ac", None)
    assert summary.reference == [] and NO_RANDOM_POLICY in summary.notes


# -- ppo -----------------------------------------------------------------------------------------
def test_ppo_train_and_evaluate_end_against_a_random_policy(ppo_run):
    run_dir, out, err = ppo_run
    assert "total_steps 40 is not a whole number of iterations" in err and "training 1 iterations, 32 in all" in err
    report = machine(out)
    evaluation = json.loads((run_dir / "evaluation.json").read_text())
    result = report["summary"]["result"]
    assert result["deterministic policy mean return"] == evaluation["return/mean"]
    assert report["summary"]["reference"]["random policy mean return"] == report["random_policy"]["return/mean"]
    assert report["summary"]["run_dir"] == str(run_dir)

    out, _ = run(["evaluate", str(run_dir), "--episodes", "2", "--device", "cpu"])
    lines = summary_lines(out)
    assert lines["result"].startswith("deterministic policy mean return")
    assert lines["reference"].startswith("random policy mean return")
    assert lines["run"] == str(run_dir) and "verdict" not in lines


# -- forecast ------------------------------------------------------------------------------------
def test_forecast_train_and_evaluate_end_against_nash_and_ar1(forecast_run):
    run_dir, out, _ = forecast_run
    lines = summary_lines(out)
    assert lines["result"].startswith("mean reward last 50")
    assert lines["run"] == str(run_dir) and lines["next"] == f"pglab evaluate {run_dir}"
    out, _ = run(["evaluate", str(run_dir), "--json"])
    report = machine(out)
    clean, game, summary = report["clean"], report["game"], report["summary"]
    assert summary["result"]["MAE"] == clean["mae"]
    assert summary["reference"]["random walk MAE"] == clean["mae_random_walk"]
    assert summary["reference"]["AR(1) MAE"] == clean["mae_ar1"]
    assert summary["reference"]["Nash rule MAE"] == clean["mae_nash"]
    # train and evaluate read the same rule in the same training game
    assert game["learned_mae"] == pytest.approx(game["nash_mae"] + game["nash_gap"], abs=1e-12)
    assert f"training game: learned rule MAE {game['learned_mae']:.4f}" in lines["result"]
    states = f"(Nash action in {game['states_at_nash']} of {game['states']} states)"
    assert f"gap to the Nash equilibrium {game['nash_gap']:.4f} {states}" in lines["result"]
    assert lines["reference"] == f"Nash equilibrium MAE {game['nash_mae']:.4f}; AR(1) MAE {game['ar1_mae']:.4f}"
    # AR(1): y_t = c + phi y_{t-1} by least squares on the training rows (the run trained on all rows)
    from pglab.data import load_series

    y = load_series("synthetic").target  # the source's default rows and seed, as the run's
    phi, c = np.polyfit(y[:-1], y[1:], 1)
    start, end = report["rows"]
    assert clean["mae_ar1"] == pytest.approx(np.mean(np.abs(y[start:end] - c - phi * y[start - 1 : end - 1])))
    # reading the rule leaves the tables' RNG (it breaks greedy ties) as stored: the forecasts are as before
    from pglab.algos.forecast import agent_from_checkpoint, evaluate_forecaster
    from pglab.run.checkpoint import load_checkpoint_file

    agent = agent_from_checkpoint(load_checkpoint_file(run_dir))
    series = load_series("synthetic")
    assert evaluate_forecaster(series, agent.policy, agent.encoder, range(start, end))["mae"] == clean["mae"]
    out, _ = run(["evaluate", str(run_dir)])
    lines = summary_lines(out)
    assert f"MAE {clean['mae']:.4f}" in lines["result"]
    assert f"random walk MAE {clean['mae_random_walk']:.4f}" in lines["reference"]


def test_forecast_rarl_ends_against_the_equilibrium_with_the_adversary(runs):
    flags = [*FORECAST_FLAGS, "--algo", "rarl", "--json"]
    _, out, _ = trained(runs, "rarl", ["train", "forecast", *flags])
    report = machine(out)
    game, summary = report["game"], report["summary"]
    assert summary["reference"]["Nash equilibrium with the adversary MAE"] == game["robust_nash_mae"]
    assert game["robust_nash_mae"] > game["nash_mae"]  # the adversary's perturbations cost the forecaster
    assert game["robust_learned_mae"] == pytest.approx(game["robust_nash_mae"] + game["robust_nash_gap"], abs=1e-12)


def test_forecast_on_too_few_rows_for_ar1_ends_against_nash_alone(runs):
    flags = ["--source", "synthetic", "--train_rows", "3", "--horizon", "1", "--episodes", "1"]
    run_dir, out, _ = trained(runs, "short", ["train", "forecast", *flags, "--json"])
    assert list(machine(out)["summary"]["reference"]) == ["Nash equilibrium MAE"]
    out, _ = run(["evaluate", str(run_dir), "--json"])
    reference = machine(out)["summary"]["reference"]
    assert "AR(1) MAE" not in reference and "Nash rule MAE" in reference


# -- pso-tsp -------------------------------------------------------------------------------------
def test_pso_tsp_train_and_evaluate_end_with_the_gap_to_the_optimal_tour(pso_run):
    run_dir, out, _ = pso_run
    lines = summary_lines(out)
    assert "best tour per instance" in lines["result"] and lines["run"] == str(run_dir)
    out, _ = run(["evaluate", str(run_dir), "--episodes", "2", "--json"])
    report = machine(out)
    learned = next(row for row in report["rows"] if row["method"].startswith("learned PSO"))
    optimal = next(row for row in report["rows"] if row["method"].startswith("optimal"))
    assert report["summary"]["result"]["gap to the optimal tour"] == learned["gap_pct"]
    assert report["summary"]["reference"][optimal["method"]] == optimal["mean_length"]
    assert report["summary"]["run_dir"] == str(run_dir)


# -- the smaller endings -------------------------------------------------------------------------
def test_a_resume_says_where_it_continues_without_a_progress_bar(forecast_run, monkeypatch):
    monkeypatch.setenv("PGLAB_NO_PROGRESS", "1")
    run_dir = forecast_run[0]
    _, err = run(["train", "forecast", "--resume", str(run_dir), "--episodes", "3"])
    assert f"resumed {run_dir} at episode 2 (env_steps 10)" in err


def test_compare_draws_the_one_target():
    from pglab.commands import compare

    assert compare.TARGET_PCT is TARGET_PCT == 98.0
    assert "97" not in (compare.comparison_plot_data.__doc__ or "")


def test_ghm_thresholds_are_judged_within_the_one_tolerance():
    from pglab.commands.ghm import threshold_verdicts
    from pglab.commands.sweep import sweep_summary

    assert THRESHOLD_TOLERANCE == 0.03
    learned = {"dividend_rate": 0.52, "issuance_rate": 0.1}
    fd = {"dividend_rate": 0.5, "issuance_rate": 0.14}
    assert threshold_verdicts(learned, fd) == [
        "dividend barrier within 0.03 of FD: yes (|learned - FD| 0.020)",
        "issuance below within 0.03 of FD: no (|learned - FD| 0.040)",
    ]
    assert threshold_verdicts({"dividend_rate": 0.5, "issuance_rate": None}, fd) == [
        "dividend barrier within 0.03 of FD: yes (|learned - FD| 0.000)"
    ]  # no learned issuance point: nothing to judge
    rows = [
        {"run": "a", "pct_0.5": 99.0, "barrier_rl": 0.52, "barrier_fd": 0.5, "issuance_rl": None, "issuance_fd": 0.1},
        {"run": "b", "pct_0.5": 97.0, "barrier_rl": 0.45, "barrier_fd": 0.5, "issuance_rl": 0.12, "issuance_fd": 0.1},
    ]
    report = sweep_summary(rows, Path("sweep"), []).as_json()
    result = report["summary"]["result"]
    assert result["runs with the dividend barrier within 0.03 of FD"] == "1 of 2"
    assert result["runs with the issuance point within 0.03 of FD"] == "1 of 1"
    totals = report["totals"]  # the same figures under fixed names, for records
    assert (totals["runs"], totals["runs_at_target"], totals["worst_pct"]) == (2, 1, 97.0)
    assert (totals["barrier_within_tolerance"], totals["barrier_judged"]) == (1, 2)
    assert totals["largest_barrier_error"] == pytest.approx(0.05)
    assert (totals["issuance_within_tolerance"], totals["issuance_judged"]) == (1, 1)
    assert totals["largest_issuance_error"] == pytest.approx(0.02)


def test_sweep_notes_runs_without_a_learned_threshold():
    from pglab.algos.ghm_sweep import missing_notes, missing_thresholds

    rows = [{"barrier_rl": 0.4, "issuance_rl": None}, {"barrier_rl": None, "issuance_rl": None}]
    assert missing_thresholds(rows) == {"barrier": 1, "issuance": 2}
    assert missing_notes(rows) == [
        "1 of 2 runs have no learned dividend barrier: not drawn in the statics figures",
        "2 of 2 runs have no learned issuance point: not drawn in the statics figures",
    ]
    assert missing_notes([{"barrier_rl": 0.4, "issuance_rl": 0.1}]) == []


def test_learning_curve_panels_label_their_y_axis(a2c_run, monkeypatch):
    from pglab.run import plots

    drawn = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path, dpi=100: drawn.append(fig) or Path(path))
    plots.plot_learning_curves(a2c_run[0], keys=["episode/success_rate", "loss"], smooth=2)
    labels = [axis.get_ylabel() for axis in drawn[0].axes if axis.get_visible()]
    assert labels == ["success rate (share of episodes)\n(mean of 2 records)", "loss\n(mean of 2 records)"]


def test_pso_tsp_timing_excludes_a_policy_first_call(monkeypatch):
    """A policy's one-time cost (its first call in the process) is paid in the untimed
    warm-up, not charged to the row that runs it first."""
    import time

    import pglab.envs.pso_tsp as env_module
    from pglab.commands.pso_tsp import Methods, prepare_held_out
    from pglab.configs.pso_tsp import PSOTSPEvalConfig

    real = env_module.fixed_coefficients
    calls = []

    def first_call_costs(*args, **kwargs):
        if not calls:  # a one-time cost of 0.2 s CPU
            end = time.process_time() + 0.2
            while time.process_time() < end:
                pass
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(env_module, "fixed_coefficients", first_call_costs)
    config = PSOTSPEvalConfig(episodes=2, num_cities=6, n_particles=3, pso_iterations=2, device="cpu")
    methods = Methods(config, prepare_held_out(config))
    methods.warm_up()
    row = methods.swarm("classic", methods.constant(0.7298, 1.49618, 1.49618))
    methods.bar.close()
    assert calls and row["cpu_seconds"] < 0.1

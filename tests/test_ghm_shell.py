"""GHM on the shared training shell: exit codes, resume guarantees, logs,
progress bars, torch-free help, the agent API, memory checks and the plotted data."""

from __future__ import annotations

import csv
import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from test_ghm import TINY

from pglab.algos import ghm_train
from pglab.algos.ghm_train import GHMTrainConfig, train_ghm
from pglab.cli import main as pglab_main
from pglab.configs.ghm import budget_schedules
from pglab.errors import EXIT_INTERRUPTED
from pglab.run.checkpoint import load_checkpoint_file

QUIET = dict(echo=lambda *a, **k: None)
REPO = Path(__file__).resolve().parents[1]
# the flags of TINY for the command line
TINY_FLAGS = [
    "--n_trajectories",
    "64",
    "--T",
    "0.5",
    "--dt",
    "0.01",
    "--log_interval",
    "1",
    "--eval_interval",
    "1000",
    "--save_interval",
    "2",
    "--eval_quick_paths",
    "0",
    "--no-plots",
    "--no-final-eval",
    "--fd_nodes",
    "400",
    "--device",
    "cpu",
    "--seed",
    "3",
    "--lr_final_fraction",
    "1.0",
]


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    checkpoint = load_checkpoint_file(run_dir / "checkpoints")
    return {f"{net}.{key}": value for net, state in checkpoint["models"].items() for key, value in state.items()}


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key


def _numeric_rows(path: Path, skip=("perf/",)) -> list[dict[str, str]]:
    """A CSV's rows without the timing columns (which differ from run to run)."""
    with open(path, newline="") as handle:
        return [
            {k: v for k, v in row.items() if not k.startswith(skip) and k != "wall_time"}
            for row in csv.DictReader(handle)
        ]


# -- exit codes -------------------------------------------------------------------------


def test_a_stopped_run_exits_130_and_resumes_to_the_same_weights(tmp_path, monkeypatch):
    stopping = functools.partial(train_ghm, stop_after=1)
    monkeypatch.setattr(ghm_train, "train_ghm", stopping)
    run_dir = tmp_path / "run"
    assert (
        pglab_main(["train", "ghm", "--n_iterations", "3", "--log_dir", str(run_dir), *TINY_FLAGS]) == EXIT_INTERRUPTED
    )
    assert load_checkpoint_file(run_dir / "checkpoints")["counters"]["iteration"] == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted"


@pytest.mark.slow
def test_sigterm_saves_and_exits_130(tmp_path):
    run_dir = tmp_path / "run"
    flags = [f for f in TINY_FLAGS]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pglab.cli",
            "train",
            "ghm",
            "--n_iterations",
            "100000",
            "--log_dir",
            str(run_dir),
            *flags,
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (run_dir / "metrics.csv").exists() or len((run_dir / "metrics.csv").read_text().splitlines()) < 3:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "continue with --resume" in err
    assert load_checkpoint_file(run_dir / "checkpoints")["counters"]["iteration"] >= 2


# -- resume reads final_eval from the stored run ---------------------------------------


def test_resume_of_a_no_final_eval_run_exits_0_without_evaluating(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert pglab_main(["train", "ghm", "--n_iterations", "2", "--log_dir", str(run_dir), *TINY_FLAGS]) == 0
    assert pglab_main(["train", "ghm", "--resume", str(run_dir), "--n_iterations", "3"]) == 0
    assert load_checkpoint_file(run_dir / "checkpoints")["counters"]["iteration"] == 3
    assert not (run_dir / "evaluation.json").exists()


def test_resume_applies_a_given_flag_equal_to_its_default_and_refuses_a_model_change(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert pglab_main(["train", "ghm", "--n_iterations", "2", "--log_dir", str(run_dir), *TINY_FLAGS]) == 0
    # --log_interval 10 is the default: given on the command line, it is applied all the same
    assert pglab_main(["train", "ghm", "--resume", str(run_dir), "--n_iterations", "3", "--log_interval", "10"]) == 0
    assert load_checkpoint_file(run_dir / "checkpoints")["config"]["log_interval"] == 10
    capsys.readouterr()
    assert pglab_main(["train", "ghm", "--resume", str(run_dir), "--n_iterations", "4", "--n_trajectories", "32"]) == 2
    err = capsys.readouterr().err
    assert "n_trajectories" in err and len(err.strip().splitlines()) == 1


# -- what a resume guarantees -----------------------------------------------------------


def test_same_budget_resume_is_bit_identical_even_with_budget_dependent_schedules(tmp_path):
    config = dict(TINY, lr_final_fraction=0.2, final_max_std=0.2, action_repeat=4, final_action_repeat=1)
    assert budget_schedules(GHMTrainConfig(**config)) != []
    train_ghm(GHMTrainConfig(n_iterations=4, log_dir=tmp_path / "full", **config), **QUIET)
    stopped = train_ghm(GHMTrainConfig(n_iterations=4, log_dir=tmp_path / "split", **config), stop_after=2, **QUIET)
    assert stopped.interrupted and stopped.exit_code == EXIT_INTERRUPTED and stopped.iterations == 2
    messages = []
    resumed = train_ghm(
        GHMTrainConfig(n_iterations=4, resume=tmp_path / "split", **config),
        echo=lambda *a, **k: messages.append(" ".join(map(str, a))),
    )
    assert resumed.exit_code == 0 and resumed.iterations == 4
    assert not any("n_iterations" in m for m in messages)  # nothing to warn about
    _assert_same_weights(tmp_path / "full", tmp_path / "split")
    assert _numeric_rows(tmp_path / "full" / "metrics.csv") == _numeric_rows(tmp_path / "split" / "metrics.csv")


def test_extending_the_budget_with_constant_schedules_is_bit_identical(tmp_path):
    config = dict(TINY, lr_final_fraction=1.0, final_max_std=None)
    assert budget_schedules(GHMTrainConfig(**config)) == []
    assert budget_schedules(GHMTrainConfig(**dict(config, action_repeat=3, final_action_repeat=3))) == []
    train_ghm(GHMTrainConfig(n_iterations=4, log_dir=tmp_path / "full", **config), **QUIET)
    train_ghm(GHMTrainConfig(n_iterations=2, log_dir=tmp_path / "short", **config), **QUIET)
    messages = []
    train_ghm(
        GHMTrainConfig(n_iterations=4, resume=tmp_path / "short", **config),
        echo=lambda *a, **k: messages.append(" ".join(map(str, a))),
    )
    # the shell's one line naming the change, and no schedule warning
    assert [m for m in messages if "n_iterations" in m] == [
        f"resume: continuing {tmp_path / 'short'} with n_iterations 2 -> 4"
    ]
    _assert_same_weights(tmp_path / "full", tmp_path / "short")
    assert _numeric_rows(tmp_path / "full" / "metrics.csv") == _numeric_rows(tmp_path / "short" / "metrics.csv")


def test_extending_the_budget_with_a_decaying_schedule_warns_and_differs(tmp_path):
    config = dict(TINY, lr_final_fraction=0.2)
    assert budget_schedules(GHMTrainConfig(**config)) == ["lr_final_fraction=0.2"]
    train_ghm(GHMTrainConfig(n_iterations=4, log_dir=tmp_path / "full", **config), **QUIET)
    train_ghm(GHMTrainConfig(n_iterations=2, log_dir=tmp_path / "short", **config), **QUIET)
    messages = []
    result = train_ghm(
        GHMTrainConfig(n_iterations=4, resume=tmp_path / "short", **config),
        echo=lambda *a, **k: messages.append(" ".join(map(str, a))),
    )
    assert result.exit_code == 0 and result.iterations == 4
    notes = [m for m in messages if "n_iterations" in m and not m.startswith("resume: continuing")]
    assert len(notes) == 1 and "lr_final_fraction=0.2" in notes[0] and "2 -> 4" in notes[0]
    # as the note says: the 2-iteration schedule ended at 20 % of the rate, one 4-iteration run differs
    full = _weights(tmp_path / "full")
    extended = _weights(tmp_path / "short")
    assert any(not torch.equal(full[key], extended[key]) for key in full)


# -- a resumed run's eval.csv keeps every column ------------------------------------------


def test_resumed_eval_csv_keeps_the_dividend_threshold_column(tmp_path, monkeypatch):
    calls = []

    def threshold_from_the_third_check(states, rates, rate_max):
        calls.append(1)
        return None if len(calls) <= 2 else 0.5  # the policy starts paying dividends only later

    monkeypatch.setattr(ghm_train, "_threshold", threshold_from_the_third_check)
    config = dict(TINY, eval_interval=1)
    train_ghm(GHMTrainConfig(n_iterations=4, log_dir=tmp_path / "run", **config), stop_after=2, **QUIET)
    train_ghm(GHMTrainConfig(n_iterations=4, resume=tmp_path / "run", **config), **QUIET)
    with open(tmp_path / "run" / "eval.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["iteration"] for row in rows] == ["1", "2", "3", "4"]
    assert [row["policy/dividend_threshold"] for row in rows] == ["", "", "0.5", "0.5"]
    records = [json.loads(line) for line in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    assert [r.get("policy/dividend_threshold") for r in records] == [None, None, 0.5, 0.5]


# -- logs and progress bars --------------------------------------------------------------


def test_metrics_jsonl_and_the_metric_names(tmp_path):
    train_ghm(GHMTrainConfig(n_iterations=2, log_dir=tmp_path / "run", **TINY), **QUIET)
    meta, *records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert meta["meta"]["kind"] == "ghm-mc" and meta["meta"]["model"]["model"] == "GHMModel"
    assert [r["iteration"] for r in records] == [1, 2]
    with open(tmp_path / "run" / "metrics.csv", newline="") as handle:
        header = next(csv.reader(handle))
    for name in (
        "return/mean",
        "return/std",
        "loss/policy",
        "loss/baseline",
        "stats/lr/policy",
        "stats/lr/baseline",
        "episode/length",
        "perf/step_s",
        "perf/env_steps_per_s",
        "value/explained_variance",
    ):
        assert name in header and name in records[0], name
    assert not [name for name in header if name.startswith(("learning_rate/", "grad_norm/", "advantage/"))]
    assert [name for name in header if name.startswith("perf/")] == ["perf/step_s", "perf/env_steps_per_s"]
    assert all(record["perf/env_steps_per_s"] > 0 for record in records)
    # env_steps: the simulated path-steps, 64 paths x 50 steps per iteration
    assert load_checkpoint_file(tmp_path / "run" / "checkpoints")["counters"]["env_steps"] == 2 * 64 * 50
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"


def _recording_progress(monkeypatch):
    """Replace pglab.run.progress.progress_bar by one that records each bar's label and steps."""
    import pglab.run.progress as progress

    bars = []
    real = progress.progress_bar

    def recording(total, *, desc, initial=0, unit="it"):
        bar = real(total, desc=desc, initial=initial, unit=unit)
        record = {"desc": desc, "unit": unit, "updates": 0}
        bars.append(record)
        update = bar.update

        def counted(n=1):
            record["updates"] += n
            return update(n)

        bar.update = counted
        return bar

    monkeypatch.setattr(progress, "progress_bar", recording)
    return bars


def test_final_evaluation_and_pglab_evaluate_show_a_progress_bar(tmp_path, monkeypatch, capsys):
    bars = _recording_progress(monkeypatch)
    evaluated = dict(TINY, dt=0.05, eval_dt=0.05, final_eval=True, eval_paths=20, eval_cash=(0.5,))
    evaluated["eval_tail_tolerance"] = 0.5
    result = train_ghm(GHMTrainConfig(n_iterations=1, log_dir=tmp_path / "run", **evaluated), **QUIET)
    final = [bar for bar in bars if bar["desc"].startswith("final evaluation")]
    assert len(final) == 1 and final[0]["unit"] == "step" and final[0]["updates"] > 0
    evaluation = json.loads((tmp_path / "run" / "evaluation.json").read_text())
    assert final[0]["updates"] == round(evaluation["simulated_time"] / 0.05)  # one update per eval_dt step
    assert result.final_rows is not None
    bars.clear()
    output = tmp_path / "eval.json"
    assert (
        pglab_main(
            [
                "evaluate",
                str(tmp_path / "run"),
                "--episodes",
                "20",
                "--cash",
                "0.5",
                "--dt",
                "0.05",
                "--tail_tolerance",
                "0.5",
                "--device",
                "cpu",
                "--output",
                str(output),
            ]
        )
        == 0
    )
    shown = [bar for bar in bars if bar["desc"].startswith("evaluate ghm-mc")]
    assert len(shown) == 1 and shown[0]["updates"] > 0
    assert json.loads(output.read_text())["rows"][0]["initial_cash"] == 0.5
    # the old spelling still works, with a one-line note
    capsys.readouterr()
    assert (
        pglab_main(
            [
                "evaluate",
                str(tmp_path / "run"),
                "--n_episodes",
                "20",
                "--cash",
                "0.5",
                "--dt",
                "0.05",
                "--tail_tolerance",
                "0.5",
                "--json",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert "--n-episodes is deprecated; use --episodes" in captured.err
    assert json.loads(captured.out)["rows"][0]["initial_cash"] == 0.5
    # with no settings of its own, pglab evaluate reproduces the run's final table: the
    # run's paths, seed (seed + 2), tail tolerance and dt, path for path
    assert pglab_main(["evaluate", str(tmp_path / "run"), "--json", "--device", "cpu"]) == 0  # cash: the run's (0.5,)
    again = json.loads(capsys.readouterr().out)
    assert [row["initial_cash"] for row in again["rows"]] == [0.5]
    assert (again["num_paths"], again["seed"], again["dt"], again["tail_tolerance"]) == (
        20,
        TINY.get("seed", 0) + 2,
        0.05,  # the run's eval_dt
        0.5,
    )
    assert again["rows"][0]["value"] == evaluation["rows"][0]["value"]
    assert again["simulated_time"] == evaluation["simulated_time"]
    # a step coarser than training's is allowed, with a warning naming both
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("always")  # shown once per process otherwise, and the calls above ran first
        assert (
            pglab_main(["evaluate", str(tmp_path / "run"), "--cash", "0.5", "--dt", "0.1", "--json", "--device", "cpu"])
            == 0
        )
    assert "pglab: warning: dt 0.1 is coarser than the run's training dt 0.05" in capsys.readouterr().err


# -- sizes that cannot fit -------------------------------------------------------------------


def test_a_rollout_that_cannot_fit_is_a_one_line_config_error_and_leaves_nothing(tmp_path, capsys):
    run_dir = tmp_path / "runs" / "huge"
    code = pglab_main(["train", "ghm", "--n_trajectories", str(10**12), "--log_dir", str(run_dir), "--device", "cpu"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "n_trajectories: needs ~" in err and " GB " in err
    assert not (tmp_path / "runs").exists()
    # scientific notation is not an integer: still one line, exit 2, nothing written
    assert pglab_main(["train", "ghm", "--n_trajectories", "1e12", "--log_dir", str(run_dir), "--device", "cpu"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_a_start_that_fails_after_the_directory_exists_leaves_nothing(tmp_path, monkeypatch):
    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(ghm_train, "build_networks", out_of_memory)
    run_dir = tmp_path / "runs" / "run"
    with pytest.raises(RuntimeError, match="out of memory"):
        train_ghm(GHMTrainConfig(n_iterations=2, log_dir=run_dir, **TINY), **QUIET)
    assert not (tmp_path / "runs").exists()


# -- items 5 and 8 (agent API) -------------------------------------------------------------------------


def test_a_checkpoint_counting_sim_steps_resumes_counting_them_as_env_steps(tmp_path):
    """Checkpoints of an older pglab count the simulated path-steps as ``sim_steps``: a
    resume carries that count on as ``env_steps``."""
    from pglab.run.checkpoint import save_checkpoint

    run_dir = tmp_path / "run"
    train_ghm(GHMTrainConfig(n_iterations=2, log_dir=run_dir, **TINY), **QUIET)
    checkpoint = load_checkpoint_file(run_dir / "checkpoints")
    checkpoint["counters"]["sim_steps"] = checkpoint["counters"].pop("env_steps")
    save_checkpoint(Path(checkpoint.pop("path")).resolve(), checkpoint)
    train_ghm(GHMTrainConfig(n_iterations=3, resume=run_dir, **TINY), **QUIET)
    counters = load_checkpoint_file(run_dir / "checkpoints")["counters"]
    assert counters["env_steps"] == 3 * 64 * 50 and "sim_steps" not in counters


def test_load_checkpoint_auto_gives_an_agent_with_the_common_api(tmp_path):
    import pglab
    from pglab.agent import Agent, NoCritic

    train_ghm(GHMTrainConfig(n_iterations=1, log_dir=tmp_path / "mc", **TINY), **QUIET)
    agent = pglab.load_checkpoint(tmp_path / "mc" / "checkpoints" / "checkpoint_latest.pt", device="auto")
    assert isinstance(agent, Agent) and agent.kind == "ghm-mc" and agent.config.n_trajectories == 64
    cash = torch.tensor([[0.1], [0.5], [2.0]], device=agent.device)
    rates = agent.act(cash, deterministic=True)
    assert rates.shape == (3, 2) and rates.min() >= 0 and rates.max() <= 1
    predicted = agent.predict(np.array([[0.1], [0.5], [2.0]]))
    assert isinstance(predicted, np.ndarray) and predicted.shape == (3, 2)
    np.testing.assert_allclose(predicted, rates.cpu().numpy())
    assert agent.value(cash).shape == (3,)

    train_ghm(GHMTrainConfig(n_iterations=1, log_dir=tmp_path / "plain", no_baseline=True, **TINY), **QUIET)
    plain = pglab.load_checkpoint(tmp_path / "plain" / "checkpoints", device="cpu")
    assert plain.predict(np.array([[0.5]])).shape == (1, 2)
    with pytest.raises(NoCritic, match="no-baseline"):
        plain.value(torch.tensor([[0.5]]))


# -- --help imports no torch, shows no odd spellings --------------------------

HELP_SCRIPT = """
import sys
from pglab.cli import main
code = main(sys.argv[1:])
print("TORCH_IMPORTED" if "torch" in sys.modules else "TORCH_FREE")
"""


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["train", "ghm", "--help"],
            ["--no-final-eval", "--no-baseline", "--threads", "--device", "--save-interval", "--resume"],
        ),
        (["solve", "ghm", "--help"], ["--output", "--nodes"]),
        (["solve", "ghm-credit-line", "--help"], ["--credit-limit"]),
        (["validate", "--help"], ["--output"]),
        (["compare", "--help"], ["--output"]),
    ],
)
def test_help_imports_no_torch_and_uses_the_one_vocabulary(argv, expected):
    proc = subprocess.run(
        [sys.executable, "-c", HELP_SCRIPT, *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
    )
    out = proc.stdout + proc.stderr
    assert "TORCH_FREE" in out, out[-2000:]
    for flag in expected:
        assert flag in out, flag
    for odd in ("--no-no-", "--no-final_eval", "--n-episodes", "GHMTrainConfig"):
        assert odd not in out, odd


def test_evaluate_help_imports_no_torch_and_lists_episodes_and_output():
    script = (
        "import sys\nfrom pglab.commands.ghm import evaluate\n"
        "try:\n    evaluate(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('TORCH_IMPORTED' if 'torch' in sys.modules else 'TORCH_FREE')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, env={**os.environ, "COLUMNS": "200"}
    )
    out = proc.stdout + proc.stderr
    assert "TORCH_FREE" in out and "--episodes" in out and "--output" in out and "--device" in out and "auto" in out


def test_no_baseline_flag_has_one_spelling_and_trains_without_a_critic(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert (
        pglab_main(["train", "ghm", "--n_iterations", "1", "--no-baseline", "--log_dir", str(run_dir), *TINY_FLAGS])
        == 0
    )
    assert "baseline" not in load_checkpoint_file(run_dir / "checkpoints")["models"]
    assert pglab_main(["train", "ghm", "--no-no-baseline", "--log_dir", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


def test_compare_message_and_docs_spell_no_final_eval_with_dashes(tmp_path, capsys):
    train_ghm(GHMTrainConfig(n_iterations=1, log_dir=tmp_path / "run", **TINY), **QUIET)
    assert pglab_main(["compare", str(tmp_path / "run"), "--output", str(tmp_path / "cmp")]) == 2
    assert "--no-final-eval" in capsys.readouterr().err
    for doc in ("docs/ghm.md", "docs/ghm-solvers.md", "docs/ghm-validation.md"):
        text = (REPO / doc).read_text()
        assert "no-final_eval" not in text and "--no_baseline" not in text, doc


# -- what the plots show -------------------------------------------------------------------------


class _RampPolicy:
    """Gaussian means from (-0.5, 1.5) at c = 0 to (1.5, -0.5) at c = 2: outside the box on both sides."""

    def mean_std(self, states):
        t = states[:, :1] / 2.0
        mean = torch.cat([-0.5 + 2.0 * t, 1.5 - 2.0 * t], 1)
        return mean, torch.full_like(mean, 0.3)


def test_policy_plot_data_shows_the_applied_rates_and_their_payout(tmp_path):
    from pglab.envs.ghm import GHMModel, GHMParams
    from pglab.run.ghm_plots import plot_policy_value

    model = GHMModel(GHMParams(lambda_dilution=0.1, a_L_max=1.0, a_E_max=1.0))
    data = ghm_train.policy_plot_data(_RampPolicy(), None, model, 2.0, torch.device("cpu"), points=41)
    assert data.pre_clip_means.min() == pytest.approx(-0.5) and data.pre_clip_means.max() == pytest.approx(1.5)
    assert data.rates.min() == 0.0 and data.rates.max() == 1.0  # what the simulator applies
    np.testing.assert_allclose(data.payout, data.rates[:, 0] - 1.1 * data.rates[:, 1], rtol=1e-6)
    # the payout rate lies in [-(1 + lambda) a_E_max, a_L_max]: never 1.55 or -1.5
    assert data.payout.max() == pytest.approx(1.0) and data.payout.min() == pytest.approx(-1.1)
    assert data.values is None
    png = plot_policy_value(data=data, iteration=7, output=tmp_path / "p.png")
    assert png.stat().st_size > 10_000


def _fake_run(run_dir: Path, algo: str, seed: int, quick: list[float], final: list[float]) -> dict:
    run_dir.mkdir(parents=True)
    with open(run_dir / "eval.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["iteration", "wall_time", "env_steps", "eval/pct_optimal_min"])
        for i, pct in enumerate(quick):
            writer.writerow([100 * (i + 1), 10.0 * (i + 1), 1e6 * (i + 1), pct])
    return {
        "run": str(run_dir),
        "solver": algo,
        "seed": seed,
        "eval_cash": [0.5, 1.0],
        **{f"pct_c{c:g}": v for c, v in zip((0.5, 1.0), final, strict=False)},
    }


def test_compare_reads_the_simulated_steps_to_a_target_from_eval_csv(tmp_path):
    from pglab.commands.compare import _first_reaching

    _fake_run(tmp_path / "run", "mc", 42, [96.0, 98.5, 99.5], [99.0, 99.0])
    with open(tmp_path / "run" / "eval.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert _first_reaching(rows, 97.0) == (20.0, 2e6) and _first_reaching(rows, 99.9) == (None, None)
    # an eval.csv written by an older pglab names the counter sim_steps
    old = [{("sim_steps" if k == "env_steps" else k): v for k, v in row.items()} for row in rows]
    assert _first_reaching(old, 99.0) == (30.0, 3e6)


def test_comparison_plot_data_has_a_title_a_labelled_target_and_a_sensible_axis(tmp_path):
    from pglab.commands.compare import comparison_plot_data, plot_comparison

    rows = [
        _fake_run(tmp_path / "2024-01-01-run-a", "mc", 42, [96.0, 98.5], [98.2, 98.9]),
        _fake_run(tmp_path / "2024-01-01-run-b", "pathwise", 42, [97.5, 99.0], [99.1, 99.4]),
        _fake_run(tmp_path / "2024-01-01-run-c", "mc", 42, [95.5, 97.0], [97.7, 98.0]),
    ]
    data = comparison_plot_data(rows)
    assert data["title"]
    assert data["target"] == 98.0 and "98" in data["target_label"]
    labels = [curve["label"] for curve in data["curves"]]
    assert labels == ["mc, seed 42", "pathwise, seed 42", "mc, seed 42 #2"]
    assert [bar["label"] for bar in data["bars"]] == labels
    assert not any("run-" in label for label in labels)  # solver and seed, not directory names
    assert data["curves"][0]["pct"] == [96.0, 98.5] and data["bars"][1]["pct"] == [99.1, 99.4]
    for low, high in (data["curve_ylim"], data["bar_ylim"]):
        assert low <= 90.0 and high >= 100.0  # the whole data range, the target and V* in view
    assert plot_comparison(rows, tmp_path / "cmp.png").stat().st_size > 10_000


# -- the model as a nested config (GHMParams is a field of GHMTrainConfig) -------------


def test_model_parameters_are_a_nested_config_with_the_documented_flat_flags_and_keys(tmp_path):
    """--sigma sets config.params.sigma; YAML takes the flat key and the nested mapping; a
    config stored flat by an older pglab (checkpoints, config.json) loads into the nested one."""
    from pglab.configs.ghm import GHMParams
    from pglab.run.config import config_from_dict, config_to_dict, parse_flags

    parsed = parse_flags(GHMTrainConfig, ["--sigma", "0.3", "--lambda_dilution", "0.25", "--a-L-max", "2"], prog="t")
    assert parsed.config.params == GHMParams(sigma=0.3, lambda_dilution=0.25, a_L_max=2.0)
    assert {"params.sigma", "params.lambda_dilution", "params.a_L_max"} == parsed.given
    flat = tmp_path / "flat.yaml"
    flat.write_text("sigma: 0.3\nrho: 0.2\nn_iterations: 7\n")
    nested = tmp_path / "nested.yaml"
    nested.write_text("params:\n  sigma: 0.3\n  rho: 0.2\nn_iterations: 7\n")
    from_flat = parse_flags(GHMTrainConfig, ["--config", str(flat)], prog="t").config
    assert from_flat == parse_flags(GHMTrainConfig, ["--config", str(nested)], prog="t").config
    assert from_flat.params == GHMParams(sigma=0.3, rho=0.2) and from_flat.n_iterations == 7
    # a flag overrides one key of the file and keeps the others
    assert parse_flags(GHMTrainConfig, ["--config", str(flat), "--sigma", "0.1"], prog="t").config.params == GHMParams(
        sigma=0.1, rho=0.2
    )
    old_style = {key: value for key, value in config_to_dict(GHMTrainConfig()).items() if key != "params"}
    old_style.update(mu=0.05, sigma=0.15)
    restored = config_from_dict(GHMTrainConfig, old_style)
    assert restored.params == GHMParams(mu=0.05, sigma=0.15)
    assert config_from_dict(GHMTrainConfig, config_to_dict(restored)) == restored


def test_resume_refusing_a_model_parameter_names_its_flag(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert pglab_main(["train", "ghm", *TINY_FLAGS, "--n-iterations", "1", "--log-dir", str(run_dir)]) == 0
    capsys.readouterr()
    assert pglab_main(["train", "ghm", "--resume", str(run_dir), "--n-iterations", "2", "--rho", "0.3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pglab: error: rho") and "0.3" in err[0] and "differs" in err[0]
    # the same value as stored is no change, so the resume goes on
    assert pglab_main(["train", "ghm", "--resume", str(run_dir), "--n-iterations", "2", "--rho", "0.1"]) == 0


def test_resume_compares_only_the_given_model_parameters(tmp_path, capsys):
    """A run trained at sigma 0.3 resumed with --rho 0.1 (its stored value) goes on: only
    the given leaf is compared, not the rest of the nested config's defaults (which would
    wrongly name sigma); a differing leaf is refused under its own name."""
    run_dir = tmp_path / "run"
    assert (
        pglab_main(["train", "ghm", *TINY_FLAGS, "--n-iterations", "1", "--sigma", "0.3", "--log-dir", str(run_dir)])
        == 0
    )
    assert pglab_main(["train", "ghm", "--resume", str(run_dir), "--n-iterations", "2", "--rho", "0.1"]) == 0
    stored = json.loads((run_dir / "config.json").read_text())["config"]["params"]
    assert stored["sigma"] == 0.3 and stored["rho"] == 0.1
    capsys.readouterr()
    assert pglab_main(["train", "ghm", "--resume", str(run_dir), "--n-iterations", "3", "--mu", "0.2"]) == 2
    assert capsys.readouterr().err.startswith("pglab: error: mu: differs")


def test_the_mc_iteration_budget_grows_as_one_over_rho_below_the_reference_and_with_divisions():
    # time scales from the model: 300 iterations at rho >= 0.1 before the threshold
    # refinement (1,000 without it), scaled by 0.1 / rho below, and by N on N divisions
    from pglab.configs.ghm import GHMParams, mc_iterations

    assert GHMTrainConfig().n_iterations == 300
    assert GHMTrainConfig(refine_thresholds=False).n_iterations == 1000
    assert GHMTrainConfig(params=GHMParams(rho=0.12)).n_iterations == 300
    assert GHMTrainConfig(params=GHMParams(mu=0.12, rho=0.07)).n_iterations == mc_iterations(0.07) == 429
    assert GHMTrainConfig(params=GHMParams(rho=0.06, sigma=0.4), refine_thresholds=False).n_iterations == 1667
    assert mc_iterations(0.06, refined=False) == 1667
    # N divisions: N times one division's budget (one division is GHM's)
    assert GHMTrainConfig(model="divisions", divisions=1).n_iterations == 1000
    assert GHMTrainConfig(model="divisions", divisions=2).n_iterations == 2000
    assert GHMTrainConfig(model="divisions", divisions=8, params=GHMParams(rho=0.08)).n_iterations == 8 * 1250
    assert GHMTrainConfig(model="ou").n_iterations == GHMTrainConfig(model="regimes").n_iterations == 300
    # a budget given is kept; the other solvers keep theirs
    assert GHMTrainConfig(model="divisions", divisions=4, n_iterations=70).n_iterations == 70
    assert GHMTrainConfig(n_iterations=50, params=GHMParams(mu=0.12, rho=0.07)).n_iterations == 50
    assert GHMTrainConfig(algo="pathwise", params=GHMParams(mu=0.12, rho=0.07)).n_iterations == 350


def test_the_final_evaluation_step_is_a_quarter_of_dt_unless_given():
    from pglab.configs.ghm import final_eval_dt
    from pglab.errors import ConfigError

    assert final_eval_dt(GHMTrainConfig()) == 0.0025
    assert final_eval_dt(GHMTrainConfig(dt=0.02)) == 0.005
    assert final_eval_dt(GHMTrainConfig(eval_dt=0.01)) == 0.01
    with pytest.raises(ConfigError, match="eval_dt"):
        GHMTrainConfig(eval_dt=0.0)

"""pglab train a2c / stream-ac inside the training shell: the two trainers' module
boundary, logs, signals, resume rules, failed starts, --help without torch, the CLI
vocabulary, stored configs with old field names, and the agent API."""

import ast
import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import pglab
from pglab.agent import Agent
from pglab.algos.a2c import A2CTrainConfig, train_a2c
from pglab.cli import main as cli_main
from pglab.configs.a2c import A2CEvaluateConfig, PixelGoalConfig
from pglab.envs.pixel_goal import PixelGoalEnv
from pglab.errors import EXIT_INTERRUPTED
from pglab.run.checkpoint import load_checkpoint_file

ROOT = Path(__file__).resolve().parents[1]


def quiet(*args, **kwargs):
    """An echo that prints nothing."""


# tiny a2c runs: 4 envs on a 4x4 board, a 16-unit dense layer
TINY_FLAGS = [
    "--num-envs",
    "4",
    "--update-every",
    "1",
    "--pixel-goal.grid-size",
    "4",
    "--hidden",
    "16",
    "--device",
    "cpu",
]
TINY = dict(num_envs=4, update_every=1, pixel_goal=PixelGoalConfig(grid_size=4), hidden=16, device="cpu")


def records(run_dir):
    lines = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if "meta" not in r and "error" not in r]


def weights(run_dir):
    return load_checkpoint_file(run_dir)["models"]["model"]


def same_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- the a2c <-> stream-ac import cycle --------------------------------------------------
def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at top level or inside functions."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_a2c_and_stream_ac_do_not_import_each_other():
    algos = ROOT / "pglab" / "algos"
    assert not {"pglab.algos.stream_ac", "pglab.algos.a2c"} & _imported_modules(algos / "a2c.py") - {"pglab.algos.a2c"}
    assert "pglab.algos.a2c" not in _imported_modules(algos / "stream_ac.py")
    assert not {"pglab.algos.a2c", "pglab.algos.stream_ac"} & _imported_modules(algos / "a2c_common.py")


def _run_with_blocked(blocked: str, code: str) -> None:
    # sys.modules[name] = None makes any import of `name`, even inside a function, raise ImportError
    script = f"import sys\nsys.modules[{blocked!r}] = None\n{code}"
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PGLAB_NO_PROGRESS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_each_trainer_works_with_the_other_blocked(tmp_path):
    run = tmp_path / "stream"
    # stream-ac trains without pglab.algos.a2c...
    _run_with_blocked(
        "pglab.algos.a2c",
        f"""
from pglab.algos.stream_ac import train_stream_ac
from pglab.configs.a2c import A2CTrainConfig, PixelGoalConfig
config = A2CTrainConfig(algo="stream-ac", num_envs=1, total_env_steps=6, pixel_goal=PixelGoalConfig(grid_size=4),
                        hidden=8, device="cpu", log_dir={str(run)!r})
train_stream_ac(config, echo=lambda *a, **k: None)
""",
    )
    # ...and the a2c module loads that stream-ac agent without pglab.algos.stream_ac
    _run_with_blocked(
        "pglab.algos.stream_ac",
        f"""
from pglab.algos.a2c import agent_from_checkpoint
from pglab.run.checkpoint import load_checkpoint_file
agent = agent_from_checkpoint(load_checkpoint_file({str(run)!r}), device="cpu")
assert agent.kind == "a2c-stream-ac"
""",
    )


# -- logs: metrics.csv + metrics.jsonl + TensorBoard, no stale values ---------------------
def test_a2c_writes_csv_jsonl_and_tensorboard_with_empty_cells_where_no_episode_ended(tmp_path):
    run = tmp_path / "run"
    # one env, one env-step per window: most windows finish no episode
    train_a2c(A2CTrainConfig(total_env_steps=12, log_dir=run, **{**TINY, "num_envs": 1}), echo=quiet)
    assert (run / "metrics.csv").exists() and (run / "metrics.jsonl").exists()
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert [int(r["opt_steps"]) for r in rows] == list(range(1, 13))
    empty = [r for r in rows if float(r["episode/count"]) == 0]
    assert empty and all(r["return/mean"] == "" and r["episode/success_rate"] == "" for r in empty)
    assert all("return/mean" not in r for r in records(run) if r["episode/count"] == 0)
    assert all("nan" not in line.lower() for line in (run / "metrics.csv").read_text().splitlines())
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"


# -- SIGINT/SIGTERM: exit 130 -------------------------------------------------------------
@pytest.mark.parametrize("algo_flags", [[], ["--algo", "stream-ac", "--num-envs", "1"]], ids=["a2c", "stream-ac"])
def test_sigterm_exits_130_with_a_checkpoint(tmp_path, monkeypatch, capsys, algo_flags):
    calls = {"n": 0}
    step = PixelGoalEnv.step

    def signalling_step(self, actions):
        calls["n"] += 1
        if calls["n"] == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return step(self, actions)

    monkeypatch.setattr(PixelGoalEnv, "step", signalling_step)
    run = tmp_path / "run"
    code = cli_main(["train", "a2c", *TINY_FLAGS, *algo_flags, "--total-env-steps", "400", "--log-dir", str(run)])
    assert code == EXIT_INTERRUPTED
    assert load_checkpoint_file(run)["counters"]["opt_steps"] == 3
    assert json.loads((run / "summary.json").read_text())["status"] == "interrupted"


# -- a resume applies the given budget without fresh-run cross-field checks --------------
def test_resume_with_a_budget_below_the_default_num_envs(tmp_path, capsys):
    run = tmp_path / "run"
    flags = [
        "--num-envs",
        "64",
        "--update-every",
        "1",
        "--pixel-goal.grid-size",
        "4",
        "--hidden",
        "8",
        "--device",
        "cpu",
    ]
    assert cli_main(["train", "a2c", *flags, "--total-env-steps", "64", "--log-dir", str(run)]) == 0
    # 100 < 256 (the default num_envs), but the run has 64 envs: 2 optimiser steps of 64
    assert cli_main(["train", "a2c", "--resume", str(run), "--total-env-steps", "100"]) == 0, capsys.readouterr().err
    assert load_checkpoint_file(run)["counters"]["opt_steps"] == 2
    assert [r["opt_steps"] for r in records(run)] == [1, 2]
    # a fresh run is still checked
    assert (
        cli_main(["train", "a2c", "--num-envs", "64", "--total-env-steps", "10", "--log-dir", str(tmp_path / "b")]) == 2
    )
    assert "total_env_steps" in capsys.readouterr().err and not (tmp_path / "b").exists()


# -- killed before the first checkpoint -> resumable; failed start -> nothing -------------
@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_resumes_from_step_0(tmp_path, capsys):
    run = tmp_path / "run"
    flags = [*TINY_FLAGS, "--total-env-steps", "24", "--save-interval", "100"]
    script = f"""
import os, signal
from pglab.envs.pixel_goal import PixelGoalEnv
step = PixelGoalEnv.step
calls = {{"n": 0}}
def dying_step(self, actions):
    calls["n"] += 1
    if calls["n"] == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return step(self, actions)
PixelGoalEnv.step = dying_step
from pglab.cli import main
main(["train", "a2c", *{flags!r}, "--log-dir", {str(run)!r}])
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, "PGLAB_NO_PROGRESS": "1"}, capture_output=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL
    assert (run / "config.json").exists() and not list((run / "checkpoints").glob("*.pt"))
    assert cli_main(["train", "a2c", "--resume", str(run)]) == 0, capsys.readouterr().err
    fresh = tmp_path / "fresh"
    assert cli_main(["train", "a2c", *flags, "--log-dir", str(fresh)]) == 0
    assert same_weights(weights(run), weights(fresh))
    assert [r["opt_steps"] for r in records(run)] == list(range(1, 7))  # the dead attempt's rows are gone


def test_unknown_env_leaves_no_run_directory(tmp_path, capsys):
    run = tmp_path / "deep" / "run"
    assert (
        cli_main(
            ["train", "a2c", *TINY_FLAGS, "--env", "pglab:no-such-env", "--total-env-steps", "8", "--log-dir", str(run)]
        )
        == 2
    )
    assert "env" in capsys.readouterr().err
    assert not (tmp_path / "deep").exists()
    # and the same directory then starts cleanly
    assert cli_main(["train", "a2c", *TINY_FLAGS, "--total-env-steps", "8", "--log-dir", str(run)]) == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_device_cuda_without_a_gpu_leaves_no_run_directory(tmp_path, capsys):
    run = tmp_path / "run"
    flags = [*TINY_FLAGS[:-2], "--device", "cuda", "--total-env-steps", "8", "--log-dir", str(run)]
    assert cli_main(["train", "a2c", *flags]) == 2
    assert "device" in capsys.readouterr().err and not run.exists()


# -- --help without torch -------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["train", "a2c", "--help"], ["train", "a2c", "--algo", "stream-ac", "--help"]])
def test_help_does_not_import_torch(argv):
    code = (
        f"import sys\nfrom pglab.cli import main\ncode = main({argv!r})\n"
        "assert code == 0, code\nprint('torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "--save-interval" in proc.stdout and "--total-env-steps" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "False"


# -- the CLI vocabulary ------------------------------------------------------------------------
def test_save_interval_and_its_old_names(tmp_path, capsys):
    for name, flag in (
        ("new", "--save-interval"),
        ("old", "--checkpoint-every-opt-steps"),
        ("older", "--checkpoint-every"),
    ):
        run = tmp_path / name
        assert cli_main(["train", "a2c", *TINY_FLAGS, "--total-env-steps", "12", flag, "2", "--log-dir", str(run)]) == 0
        saved = sorted(p.name for p in (run / "checkpoints").glob("checkpoint_iter_*.pt"))
        assert saved == ["checkpoint_iter_000002.pt", "checkpoint_iter_000003.pt"]  # every 2 steps and the last
        err = capsys.readouterr().err
        assert ("deprecated" in err) == (name != "new")
    assert json.loads((tmp_path / "old" / "config.json").read_text())["config"]["save_interval"] == 2


def test_defaults_follow_the_shared_vocabulary():
    config = A2CTrainConfig()
    assert (config.device, config.threads, config.seed, config.save_interval, config.log_dir) == (
        "auto",
        0,
        0,
        500,
        None,
    )
    evaluate = A2CEvaluateConfig(checkpoint=Path("x"))
    assert (evaluate.device, evaluate.output, evaluate.episodes) == ("auto", None, 2000)


def test_evaluate_output_and_episodes_alias(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli_main(["train", "a2c", *TINY_FLAGS, "--total-env-steps", "8", "--log-dir", str(run)]) == 0
    out = tmp_path / "eval" / "result.json"
    assert cli_main(["evaluate", str(run), "--n-episodes", "6", "--num-envs", "4", "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["episodes"] == 6 and 0 <= result["success_rate"] <= 1
    assert "deprecated" in capsys.readouterr().err


def test_a_run_written_with_the_old_field_names_loads_and_resumes(tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        cli_main(["train", "a2c", *TINY_FLAGS, "--total-env-steps", "8", "--save-interval", "7", "--log-dir", str(run)])
        == 0
    )
    # rewrite config.json and the checkpoint in format 1 with the old field names
    payload = json.loads((run / "config.json").read_text())
    payload["config"]["checkpoint_every_opt_steps"] = payload["config"].pop("save_interval")
    payload["config"].update(payload["config"].pop("pixel_goal"))  # the flat pixel-goal fields
    (run / "config.json").write_text(json.dumps(payload))
    checkpoint = {k: v for k, v in load_checkpoint_file(run).items() if k != "path"}
    checkpoint["config"] = dict(payload["config"])
    checkpoint["format_version"] = 1
    for path in (run / "checkpoints").glob("*.pt"):
        path.unlink()
    torch.save(checkpoint, run / "checkpoints" / "checkpoint_latest.pt")
    config = pglab.load_checkpoint(run, device="cpu").config
    assert config.save_interval == 7 and config.pixel_goal == PixelGoalConfig(grid_size=4)
    assert cli_main(["train", "a2c", "--resume", str(run), "--total-env-steps", "12"]) == 0, capsys.readouterr().err
    assert load_checkpoint_file(run)["counters"]["opt_steps"] == 3


def test_pixel_goal_is_a_nested_config_and_the_flat_flags_still_work(tmp_path, capsys):
    run = tmp_path / "run"
    flat = [
        "--num-envs",
        "4",
        "--update-every",
        "1",
        "--grid-size",
        "4",
        "--tau",
        "0.6",
        "--hidden",
        "16",
        "--device",
        "cpu",
    ]
    assert cli_main(["train", "a2c", *flat, "--total-env-steps", "8", "--log-dir", str(run)]) == 0
    assert "--grid-size is deprecated" in capsys.readouterr().err
    stored = json.loads((run / "config.json").read_text())["config"]
    assert stored["pixel_goal"]["grid_size"] == 4 and stored["pixel_goal"]["tau"] == 0.6 and "grid_size" not in stored
    assert pglab.load_checkpoint(run).config.pixel_goal == PixelGoalConfig(grid_size=4, tau=0.6)
    # the environment is part of the trajectory: a resume may not change it
    assert (
        cli_main(["train", "a2c", "--resume", str(run), "--pixel-goal.grid-size", "5", "--total-env-steps", "12"]) == 2
    )
    assert "pixel_goal" in capsys.readouterr().err


# -- the agent API -----------------------------------------------------------------------------
@pytest.mark.parametrize("algo", ["a2c", "stream-ac"])
def test_load_checkpoint_gives_an_agent(tmp_path, algo):
    run = tmp_path / "run"
    flags = ["--algo", algo, "--num-envs", "1"] if algo == "stream-ac" else []
    assert cli_main(["train", "a2c", *TINY_FLAGS, *flags, "--total-env-steps", "8", "--log-dir", str(run)]) == 0
    agent = pglab.load_checkpoint(run, device="auto")
    assert isinstance(agent, Agent) and agent.kind == {"a2c": "a2c-td0", "stream-ac": "a2c-stream-ac"}[algo]
    assert agent.config.algo == algo
    env = agent.make_env(3, seed=1)
    obs = env.reset()
    actions = agent.act(obs, deterministic=True)
    assert actions.dtype == torch.int32 and actions.shape == (3,)
    predicted = agent.predict(obs.cpu().numpy())
    assert isinstance(predicted, np.ndarray) and np.array_equal(predicted, actions.cpu().numpy())
    assert agent.value(obs).shape == (3,)


class _ShortSuccessEnv:
    """Copy 0 succeeds after 1 step, every other copy truncates after 10: the unbiased
    estimate from one episode per copy is 1 / num_envs, whatever the episode count."""

    defines_success = True  # success: copy 0's termination (info["success"])

    def __init__(self, num_envs):
        import torch

        self.num_envs, self.device = num_envs, torch.device("cpu")
        self.t = torch.zeros(num_envs, dtype=torch.long)

    def reset(self):
        import torch

        self.t.zero_()
        return torch.zeros(self.num_envs, 1)

    def step(self, actions):
        import torch

        self.t += 1
        done = torch.zeros(self.num_envs, dtype=torch.bool)
        done[0] = True
        trunc = (self.t >= 10) & ~done
        self.t[done | trunc] = 0
        return torch.zeros(self.num_envs, 1), done.float(), done, trunc, {"success": done}


def test_evaluation_counts_each_copys_first_episodes_not_the_quickest():
    import torch

    from pglab.algos.a2c_common import evaluate_policy

    def act(obs):  # always action 0
        return torch.zeros(obs.shape[0], dtype=torch.int32)

    # 4 copies, 4 episodes: one per copy -> 1 success in 4. Counting the first 4 episodes
    # to end would take copy 0's four 1-step successes (rate 1.0).
    result = evaluate_policy(act, _ShortSuccessEnv(4), episodes=4)
    assert result["episodes"] == 4 and result["success_rate"] == 0.25
    assert result["length_mean"] == (1 + 10 + 10 + 10) / 4
    # 6 episodes on 4 copies: quotas (2, 2, 1, 1) -> copy 0 gives 2 successes of 6.
    assert evaluate_policy(act, _ShortSuccessEnv(4), episodes=6)["success_rate"] == 2 / 6

"""maxk-pomo inside the training shell: CLI vocabulary, --help without torch, stop -> 130,
resume semantics, failed starts, and the agent API of ``pglab.load_checkpoint``."""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

from pglab.cli import main
from pglab.configs.maxk import VARIANCE_REDUCTIONS, MaxKEvalConfig, MaxKPOMOTrainConfig
from pglab.errors import UsageError
from pglab.run.checkpoint import load_checkpoint_file
from pglab.run.config import config_from_dict, parse_flags

TINY = [
    "--num-loc",
    "6",
    "--k",
    "3",
    "--batch-size",
    "4",
    "--embed-dim",
    "16",
    "--num-encoder-layers",
    "1",
    "--num-heads",
    "2",
    "--device",
    "cpu",
    "--log-every",
    "1",
    "--save-interval",
    "1",
]


def steps_logged(run_dir):
    with open(run_dir / "metrics.csv") as handle:
        return [int(row["step"]) for row in csv.DictReader(handle)]


# -- vocabulary and --help (no rl4co needed) --------------------------------------------


@pytest.mark.parametrize("command", [["train", "maxk-pomo", "--help"], ["evaluate", "maxk-pomo", "--help"]])
def test_help_imports_neither_torch_nor_rl4co(command):
    code = (
        f"import sys\nfrom pglab.cli import main\ntry:\n    main({command!r})\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'rl4co', 'lightning') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--save-interval" in done.stdout or "--episodes" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_old_flag_and_key_names_still_work(capsys):
    train = parse_flags(MaxKPOMOTrainConfig, ["--checkpoint-every", "7"], prog="t").config
    assert train.save_interval == 7
    evaluate = parse_flags(MaxKEvalConfig, ["--checkpoints", "x", "--num-instances", "9"], prog="e").config
    assert evaluate.episodes == 9
    notes = capsys.readouterr().err
    assert "--checkpoint-every is deprecated; use --save-interval" in notes
    assert "--num-instances is deprecated; use --episodes" in notes
    # Configs stored by earlier versions (config.json, checkpoints) still load.
    assert config_from_dict(MaxKPOMOTrainConfig, {"checkpoint_every": 5}).save_interval == 5
    assert MaxKPOMOTrainConfig().device == "auto"


def test_config_modes_are_the_estimators_modes():
    from pglab.estimators.maxk import VARIANCE_REDUCTIONS as estimator_modes

    assert estimator_modes == VARIANCE_REDUCTIONS


def test_defaults_are_the_documented_runs():
    """`pglab train maxk-pomo` with no flags trains what docs/maxk.md measured (its
    reproduce command at 2,000 steps), up to the flags that pin the machine (threads,
    device) and the seed."""
    import re
    import shlex
    from pathlib import Path

    docs = (Path(__file__).resolve().parent.parent / "docs" / "maxk.md").read_text()
    common = re.search(r'^COMMON="([^"]+)"', docs, flags=re.MULTILINE).group(1)
    flags = shlex.split(common.replace("$STEPS", "2000").replace("$SEED", "0"))
    documented = parse_flags(MaxKPOMOTrainConfig, flags, prog="t").config
    default = MaxKPOMOTrainConfig()
    differing = {name for name in vars(default) if getattr(default, name) != getattr(documented, name)}
    assert differing <= {"threads", "device"}, differing
    assert default.lr == 5e-4 and default.n_steps == 2000


def test_evaluate_refuses_a_directory_as_output(tmp_path, capsys):
    assert main(["evaluate", "maxk-pomo", "--checkpoints", "x", "--output", str(tmp_path)]) == 2
    assert "output" in capsys.readouterr().err


# -- the shell around the trainer (tiny real runs) ----------------------------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A finished 2-step run with a non-default lr (resume tests copy it)."""
    pytest.importorskip("rl4co")
    run = tmp_path_factory.mktemp("maxk") / "run"
    assert main(["train", "maxk-pomo", *TINY, "--lr", "2e-4", "--n-steps", "2", "--log-dir", str(run)]) == 0
    return run


@pytest.mark.co
@pytest.mark.slow
def test_sigint_saves_a_checkpoint_and_exits_130(tmp_path, monkeypatch):
    pytest.importorskip("rl4co")
    import pglab.algos.maxk_train as maxk_train

    real_locs = maxk_train.random_locs
    calls = {"n": 0}

    def locs_then_ctrl_c(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:  # during step 2 of 4, as if the user pressed Ctrl-C
            os.kill(os.getpid(), signal.SIGINT)
        return real_locs(*args, **kwargs)

    monkeypatch.setattr(maxk_train, "random_locs", locs_then_ctrl_c)
    run = tmp_path / "cut"
    assert main(["train", "maxk-pomo", *TINY, "--n-steps", "4", "--log-dir", str(run)]) == 130
    assert load_checkpoint_file(run / "checkpoints" / "checkpoint_latest.pt")["counters"]["step"] == 2
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["counters"]["step"] == 2


@pytest.mark.co
@pytest.mark.slow
def test_resume_applies_given_resumable_flags_even_at_their_default(tiny_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    # --log-every 10 is the default: it was given, so it applies (steps 3 and 4 -> one row at 4).
    assert main(["train", "maxk-pomo", "--resume", str(run), "--n-steps", "4", "--log-every", "10"]) == 0
    assert steps_logged(run) == [1, 2, 4]
    assert load_checkpoint_file(run)["config"]["log_every"] == 10


@pytest.mark.co
@pytest.mark.slow
def test_resume_refuses_a_given_training_flag_naming_it(tiny_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    # 5e-4 is the default lr but not this run's (2e-4): given, so refused, not ignored.
    assert main(["train", "maxk-pomo", "--resume", str(run), "--n-steps", "4", "--lr", "5e-4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pglab: error: lr: ") and "0.0002" in err and "(got 0.0005)" in err
    assert load_checkpoint_file(run)["counters"]["step"] == 2  # untouched


@pytest.mark.co
@pytest.mark.parametrize("trainer", ["pglab", "lightning"])
def test_a_failed_start_leaves_nothing_behind(tmp_path, monkeypatch, trainer):
    pytest.importorskip("rl4co")
    import pglab.algos.maxk_train as maxk_train

    def broken_build(*args, **kwargs):
        raise UsageError("model: cannot be built here")

    monkeypatch.setattr(maxk_train, "build_model", broken_build)
    run = tmp_path / "new" / "run"
    assert main(["train", "maxk-pomo", *TINY, "--trainer", trainer, "--n-steps", "2", "--log-dir", str(run)]) == 2
    assert not (tmp_path / "new").exists()


@pytest.mark.co
def test_a_crash_before_the_first_checkpoint_leaves_nothing_behind(tmp_path, monkeypatch):
    pytest.importorskip("rl4co")
    import pglab.algos.maxk_train as maxk_train

    def no_instances(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(maxk_train, "random_locs", no_instances)
    run = tmp_path / "run"
    with pytest.raises(RuntimeError):
        maxk_train.train_maxk_pomo(
            MaxKPOMOTrainConfig(
                num_loc=6,
                k=3,
                batch_size=4,
                embed_dim=16,
                num_encoder_layers=1,
                num_heads=2,
                device="cpu",
                n_steps=2,
                log_dir=run,
            ),
            echo=lambda *a, **k: None,
        )
    assert not run.exists()


# -- the agent API --------------------------------------------------------------------------


@pytest.mark.co
@pytest.mark.slow
def test_load_checkpoint_gives_an_agent_with_act_predict_and_no_critic(tiny_run):
    import pglab
    from pglab.agent import Agent, NoCritic
    from pglab.algos.maxk_pomo import MaxKPOMO, evaluate_tsp_policy

    agent = pglab.load_checkpoint(tiny_run, device="cpu")
    assert isinstance(agent, Agent) and agent.kind == "maxk-pomo"
    assert isinstance(agent.model, MaxKPOMO) and agent.policy is agent.model.policy
    assert agent.config.lr == 2e-4 and agent.config.num_loc == 6
    locs = torch.rand(5, 6, 2, generator=torch.Generator().manual_seed(0))
    tours = agent.act(locs)
    assert tours.shape == (5, 6) and tours.dtype == torch.int64
    assert torch.equal(tours.sort(dim=-1).values, torch.arange(6).expand(5, 6))  # each a permutation
    # deterministic=True is POMO's inference: the "greedy" column of pglab evaluate.
    tours, lengths = agent.solve(locs)
    ordered = locs.gather(1, tours[..., None].expand(-1, -1, 2))
    measured = (ordered - ordered.roll(-1, dims=1)).norm(dim=-1).sum(-1)
    torch.testing.assert_close(lengths, measured)
    torch.testing.assert_close(lengths, evaluate_tsp_policy(agent.model, locs, 3)["greedy"])
    # Sampled tours (one per instance, from a random start): permutations, reproducible
    # under a fixed global seed.
    torch.manual_seed(1)
    sampled = agent.act(locs, deterministic=False)
    torch.manual_seed(1)
    assert torch.equal(sampled, agent.act(locs, deterministic=False))
    assert torch.equal(sampled.sort(dim=-1).values, torch.arange(6).expand(5, 6))
    # NumPy in, NumPy out (SB3's predict); a single instance must come as a batch of one.
    predicted = agent.predict(locs.numpy())
    assert isinstance(predicted, np.ndarray) and np.array_equal(predicted, agent.act(locs).numpy())
    with pytest.raises(ValueError, match=r"\[B, n, 2\]"):
        agent.act(locs[0])
    with pytest.raises(NoCritic, match="no value function"):
        agent.value(locs)


@pytest.mark.co
@pytest.mark.slow
def test_checkpoints_written_before_the_rename_still_load(tiny_run):
    from pglab.algos.maxk_pomo import agent_from_checkpoint

    checkpoint = load_checkpoint_file(tiny_run)
    config = dict(checkpoint["config"])
    config["checkpoint_every"] = config.pop("save_interval")
    agent = agent_from_checkpoint({**checkpoint, "config": config}, device="cpu")
    assert agent.config.save_interval == 1

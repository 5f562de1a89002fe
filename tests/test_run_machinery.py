"""Atomic writes, checkpoints, logs, configs: the machinery every trainer shares."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from typing import Literal

import pytest
import torch

from pglab.cli import main as cli_main
from pglab.errors import CheckpointError, ConfigError, UsageError
from pglab.run.atomic import atomic_torch_save, atomic_write_text
from pglab.run.checkpoint import CheckpointManager, build_checkpoint, load_checkpoint_file
from pglab.run.config import config_from_dict, load_yaml_config, normalise_flags, parse_config
from pglab.run.logger import MetricsLogger, read_metrics
from pglab.run.rundir import create_run_dir, write_run_config
from pglab.run.seeding import capture_rng_state, make_generator, restore_rng_state
from pglab.validation import check_positive, check_range


def small_checkpoint(step, kind="test-kind"):
    return build_checkpoint(
        kind=kind, config={"a": 1}, counters={"iteration": step}, models={"net": {"w": torch.full((3,), float(step))}}
    )


def test_checkpoint_roundtrip_latest_pointer_and_kind_check(tmp_path):
    manager = CheckpointManager(tmp_path / "checkpoints")
    manager.save(1, small_checkpoint(1))
    manager.save(2, small_checkpoint(2))
    latest = load_checkpoint_file(tmp_path)  # a run directory resolves to checkpoint_latest
    assert latest["counters"]["iteration"] == 2
    assert torch.equal(latest["models"]["net"]["w"], torch.full((3,), 2.0))
    with pytest.raises(CheckpointError, match="kind='test-kind', expected one of 'ghm-mc'"):
        load_checkpoint_file(manager.latest_path, kinds=["ghm-mc"])


def test_corrupt_truncated_and_foreign_checkpoints_are_rejected(tmp_path):
    path = tmp_path / "c.pt"
    atomic_torch_save(small_checkpoint(1), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_checkpoint_file(path)
    torch.save({"weights": torch.zeros(2)}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="not a pglab checkpoint"):
        load_checkpoint_file(tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="no such file"):
        load_checkpoint_file(tmp_path / "missing.pt")


def test_kill_during_checkpoint_write_leaves_previous_loadable(tmp_path):
    """A writer SIGKILLed in the middle of a large checkpoint write."""
    manager = CheckpointManager(tmp_path)
    manager.save(1, small_checkpoint(1))
    script = textwrap.dedent(f"""
        import os, signal, torch
        from pglab.run import atomic
        from pglab.run.checkpoint import CheckpointManager, build_checkpoint
        real_write = atomic.atomic_write_bytes
        def dying_write(path, payload):
            # write half of the bytes to the temporary file, then die like kill -9
            tmp = path.with_name(f".{{path.name}}.tmp-{{os.getpid()}}")
            with open(tmp, "wb") as handle:
                handle.write(payload[: len(payload) // 2]); handle.flush(); os.fsync(handle.fileno())
            os.kill(os.getpid(), signal.SIGKILL)
        atomic.atomic_write_bytes = dying_write
        import pglab.run.checkpoint as ck
        ck.atomic_torch_save.__globals__["atomic_write_bytes"] = dying_write
        big = build_checkpoint(kind="test-kind", config={{}}, counters={{"iteration": 2}},
                               models={{"net": {{"w": torch.zeros(1_000_000)}}}})
        CheckpointManager({str(tmp_path)!r}).save(2, big)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == -9
    assert any(p.name.startswith(".checkpoint_iter_000002") for p in tmp_path.iterdir())
    assert load_checkpoint_file(manager.latest_path)["counters"]["iteration"] == 1
    CheckpointManager(tmp_path)  # a new manager sweeps the torn temporary away
    assert not any(".tmp-" in p.name for p in tmp_path.iterdir())


def test_metrics_logger_truncates_rows_after_the_resumed_checkpoint(tmp_path):
    with MetricsLogger(tmp_path, jsonl_name="log.jsonl", tensorboard_dir=None) as log:
        log.write_meta({"run": 1})
        for step in range(1, 6):
            log.log(step, {"loss": torch.tensor(step * 0.5), "return/mean": step})
    with MetricsLogger(tmp_path, jsonl_name="log.jsonl", tensorboard_dir=None, resume_step=3) as log:
        log.write_meta({"run": 2})  # not rewritten: the file already starts with meta
        log.log(4, {"loss": 9.0, "return/mean": 9})
    frame = read_metrics(tmp_path)
    assert frame["iteration"].tolist() == [1, 2, 3, 4] and frame["loss"].tolist() == [0.5, 1.0, 1.5, 9.0]
    lines = (tmp_path / "log.jsonl").read_text().splitlines()
    assert json.loads(lines[0]) == {"meta": {"run": 1}}
    assert [json.loads(x)["iteration"] for x in lines[1:]] == [1, 2, 3, 4]


def test_run_dir_refuses_to_overwrite_a_run(tmp_path):
    run = create_run_dir(tmp_path / "run")
    write_run_config(run, {"x": 1}, kind="k")
    with pytest.raises(UsageError, match="already holds a run"):
        create_run_dir(tmp_path / "run")


def test_rng_state_roundtrip_through_a_checkpoint(tmp_path):
    gen = make_generator(5)
    torch.rand(3, generator=gen)
    state = capture_rng_state({"sim": gen})
    path = tmp_path / "rng.pt"
    atomic_torch_save(build_checkpoint(kind="k", config={}, counters={}, models={}, rng=state), path)
    expected = (torch.rand(4, generator=gen), torch.rand(2), __import__("numpy").random.rand(2))
    restored_gen = make_generator(0)
    restore_rng_state(load_checkpoint_file(path)["rng"], {"sim": restored_gen})
    assert torch.equal(torch.rand(4, generator=restored_gen), expected[0])
    assert torch.equal(torch.rand(2), expected[1])
    assert (__import__("numpy").random.rand(2) == expected[2]).all()


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    sigma: float = 0.2
    """volatility"""
    hidden_dims: tuple[int, ...] = (64, 64)
    mode: Literal["a", "b"] = "a"
    flag: bool = False

    def __post_init__(self):
        check_positive("sigma", self.sigma)


def test_config_from_yaml_flags_and_errors(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("sigma: 0.5\nhidden_dims: [8, 8]\n")
    assert load_yaml_config(DemoConfig, good) == DemoConfig(sigma=0.5, hidden_dims=(8, 8))
    cfg = parse_config(DemoConfig, ["--config", str(good), "--hidden_dims", "4", "--flag"], prog="demo")
    assert cfg == DemoConfig(sigma=0.5, hidden_dims=(4,), flag=True)
    bad = tmp_path / "bad.yaml"
    bad.write_text("sigma: [0.5\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml_config(DemoConfig, bad)
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("sigmaa: 1\n")
    with pytest.raises(ConfigError, match=r"sigmaa: unknown field.*\(got 1\)"):
        load_yaml_config(DemoConfig, unknown)
    with pytest.raises(ConfigError, match=r"sigma: must be > 0 \(got -1.0\)"):
        config_from_dict(DemoConfig, {"sigma": -1.0})
    with pytest.raises(ConfigError, match=r"mode: must be one of .*\(got 'c'\)"):
        config_from_dict(DemoConfig, {"mode": "c"})
    # A bad flag value is a one-line ConfigError (pglab prints it and exits 2).
    with pytest.raises(ConfigError, match=r"sigma: must be a finite number \(got nan\)"):
        parse_config(DemoConfig, ["--sigma", "nan"], prog="demo")
    assert normalise_flags(["--n_iterations=5", "--a_b", "x_y"]) == ["--n-iterations=5", "--a-b", "x_y"]


def test_validation_messages_name_field_value_and_range():
    with pytest.raises(ConfigError, match=r"gamma: must lie in \(0, 1\] \(got 1.5\)"):
        check_range("gamma", 1.5, 0, 1, low_inclusive=False)
    with pytest.raises(ConfigError, match=r"dt: must be a finite number \(got inf\)"):
        check_positive("dt", float("inf"))


def test_cli_usage_errors_exit_2(capsys):
    assert cli_main(["train", "nonsense"]) == 2
    assert "unknown train 'nonsense'; choose one of" in capsys.readouterr().err
    assert cli_main(["frobnicate"]) == 2
    assert cli_main(["evaluate", "/no/such/checkpoint.pt"]) == 2
    assert cli_main(["plot", "/no/such/run"]) == 2


def test_atomic_write_replaces_whole_file(tmp_path):
    target = tmp_path / "f.txt"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two")
    assert target.read_text() == "two" and os.listdir(tmp_path) == ["f.txt"]

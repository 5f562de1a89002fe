"""Streaming A2C trainer: schema golden test, exact resume, reuse-forward exactness,
gradient accumulation, SIGTERM, error records, CLI exit codes, network contracts.
(The training shell's own guarantees for a2c: tests/test_a2c_shell.py.)"""

import json
import os
import signal
import subprocess
import sys

import pytest
import torch

from pglab.algos.a2c import A2C_RECORD_KEYS, DIST_KEYS, LOG_NAME, A2CTrainConfig, A2CTrainer, sample_actions, train_a2c
from pglab.algos.a2c_common import EPISODE_KEYS, PERF_KEYS
from pglab.cli import main as cli_main
from pglab.envs.pixel_goal import PixelGoalConfig, PixelGoalEnv
from pglab.errors import EXIT_INTERRUPTED, ConfigError, TensorContractError
from pglab.losses.a2c import a2c_td0_losses
from pglab.nets.pixel_cnn import PixelActorCriticCNN
from pglab.run.checkpoint import load_checkpoint_file

TINY = dict(
    num_envs=8, update_every=2, device="cpu", pixel_goal=PixelGoalConfig(grid_size=4), hidden=32, save_interval=3
)

# The record schema (docs/a2c.md). Changing it is a breaking change for every consumer of
# metrics.csv / metrics.jsonl: update this list, the module docstring and the docs together.
GOLDEN_KEYS = {
    "opt_steps",
    "env_steps",
    "loss",
    "loss/policy",
    "loss/value",
    "loss/entropy",
    "stats/entropy",
    "stats/advantage_mean",
    "stats/value_mean",
    "stats/grad_norm",
    "stats/reward_mean",
    "stats/done_rate",
    "stats/trunc_rate",
    "stats/reset_rate",
    "episode/count",
    "return/mean",
    "return/std",
    "episode/success_rate",
    "episode/length",
    "perf/step_s",
    "perf/env_steps_per_s",
    "stats/lr",
    "stats/dist_p10",
    "stats/dist_p50",
    "stats/dist_p90",
}


def quiet(*args, **kwargs):
    """An echo that prints nothing."""


def read_log(run_dir):
    return [json.loads(line) for line in (run_dir / LOG_NAME).read_text().splitlines()]


def params(run_dir):
    return load_checkpoint_file(run_dir)["models"]["model"]


def test_jsonl_golden_schema_and_counters(tmp_path):
    run = tmp_path / "run"
    # short episodes, so that windows hold both successes and truncations
    short = {**TINY, "pixel_goal": PixelGoalConfig(grid_size=4, max_steps=3)}
    result = train_a2c(A2CTrainConfig(total_env_steps=8 * 2 * 5, log_dir=run, **short), echo=quiet)
    lines = read_log(run)
    assert set(lines[0]) == {"meta"}
    meta = lines[0]["meta"]
    assert {"versions", "config", "num_params", "architecture"} <= set(meta) and "torch" in meta["versions"]
    assert meta["config"]["num_envs"] == 8 and meta["kind"] == "a2c-td0"
    records = lines[1:]
    assert {"opt_steps", *A2C_RECORD_KEYS, *PERF_KEYS, *DIST_KEYS} == GOLDEN_KEYS
    assert set(meta["record_keys"]) == GOLDEN_KEYS - set(DIST_KEYS)
    # the episode metrics are absent (no value) exactly in windows that finished no episode
    assert all(set(r) == (GOLDEN_KEYS if r["episode/count"] > 0 else GOLDEN_KEYS - set(EPISODE_KEYS)) for r in records)
    assert [r["opt_steps"] for r in records] == [1, 2, 3, 4, 5]
    assert [r["env_steps"] for r in records] == [16, 32, 48, 64, 80]
    assert result["env_steps"] == 80 and not result["interrupted"] and result["exit_code"] == 0
    # rates are fractions of the window's 16 transitions; an episode ends at every reset,
    # and it succeeded exactly when it terminated (done), never when it was truncated
    assert sum(r["stats/done_rate"] for r in records) > 0 and sum(r["stats/trunc_rate"] for r in records) > 0
    for r in records:
        assert r["stats/reset_rate"] == pytest.approx(r["stats/done_rate"] + r["stats/trunc_rate"])
        assert r["episode/count"] == pytest.approx(16 * r["stats/reset_rate"])
        if r["episode/count"] > 0:
            assert r["episode/success_rate"] == pytest.approx(r["stats/done_rate"] / r["stats/reset_rate"])
        assert r["stats/dist_p10"] <= r["stats/dist_p50"] <= r["stats/dist_p90"]


def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path):
    full, half = tmp_path / "full", tmp_path / "half"
    train_a2c(A2CTrainConfig(total_env_steps=8 * 2 * 8, log_dir=full, **TINY), echo=quiet)
    train_a2c(A2CTrainConfig(total_env_steps=8 * 2 * 4, log_dir=half, **TINY), echo=quiet)
    # resume may grow the budget; counters continue and the log is appended
    train_a2c(A2CTrainConfig(total_env_steps=8 * 2 * 8, num_envs=8, resume=half, device="cpu"), echo=quiet)
    a, b = params(full), params(half)
    assert all(torch.equal(a[k], b[k]) for k in a)

    def strip(recs):  # the wall-clock columns differ between any two runs
        return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in recs]

    log_full, log_half = read_log(full), read_log(half)
    assert strip(log_full[1:]) == strip(log_half[1:])
    assert sum("meta" in r for r in log_half) == 1
    # resuming with a changed trajectory-defining field is refused, naming the field
    with pytest.raises(ConfigError, match=r"lr: .*\(got 0.5\)"):
        train_a2c(A2CTrainConfig(total_env_steps=8 * 2 * 9, num_envs=8, resume=half, lr=0.5), echo=quiet)


def test_reusing_the_bootstrap_forward_is_exact(tmp_path):
    runs = {}
    for reuse in (True, False):
        run = tmp_path / f"reuse{reuse}"
        cfg = A2CTrainConfig(total_env_steps=8 * 3 * 4, log_dir=run, reuse_forward=reuse, **{**TINY, "update_every": 3})
        train_a2c(cfg, echo=quiet)
        runs[reuse] = params(run)
    assert all(torch.equal(runs[True][k], runs[False][k]) for k in runs[True])


def test_gradient_accumulation_equals_the_mean_of_per_step_gradients(tmp_path):
    """One window of update_every=2 env-steps: the accumulated gradient equals the
    gradient of (L_1 + L_2) / 2 recomputed from the same transitions."""
    cfg = A2CTrainConfig(total_env_steps=16, log_dir=tmp_path, reuse_forward=False, **TINY)
    trainer = A2CTrainer(cfg, device=torch.device("cpu"))
    reference = PixelActorCriticCNN(1, 8, 8, 5, hidden=32)
    reference.load_state_dict(trainer.model.state_dict())
    recorded = []
    step = trainer.env.step

    def recording_step(actions):
        before = trainer.obs.value.clone()
        out = step(actions)
        recorded.append((before, actions.clone(), *(t.clone() for t in out[:4])))
        return out

    trainer.env.step = recording_step
    trainer.env_step(None, last_in_window=False)
    trainer.env_step(None, last_in_window=True)
    accumulated = [p.grad.clone() for p in trainer.model.parameters()]
    total = 0.0
    for obs, actions, next_obs, reward, done, trunc in recorded:
        logits, values = reference(obs)
        with torch.no_grad():
            _, v_next = reference(next_obs)
        total = (
            total
            + a2c_td0_losses(
                logits,
                actions.long(),
                values,
                reward,
                done,
                trunc,
                v_next,
                gamma=cfg.gamma,
                value_coef=cfg.value_coef,
                entropy_coef=cfg.entropy_coef,
            )["loss"]
        )
    (total / 2).backward()
    for got, ref in zip(accumulated, reference.parameters(), strict=False):
        assert torch.allclose(got, ref.grad, atol=1e-7, rtol=1e-5)


def test_gumbel_sampling_matches_softmax_frequencies():
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.7]])).expand(60000, 3).contiguous()
    actions = sample_actions(logits, torch.Generator().manual_seed(0))
    freq = torch.bincount(actions, minlength=3).float() / 60000
    assert torch.allclose(freq, torch.tensor([0.1, 0.2, 0.7]), atol=0.01)


def fail_or_signal_at(monkeypatch, call, action):
    """Patch PixelGoalEnv.step so that its ``call``-th call runs ``action()`` first."""
    calls = {"n": 0}
    step = PixelGoalEnv.step

    def patched(self, actions):
        calls["n"] += 1
        if calls["n"] == call:
            action()
        return step(self, actions)

    monkeypatch.setattr(PixelGoalEnv, "step", patched)


def test_failure_writes_one_error_record(tmp_path, monkeypatch):
    def explode():
        raise RuntimeError("simulator exploded")

    fail_or_signal_at(monkeypatch, 5, explode)  # the 3rd window's first env-step
    cfg = A2CTrainConfig(total_env_steps=8 * 2 * 10, log_dir=tmp_path / "run", **{**TINY, "save_interval": 1})
    with pytest.raises(RuntimeError, match="exploded"):
        train_a2c(cfg, echo=quiet)
    last = read_log(tmp_path / "run")[-1]
    assert last["error"]["type"] == "RuntimeError" and last["error"]["message"] == "simulator exploded"
    assert last["error"]["opt_steps"] == 2 and last["error"]["env_steps"] == 32
    assert sum("error" in line for line in read_log(tmp_path / "run")) == 1


def test_cnn_contracts_and_shapes():
    net = PixelActorCriticCNN(4, 84, 84, 6)
    assert net.torso_name == "nature"
    logits, values = net(torch.zeros(3, 4, 84, 84, dtype=torch.uint8))
    assert logits.shape == (3, 6) and values.shape == (3,) and logits.dtype == torch.float32
    with pytest.raises(TensorContractError, match="obs expected uint8"):
        net(torch.zeros(3, 4, 84, 84))
    with pytest.raises(TensorContractError, match="obs"):
        net(torch.zeros(3, 2, 84, 84, dtype=torch.uint8))
    small = PixelActorCriticCNN(1, 16, 16, 5)
    assert small.torso_name == "small"
    # the initial policy is near-uniform (policy head gain 0.01)
    probs = torch.softmax(small(torch.randint(0, 255, (8, 1, 16, 16), dtype=torch.uint8))[0], dim=1)
    assert torch.allclose(probs, torch.full_like(probs, 0.2), atol=0.02)


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--num-envs", "0"], "num_envs"),
        (["--gamma", "1.5"], "gamma"),
        (["--update-every", "0"], "update_every"),
        (["--num-envs", "64", "--total-env-steps", "10"], "total_env_steps"),
        (["--tau", "0"], "tau"),
        (["--algo", "stream-ac", "--num-envs", "4"], "num_envs"),
        (["--env", "nonsense"], "env"),
    ],
)
def test_bad_input_exits_2_naming_the_field(argv, field, capsys):
    assert cli_main(["train", "a2c", *argv]) == 2
    assert field in capsys.readouterr().err


def test_bad_checkpoint_and_resume_exit_2(tmp_path, capsys):
    assert cli_main(["train", "a2c", "--resume", str(tmp_path / "missing")]) == 2
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    assert cli_main(["evaluate", str(tmp_path / "junk.pt")]) == 2


def test_self_test_cli_passes(capsys):
    assert cli_main(["train", "a2c", "--self-test"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["self_test"] == "pass"


def test_sigterm_in_process_finishes_the_window_and_checkpoints(tmp_path, monkeypatch):
    # mid-window: the 4th window's first env-step
    fail_or_signal_at(monkeypatch, 7, lambda: os.kill(os.getpid(), signal.SIGTERM))
    cfg = A2CTrainConfig(total_env_steps=8 * 2 * 1000, log_dir=tmp_path / "run", **TINY)
    result = train_a2c(cfg, echo=quiet)
    assert result["interrupted"] and result["opt_steps"] == 4 and result["exit_code"] == EXIT_INTERRUPTED
    counters = load_checkpoint_file(tmp_path / "run")["counters"]
    assert (counters["env_steps"], counters["opt_steps"]) == (64, 4)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler was removed again


@pytest.mark.slow
def test_kill_9_during_a_checkpoint_write_leaves_the_previous_one_loadable_and_resumable(tmp_path):
    run = tmp_path / "run"
    script = f"""
import os, signal
from pathlib import Path
import pglab.run.atomic as atomic
real = atomic.atomic_write_bytes
calls = {{"n": 0}}
def dying_write(path, payload):
    if str(path).endswith(".pt"):
        calls["n"] += 1
        if calls["n"] == 2:  # the second checkpoint: write half of it, then die
            tmp = Path(path).with_name("." + Path(path).name + ".tmp-" + str(os.getpid()))
            tmp.write_bytes(payload[: len(payload) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
    return real(path, payload)
atomic.atomic_write_bytes = dying_write
from pglab.algos.a2c import A2CTrainConfig, train_a2c
from pglab.configs.a2c import PixelGoalConfig
train_a2c(A2CTrainConfig(num_envs=8, update_every=2, device="cpu", pixel_goal=PixelGoalConfig(grid_size=4), hidden=32,
                         save_interval=2, total_env_steps=8 * 2 * 10, log_dir=Path({str(run)!r})))
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, "PGLAB_NO_PROGRESS": "1"}, capture_output=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL
    assert list((run / "checkpoints").glob(".*tmp-*"))  # the torn temporary is there...
    assert load_checkpoint_file(run)["counters"]["opt_steps"] == 2  # ...but the previous checkpoint loads
    result = train_a2c(A2CTrainConfig(num_envs=8, total_env_steps=8 * 2 * 6, resume=run, device="cpu"), echo=quiet)
    assert result["opt_steps"] == 6 and not list((run / "checkpoints").glob(".*tmp-*"))
    steps = [r["opt_steps"] for r in read_log(run)[1:]]
    assert steps == [1, 2, 3, 4, 5, 6]  # records of the lost work were dropped, then redone


def test_an_environment_without_its_own_state_resumes_with_fresh_seeded_episodes():
    """An env that cannot snapshot itself (no state_dict, or one that returns None):
    its checkpoint entry stores nothing and a resume starts new episodes from
    env.reset(seed) (the seed read at the resume) with an empty episode tracker; an env
    with a snapshot stores and restores its own."""
    from pglab.algos.a2c_common import FreshEpisodes, env_entry
    from pglab.envs.base import EpisodeTracker
    from pglab.run.state import Value

    class NoSnapshot:  # PixelGoalEnv without state_dict / load_state_dict
        def __init__(self):
            self.inner = PixelGoalEnv(3, PixelGoalConfig(grid_size=4), seed=0)
            self.seeds = []

        def reset(self, seed=None):
            self.seeds.append(seed)
            return self.inner.reset(seed=seed)

    env, tracker, counters = NoSnapshot(), EpisodeTracker(3, "cpu"), {"opt_steps": 0}
    obs = Value(env.reset(seed=0).clone())
    tracker.update(torch.ones(3), torch.zeros(3, dtype=torch.bool))  # episodes under way
    fresh = FreshEpisodes(env, obs, tracker, seed=lambda: 100 + counters["opt_steps"])
    entry = env_entry(env, fresh)
    assert entry.state_dict() is None and fresh.state_dict() == {}
    assert env_entry(env.inner, fresh).state_dict().keys() == env.inner.state_dict().keys()
    counters["opt_steps"] = 7  # the restored counters
    entry.load_state_dict(None)
    assert env.seeds == [0, 107]
    assert torch.equal(obs.value, PixelGoalEnv(3, PixelGoalConfig(grid_size=4)).reset(seed=107))
    assert not tracker.returns.any() and not tracker.lengths.any()

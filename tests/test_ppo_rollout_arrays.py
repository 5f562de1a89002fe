"""The rollout loop on NumPy arrays (``collect_arrays``) against the loop on tensors
(``collect_tensors``): the same runs, bit for bit, with the array loop taken where
``array_rollout`` says it covers the run."""

import pytest
import torch

import pglab.algos.ppo as ppo
from pglab.algos.ppo import PPOConfig, train_ppo
from pglab.run.checkpoint import load_checkpoint_file
from pglab.run.config import make_config
from pglab.run.logger import read_metrics

QUIET = dict(tensorboard=False, eval_episodes=0, log_interval=1)
CASES = {
    # episodes that terminate; no normalisation
    "cartpole": dict(env="gym:CartPole-v1", num_steps=16, total_steps=2 * 16 * 4, hidden_dims=(8,)),
    # Box actions clipped, observations and rewards normalised, a time-limit cut at step 200
    "pendulum": dict(
        env="gym:Pendulum-v1",
        num_steps=128,
        total_steps=2 * 128 * 2,
        hidden_dims=(16,),
        normalize_obs=True,
        normalize_reward=True,
    ),
    # pglab's MuJoCo vector env: the control cost reads the clipped actions
    "swimmer": dict(env="gym:Swimmer-v4", num_steps=32, total_steps=2 * 32 * 2, hidden_dims=(16,), log_std_init=1.0),
}


class RolloutRecorder:
    """Keeps every rollout's buffers (``on_rollout_end`` only: a per-step callback would
    take the tensor loop)."""

    def __init__(self):
        self.buffers = []

    def on_rollout_end(self, info):
        self.buffers.append({name: tensor.clone() for name, tensor in info.rollout.items()})


def assert_same(a, b, where="normalizer"):
    """Nested dicts of tensors and numbers equal, bit for bit."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b, where


def run(tmp_path, case, arrays, monkeypatch):
    calls = []
    collect_arrays = ppo.collect_arrays

    def spy(*args):
        calls.append(1)
        return collect_arrays(*args)

    monkeypatch.setattr(ppo, "collect_arrays", spy)
    if not arrays:
        monkeypatch.setattr(ppo, "array_rollout", lambda *args: False)
    fields = dict(num_envs=2, num_minibatches=2, ppo_epochs=2, log_dir=tmp_path / f"{case}-{arrays}", **QUIET)
    recorder = RolloutRecorder()
    result = train_ppo(make_config(PPOConfig, **fields, **CASES[case]), callbacks=[recorder])
    monkeypatch.undo()
    return result, recorder.buffers, len(calls)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_numpy_rollout_equals_the_tensor_rollout(tmp_path, monkeypatch, case):
    """Every rollout buffer (dtype and values), the weights, the last observations, the
    normalisation statistics and the logged metrics agree bit for bit."""
    if case == "swimmer":
        pytest.importorskip("mujoco")
    fast, fast_buffers, fast_calls = run(tmp_path, case, True, monkeypatch)
    slow, slow_buffers, slow_calls = run(tmp_path, case, False, monkeypatch)
    assert fast_calls == fast.iterations and slow_calls == 0
    assert len(fast_buffers) == len(slow_buffers) == fast.iterations
    for fast_rollout, slow_rollout in zip(fast_buffers, slow_buffers, strict=True):
        assert fast_rollout.keys() == slow_rollout.keys()
        for name, tensor in fast_rollout.items():
            assert tensor.dtype == slow_rollout[name].dtype, name
            assert torch.equal(tensor, slow_rollout[name]), name
    if case == "pendulum":
        assert any(rollout["truncs"].any() for rollout in fast_buffers)
    a, b = (load_checkpoint_file(r.run_dir, kinds=["ppo"]) for r in (fast, slow))
    for key, tensor in a["models"]["agent"].items():
        assert torch.equal(tensor, b["models"]["agent"][key]), key
    assert torch.equal(a["extra"]["obs"], b["extra"]["obs"])
    assert_same(a["extra"].get("normalizer"), b["extra"].get("normalizer"))
    metrics_a, metrics_b = read_metrics(fast.run_dir), read_metrics(slow.run_dir)
    columns = [c for c in metrics_a.columns if not c.startswith("perf/")]
    assert metrics_a[columns].equals(metrics_b[columns])

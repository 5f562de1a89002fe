"""``pglab train ppo`` / ``pglab evaluate``: exact resume, SIGTERM, bad input, evaluation."""

import json
import os
import signal
import subprocess
import sys
import time
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

import pglab
from pglab.algos.ppo import PPOAgent, PPOConfig, train_ppo
from pglab.cli import main as cli_main
from pglab.envs.registry import make_env
from pglab.errors import ConfigError
from pglab.run.checkpoint import load_checkpoint_file
from pglab.run.config import make_config
from pglab.run.logger import read_metrics

QUIET = dict(tensorboard=False, eval_episodes=0, log_interval=1)


def small_config(tmp_path, name, **overrides):
    fields = dict(
        env="gym:Pendulum-v1",
        num_envs=2,
        num_steps=64,
        total_steps=2 * 64 * 8,
        num_minibatches=2,
        ppo_epochs=2,
        hidden_dims=(16,),
        log_dir=tmp_path / name,
        **QUIET,
    )
    fields.update(overrides)
    return make_config(PPOConfig, **fields)


@pytest.mark.parametrize(
    ("env", "vectorization"), [("gym:Pendulum-v1", "auto"), ("gym:CartPole-v1", "auto"), ("gym:CartPole-v1", "sync")]
)
def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path, env, vectorization):
    # Pendulum: Box actions, truncation at 200 steps (crossed twice per copy); CartPole:
    # Discrete actions, terminations at random steps, both as gymnasium's array-vectorised
    # env (auto) and as a SyncVectorEnv. 8 iterations straight vs 4 + 4.
    straight = train_ppo(small_config(tmp_path, "straight", env=env, vectorization=vectorization))
    first = train_ppo(small_config(tmp_path, "split", env=env, vectorization=vectorization), stop_after=4)
    assert first.interrupted and first.iterations == 4
    second = train_ppo(make_config(PPOConfig, resume=tmp_path / "split", **QUIET))
    assert second.iterations == 8 and not second.interrupted
    a = load_checkpoint_file(straight.run_dir, kinds=["ppo"])
    b = load_checkpoint_file(second.run_dir, kinds=["ppo"])
    for key, tensor in a["models"]["agent"].items():
        assert torch.equal(tensor, b["models"]["agent"][key]), key
    assert torch.equal(a["extra"]["obs"], b["extra"]["obs"])
    metrics_a, metrics_b = read_metrics(straight.run_dir), read_metrics(second.run_dir)
    columns = [c for c in metrics_a.columns if not c.startswith("perf/")]
    assert len(metrics_b) == 8
    assert metrics_a[columns].equals(metrics_b[columns])


def test_a_run_whose_environments_capture_nothing_resumes_from_fresh_ones(tmp_path):
    # AsyncVectorEnv copies live in worker processes: the checkpoint holds no environment
    # state, so the resumed run warns and starts from freshly reset copies: the seed's
    # first observations, and running episodes counted from there (4-step rollouts end no
    # CartPole episode, so the tracker's lengths count the steps since the start).
    from pglab.algos.ppo import PPOCallback

    class FirstObservations(PPOCallback):
        def __init__(self):
            self.seen = []

        def on_rollout_end(self, info):
            self.seen.append(info.rollout["obs"][:, 0].clone())

    fields = dict(env="gym:CartPole-v1", vectorization="async", num_steps=4, total_steps=2 * 4 * 3, **QUIET)
    first = train_ppo(small_config(tmp_path, "async", **fields), stop_after=1)
    assert load_checkpoint_file(first.run_dir)["extra"]["env"] is None
    assert load_checkpoint_file(first.run_dir)["extra"]["tracker"]["lengths"].tolist() == [4, 4]
    recorder = FirstObservations()
    with pytest.warns(UserWarning, match="freshly reset environments and is not bit-identical"):
        train_ppo(make_config(PPOConfig, resume=tmp_path / "async", **QUIET), stop_after=1, callbacks=[recorder])
    env = make_env("gym:CartPole-v1", 2, vectorization="async")
    assert torch.equal(recorder.seen[0], env.reset(seed=0))
    env.close()
    assert load_checkpoint_file(first.run_dir)["extra"]["tracker"]["lengths"].tolist() == [4, 4]
    with pytest.warns(UserWarning, match="freshly reset"):
        train_ppo(make_config(PPOConfig, resume=tmp_path / "async", **QUIET))  # to the end
    with warnings.catch_warnings():  # a finished run resumed: nothing is trained, nothing to warn of
        warnings.simplefilter("error")
        train_ppo(make_config(PPOConfig, resume=tmp_path / "async", **QUIET))


def test_train_cli_checkpoint_evaluate_and_load(tmp_path, capsys):
    run = tmp_path / "cartpole"
    code = cli_main(
        [
            "train",
            "ppo",
            "--env",
            "gym:CartPole-v1",
            "--num-envs",
            "2",
            "--num_steps",
            "32",
            "--total-steps",
            "256",
            "--log-dir",
            str(run),
            "--no-tensorboard",
            "--eval-episodes",
            "2",
        ]
    )
    assert code == 0
    assert (run / "config.json").exists() and (run / "metrics.csv").exists() and (run / "evaluation.json").exists()
    assert len(read_metrics(run)) == 4
    out = tmp_path / "eval.json"
    assert (
        cli_main(
            ["evaluate", str(run / "checkpoints" / "checkpoint_latest.pt"), "--episodes", "3", "--output", str(out)]
        )
        == 0
    )
    report = json.loads(out.read_text())
    # CartPole pays 1 per step, so every episode's return equals its length.
    assert report["episodes"] == 3 and report["return/mean"] == report["length/mean"] >= 8
    # Another env with other spaces is bad input, not a crash.
    assert cli_main(["evaluate", str(run), "--env", "gym:Acrobot-v1"]) == 2
    assert "other action/observation spaces" in capsys.readouterr().err
    agent = pglab.load_checkpoint(run)
    assert isinstance(agent, PPOAgent) and agent.config.env == "gym:CartPole-v1"
    actions = agent.act(torch.zeros(5, 4))
    assert actions.shape == (5,) and actions.dtype == torch.int64
    assert agent.value(torch.zeros(5, 4)).shape == (5,)
    # The SB3 habit: NumPy in, NumPy out.
    predicted = agent.predict(np.zeros((5, 4), dtype=np.float32))
    assert isinstance(predicted, np.ndarray) and np.array_equal(predicted, actions.numpy())


def test_continuous_agent_clips_actions_to_the_box(tmp_path):
    result = train_ppo(small_config(tmp_path, "pendulum", total_steps=128, num_steps=64))
    agent = pglab.load_checkpoint(result.run_dir)
    with torch.no_grad():
        agent.policy.log_std.fill_(3.0)  # sigma = 20: raw samples leave [-2, 2] often
    actions = agent.act(torch.randn(256, 3), deterministic=False, generator=torch.Generator().manual_seed(0))
    assert actions.shape == (256, 1)
    assert actions.abs().max() == 2.0


class MultiDiscreteEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.MultiDiscrete([2, 3])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


gym.register("PglabTestMultiDiscrete-v0", entry_point=MultiDiscreteEnv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--env", "gym:NoSuchEnv-v0"], "not a registered Gymnasium environment"),
        (["--env", "mujoco:Hopper"], "prefix must be 'gym:', 'ale:'"),
        (["--env", "gym:PglabTestMultiDiscrete-v0"], "unsupported"),
        (["--num-envs", "0"], "num_envs: must be >= 1 (got 0)"),
        (["--num-minibatches", "1000"], "(got 1000)"),
        (["--rl-mode", "a2c"], ""),
        (["--algo", "a2c"], "algo"),
        (["--gae-lambda", "1.5"], "(got 1.5)"),
        (["--total-steps", "10"], "(got 10)"),
        (["--env", "gym:Pendulum-v1", "--vectorization", "vector"], "no array-vectorised implementation"),
        (["--vectorization", "threads"], "vectorization"),
    ],
)
def test_bad_input_exits_2(tmp_path, capsys, argv, message):
    code = cli_main(["train", "ppo", *argv, "--log-dir", str(tmp_path / "run"), "--no-tensorboard"])
    assert code == 2
    assert message in capsys.readouterr().err
    # A failed start leaves no run directory behind (a retry with the same --log-dir works).
    assert not (tmp_path / "run").exists()


def test_bad_yaml_missing_and_foreign_checkpoints_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("num_envs: [1, 2\n")
    assert cli_main(["train", "ppo", "--config", str(bad)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    typo = tmp_path / "typo.yaml"
    typo.write_text("num_env: 4\n")
    assert cli_main(["train", "ppo", "--config", str(typo)]) == 2
    assert "unknown field" in capsys.readouterr().err
    assert cli_main(["evaluate", str(tmp_path / "missing.pt")]) == 2
    with pytest.raises(ConfigError, match=r"episodes: .*\(got 0\)"):
        from pglab.commands.ppo import PPOEvaluateConfig

        PPOEvaluateConfig(episodes=0)


@pytest.mark.slow
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_saves_a_checkpoint_that_resumes(tmp_path, stop_signal):
    run = tmp_path / "stopped"
    env = {**os.environ, "PGLAB_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "pglab.cli",
        "train",
        "ppo",
        "--num-envs",
        "2",
        "--num-steps",
        "32",
        "--total-steps",
        "10000000",
        "--log-dir",
        str(run),
        "--no-tensorboard",
        "--eval-episodes",
        "0",
    ]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
        (run / "metrics.csv").exists() and len((run / "metrics.csv").read_text().splitlines()) > 1
    ):
        time.sleep(0.2)
    process.send_signal(stop_signal)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "--resume" in err
    checkpoint = load_checkpoint_file(run, kinds=["ppo"])
    done = checkpoint["counters"]["iteration"]
    assert done >= 1
    assert len(read_metrics(run)) == done
    # Continue for two more iterations (total_steps may grow or shrink on resume).
    target = (done + 2) * 64
    assert cli_main(["train", "ppo", "--resume", str(run), "--total-steps", str(target)]) == 0
    assert load_checkpoint_file(run)["counters"]["iteration"] == done + 2


class LineWalkEnv:
    """A native batched env: walk on 0..length from a random start; reaching the right
    end pays 1 and terminates, 12 steps without it truncate (final_obs supplied)."""

    def __init__(self, num_envs, *, device="cpu", seed=0, length=6):
        from pglab.envs.base import ActionSpec

        self.num_envs, self.device, self.length = num_envs, torch.device(device), length
        self.observation_shape, self.observation_dtype = (1,), torch.float32
        self.action_spec = ActionSpec(kind="discrete", num_actions=2)
        self.generator = torch.Generator().manual_seed(seed)
        self.position = torch.zeros(num_envs, dtype=torch.int64)
        self.elapsed = torch.zeros(num_envs, dtype=torch.int64)

    def _start(self, mask):
        starts = torch.randint(0, self.length, (self.num_envs,), generator=self.generator)
        self.position = torch.where(mask, starts, self.position)
        self.elapsed = torch.where(mask, torch.zeros_like(self.elapsed), self.elapsed)

    def _obs(self):
        return (self.position.float() / self.length).unsqueeze(1)

    def reset(self, seed=None):
        if seed is not None:
            self.generator.manual_seed(seed)
        self._start(torch.ones(self.num_envs, dtype=torch.bool))
        return self._obs()

    def step(self, actions):
        self.position = (self.position + 2 * actions - 1).clamp_min(0)
        self.elapsed += 1
        done = self.position >= self.length
        trunc = (self.elapsed >= 12) & ~done
        final_obs = self._obs()
        self._start(done | trunc)
        return self._obs(), done.float(), done, trunc, {"final_obs": final_obs}

    def state_dict(self):
        return {
            "generator": self.generator.get_state(),
            "position": self.position.clone(),
            "elapsed": self.elapsed.clone(),
        }

    def load_state_dict(self, state):
        self.generator.set_state(state["generator"])
        self.position, self.elapsed = state["position"].clone(), state["elapsed"].clone()

    def close(self):
        pass


def make_line_walk(num_envs, *, device="cpu", seed=0):
    return LineWalkEnv(num_envs, device=device, seed=seed)


@pytest.mark.parametrize("mode", ["vpg_gae", "reinforce_raw"])
def test_native_env_learns_and_resumes_exactly(tmp_path, monkeypatch, mode):
    from pglab.envs import registry

    monkeypatch.setitem(registry.NATIVE_ENVS, "line-walk", f"{__name__}:make_line_walk")
    fields = dict(
        env="pglab:line-walk",
        algo=mode,
        num_envs=8,
        num_steps=16,
        total_steps=8 * 16 * 20,
        lr=0.03,
        anneal_lr=False,
        hidden_dims=(16,),
        **QUIET,
    )
    straight = train_ppo(make_config(PPOConfig, log_dir=tmp_path / "straight", **fields))
    train_ppo(make_config(PPOConfig, log_dir=tmp_path / "split", **fields), stop_after=10)
    resumed = train_ppo(make_config(PPOConfig, resume=tmp_path / "split", **QUIET))
    a, b = read_metrics(straight.run_dir), read_metrics(resumed.run_dir)
    columns = [c for c in a.columns if not c.startswith("perf/")]
    assert a[columns].equals(b[columns])
    # Walking right is optimal from every position: the learned policy does it.
    agent = pglab.load_checkpoint(straight.run_dir)
    positions = torch.arange(6, dtype=torch.float32).unsqueeze(1) / 6
    assert torch.equal(agent.act(positions), torch.ones(6, dtype=torch.int64))
    # The optimum: every episode reaches the right end (return 1, against about 0.4 for
    # the first policy) in 6 - start steps, 3.5 on average (about 3.4 in the last
    # iterations, 4-9 before learning).
    assert (a["return/mean"].tail(5) == 1.0).all(), a["return/mean"].tolist()
    assert a["episode/length"].tail(5).mean() < 4.0

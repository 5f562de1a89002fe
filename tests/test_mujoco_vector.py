"""The vectorised MuJoCo tasks (pglab.envs.mujoco_vector) against gymnasium's own envs."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from pglab.algos.ppo import PPOConfig, train_ppo
from pglab.envs.gym_adapter import _VECTOR_IMPLEMENTATIONS, make_gym_env
from pglab.envs.mujoco_vector import InvertedDoublePendulumVectorEnv, MujocoVectorEnv, SwimmerVectorEnv
from pglab.errors import CheckpointError, ConfigError
from pglab.run.checkpoint import load_checkpoint_file
from pglab.run.config import make_config
from pglab.run.logger import read_metrics

pytestmark = pytest.mark.filterwarnings("ignore:.*is out of date:DeprecationWarning")


def _both(env_id, num_envs, env_kwargs):
    reference = gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        **env_kwargs,
    )
    implementation = _VECTOR_IMPLEMENTATIONS[env_id]
    native = implementation.factory()(num_envs=num_envs, **{**implementation.defaults, **env_kwargs})
    return reference, native


@pytest.mark.parametrize(
    ("env_id", "env_kwargs", "steps", "scale"),
    [
        # the registered 1,000-step limit, crossed once by every copy
        ("Swimmer-v4", {}, 1005, 1.5),
        # every keyword the native Swimmer covers, off its defaults
        (
            "Swimmer-v4",
            {
                "max_episode_steps": 40,
                "forward_reward_weight": 0.7,
                "ctrl_cost_weight": 0.3,
                "reset_noise_scale": 0.4,
                "exclude_current_positions_from_observation": False,
            },
            90,
            1.5,
        ),
        ("HalfCheetah-v4", {"max_episode_steps": 25}, 60, 1.5),
        ("HalfCheetah-v4", {"ctrl_cost_weight": 0.5, "exclude_current_positions_from_observation": False}, 20, 1.5),
        # the pole leaves [-0.2, 0.2] at random steps; a short limit truncates the rest
        ("InvertedPendulum-v4", {"max_episode_steps": 15}, 120, 1.0),
        # terminations (the tip below y = 1) at random steps, under the registered limit
        ("InvertedDoublePendulum-v4", {}, 300, 1.5),
        # small actions and a short limit: truncations, terminations, and both at once
        ("InvertedDoublePendulum-v4", {"max_episode_steps": 9}, 300, 0.2),
    ],
)
def test_the_native_env_equals_gymnasiums_step_for_step(env_id, env_kwargs, steps, scale):
    """Same seed, same float32 actions (partly outside the control range, which MuJoCo
    clamps): equal observations, rewards, flags and final observations, bit for bit,
    across resets that draw from each copy's generator."""
    reference, native = _both(env_id, 3, env_kwargs)
    assert native.single_observation_space == reference.single_observation_space
    assert native.single_action_space == reference.single_action_space
    obs_a, _ = reference.reset(seed=7)
    obs_b, _ = native.reset(seed=7)
    assert np.array_equal(obs_a, obs_b) and obs_b.dtype == np.float64
    generator = np.random.default_rng(0)
    seen = {"terminated": 0, "truncated": 0, "both": 0}
    # importing rl_zoo3 (as another test module does) replaces gymnasium's TimeLimit with one
    # that leaves truncated False on a step that also terminates; the native env keeps gymnasium's
    patched_time_limit = gym.wrappers.TimeLimit.__module__ != "gymnasium.wrappers.common"
    for t in range(steps):
        actions = (scale * generator.uniform(-1, 1, size=(3, native.model.nu))).astype(np.float32)
        a, b = reference.step(actions), native.step(actions)
        terminated, truncated = b[2], b[3]
        if patched_time_limit:
            b = (*b[:3], truncated & ~terminated, b[4])
        for name, x, y in zip(("obs", "reward", "terminated", "truncated"), a[:4], b[:4], strict=True):
            assert x.dtype == y.dtype and np.array_equal(x, y), (t, name)
        finished = a[2] | a[3]
        if finished.any():
            assert np.array_equal(a[4]["_final_obs"], b[4]["_final_obs"]), t
            assert np.array_equal(np.stack(a[4]["final_obs"][finished]), b[4]["final_obs"][finished]), t
        seen["terminated"] += int(terminated.sum())
        seen["truncated"] += int(truncated.sum())
        seen["both"] += int((terminated & truncated).sum())
    reference.close()
    if env_id in ("Swimmer-v4", "HalfCheetah-v4"):
        assert seen["terminated"] == 0 and seen["truncated"] == 3 * (steps // native.max_episode_steps)
    elif "max_episode_steps" in env_kwargs:
        assert seen["terminated"] > 0 and seen["truncated"] > 0 and seen["both"] > 0, seen
    else:
        assert seen["terminated"] > 10 and seen["truncated"] == 0, seen


def test_the_pendulum_reward_squares_as_gymnasiums_scalars_do():
    """Gymnasium squares NumPy scalars (C's pow); an array's x * x differs from it in the
    last bit for about one value in a thousand: 2,000 random states, each reward equal to
    gymnasium's scalar expression."""
    env = InvertedDoublePendulumVectorEnv(num_envs=1)
    generator = np.random.default_rng(1)
    env.state = {"site_xpos": generator.normal(0, 3, (2000, 1, 3)), "qvel": generator.normal(0, 5, (2000, 3))}
    reward, terminated = env.reward_and_termination(np.zeros((2000, 1), dtype=np.float32), np.zeros((2000, 3)))
    for i in range(2000):
        x, _, y = env.state["site_xpos"][i, 0]
        v1, v2 = env.state["qvel"][i, 1:3]
        assert reward[i] == 10 - (0.01 * x**2 + (y - 2) ** 2) - (1e-3 * v1**2 + 5e-3 * v2**2), i
        assert terminated[i] == bool(y <= 1)


def test_auto_picks_the_native_env_only_for_what_it_covers():
    assert isinstance(make_gym_env("Swimmer-v4", 2).env, SwimmerVectorEnv)
    assert isinstance(make_gym_env("Swimmer-v4", 2, ctrl_cost_weight=0.2).env, SwimmerVectorEnv)
    idp = make_gym_env("InvertedDoublePendulum-v4", 2, time_feature=True, max_episode_steps=50)
    assert isinstance(idp.env, InvertedDoublePendulumVectorEnv) and idp.time_limit == 50
    assert isinstance(make_gym_env("InvertedDoublePendulum-v4", 2, vectorization="vector").env, MujocoVectorEnv)
    # a keyword it does not reproduce (gymnasium's renderer's width), wrappers, or sync: gymnasium's
    for env in (
        make_gym_env("Swimmer-v4", 2, width=64),
        make_gym_env("Swimmer-v4", 2, wrappers=["gymnasium.wrappers.ClipAction"]),
        make_gym_env("Swimmer-v4", 2, vectorization="sync"),
    ):
        assert isinstance(env.env, gym.vector.SyncVectorEnv)
        env.close()
    with pytest.raises(ConfigError, match="env_kwargs: .*rejected by the vectorised Swimmer-v4"):
        make_gym_env("Swimmer-v4", 2, vectorization="vector", width=64)


def test_snapshots_round_trip_and_refuse_another_environment(tmp_path):
    """Stepped, snapshotted through a weights_only file, stepped on across terminations;
    a fresh env of another seed loaded from the snapshot replays the same steps."""
    env = make_gym_env("InvertedDoublePendulum-v4", num_envs=2)
    env.reset(seed=0)
    generator = torch.Generator().manual_seed(0)
    for _ in range(5):
        env.step(2 * torch.rand((2, 1), generator=generator) - 1)
    torch.save(env.state_dict(), tmp_path / "env.pt")
    actions = [2 * torch.rand((2, 1), generator=generator) - 1 for _ in range(40)]
    ahead = [env.step(a) for a in actions]
    assert sum(int(done.sum()) for _, _, done, _, _ in ahead) >= 2
    fresh = make_gym_env("InvertedDoublePendulum-v4", num_envs=2)
    fresh.reset(seed=123)
    snapshot = torch.load(tmp_path / "env.pt", weights_only=True)
    fresh.load_state_dict(snapshot)
    for t, (first, second) in enumerate(zip(ahead, (fresh.step(a) for a in actions), strict=True)):
        for name, x, y in zip(("obs", "reward", "done", "trunc"), first[:4], second[:4], strict=True):
            assert torch.equal(x, y), (t, name)
        assert torch.equal(first[4]["final_obs"], second[4]["final_obs"]), t
    sync = make_gym_env("InvertedDoublePendulum-v4", num_envs=2, vectorization="sync")
    with pytest.raises(CheckpointError, match="environment"):
        sync.load_state_dict(snapshot)
    with pytest.raises(CheckpointError, match="environment"):
        fresh.load_state_dict({"layers": []})
    with pytest.raises(CheckpointError, match="SwimmerVectorEnv, 2 copies"):
        make_gym_env("Swimmer-v4", num_envs=2).load_state_dict(snapshot)
    sync.close()


def _config(tmp_path, name, **overrides):
    fields = dict(
        env="gym:InvertedDoublePendulum-v4",
        num_envs=2,
        num_steps=16,
        total_steps=2 * 16 * 4,
        num_minibatches=2,
        ppo_epochs=2,
        hidden_dims=(16,),
        normalize_obs=True,
        log_dir=tmp_path / name,
        tensorboard=False,
        eval_episodes=0,
        log_interval=1,
    )
    return make_config(PPOConfig, **{**fields, **overrides})


def test_a_seeded_run_equals_the_sync_run_and_resumes_bit_for_bit(tmp_path):
    """4 iterations through the native env == 2 + resume + 2 == 4 through gymnasium's
    SyncVectorEnv: the same weights, observations, normaliser and metric rows."""
    straight = train_ppo(_config(tmp_path, "straight"))
    first = train_ppo(_config(tmp_path, "split"), stop_after=2)
    assert first.interrupted and first.iterations == 2
    second = train_ppo(make_config(PPOConfig, resume=tmp_path / "split", tensorboard=False, eval_episodes=0))
    sync = train_ppo(_config(tmp_path, "sync", vectorization="sync"))
    runs = [load_checkpoint_file(run.run_dir, kinds=["ppo"]) for run in (straight, second, sync)]
    metrics = [read_metrics(run.run_dir) for run in (straight, second, sync)]
    columns = [c for c in metrics[0].columns if not c.startswith("perf/")]
    assert metrics[0]["episode/count"].sum() > 0  # terminations inside the runs
    for checkpoint, rows in zip(runs[1:], metrics[1:], strict=True):
        for key, tensor in runs[0]["models"]["agent"].items():
            assert torch.equal(tensor, checkpoint["models"]["agent"][key]), key
        assert torch.equal(runs[0]["extra"]["obs"], checkpoint["extra"]["obs"])
        assert rows[columns].equals(metrics[0][columns])


@pytest.mark.parametrize("vectorization", ["vector", "sync"])
def test_mujocos_own_warnings_become_python_warnings_and_write_no_log_file(tmp_path, monkeypatch, vectorization):
    # HalfCheetah's model file uses a deprecated compiler attribute: MuJoCo warns while it loads
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning, match="^MuJoCo: compiler attribute 'settotalmass' is deprecated"):
        env = make_gym_env("HalfCheetah-v4", 1, vectorization=vectorization)
    env.close()
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()

"""Observation/reward normalisation (SB3's VecNormalize): the running statistics against
NumPy over the concatenated data, the step logic against a line-by-line NumPy
transcription of VecNormalize, and a normalised PPO run end to end (exact resume, the
statistics in the checkpoint, the same return through `pglab evaluate` and the Python API)."""

import json

import numpy as np
import pytest
import torch

import pglab
from pglab.algos.ppo import PPOConfig, evaluate_agent, train_ppo
from pglab.cli import main as cli_main
from pglab.envs.normalize import ObsRewardNormalizer, RunningMeanStd
from pglab.errors import ConfigError
from pglab.run.checkpoint import load_checkpoint_file
from pglab.run.config import make_config
from pglab.run.logger import read_metrics

QUIET = dict(tensorboard=False, eval_episodes=0, log_interval=1)


def test_running_mean_var_equals_numpy_over_the_concatenated_batches():
    """Batches of different sizes (1 included) merged one by one give the mean and the
    population variance of all the data at once (epsilon = 0: no prior pseudo-count)."""
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc=3.0, scale=[0.5, 2.0, 7.0], size=(size, 3)) for size in (1, 5, 17, 2, 64, 1, 9)]
    stats = RunningMeanStd((3,), epsilon=0.0)
    for batch in batches:
        stats.update(torch.from_numpy(batch))
    data = np.concatenate(batches)
    np.testing.assert_allclose(stats.mean, data.mean(0), rtol=1e-12)
    np.testing.assert_allclose(stats.var, data.var(0), rtol=1e-12)
    assert stats.count == len(data)


def test_running_stats_start_from_sb3s_prior():
    """With SB3's default pseudo-count 1e-4 of (mean 0, var 1), one batch gives
    ((n * mean_b) / (n + eps), (eps * 1 + n var_b + eps n mean_b^2 / (n + eps)) / (n + eps))."""
    batch = torch.tensor([[1.0], [3.0]], dtype=torch.float64)
    stats = RunningMeanStd((1,))
    stats.update(batch)
    eps, n, mean_b, var_b = 1e-4, 2, 2.0, 1.0
    assert stats.mean.item() == pytest.approx(n * mean_b / (n + eps), rel=1e-14)
    assert stats.var.item() == pytest.approx((eps + n * var_b + eps * n * mean_b**2 / (n + eps)) / (n + eps), rel=1e-14)


def test_scalar_statistics_in_floats_equal_numpys_bit_for_bit():
    """The returns' statistics (shape ()) are merged in Python floats for batches of up to
    7: the same bits as NumPy's reductions on 0-d arrays, batch after batch, at every batch
    size (8 and more go through NumPy itself)."""
    rng = np.random.default_rng(3)
    for size in range(1, 10):
        stats = RunningMeanStd(())
        mean, var, count = np.zeros(()), np.ones(()), 1e-4  # the NumPy transcription, 0-d arrays
        for _ in range(60):
            batch = rng.standard_normal(size) * 10.0 ** rng.uniform(-3, 3, size)
            stats.update(batch)
            batch_mean = np.add.reduce(batch, axis=0, keepdims=True) / size
            centred = batch - batch_mean
            delta, total = batch_mean[0] - mean, count + size
            mean = mean + delta * size / total
            m2 = var * count + np.add.reduce(centred * centred, axis=0) / size * size
            var = (m2 + np.square(delta) * (count * size / total)) / total
            count = total
            assert (float(stats.mean), float(stats.var), stats.count) == (float(mean), float(var), count), size


class NumpyVecNormalize:
    """SB3's VecNormalize.step_wait / reset, transcribed with NumPy (the reference). One
    deliberate difference, shared with pglab: a batch's moments are taken in float64 (SB3
    takes np.mean/np.var of the float32 observations, in float32)."""

    def __init__(self, num_envs, obs_dim, gamma, clip_obs=10.0, clip_reward=10.0, epsilon=1e-8):
        self.obs_mean, self.obs_var, self.obs_count = np.zeros(obs_dim), np.ones(obs_dim), 1e-4
        self.ret_mean, self.ret_var, self.ret_count = 0.0, 1.0, 1e-4
        self.returns = np.zeros(num_envs)
        self.gamma, self.clip_obs, self.clip_reward, self.epsilon = gamma, clip_obs, clip_reward, epsilon

    @staticmethod
    def _merge(mean, var, count, batch):
        batch = np.asarray(batch, dtype=np.float64)
        batch_mean, batch_var, batch_count = batch.mean(0), batch.var(0), batch.shape[0]
        delta = batch_mean - mean
        total = count + batch_count
        m2 = var * count + batch_var * batch_count + delta**2 * count * batch_count / total
        return mean + delta * batch_count / total, m2 / total, total

    def _norm_obs(self, obs):
        return np.clip(
            (obs - self.obs_mean) / np.sqrt(self.obs_var + self.epsilon), -self.clip_obs, self.clip_obs
        ).astype(np.float32)

    def reset(self, obs):
        self.returns = np.zeros_like(self.returns)
        self.obs_mean, self.obs_var, self.obs_count = self._merge(self.obs_mean, self.obs_var, self.obs_count, obs)
        return self._norm_obs(obs)

    def step(self, obs, rewards, dones):
        self.obs_mean, self.obs_var, self.obs_count = self._merge(self.obs_mean, self.obs_var, self.obs_count, obs)
        obs = self._norm_obs(obs)
        self.returns = self.returns * self.gamma + rewards
        self.ret_mean, self.ret_var, self.ret_count = self._merge(
            self.ret_mean, self.ret_var, self.ret_count, self.returns
        )
        rewards = np.clip(rewards / np.sqrt(self.ret_var + self.epsilon), -self.clip_reward, self.clip_reward).astype(
            np.float32
        )
        self.returns[dones] = 0
        return obs, rewards


def test_normalizer_steps_like_sb3_vecnormalize():
    """A stream of 40 steps of 3 copies (observations with large offsets and scales,
    rewards of order 100, episode ends) gives the reference's normalised observations
    and rewards at every step, clipping included (clip 2 here so that it happens)."""
    rng = np.random.default_rng(1)
    num_envs, obs_dim, gamma = 3, 4, 0.9
    reference = NumpyVecNormalize(num_envs, obs_dim, gamma, clip_obs=2.0, clip_reward=2.0)
    normalizer = ObsRewardNormalizer((obs_dim,), num_envs, gamma=gamma, clip_obs=2.0, clip_reward=2.0)
    scale, offset = np.array([1.0, 10.0, 0.1, 50.0]), np.array([0.0, -20.0, 5.0, 100.0])
    first = (rng.normal(size=(num_envs, obs_dim)) * scale + offset).astype(np.float32)
    np.testing.assert_allclose(
        normalizer.reset(torch.from_numpy(first)).numpy(), reference.reset(first), rtol=1e-6, atol=1e-6
    )
    clipped = 0
    for _ in range(40):
        obs = (rng.normal(size=(num_envs, obs_dim)) * scale + offset).astype(np.float32)
        rewards = (rng.normal(size=num_envs) * 100.0).astype(np.float32)
        dones = rng.random(num_envs) < 0.2
        expected_obs, expected_rewards = reference.step(obs, rewards, dones)
        got_obs, got_rewards = normalizer.step(
            torch.from_numpy(obs), torch.from_numpy(rewards), torch.from_numpy(dones)
        )
        assert got_obs.dtype == torch.float32 and got_rewards.dtype == torch.float32
        np.testing.assert_allclose(got_obs.numpy(), expected_obs, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got_rewards.numpy(), expected_rewards, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(normalizer.returns, reference.returns, rtol=1e-12)
        clipped += int((np.abs(expected_obs) == 2.0).sum() + (np.abs(expected_rewards) == 2.0).sum())
    assert clipped > 0


def test_frozen_normalizer_applies_but_never_updates():
    normalizer = ObsRewardNormalizer((2,), 2, gamma=0.99)
    normalizer.reset(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    state = normalizer.state_dict()
    normalizer.training = False
    out, _ = normalizer.step(
        torch.tensor([[100.0, -100.0], [5.0, 5.0]]), torch.tensor([1.0, 1.0]), torch.tensor([False, False])
    )
    assert np.array_equal(normalizer.obs_rms.mean, state["obs_rms"]["mean"].numpy())
    assert normalizer.obs_rms.count == state["obs_rms"]["count"]
    assert normalizer.ret_rms.count == state["ret_rms"]["count"]
    assert out.abs().max().item() == 10.0  # clip_obs


# -- a normalised PPO run ------------------------------------------------------------------
def normalized_config(tmp_path, name, **overrides):
    fields = dict(
        env="gym:Pendulum-v1",
        num_envs=2,
        num_steps=64,
        total_steps=2 * 64 * 6,
        num_minibatches=2,
        ppo_epochs=2,
        hidden_dims=(16,),
        normalize_obs=True,
        normalize_reward=True,
        log_dir=tmp_path / name,
        **QUIET,
    )
    fields.update(overrides)
    return make_config(PPOConfig, **fields)


@pytest.mark.slow
def test_normalized_run_resumes_bit_identically(tmp_path):
    """6 iterations straight == 3 + --resume + 3: weights, observations, normalisation
    statistics (obs mean/var/count, return variance, running returns) and the logs."""
    straight = train_ppo(normalized_config(tmp_path, "straight"))
    first = train_ppo(normalized_config(tmp_path, "split"), stop_after=3)
    assert first.interrupted and first.iterations == 3
    second = train_ppo(make_config(PPOConfig, resume=tmp_path / "split", **QUIET))
    a = load_checkpoint_file(straight.run_dir, kinds=["ppo"])
    b = load_checkpoint_file(second.run_dir, kinds=["ppo"])
    for key, tensor in a["models"]["agent"].items():
        assert torch.equal(tensor, b["models"]["agent"][key]), key
    assert torch.equal(a["extra"]["obs"], b["extra"]["obs"])
    stats_a, stats_b = a["extra"]["normalizer"], b["extra"]["normalizer"]
    for group in ("obs_rms", "ret_rms"):
        assert torch.equal(stats_a[group]["mean"], stats_b[group]["mean"]) and torch.equal(
            stats_a[group]["var"], stats_b[group]["var"]
        )
        assert stats_a[group]["count"] == stats_b[group]["count"]
    # every step's observations (and the reset's) and every step's returns, 2 copies each
    assert stats_a["obs_rms"]["count"] == pytest.approx(1e-4 + 2 * (1 + 6 * 64))
    assert stats_a["ret_rms"]["count"] == pytest.approx(1e-4 + 2 * 6 * 64)
    assert torch.equal(stats_a["returns"], stats_b["returns"])
    metrics_a, metrics_b = read_metrics(straight.run_dir), read_metrics(second.run_dir)
    columns = [c for c in metrics_a.columns if not c.startswith("perf/")]
    assert metrics_a[columns].equals(metrics_b[columns])


@pytest.mark.slow
def test_normalized_checkpoint_evaluates_the_same_through_cli_and_python_api(tmp_path, capsys):
    """The checkpoint holds the observation statistics; `pglab evaluate`,
    `evaluate_agent(pglab.load_checkpoint(run))` and a plain Gymnasium loop over
    `agent.predict(raw_obs)` give the same return, and that agent does normalise: the
    same network fed the raw observations acts differently."""
    import gymnasium as gym

    result = train_ppo(normalized_config(tmp_path, "run", total_steps=2 * 64 * 2))
    stats = load_checkpoint_file(result.run_dir, kinds=["ppo"])["extra"]["normalizer"]["obs_rms"]
    assert stats["count"] > 200 and not torch.allclose(
        stats["var"], torch.ones(3, dtype=torch.float64)
    )  # learned statistics were stored
    out = tmp_path / "eval.json"
    assert cli_main(["evaluate", str(result.run_dir), "--episodes", "3", "--seed", "7", "--output", str(out)]) == 0
    cli_return = json.loads(out.read_text())["return/mean"]
    agent = pglab.load_checkpoint(result.run_dir, device="cpu")
    assert agent.normalizer is not None and not agent.normalizer.training
    api_return = evaluate_agent(agent, "gym:Pendulum-v1", episodes=3, seed=7)["return/mean"]
    env = gym.make_vec("Pendulum-v1", num_envs=3, vectorization_mode="sync")
    obs, _ = env.reset(seed=7)
    total, raw_differs = np.zeros(3), False
    for _ in range(200):  # Pendulum's time limit: all three copies end together
        actions = agent.predict(obs)
        raw_differs |= not np.allclose(
            actions, agent.to_env(agent.policy.deterministic_action(torch.from_numpy(obs))).detach().numpy()
        )
        obs, rewards, _, _, _ = env.step(actions)
        total += rewards
    env.close()
    assert cli_return == pytest.approx(api_return, rel=1e-9)
    assert total.mean() == pytest.approx(api_return, rel=1e-4)
    assert raw_differs


def test_logged_returns_are_raw_when_rewards_are_normalised(tmp_path):
    """CartPole pays 1 per step: with reward normalisation the update sees scaled rewards,
    but the logged episode return still equals the episode length."""
    result = train_ppo(
        normalized_config(tmp_path, "cartpole", env="gym:CartPole-v1", num_steps=32, total_steps=2 * 32 * 3)
    )
    metrics = read_metrics(result.run_dir).dropna(subset=["return/mean"])
    assert len(metrics) > 0 and (metrics["return/mean"] == metrics["episode/length"]).all()


def test_default_run_has_no_normalizer_and_bad_clip_is_refused(tmp_path):
    result = train_ppo(
        normalized_config(tmp_path, "plain", normalize_obs=False, normalize_reward=False, total_steps=128)
    )
    assert "normalizer" not in load_checkpoint_file(result.run_dir, kinds=["ppo"])["extra"]
    assert pglab.load_checkpoint(result.run_dir, device="cpu").normalizer is None
    with pytest.raises(ConfigError, match=r"clip_obs: .*\(got 0.0\)"):
        PPOConfig(normalize_obs=True, clip_obs=0.0)


def test_truncations_given_apart_end_the_return_as_in_the_combined_flag():
    """``step(obs, rewards, terminated, truncated)`` restarts the discounted return where
    either flag is set, as ``step(obs, rewards, terminated | truncated)`` does."""
    rng = np.random.default_rng(2)
    apart, combined = (ObsRewardNormalizer((2,), 4, gamma=0.9) for _ in range(2))
    for _ in range(12):
        obs = torch.from_numpy(rng.normal(size=(4, 2)).astype(np.float32))
        rewards = torch.from_numpy(rng.normal(size=4).astype(np.float32))
        terminated, truncated = (torch.from_numpy(rng.random(4) < 0.3) for _ in range(2))
        got = apart.step(obs, rewards, terminated, truncated)
        expected = combined.step(obs, rewards, terminated | truncated)
        assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
        assert np.array_equal(apart.returns, combined.returns)
    assert (apart.returns == 0).any()

import pytest
import torch

from pglab.envs.base import EpisodeTracker
from pglab.envs.gym_adapter import _ale_game, make_gym_env
from pglab.errors import ConfigError, TensorContractError


def test_cartpole_adapter_same_step_autoreset_and_final_obs():
    env = make_gym_env("CartPole-v1", num_envs=3)
    obs = env.reset(seed=0)
    assert obs.shape == (3, 4) and obs.dtype == torch.float32
    assert env.action_spec.kind == "discrete" and env.action_spec.num_actions == 2
    tracker = EpisodeTracker(3, "cpu")
    seen_finish = False
    for _ in range(60):
        actions = torch.zeros(3, dtype=torch.int64)  # always push left: fails fast
        next_obs, reward, done, trunc, info = env.step(actions)
        returns, lengths, finished = tracker.update(reward, done | trunc)
        if finished.any():
            seen_finish = True
            i = int(finished.nonzero()[0])
            # The final obs is the failing state (pole angle or cart position out of range)
            final = info["final_obs"][i]
            assert abs(float(final[2])) > 0.2095 or abs(float(final[0])) > 2.4
            assert not torch.equal(final, next_obs[i])  # next_obs is already the reset state
            assert returns[i] == lengths[i] and lengths[i] > 0  # CartPole: +1 per step
        obs = next_obs
    assert seen_finish
    with pytest.raises(TensorContractError, match="GymVectorAdapter.step: actions expected"):
        env.step(torch.zeros(3))
    env.close()


def test_pendulum_continuous_spec_and_unknown_ids():
    env = make_gym_env("Pendulum-v1", num_envs=2)
    assert env.action_spec.kind == "continuous" and env.action_spec.shape == (1,)
    assert env.action_spec.low == (-2.0,) and env.action_spec.high == (2.0,)
    env.close()
    with pytest.raises(ConfigError, match="env='NoSuchEnv-v0': not a registered"):
        make_gym_env("NoSuchEnv-v0", num_envs=1)


def test_ale_ids_and_breakout_pixels():
    assert _ale_game("ALE/SpaceInvaders-v5") == "space_invaders" and _ale_game("ale:pong") == "pong"
    assert _ale_game("CartPole-v1") is None
    env = make_gym_env("ALE/Breakout-v5", num_envs=2, max_num_frames_per_episode=200)
    obs = env.reset(seed=1)
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == torch.uint8
    finished_any = False
    for _ in range(80):
        obs, reward, done, trunc, info = env.step(torch.randint(0, env.action_spec.num_actions, (2,)))
        assert reward.dtype == torch.float32 and done.dtype == torch.bool
        finished_any |= bool((done | trunc).any())
    assert finished_any  # 200 frames = 50 agent steps: the time limit truncates
    env.close()

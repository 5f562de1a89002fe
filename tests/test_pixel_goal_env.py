"""PixelGoalEnv: rendering, dynamics, reward formula, autoreset, contracts, determinism."""

import pytest
import torch

from pglab.envs.pixel_goal import AGENT_INTENSITY, GOAL_INTENSITY, PixelGoalConfig, PixelGoalEnv, make_pixel_goal_env
from pglab.envs.registry import make_env
from pglab.errors import ConfigError, TensorContractError


def place(env, agent, goal):
    """Put every copy's agent/goal at the given cells (row, col)."""
    px = env.config.cell_px
    env.agent = torch.tensor(agent, dtype=torch.int64).view(-1, 2).expand(env.num_envs, 2).clone() * px
    env.goal = torch.tensor(goal, dtype=torch.int64).view(-1, 2).expand(env.num_envs, 2).clone() * px
    env.dist = env._distance(env.agent, env.goal)
    env.frames = env.render(env.agent, env.goal).unsqueeze(1).expand(-1, env.config.stack_k, -1, -1).clone()


def test_render_draws_agent_and_goal_squares_exactly():
    env = PixelGoalEnv(1, PixelGoalConfig(grid_size=4, cell_px=2))
    image = env.render(torch.tensor([[2, 4]]), torch.tensor([[0, 0]]))[0]  # pixel positions
    expected = torch.zeros(8, 8, dtype=torch.uint8)
    expected[2:4, 4:6] = AGENT_INTENSITY
    expected[0:2, 0:2] = GOAL_INTENSITY
    assert torch.equal(image, expected)
    overlap = env.render(torch.tensor([[2, 2]]), torch.tensor([[2, 2]]))[0]
    assert overlap[2, 2] == AGENT_INTENSITY + GOAL_INTENSITY and overlap.count_nonzero() == 4


def test_reset_shapes_dtypes_and_distinct_positions():
    env = make_pixel_goal_env(4096, seed=3, stack_k=3)
    obs = env.reset()
    assert obs.shape == (4096, 3, 16, 16) and obs.dtype == torch.uint8
    assert torch.equal(obs[:, 0], obs[:, 2])  # the stack starts filled with the first frame
    assert not (env.agent == env.goal).all(dim=1).any()
    # cell-aligned and on the board
    assert (env.agent % 2 == 0).all() and env.agent.max() <= 14 and env.goal.min() >= 0
    # all 64 goal cells occur (uniform draw)
    assert torch.unique(env.goal[:, 0] * 16 + env.goal[:, 1]).numel() == 64


def test_step_dynamics_and_reward_formula():
    cfg = PixelGoalConfig(grid_size=5, cell_px=2, step_cost=0.05, alpha=0.3, goal_bonus=2.0, max_steps=50)
    env = PixelGoalEnv(5, cfg)
    env.reset(seed=0)
    place(env, (2, 2), (2, 4))
    actions = torch.tensor([0, 1, 2, 3, 4], dtype=torch.int32)  # stay, up, down, left, right
    obs, reward, done, trunc, info = env.step(actions)
    expected_cells = torch.tensor([[2, 2], [1, 2], [3, 2], [2, 1], [2, 3]])
    assert torch.equal(env.agent, expected_cells * 2)
    new_dist = torch.tensor([2.0, 5**0.5, 5**0.5, 3.0, 1.0])
    assert torch.allclose(info["dist"], new_dist)
    # r = -step_cost + alpha (d_prev - d) + bonus * success
    assert torch.allclose(reward, -0.05 + 0.3 * (2.0 - new_dist))
    assert not done.any() and not trunc.any()
    # walls clamp: moving up from row 0 stays at row 0
    place(env, (0, 0), (4, 4))
    env.step(torch.full((5,), 1, dtype=torch.int32))
    assert (env.agent == 0).all()


def test_success_needs_k_consecutive_steps_and_autoresets_same_step():
    cfg = PixelGoalConfig(grid_size=4, k_consecutive=2, goal_bonus=1.0, step_cost=0.0, alpha=0.0)
    env = PixelGoalEnv(1, cfg)
    env.reset(seed=1)
    place(env, (1, 1), (1, 2))
    _, r1, d1, _, _ = env.step(torch.tensor([4], dtype=torch.int32))  # onto the goal: streak 1
    assert not d1.item() and r1.item() == 0.0
    _, r2, d2, t2, info = env.step(torch.tensor([0], dtype=torch.int32))  # stay: streak 2 -> success
    assert d2.item() and not t2.item() and r2.item() == 1.0 and info["success"].item()
    # final_obs shows the agent on the goal; the returned obs is a fresh episode
    assert info["final_obs"][0, -1].max() == AGENT_INTENSITY + GOAL_INTENSITY
    assert env.steps.item() == 0 and env.streak.item() == 0
    assert not torch.equal(env.agent, env.goal)


def test_streak_restarts_when_the_agent_leaves_the_goal():
    env = PixelGoalEnv(1, PixelGoalConfig(grid_size=4, k_consecutive=2, max_steps=50))
    env.reset(seed=1)
    place(env, (1, 1), (1, 2))
    right, left, stay = (torch.tensor([a], dtype=torch.int32) for a in (4, 3, 0))
    for action, streak in ((right, 1), (left, 0), (right, 1)):  # on, off, on again: 1 step in a row
        _, _, done, _, _ = env.step(action)
        assert not done.item() and env.streak.item() == streak
    _, _, done, _, _ = env.step(stay)
    assert done.item()


def test_success_on_the_last_allowed_step_terminates_and_does_not_truncate():
    cfg = PixelGoalConfig(grid_size=4, max_steps=2, step_cost=0.0, alpha=0.0, goal_bonus=1.0)
    env = PixelGoalEnv(2, cfg)
    env.reset(seed=0)
    place(env, (1, 0), (1, 2))
    right_then_stay = torch.tensor([4, 0], dtype=torch.int32)
    _, _, done, trunc, _ = env.step(right_then_stay)
    assert not done.any() and not trunc.any()
    _, reward, done, trunc, _ = env.step(right_then_stay)  # step 2 = max_steps: env 0 reaches the goal
    assert done.tolist() == [True, False] and trunc.tolist() == [False, True]
    assert reward.tolist() == [1.0, 0.0]


def test_shaping_after_an_autoreset_starts_from_the_new_episode():
    """The first reward of an episode is -step_cost + alpha (d_start - d_1), with d_start
    the distance of the *fresh* positions, not the finished episode's last distance."""
    cfg = PixelGoalConfig(grid_size=6, max_steps=1, step_cost=0.0, alpha=1.0, goal_bonus=0.0)
    env = PixelGoalEnv(256, cfg)
    env.reset(seed=2)
    right = torch.full((256,), 4, dtype=torch.int32)
    _, _, done, trunc, _ = env.step(right)
    assert (done | trunc).all()  # every copy restarted
    start = env._distance(env.agent, env.goal)
    _, reward, _, _, info = env.step(right)
    assert torch.allclose(reward, start - info["dist"], atol=1e-6)


def test_truncation_after_max_steps_is_not_done():
    env = PixelGoalEnv(3, PixelGoalConfig(max_steps=4))
    env.reset(seed=0)
    stay = torch.zeros(3, dtype=torch.int32)
    for _ in range(3):
        _, _, done, trunc, _ = env.step(stay)
        assert not trunc.any()
    _, _, done, trunc, _ = env.step(stay)
    assert trunc.all() and not done.any()


def test_greedy_oracle_always_succeeds_and_random_policy_does_not():
    env = make_pixel_goal_env(2048, seed=5)
    env.reset()
    successes = finished = 0
    for _ in range(40):
        offset = env.goal - env.agent  # [N, 2] pixels
        vertical = offset[:, 0].abs() >= offset[:, 1].abs()
        act = torch.where(vertical, torch.where(offset[:, 0] < 0, 1, 2), torch.where(offset[:, 1] < 0, 3, 4))
        _, _, done, trunc, _ = env.step(act.to(torch.int32))
        successes += int(done.sum())
        finished += int((done | trunc).sum())
    assert finished > 2048 and successes == finished  # 14 moves suffice on 8x8, max_steps=32
    rng = torch.Generator().manual_seed(0)
    env.reset(seed=6)
    successes = finished = 0
    for _ in range(64):
        _, _, done, trunc, _ = env.step(torch.randint(5, (2048,), generator=rng, dtype=torch.int32))
        successes += int(done.sum())
        finished += int((done | trunc).sum())
    assert 0.05 < successes / finished < 0.5


def test_contracts_and_config_errors_name_the_field():
    env = make_pixel_goal_env(4)
    env.reset()
    with pytest.raises(TensorContractError, match="actions expected int32"):
        env.step(torch.zeros(4, dtype=torch.int64))
    with pytest.raises(TensorContractError, match="actions"):
        env.step(torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ConfigError, match=r"tau: .*\(got -1"):
        PixelGoalConfig(tau=-1.0)
    with pytest.raises(ConfigError, match=r"stack_k: .*\(got 0\)"):
        make_env("pglab:pixel-goal", 2, stack_k=0)
    with pytest.raises(ConfigError, match="env_kwargs.colour"):
        make_pixel_goal_env(2, colour=1)


def test_seeded_runs_identical_and_state_dict_resumes_exactly():
    def rollout(env, steps, rng):
        out = []
        for _ in range(steps):
            obs, reward, done, trunc, _ = env.step(torch.randint(5, (64,), generator=rng, dtype=torch.int32))
            out.append((obs.clone(), reward, done, trunc))
        return out

    rng_a = torch.Generator().manual_seed(1)
    a = make_pixel_goal_env(64, seed=9, stack_k=2)
    a.reset()
    first = rollout(a, 50, rng_a)
    saved, rng_state = a.state_dict(), rng_a.get_state()
    tail_a = rollout(a, 50, rng_a)
    b = make_pixel_goal_env(64, seed=123, stack_k=2)
    b.reset()
    b.load_state_dict(saved)
    rng_b = torch.Generator()
    rng_b.set_state(rng_state)
    tail_b = rollout(b, 50, rng_b)
    for x, y in zip(tail_a, tail_b, strict=False):
        assert all(torch.equal(u, v) for u, v in zip(x, y, strict=False))
    c = make_pixel_goal_env(64, seed=9, stack_k=2)
    c.reset()
    again = rollout(c, 50, torch.Generator().manual_seed(1))
    assert all(torch.equal(u, v) for x, y in zip(first, again, strict=False) for u, v in zip(x, y, strict=False))

import numpy as np
import pytest
import torch

from pglab.envs.base import EpisodeTracker, checkpointed
from pglab.envs.gym_adapter import _ale_game, _restored, _storable, make_gym_env
from pglab.envs.registry import NATIVE_ENVS, make_env
from pglab.errors import CheckpointError, ConfigError, TensorContractError


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
    with pytest.raises(ConfigError, match=r"env: not a registered .*\(got 'NoSuchEnv-v0'\)"):
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
    # ALE's emulators cannot be captured: no snapshot, and none is accepted
    assert env.state_dict() is None
    env.load_state_dict(None)
    with pytest.raises(CheckpointError, match="Atari environment cannot load"):
        env.load_state_dict({"layers": []})
    env.close()


def test_vector_cartpole_matches_gymnasium_cartpole_step_for_step():
    """The same-step array CartPole: every transition equals gymnasium's single CartPoleEnv
    from the same state (bit for bit), resets happen in the same step, truncation at the
    time limit, and the reset states come from U(-0.05, 0.05)."""
    import gymnasium as gym
    import numpy as np

    env = make_gym_env("CartPole-v1", num_envs=4, vectorization="vector", max_episode_steps=30)
    assert type(env.env).__name__ == "SameStepCartPoleVectorEnv"
    assert type(make_gym_env("CartPole-v1", num_envs=2).env).__name__ == "SameStepCartPoleVectorEnv"  # auto
    reference = gym.make("CartPole-v1").unwrapped
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    counts = {"terminated": 0, "truncated": 0}
    for step in range(1500):
        state, lengths = env.env.state.copy(), env.env.steps.copy()
        actions = rng.integers(0, 2, 4) if step % 5 else np.ones(4, dtype=np.int64)
        obs, reward, terminated, truncated, info = env.step(torch.as_tensor(actions))
        for i in range(4):
            reference.state, reference.steps_beyond_terminated = state[:, i].copy(), None
            want_obs, want_reward, want_terminated, _, _ = reference.step(int(actions[i]))
            assert np.array_equal(info["final_obs"][i].numpy(), want_obs)
            assert bool(terminated[i]) == want_terminated and float(reward[i]) == want_reward
            assert bool(truncated[i]) == (lengths[i] + 1 >= 30)
            if terminated[i] or truncated[i]:
                counts["terminated" if terminated[i] else "truncated"] += 1
                assert np.all(np.abs(obs[i].numpy()) <= 0.05) and env.env.steps[i] == 0
            else:
                assert torch.equal(obs[i], info["final_obs"][i])
    assert counts["terminated"] > 50 and counts["truncated"] > 5
    with pytest.raises(ConfigError, match="no array-vectorised implementation"):
        make_gym_env("Pendulum-v1", num_envs=2, vectorization="vector")
    with pytest.raises(ConfigError, match="vectorization"):
        make_gym_env("CartPole-v1", num_envs=2, vectorization="threads")
    # gymnasium kwargs without a vector implementation of them: auto falls back to sync
    assert type(make_gym_env("CartPole-v1", num_envs=2, sutton_barto_reward=True).env).__name__ == "SyncVectorEnv"


def test_episode_tracker_rollout_update_equals_the_step_by_step_update():
    generator = torch.Generator().manual_seed(0)
    for trial in range(30):
        stepwise, batched = EpisodeTracker(5, "cpu"), EpisodeTracker(5, "cpu")
        for _rollout in range(4):
            rewards = torch.randint(-3, 5, (5, 17), generator=generator).float()
            finished = torch.rand(5, 17, generator=generator) < 0.05 + 0.3 * trial / 30
            per_step = [stepwise.update(rewards[:, t], finished[:, t])[:2] for t in range(17)]
            returns, lengths = batched.update_rollout(rewards, finished)
            assert torch.equal(returns, torch.stack([r for r, _ in per_step], dim=1))
            assert torch.equal(lengths, torch.stack([n for _, n in per_step], dim=1))
            assert torch.equal(stepwise.returns, batched.returns) and torch.equal(stepwise.lengths, batched.lengths)


def test_numpy_to_tensor_conversion_keeps_dtype_and_values_on_every_path():
    import numpy as np

    from pglab.envs.gym_adapter import _to_tensor

    cpu = torch.device("cpu")
    rewards = np.array([1.0, -2.5, 3.25], dtype=np.float32)
    fast = _to_tensor(rewards, torch.float32, cpu)
    assert fast.dtype == torch.float32 and fast.tolist() == [1.0, -2.5, 3.25]
    assert np.shares_memory(fast.numpy(), rewards)  # torch.from_numpy: no copy, like torch.as_tensor
    flags = _to_tensor(np.array([True, False]), torch.bool, cpu)
    assert flags.dtype == torch.bool and flags.tolist() == [True, False]
    # dtype conversions, and arrays torch.from_numpy cannot wrap (copied first)
    assert _to_tensor(np.array([0.5, 1.5]), torch.float32, cpu).dtype == torch.float32  # float64 Box obs
    assert _to_tensor(np.array([1, 0]), torch.bool, cpu).tolist() == [True, False]
    frozen = np.array([1.0, 2.0], dtype=np.float32)
    frozen.flags.writeable = False
    assert _to_tensor(frozen, torch.float32, cpu).tolist() == [1.0, 2.0]
    swapped = np.array([1.0, 2.0], dtype=">f4")  # non-native byte order
    assert _to_tensor(swapped, torch.float32, cpu).tolist() == [1.0, 2.0]
    assert _to_tensor([1.0, 2.0], torch.float32, cpu).tolist() == [1.0, 2.0]  # not an array at all


def _actions(env, generator, steps):
    spec = env.action_spec
    if spec.kind == "discrete":
        return [torch.randint(0, spec.num_actions, (env.num_envs,), generator=generator) for _ in range(steps)]
    return [4 * torch.rand((env.num_envs, *spec.shape), generator=generator) - 2 for _ in range(steps)]


@pytest.mark.parametrize(
    ("env_id", "vectorization"), [("CartPole-v1", "vector"), ("CartPole-v1", "sync"), ("Pendulum-v1", "sync")]
)
def test_state_dict_round_trip_continues_the_same_episodes_in_a_fresh_env(tmp_path, env_id, vectorization):
    # Stepped, snapshotted (through a weights_only checkpoint file), stepped on; the snapshot
    # loaded into a freshly built env with another seed replays the same continuation:
    # CartPole's 40 steps cross terminations, whose resets draw from the restored generator;
    # Pendulum's 240 cross its 200-step time limit.
    steps = 40 if env_id == "CartPole-v1" else 240
    env = make_gym_env(env_id, num_envs=3, vectorization=vectorization)
    env.reset(seed=0)
    for actions in _actions(env, torch.Generator().manual_seed(0), 7):
        env.step(actions)
    torch.save(env.state_dict(), tmp_path / "env.pt")
    actions = _actions(env, torch.Generator().manual_seed(1), steps)
    ahead = [env.step(a) for a in actions]
    assert any(bool((done | trunc).any()) for _, _, done, trunc, _ in ahead)
    env.close()

    fresh = make_gym_env(env_id, num_envs=3, vectorization=vectorization)
    fresh.reset(seed=123)
    fresh.load_state_dict(torch.load(tmp_path / "env.pt", weights_only=True))
    again = [fresh.step(a) for a in actions]
    fresh.close()
    for t, (first, second) in enumerate(zip(ahead, again, strict=True)):
        for name, x, y in zip(("obs", "reward", "done", "trunc"), first[:4], second[:4], strict=True):
            assert torch.equal(x, y), (t, name)
        assert torch.equal(first[4]["final_obs"], second[4]["final_obs"]), t


def test_state_dict_is_none_where_the_state_lives_elsewhere_and_a_foreign_snapshot_is_refused():
    # AsyncVectorEnv: the copies live in worker processes; nothing is captured and loading
    # nothing leaves the environments as they are.
    remote = make_gym_env("CartPole-v1", num_envs=2, vectorization="async")
    obs = remote.reset(seed=0)
    assert remote.state_dict() is None
    remote.load_state_dict(None)
    actions = torch.zeros(2, dtype=torch.int64)
    stepped = remote.step(actions)[0]
    remote.close()
    local = make_gym_env("CartPole-v1", num_envs=2, vectorization="sync")
    assert torch.equal(local.reset(seed=0), obs) and torch.equal(local.step(actions)[0], stepped)
    vector = make_gym_env("CartPole-v1", num_envs=2, vectorization="vector")
    with pytest.raises(CheckpointError, match="environment"):
        vector.load_state_dict(local.state_dict())  # three layers per copy against one vector env
    local.close()
    vector.close()


@pytest.mark.parametrize(
    "value", [np.float64(-1.25), np.float32(2.5), np.int64(7), np.bool_(True), 3.5, 4, None, "text"]
)
def test_env_attribute_snapshots_survive_a_weights_only_load(tmp_path, value):
    # np.float64 is also a Python float; stored as one it pickled as a NumPy scalar that
    # torch.load(weights_only=True) refuses.
    path = tmp_path / "snapshot.pt"
    torch.save({"field": _storable(value)}, path)
    restored = _restored(torch.load(path, weights_only=True)["field"], None)
    assert restored == value and type(restored) is type(value)


def test_every_native_env_in_the_registry_builds_steps_and_snapshots():
    # Each pglab:NAME resolves to a factory whose env steps and round-trips its state; an
    # unknown name is one line naming env.
    for name in NATIVE_ENVS:
        env = make_env(f"pglab:{name}", 2, seed=0)
        env.reset(seed=0)
        actions = torch.zeros(2, dtype=env.action_spec.dtype)
        state = env.state_dict()
        first = env.step(actions)[0]
        env.load_state_dict(state)
        assert torch.equal(env.step(actions)[0], first), name
        env.close()
    with pytest.raises(ConfigError, match="env: unknown pglab environment; choose one of pglab:pixel-goal"):
        make_env("pglab:ghm", 2)


def test_an_env_without_state_dict_is_checkpointed_as_capturing_nothing():
    class Bare:  # a native env that has no state_dict / load_state_dict
        pass

    stand_in = checkpointed(Bare())
    assert stand_in.state_dict() is None
    stand_in.load_state_dict(None)
    env = make_gym_env("CartPole-v1", num_envs=2)
    assert checkpointed(env) is env
    env.close()


def test_minatar_gymnasium_ids_give_channel_first_bool_boards():
    """gym:MinAtar/... registers the minatar package's ids and returns its boards as the
    native games do: bool [N, C, 10, 10], the package's state() transposed."""
    pytest.importorskip("minatar")
    env = make_env("gym:MinAtar/Breakout-v1", 2)
    assert env.observation_shape == (4, 10, 10) and env.observation_dtype == torch.bool
    assert env.action_spec.kind == "discrete" and env.action_spec.num_actions == 3  # the minimal action set
    obs = env.reset(seed=3)
    assert obs.shape == (2, 4, 10, 10) and obs.dtype == torch.bool
    package_state = env.env.envs[0].unwrapped.game.state()  # [10, 10, C]
    assert torch.equal(obs[0], torch.from_numpy(package_state).permute(2, 0, 1))
    next_obs, _, _, _, info = env.step(torch.tensor([0, 2]))
    assert next_obs.shape == info["final_obs"].shape == (2, 4, 10, 10) and next_obs.dtype == torch.bool
    assert env.state_dict() is None  # the game lives in minatar's own objects: nothing captured
    env.close()


def test_time_feature_counts_the_steps_of_each_episode():
    """time_feature: -0.5 after a reset, -0.5 + (k - 1) / T after the k-th step, on the
    episode's last observation too; the next episode starts again at -0.5."""
    env = make_gym_env("CartPole-v1", 2, time_feature=True, max_episode_steps=4)
    assert env.observation_shape == (5,) and env.time_limit == 4
    obs = env.reset(seed=0)
    assert obs[:, 4].tolist() == [-0.5, -0.5]
    features = []
    for _ in range(4):
        obs, _, done, trunc, info = env.step(torch.ones(2, dtype=torch.int64))
        features.append((obs[:, 4].tolist(), info["final_obs"][:, 4].tolist(), (done | trunc).tolist()))
    assert features[0][0] == [-0.5, -0.5] and features[1][0] == [-0.25, -0.25] and features[2][0] == [0.0, 0.0]
    # the 4th step truncates both copies: the last observation carries k = 4, the new episode -0.5
    assert features[3] == ([-0.5, -0.5], [0.25, 0.25], [True, True])
    assert make_gym_env("Pendulum-v1", 1, time_feature=True).observation_shape == (4,)  # T = 200 registered

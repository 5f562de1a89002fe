"""Atari through ale-py (ROMs shipped in the ale-py wheel): the wrappers of
pglab/envs/atari.py, the Nature CNN, and PPO / stream-AC end to end with tiny budgets.

The wrapper tests run two copies of the same game side by side, seeded alike and fed the
same actions (ALE is deterministic given the seed when sticky actions are off): one with
the training wrappers (episodic life, clipped rewards), one plain (whole games, raw
rewards). What the plain copy sees is the ground truth the wrapped one must report.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("ale_py")

from pglab.envs.atari import EVALUATION_OPTIONS, AtariEnv, ale_game, evaluation_options, make_atari_env  # noqa: E402
from pglab.envs.base import ActionSpec  # noqa: E402
from pglab.envs.registry import make_env  # noqa: E402
from pglab.nets.nature_cnn import NatureCNNActorCritic  # noqa: E402
from pglab.nets.stream import StreamActorCritic, build_stream_actor_critic  # noqa: E402


def _twins(game: str, seed: int = 3) -> tuple[AtariEnv, AtariEnv]:
    wrapped = make_atari_env(game, 1)  # training defaults: episodic life, sign(r)
    plain = make_atari_env(game, 1, **EVALUATION_OPTIONS)
    wrapped.reset(seed=seed)
    plain.reset(seed=seed)
    return wrapped, plain


def test_observations_are_stacked_84x84_uint8_frames_that_shift_by_one():
    env = make_env("gym:ALE/Breakout-v5", 3)
    obs = env.reset(seed=0)
    assert obs.shape == (3, 4, 84, 84) and obs.dtype == torch.uint8
    assert env.observation_shape == (4, 84, 84) and env.action_spec.num_actions == 4
    generator = torch.Generator().manual_seed(0)
    shifts = 0
    for _ in range(60):
        previous = obs
        obs, reward, done, trunc, info = env.step(torch.randint(0, 4, (3,), generator=generator))
        assert reward.dtype == torch.float32 and done.dtype == torch.bool and trunc.dtype == torch.bool
        going_on = ~info["episode_end"]
        # frame stack: the newest frame enters last, the oldest one leaves
        assert torch.equal(obs[going_on, :3], previous[going_on, 1:])
        shifts += int(going_on.sum())
    assert shifts > 100
    env.close()


def test_reward_clipping_gives_sign_of_the_raw_reward_and_the_score_stays_raw():
    # Space Invaders pays 5..30 points per invader: clipping visibly changes the rewards.
    wrapped, plain = _twins("space_invaders")
    rng = np.random.default_rng(0)
    raw_total, clipped = [], []
    for _ in range(250):
        action = torch.as_tensor(rng.integers(0, wrapped.action_spec.num_actions, 1))
        _, reward, *_ = wrapped.step(action)
        _, raw, *_ = plain.step(action)
        clipped.append(reward)
        raw_total.append(raw)
    clipped, raw_total = torch.cat(clipped), torch.cat(raw_total)
    assert raw_total.abs().max() > 1  # there was something to clip
    assert torch.equal(clipped, torch.sign(raw_total))
    wrapped.close()
    plain.close()


def test_episodic_life_ends_an_episode_per_life_and_reports_the_whole_game_score():
    wrapped, plain = _twins("breakout")
    rng = np.random.default_rng(1)
    life_ends, raw_score, games = 0, 0.0, 0
    lives_seen = []
    for _ in range(3000):
        action = torch.as_tensor(rng.integers(0, 4, 1))
        _, reward, done, trunc, info = wrapped.step(action)
        _, raw, plain_done, plain_trunc, plain_info = plain.step(action)
        raw_score += float(raw)
        life_ends += int(done)
        lives_seen.append(int(info["lives"]))
        # the game itself is the same in both copies
        assert bool(info["episode_end"]) == bool(plain_done | plain_trunc) == bool(plain_info["episode_end"])
        if bool(plain_done):
            # Breakout starts with 5 lives: 4 life losses + the game over, one score for all
            assert life_ends == 5
            assert float(info["episode_return"]) == raw_score == float(plain_info["episode_return"])
            assert int(info["episode_length"]) == int(plain_info["episode_length"]) > 0
            life_ends, raw_score, games = 0, 0.0, games + 1
            if games == 2:
                break
        else:
            assert float(info["episode_return"]) == 0.0 and int(info["episode_length"]) == 0
            assert not bool(plain_done)  # the plain copy only ends at game over
    assert games == 2
    assert max(lives_seen) == 5 and min(lives_seen) == 1
    wrapped.close()
    plain.close()


@pytest.mark.filterwarnings("ignore:Rom no_such_game not supported")
def test_atari_ids_options_and_errors():
    assert ale_game("ALE/SpaceInvaders-v5") == "space_invaders" and ale_game("ale:pong") == "pong"
    assert ale_game("CartPole-v1") is None
    assert evaluation_options("gym:ALE/Pong-v5") == EVALUATION_OPTIONS and evaluation_options("gym:CartPole-v1") == {}
    from pglab.errors import ConfigError

    with pytest.raises(ConfigError, match="reward_clipping"):
        make_atari_env("pong", 1, reward_clipping=True)
    with pytest.raises(ConfigError, match="env: ALE could not start"):
        make_atari_env("no_such_game", 1)


# -- the Nature CNN ----------------------------------------------------------------------
def test_nature_cnn_layout_init_and_policy():
    torch.manual_seed(0)
    net = NatureCNNActorCritic((4, 84, 84), 6)
    # conv 4->32 8x8, 32->64 4x4, 64->64 3x3, 64*7*7 -> 512, heads 512 -> 6 and 512 -> 1
    expected = (
        (4 * 32 * 64 + 32) + (32 * 64 * 16 + 64) + (64 * 64 * 9 + 64) + (3136 * 512 + 512) + (512 * 6 + 6) + (512 + 1)
    )
    assert sum(p.numel() for p in net.parameters()) == expected == 1_687_719
    weight = net.policy_head.weight.detach()
    assert torch.allclose(weight @ weight.T, 1e-4 * torch.eye(6), atol=1e-8)  # orthogonal rows, gain 0.01
    obs = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    # pixels are scaled to [0, 1] before the trunk
    assert torch.allclose(net.features(obs), net.trunk(obs.float() / 255.0), atol=1e-5)
    assert not torch.allclose(net.features(obs), net.trunk(obs.float()), atol=1e-3)
    actions, log_probs, values = net.act(obs, torch.Generator().manual_seed(1))
    ev_log_probs, entropy, ev_values = net.evaluate_actions(obs, actions)
    assert torch.allclose(log_probs, ev_log_probs) and torch.allclose(values, ev_values) and values.shape == (5,)
    assert torch.all(entropy > math.log(6) - 1e-3)  # the 0.01 gain: a near-uniform first policy


def test_nature_cnn_samples_from_its_softmax():
    net = NatureCNNActorCritic((4, 36, 36), 3)
    logits = torch.tensor([[0.0, 1.0, -1.0]]).expand(40_000, 3)
    actions, log_probs = net._sample(logits, torch.Generator().manual_seed(0))
    expected = torch.softmax(logits[0], 0)
    frequencies = torch.bincount(actions, minlength=3).double() / actions.numel()
    assert torch.allclose(frequencies, expected.double(), atol=0.01)  # 4 standard errors at most
    assert torch.allclose(log_probs, expected.log()[actions])


def test_nature_cnn_checks_its_input():
    from pglab.errors import TensorContractError

    net = NatureCNNActorCritic((4, 84, 84), 4)
    with pytest.raises(TensorContractError, match="uint8"):
        net.check_obs(torch.zeros(1, 4, 84, 84), "act")
    with pytest.raises(TensorContractError, match=r"\[B, 4, 84, 84\]"):
        net.check_obs(torch.zeros(1, 84, 84, 4, dtype=torch.uint8), "act")
    with pytest.raises(ValueError, match="36x36"):
        NatureCNNActorCritic((4, 16, 16), 4)


def test_stream_ac_network_for_atari_is_the_reference_stack_and_rebuilds_from_its_architecture():
    torch.manual_seed(0)
    model = build_stream_actor_critic((4, 84, 84), torch.uint8, ActionSpec(kind="discrete", num_actions=4))
    assert model.architecture()["torso"] == "atari" and model.architecture()["hidden"] == 256
    # per network: conv 4->32 8x8/5, 32->64 4x4/3, 64->64 3x3/2 (84 -> 16 -> 5 -> 2), dense 256 -> 256
    torso = (4 * 32 * 64 + 32) + (32 * 64 * 16 + 64) + (64 * 64 * 9 + 64) + (256 * 256 + 256)
    assert sum(p.numel() for p in model.parameters()) == 2 * torso + (256 * 4 + 4) + (256 + 1)
    conv = model.actor_torso[0].weight
    assert (conv == 0).float().mean().item() == pytest.approx(0.9, abs=0.01)  # sparse init
    rebuilt = StreamActorCritic(**model.architecture())
    rebuilt.load_state_dict(model.state_dict())
    obs = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    model.observe(obs)
    rebuilt.observe(obs)
    (logits,), values = model(obs)
    (rebuilt_logits,), rebuilt_values = rebuilt(obs)
    assert torch.equal(logits, rebuilt_logits) and torch.equal(values, rebuilt_values)
    # PixelGoalEnv's boards take the small torso
    small = build_stream_actor_critic((1, 16, 16), torch.uint8, ActionSpec(kind="discrete", num_actions=5))
    assert small.architecture()["torso"] == "small"


# -- end to end ----------------------------------------------------------------------------
@pytest.mark.slow
def test_ppo_on_breakout_trains_checkpoints_and_evaluates(tmp_path):
    import json

    import pglab
    from pglab.algos.ppo import evaluate_agent, train_ppo
    from pglab.cli import main
    from pglab.configs.ppo import OnPolicyHyperparams, PPOConfig

    config = PPOConfig(
        env="gym:ALE/Breakout-v5",
        num_envs=4,
        num_steps=100,
        total_steps=800,
        eval_episodes=0,
        device="cpu",
        log_dir=tmp_path / "run",
        update=OnPolicyHyperparams(num_minibatches=2, ppo_epochs=1),
    )
    result = train_ppo(config, echo=lambda *a, **k: None)
    assert result.iterations == 2 and result.env_steps == 800
    # The logged episodes are whole games with their score (5 lives: 120+ steps), not the
    # lives the learner's `done` marks (~20-40 steps each, dozens of them in 800 steps).
    rows = [
        json.loads(line)
        for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
        if '"iteration"' in line
    ]
    games = sum(row.get("episode/count", 0) for row in rows)
    assert 1 <= games <= 8 and all(row["episode/length"] > 80 for row in rows if row.get("episode/count", 0) > 0)
    agent = pglab.load_checkpoint(tmp_path / "run", device="cpu")
    assert isinstance(agent.policy, NatureCNNActorCritic)
    obs = np.zeros((3, 4, 84, 84), dtype=np.uint8)
    actions = agent.predict(obs)
    assert actions.shape == (3,) and actions.dtype == np.int64 and actions.max() < 4
    evaluation = evaluate_agent(agent, "gym:ALE/Breakout-v5", episodes=2, deterministic=False, seed=5)
    # whole games (5 lives: a random one lasts 120+ steps), not single lives (~20-40 steps)
    assert evaluation["length/mean"] > 80 and evaluation["episodes"] == 2
    assert (
        main(
            [
                "evaluate",
                str(tmp_path / "run"),
                "--episodes",
                "1",
                "--stochastic",
                "--device",
                "cpu",
                "--output",
                str(tmp_path / "eval.json"),
            ]
        )
        == 0
    )


@pytest.mark.slow
def test_stream_ac_on_breakout_runs_and_loads(tmp_path):
    import pglab
    from pglab.algos.stream_ac import train_stream_ac
    from pglab.configs.a2c import A2CTrainConfig

    # ~0.1-0.2 s per transition on one CPU thread: a handful of them
    config = A2CTrainConfig(
        algo="stream-ac",
        env="gym:ALE/Breakout-v5",
        total_env_steps=12,
        device="cpu",
        threads=1,
        save_interval=12,
        log_dir=tmp_path / "run",
    )
    assert train_stream_ac(config, echo=lambda *a, **k: None)["env_steps"] == 12
    agent = pglab.load_checkpoint(tmp_path / "run", device="cpu")
    assert isinstance(agent.policy, StreamActorCritic) and agent.policy.architecture()["torso"] == "atari"
    obs = torch.zeros(2, 4, 84, 84, dtype=torch.uint8)
    assert agent.act(obs).shape == (2,)


def test_a2c_trainers_count_the_games_an_atari_env_reports_not_its_lives():
    from pglab.algos.a2c_common import WindowStats, finished_episodes
    from pglab.envs.base import EpisodeTracker

    tracker, stats = EpisodeTracker(2, "cpu"), WindowStats(torch.device("cpu"), success=False)
    reward = torch.tensor([1.0, 1.0])
    done = torch.tensor([True, True])  # both lost a life...
    trunc = torch.tensor([False, False])
    info = {
        "episode_end": torch.tensor([False, True]),  # ...and copy 1's game ended with it
        "episode_return": torch.tensor([0.0, 42.0], dtype=torch.float64),
        "episode_length": torch.tensor([0, 300]),
    }
    returns, lengths, finished, succeeded = finished_episodes(tracker, reward, done, trunc, info)
    assert finished.tolist() == [False, True] and returns.tolist() == [0.0, 42.0] and lengths.tolist() == [0, 300]
    stats.add({}, reward, done, trunc, returns, lengths.double(), None, finished, succeeded)
    summary = stats.summary()
    assert summary["episode/count"] == 1 and summary["return/mean"] == 42.0 and summary["episode/length"] == 300
    # Atari defines no success: no success flags, no success rate
    assert succeeded is None and "episode/success_rate" not in summary
    # without a report (PixelGoalEnv) the tracker's sums of the rewards count, and the
    # environment's info["success"] among the ended episodes are the successes
    success = torch.tensor([True, False])
    returns, _, finished, succeeded = finished_episodes(tracker, reward, done, trunc, {"success": success})
    assert finished.tolist() == [True, True] and returns.tolist() == [1.0, 1.0] and torch.equal(succeeded, success)

"""bench/ppo_vs_sb3.py's translation of configs/ppo files into SB3's settings, and its
SB3 Atari pipeline (RL-Zoo's: AtariWrapper + 4-frame stack), which the Atari comparison
in docs/ppo.md depends on."""

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("cv2")  # SB3's AtariWrapper resizes frames with OpenCV
pytest.importorskip("ale_py")

from pglab.bench.ppo_vs_sb3 import load_config, sb3_atari_env, sb3_atari_id, sb3_game_scores, sb3_kwargs  # noqa: E402


def test_sb3_kwargs_translate_the_zoo_cartpole_file():
    config = load_config("cartpole", None)
    kwargs = sb3_kwargs(config)
    assert kwargs["n_steps"] == 32 and kwargs["batch_size"] == 256 and kwargs["n_epochs"] == 20
    # pglab's critic loss is 0.5 * MSE, SB3's MSE: the same loss needs half the coefficient
    assert kwargs["vf_coef"] == pytest.approx(config.update.value_coef / 2)
    # RL-Zoo's lin_0.001 and lin_0.2: SB3 calls schedules with the remaining progress
    assert kwargs["learning_rate"](0.5) == pytest.approx(5e-4)
    assert kwargs["clip_range"](0.25) == pytest.approx(0.05)


# RL-Zoo's hyperparams/ppo.yml entries (SB3 defaults where the zoo sets nothing), as SB3
# receives them from each file: (n_envs, n_steps, batch_size, n_epochs, gamma, gae_lambda,
# ent_coef, vf_coef, max_grad_norm)
ZOO = {
    "cartpole": (8, 32, 256, 20, 0.98, 0.8, 0.0, 0.5, 0.5),
    "acrobot": (16, 256, 64, 4, 0.99, 0.94, 0.0, 0.5, 0.5),
    "lunarlander": (16, 1024, 64, 4, 0.999, 0.98, 0.01, 0.5, 0.5),
    "pendulum": (4, 1024, 64, 10, 0.9, 0.95, 0.0, 0.5, 0.5),
    "atari_breakout": (8, 128, 256, 4, 0.99, 0.95, 0.01, 0.5, 0.5),
}


@pytest.mark.parametrize("name", sorted(ZOO))
def test_the_zoo_files_give_sb3_rl_zoos_settings(name):
    config = load_config(name, None)
    kwargs = sb3_kwargs(config)
    got = (
        config.num_envs,
        kwargs["n_steps"],
        kwargs["batch_size"],
        kwargs["n_epochs"],
        kwargs["gamma"],
        kwargs["gae_lambda"],
        kwargs["ent_coef"],
        kwargs["vf_coef"],
        kwargs["max_grad_norm"],
    )
    assert got == pytest.approx(ZOO[name]), name


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("gym:ALE/Breakout-v5", "BreakoutNoFrameskip-v4"),
        ("gym:ALE/SpaceInvaders-v5", "SpaceInvadersNoFrameskip-v4"),
        ("ale:pong", "PongNoFrameskip-v4"),
    ],
)
def test_sb3_atari_id_is_rl_zoos_noframeskip_id(spec, expected):
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    assert sb3_atari_id(spec) == expected
    assert expected in gym.registry


def test_sb3_atari_training_env_ends_an_episode_at_each_lost_life():
    env = sb3_atari_env("gym:ALE/Breakout-v5", 1, seed=3)
    obs = env.reset()
    assert obs.shape == (1, 84, 84, 4) and obs.dtype == np.uint8  # channels last; SB3 transposes for its CNN
    rng = np.random.default_rng(0)
    for _ in range(5_000):
        obs, _, dones, infos = env.step(rng.integers(0, 4, size=1))
        if dones[0]:
            break
    assert dones[0], "no episode ended in 5,000 random steps"
    assert infos[0]["lives"] == 4  # RL-Zoo's EpisodicLifeEnv: the first lost life ends it
    env.close()


def test_sb3_atari_evaluation_scores_whole_games_on_the_training_pipeline():
    # Evaluation keeps the training pipeline (a lost life still ends an episode, so SB3's
    # FireResetEnv serves the ball as in training) with raw rewards; the score of a game is
    # Monitor's, over all 5 Breakout lives, and equals the sum of the raw rewards.
    env = sb3_atari_env("gym:ALE/Breakout-v5", 1, seed=5, evaluation=True)
    env.reset()
    rng = np.random.default_rng(1)
    actions = rng.integers(0, 4, size=(20_000, 1))
    total, lives_lost = 0.0, 0
    for action in actions:
        _, rewards, dones, infos = env.step(action)
        total += float(rewards[0])
        lives_lost += int(dones[0])
        if "episode" in infos[0]:
            break
    assert "episode" in infos[0], "no game ended"
    assert lives_lost == 5 and infos[0]["lives"] == 0
    assert infos[0]["episode"]["r"] == pytest.approx(total)
    env.close()
    # sb3_game_scores reads the same number off the same game
    replay = iter(actions)
    env = sb3_atari_env("gym:ALE/Breakout-v5", 1, seed=5, evaluation=True)
    assert sb3_game_scores(env, lambda obs: next(replay))[0] == pytest.approx(total)
    env.close()


def test_the_record_holds_the_cpu_speedups_of_the_runs(tmp_path):
    """--record: the summary's speed-up is pglab's mean env steps per CPU-second over SB3's,
    and the record is complete for tools/results_tables.py (its headline renders)."""
    import json
    from argparse import Namespace

    from pglab.bench.ppo_vs_sb3 import reproduce_command, results_tables, summary, write_record

    def run(seed, cpu_speed):
        return {"seed": seed, "return": 1.0, "env_steps": 2048, "wall_s": 1.0, "steps_per_s": 9.0,
                "steps_per_cpu_s": cpu_speed, "load_avg_1min": 1.0}  # fmt: skip

    results = {
        "Swimmer-v4": {"sb3": [run(0, 1000.0), run(1, 1200.0)], "pglab": [run(0, 3000.0), run(1, 3800.0)]},
        "CartPole-v1": {"sb3": [run(0, 500.0), run(1, 500.0)], "pglab": []},
    }
    args = Namespace(configs=["zoo:Swimmer-v4", "cartpole"], first_seed=0, seeds=2, steps=2048, episodes=2,
                     libraries=["sb3", "pglab"])  # fmt: skip
    figures = summary(args, results, {"before": 1.0, "after": 2.0})
    assert figures["envs"]["Swimmer-v4"]["speedup_cpu"] == pytest.approx(3400 / 1100)
    assert figures["envs"]["Swimmer-v4"]["pglab"]["cpu_us_per_step"] == pytest.approx(1e6 / 3400)
    assert figures["envs"]["CartPole-v1"]["speedup_cpu"] is None  # pglab did not run there
    command = reproduce_command(args)
    assert command.startswith("python bench/ppo_vs_sb3.py --configs zoo:Swimmer-v4 cartpole") and "--json" in command
    path = tmp_path / "speed.json"
    write_record(path, figures, command, 12.0, results_tables().machine())
    record = json.loads(path.read_text())
    assert record["kind"] == "benchmark" and record["reads"] == "stdout"
    assert results_tables().headline(record, path.name).startswith("Swimmer-v4 3.09x SB3's env steps per CPU-second")

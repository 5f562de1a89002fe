"""Batched MinAtar (pglab.envs.minatar) against the minatar package, and the env contract."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from minatar_harness import run_equivalence

from pglab.envs.base import BatchedEnv
from pglab.envs.minatar import GAMES, make_minatar_env
from pglab.envs.minatar.asterix import Asterix
from pglab.envs.minatar.base import Game, MinAtarEnv, uniform_below, uniform_int
from pglab.envs.minatar.breakout import Breakout
from pglab.envs.minatar.freeway import Freeway
from pglab.envs.registry import make_env
from pglab.errors import ConfigError


def _load(env: MinAtarEnv, columns: dict[str, list]) -> None:
    env.game.load_state_dict({name: torch.tensor(np.array(values)) for name, values in columns.items()})


# -- mid-game starts: the same random state in each package env and in the batched game --


def breakout_start(packages: list[Any], env: MinAtarEnv, rng: np.random.RandomState) -> None:
    columns: dict[str, list] = {name: [] for name in ("ball_x", "ball_y", "dx", "dy", "last_x", "last_y", "pos")}
    columns.update(strike=[], bricks=[])
    for package in packages:
        game = package.env
        game.ball_x, game.ball_y, game.ball_dir = rng.randint(10), rng.choice([rng.randint(9), 0, 1]), rng.randint(4)
        game.pos, game.last_x, game.last_y = rng.randint(10), rng.randint(10), rng.randint(9)
        game.strike = bool(rng.rand() < 0.5)
        game.brick_map = np.zeros((10, 10))
        game.brick_map[1:4] = rng.rand(3, 10) < rng.choice([0.0, 0.05, 0.5, 0.9])  # 0: a cleared wall
        for name in ("ball_x", "ball_y", "last_x", "last_y", "pos", "strike"):
            columns[name].append(getattr(game, name))
        columns["dx"].append((-1, 1, 1, -1)[game.ball_dir])
        columns["dy"].append((-1, -1, 1, 1)[game.ball_dir])
        columns["bricks"].append(int((game.brick_map[1:4].flatten() == 1) @ (1 << np.arange(30))))
    _load(env, columns)


def freeway_start(packages: list[Any], env: MinAtarEnv, rng: np.random.RandomState) -> None:
    columns: dict[str, list] = {name: [] for name in ("car_x", "car_timer", "car_dx", "car_period")}
    columns.update(pos=[], move_timer=[], terminate_timer=[])
    for package in packages:
        game = package.env
        speeds = rng.randint(1, 6, 8) * rng.choice([-1, 1], 8)
        game.cars = [[rng.randint(10), i + 1, rng.randint(abs(s) + 1), s] for i, s in enumerate(speeds)]
        game.pos, game.move_timer, game.terminate_timer = rng.randint(1, 10), rng.randint(4), rng.randint(40)
        columns["car_x"].append([car[0] for car in game.cars])
        columns["car_timer"].append([car[2] for car in game.cars])
        columns["car_dx"].append([np.sign(car[3]) for car in game.cars])
        columns["car_period"].append([abs(car[3]) for car in game.cars])
        for name in ("pos", "move_timer", "terminate_timer"):
            columns[name].append(getattr(game, name))
    _load(env, columns)


def asterix_start(packages: list[Any], env: MinAtarEnv, rng: np.random.RandomState) -> None:
    names = ("player_x", "player_y", "spawn_speed", "spawn_timer", "move_speed", "move_timer")
    columns: dict[str, list] = {name: [] for name in (*names, "ramp_timer", "ramp_index")}
    columns.update(present=[], entity_x=[], entity_dx=[], gold=[])
    for package in packages:
        game = package.env
        game.player_x, game.player_y = rng.randint(10), rng.randint(1, 9)
        game.spawn_speed, game.move_speed = rng.randint(1, 11), rng.randint(1, 6)
        game.spawn_timer, game.move_timer = rng.randint(game.spawn_speed), rng.randint(game.move_speed)
        game.ramp_timer, game.ramp_index = rng.randint(-1, 4), rng.randint(12)
        present = rng.rand(8) < rng.choice([0.3, 0.9, 1.0])  # 1.0: no free slot when one spawns
        entities = [[rng.randint(10), i + 1, bool(rng.rand() < 0.5), bool(rng.rand() < 0.5)] for i in range(8)]
        game.entities = [entity if shown else None for entity, shown in zip(entities, present, strict=True)]
        for name in (*names, "ramp_timer", "ramp_index"):
            columns[name].append(getattr(game, name))
        columns["present"].append(present)
        columns["entity_x"].append([entity[0] for entity in entities])
        columns["entity_dx"].append([1 if entity[2] else -1 for entity in entities])
        columns["gold"].append([entity[3] for entity in entities])
    _load(env, columns)


CASES: dict[str, tuple[type[Game], Callable[[list[Any], MinAtarEnv, np.random.RandomState], None]]] = {
    "breakout": (Breakout, breakout_start),
    "freeway": (Freeway, freeway_start),
    "asterix": (Asterix, asterix_start),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_games_match_the_package_from_reset(name):
    """Whole random episodes (full action set, sticky 0.1, ramping) at two batch sizes."""
    game = CASES[name][0]
    runs = [run_equivalence(game, name, num_envs=n, steps=steps, seed=n + 1) for n, steps in ((1, 200), (4, 100))]
    if name != "freeway":  # a random freeway chicken neither scores nor ends within these steps
        assert sum(run["episodes"] for run in runs) > 0 and sum(run["reward"] for run in runs) > 0, runs


@pytest.mark.parametrize("name", sorted(CASES))
def test_games_match_the_package_from_mid_game_states(name):
    """Random mid-game states reach the rare rules: cleared walls, ball inside a brick,
    crossings, the time limit, full slots, late difficulty levels."""
    game, start = CASES[name]
    covered = run_equivalence(game, name, num_envs=48, steps=30, seed=7, start=start)
    assert covered["episodes"] > 0 and covered["reward"] > 0 and covered["shared_state"], covered
    if name == "asterix":
        assert covered["max_ramp"] >= 11, covered


def test_sticky_actions_and_minimal_action_set_match_the_package():
    run_equivalence(Breakout, "breakout", num_envs=4, steps=80, seed=3, sticky_action_prob=0.5, full_action_set=False)


def test_uniform_conversions_match_numpy_semantics():
    below = [float(np.nextafter(np.float32(p), np.float32(0))) for p in (0.1, 0.7)]
    u = torch.tensor([0.0, below[0], 0.1, below[1], 0.7, 0.5, 1 - 2**-24], dtype=torch.float32)
    for p in (0.1, 0.7, 1 / 3):  # float32(0.1) lies above 0.1, float32(0.7) below 0.7
        assert uniform_below(u, p).tolist() == [v < p for v in u.double().tolist()]
    assert uniform_int(u, torch.tensor([1, 2, 3, 4, 5, 6, 7])).tolist() == [0, 0, 0, 2, 3, 3, 6]
    largest = torch.full((300,), 1 - 2**-24)
    assert torch.equal(uniform_int(largest, torch.arange(1, 301)), torch.arange(300))


def _run(env: MinAtarEnv, steps: int, seed: int) -> list[torch.Tensor]:
    actions = torch.Generator().manual_seed(seed)
    outputs = []
    for _ in range(steps):
        action = torch.randint(env.action_spec.num_actions or 1, (env.num_envs,), generator=actions)
        obs, reward, done, trunc, info = env.step(action)
        outputs += [obs.clone(), reward, done, trunc, info["final_obs"]]
    return outputs


@pytest.mark.parametrize("name", sorted(CASES))
def test_state_dict_round_trip_continues_bit_for_bit(name):
    env = make_minatar_env(name, 6, seed=1)
    env.reset()
    _run(env, 40, seed=2)
    buffer = io.BytesIO()
    torch.save(env.state_dict(), buffer)
    expected = _run(env, 40, seed=3)
    other = make_minatar_env(name, 6, seed=99)
    other.reset()
    buffer.seek(0)
    other.load_state_dict(torch.load(buffer, weights_only=True))
    assert all(torch.equal(a, b) for a, b in zip(_run(other, 40, seed=3), expected, strict=True))


def test_seeded_runs_are_bit_identical_and_seeds_differ():
    first, second, third = (make_minatar_env("asterix", 8, seed=seed) for seed in (5, 5, 6))
    runs = []
    for env in (first, second, third):
        env.reset()
        runs.append(_run(env, 60, seed=0))
    assert all(torch.equal(a, b) for a, b in zip(runs[0], runs[1], strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(runs[0], runs[2], strict=True))
    first.reset(seed=5)
    assert all(torch.equal(a, b) for a, b in zip(_run(first, 60, seed=0), runs[0], strict=True))


def test_autoreset_gives_final_obs_and_a_fresh_episode():
    env = make_env("minatar:breakout", 16, seed=0, sticky_action_prob=0.0)
    assert isinstance(env, BatchedEnv)
    start = env.reset()
    fresh = start[:, [0, 3]]  # paddle and bricks: the same in every new episode
    finished = torch.zeros(16, dtype=torch.bool)
    for _ in range(40):
        obs, reward, done, trunc, info = env.step(torch.zeros(16, dtype=torch.int64))
        assert obs.dtype == torch.bool and obs.shape == (16, 4, 10, 10) and reward.dtype == torch.float32
        assert not trunc.any()
        assert torch.equal(info["final_obs"][~done], obs[~done])
        assert torch.equal(obs[done][:, [0, 3]], fresh[done])
        assert (info["final_obs"][done][:, 1, 9].any(dim=1)).all()  # the ball ended on the bottom row
        finished |= done
    assert finished.all()


def test_max_episode_steps_truncates_and_restarts():
    env = make_env("minatar:freeway", 3, seed=0, max_episode_steps=4)
    env.reset()
    up = torch.ones(3, dtype=torch.int64)  # minimal action 1 = up
    for step in range(1, 9):
        obs, _, done, trunc, info = env.step(up)
        assert not done.any()
        assert trunc.tolist() == [step % 4 == 0] * 3
        if step % 4 == 0:
            assert obs[:, 0, 9, 4].all() and not info["final_obs"][:, 0, 9, 4].all()


def test_unknown_game_and_bad_options_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="unknown MinAtar game") as error:
        make_env("minatar:pong", 2)
    message = str(error.value)
    assert "\n" not in message and all(f"minatar:{name}" in message for name in GAMES) and len(GAMES) == 5
    with pytest.raises(ConfigError, match="^sticky_action_prob: "):
        make_env("minatar:breakout", 2, sticky_action_prob=1.5)
    with pytest.raises(ConfigError, match="^env_kwargs.sticky: "):
        make_env("minatar:breakout", 2, sticky=0.1)
    with pytest.raises(ConfigError, match="^max_episode_steps: "):
        make_env("minatar:breakout", 2, max_episode_steps=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", sorted(CASES))
def test_games_agree_across_devices(name):
    """The same uniforms and actions give the same frames on the GPU as on the CPU."""
    game = CASES[name][0]
    cpu, gpu = game(64, device=torch.device("cpu")), game(64, device=torch.device("cuda"))
    generator = torch.Generator().manual_seed(0)
    everyone = torch.ones(64, dtype=torch.bool)
    for copy, device in ((cpu, "cpu"), (gpu, "cuda")):
        copy.reset(
            everyone.to(device), torch.rand(64, game.reset_draws, generator=torch.Generator().manual_seed(1)).to(device)
        )
    for _ in range(200):
        action = torch.randint(6, (64,), generator=generator)
        u = torch.rand(64, game.step_draws, generator=generator)
        restart = torch.rand(64, game.reset_draws, generator=generator)
        results = [copy.step(action.to(device), u.to(device)) for copy, device in ((cpu, "cpu"), (gpu, "cuda"))]
        assert all(torch.equal(a, b.cpu()) for a, b in zip(results[0], results[1], strict=True))
        assert torch.equal(cpu.observe(), gpu.observe().cpu())
        cpu.reset(results[0][1], restart)
        gpu.reset(results[0][1].cuda(), restart.cuda())


def test_throughput_bench_reports_every_implementation():
    from pglab.bench.minatar_throughput import MinAtarBenchConfig, run_bench

    config = MinAtarBenchConfig(games=("breakout",), sizes=(1, 3), seconds=0.01, package_envs=2, package_steps=8)
    rows = run_bench(config, lambda row: None)
    rates = {(row["impl"], row["num_envs"]): row for row in rows if "env_steps_per_s" in row}
    assert set(rates) == {("pglab", 1), ("pglab", 3), ("minatar", 1), ("minatar", 3)}
    assert rates[("minatar", 3)]["scaled"] and not rates[("minatar", 1)]["scaled"]
    assert all(row["env_steps_per_s"] > 0 and len(row["load_before"]) == 3 for row in rates.values())
    gymnax = [row for row in rows if row.get("impl") == "gymnax"]
    absent = len(gymnax) == 1 and gymnax[0]["status"].startswith("absent")
    assert absent or [row["num_envs"] for row in gymnax] == [1, 3]
    with pytest.raises(ConfigError, match="^games: "):
        MinAtarBenchConfig(games=("pong",))
    with pytest.raises(ConfigError, match="^gymnax_path: an existing folder"):
        MinAtarBenchConfig(gymnax_path="/nonexistent/gymnax")


def test_throughput_bench_json_summarises_the_rates_by_game_and_size(capsys):
    from pglab.bench.minatar_throughput import main

    flags = ["--games", "freeway", "--sizes", "2", "--seconds", "0.01", "--package_envs", "2", "--package_steps", "4"]
    flags += ["--threads", "0"]  # neither the thread count nor the core of the test process changes
    assert main([*flags, "--implementations", "pglab", "minatar", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    rates = {(row["impl"], row["num_envs"]): row for row in document["rows"]}
    cells = document["summary"]["freeway@2"]
    assert set(cells) == {"pglab", "minatar"}
    assert cells["minatar"]["per_s"] == rates[("minatar", 2)]["env_steps_per_s"]
    assert cells["pglab"]["per_cpu_s"] == rates[("pglab", 2)]["env_steps_per_cpu_s"]

"""Batched Seaquest and Space Invaders against the ``minatar`` package, step for step."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
import torch
from minatar_harness import run_equivalence

from pglab.envs.minatar.base import MinAtarEnv
from pglab.envs.minatar.seaquest import Seaquest
from pglab.envs.minatar.space_invaders import SpaceInvaders
from pglab.errors import CheckpointError

# Seaquest draws in two package functions; each reads its own fixed columns.
SEAQUEST_SITES = {"_spawn_enemy": 0, "_spawn_diver": 3}


def _put_slots(state: dict[str, torch.Tensor], copy: int, group: str, rows: list[dict[str, Any]]) -> None:
    """Entities ``rows`` (in list order) into the slots of ``group`` of one copy."""
    state[f"{group}_alive"][copy] = False
    for slot, row in enumerate(rows):
        state[f"{group}_alive"][copy, slot] = True
        for key, value in row.items():
            if key == "right":  # the batched game keeps headings as -1 (left) / +1 (right)
                key, value = "dx", 1 if value else -1
            state[f"{group}_{key}"][copy, slot] = value


def _ramped(level: int) -> tuple[int, int, int]:
    """Spawn speed, move speed and ramp index after ``level`` surfacings (the package's rule)."""
    spawn, move, index = 20, 5, 0
    for _ in range(level):
        if spawn > 1 or move > 2:
            move -= move > 2 and index % 2
            spawn -= spawn > 1
            index += 1
    return spawn, move, index


def _stack(game: Any, rng: np.random.RandomState, y: int, right: bool, moving: bool) -> list[dict[str, Any]]:
    """One to three enemies in one cell of row ``y``, about to move when ``moving``: fish and
    submarines, mostly submarines when moving (moved fish differ in nothing, submarines in
    their shot timers)."""
    x = rng.randint(1, 9)
    stack = []
    for _ in range(rng.randint(1, 4)):
        timer = 0 if moving else rng.randint(game.move_speed + 1)
        stack.append({"x": x, "y": y, "right": right, "timer": timer})
        stack[-1].update(shot_timer=rng.choice([0, 1, rng.randint(11)]), is_sub=bool(rng.rand() < 0.5 + 0.3 * moving))
    return stack


def _closing_in(x: int, y: int, rng: np.random.RandomState, keep: float) -> list[dict[str, Any]]:
    """Friendly bullets from both sides (each kept with probability ``keep``) that reach cell
    (``x``, ``y``) in their next move, in random list order."""
    pair = [{"x": x - 1, "y": y, "right": True}, {"x": x + 1, "y": y, "right": False}]
    bullets = [bullet for bullet in pair if 0 <= bullet["x"] < 10 and rng.rand() < keep]
    return [bullets[i] for i in rng.permutation(len(bullets))]


def _seaquest_entities(game: Any, rng: np.random.RandomState) -> dict[str, list[dict[str, Any]]]:
    """Random bullets, divers and enemies for one package game, set on it too.

    Scenes where the package's list order decides the outcome are common: bullets closing in
    on a cell of stacked enemies from both sides, stacked enemies moving onto bullets, two
    divers reaching the player in one step with one seat left."""
    heading = rng.rand(9) < 0.5  # one direction per row, as the spawn rule keeps it
    enemies = []
    for _ in range(rng.choice([0, 4, 12])):
        y = int(rng.choice([game.sub_y, rng.randint(1, 9)])) or 1  # many in the player's row
        enemy = {"x": rng.randint(10), "y": y, "right": bool(heading[y]), "timer": rng.randint(game.move_speed + 1)}
        enemies.append({**enemy, "shot_timer": rng.randint(11), "is_sub": bool(rng.rand() < 0.4)})
    scene = rng.randint(4)
    cells = rng.permutation(90)[: rng.randint(3)]  # distinct friendly bullets
    bullets = [{"x": c % 10, "y": c // 10, "right": bool(rng.rand() < 0.5)} for c in cells]
    if scene in (1, 2):  # bullets meet the stack where it is, or where it moves to
        y = rng.randint(1, 9)
        stack = _stack(game, rng, y, bool(heading[y]), moving=scene == 2)
        bullets = _closing_in(stack[0]["x"] + (1 if heading[y] else -1) * (scene == 2), y, rng, keep=0.8)
        enemies += stack
    divers = [{"x": rng.randint(10), "y": rng.randint(1, 9), "right": bool(rng.rand() < 0.5), "timer": rng.randint(6)}]
    if scene == 3 and game.sub_y > 0:  # one diver moves onto the player, one is there already
        right = game.sub_x == 9 or (game.sub_x > 0 and bool(rng.rand() < 0.5))
        divers = [{"x": game.sub_x - (1 if right else -1), "y": game.sub_y, "right": right, "timer": 0}]
        divers.append({"x": game.sub_x, "y": game.sub_y, "right": bool(rng.rand() < 0.5), "timer": rng.randint(6)})
        game.diver_count = int(rng.choice([4, 5, 5]))
    game.f_bullets = [[b["x"], b["y"], b["right"]] for b in bullets]
    game.divers = [[d["x"], d["y"], d["right"], d["timer"]] for d in divers]
    game.e_fish = [[e["x"], e["y"], e["right"], e["timer"]] for e in enemies if not e["is_sub"]]
    game.e_subs = [[e["x"], e["y"], e["right"], e["timer"], e["shot_timer"]] for e in enemies if e["is_sub"]]
    return {"bullet": bullets, "diver": divers, "enemy": enemies}


def _enemy_bullets(game: Any, rng: np.random.RandomState) -> list[list[Any]]:
    """A few enemy bullets; often one beside the player heading away (the player may step into it)."""
    bullets = [[rng.randint(10), rng.randint(1, 9), bool(rng.rand() < 0.5)] for _ in range(rng.randint(3))]
    beside = game.sub_x + int(rng.choice([-1, 1]))
    if game.sub_y > 0 and 0 <= beside < 10 and rng.rand() < 0.5:
        bullets.append([beside, game.sub_y, beside > game.sub_x])
    return bullets


def _write_seaquest(
    state: dict[str, torch.Tensor], i: int, game: Any, entities: dict[str, list[dict[str, Any]]]
) -> None:
    """Copy ``i`` of the batched ``state`` := the package ``game`` (its slotted ``entities`` given)."""
    for group, rows in entities.items():
        _put_slots(state, i, group, rows)
    for key, right in (("enemy_bullet_left", False), ("enemy_bullet_right", True)):
        state[key][i] = False
        for x, y, heading in game.e_bullets:
            state[key][i, y, x] |= heading == right
    fields = {
        "oxygen": "oxygen",
        "diver_count": "diver_count",
        "sub_x": "sub_x",
        "sub_y": "sub_y",
        "enemy_spawn_speed": "e_spawn_speed",
        "enemy_spawn_timer": "e_spawn_timer",
        "diver_spawn_timer": "d_spawn_timer",
        "move_speed": "move_speed",
        "ramp_index": "ramp_index",
        "shot_timer": "shot_timer",
        "surface": "surface",
    }
    for key, attribute in fields.items():
        state[key][i] = getattr(game, attribute)
    state["sub_dx"][i] = 1 if game.sub_or else -1


def seaquest_start(packages: list[Any], env: MinAtarEnv, rng: np.random.RandomState) -> None:
    """Random mid-game states, any difficulty level; the same in the package and the batched game."""
    state = env.game.state_dict()
    for i, package in enumerate(packages):
        game = package.env
        game.e_spawn_speed, game.move_speed, game.ramp_index = _ramped(rng.randint(25))
        game.sub_x, game.sub_y = rng.randint(10), int(rng.choice([0, 1, rng.randint(9)]))
        game.sub_or = game.sub_x == 9 or (game.sub_x > 0 and bool(rng.rand() < 0.5))  # the back cell is on the board
        game.oxygen = int(rng.choice([rng.randint(201), rng.randint(4)]))
        game.diver_count = int(rng.choice([6, rng.randint(-1, 7)]))
        game.surface = game.sub_y == 0 and bool(rng.rand() < 0.5)
        game.e_spawn_timer, game.d_spawn_timer = rng.randint(game.e_spawn_speed + 1), rng.randint(31)
        entities = _seaquest_entities(game, rng)
        game.shot_timer = rng.randint(len(entities["bullet"]) == 2, 6)  # two bullets in flight: no shot yet
        game.e_bullets = _enemy_bullets(game, rng)
        _write_seaquest(state, i, game, entities)
    env.game.load_state_dict(state)


def seaquest_scenes_start(packages: list[Any], env: MinAtarEnv, rng: np.random.RandomState) -> None:
    """A quiet board (nothing spawns for 20 steps, the player far below) with one scene that the
    package's list order decides: bullets from both sides meet 1-3 stacked enemies where they
    are (copies 0, 3, ...) or where they move to (1, 4, ...); two divers reach the player in
    one step with one or two seats left (2, 5, ...)."""
    state = env.game.state_dict()
    for i, package in enumerate(packages):
        game = package.env
        game.e_spawn_timer, game.d_spawn_timer = 20, 30
        game.sub_x, game.sub_y, game.sub_or = rng.randint(1, 9), 8, False
        bullets, divers, enemies = [], [], []
        if i % 3 < 2:
            y, right = rng.randint(1, 5), bool(rng.rand() < 0.5)
            enemies = _stack(game, rng, y, right, moving=i % 3 == 1)
            bullets = _closing_in(enemies[0]["x"] + (1 if right else -1) * (i % 3), y, rng, keep=1.0 - 0.4 * (i % 3))
        else:
            game.sub_y, right = rng.randint(1, 8), bool(rng.rand() < 0.5)
            divers = [{"x": game.sub_x - (1 if right else -1), "y": game.sub_y, "right": right, "timer": 0}]
            divers.append({"x": game.sub_x, "y": game.sub_y, "right": not right, "timer": rng.randint(6)})
            game.diver_count = int(rng.choice([4, 5]))
        game.f_bullets = [[b["x"], b["y"], b["right"]] for b in bullets]
        game.divers = [[d["x"], d["y"], d["right"], d["timer"]] for d in divers]
        game.e_fish = [[e["x"], e["y"], e["right"], e["timer"]] for e in enemies if not e["is_sub"]]
        game.e_subs = [[e["x"], e["y"], e["right"], e["timer"], e["shot_timer"]] for e in enemies if e["is_sub"]]
        _write_seaquest(state, i, game, {"bullet": bullets, "diver": divers, "enemy": enemies})
    env.game.load_state_dict(state)


def _count_surfacings(packages: list[Any], events: dict[str, int]) -> None:
    """Count, in ``events``, the package games' surfacings, full loads and difficulty ramps."""
    for package in packages:
        game, surface = package.env, package.env._surface

        def counted(game: Any = game, surface: Any = surface) -> int:
            before = game.ramp_index
            reward = surface()
            events["surfacings"] += 1
            events["full"] += reward > 0
            events["ramps"] += game.ramp_index > before
            return reward

        game._surface = counted


def test_seaquest_matches_the_package_from_reset():
    """Whole random episodes (full action set, sticky 0.1, ramping) at two batch sizes."""
    runs = [
        run_equivalence(Seaquest, "seaquest", num_envs=n, steps=steps, seed=n, draw_sites=SEAQUEST_SITES)
        for n, steps in ((1, 150), (4, 100))
    ]
    assert sum(run["episodes"] for run in runs) > 5 and sum(run["reward"] for run in runs) > 0, runs


def test_seaquest_matches_the_package_from_mid_game_states():
    """Random mid-game states reach crowded boards, pickups, surfacing with full loads and
    negative diver counts, ramping, empty oxygen and enemy bullets."""
    events = {"surfacings": 0, "full": 0, "ramps": 0}

    def start(packages: list[Any], env: MinAtarEnv, rng: np.random.RandomState) -> None:
        seaquest_start(packages, env, rng)
        _count_surfacings(packages, events)

    covered = run_equivalence(
        Seaquest, "seaquest", num_envs=40, steps=60, seed=7, draw_sites=SEAQUEST_SITES, start=start
    )
    print(covered, events)
    assert covered["episodes"] > 20 and covered["reward"] > 20, covered
    assert events["full"] > 0 and events["ramps"] > 0, events


def test_seaquest_list_order_scenes_match_the_package():
    run_equivalence(
        Seaquest, "seaquest", num_envs=36, steps=16, seed=3, draw_sites=SEAQUEST_SITES, start=seaquest_scenes_start
    )


def space_invaders_start(packages: list[Any], env: MinAtarEnv, rng: np.random.RandomState) -> None:
    """Random alien blocks down to the bottom row, bullets, headings and timers; in sparse
    blocks a bullet under most aliens, so that waves clear (at every move interval)."""
    state = env.game.state_dict()
    for i, package in enumerate(packages):
        game = package.env
        rows, sparse = int(rng.choice([4, 8, 10])), bool(rng.rand() < 0.6)
        game.alien_map = (rng.rand(10, 10) < (0.03 if sparse else 0.4)) * (np.arange(10) < rows)[:, None]
        game.alien_map[rng.randint(rows), rng.randint(10)] = 1  # at least one alien
        game.alien_map = game.alien_map.astype(float)
        game.f_bullet_map = (rng.rand(10, 10) < 0.03).astype(float)
        if sparse:
            game.f_bullet_map[1:] += game.alien_map[:-1] * (rng.rand(9, 10) < 0.8)
            game.f_bullet_map = np.minimum(game.f_bullet_map, 1)
        game.e_bullet_map = (rng.rand(10, 10) < 0.03).astype(float)
        game.pos, game.alien_dir = rng.randint(10), rng.choice([-1, 1])
        game.enemy_move_interval = int(rng.choice([6, 7, rng.randint(6, 13)]))  # 6: the fastest, no ramp
        game.alien_move_timer = rng.randint(game.enemy_move_interval + 1)
        game.alien_shot_timer, game.shot_timer = rng.randint(11), rng.randint(6)
        maps = {"alien_map": game.alien_map, "friendly_bullets": game.f_bullet_map, "enemy_bullets": game.e_bullet_map}
        for key, value in maps.items():
            state[key][i] = torch.from_numpy(value == 1)
        scalars = {
            "pos": game.pos,
            "alien_dir": game.alien_dir,
            "move_interval": game.enemy_move_interval,
            "alien_move_timer": game.alien_move_timer,
            "alien_shot_timer": game.alien_shot_timer,
            "shot_timer": game.shot_timer,
        }
        for key, value in scalars.items():
            state[key][i] = int(value)
    env.game.load_state_dict(state)


def test_space_invaders_matches_the_package_from_reset():
    runs = [run_equivalence(SpaceInvaders, "space_invaders", num_envs=n, steps=100, seed=n) for n in (1, 4)]
    assert sum(run["episodes"] for run in runs) > 2 and sum(run["reward"] for run in runs) > 10, runs


def test_space_invaders_matches_the_package_from_mid_game_states():
    """Sparse and dense blocks at every speed: cleared waves (ramping from index 0), the last
    alien racing, blocks landing, bullets meeting the cannon."""
    covered = run_equivalence(
        SpaceInvaders, "space_invaders", num_envs=40, steps=60, seed=7, start=space_invaders_start
    )
    assert covered["episodes"] > 20 and covered["reward"] > 20 and covered["max_ramp"] >= 1, covered


def _play(env: MinAtarEnv, steps: int, seed: int) -> list[torch.Tensor]:
    actions = torch.Generator().manual_seed(seed)
    outputs = []
    for _ in range(steps):
        obs, reward, done, trunc, info = env.step(torch.randint(6, (env.num_envs,), generator=actions))
        outputs += [obs, reward, done, info["final_obs"]]
    return outputs


@pytest.mark.parametrize("game", [Seaquest, SpaceInvaders])
def test_state_dict_round_trip_continues_bit_for_bit(game):
    env = MinAtarEnv(game, 6, seed=1, full_action_set=True)
    env.reset()
    _play(env, 30, seed=2)
    buffer = io.BytesIO()
    torch.save(env.state_dict(), buffer)
    expected = _play(env, 40, seed=3)
    other = MinAtarEnv(game, 6, seed=99, full_action_set=True)
    other.reset()
    buffer.seek(0)
    other.load_state_dict(torch.load(buffer, weights_only=True))
    assert all(torch.equal(a, b) for a, b in zip(_play(other, 40, seed=3), expected, strict=True))


@pytest.mark.parametrize(("game", "field"), [(Seaquest, "oxygen"), (SpaceInvaders, "alien_map")])
def test_load_state_dict_refuses_a_missing_field(game, field):
    state = game(2, device=torch.device("cpu")).state_dict()
    state.pop(field)
    with pytest.raises(CheckpointError, match=f"'{field}'"):
        game(2, device=torch.device("cpu")).load_state_dict(state)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("game", [Seaquest, SpaceInvaders])
def test_games_agree_across_devices(game):
    """The same uniforms and actions give the same rewards, ends and frames on the GPU as on the CPU."""
    copies = [game(64, device=torch.device(device)) for device in ("cpu", "cuda")]
    generator = torch.Generator().manual_seed(0)
    for _ in range(300):
        action = torch.randint(6, (64,), generator=generator)
        u = torch.rand(64, game.step_draws, generator=generator)
        results = [copy.step(action.to(copy.device), u.to(copy.device)) for copy in copies]
        assert all(torch.equal(a, b.cpu()) for a, b in zip(results[0], results[1], strict=True))
        assert torch.equal(copies[0].observe(), copies[1].observe().cpu())
        for copy in copies:
            copy.reset(results[0][1].to(copy.device), torch.rand(64, game.reset_draws).to(copy.device))

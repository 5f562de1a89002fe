"""PSOTSPEnv: decoding, cost formula, PSO update formula, pbest/gbest bookkeeping."""

import dataclasses

import numpy as np
import pytest
import torch

from pglab.envs.pso_tsp import (
    CLASSIC_W,
    PSOTSPEnv,
    PSOTSPEnvConfig,
    fixed_coefficients,
    knn_graph,
    random_coefficients,
    random_instances,
    tour_cost,
)
from pglab.envs.tsp_solvers import distance_matrix, nearest_neighbour_tour, tour_length
from pglab.errors import ConfigError, TensorContractError
from pglab.run.seeding import make_generator


def make_env(decode="sample", seed=0, **overrides):
    config = PSOTSPEnvConfig(**{"num_cities": 9, "knn": 4, "n_particles": 5, "pso_iterations": 6, **overrides})
    return PSOTSPEnv(config, "cpu", make_generator(seed), decode=decode)


def is_perm(tours):
    n = tours.shape[-1]
    return bool((tours.sort(dim=-1).values == torch.arange(n)).all())


@pytest.mark.parametrize("decode", ["sample", "greedy"])
@pytest.mark.parametrize("knn", [2, 4, 0])
def test_decode_always_yields_permutations_starting_at_zero(decode, knn):
    env = make_env(decode, knn=knn, init_std=5.0)
    coords = random_instances(3, 9, make_generator(1))
    state = env.reset(coords)
    for _ in range(6):
        # extreme coefficients: large, clamped velocities, positions far from zero
        state, reward, _ = env.step(3 * torch.randn(3, 5, env.config.dim, 3, generator=make_generator(2)))
        tours, cost = env.decode(state.position, state)
        assert tours.shape == (3, 5, 9) and is_perm(tours) and bool((tours[..., 0] == 0).all())
        assert torch.allclose(cost, -reward) or decode == "sample"


def test_tour_cost_matches_numpy_formula():
    coords = random_instances(2, 7, make_generator(3))
    dist, _, _ = knn_graph(coords, 6)
    tours = torch.stack(
        [torch.stack([torch.randperm(7, generator=make_generator(10 * b + p)) for p in range(3)]) for b in range(2)]
    )
    cost = tour_cost(dist, tours)
    for b in range(2):
        d = distance_matrix(coords[b].double().numpy())
        for p in range(3):
            assert cost[b, p].item() == pytest.approx(tour_length(d, tours[b, p].numpy()), rel=1e-5)


def test_greedy_decode_of_zero_scores_on_full_graph_is_nearest_neighbour():
    # With x = 0 the logits are -prior * d_ij: argmax over unvisited = the nearest city.
    env = make_env("greedy", knn=0)
    coords = random_instances(4, 9, make_generator(4))
    state = env.reset(coords)
    tours, _ = env.decode(torch.zeros_like(state.position), state)
    for b in range(4):
        expected = nearest_neighbour_tour(distance_matrix(coords[b].double().numpy()))
        for p in range(5):
            assert tours[b, p].tolist() == expected.tolist()


def test_greedy_decode_follows_knn_edges_and_nearest_fallback():
    # k = 2: only the two nearest neighbours are candidate edges; a dominant score on one
    # edge per city must be followed whenever its target is unvisited.
    env = make_env("greedy", knn=2, distance_prior=0.0)
    coords = random_instances(1, 9, make_generator(5))
    state = env.reset(coords)
    position = torch.zeros_like(state.position)
    position[..., 1::2] = 10.0  # prefer each city's second-nearest neighbour
    tours, _ = env.decode(position, state)
    neighbours = state.neighbours[0]
    tour = tours[0, 0].tolist()
    visited = {0}
    for a, b in zip(tour[:-1], tour[1:], strict=False):
        options = [int(c) for c in neighbours[a] if int(c) not in visited]
        if int(neighbours[a, 1]) not in visited:
            assert b == int(neighbours[a, 1])
        elif options:
            assert b == options[0]
        visited.add(b)


def test_sampled_decode_frequencies_match_softmax_of_logits():
    # First move from city 0: P(j) = softmax over neighbours of x_0j - prior * d_0j / mean.
    env = make_env("sample", knn=0, n_particles=1, num_cities=5, distance_prior=1.0)
    coords = random_instances(1, 5, make_generator(6))
    state = env.reset(coords)
    position = torch.randn(1, 1, env.config.dim, generator=make_generator(7))
    logits = env.edge_logits(position, state)[0, 0, 0, 1:]
    expected = torch.softmax(logits, 0)
    draws = 20000
    many = dataclasses.replace(
        state, dist=state.dist.expand(draws, 5, 5), neighbours=state.neighbours.expand(draws, 5, 4)
    )
    tours, _ = env.decode(position.expand(draws, 1, env.config.dim), many)
    freq = torch.bincount(tours[:, 0, 1], minlength=5)[1:].float() / draws
    assert torch.allclose(freq, expected, atol=0.015)


def test_pso_update_matches_formula_and_pbest_gbest_are_monotone():
    env = make_env("sample", v_max=100.0)
    coords = random_instances(3, 9, make_generator(8))
    state = env.reset(coords)
    gbest_history, best_history = [state.gbest_cost.clone()], [state.best_cost.clone()]
    for step in range(6):
        before = state.snapshot()
        generator_state = env.generator.get_state()
        wc1c2 = random_coefficients((3, 5, env.config.dim), make_generator(100 + step))
        state, reward, done = env.step(wc1c2)
        # replay the two uniform draws of the step from the same generator state
        replay = torch.Generator().manual_seed(0)
        replay.set_state(generator_state)
        r1 = torch.rand(before.position.shape, generator=replay)
        r2 = torch.rand(before.position.shape, generator=replay)
        w, c1, c2 = wc1c2.unbind(-1)
        v = (
            w * before.velocity
            + c1 * r1 * (before.pbest - before.position)
            + c2 * r2 * (before.gbest[:, None] - before.position)
        )
        assert torch.allclose(state.velocity, v, atol=1e-6)
        assert torch.allclose(state.position, before.position + v, atol=1e-6)
        # pbest: the better of the old pbest and the new position
        improved = state.cost < before.pbest_cost
        assert torch.equal(state.pbest_cost, torch.minimum(before.pbest_cost, state.cost))
        assert torch.equal(state.pbest[improved], state.position[improved])
        assert torch.equal(state.pbest[~improved], before.pbest[~improved])
        # gbest is the best pbest; best tour is the shortest decoded tour so far
        assert torch.equal(state.gbest_cost, state.pbest_cost.min(1).values)
        assert torch.equal(reward, -state.cost)
        assert done == (step == 5)
        gbest_history.append(state.gbest_cost.clone())
        best_history.append(state.best_cost.clone())
    assert all(bool((b <= a).all()) for a, b in zip(gbest_history, gbest_history[1:], strict=False))
    assert all(bool((b <= a).all()) for a, b in zip(best_history, best_history[1:], strict=False))
    # best_tour's length is best_cost
    for b in range(3):
        d = distance_matrix(coords[b].double().numpy())
        assert tour_length(d, state.best_tour[b].numpy()) == pytest.approx(state.best_cost[b].item(), rel=1e-5)


def test_coefficients_are_clamped_and_velocity_limited():
    env = make_env("greedy", v_max=0.5, w_min=0.0, w_max=1.0, c_max=2.0)
    state = env.reset(random_instances(2, 9, make_generator(9)))
    state, _, _ = env.step(fixed_coefficients((2, 5, env.config.dim), 50.0, 50.0, 50.0))
    assert float(state.velocity.abs().max()) <= 0.5 + 1e-6
    assert float(fixed_coefficients((1,))[0, 0]) == pytest.approx(CLASSIC_W)


def test_seeded_episodes_are_identical():
    coords = random_instances(2, 9, make_generator(10))
    runs = []
    for _ in range(2):
        env = make_env("sample", seed=3)
        state = env.reset(coords)
        for _ in range(3):
            state, _, _ = env.step(fixed_coefficients((2, 5, env.config.dim)))
        runs.append(state)
    assert torch.equal(runs[0].position, runs[1].position) and torch.equal(runs[0].best_tour, runs[1].best_tour)


def test_paired_env_gives_both_halves_the_same_random_numbers():
    from pglab.nets.tsp_pso import sample_coefficients

    config = PSOTSPEnvConfig(num_cities=9, knn=4, n_particles=5, pso_iterations=6)
    coords = random_instances(2, 9, make_generator(10))
    env = PSOTSPEnv(config, "cpu", make_generator(3), decode="sample", paired=True)
    state = env.reset(torch.cat([coords, coords]))
    assert torch.equal(state.position[:2], state.position[2:]) and torch.equal(state.cost[:2], state.cost[2:])
    for step in range(4):
        # identical coefficients -> identical swarms (sampled decode included)
        state, _, _ = env.step(random_coefficients((2, 5, config.dim), make_generator(50 + step)).repeat(2, 1, 1, 1))
        assert torch.equal(state.position[:2], state.position[2:]) and torch.equal(
            state.best_tour[:2], state.best_tour[2:]
        )
    # different coefficients in the second half -> the swarms part ways
    state, _, _ = env.step(
        torch.cat([fixed_coefficients((2, 5, config.dim)), fixed_coefficients((2, 5, config.dim), w=-0.5)])
    )
    assert not torch.equal(state.position[:2], state.position[2:])
    with pytest.raises(ValueError, match="even"):
        PSOTSPEnv(config, "cpu", make_generator(3), paired=True).reset(random_instances(3, 9, make_generator(1)))
    # mirrored exploration noise: the second half's deviations are the first half's negated
    mu = torch.randn(2, 5, config.dim, 3).repeat(2, 1, 1, 1)
    sigma = torch.full_like(mu, 0.3)
    for scope in ("particle", "swarm"):
        actions = sample_coefficients(mu, sigma, 0.3, make_generator(4), scope, antithetic=True)
        torch.testing.assert_close(actions[2:] - mu[2:], -(actions[:2] - mu[:2]))
        assert not torch.allclose(actions[:2], mu[:2])


def test_bad_config_and_bad_actions():
    with pytest.raises(ConfigError, match=r"n_particles: .*\(got 0\)"):
        PSOTSPEnvConfig(n_particles=0)
    with pytest.raises(ConfigError, match="w_min"):
        PSOTSPEnvConfig(w_min=2.0, w_max=1.0)
    env = make_env()
    env.reset(random_instances(2, 9, make_generator(0)))
    with pytest.raises(TensorContractError, match="wc1c2"):
        env.step(torch.zeros(2, 5, env.config.dim))
    with pytest.raises(TensorContractError, match="coords"):
        env.reset(torch.zeros(2, 8, 2))


def test_dimension_of_knn_and_full_graph():
    assert PSOTSPEnvConfig(num_cities=20, knn=10).dim == 200
    assert PSOTSPEnvConfig(num_cities=20, knn=0).dim == 20 * 19
    assert PSOTSPEnvConfig(num_cities=6, knn=10).k == 5
    assert np.isfinite(PSOTSPEnvConfig().distance_prior)

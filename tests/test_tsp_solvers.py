"""Reference TSP solvers against exhaustive enumeration."""

import numpy as np
import pytest

from pglab.envs.tsp_solvers import (
    brute_force,
    distance_matrix,
    elkai_available,
    held_karp,
    is_permutation,
    lkh_tour,
    nearest_neighbour_tour,
    reference_tour,
    tour_length,
    two_opt,
)


@pytest.mark.parametrize("n", [4, 5, 6, 7, 8])
def test_held_karp_matches_brute_force(n):
    rng = np.random.default_rng(n)
    for _ in range(3 if n < 8 else 1):
        dist = distance_matrix(rng.random((n, 2)))
        tour, length = held_karp(dist)
        _, best = brute_force(dist)
        assert is_permutation(tour, n) and tour[0] == 0
        assert length == pytest.approx(best, abs=1e-12)
        assert tour_length(dist, tour) == pytest.approx(length, abs=1e-12)


def test_held_karp_on_asymmetric_matrix_matches_brute_force():
    # The DP never assumes symmetry; a directed instance checks the orientation of d[k, j].
    rng = np.random.default_rng(3)
    dist = rng.random((7, 7))
    np.fill_diagonal(dist, 0.0)
    _, length = held_karp(dist)
    _, best = brute_force(dist)
    assert length == pytest.approx(best, abs=1e-12)


def test_held_karp_known_optimum_on_a_circle():
    # Points on a circle: the optimal tour visits them in angular order, length = perimeter of the polygon.
    n = 11
    angles = np.random.default_rng(0).permutation(n) * 2 * np.pi / n
    coords = np.stack([np.cos(angles), np.sin(angles)], 1)
    _, length = held_karp(distance_matrix(coords))
    assert length == pytest.approx(n * 2 * np.sin(np.pi / n), abs=1e-9)


def test_tour_length_formula():
    coords = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    dist = distance_matrix(coords)
    assert tour_length(dist, [0, 1, 2, 3]) == pytest.approx(4.0)
    assert tour_length(dist, [0, 2, 1, 3]) == pytest.approx(2 + 2 * np.sqrt(2))


def test_nearest_neighbour_and_two_opt():
    rng = np.random.default_rng(1)
    n = 30
    dist = distance_matrix(rng.random((n, 2)))
    nn = nearest_neighbour_tour(dist)
    assert is_permutation(nn, n)
    # each step of NN goes to the closest unvisited city
    visited = {0}
    for a, b in zip(nn[:-1], nn[1:], strict=False):
        unvisited = [c for c in range(n) if c not in visited]
        assert dist[a, b] == pytest.approx(min(dist[a, c] for c in unvisited))
        visited.add(int(b))
    improved = two_opt(dist, nn)
    assert is_permutation(improved, n)
    assert tour_length(dist, improved) <= tour_length(dist, nn) + 1e-12
    # 2-opt local optimum: no single reversal shortens it further
    t = improved
    for i in range(n - 2):
        for j in range(i + 2, n if i > 0 else n - 1):
            a, b, c, d = t[i], t[i + 1], t[j], t[(j + 1) % n]
            assert dist[a, c] + dist[b, d] - dist[a, b] - dist[c, d] >= -1e-9


def test_two_opt_reaches_optimum_on_small_instance_brute_force_check():
    rng = np.random.default_rng(7)
    dist = distance_matrix(rng.random((7, 2)))
    _, best = brute_force(dist)
    assert tour_length(dist, two_opt(dist, nearest_neighbour_tour(dist))) >= best - 1e-12


def test_reference_prefers_exact_held_karp_for_small_n():
    dist = distance_matrix(np.random.default_rng(2).random((7, 2)))
    ref = reference_tour(dist, held_karp_max_n=12)
    assert ref.method == "held_karp"
    assert ref.length == pytest.approx(brute_force(dist)[1])


@pytest.mark.co
@pytest.mark.skipif(not elkai_available(), reason="elkai (pglab[co]) not installed")
def test_lkh_matches_held_karp_on_tsp12():
    rng = np.random.default_rng(5)
    for _ in range(3):
        dist = distance_matrix(rng.random((12, 2)))
        tour, length = lkh_tour(dist)
        assert is_permutation(tour, 12)
        assert length == pytest.approx(held_karp(dist)[1], rel=1e-6)

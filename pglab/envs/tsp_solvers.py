"""Reference TSP solvers: exact Held–Karp, brute force, LKH-3 (elkai), nearest neighbour + 2-opt.

All solvers take one instance as a symmetric distance matrix ``dist`` (float ``[n, n]``,
NumPy, zero diagonal) and return a tour as a permutation of ``0..n-1`` starting at city 0
(the closing edge back to the start is implied). Tour length::

    L(tour) = sum_{t=0}^{n-1} dist[tour[t], tour[(t + 1) mod n]]

* :func:`held_karp` — exact dynamic programme, ``O(n^2 2^n)`` time and ``O(n 2^n)``
  memory; vectorised over subsets of equal size so n = 20 takes about a second.
* :func:`brute_force` — enumerates all ``(n-1)!/2`` tours; for testing (n <= 9).
* :func:`lkh_tour` — LKH-3 through the ``elkai`` package (the ``pglab[co]`` extra);
  optimal for TSP20/50 in practice, but not certified.
* :func:`nearest_neighbour_tour` + :func:`two_opt` — the classic construction heuristic
  and its local search (best-improvement 2-opt, vectorised over all moves).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from pglab.errors import ConfigError
from pglab.extras import missing_extra, require

HELD_KARP_MAX_N = 22  # 2^21 * 21 float64 = 350 MB; beyond this use LKH


def distance_matrix(coords: np.ndarray) -> np.ndarray:
    """Euclidean distances ``[n, n]`` of coordinates ``[n, 2]``."""
    coords = np.asarray(coords, dtype=np.float64)
    if coords.ndim != 2 or coords.shape[1] != 2:
        raise ValueError(f"distance_matrix: coords expected [n, 2], got {coords.shape}")
    diff = coords[:, None, :] - coords[None, :, :]
    return np.sqrt((diff**2).sum(-1))


def tour_length(dist: np.ndarray, tour) -> float:
    """``sum_t dist[tour[t], tour[t+1 mod n]]`` of a closed tour."""
    tour = np.asarray(tour, dtype=np.int64)
    return float(dist[tour, np.roll(tour, -1)].sum())


def is_permutation(tour, n: int) -> bool:
    tour = np.asarray(tour)
    return tour.shape == (n,) and np.array_equal(np.sort(tour), np.arange(n))


def _check_dist(dist: np.ndarray, where: str) -> np.ndarray:
    dist = np.asarray(dist, dtype=np.float64)
    if dist.ndim != 2 or dist.shape[0] != dist.shape[1] or dist.shape[0] < 2:
        raise ValueError(f"{where}: dist expected a square [n, n] matrix with n >= 2, got {dist.shape}")
    return dist


def _rotate_to_zero(tour) -> np.ndarray:
    tour = np.asarray(tour, dtype=np.int64)
    start = int(np.flatnonzero(tour == 0)[0])
    return np.roll(tour, -start)


def brute_force(dist: np.ndarray) -> tuple[np.ndarray, float]:
    """Exact optimum by enumerating every tour that starts at city 0 (tests only)."""
    dist = _check_dist(dist, "brute_force")
    n = dist.shape[0]
    if n > 10:
        raise ValueError(f"brute_force: n={n} is too large to enumerate (max 10)")
    best_tour, best_length = None, np.inf
    for rest in itertools.permutations(range(1, n)):
        tour = (0, *rest)
        length = tour_length(dist, tour)
        if length < best_length - 1e-12:
            best_tour, best_length = tour, length
    return np.asarray(best_tour, dtype=np.int64), float(best_length)


def held_karp(dist: np.ndarray) -> tuple[np.ndarray, float]:
    """Exact optimum by the Held–Karp dynamic programme.

    Cities ``1..n-1`` are indexed by bit ``j-1`` of a subset mask. With
    ``C(S, j)`` = length of the shortest path that starts at 0, visits exactly the set
    ``S`` and ends at ``j in S``::

        C({j}, j) = dist[0, j]
        C(S, j)   = min_{k in S \\ {j}} C(S \\ {j}, k) + dist[k, j]
        L*        = min_j C(all, j) + dist[j, 0]

    Subsets are processed in order of size; within one size every (S, j) pair is
    computed in one NumPy expression.
    """
    dist = _check_dist(dist, "held_karp")
    n = dist.shape[0]
    if n > HELD_KARP_MAX_N:
        raise ValueError(f"held_karp: n={n} needs too much memory (max {HELD_KARP_MAX_N}); use lkh_tour")
    if n <= 3:
        tour = np.arange(n)
        return tour, tour_length(dist, tour)
    m = n - 1  # cities 1..n-1 -> bits 0..m-1
    full = (1 << m) - 1
    cost = np.full((1 << m, m), np.inf)
    parent = np.full((1 << m, m), -1, dtype=np.int8 if m < 127 else np.int16)
    d = dist[1:, 1:]  # d[k, j] between cities k+1 and j+1
    for j in range(m):
        cost[1 << j, j] = dist[0, j + 1]
    masks = np.arange(1 << m, dtype=np.int64)
    popcount = np.zeros(1 << m, dtype=np.int64)
    for bit in range(m):
        popcount += (masks >> bit) & 1
    for size in range(2, m + 1):
        layer = masks[popcount == size]
        for j in range(m):
            with_j = layer[(layer >> j) & 1 == 1]
            previous = with_j ^ (1 << j)
            # candidates[s, k] = C(S \ {j}, k) + d[k, j]; k not in S\{j} holds inf.
            candidates = cost[previous] + d[:, j][None, :]
            best_k = candidates.argmin(axis=1)
            cost[with_j, j] = candidates[np.arange(len(with_j)), best_k]
            parent[with_j, j] = best_k
    closing = cost[full] + dist[1:, 0]
    last = int(closing.argmin())
    length = float(closing[last])
    # Walk the parents back from (all, last).
    tour_rev = []
    mask, j = full, last
    while j >= 0:
        tour_rev.append(j + 1)
        k = int(parent[mask, j])
        mask ^= 1 << j
        j = k if mask else -1
    tour = np.asarray([0, *reversed(tour_rev)], dtype=np.int64)
    return tour, length


def elkai_available() -> bool:
    try:
        import elkai  # noqa: F401
    except ImportError:
        return False
    return True


def lkh_tour(dist: np.ndarray, *, runs: int = 10, scale: float = 1e6) -> tuple[np.ndarray, float]:
    """LKH-3 tour via ``elkai`` (``pip install pglab[co]``); distances are scaled to
    integers by ``scale`` because LKH works on integer costs."""
    dist = _check_dist(dist, "lkh_tour")
    elkai = require("elkai", needed_by=f"lkh_tour (held_karp needs no extra, n <= {HELD_KARP_MAX_N})")
    n = dist.shape[0]
    if n <= 3:
        tour = np.arange(n)
        return tour, tour_length(dist, tour)
    matrix = np.rint(dist * scale).astype(np.int64).tolist()
    raw = elkai.DistanceMatrix(matrix).solve_tsp(runs=runs)
    tour = np.asarray(raw[:-1] if len(raw) == n + 1 else raw, dtype=np.int64)
    tour = _rotate_to_zero(tour)
    if not is_permutation(tour, n):
        raise RuntimeError(f"lkh_tour: elkai returned a non-permutation {raw}")
    return tour, tour_length(dist, tour)


def nearest_neighbour_tour(dist: np.ndarray, start: int = 0) -> np.ndarray:
    """Greedy construction: always move to the closest unvisited city."""
    dist = _check_dist(dist, "nearest_neighbour_tour")
    n = dist.shape[0]
    visited = np.zeros(n, dtype=bool)
    tour = [start]
    visited[start] = True
    for _ in range(n - 1):
        row = np.where(visited, np.inf, dist[tour[-1]])
        nxt = int(row.argmin())
        tour.append(nxt)
        visited[nxt] = True
    return _rotate_to_zero(tour)


def two_opt(dist: np.ndarray, tour, *, max_iterations: int = 10_000, tol: float = 1e-10) -> np.ndarray:
    """Best-improvement 2-opt until no move shortens the tour.

    Move (i, j), 0 <= i < j-1: replace edges (a, b) = (t_i, t_{i+1}) and
    (c, d) = (t_j, t_{j+1 mod n}) by (a, c) and (b, d), i.e. reverse ``t[i+1..j]``::

        delta(i, j) = dist[a, c] + dist[b, d] - dist[a, b] - dist[c, d]

    All O(n^2) deltas are computed at once; the most negative is applied.
    """
    dist = _check_dist(dist, "two_opt")
    tour = np.asarray(tour, dtype=np.int64).copy()
    n = len(tour)
    if n < 4:
        return tour
    i_idx, j_idx = np.triu_indices(n, k=2)
    keep = ~((i_idx == 0) & (j_idx == n - 1))  # these two edges are adjacent
    i_idx, j_idx = i_idx[keep], j_idx[keep]
    for _ in range(max_iterations):
        a, b = tour[i_idx], tour[i_idx + 1]
        c, d = tour[j_idx], tour[(j_idx + 1) % n]
        delta = dist[a, c] + dist[b, d] - dist[a, b] - dist[c, d]
        best = int(delta.argmin())
        if delta[best] >= -tol:
            break
        i, j = int(i_idx[best]), int(j_idx[best])
        tour[i + 1 : j + 1] = tour[i + 1 : j + 1][::-1].copy()
    return _rotate_to_zero(tour)


def nearest_neighbour_two_opt(dist: np.ndarray) -> np.ndarray:
    return two_opt(dist, nearest_neighbour_tour(dist))


@dataclass(frozen=True)
class Reference:
    """An instance's reference tour and how it was obtained (``held_karp`` is exact)."""

    tour: np.ndarray
    length: float
    method: str


def reference_tour(dist: np.ndarray, *, held_karp_max_n: int = 16, lkh_runs: int = 10) -> Reference:
    """The best available reference: Held–Karp (exact) up to ``held_karp_max_n`` cities,
    else LKH-3 via elkai if installed; otherwise :class:`pglab.errors.MissingExtraError` (the ``co`` extra)."""
    n = np.asarray(dist).shape[0]
    if held_karp_max_n > HELD_KARP_MAX_N:
        raise ConfigError("held_karp_max_n", held_karp_max_n, f"must be <= {HELD_KARP_MAX_N}")
    if n <= held_karp_max_n:
        tour, length = held_karp(dist)
        return Reference(tour, length, "held_karp")
    if elkai_available():
        tour, length = lkh_tour(dist, runs=lkh_runs)
        return Reference(tour, length, "lkh3")
    if n <= HELD_KARP_MAX_N:
        tour, length = held_karp(dist)
        return Reference(tour, length, "held_karp")
    raise missing_extra("elkai", needed_by=f"an optimal reference for n={n} (Held–Karp: n <= {HELD_KARP_MAX_N})")

"""Threshold refinement of a trained GHM policy (``--refine_thresholds``, the mc default).

The GHM optimum is a threshold policy: dividends at the maximal rate at and above a
barrier ``b``, equity issued at the maximal rate below a point ``e``, nothing in between
(the HJB's greedy conditions ``V' < 1`` and ``V' > 1 + lambda``). The policy gradient finds
a policy worth >= 98% of ``V*`` but leaves its barrier imprecise: near the optimum the value
changes only to second order in the barrier (0.02 off costs ~0.07% of ``V*`` at the default
calibration), so the score-function gradient barely moves it, and the held actions of
training bias it upwards.

After the last iteration the trainer therefore fits the threshold policy directly, from
simulation only: it starts at the network's own thresholds (the half-max rule of the
final table) and maximises the simulated value ``J(b, e) = E[sum_j gamma^j r_j +
gamma^n V_psi(c_n)]`` over initial cash drawn as in training, one threshold at a time
(the issuance point, the barrier, the issuance point again), each by a line search on a
grid of candidates:

* **Common random numbers.** Every candidate is simulated on the same initial states and
  the same Brownian increments (the generator is re-seeded for every batch of
  candidates), so the differences between candidates, which are what the search reads,
  carry far less noise than each value.
* **The martingale control variate.** Each step's payout is reduced by ``gamma
  V_psi'(c_j)`` times the step's diffusion increment, which has mean zero whatever the
  critic ``V_psi`` is (the mc solver's control variate): it halves the spread of the
  barrier found.
* **The critic at the horizon.** Paths alive after the training horizon ``T`` are valued
  by the critic, ``gamma^n V_psi(c_n)`` (truncating them instead moves the barrier found
  0.07 down: a short horizon favours paying early).
* **A local polynomial fit.** The value is flat near the optimal barrier, so the barrier
  is the maximum of a cubic fitted to the candidates within 0.15 of the best one (grid
  step 0.02); the issuance point, where the value is sharply peaked, that of a quadratic
  within 0.02 (step 0.01). A window that reaches the end of the candidates evaluated is
  extended first.

The result replaces the deterministic rule of the policy (:class:`RefinablePolicy`): its
mean becomes the threshold rule, the network stays as trained (a longer resumed run trains
it on and refines again at its new last iteration).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pglab.envs.dynamics import ContinuousTimeModel
from pglab.envs.simulator import euler_maruyama_step, interpolate_uniform
from pglab.nets import GaussianPolicy
from pglab.run.seeding import make_generator

__all__ = [
    "BARRIER_SEARCH",
    "ISSUANCE_SEARCH",
    "LineSearch",
    "RefinablePolicy",
    "RegimeRule",
    "Rule",
    "Thresholds",
    "fitted_peak",
    "line_search",
    "refine_one",
    "cash_line",
    "refine_thresholds",
    "rule_bounds",
    "simulated_values",
]


@dataclass(frozen=True)
class Thresholds:
    """A threshold rule on a one-state GHM model (in the model's state).

    Attributes:
        barrier: dividends at the maximal rate at and above this state (``None``: never).
        issuance: equity issued at the maximal rate below this state (``None``: never).
    """

    barrier: float | None
    issuance: float | None

    def rates(self, states: torch.Tensor, off: torch.Tensor, on: torch.Tensor) -> torch.Tensor:
        """The rule's (dividend, issuance) rates ``[B, 2]`` at ``states [B, 1]``: ``on``
        where a control acts, ``off`` where it does not (each ``[2]``)."""
        return _rule_rates(self, states, off, on)


@dataclass(frozen=True)
class RegimeRule:
    """A threshold rule per regime, for a model whose state is (cash, Markov regime):
    ``rules[s]`` acts on the cash (coordinate 0) wherever the regime coordinate
    ``states[:, coordinate]`` is ``s``."""

    rules: tuple[Thresholds, ...]
    coordinate: int

    def rates(self, states: torch.Tensor, off: torch.Tensor, on: torch.Tensor) -> torch.Tensor:
        """The rule's (dividend, issuance) rates ``[B, 2]`` at ``states [B, d]`` (as :meth:`Thresholds.rates`)."""
        return _rule_rates(self, states, off, on)


Rule = Thresholds | RegimeRule


def rule_bounds(rule: Rule) -> list[tuple[float, float]]:
    """``(barrier or +inf, issuance point or -inf)`` of each regime's rule (one for :class:`Thresholds`)."""
    rules = rule.rules if isinstance(rule, RegimeRule) else (rule,)
    return [
        (math.inf if r.barrier is None else float(r.barrier), -math.inf if r.issuance is None else float(r.issuance))
        for r in rules
    ]


def rule_regimes(rule: Rule, states: torch.Tensor) -> torch.Tensor:
    """Each state's regime ``[B]`` (int64; 0 for a one-state rule)."""
    if isinstance(rule, RegimeRule):
        return states[:, rule.coordinate].long()
    return torch.zeros(states.shape[0], dtype=torch.long, device=states.device)


def _acting(cash: torch.Tensor, barrier: torch.Tensor, issuance: torch.Tensor) -> torch.Tensor:
    """``[B, 2]`` bool: paying where ``cash >= barrier``, issuing where ``cash < issuance`` (each ``[B]``)."""
    return torch.stack([cash >= barrier, cash < issuance], dim=1)


def _rule_rates(rule: Rule, states: torch.Tensor, off: torch.Tensor, on: torch.Tensor) -> torch.Tensor:
    bounds = torch.tensor(rule_bounds(rule), dtype=states.dtype, device=states.device)  # [R, 2]
    per_state = bounds.index_select(0, rule_regimes(rule, states))  # [B, 2]
    acting = _acting(states[:, 0], per_state[:, 0], per_state[:, 1])
    return torch.where(acting, on.to(states.dtype), off.to(states.dtype))


class RefinablePolicy(GaussianPolicy):
    """A :class:`GaussianPolicy` whose deterministic rule can be replaced by a threshold
    rule (:func:`refine_thresholds`): :class:`Thresholds`, or with ``regimes > 1`` a
    :class:`RegimeRule` on the regime coordinate ``regime_coordinate``.

    Unrefined it is the Gaussian policy itself. Refined, its mean is the threshold rule:
    the maximal rate (``action_high``) where a control acts and ``-mean_shift`` where it
    does not, so the deterministic policy (the mean clipped to the control box) is exactly
    the rule; the standard deviation stays the network's. The rule is the buffer
    ``threshold_rule`` = (refined 0/1, barrier or +inf, issuance point or -inf), one row
    per regime (``[3]`` for one regime), so checkpoints, resumes and
    ``pglab.load_checkpoint`` carry it.
    """

    threshold_rule: torch.Tensor

    def __init__(self, *args: Any, regimes: int = 1, regime_coordinate: int = 1, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.regime_coordinate = regime_coordinate
        unset = torch.tensor([0.0, math.inf, -math.inf], dtype=torch.float64)
        self.register_buffer("threshold_rule", unset if regimes == 1 else unset.repeat(regimes, 1))

    @property
    def thresholds(self) -> Rule | None:
        """The rule in force (``None``: the network's mean)."""
        rows = self.threshold_rule.view(-1, 3).tolist()
        if not rows[0][0]:
            return None
        rules = tuple(
            Thresholds(None if barrier == math.inf else barrier, None if issuance == -math.inf else issuance)
            for _, barrier, issuance in rows
        )
        return rules[0] if self.threshold_rule.dim() == 1 else RegimeRule(rules, self.regime_coordinate)

    @thresholds.setter
    def thresholds(self, rule: Rule | None) -> None:
        count = self.threshold_rule.view(-1, 3).shape[0]
        if rule is None:
            rows = [[0.0, math.inf, -math.inf]] * count
        else:
            if isinstance(rule, RegimeRule) != (self.threshold_rule.dim() == 2) or len(rule_bounds(rule)) != count:
                raise ValueError(f"threshold rule: expected one rule for each of {count} regime(s), got {rule!r}")
            rows = [[1.0, barrier, issuance] for barrier, issuance in rule_bounds(rule)]
        values = torch.tensor(rows, dtype=torch.float64)
        self.threshold_rule.copy_(values.view_as(self.threshold_rule))

    def mean_std(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mu, sigma)``, each ``[B, action_dim]``: the network's, or with the threshold
        rule as ``mu`` once refined (no network pass for the mean then)."""
        rule = self.thresholds
        if rule is None:
            return super().mean_std(states)
        return rule.rates(states, off=-self.mean_shift, on=self.action_high), self.std(states)

    def network_mean_std(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The network's own ``(mu, sigma)``, refined or not."""
        return super().mean_std(states)


@dataclass(frozen=True)
class LineSearch:
    """How one threshold is searched (:func:`line_search`), in state units.

    Attributes:
        step: spacing of the candidates.
        below, above: the first candidates span ``[start - below, start + above]``.
        half_width: the fit uses the candidates within this distance of the best one.
        degree: degree of the fitted polynomial.
    """

    step: float
    below: float
    above: float
    half_width: float
    degree: int


# The barrier: the value is flat near it (second order), so a cubic over a wide window; the
# network's barrier lies above the optimum (held actions), so the first window reaches further
# down. The issuance point: the value is peaked there, so a quadratic over a narrow window.
BARRIER_SEARCH = LineSearch(step=0.02, below=0.3, above=0.16, half_width=0.15, degree=3)
ISSUANCE_SEARCH = LineSearch(step=0.01, below=0.04, above=0.04, half_width=0.02, degree=2)
SEARCH_ROUNDS = 4  # extensions of a window whose best candidate lies at its end
PATHS_PER_TRAJECTORY = 4  # the search simulates this many times n_trajectories paths
SLOPE_TABLE_POINTS = 2001  # the control variate's table of V_psi' on [low, low + 2 (high - low)]


def fitted_peak(points: np.ndarray, values: np.ndarray, degree: int) -> float:
    """The maximiser, within ``[min(points), max(points)]``, of the least-squares
    polynomial of ``degree`` (at most ``len(points) - 1``) through ``(points, values)``."""
    degree = min(degree, len(points) - 1)
    if degree < 1:
        return float(points[int(np.argmax(values))])
    centre = float(points[int(np.argmax(values))])
    coefficients = np.polyfit(points - centre, values, degree)
    dense = np.linspace(points.min() - centre, points.max() - centre, 4001)
    return centre + float(dense[int(np.argmax(np.polyval(coefficients, dense)))])


def line_search(
    evaluate: Callable[[list[float]], np.ndarray], start: float, search: LineSearch, low: float, high: float
) -> float:
    """Maximise ``evaluate`` (candidate values -> their simulated values) over ``[low, high]``
    on the grid ``start + k step``: evaluate the first window, extend it (at most
    :data:`SEARCH_ROUNDS` times) until the candidates within ``half_width`` of the best one
    are all evaluated, then return the peak of the polynomial fitted to those
    (:func:`fitted_peak`)."""
    step, start = search.step, min(max(start, low), high)
    first, last = math.ceil((low - start) / step - 1e-9), math.floor((high - start) / step + 1e-9)  # first <= 0 <= last
    span = round(search.half_width / step)
    wanted = range(max(first, -round(search.below / step)), min(last, round(search.above / step)) + 1)
    values: dict[int, float] = {}
    for _ in range(SEARCH_ROUNDS + 1):
        missing = [k for k in wanted if k not in values]
        if missing:
            values.update(zip(missing, evaluate([start + k * step for k in missing]).tolist(), strict=True))
        best = max(values, key=lambda k: values[k])
        wanted = range(max(first, best - span), min(last, best + span) + 1)
        if all(k in values for k in wanted):
            break
    window = [k for k in wanted if k in values]
    return fitted_peak(
        np.asarray([start + k * step for k in window]), np.asarray([values[k] for k in window]), search.degree
    )


@dataclass(frozen=True)
class SearchSimulation:
    """What every candidate of the search is simulated with (:func:`simulated_values`).

    Attributes:
        model: a GHM model with (dividend, issuance) controls acting on the cash (state
            coordinate 0): one state, (cash, Markov regime) or (cash, profitability).
        critic: ``V_psi``, states ``[B, d]`` -> ``[B]`` (the horizon's value and, by its
            slope in cash, the control variate's coefficient).
        num_paths, num_steps, dt: paths per candidate, steps of ``dt`` each.
        seed: every batch of candidates draws its initial states and noise from this seed.
        bridge: absorption between grid times with the Brownian-bridge probability (else
            at grid times only).
        device: where the paths are simulated.
    """

    model: ContinuousTimeModel
    critic: Callable[[torch.Tensor], torch.Tensor]
    num_paths: int
    num_steps: int
    dt: float
    seed: int
    bridge: bool
    device: torch.device


def _regime_count(model: ContinuousTimeModel) -> int:
    return 1 if model.regimes is None else model.regimes.count


def cash_line(model: ContinuousTimeModel, cash: torch.Tensor, regime: int = 0) -> torch.Tensor:
    """States ``[P, d]`` along ``cash [P]``: the other coordinates at the middle of the
    initial states' box (the OU profitability at its mean), the regime coordinate at ``regime``."""
    states = cash.new_empty(cash.shape[0], model.state_dim)
    for coordinate, (low, high) in enumerate(zip(model.initial_low, model.initial_high, strict=True)):
        states[:, coordinate] = 0.5 * (low + high)
    states[:, 0] = cash
    if model.regimes is not None:
        states[:, model.regimes.coordinate] = float(regime)
    return states


def _slope_table(simulation: SearchSimulation) -> tuple[torch.Tensor, float, float]:
    """``V_psi'`` in cash on :data:`SLOPE_TABLE_POINTS` cash levels of ``[low, low + 2 (high -
    low)]`` (:func:`cash_line`: a state variable other than cash and the regime at the middle of
    its initial range; any coefficient keeps the control variate's mean zero), one row per
    regime: ``(table [R, P], low, step)`` for :func:`interpolate_uniform`."""
    model = simulation.model
    low, high = model.state_low[0], model.state_high[0]
    top = low + 2.0 * (high - low)
    cash = torch.linspace(low, top, SLOPE_TABLE_POINTS, device=simulation.device)
    rows = []
    for regime in range(_regime_count(model)):
        with torch.enable_grad():
            points = cash_line(model, cash, regime).requires_grad_(True)
            (slope,) = torch.autograd.grad(simulation.critic(points).sum(), points)
        rows.append(slope[:, 0].detach())
    return torch.stack(rows), low, (top - low) / (SLOPE_TABLE_POINTS - 1)


def _slope_at(
    table: torch.Tensor, low: float, step: float, cash: torch.Tensor, regime: torch.Tensor | None
) -> torch.Tensor:
    """``V_psi'`` at each path's cash ``[B]`` in its regime ``[B]`` (int64; ``None``: one regime)
    from :func:`_slope_table`."""
    if regime is None:
        return interpolate_uniform(table[0], low, step, cash)
    by_regime = torch.stack([interpolate_uniform(row, low, step, cash) for row in table], dim=1)  # [B, R]
    return by_regime.gather(1, regime.unsqueeze(1))[:, 0]


def simulated_values(simulation: SearchSimulation, candidates: Sequence[Rule]) -> np.ndarray:
    """Each candidate rule's simulated value ``[K]``: the mean over ``num_paths`` paths
    (initial states as in training) of ``sum_j gamma^j w_j (r_j - gamma V_psi'(c_j) dW_j) +
    gamma^n w_n V_psi(c_n)``, with ``w_j`` the probability of being alive at step ``j`` (the
    absorption's survival probabilities, multiplied: continuous in the path) and ``dW_j`` the
    step's diffusion increment of the cash. All candidates share the initial states, the
    noise and the regime switches (one uniform per path and step, after its noise)."""
    model, dt, device = simulation.model, simulation.dt, simulation.device
    count, paths = len(candidates), simulation.num_paths
    generator = make_generator(simulation.seed, device)
    states = model.initial_states(paths, generator, device=device).repeat(count, 1)  # [K N, d]
    bounds = torch.tensor([rule_bounds(rule) for rule in candidates], device=device)  # [K, R, 2]
    regimes = bounds.shape[1]
    bounds = bounds.view(count * regimes, 2)
    first_row = torch.arange(count, device=device).repeat_interleave(paths) * regimes  # [K N]
    one_rule = bounds.index_select(0, first_row) if regimes == 1 else None  # [K N, 2]: no regime to follow
    high = torch.tensor(model.control.high, device=device)
    slope, low, step = _slope_table(simulation)
    gamma, root_dt = math.exp(-model.discount_rate * dt), math.sqrt(dt)
    alive = torch.ones(count * paths, device=device)
    total = torch.zeros(count * paths, device=device)
    discount = 1.0
    with torch.no_grad():
        for _ in range(simulation.num_steps):
            noise = torch.randn(paths, model.noise_dim, generator=generator, device=device).repeat(count, 1)
            regime: torch.Tensor | None = None
            rule = one_rule
            if rule is None:
                regime = rule_regimes(candidates[0], states)
                rule = bounds.index_select(0, first_row + regime)  # [K N, 2]
            controls = _acting(states[:, 0], rule[:, 0], rule[:, 1]).to(states.dtype) * high
            next_states, reward = euler_maruyama_step(model, states, controls, noise, dt)
            increment = model.shock(states, controls, root_dt * noise)[:, 0]  # the cash's diffusion increment
            coefficient = gamma * _slope_at(slope, low, step, states[:, 0], regime)
            total += discount * alive * (reward - coefficient * increment)
            if simulation.bridge:
                alive = alive * model.step_survival(states, next_states, controls, dt)
            else:
                alive = alive * (~model.terminated(next_states)).to(alive.dtype)
            if model.regimes is not None:
                switch = torch.rand(paths, generator=generator, device=device).repeat(count)
                next_states = model.regimes.switch(next_states, switch, dt)
            states, discount = next_states, discount * gamma
        total += discount * alive * simulation.critic(states.clamp_min(0.0))
    return total.view(count, paths).mean(dim=1).double().cpu().numpy()


def refine_thresholds(simulation: SearchSimulation, start: Rule, upper: float) -> Rule:
    """The threshold rule that maximises the simulated value (module docstring), from the
    rule ``start`` (the network's thresholds). A :class:`RegimeRule` is refined one
    regime after the other (:func:`refine_one`), the other regimes' rules held."""
    if isinstance(start, Thresholds):
        return refine_one(lambda rule: rule, simulation, start, upper)
    rules = list(start.rules)
    for regime in range(len(rules)):

        def candidate(rule: Thresholds, regime: int = regime) -> Rule:
            return RegimeRule(tuple(rule if k == regime else rules[k] for k in range(len(rules))), start.coordinate)

        rules[regime] = refine_one(candidate, simulation, rules[regime], upper)
    return RegimeRule(tuple(rules), start.coordinate)


def refine_one(candidate: Callable[[Thresholds], Rule], simulation: SearchSimulation, start: Thresholds, upper: float):
    """One :class:`Thresholds` (``candidate`` makes the whole rule simulated from it): the
    issuance point with the barrier at its start, the barrier with that issuance point
    (above it, up to ``upper``), then the issuance point again (below the barrier). A
    control whose maximal rate is 0 keeps the threshold ``None``; one that never acts in
    ``start`` is searched from ``upper`` (the barrier) or 0 (the issuance point)."""
    dividend_max, issuance_max = simulation.model.control.high[:2]
    barrier = None if dividend_max <= 0 else (upper if start.barrier is None else min(start.barrier, upper))
    issuance = None if issuance_max <= 0 else (0.0 if start.issuance is None else max(start.issuance, 0.0))

    def values(rules: list[Thresholds]) -> np.ndarray:
        return simulated_values(simulation, [candidate(rule) for rule in rules])

    def issuance_below(ceiling: float | None) -> float | None:
        if issuance is None:
            return None
        top = (upper if ceiling is None else ceiling) - ISSUANCE_SEARCH.step
        return line_search(
            lambda points: values([Thresholds(barrier, point) for point in points]), issuance, ISSUANCE_SEARCH, 0.0, top
        )

    issuance = issuance_below(barrier)
    if barrier is not None:
        floor = (issuance or 0.0) + BARRIER_SEARCH.step
        barrier = line_search(
            lambda points: values([Thresholds(point, issuance) for point in points]),
            barrier,
            BARRIER_SEARCH,
            floor,
            upper,
        )
    issuance = issuance_below(barrier)
    return Thresholds(barrier, issuance)

"""Value of a deterministic policy from given initial states, by long simulation.

For each initial state we simulate ``num_paths`` paths with the model's exact step
(Euler-Maruyama, absorption when the state becomes terminal) until the discounted
remainder is provably negligible::

    V^pi(x0) ~= mean_paths sum_{t < n} gamma^t r_t         (gamma = exp(-rho dt))
    tail     = E[gamma^n V^pi(x_n) 1{alive at n}] <= E[gamma^n Vbar(x_n) 1{alive}]

where ``Vbar >= V^pi`` is an upper bound of the value (the optimal value ``V*`` from the
finite-difference solver, since no policy beats the optimum; or ``max reward / rho``).
Simulation stops once ``tail <= tail_tolerance * estimate`` at every initial state (or at
``max_time``); the bound is reported. Dead paths are dropped every ``chunk_steps`` steps,
so the cost follows the number of surviving paths.

Control variate (``value_slope``): the payout sum of a path is noisy mostly through the
Brownian increments, each of which moves the value by about ``V'(x_j) diffusion sqrt(dt)
eps_j``. Subtracting ``gamma^{j+1} V'(x_j) diffusion sqrt(dt) eps_j`` at every alive step
leaves the mean unchanged (each term has mean zero given the path so far, whatever the
slope) and removes most of the variance when ``V'`` is close to the policy's own value's
slope: with the optimum's slope ``V*'`` and a near-optimal policy the standard error falls
several-fold, so far fewer paths give the same precision.

Where the time goes: the policy network on every surviving path at every step (two
64-wide ``tanh`` layers per path and step, against a handful of element-wise ops for the
Euler step itself). A deterministic policy of a
1-D state can be read from a table instead (``table_points``,
:class:`pglab.envs.simulator.TabulatedPolicy`): one forward pass on the table, then an
interpolation per step, with the interpolation error measured and reported. Stopping
individual alive paths early gains little here: every alive path's remaining value decays
at the same rate ``exp(-rho t)``, so the per-path bounds cross a tolerance at nearly the same
time as their mean.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from pglab.envs.dynamics import ContinuousTimeModel
from pglab.envs.simulator import TabulatedPolicy, euler_maruyama_step
from pglab.validation import check_int, check_positive

PolicyFn = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class PolicyValue:
    """Per initial state: ``mean`` and ``stderr`` of the discounted payout, ``tail_bound``
    (upper bound of the ignored remainder), ``simulated_time``; ``table_error``: the largest
    difference between the tabulated and the exact policy (``None``: no table)."""

    initial_states: list[float] | list[list[float]]
    mean: list[float]
    stderr: list[float]
    tail_bound: list[float]
    simulated_time: float
    num_paths: int
    table_error: float | None = None

    def as_rows(self) -> list[dict]:
        return [
            {"initial_state": x, "value": m, "stderr": s, "tail_bound": tb}
            for x, m, s, tb in zip(self.initial_states, self.mean, self.stderr, self.tail_bound, strict=False)
        ]


def corner_reward_bound(model: ContinuousTimeModel) -> Callable[[torch.Tensor], torch.Tensor]:
    """``max(0, max over the corners u of the control box of f(x, u)) / rho``: an upper
    bound of any policy's value for models whose reward rate ``f`` is linear in the
    controls and does not depend on the state (GHM: the corner (a_L_max, 0) gives
    ``a_L_max / rho``). For other models pass a ``value_bound`` (e.g. the FD optimum)."""
    corners = torch.tensor(
        list(itertools.product(*zip(model.control.low, model.control.high, strict=False))), dtype=torch.float32
    )

    def bound(states: torch.Tensor) -> torch.Tensor:
        rates = torch.stack(
            [model.reward_rate(states, corner.to(states).expand(states.shape[0], -1)) for corner in corners]
        )  # [corners, B]
        return rates.max(0).values.clamp_min(0.0) / model.discount_rate

    return bound


@torch.no_grad()
def simulate_policy_value(
    model: ContinuousTimeModel,
    policy_fn: PolicyFn,
    initial_states: Sequence[float] | Sequence[Sequence[float]],
    *,
    num_paths: int = 10_000,
    dt: float = 0.01,
    generator: torch.Generator | None = None,
    value_bound: Callable[[torch.Tensor], torch.Tensor] | None = None,
    tail_tolerance: float = 0.005,
    max_time: float = 200.0,
    chunk_steps: int = 100,
    device: torch.device | str = "cpu",
    progress: str | None = None,
    table_points: int = 0,
    value_slope: Callable[[torch.Tensor], torch.Tensor] | None = None,
    absorption: str = "grid",
) -> PolicyValue:
    """Estimate ``V^pi`` at each of ``initial_states`` (floats for a one-state model, else
    ``d`` floats each) with ``num_paths`` paths each. ``policy_fn`` maps states ``[B, d]`` to
    controls ``[B, A]`` (it is clipped to the control box here). ``value_bound`` maps states
    ``[B, d]`` to an upper bound of the value ``[B]``; by default :func:`corner_reward_bound`.
    ``value_slope`` maps them to the control variate's coefficient, ``[B, d]`` (or ``[B]`` for
    one state). The model's jumps (regime switches, parts killed under bridge absorption)
    are drawn after the Brownian increments of each step. ``progress``: the
    label of a progress bar over the simulated steps (none if ``None``); the bar's total
    is the ``max_time`` cap, and it ends where the tail bound stops the simulation.
    ``table_points > 0`` (1-D models, deterministic ``policy_fn`` only): read the policy
    from a :class:`TabulatedPolicy` of that many points on ``[state_low, 2 max(state_high,
    initial_states)]`` (the exact ``policy_fn`` outside it)."""
    check_int("num_paths", num_paths, minimum=2)
    check_positive("dt", dt)
    check_positive("tail_tolerance", tail_tolerance)
    if absorption not in ("grid", "bridge"):
        raise ValueError(f"simulate_policy_value: absorption must be 'grid' or 'bridge', got {absorption!r}")
    table_error = None
    starts = _state_rows(initial_states, model.state_dim)
    if table_points > 0 and model.state_dim == 1:
        low_cash = model.state_low[0]
        high_cash = low_cash + 2.0 * (max(model.state_high[0], *(state[0] for state in starts)) - low_cash)
        table = TabulatedPolicy(_ControlsAsPolicy(policy_fn), low_cash, high_cash, table_points, device=device)
        table_error = table.max_error()
        policy_fn = table.mean
    simulation = _PathSimulation(
        model,
        policy_fn,
        starts,
        num_paths,
        dt=dt,
        generator=generator,
        value_slope=value_slope,
        absorption=absorption,
        device=device,
    )
    tail = _simulate_until_the_tail_is_small(
        simulation,
        value_bound if value_bound is not None else corner_reward_bound(model),
        tail_tolerance=tail_tolerance,
        max_steps=int(math.ceil(max_time / dt)),
        chunk_steps=chunk_steps,
        progress=progress,
    )
    per_path = simulation.totals.view(simulation.num_points, num_paths)
    return PolicyValue(
        initial_states=[float(state[0]) for state in starts] if model.state_dim == 1 else [list(s) for s in starts],
        mean=per_path.mean(1).tolist(),
        stderr=(per_path.std(1) / math.sqrt(num_paths)).tolist(),
        tail_bound=tail.tolist(),
        simulated_time=simulation.step * dt,
        num_paths=num_paths,
        table_error=table_error,
    )


def _state_rows(initial_states: Sequence[float] | Sequence[Sequence[float]], state_dim: int) -> list[tuple[float, ...]]:
    """The initial states as ``d``-tuples (a one-state model's may be given as floats)."""
    rows = [
        tuple(float(x) for x in state) if isinstance(state, Sequence) else (float(state),) for state in initial_states
    ]
    for row in rows:
        if len(row) != state_dim:
            raise ValueError(f"simulate_policy_value: initial states need {state_dim} coordinates, got {row}")
    return rows


def _simulate_until_the_tail_is_small(
    simulation: _PathSimulation,
    value_bound: Callable[[torch.Tensor], torch.Tensor],
    *,
    tail_tolerance: float,
    max_steps: int,
    chunk_steps: int,
    progress: str | None,
) -> torch.Tensor:
    """Advance ``simulation`` ``chunk_steps`` at a time, dropping dead paths after each
    chunk, until no path is alive, ``max_steps`` are done or the tail bound is below
    ``tail_tolerance`` times the estimate at every initial state. Returns the last tail
    bound ``[P]``. ``progress``: the label of a progress bar over the steps."""
    bar = None
    if progress is not None:
        from pglab.run.progress import progress_bar

        bar = progress_bar(max_steps, desc=progress, unit="step")
    try:
        while True:
            chunk_start = simulation.step
            simulation.advance(chunk_steps, max_steps)
            simulation.drop_dead_paths()
            tail, means = simulation.tail_bound(value_bound), simulation.means()
            if bar is not None:
                bar.update(simulation.step - chunk_start)
                bar.set_postfix(
                    alive=simulation.num_alive, tail=f"{float((tail / means.abs().clamp_min(1e-12)).max()):.2g}"
                )
            if (
                simulation.num_alive == 0
                or simulation.step >= max_steps
                or bool((tail <= tail_tolerance * means.abs().clamp_min(1e-12)).all())
            ):
                return tail
    finally:
        if bar is not None:
            bar.total = simulation.step  # the tail bound ended the simulation here: show it complete
            bar.refresh()
            bar.close()


class _PathSimulation:
    """The paths of :func:`simulate_policy_value`: ``num_paths`` from each initial state,
    their discounted payout totals (float64, one per path) and the surviving paths' states.

    A path's total is final once it dies, so dead paths are dropped between chunks
    (:meth:`drop_dead_paths`) and the cost follows the number of surviving paths."""

    def __init__(
        self,
        model: ContinuousTimeModel,
        policy_fn: PolicyFn,
        initial_states: Sequence[tuple[float, ...]],
        num_paths: int,
        *,
        dt: float,
        generator: torch.Generator | None,
        value_slope: Callable[[torch.Tensor], torch.Tensor] | None,
        absorption: str,
        device: torch.device | str,
    ):
        self.model, self.policy_fn, self.dt = model, policy_fn, dt
        self.generator, self.value_slope, self.absorption, self.device = generator, value_slope, absorption, device
        self.gamma = math.exp(-model.discount_rate * dt)
        self.num_points, self.num_paths = len(initial_states), num_paths
        start = torch.tensor(initial_states, dtype=torch.float32, device=device)  # [P, d]
        self.states = start.repeat_interleave(num_paths, dim=0)  # [P * n, d]
        model.check_outputs(self.states, dt, where="simulate_policy_value")
        self.path_bridge = absorption == "bridge" and model.num_parts == 1
        self.jump_dim = model.jump_dim(bridge=absorption == "bridge")
        self.owner = torch.arange(self.num_points * num_paths, device=device)  # path index into totals
        self.totals = torch.zeros(self.num_points * num_paths, dtype=torch.float64, device=device)
        self.low, self.high = model.control.bounds(self.states)
        self.alive = ~model.terminated(self.states)
        self.step = 0
        self.discount = 1.0  # gamma^step

    @property
    def num_alive(self) -> int:
        """Paths still simulated (after :meth:`drop_dead_paths`: the surviving ones)."""
        return int(self.states.shape[0])

    def advance(self, num_steps: int, max_steps: int) -> None:
        """Up to ``num_steps`` Euler steps (at most to ``max_steps`` in all), adding each
        alive path's discounted payout (minus the control variate's mean-zero noise term
        ``gamma grad V(x) . Sigma sqrt(dt) eps`` when ``value_slope`` is given). Each step
        draws, in order: the Brownian increments ``[B, w]``, the path survival uniforms
        (bridge absorption of whole paths) and the jump uniforms (a model with jumps)."""
        model, dt, device, gamma = self.model, self.dt, self.device, self.gamma
        states, alive = self.states, self.alive
        discount = gamma**self.step
        for _ in range(num_steps):
            controls = torch.maximum(torch.minimum(self.policy_fn(states), self.high), self.low)
            noise = torch.randn(
                (states.shape[0], model.noise_dim), generator=self.generator, device=device, dtype=states.dtype
            )
            next_states, reward = euler_maruyama_step(model, states, controls, noise, dt)
            self.totals.index_add_(
                0, self.owner, (discount * self._payout(states, controls, noise, reward) * alive).double()
            )
            next_states, alive = self._absorb_and_jump(states, next_states, controls, alive)
            states = torch.where(alive.unsqueeze(1), next_states, states)
            alive = alive & ~model.terminated(states)
            discount *= gamma
            self.step += 1
            if self.step >= max_steps:
                break
        self.states, self.alive, self.discount = states, alive, discount

    def _payout(
        self, states: torch.Tensor, controls: torch.Tensor, noise: torch.Tensor, reward: torch.Tensor
    ) -> torch.Tensor:
        """A step's payout, less ``gamma grad V(x) . Sigma sqrt(dt) eps`` (mean zero) with a ``value_slope``."""
        if self.value_slope is None:
            return reward
        shock = self.model.shock(states, controls, math.sqrt(self.dt) * noise)  # [B, d]
        slope = self.value_slope(states)
        if slope.dim() == 1 or slope.shape[1] == 1:
            return reward - self.gamma * slope.reshape(-1) * shock[:, 0]
        return reward - self.gamma * (slope * shock).sum(1)

    def _absorb_and_jump(
        self, states: torch.Tensor, next_states: torch.Tensor, controls: torch.Tensor, alive: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The state after the step's jumps, and who survived the step between the grid times
        (bridge absorption of whole paths: with probability ``step_survival``)."""
        model, device = self.model, self.device
        uniform = None
        if self.path_bridge:  # drawn before the jumps' uniforms
            uniform = torch.rand(states.shape[0], generator=self.generator, device=device, dtype=states.dtype)
        if self.jump_dim > 0:
            jumps = torch.rand(
                (states.shape[0], self.jump_dim), generator=self.generator, device=device, dtype=states.dtype
            )
            next_states = model.jump(states, next_states, controls, jumps, self.dt, bridge=self.absorption == "bridge")
        if uniform is not None:  # killed between the grid times with 1 - survival
            alive = alive & (uniform < model.step_survival(states, next_states, controls, self.dt))
        return next_states, alive

    def drop_dead_paths(self) -> None:
        """Keep only the alive paths: the dead ones' totals are final."""
        keep = self.alive.nonzero().squeeze(1)
        self.states, self.owner, self.alive = self.states[keep], self.owner[keep], self.alive[keep]

    def tail_bound(self, value_bound: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """``E[gamma^n Vbar(x_n) 1{alive at n}]`` per initial state, ``[P]`` float64 on the CPU:
        an upper bound of the payout not yet simulated."""
        bound = torch.zeros(self.num_points * self.num_paths, dtype=torch.float64, device=self.device)
        if self.num_alive > 0:
            bound.index_add_(0, self.owner, (self.discount * value_bound(self.states)).double())
        return bound.view(self.num_points, self.num_paths).mean(1).cpu()

    def means(self) -> torch.Tensor:
        """The estimate so far per initial state, ``[P]`` float64 on the CPU."""
        return self.totals.view(self.num_points, self.num_paths).mean(1).cpu()


class _ControlsAsPolicy:
    """A deterministic ``policy_fn`` seen through the ``mean_std`` interface (zero std)."""

    def __init__(self, policy_fn: PolicyFn):
        self.policy_fn = policy_fn

    def mean_std(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        controls = self.policy_fn(states)
        return controls, torch.zeros_like(controls)

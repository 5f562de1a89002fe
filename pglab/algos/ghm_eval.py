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

    initial_states: list[float]
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
    initial_states: Sequence[float],
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
    """Estimate ``V^pi`` at each of ``initial_states`` (1-D models) with ``num_paths``
    paths each. ``policy_fn`` maps states ``[B, 1]`` to controls ``[B, A]`` (it is
    clipped to the control box here). ``value_bound`` maps states ``[B, 1]`` to an upper
    bound of the value ``[B]``; by default :func:`corner_reward_bound`. ``progress``: the
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
    rho = model.discount_rate
    gamma = math.exp(-rho * dt)
    num_points = len(initial_states)
    start = torch.tensor(initial_states, dtype=torch.float32, device=device)
    states = start.repeat_interleave(num_paths).unsqueeze(1)  # [P * n, 1]
    owner = torch.arange(num_points * num_paths, device=device)  # path index into totals
    totals = torch.zeros(num_points * num_paths, dtype=torch.float64, device=device)
    low, high = model.control.bounds(states)
    if value_bound is None:
        value_bound = corner_reward_bound(model)
    table_error = None
    if table_points > 0 and model.state_dim == 1:
        low_cash = model.state_low[0]
        high_cash = low_cash + 2.0 * (max(model.state_high[0], *initial_states) - low_cash)
        table = TabulatedPolicy(_ControlsAsPolicy(policy_fn), low_cash, high_cash, table_points, device=device)
        table_error = table.max_error()
        policy_fn = table.mean

    alive = ~model.terminated(states)
    step = 0
    max_steps = int(math.ceil(max_time / dt))
    tail = torch.zeros(num_points, dtype=torch.float64)
    bar = None
    if progress is not None:
        from pglab.run.progress import progress_bar

        bar = progress_bar(max_steps, desc=progress, unit="step")
    try:
        while True:
            discount = gamma**step
            chunk_start = step
            for _ in range(chunk_steps):
                controls = torch.maximum(torch.minimum(policy_fn(states), high), low)
                noise = torch.randn(states.shape, generator=generator, device=device, dtype=states.dtype)
                next_states, reward = euler_maruyama_step(model, states, controls, noise, dt)
                payout = reward
                if value_slope is not None:  # minus gamma V'(x) diffusion sqrt(dt) eps: mean zero
                    shock = model.diffusion(states, controls)[:, 0] * (math.sqrt(dt) * noise[:, 0])
                    payout = reward - gamma * value_slope(states) * shock
                totals.index_add_(0, owner, (discount * payout * alive).double())
                if absorption == "bridge":  # killed between the grid times with 1 - survival
                    survival = model.step_survival(states, next_states, controls, dt)
                    uniform = torch.rand(survival.shape, generator=generator, device=device, dtype=survival.dtype)
                    alive = alive & (uniform < survival)
                states = torch.where(alive.unsqueeze(1), next_states, states)
                alive = alive & ~model.terminated(states)
                discount *= gamma
                step += 1
                if step >= max_steps:
                    break
            # Drop dead paths: their totals are final.
            keep = alive.nonzero().squeeze(1)
            states, owner, alive = states[keep], owner[keep], alive[keep]
            bound = torch.zeros(num_points * num_paths, dtype=torch.float64, device=device)
            if states.shape[0] > 0:
                bound.index_add_(0, owner, (discount * value_bound(states)).double())
            tail = bound.view(num_points, num_paths).mean(1).cpu()
            means = totals.view(num_points, num_paths).mean(1).cpu()
            if bar is not None:
                bar.update(step - chunk_start)
                bar.set_postfix(
                    alive=int(states.shape[0]), tail=f"{float((tail / means.abs().clamp_min(1e-12)).max()):.2g}"
                )
            if (
                states.shape[0] == 0
                or step >= max_steps
                or bool((tail <= tail_tolerance * means.abs().clamp_min(1e-12)).all())
            ):
                break
    finally:
        if bar is not None:
            bar.total = step  # the tail bound ended the simulation here: show it complete
            bar.refresh()
            bar.close()
    per_path = totals.view(num_points, num_paths)
    return PolicyValue(
        initial_states=[float(x) for x in initial_states],
        mean=per_path.mean(1).tolist(),
        stderr=(per_path.std(1) / math.sqrt(num_paths)).tolist(),
        tail_bound=tail.tolist(),
        simulated_time=step * dt,
        num_paths=num_paths,
        table_error=table_error,
    )


class _ControlsAsPolicy:
    """A deterministic ``policy_fn`` seen through the ``mean_std`` interface (zero std)."""

    def __init__(self, policy_fn: PolicyFn):
        self.policy_fn = policy_fn

    def mean_std(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        controls = self.policy_fn(states)
        return controls, torch.zeros_like(controls)

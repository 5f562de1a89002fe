"""Monte Carlo policy gradient (REINFORCE with a learned baseline) on a known model.

One iteration (``train_step``):

1. sample initial states ``x_0 ~ Uniform``; roll out ``B`` paths with the stochastic
   policy (no gradient; all paths at once);
2. bootstrap the truncated horizon: ``V_boot = V_psi(x_T)`` for paths alive at ``T``
   (``terminal_value="critic"``) or 0 (``"none"``);
3. advantages, either per path (``advantage="trajectory"``, the note's form)
   ``A^i = R(x_0^i) - V_psi(x_0^i)``,  ``R = sum_t gamma^t r_t + gamma^T V_boot``,
   or per step (``"reward_to_go"``)
   ``A_t^i = G_t^i - V_psi(x_t^i)``,  ``G_t = r_t + gamma (1 - d_t) G_{t+1}``, ``G_T = V_boot``;
   with ``advantage_steps = n > 0`` the critic replaces the return after ``n`` steps (the
   critic as a control variate for the far future, whose noise the held action barely
   moves): ``A_t = sum_{j<n} gamma^j r_{t+j} + gamma^n m_{t+n} V_psi(x_{t+n}) - V_psi(x_t)``,
   computed as ``G_t - gamma^n m_{t+n} (G_{t+n} - V_psi(x_{t+n}))`` (``m``: alive mask;
   ``G_t`` itself when ``t + n >= T``);
   with ``control_variate="martingale"`` the payout's noise that no action can explain is
   subtracted first (below), from the advantages and from the baseline's targets;
   then ``A <- (A - mean A) / (std A + 1e-8)`` over the scored steps (all alive steps,
   or a uniform subsample of ``score_samples`` per policy step: an unbiased estimate of
   the same loss at a fraction of the backward-pass cost);
4. policy step on ``L = -(1/B) sum_i sum_t m_t^i log pi_theta(a_t^i | x_t^i) A^i(_t)``
   (``a`` is the raw Gaussian sample; the simulator clips it, so the score is exact),
   gradient-norm clipped;
5. baseline step on ``MSE(V_psi(x_0), R)`` (trajectory) or ``MSE(V_psi(x_t), G_t)`` over
   alive steps (reward-to-go), clipped likewise.

Without a baseline (``baseline=None``) the advantages are the raw (normalised) returns.

The martingale control variate (``control_variate="martingale"``, ``reward_to_go`` with a
baseline). Most of the variance of ``G_t`` is the Brownian noise after ``t`` and the
exploration noise of later decisions; neither depends on the action ``a_t``. By Ito, the
value along a path moves by ``V'(x_j) diffusion sqrt(dt) eps_j`` per step from the Brownian
noise, and a later decision's raw action ``a_j = mu(x_j) + std xi_j`` moves the return by
about ``dQ/du xi_j std``. Each step's payout is replaced by

    r_j - w_j - v_j,   w_j = gamma m_j V'(x_j) . (x_{j+1} - x_j - drift(x_j, u_j) dt)
                       v_j = [decision at j] h_j . (a_j - mu(x_j)),
                       h_j = sum_{s<k} gamma^s dt (d reward_rate/du + gamma V'(x_j) . d drift/du)
                             at u = clip(mu(x_j)), 0 where mu(x_j) is outside the control box

(``k = action_repeat``). ``x_{j+1} - x_j - drift dt`` is the step's diffusion increment
and ``a_j - mu(x_j)`` the decision's exploration noise: both are mean zero given
everything up to step ``j``, and their coefficients are fixed by then, so every ``w_j``
and ``v_j`` with ``j >= t`` has conditional mean zero given ``a_t`` -- except ``v_t``,
the decision's own noise, which is the signal and is added back. The policy gradient and
the baseline's target ``E[G_t | x_t]`` therefore stay unbiased *whatever* ``V'`` is: the
critic's errors cost variance, never bias (unlike ``advantage_steps``, which replaces the
far future by the critic). ``V'`` is the baseline's autograd slope, read from a table on
1-D states; on a state of several variables it is taken where the step's decision was made
and held over the decision interval (still known at step ``j``, so still mean zero). After
a model's jumps (a regime switch, a division liquidated between grid times) ``x_{j+1} - x_j
- drift dt`` is not the Brownian increment; the simulator keeps the state before the jumps
(``Trajectories.euler_states``) and the control variate uses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from pglab.algos.onpolicy import explained_variance, gradient_step
from pglab.envs.simulator import (
    SimulatorPolicy,
    TabulatedPolicy,
    Trajectories,
    TrajectorySimulator,
    interpolate_uniform,
)
from pglab.estimators import normalize_advantages, reward_to_go
from pglab.losses.reinforce import reinforce_loss, value_regression_loss
from pglab.nets import GaussianPolicy, ValueNetwork

Advantage = Literal["trajectory", "reward_to_go"]
TerminalValue = Literal["critic", "none"]
ControlVariate = Literal["none", "martingale"]


class MonteCarloPolicyGradient:
    """REINFORCE with a learned baseline over batched simulated paths.

    Args:
        policy: the Gaussian policy to train.
        simulator: a :class:`TrajectorySimulator` (or anything with its ``rollout``).
        baseline: value network, or ``None`` for plain REINFORCE.
        n_trajectories: paths per iteration.
        lr_policy, lr_baseline: Adam learning rates.
        max_grad_norm: gradient-norm clip for both networks.
        advantage: ``"trajectory"`` or ``"reward_to_go"`` (see the module docstring).
        advantage_normalization: standardise advantages.
        terminal_value: bootstrap surviving paths with the critic (``"critic"``) or not.
        baseline_steps: gradient steps on the baseline per iteration.
        score_samples: if > 0, the policy and (reward-to-go) baseline losses use this many
            alive (state, action) pairs drawn uniformly without replacement instead of all
            of them. The subsampled policy loss is rescaled to an unbiased estimate of the
            full loss; it cuts the cost of the backward passes, which dominate an
            iteration (500 steps x 1,000 paths = ~500k pairs), at a small variance cost.
        policy_steps: Adam steps on the policy per iteration, each on a disjoint subsample.
        advantage_steps: ``"reward_to_go"`` with a baseline: bootstrap the advantage from
            the critic ``n`` steps ahead (0: at the horizon, the plain ``G_t - V(x_t)``).
        control_variate: ``"martingale"``: subtract the noise terms of the module docstring
            from the returns (needs ``advantage="reward_to_go"`` and a baseline);
            ``"none"``: the plain reward-to-go.
        rollout_table_points: if > 0 and the state is 1-D, the rollout queries the policy
            through a :class:`TabulatedPolicy` of this many points on
            ``[state_low, state_low + 2 (state_high - state_low)]`` (the network outside it),
            rebuilt every iteration: the rollout's forward passes shrink from
            ``B x decisions`` rows to ``rollout_table_points``. The sampled actions then
            follow the interpolated mean (error ``<= h^2/8 max|mean''|``, ~1e-6 here)
            while the score uses the network's; 0: query the network.
        generator: the simulation's random stream (initial states and noise).
    """

    def __init__(
        self,
        policy: GaussianPolicy,
        simulator: TrajectorySimulator,
        baseline: ValueNetwork | None = None,
        *,
        n_trajectories: int = 1000,
        lr_policy: float = 3e-4,
        lr_baseline: float = 1e-3,
        max_grad_norm: float = 0.5,
        advantage: Advantage = "reward_to_go",
        advantage_normalization: bool = True,
        terminal_value: TerminalValue = "critic",
        baseline_steps: int = 1,
        score_samples: int = 0,
        policy_steps: int = 1,
        advantage_steps: int = 0,
        rollout_table_points: int = 0,
        control_variate: ControlVariate = "none",
        generator: torch.Generator | None = None,
    ):
        if control_variate not in ("none", "martingale"):
            raise ValueError(f"control_variate must be 'none' or 'martingale', got {control_variate!r}")
        if control_variate == "martingale" and (baseline is None or advantage != "reward_to_go"):
            raise ValueError(
                "control_variate='martingale' needs a baseline and advantage='reward_to_go' "
                f"(got baseline={'None' if baseline is None else 'given'}, advantage={advantage!r})"
            )
        self.control_variate = control_variate
        self.policy, self.simulator, self.baseline = policy, simulator, baseline
        self.model = simulator.model
        self.n_trajectories = n_trajectories
        self.max_grad_norm = max_grad_norm
        self.advantage = advantage
        self.advantage_normalization = advantage_normalization
        self.terminal_value = terminal_value if baseline is not None else "none"
        self.baseline_steps = baseline_steps
        self.score_samples = score_samples
        self.policy_steps = policy_steps
        self.rollout_table_points = rollout_table_points
        self.advantage_steps = advantage_steps
        self.generator = generator
        self.policy_optimizer = torch.optim.Adam(policy.parameters(), lr=lr_policy)
        self.baseline_optimizer = (
            torch.optim.Adam(baseline.parameters(), lr=lr_baseline) if baseline is not None else None
        )

    @property
    def device(self) -> torch.device:
        return next(self.policy.parameters()).device

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        out: dict[str, torch.optim.Optimizer] = {"policy": self.policy_optimizer}
        if self.baseline_optimizer is not None:
            out["baseline"] = self.baseline_optimizer
        return out

    def _step(self, loss: torch.Tensor, module: nn.Module, optimizer: torch.optim.Optimizer) -> torch.Tensor:
        return gradient_step(loss, module.parameters(), optimizer, self.max_grad_norm)

    def _rollout_policy(self):
        """The policy as the rollout queries it: the network, or its table (1-D states)."""
        if self.rollout_table_points <= 0 or self.model.state_dim != 1:
            return self.policy
        low, high = self.model.state_low[0], self.model.state_high[0]
        return TabulatedPolicy(
            self.policy, low, low + 2.0 * (high - low), self.rollout_table_points, device=self.device
        )

    def _value_slope(self, states: torch.Tensor) -> torch.Tensor:
        """``dV/dx`` of the baseline at ``states [N, S]``, ``[N, S]`` (no graph). On a 1-D
        state with a rollout table it is read from a table of the same size and range
        (linear interpolation, clamped at the table's ends): any slope keeps the control
        variate unbiased, so the table's error costs nothing but a little variance."""

        baseline = self.baseline
        assert baseline is not None  # the martingale control variate needs a baseline (checked in __init__)

        def autograd_slope(points: torch.Tensor) -> torch.Tensor:
            with torch.enable_grad():
                points = points.detach().requires_grad_(True)
                (slope,) = torch.autograd.grad(baseline(points).sum(), points)
            return slope

        if self.rollout_table_points <= 0 or self.model.state_dim != 1:
            return autograd_slope(states)
        low = self.model.state_low[0]
        high = low + 2.0 * (self.model.state_high[0] - low)
        num_points = self.rollout_table_points
        grid = torch.linspace(low, high, num_points, device=states.device, dtype=states.dtype).unsqueeze(1)
        table = autograd_slope(grid)[:, 0]  # [P]
        return interpolate_uniform(table, low, (high - low) / (num_points - 1), states[:, 0]).unsqueeze(1)

    def _path_slopes(self, paths: Trajectories) -> torch.Tensor:
        """The control variate's coefficients ``[B T, S]``: ``V'(x_j)`` at every step for a
        1-D state (read from a table); for a state of several variables ``V'`` at the state
        where the step's decision was taken, held over the decision interval (the network's
        gradient on every state of every path would cost most of an iteration; a coefficient
        known at the decision keeps every term mean zero just the same)."""
        num_paths, num_steps = paths.num_paths, paths.num_steps
        states = paths.states[:, :-1]
        if self.model.state_dim == 1:
            return self._value_slope(states.reshape(num_paths * num_steps, -1))
        repeat = paths.action_repeat
        decisions = states[:, ::repeat]  # [B, ceil(T / k), S]
        slope = self._value_slope(decisions.reshape(-1, decisions.shape[2])).view(decisions.shape)
        return slope.repeat_interleave(repeat, dim=1)[:, :num_steps].reshape(num_paths * num_steps, -1)

    def control_variate_terms(self, paths, rollout_policy) -> tuple[torch.Tensor, torch.Tensor]:
        """The martingale control variate of a batch (module docstring): ``(w + v, v)``,
        each ``[B, T]``: the per-step terms subtracted from the payout, and the exploration
        part ``v`` alone (non-zero at decisions only), which each decision adds back for
        itself. ``rollout_policy`` is the policy the rollout sampled from (its mean)."""
        model = self.model
        num_paths, num_steps = paths.num_paths, paths.num_steps
        num_pairs = num_paths * num_steps
        gamma, dt = paths.discount, paths.dt
        states = paths.states[:, :-1].reshape(num_pairs, -1)
        # before the model's jumps (a regime switch, a part killed): the diffusion increment is what remains
        after = paths.states[:, 1:] if paths.euler_states is None else paths.euler_states
        next_states = after.reshape(num_pairs, -1)
        controls = paths.controls.reshape(num_pairs, -1)
        slope = self._path_slopes(paths)  # V'(x_j), or at the step's decision, [BT, S]
        # w_j = gamma m_j V'(x_j) . (diffusion increment of step j)
        diffusion_increment = next_states - states - model.drift(states, controls) * dt
        brownian = gamma * (slope * diffusion_increment).sum(1) * paths.masks.reshape(num_pairs)
        # v_j at decisions: h_j . (a_j - mu(x_j)), h_j the first-order effect of the held control
        decisions = paths.decision_masks.reshape(-1).nonzero().squeeze(1)
        decision_states = states[decisions]
        mean = rollout_policy.mean_std(decision_states)[0]
        low, high = model.control.bounds(decision_states)
        with torch.enable_grad():
            control = torch.maximum(torch.minimum(mean, high), low).detach().requires_grad_(True)
            # each row depends on its own control only, so the gradient of the sum is per row
            flow = model.reward_rate(decision_states, control) + gamma * (
                slope[decisions] * model.drift(decision_states, control)
            ).sum(1)
            (marginal,) = torch.autograd.grad(flow.sum(), control)  # [D, A]
        held_discount = dt * sum(gamma**step for step in range(paths.action_repeat))
        inside = ((mean > low) & (mean < high)).to(mean.dtype)
        exploration_noise = paths.actions.reshape(num_pairs, -1)[decisions] - mean  # std * xi
        exploration = torch.zeros(num_pairs, device=states.device, dtype=states.dtype)
        exploration = exploration.index_copy(
            0, decisions, held_discount * (marginal * inside * exploration_noise).sum(1)
        )
        return (brownian + exploration).view(num_paths, num_steps), exploration.view(num_paths, num_steps)

    def train_step(self) -> dict[str, torch.Tensor]:
        """One iteration (module docstring); returns metrics as 0-d tensors (no host sync here)."""
        batch = self.collect()
        with torch.no_grad():
            bootstrap = self.bootstrap_value(batch)
            scored = self.score_pairs(batch)
            estimates = self.estimate_advantages(batch, scored, bootstrap)
        policy_out, policy_grad_norm = self.update_policy(batch, scored, estimates)
        metrics = self.update_baseline(batch, scored, estimates)
        metrics.update(self.diagnostics(batch, estimates, policy_out, policy_grad_norm))
        return metrics

    # -- the phases of train_step ------------------------------------------------------------

    def collect(self) -> MCBatch:
        """1. Roll out ``n_trajectories`` paths from uniform initial states (no gradient)."""
        initial = self.model.initial_states(self.n_trajectories, self.generator, device=self.device)
        rollout_policy = self._rollout_policy()
        with torch.no_grad():
            paths = self.simulator.rollout(rollout_policy, initial, self.generator)
        num_pairs = paths.num_paths * paths.num_steps
        return MCBatch(
            paths=paths,
            initial=initial,
            rollout_policy=rollout_policy,
            # flat (path, step) pairs where the policy acted while alive (every alive step
            # when action_repeat = 1)
            decision_index=paths.decision_masks.reshape(-1).nonzero().squeeze(1),
            flat_states=paths.states[:, :-1].reshape(num_pairs, -1),
            flat_actions=paths.actions.reshape(num_pairs, -1),
        )

    def bootstrap_value(self, batch: MCBatch) -> torch.Tensor:
        """2. ``V_boot [B]``: the critic at ``x_T`` for paths alive at the horizon, or 0."""
        paths = batch.paths
        if self.terminal_value == "critic":
            assert self.baseline is not None  # terminal_value is "none" without a baseline
            return self.baseline(paths.final_states) * paths.alive_at_end.to(paths.masks.dtype)
        return torch.zeros(paths.num_paths, device=self.device)

    def score_pairs(self, batch: MCBatch) -> ScoredPairs:
        """3. Which alive pairs are scored: ``policy_steps`` Adam steps, each on its own
        disjoint uniform subsample of ``score_samples`` decision pairs (all pairs split
        evenly when score_samples is 0 or too large). Only these pairs need ``V(x_t)``,
        ``log pi`` and their gradients."""
        num_decisions = batch.decision_index.numel()
        chunk = num_decisions // self.policy_steps
        if 0 < self.score_samples < chunk:
            chunk = self.score_samples
        order = torch.randperm(num_decisions, generator=self.generator, device=self.device)
        used_index = batch.decision_index[order[: chunk * self.policy_steps]]  # [policy_steps * chunk]
        return ScoredPairs(used_index=used_index, chunk=chunk, num_decisions=num_decisions)

    def estimate_advantages(self, batch: MCBatch, scored: ScoredPairs, bootstrap: torch.Tensor) -> AdvantageEstimates:
        """4. The scored pairs' advantages (per path or per step, module docstring), the
        baseline's explained variance before its update, then the normalisation."""
        if self.advantage == "trajectory":
            estimates = self._trajectory_advantages(batch, scored, bootstrap)
        else:
            estimates = self._reward_to_go_advantages(batch, scored, bootstrap)
        if self.baseline is not None:
            # 1 - Var(target - V) / Var(target), before this iteration's baseline update
            estimates.explained_variance = explained_variance(estimates.base, estimates.targets)
        if self.advantage_normalization:
            estimates.advantages = normalize_advantages(estimates.advantages)
        return estimates

    def _trajectory_advantages(
        self, batch: MCBatch, scored: ScoredPairs, bootstrap: torch.Tensor
    ) -> AdvantageEstimates:
        """``A^i = R^i - V(x_0^i)`` for every scored pair of path ``i``; the baseline's targets are ``R^i``."""
        returns = batch.paths.returns(bootstrap)  # R^i, [B]
        base = self.baseline(batch.initial) if self.baseline is not None else torch.zeros_like(returns)
        path_advantage = returns - base  # A^i = R^i - V(x_0^i)
        advantages = path_advantage[scored.used_index // batch.paths.num_steps]
        return AdvantageEstimates(advantages=advantages, returns=returns, targets=returns, base=base)

    def _reward_to_go_advantages(
        self, batch: MCBatch, scored: ScoredPairs, bootstrap: torch.Tensor
    ) -> AdvantageEstimates:
        """``A_t = G_t - V(x_t)`` at the scored pairs (with the martingale control variate and
        the ``advantage_steps`` bootstrap when set); the baseline's targets are their ``G_t``."""
        paths, used_index, baseline = batch.paths, scored.used_index, self.baseline
        payouts, own_term = paths.rewards, None
        if self.control_variate == "martingale":
            noise_terms, exploration = self.control_variate_terms(paths, batch.rollout_policy)
            payouts, own_term = paths.rewards - noise_terms, exploration.reshape(-1)[used_index]
        # G_t, [B, T] (with the control variate: G_t - sum_{j>=t} gamma^{j-t} (w_j + v_j))
        returns_to_go = reward_to_go(payouts, paths.dones, paths.discount, bootstrap)
        returns = returns_to_go[:, 0] if own_term is None else paths.returns(bootstrap)
        targets = returns_to_go.reshape(-1)[used_index]
        base = baseline(batch.flat_states[used_index]) if baseline is not None else torch.zeros_like(targets)
        advantages = targets - base  # A_t = G_t - V(x_t)
        if own_term is not None:
            advantages = advantages + own_term  # the decision's own exploration is the signal
        num_steps = paths.num_steps
        if baseline is not None and 0 < self.advantage_steps < num_steps:
            # A_t -= gamma^n m_{t+n} (G_{t+n} - V(x_{t+n})) where t + n < T
            ahead = used_index % num_steps + self.advantage_steps
            inside = ahead < num_steps
            ahead_index = used_index - used_index % num_steps + ahead.clamp(max=num_steps - 1)
            future_error = returns_to_go.reshape(-1)[ahead_index] - baseline(batch.flat_states[ahead_index])
            weight = paths.discount**self.advantage_steps * paths.masks.reshape(-1)[ahead_index] * inside
            advantages = advantages - weight * future_error
        return AdvantageEstimates(advantages=advantages, returns=returns, targets=targets, base=base)

    def update_policy(
        self, batch: MCBatch, scored: ScoredPairs, estimates: AdvantageEstimates
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """5. ``policy_steps`` Adam steps on the scored pairs; returns the last loss terms
        and gradient norm.

        The first step is exactly on-policy; later ones reuse the batch after small
        parameter moves, as minibatch VPG does. Scaling by N_alive / n makes each
        subsampled loss an unbiased estimate of the full-batch loss
        ``L = -(1/B) sum_i sum_t m_t^i log pi(a_t^i | x_t^i) A_t^i``."""
        chunk = scored.chunk
        scale = scored.num_decisions / chunk / batch.paths.num_paths
        for step in range(self.policy_steps):
            part = slice(step * chunk, (step + 1) * chunk)
            scored_index = scored.used_index[part]
            log_probs = self.policy.log_prob(batch.flat_states[scored_index], batch.flat_actions[scored_index])
            policy_out = reinforce_loss(log_probs.unsqueeze(0), estimates.advantages[part].unsqueeze(0) * scale)
            policy_grad_norm = self._step(policy_out["loss"], self.policy, self.policy_optimizer)
        return policy_out, policy_grad_norm

    def update_baseline(
        self, batch: MCBatch, scored: ScoredPairs, estimates: AdvantageEstimates
    ) -> dict[str, torch.Tensor]:
        """6. ``baseline_steps`` Adam steps: ``MSE(V(x_0), R)`` or ``MSE(V(x_t), G_t)`` over the
        scored pairs, cycling through the policy steps' subsamples; its metrics."""
        baseline, optimizer, chunk = self.baseline, self.baseline_optimizer, scored.chunk
        if baseline is None or optimizer is None:
            return {}
        for step in range(self.baseline_steps):
            if self.advantage == "trajectory":
                regress_states, regress_targets = batch.initial, estimates.returns
            else:
                part = slice((step % self.policy_steps) * chunk, (step % self.policy_steps + 1) * chunk)
                regress_states, regress_targets = batch.flat_states[scored.used_index[part]], estimates.targets[part]
            baseline_out = value_regression_loss(baseline(regress_states), regress_targets)
            baseline_grad_norm = self._step(baseline_out["loss"], baseline, optimizer)
        assert estimates.explained_variance is not None  # estimated whenever there is a baseline
        return {
            "loss/baseline": baseline_out["loss/value"],
            "stats/grad_norm/baseline": baseline_grad_norm,
            "value/explained_variance": estimates.explained_variance,
        }

    def diagnostics(
        self,
        batch: MCBatch,
        estimates: AdvantageEstimates,
        policy_out: dict[str, torch.Tensor],
        policy_grad_norm: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """7. The iteration's returns, advantages, episode lengths, the policy's actions,
        std and entropy at the decisions, gradient norms and learning rates."""
        policy, paths, decision_index, flat_states = self.policy, batch.paths, batch.decision_index, batch.flat_states
        returns, advantages = estimates.returns, estimates.advantages
        with torch.no_grad():
            controls = paths.controls.reshape(paths.num_paths * paths.num_steps, -1)[decision_index]
            std = (
                policy.mean_std(flat_states[decision_index[:1]])[1][0]
                if not policy.state_dependent_std
                else policy.mean_std(flat_states[decision_index])[1].mean(0)
            )
            episode_length = paths.masks.sum(1)
            dividends, issuance = control_kinds(controls)
            std_dividends, std_issuance = control_kinds(std.unsqueeze(0))
            metrics = {
                "loss/policy": policy_out["loss/policy"],
                "return/mean": returns.mean(),
                "return/std": returns.std(),
                "return/min": returns.min(),
                "return/max": returns.max(),
                "stats/advantage_mean": advantages.mean(),
                "stats/advantage_std": advantages.std(),
                "stats/advantage_max": advantages.max(),
                "stats/advantage_min": advantages.min(),
                "episode/length": episode_length.mean(),
                "episode/length_std": episode_length.std(),
                "stats/termination_rate": 1.0 - paths.alive_at_end.float().mean(),
                "policy/mean_action_L": dividends.mean(),
                "policy/mean_action_E": issuance.mean(),
                "policy/std_action_L": std_dividends.mean(),
                "policy/std_action_E": std_issuance.mean(),
                "policy/entropy": policy.entropy(flat_states[decision_index[:4096]]).mean(),
                "stats/grad_norm/policy": policy_grad_norm,
                "stats/lr/policy": torch.tensor(self.policy_optimizer.param_groups[0]["lr"]),
                "stats/alive_steps": paths.masks.sum(),
            }
            if self.baseline_optimizer is not None:
                metrics["stats/lr/baseline"] = torch.tensor(self.baseline_optimizer.param_groups[0]["lr"])
        return metrics


def control_kinds(controls: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The dividend and the issuance columns of GHM-family controls ``[N, A]`` (``A = 2``:
    ``dividend_rate``, ``issuance_rate``; ``2n`` for ``n`` divisions, interleaved), each
    flattened: the diagnostics ``policy/*_action_L|E`` average them."""
    if controls.shape[1] == 2:
        return controls[:, 0], controls[:, 1]
    return controls[:, 0::2].reshape(-1), controls[:, 1::2].reshape(-1)


@dataclass
class MCBatch:
    """One iteration's rollout, flattened for the updates.

    Attributes:
        paths: the simulated paths (``[B, T]``). initial: their initial states ``[B, S]``.
        rollout_policy: the policy the rollout sampled from (the network or its table).
        decision_index: flat indices (``path * T + step``) of the alive decision pairs.
        flat_states: ``[B * T, S]`` the state at each (path, step).
        flat_actions: ``[B * T, A]`` the raw action at each (path, step).
    """

    paths: Trajectories
    initial: torch.Tensor
    rollout_policy: SimulatorPolicy
    decision_index: torch.Tensor
    flat_states: torch.Tensor
    flat_actions: torch.Tensor


@dataclass
class ScoredPairs:
    """The decision pairs the updates score: ``used_index`` ``[policy_steps * chunk]`` flat
    indices, ``chunk`` pairs per policy step, out of ``num_decisions``."""

    used_index: torch.Tensor
    chunk: int
    num_decisions: int


@dataclass
class AdvantageEstimates:
    """The scored pairs' ``advantages`` (``[policy_steps * chunk]``, normalised when set);
    each path's ``returns`` ``[B]``; the baseline's regression ``targets`` (``R^i`` per path,
    or ``G_t`` per scored pair) and its value there, ``base``, before the update;
    ``explained_variance`` of the baseline (``None`` without one)."""

    advantages: torch.Tensor
    returns: torch.Tensor
    targets: torch.Tensor
    base: torch.Tensor
    explained_variance: torch.Tensor | None = None

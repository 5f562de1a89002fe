"""Configs of the GHM system, importable without torch.

``pglab train ghm --help``, ``pglab solve ghm --help``, ``pglab evaluate GHM_CHECKPOINT
--help``, ``pglab validate --help`` and ``pglab compare --help`` build their flag lists
from this module alone. The model parameters (:class:`GHMParams`,
:class:`CreditLineParams`) live here too, since the trainer's and the solver's configs
validate them; :mod:`pglab.envs.ghm` and :mod:`pglab.envs.ghm_credit_line` re-export them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import tyro

from pglab.errors import ConfigError
from pglab.validation import (
    check_choice,
    check_device,
    check_finite,
    check_int,
    check_int_sequence,
    check_memory,
    check_non_negative,
    check_path_fields,
    check_positive,
    check_range,
    check_seed,
    check_threads,
)

if TYPE_CHECKING:  # pglab.configs.ghm_multi imports GHMParams from this module
    from pglab.configs.ghm_multi import OUGHMParams, RegimeGHMParams

# Checkpoint kinds of the three solvers (``GHMTrainConfig.kind``).
TARGET_PCT = 98.0
"""The GHM solvers' target: >= 98 % of V* (the FD optimum) at every initial cash."""
THRESHOLD_TOLERANCE = 0.03
"""How far (in cash) a learned dividend barrier or issuance point may lie from the FD one,
both read by the same half-max threshold rule, to count as found."""

GHM_KINDS = ("ghm-mc", "ghm-pathwise", "ghm-actor-critic")
# The models of ``pglab train ghm --model`` and the flags only one of them reads (besides
# credit-line's credit_limit and credit_spread, which keep their defaults elsewhere).
MODELS = ("ghm", "credit-line", "divisions", "regimes", "ou")
ONE_STATE_MODELS = ("ghm", "credit-line")
"""The models whose state is one variable (pglab validate, pglab compare, the policy figure)."""
MODEL_FIELDS: dict[str, tuple[str, ...]] = {
    "regimes": ("mu_1", "sigma_1", "lambda_dilution_1", "q01", "q10", "initial_regime_1_probability"),
    "ou": ("kappa", "sigma_mu", "correlation", "initial_mu_spread"),
    "divisions": ("divisions",),
}
MAX_DIVISIONS = 64
"""The most divisions --model divisions takes (a joint policy of 128 controls)."""


# -- memory estimates -----------------------------------------------------------------------------
# Lower bounds of the memory a run takes, from its config alone; a config whose estimate
# exceeds the memory the machine has available is refused (pglab.validation.check_memory).

FD_POINTS_PER_CONTROL = 21
"""Points per control of the finite-difference solver's candidate grid (pglab.hjb.fd); both
GHM models have two controls, so every node weighs 21**2 = 441 candidates."""
FD_ARRAYS_PER_CANDIDATE = 10
"""float64 arrays of shape [candidates, nodes] alive at once in a policy iteration (the
reward and two transition rates, the lists they are stacked from, the Hamiltonian's
temporaries): measured 9.2 x 8 bytes per node and candidate at 20,000-80,000 nodes."""


def rollout_floats_per_step(dims: tuple[int, int, int] = (1, 1, 2)) -> int:
    """float32 numbers a rollout keeps per path and time step for ``dims = (d, w, A)``
    states, Brownian motions and controls: ``w + d + 3 A + 3`` (the state and action noise,
    state, action, control, reward, mask and done); the solvers' gradients need more."""
    states, noises, controls = dims
    return noises + states + 3 * controls + 3


ROLLOUT_FLOATS_PER_STEP = rollout_floats_per_step()
"""float32 numbers a GHM rollout keeps per path and time step (1 state, 2 controls): 11."""
EVAL_BYTES_PER_PATH = 40
"""Bytes per simulated path of the final evaluation: state, owner index, float64 total,
alive flag, tail bound."""


def fd_grid_bytes(nodes: int, controls: int = 2) -> int:
    """Peak memory of one FD solve on ``nodes`` intervals (pglab.hjb.fd.solve_hjb_1d):
    ``nodes x 21**controls x FD_ARRAYS_PER_CANDIDATE x 8`` bytes (the extrapolated
    solution's second, coarser grid is solved after the first)."""
    return nodes * FD_POINTS_PER_CONTROL**controls * FD_ARRAYS_PER_CANDIDATE * 8


def rollout_bytes(n_trajectories: int, horizon: float, dt: float, dims: tuple[int, int, int] = (1, 1, 2)) -> int:
    """One training iteration's rollout: ``n_trajectories x (T / dt + 1) x`` the floats per
    step of :func:`rollout_floats_per_step` (11 for one state), float32."""
    return n_trajectories * (int(round(horizon / dt)) + 1) * rollout_floats_per_step(dims) * 4


RESIDUAL_ARRAYS_PER_CANDIDATE = 4
"""float64 arrays of shape [points, candidates] alive at once when pglab validate maximises
the Hamiltonian over the 21**2 control candidates at every grid point."""


def residual_bytes(points: int, controls: int = 2) -> int:
    """pglab validate's ``max_u H`` on ``points`` states: ``points x 21**controls x 4 x 8`` bytes."""
    return points * FD_POINTS_PER_CONTROL**controls * RESIDUAL_ARRAYS_PER_CANDIDATE * 8


def evaluation_bytes(paths: int, cash_levels: int) -> int:
    """A simulated evaluation of ``paths`` paths per initial cash level, all at once."""
    return paths * cash_levels * EVAL_BYTES_PER_PATH


# -- the model ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FirmTerms:
    """The terms every GHM model shares, validated in one place: the rates, the control
    bounds and the law of the initial cash. A model's parameters add its cash-flow
    dynamics and issuance cost (:class:`GHMParams`, and those of
    :mod:`pglab.configs.ghm_multi`)."""

    r: float = 0.05
    """interest rate earned on cash"""
    rho: float = 0.1
    """shareholders' discount rate (must exceed r)"""
    a_L_max: float = 1.0
    """maximal dividend rate"""
    a_E_max: float = 1.0
    """maximal equity-issuance rate"""
    initial_cash_low: float = 0.0
    """initial cash ~ Uniform[initial_cash_low, initial_cash_high]"""
    initial_cash_high: float = 2.0
    """upper end of the initial-cash distribution"""

    @property
    def liquidation_cash(self) -> float:
        """Cash at which the firm is liquidated: 0 (a variant of the model with another
        liquidation point overrides it; the model's state is ``cash - liquidation_cash``)."""
        return 0.0

    def terms(self) -> dict[str, float]:
        """The shared terms by name (to build another model's parameters from these)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(FirmTerms)}

    def _check_terms(self) -> None:
        """``r < rho``, non-negative control bounds and
        ``liquidation_cash <= initial_cash_low <= initial_cash_high``."""
        check_finite("r", self.r)
        check_positive("rho", self.rho)
        if self.rho <= self.r:
            # rho <= r makes hoarding cash forever optimal and the value unbounded.
            raise ConfigError("rho", self.rho, f"must exceed r={self.r} (otherwise the value is unbounded)")
        check_non_negative("a_L_max", self.a_L_max)
        check_non_negative("a_E_max", self.a_E_max)
        lowest = self.liquidation_cash
        check_finite("initial_cash_low", self.initial_cash_low)
        if self.initial_cash_low < lowest:
            raise ConfigError(
                "initial_cash_low", self.initial_cash_low, f"must be >= {lowest:g} (below it the firm is liquidated)"
            )
        check_finite("initial_cash_high", self.initial_cash_high)
        if self.initial_cash_high < self.initial_cash_low:
            raise ConfigError(
                "initial_cash_high", self.initial_cash_high, f"must be >= initial_cash_low={self.initial_cash_low}"
            )


@dataclass(frozen=True)
class GHMParams(FirmTerms):
    """Parameters of the GHM model (the default calibration): the shared terms of
    :class:`FirmTerms` and the cash-flow dynamics."""

    mu: float = 0.1
    """cash-flow drift (per unit time)"""
    sigma: float = 0.2
    """cash-flow volatility"""
    lambda_dilution: float = 0.1
    """proportional cost of issuing equity"""

    def __post_init__(self):
        check_finite("mu", self.mu)
        check_non_negative("sigma", self.sigma)
        check_non_negative("lambda_dilution", self.lambda_dilution)
        self._check_terms()


@dataclass(frozen=True)
class CreditLineParams(GHMParams):
    """GHM's parameters (same defaults, validated the same way) plus the credit line; cash,
    and so ``initial_cash_low``, may be negative down to ``-credit_limit``."""

    credit_limit: float = 0.25
    """size L of the credit line: cash may fall to -L before liquidation"""
    credit_spread: float = 0.05
    """extra interest on the drawn balance (drawn credit costs r + credit_spread)"""

    def __post_init__(self):
        check_non_negative("credit_limit", self.credit_limit)
        check_non_negative("credit_spread", self.credit_spread)
        super().__post_init__()

    @property
    def liquidation_cash(self) -> float:
        """The firm is liquidated when the line is exhausted, at cash ``-credit_limit``."""
        return -self.credit_limit


# -- pglab train ghm ----------------------------------------------------------------------------

# Defaults that differ between solvers (a field left at None takes its solver's value).
# mc: the score-function gradient needs held actions (signal-to-noise grows with the
# decision interval) and many small steps; the pathwise gradients (pathwise, actor-critic)
# have little variance, so they take larger steps, decide every dt and need ~3x fewer
# iterations, each ~3x dearer (the backward pass runs through the whole rollout).
PATHWISE_DEFAULTS: dict[str, Any] = dict(
    absorption="grid",
    control_variate="none",
    critic_boundary="none",
    n_trajectories=1000,
    n_iterations=350,
    lr_policy=1e-3,
    lr_final_fraction=0.2,
    baseline_steps=4,
    lr_baseline=1e-3,
    score_samples=25_000,
    action_repeat=1,
)
SOLVER_DEFAULTS: dict[str, dict[str, Any]] = {
    # mc (docs/ghm.md "Defaults across calibrations"): bridge absorption
    # (the continuously monitored model that V* solves), 1,000 iterations, rates decaying to 5%.
    "mc": dict(
        n_iterations=1000,
        n_trajectories=500,
        lr_policy=3e-4,
        lr_final_fraction=0.05,
        baseline_steps=1,
        lr_baseline=1e-3,
        score_samples=0,
        action_repeat=5,
        control_variate="martingale",
        critic_boundary="none",
        absorption="bridge",
    ),
    "pathwise": PATHWISE_DEFAULTS,
    "actor-critic": dict(PATHWISE_DEFAULTS),  # the same pathwise gradient, plus a critic
}


MC_SEVERAL_PARTS_CRITIC: dict[str, Any] = dict(baseline_steps=8, lr_baseline=3e-3)
"""``--algo mc``'s critic on a firm of N >= 2 divisions: eight Adam steps per iteration at
3e-3 instead of one at 1e-3. The firm's value is about N times a division's and rises
several-fold as the policy learns to pay; a critic moved by one small step per iteration
trails it by a factor of 2-5 for hundreds of iterations (N = 8, seed 1: mean return-to-go
4.8 against a critic of 2.7 after 40 iterations), its slope stays near 0 and the martingale
control variate, whose coefficient it is, removes almost nothing (the advantages' variance
3.5, against 0.017 with this critic: docs/ghm-models.md)."""

REFINABLE_MODELS = ("ghm", "regimes", "ou")
"""the models whose policy ``--refine_thresholds`` fits as a threshold rule in cash: their
optimum is one (in each regime), or for ``ou`` thresholds that move little with the
profitability (the FD barrier 0.307-0.397 over its mean +- 2 stationary std at the defaults),
fitted as one rule for every profitability"""

MC_REFERENCE_RHO = 0.1
"""the discount rate at which the mc iteration budgets were chosen"""

MC_REFINED_ITERATIONS = 300
"""``--algo mc``'s iteration budget at ``MC_REFERENCE_RHO`` when the threshold refinement
follows (the default): the refinement needs a critic and a rough start, not the network's
own barrier (docs/ghm.md, "The iteration budget"). Without the refinement the budget is the
solver default's 1,000, which the network's own rule needs to reach 98% of ``V*``."""


def mc_iterations(rho: float, refined: bool = True, parts: int = 1) -> int:
    """``--algo mc``'s default iteration budget: ``300 * max(1, 0.1 / rho)`` (rounded) with the
    threshold refinement, ``1000 * max(1, 0.1 / rho)`` without it, times the number of
    independently controlled ``parts`` (a firm of N divisions: N).

    The firm's return is one number, so each division's controls are scored against the
    noise of all N divisions' futures, and the signal-to-noise ratio of each control's
    gradient falls with N (docs/ghm-models.md, "Why N divisions learn slowly with mc"): the
    budget grows in proportion. The runs at this budget and at 1,000 iterations are in
    ``results/ghm-multi-divisions.json`` and ``results/ghm-multi-divisions-1000.json``."""
    base = MC_REFINED_ITERATIONS if refined else SOLVER_DEFAULTS["mc"]["n_iterations"]
    return int(round(base * max(1.0, MC_REFERENCE_RHO / rho))) * parts


def final_eval_dt(config: GHMTrainConfig) -> float:
    """The final evaluation's time step: ``eval_dt``, or a quarter of the training ``dt``."""
    return config.eval_dt if config.eval_dt is not None else config.dt / 4.0


@dataclass(frozen=True)
class GHMTrainConfig:
    """Configuration of ``pglab train ghm``.

    Flags take either spelling, ``--n_iterations`` or ``--n-iterations``."""

    algo: Literal["mc", "pathwise", "actor-critic"] = "mc"
    """solver: Monte Carlo policy gradient (mc), pathwise, or actor-critic"""
    # -- training ----------------------------------------------------------------------
    n_iterations: int | None = None
    """training iterations (default per solver, see SOLVER_DEFAULTS: mc 1000 x max(1, 0.1 /
    rho), i.e. 1000 at the default rho = 0.1 and more for a patient owner, 300 x max(1, 0.1 /
    rho) before the threshold refinement, N times as many on N divisions; pathwise and
    actor-critic 350)"""
    n_trajectories: int | None = None
    """simulated paths per iteration (default mc 500, pathwise and actor-critic 1000)"""
    lr_policy: float | None = None
    """policy learning rate (Adam; default mc 3e-4, pathwise/actor-critic 1e-3)"""
    lr_baseline: float | None = None
    """baseline / critic learning rate (Adam; default 1e-3, mc on N >= 2 divisions 3e-3)"""
    lr_final_fraction: float | None = None
    """learning rates decay linearly to this fraction of their initial value by the last
    iteration (1.0: constant); the decay settles the policy, whose quality otherwise
    wanders by a few percent from one evaluation to the next (default mc 0.05,
    pathwise/actor-critic 0.2)"""
    max_grad_norm: float = 0.5
    """gradient-norm clip for both networks"""
    advantage: Literal["trajectory", "reward_to_go"] = "reward_to_go"
    """per-path A(x0) = R - V(x0) (the note's form) or per-step G_t - V(x_t)"""
    advantage_horizon: float = 0.0
    """--algo mc, reward_to_go: the advantage uses the simulated payout for this much time
    and the critic beyond it, A_t = sum_{j<n} gamma^j r_{t+j} + gamma^n V(c_{t+n}) - V(c_t),
    n = round(advantage_horizon / dt) (0: to the horizon T, A_t = G_t - V(c_t))"""
    control_variate: Literal["none", "martingale"] | None = None
    """--algo mc, reward_to_go: subtract from each return the Brownian and later-exploration
    noise that the action cannot explain, with the critic's slope as coefficient (mean zero
    whatever the critic: unbiased; docs/ghm.md) -- from the advantages and the baseline's
    targets; none: the plain reward-to-go (default mc martingale, others none)"""
    advantage_normalization: bool = True
    """standardise advantages over the batch"""
    # FlagCreatePairsOff: the one flag is --no-baseline (no --baseline / --no-no-baseline pair)
    no_baseline: Annotated[bool, tyro.conf.FlagCreatePairsOff] = False
    """train without a baseline (plain REINFORCE, for comparison; --algo mc only)"""
    terminal_value: Literal["critic", "none"] = "critic"
    """bootstrap paths alive at T with exp(-rho T) V(c_T) from the critic, or not"""
    baseline_steps: int | None = None
    """baseline / critic gradient steps per iteration (default mc 1, pathwise/actor-critic 4,
    mc on N >= 2 divisions 8)"""
    score_samples: int | None = None
    """alive (state, action) pairs per iteration scored by the policy loss and regressed by the
    reward-to-go baseline per gradient step (uniform subsample, unbiased; 0: all, ~45,000 decision
    pairs for mc at 500 paths); pathwise/actor-critic: (state, target) pairs per critic step
    (default mc 0, others 25,000; mc 8,000 with 1,000 iterations is ~1.5x faster but lost 1.5-5
    points of V* at c0 = 0.25)"""
    policy_steps: int = 4
    """policy gradient steps per iteration, each on a disjoint subsample of the batch"""
    policy_table_points: int = 4001
    """mc training rollouts and the evaluations of the deterministic policy read the policy
    from a table of this many cash levels (rebuilt every iteration; linear interpolation, the
    network itself outside the table) instead of running the network on every path at every
    step (0: always the network; the policy gradient's score always uses the network)"""
    clip_sharpness: float = 50.0
    """pathwise: sharpness k (high - low) of the smooth clip used in training (within
    ln 2 / k of the hard clip)"""
    gae_lambda: float = 0.995
    """actor-critic: lambda of the critic's TD(lambda) targets (1: Monte Carlo, 0: one-step TD)"""
    hjb_weight: float = 1.0
    """actor-critic: weight of the mean squared HJB residual in the critic loss (the note's
    "MC + TD + HJB" critic; 0: a TD(lambda) critic alone)"""
    td_final_fraction: float = 1.0
    """actor-critic: the TD(lambda) regression's weight in the critic loss decays linearly from 1
    to this by the last iteration (1: constant). With --critic_boundary hard and the optimal
    residual, 0 hands the critic to the HJB alone at the end: TD starts it near the value, the
    residual then removes TD's bias (its targets are returns of the current policy, below V*)"""
    hjb_samples: int = 4096
    """actor-critic: states per critic step at which the HJB residual is evaluated"""
    hjb_residual: Literal["optimal", "policy"] = "optimal"
    """actor-critic: the residual of the optimal-control HJB, rho V - max_u H (the critic
    solves for V*), or of the current policy, rho V - H(pi) (the critic evaluates V^pi)"""
    hjb_c_min: float | None = 0.05
    """actor-critic: the HJB residual's states are drawn uniformly on [hjb_c_min, hjb_c_max]
    each critic step (collocation points; above the boundary layer at the liquidation point,
    which a plain network does not resolve; with --critic_boundary hard, whose network does,
    0 collocates from the liquidation point); None: at the batch's visited states instead. In
    the model's state: cash for ghm, liquidity = cash + credit_limit for credit-line"""
    hjb_c_max: float | None = None
    """actor-critic: upper end of the collocation interval, in the model's state (default
    1.25 x the state of initial_cash_high: 1.25 initial_cash_high for ghm)"""
    critic_boundary: Literal["hard", "none"] | None = None
    """the value network: hard, V = (1 - exp(-x / l)) N(x), so V = 0 at the liquidation point
    exactly and the boundary layer of width l = diffusion^2 / (2 max drift) there (GHM 0.018)
    is representable; none: a plain MLP (the default; hard did not lower the actor-critic's
    HJB residual or value error in the solver, docs/ghm-validation.md)"""
    # -- networks ----------------------------------------------------------------------
    policy_hidden_dims: tuple[int, ...] = (64, 64)
    """hidden layer sizes of the policy"""
    baseline_hidden_dims: tuple[int, ...] = (64, 64)
    """hidden layer sizes of the baseline / critic"""
    activation: Literal["tanh", "relu", "elu", "silu", "gelu"] = "tanh"
    """hidden activation"""
    state_dependent_std: bool = False
    """learn the policy's standard deviation as a function of cash"""
    log_std_init: float = -1.0
    """initial log standard deviation of the policy (-1: sigma = 0.37 of a rate of at most 1)"""
    initial_rate_fraction: float = 0.1
    """the untrained policy's mean rates as a fraction of their maxima (a cautious start that
    retains cash, as policy iteration starts from the no-payout policy; the default
    softplus(0) = 0.69 pays out and issues at once and falls into the pay-everything trap)"""
    mean_shift_fraction: float = 0.5
    """policy mean = softplus(net) - this fraction of each maximal rate: lets the mean go
    below 0 so the clipped exploration noise stops leaking dividends and issuance where
    the optimal rate is 0"""
    min_std: float = 1e-3
    """lower clamp of the policy's standard deviation"""
    max_std: float = 2.0
    """upper clamp of the policy's standard deviation"""
    final_max_std: float | None = 0.1
    """if set, the upper clamp of the standard deviation decays geometrically from its
    initial value exp(log_std_init) to this by the last iteration (an exploration schedule:
    the deterministic policy that is evaluated is the limit of the stochastic one that is
    trained; None: a constant clamp). --algo mc only: the pathwise solvers' policies are
    deterministic"""
    # -- simulation --------------------------------------------------------------------
    dt: float = 0.01
    """Euler-Maruyama time step"""
    T: float = 5.0
    """simulated horizon per iteration (the problem itself is infinite-horizon)"""
    action_repeat: int | None = None
    """training rollouts draw a new action every this many steps and hold it (default mc 5,
    pathwise/actor-critic 1; evaluation
    always applies the policy every dt)"""
    absorption: Literal["grid", "bridge"] | None = None
    """liquidation in mc's training rollouts and in every simulated evaluation: grid, when the
    cash is <= 0 at a grid time (the Euler chain, which survives excursions below 0 between
    grid times); bridge, also between grid times with the Brownian-bridge probability
    exp(-2 c c' / (sigma^2 dt)) (the continuously monitored model that the FD reference V*
    solves; the pathwise solvers always weight by it in training). Default mc bridge
    (with 1,000 iterations it fixed the issuance point at high sigma without the loss at the
    default calibration that it had at 800; docs/ghm.md), pathwise/actor-critic grid"""
    simulator: Literal["batched", "process", "ray"] = "batched"
    """mc: where training rollouts run: one batched process, a pool of worker processes, or
    Ray tasks (bit-identical results; see docs/ghm-parallel.md for when it pays)"""
    n_workers: int | None = None
    """workers of --simulator process|ray (default min(cpu_count, n_trajectories // 10))"""
    ray_address: str | None = None
    """--simulator ray: connect to this Ray cluster ("auto" or host:port; default: start a local one)"""
    final_action_repeat: int | None = None
    """if set, the decision interval shrinks geometrically from action_repeat to this by the
    last iteration (a long interval gives the score-function gradient its signal early on;
    the policy that is optimal for a held action acts too early, so finish near every dt)"""
    # -- GHM model ---------------------------------------------------------------------
    # Nested, but its flags and YAML keys keep their plain names: --mu, --sigma, --r,
    # --lambda-dilution, --rho, --a-L-max, --a-E-max, --initial-cash-low, --initial-cash-high.
    params: Annotated[GHMParams, tyro.conf.OmitArgPrefixes] = field(default_factory=GHMParams)
    """the model: drift, volatility, rates, costs, rate bounds and initial cash"""
    model: Literal["ghm", "credit-line", "divisions", "regimes", "ou"] = "ghm"
    """the model trained on: ghm (pglab.envs.ghm); credit-line, the same firm with a credit
    line (pglab.envs.ghm_credit_line; its state is liquidity = cash + credit_limit, and cash,
    eval_cash included, may fall to -credit_limit); divisions, N such firms liquidated one by
    one and valued together (pglab.envs.ghm_divisions; state [B, N]); regimes, the firm in two
    regimes of financing conditions (pglab.envs.ghm_regimes; state cash, regime); ou, the firm
    with a mean-reverting profitability (pglab.envs.ghm_ou; state cash, mu). docs/ghm-models.md"""
    credit_limit: float = 0.25
    """--model credit-line: size L of the credit line (cash may fall to -L before liquidation)"""
    credit_spread: float = 0.05
    """--model credit-line: extra interest on the drawn balance (drawn credit costs r + credit_spread)"""
    divisions: int = 2
    """--model divisions: the number N of divisions, each a GHM firm with the parameters above"""
    mu_1: float | None = None
    """--model regimes: cash-flow drift in regime 1 (regime 0 has --mu, --sigma, --lambda_dilution;
    default RegimeGHMParams', 0.05)"""
    sigma_1: float | None = None
    """--model regimes: cash-flow volatility in regime 1 (default 0.2)"""
    lambda_dilution_1: float | None = None
    """--model regimes: equity-issuance cost in regime 1 (default 0.5)"""
    q01: float | None = None
    """--model regimes: intensity of the switch from regime 0 to regime 1 (default 0.1)"""
    q10: float | None = None
    """--model regimes: intensity of the switch from regime 1 to regime 0 (default 0.5)"""
    initial_regime_1_probability: float | None = None
    """--model regimes: probability that a training path starts in regime 1 (default 0.5)"""
    kappa: float | None = None
    """--model ou: speed of mean reversion of the profitability, whose long-run mean is --mu (default 0.5)"""
    sigma_mu: float | None = None
    """--model ou: volatility of the profitability (default 0.05)"""
    correlation: float | None = None
    """--model ou: correlation of the cash and profitability shocks (default 0.5)"""
    initial_mu_spread: float | None = None
    """--model ou: training paths start with mu uniform on mu -+ this many stationary standard
    deviations (default 1)"""
    # -- logging -----------------------------------------------------------------------
    log_dir: Path | None = None
    """run directory (default runs/ghm-<algo>-<YYYYmmdd-HHMMSS>)"""
    log_interval: int = 10
    """iterations between metric rows"""
    eval_interval: int = 100
    """iterations between plots and quick value checks"""
    plots: bool = True
    """draw the policy figure against the FD optimum at each quick check of a one-state model
    (plots/policy_value_iter_N.png; --no-plots: the quick checks still log their numbers to eval.csv)"""
    save_interval: int = 100
    """iterations between checkpoints (the last iteration is always saved)"""
    keep_checkpoints: int = 3
    """numbered checkpoints kept (the newest; checkpoint_latest.pt always points at the last); 0 keeps all"""
    eval_quick_paths: int = 0
    """paths per initial cash of a simulated quick check during training (0: off; every quick
    check logs the policy's exact FD value, exact/pct_optimal_*, which has no noise)"""
    # -- final evaluation ----------------------------------------------------------------
    eval_cash: tuple[float, ...] = (0.25, 0.5, 1.0, 1.5)
    """initial cash levels of the final table (a model with more states: the levels of its
    evaluation points, e.g. every division at each level and the levels mixed across the
    divisions, each level in each regime; docs/ghm-models.md)"""
    eval_paths: int = 2_000
    """paths per initial cash in the final evaluation (the simulation subtracts the Brownian
    noise with V*' as coefficient: unbiased, and with 2,000 paths a standard error of ~0.1-0.2
    points of V* for a near-optimal policy, where 10,000 plain paths gave 0.3-0.4)"""
    eval_tail_tolerance: float = 0.001
    """simulate until the discounted tail is below this fraction of the value (the simulated
    value leaves the tail out, so it is low by at most this fraction; 0.005 cost bridge-trained
    policies up to ~0.45 points of V* against their exact value)"""
    eval_dt: float | None = None
    """time step of the final evaluation's simulation (default dt / 4). The policy is applied
    every step, so the simulated value carries a time-step error that shrinks with the step:
    at the training dt (0.01) it read 0.2-0.5 points of V* below the exact, continuously
    applied value at c0 = 0.25 on high-volatility calibrations, at dt / 4 0.1-0.2 (docs/ghm.md)"""
    final_eval: bool = True
    """run the final evaluation after training (--no-final-eval: skip it)"""
    refine_thresholds: bool | None = None
    """after the last iteration, replace the deterministic policy by the threshold rule (a
    dividend barrier and an issuance point) with the highest simulated value, searched from
    the network's thresholds on common random numbers, with the critic at the horizon
    (pglab.algos.ghm_refine; docs/ghm.md); for --model regimes one rule per regime, for --model
    ou one rule in cash at every profitability. --model ghm, regimes or ou with a critic;
    default on for --algo mc, off for pathwise and actor-critic"""
    # -- reference ---------------------------------------------------------------------
    fd_nodes: int = 24_000
    """grid intervals of the finite-difference reference"""
    fd_x_max: float = 6.0
    """upper end of the finite-difference grid"""
    # -- other -------------------------------------------------------------------------
    seed: int = 42
    """random seed (same seed + config on the CPU: bit-identical run)"""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N"""
    threads: int = 1
    """torch CPU threads (0: torch's default, one per core). 1 by default: an iteration's
    tensors are small (500 paths; matrices of a few thousand rows), so a second thread
    gains little on an idle machine and, measured, slows an iteration down several-fold as
    soon as another process wants a core (docs/ghm.md, "Threads")"""
    resume: Path | None = None
    """continue the run in this directory (or from this checkpoint) from its latest checkpoint;
    see docs/ghm.md for exactly what a resume reproduces"""

    def __post_init__(self):
        check_path_fields(self)
        check_choice("algo", self.algo, ("mc", "pathwise", "actor-critic"))
        self._resolve_solver_defaults()
        self._check_training()
        self._check_actor_critic()
        params = self._check_model()
        self._check_networks()
        self._check_simulation()
        self._check_evaluation(params)

    def _resolve_solver_defaults(self) -> None:
        """Fields left at None take the solver's default (frozen: set through object.__setattr__)."""
        if self.control_variate is None and (self.no_baseline or self.advantage != "reward_to_go"):
            # the control variate needs the critic's slope and per-step returns
            object.__setattr__(self, "control_variate", "none")
        if self.refine_thresholds is None:  # where it applies: a GHM policy (in each regime) and its critic
            refinable = self.algo == "mc" and self.model in REFINABLE_MODELS and not self.no_baseline
            object.__setattr__(self, "refine_thresholds", refinable)
        if self.algo == "mc" and self.n_iterations is None:
            # A time scale from the model: the gain from paying a dividend sooner,
            # which is what moves the barrier, is proportional to rho, so at a low discount
            # rate each iteration's gradient says less and the barrier, which starts far above
            # the optimum, comes down slowly (rho 0.07: stuck 0.3 above the FD barrier after
            # 1,000 iterations on one seed of two). The budget grows as 1 / rho below the
            # calibration the defaults were chosen at; above it, it stays as chosen.
            # (an invalid --divisions is reported by _check_model, naming it)
            valid = self.model == "divisions" and isinstance(self.divisions, int) and self.divisions >= 1
            parts = self.divisions if valid else 1
            budget = mc_iterations(self.params.rho, bool(self.refine_thresholds), parts)
            object.__setattr__(self, "n_iterations", budget)
        several_parts = self.algo == "mc" and self.model == "divisions" and self.divisions > 1
        for name, value in {**SOLVER_DEFAULTS[self.algo], **(MC_SEVERAL_PARTS_CRITIC if several_parts else {})}.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)

    def _check_training(self) -> None:
        """The budget, learning rates, advantages and the policy-gradient options."""
        assert self.n_iterations is not None and self.n_trajectories is not None  # _resolve_solver_defaults
        assert self.lr_policy is not None and self.lr_final_fraction is not None and self.lr_baseline is not None
        assert self.baseline_steps is not None and self.score_samples is not None
        check_int("n_iterations", self.n_iterations, minimum=1)
        check_int("n_trajectories", self.n_trajectories, minimum=2)
        check_positive("lr_policy", self.lr_policy)
        check_positive("lr_baseline", self.lr_baseline)
        check_range("lr_final_fraction", self.lr_final_fraction, 0.0, 1.0)
        if self.final_max_std is not None:
            check_positive("final_max_std", self.final_max_std)
            if not self.min_std < self.final_max_std:
                raise ConfigError("final_max_std", self.final_max_std, f"must exceed min_std={self.min_std}")
        check_positive("max_grad_norm", self.max_grad_norm)
        check_choice("advantage", self.advantage, ("trajectory", "reward_to_go"))
        check_choice("terminal_value", self.terminal_value, ("critic", "none"))
        check_choice("control_variate", self.control_variate, ("none", "martingale"))
        check_choice("critic_boundary", self.critic_boundary, ("hard", "none"))
        check_choice("absorption", self.absorption, ("grid", "bridge"))
        if self.control_variate == "martingale":
            if self.algo != "mc":
                raise ConfigError("control_variate", "martingale", f"is for --algo mc, not --algo {self.algo}")
            if self.no_baseline:
                raise ConfigError("control_variate", "martingale", "needs the baseline's slope (drop --no-baseline)")
            if self.advantage != "reward_to_go":
                raise ConfigError(
                    "control_variate", "martingale", f"needs --advantage reward_to_go (got {self.advantage})"
                )
        check_non_negative("advantage_horizon", self.advantage_horizon)
        check_int("baseline_steps", self.baseline_steps, minimum=1)
        check_int("score_samples", self.score_samples, minimum=0)
        check_int("policy_steps", self.policy_steps, minimum=1)
        if self.policy_table_points != 0:
            check_int("policy_table_points", self.policy_table_points, minimum=2)
        check_positive("clip_sharpness", self.clip_sharpness)
        if self.no_baseline and self.algo != "mc":
            raise ConfigError(
                "no_baseline", True, f"--algo {self.algo} needs its critic (no_baseline is for --algo mc)"
            )
        if self.refine_thresholds and (self.model not in REFINABLE_MODELS or self.no_baseline):
            where = f"--model {self.model}" if self.model not in REFINABLE_MODELS else "--no-baseline"
            raise ConfigError(
                "refine_thresholds",
                True,
                f"needs --model {' or '.join(REFINABLE_MODELS)} and the critic (got {where}); "
                "use --refine_thresholds False",
            )

    def _check_actor_critic(self) -> None:
        """The critic's TD(lambda) and HJB-residual settings."""
        check_range("gae_lambda", self.gae_lambda, 0.0, 1.0)
        check_range("td_final_fraction", self.td_final_fraction, 0.0, 1.0)
        if self.td_final_fraction != 1.0 and self.algo != "actor-critic":
            raise ConfigError(
                "td_final_fraction", self.td_final_fraction, f"is for --algo actor-critic, not --algo {self.algo}"
            )
        check_non_negative("hjb_weight", self.hjb_weight)
        check_int("hjb_samples", self.hjb_samples, minimum=1)
        check_choice("hjb_residual", self.hjb_residual, ("optimal", "policy"))
        if self.hjb_c_min is not None:
            check_non_negative("hjb_c_min", self.hjb_c_min)
        if self.hjb_c_max is not None:
            check_positive("hjb_c_max", self.hjb_c_max)
            if self.hjb_c_min is not None and self.hjb_c_max <= self.hjb_c_min:
                raise ConfigError("hjb_c_max", self.hjb_c_max, f"must exceed hjb_c_min={self.hjb_c_min}")

    def _check_model(self) -> GHMParams | RegimeGHMParams | OUGHMParams:
        """The model and its parameters (validated by their own class); returns them. Then
        the HJB collocation interval, whose default end comes from the model."""
        check_choice("model", self.model, MODELS)
        check_non_negative("credit_limit", self.credit_limit)
        check_non_negative("credit_spread", self.credit_spread)
        check_int("divisions", self.divisions, minimum=1)
        check_range("divisions", self.divisions, 1, MAX_DIVISIONS)
        for model, names in MODEL_FIELDS.items():
            for name in names:
                if model != self.model and getattr(self, name) not in (None, getattr(GHMTrainConfig, name)):
                    raise ConfigError(name, getattr(self, name), f"is a parameter of --model {model}")
        if self.model not in ("ghm", "credit-line") and self.critic_boundary == "hard":
            raise ConfigError("critic_boundary", "hard", f"needs a model with one state (--model {self.model})")
        if not isinstance(self.params, GHMParams):  # GHMParams validates its own fields
            raise ConfigError("params", self.params, "must be a GHMParams")
        params = self.model_params()  # validates the model's own parameters (credit_limit, ...)
        interval = self.hjb_interval()  # (hjb_c_min, its default upper end) unless hjb_c_max is given
        if interval is not None and self.hjb_c_max is None and interval[1] <= interval[0]:
            raise ConfigError(
                "hjb_c_min",
                self.hjb_c_min,
                f"must be below the default hjb_c_max = 1.25 x the state of "
                f"initial_cash_high = {interval[1]:g} (or give hjb_c_max)",
            )
        return params

    def _check_networks(self) -> None:
        """Layer sizes, the policy's initial mean and its std's clamps."""
        check_int_sequence("policy_hidden_dims", self.policy_hidden_dims)
        check_int_sequence("baseline_hidden_dims", self.baseline_hidden_dims)
        check_range("log_std_init", self.log_std_init, -20.0, 5.0)
        check_range("initial_rate_fraction", self.initial_rate_fraction, 0.0, 1.0, low_inclusive=False)
        check_range("mean_shift_fraction", self.mean_shift_fraction, 0.0, 10.0)
        check_positive("min_std", self.min_std)
        check_positive("max_std", self.max_std)
        if self.min_std >= self.max_std:
            raise ConfigError("min_std", self.min_std, f"must be < max_std={self.max_std}")

    def _check_simulation(self) -> None:
        """The time grid, the decision interval and its schedule, and the simulator backend."""
        assert self.action_repeat is not None  # _resolve_solver_defaults
        check_positive("dt", self.dt)
        check_positive("T", self.T)
        if self.dt >= self.T:
            raise ConfigError("dt", self.dt, f"must be < T={self.T}")
        check_int("action_repeat", self.action_repeat, minimum=1)
        check_choice("simulator", self.simulator, ("batched", "process", "ray"))
        if self.simulator != "batched" and self.algo != "mc":
            raise ConfigError(
                "simulator",
                self.simulator,
                f"--algo {self.algo} differentiates through the rollout, which "
                "must stay in this process; parallel rollouts serve --algo mc",
            )
        if self.n_workers is not None:
            check_int("n_workers", self.n_workers, minimum=1)
        if self.ray_address is not None and self.simulator != "ray":
            raise ConfigError("ray_address", self.ray_address, "is only used with --simulator ray")
        if self.final_action_repeat is not None:
            check_int("final_action_repeat", self.final_action_repeat, minimum=1)
            if self.final_action_repeat > self.action_repeat:
                raise ConfigError(
                    "final_action_repeat", self.final_action_repeat, f"must be <= action_repeat={self.action_repeat}"
                )

    def _check_evaluation(self, params: GHMParams | RegimeGHMParams | OUGHMParams) -> None:
        """Logging and evaluation cadence, the evaluated cash levels (inside the model's
        range and the FD grid), the FD reference, the seed and the device."""
        for name in ("log_interval", "eval_interval", "save_interval"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("eval_quick_paths", self.eval_quick_paths, minimum=0)
        check_int("keep_checkpoints", self.keep_checkpoints, minimum=0)
        if len(self.eval_cash) == 0:
            raise ConfigError("eval_cash", self.eval_cash, "needs at least one initial cash level")
        for cash in self.eval_cash:
            check_finite("eval_cash", cash)
            if cash <= params.liquidation_cash:  # liquidated at once: V* = 0, no % of V*
                raise ConfigError(
                    "eval_cash",
                    cash,
                    f"must exceed {params.liquidation_cash:g}, where the firm of --model {self.model} is liquidated",
                )
            if cash - params.liquidation_cash > 0.9 * self.fd_x_max:  # the FD reference would be clamped there
                raise ConfigError(
                    "eval_cash",
                    cash,
                    f"lies beyond 90% of the FD grid (fd_x_max={self.fd_x_max:g}, in the "
                    "model's state), where V* is not computed; raise fd_x_max",
                )
        if params.a_L_max <= 0:
            raise ConfigError(
                "a_L_max",
                params.a_L_max,
                "must be > 0 to train: without dividends every policy is worth 0 "
                "(V* = 0), so there is nothing to learn and no % of V*",
            )
        check_int("eval_paths", self.eval_paths, minimum=2)
        check_range("eval_tail_tolerance", self.eval_tail_tolerance, 0.0, 1.0, low_inclusive=False)
        if self.eval_dt is not None:
            check_positive("eval_dt", self.eval_dt)
        check_int("fd_nodes", self.fd_nodes, minimum=100)
        check_positive("fd_x_max", self.fd_x_max)
        check_seed("seed", self.seed)
        check_threads("threads", self.threads)
        check_device("device", self.device)
        self._check_memory()

    def _check_memory(self) -> None:
        """The FD reference (NumPy, on the CPU) and, for a run on the CPU, the rollout and
        the final evaluation against the memory the machine has available now. A run on a
        GPU is checked against the GPU's memory when it starts (the trainer)."""
        assert self.n_trajectories is not None  # _resolve_solver_defaults
        check_memory("fd_nodes", self.fd_nodes, fd_grid_bytes(self.fd_nodes), "the FD reference's grid")
        if self.device.startswith("cuda"):
            return
        steps = int(round(self.T / self.dt))
        check_memory(
            "n_trajectories",
            self.n_trajectories,
            rollout_bytes(self.n_trajectories, self.T, self.dt, self.model_dims()),
            f"one iteration's rollout ({steps} steps x {rollout_floats_per_step(self.model_dims())} float32 per path)",
        )
        check_memory(
            "eval_paths",
            self.eval_paths,
            evaluation_bytes(self.eval_paths, len(self.eval_cash)),
            f"the final evaluation ({len(self.eval_cash)} cash levels x {EVAL_BYTES_PER_PATH} bytes per path)",
        )

    @property
    def kind(self) -> str:
        return f"ghm-{self.algo}"

    def model_params(self) -> GHMParams | RegimeGHMParams | OUGHMParams:
        """The parameters of ``--model``: ``params`` for ghm (and for each of the divisions);
        ``params`` with the credit line (a :class:`CreditLineParams`) for credit-line; a
        :class:`~pglab.configs.ghm_multi.RegimeGHMParams` with regime 0 = ``params`` for
        regimes; an :class:`~pglab.configs.ghm_multi.OUGHMParams` with ``mu_bar = mu`` for ou
        (their fields left at None take those classes' defaults). The model itself is
        :func:`pglab.algos.ghm_train.build_model`."""
        from pglab.configs.ghm_multi import OUGHMParams, RegimeGHMParams

        shared = {f.name: getattr(self.params, f.name) for f in dataclasses.fields(GHMParams)}
        if self.model == "credit-line":
            return CreditLineParams(**shared, credit_limit=self.credit_limit, credit_spread=self.credit_spread)
        given = {name: getattr(self, name) for name in MODEL_FIELDS.get(self.model, ())}
        given = {name: value for name, value in given.items() if value is not None}
        if self.model == "regimes":
            renamed = {"mu": "mu_0", "sigma": "sigma_0", "lambda_dilution": "lambda_dilution_0"}
            return RegimeGHMParams(**{renamed.get(name, name): value for name, value in shared.items()}, **given)
        if self.model == "ou":
            return OUGHMParams(**{"mu_bar" if name == "mu" else name: value for name, value in shared.items()}, **given)
        return self.params

    def model_dims(self) -> tuple[int, int, int]:
        """``(d, w, A)`` of ``--model``: states, Brownian motions and controls."""
        if self.model == "divisions":
            return self.divisions, self.divisions, 2 * self.divisions
        return (1, 1, 2) if self.model in ("ghm", "credit-line") else (2, 2, 2)

    def hjb_interval(self) -> tuple[float, float] | None:
        """actor-critic: the collocation interval of the HJB residual in the model's state
        (``None``: at the visited states); its default upper end is 1.25 x the state of
        ``initial_cash_high`` (the state is ``cash - liquidation_cash``)."""
        if self.hjb_c_min is None:
            return None
        params = self.model_params()
        high = (
            self.hjb_c_max
            if self.hjb_c_max is not None
            else 1.25 * (params.initial_cash_high - params.liquidation_cash)
        )
        return self.hjb_c_min, high


# Fields a resume may change (besides the shell's: device, threads, save_interval, log_dir):
# the budget, the evaluation and the logging. None of them alters the training trajectory,
# except n_iterations when a schedule is a function of it (see budget_schedules). The
# simulator backend is resumable too: its rollouts are bit-identical whatever the backend.
RESUMABLE_FIELDS = frozenset(
    {
        "n_iterations",
        "log_interval",
        "eval_interval",
        "plots",
        "save_interval",
        "eval_quick_paths",
        "eval_cash",
        "eval_paths",
        "eval_tail_tolerance",
        "eval_dt",
        "final_eval",
        "simulator",
        "n_workers",
        "ray_address",
    }
)


def budget_schedules(config: GHMTrainConfig) -> list[str]:
    """The schedules of ``config`` that are functions of ``n_iterations`` (their value at
    iteration ``i`` is a function of ``(i - 1) / (n_iterations - 1)``), as flag names.

    Empty means a run's trajectory does not depend on its budget, so extending the budget on
    ``--resume`` reproduces one longer run bit for bit. ``lr_final_fraction = 1`` is the
    constant rate (the decay factor is exactly 1.0); ``final_action_repeat =
    action_repeat`` is the constant decision interval."""
    schedules = []
    if config.lr_final_fraction != 1.0:
        schedules.append(f"lr_final_fraction={config.lr_final_fraction:g}")
    if config.final_max_std is not None and config.algo == "mc":  # the other solvers' policies are deterministic
        schedules.append(f"final_max_std={config.final_max_std:g}")
    if config.final_action_repeat is not None and config.final_action_repeat != config.action_repeat:
        schedules.append(f"final_action_repeat={config.final_action_repeat}")
    if config.td_final_fraction != 1.0:
        schedules.append(f"td_final_fraction={config.td_final_fraction:g}")
    return schedules


# -- pglab evaluate GHM_CHECKPOINT ------------------------------------------------------------------


@dataclass(frozen=True)
class GHMEvaluateConfig:
    """``pglab evaluate GHM_CHECKPOINT``: the policy's discounted payout against the FD optimum."""

    DEPRECATED_NAMES: ClassVar[dict[str, str]] = {"n_episodes": "episodes"}

    checkpoint: Annotated[Path, tyro.conf.Positional]
    """GHM checkpoint file (or a run directory: its latest checkpoint)"""
    episodes: int | None = None
    """simulated paths per initial cash level (default: the run's eval_paths, 2,000 unless
    set; --n_episodes: deprecated spelling); the simulation uses V*' as a control variate
    (unbiased, a several-fold smaller standard error)"""
    cash: tuple[float, ...] | None = None
    """initial cash levels (default: the run's eval_cash, 0.25 0.5 1 1.5 unless set; above the
    run's liquidation point: 0, or -credit_limit for a --model credit-line run)"""
    tail_tolerance: float | None = None
    """simulate until the discounted tail is below this fraction of the value (the simulated
    value is low by at most this fraction; default: the run's eval_tail_tolerance, 0.001
    unless set)"""
    dt: float | None = None
    """simulation time step (default: the run's final-evaluation step, eval_dt, a quarter of
    its training dt unless set)"""
    stochastic: bool = False
    """evaluate the stochastic policy instead of its deterministic mean"""
    json: bool = False
    """print the result as JSON instead of a table"""
    output: Path | None = None
    """also write the result as JSON to this file"""
    seed: int | None = None
    """random seed of the evaluation paths (default: the run's final-evaluation seed, its
    seed + 2: with the other defaults `pglab evaluate RUN` then reproduces the run's final
    table, path for path; runs from before eval_dt existed were evaluated at their dt)"""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N"""
    threads: int = 1
    """torch CPU threads (0: torch's default; 1, the default, is steady on a shared machine)"""

    def __post_init__(self):
        check_path_fields(self)
        if self.episodes is not None:
            check_int("episodes", self.episodes, minimum=2)
        if self.cash is not None:
            if len(self.cash) == 0:
                raise ConfigError("cash", self.cash, "needs at least one initial cash level")
            for level in self.cash:  # the liquidation point is the checkpoint's model's (pglab evaluate checks it)
                check_finite("cash", level)
        if self.tail_tolerance is not None:
            check_range("tail_tolerance", self.tail_tolerance, 0.0, 1.0, low_inclusive=False)
        if self.dt is not None:
            check_positive("dt", self.dt)
        if self.seed is not None:
            check_seed("seed", self.seed)
        check_threads("threads", self.threads)
        check_device("device", self.device)
        if self.episodes is not None and not self.device.startswith("cuda"):
            levels = len(self.cash) if self.cash is not None else 4  # the runs' default eval_cash has 4
            check_memory(
                "episodes", self.episodes, evaluation_bytes(self.episodes, levels), f"{levels} cash levels' paths"
            )


# -- pglab solve ghm / ghm-credit-line -------------------------------------------------------------


@dataclass(frozen=True)
class GHMSolveConfig:
    """The finite-difference HJB reference of the GHM model."""

    mu: float = 0.1
    """cash-flow drift"""
    sigma: float = 0.2
    """cash-flow volatility"""
    r: float = 0.05
    """interest rate on cash"""
    lambda_dilution: float = 0.1
    """proportional equity-issuance cost"""
    rho: float = 0.1
    """discount rate (must exceed r)"""
    a_L_max: float = 1.0
    """maximal dividend rate"""
    a_E_max: float = 1.0
    """maximal issuance rate"""
    nodes: int = 24_000
    """grid intervals (the extrapolated solution also solves on half as many)"""
    x_max: float = 6.0
    """upper end of the grid"""
    extrapolate: bool = True
    """Richardson-extrapolate two grids (the scheme is first order in h)"""
    cash: tuple[float, ...] = (0.25, 0.5, 1.0, 1.5)
    """cash levels to print"""
    output: Path | None = None
    """write the solution (grid, V, controls) to this .npz and a .csv beside it"""
    json: bool = False
    """print JSON instead of a table"""

    def __post_init__(self):
        check_path_fields(self)
        self.params()
        check_int("nodes", self.nodes, minimum=100)
        check_positive("x_max", self.x_max)
        check_memory("nodes", self.nodes, fd_grid_bytes(self.nodes), "the FD grid")
        for level in self.cash:
            check_range("cash", level, 0.0, self.x_max)

    def params(self) -> GHMParams:
        return GHMParams(
            mu=self.mu,
            sigma=self.sigma,
            r=self.r,
            lambda_dilution=self.lambda_dilution,
            rho=self.rho,
            a_L_max=self.a_L_max,
            a_E_max=self.a_E_max,
        )


@dataclass(frozen=True)
class CreditLineSolveConfig:
    """The finite-difference HJB reference of :mod:`pglab.envs.ghm_credit_line`."""

    mu: float = 0.1
    """cash-flow drift"""
    sigma: float = 0.2
    """cash-flow volatility"""
    r: float = 0.05
    """interest rate on cash"""
    lambda_dilution: float = 0.1
    """proportional equity-issuance cost"""
    rho: float = 0.1
    """discount rate (must exceed r)"""
    a_L_max: float = 1.0
    """maximal dividend rate"""
    a_E_max: float = 1.0
    """maximal issuance rate"""
    credit_limit: float = 0.25
    """size of the credit line (cash may fall to -credit_limit)"""
    credit_spread: float = 0.05
    """extra interest on the drawn balance"""
    nodes: int = 24_000
    """grid intervals (the extrapolated solution also solves on half as many)"""
    x_max: float = 6.0
    """upper end of the grid in liquidity x = cash + credit_limit"""
    cash: tuple[float, ...] = (0.25, 0.5, 1.0, 1.5)
    """cash levels to print"""
    c_min: float = 0.1
    """residual statistics on liquidity in [c_min, 2 + credit_limit] (the boundary layer lies below)"""
    json: bool = False
    """print JSON instead of a table"""

    def __post_init__(self):
        self.params()
        check_int("nodes", self.nodes, minimum=100)
        check_positive("x_max", self.x_max)
        check_memory("nodes", self.nodes, fd_grid_bytes(self.nodes), "the FD grid")
        check_positive("c_min", self.c_min)
        for level in self.cash:
            check_range("cash", level, -self.credit_limit, self.x_max - self.credit_limit)

    def params(self) -> CreditLineParams:
        return CreditLineParams(
            mu=self.mu,
            sigma=self.sigma,
            r=self.r,
            lambda_dilution=self.lambda_dilution,
            rho=self.rho,
            a_L_max=self.a_L_max,
            a_E_max=self.a_E_max,
            credit_limit=self.credit_limit,
            credit_spread=self.credit_spread,
        )


# -- pglab validate / pglab compare ---------------------------------------------------------------


@dataclass(frozen=True)
class ValidateConfig:
    """``pglab validate CHECKPOINT``: the HJB residual of a trained GHM agent."""

    DEPRECATED_NAMES: ClassVar[dict[str, str]] = {"out": "output"}

    checkpoint: Annotated[Path, tyro.conf.Positional]
    """GHM checkpoint file (or a run directory: its latest checkpoint)"""
    c_min: float = 0.1
    """lower end of the interior interval of the residual statistics (> 0: below it lies
    the boundary layer at c = 0, reported separately)"""
    c_max: float | None = None
    """upper end of the interior interval (default: the run's initial_cash_high). c_min and
    c_max, like the report, are in the model's state: cash for GHM, liquidity = cash +
    credit_limit for a --model credit-line run"""
    n_points: int = 2001
    """evaluation grid points on [0, c_max]"""
    method: Literal["autograd", "fd"] = "autograd"
    """derivatives of the value network: autograd (exact) or central finite differences"""
    fd_step: float | None = None
    """step of --method fd (default 1.2e-4, the float64 eps^(1/4))"""
    tolerance: float = 1e-3
    """pass mark for max |rho V - max_u H| on the interior (1e-3)"""
    output: Path | None = None
    """folder for validation.json and validation.png (default: the run directory; --out:
    deprecated spelling)"""
    json: bool = False
    """print the report as JSON instead of a table"""

    def __post_init__(self):
        check_path_fields(self)
        check_positive("c_min", self.c_min)
        if self.c_max is not None:
            check_positive("c_max", self.c_max)
            if self.c_max <= self.c_min:
                raise ConfigError("c_max", self.c_max, f"must exceed c_min={self.c_min}")
        check_int("n_points", self.n_points, minimum=11)
        check_memory("n_points", self.n_points, residual_bytes(self.n_points), "the HJB residual's grid")
        check_choice("method", self.method, ("autograd", "fd"))
        if self.fd_step is not None:
            check_positive("fd_step", self.fd_step)
        check_positive("tolerance", self.tolerance)


@dataclass(frozen=True)
class CompareConfig:
    """``pglab compare RUN_DIR...``: GHM solver runs side by side and against the FD optimum."""

    DEPRECATED_NAMES: ClassVar[dict[str, str]] = {"out": "output"}

    run_dirs: Annotated[tuple[Path, ...], tyro.conf.Positional]
    """GHM run directories (each with config.json, eval.csv, evaluation.json, checkpoints/)"""
    output: Path | None = None
    """new folder for comparison.md/.csv/.png (default runs/compare-<timestamp>; --out:
    deprecated spelling)"""
    targets: tuple[float, ...] = (95.0, 99.0)
    """% of V* whose first attainment (wall-clock, simulated steps) is reported"""
    residual: bool = True
    """compute each run's HJB residual (pglab validate's defaults)"""

    def __post_init__(self):
        check_path_fields(self)
        if len(self.run_dirs) == 0:
            raise ConfigError("run_dirs", self.run_dirs, "give at least one run directory")
        for target in self.targets:
            check_range("targets", target, 0.0, 100.0, low_inclusive=False)


__all__ = [
    "GHM_KINDS",
    "SOLVER_DEFAULTS",
    "RESUMABLE_FIELDS",
    "GHMParams",
    "CreditLineParams",
    "GHMTrainConfig",
    "GHMEvaluateConfig",
    "GHMSolveConfig",
    "CreditLineSolveConfig",
    "ValidateConfig",
    "CompareConfig",
    "budget_schedules",
]

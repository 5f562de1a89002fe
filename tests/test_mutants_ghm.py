"""Tests that the mutation run of the GHM solvers asked for (docs/mutation-testing.md):
what tests/test_update_rules_ghm.py left unpinned. That file pins the parameters after one
``train_step``; these pin the rest of the step on the same tiny float64 batches:

* every metric a ``train_step`` returns (the key set and each value), recomputed from the
  captured batch with slow loops;
* the branches the reference tests do not take: MC-PG without a baseline, without the
  critic bootstrap, with ``score_samples``, without advantage normalisation, with a
  state-dependent standard deviation; pathwise with several critic steps on capped
  subsamples; the actor-critic's optimal-control HJB residual;
* the differentiable rollout against a hand-written Euler scheme (a liquidated path stays
  put), and MC-PG on a toy model with a 2-D state;
* that a seeded step draws only from the solver's generator (never the global stream);
* ``soft_clip`` against its formula on a box that is not ``[0, 1]``.

Each was checked by applying the mutant it stands for by hand and watching it fail.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from test_update_rules_ghm import (  # noqa: F401  (float64_default is a fixture)
    DT,
    GHM64,
    LR,
    PARAMS,
    STEPS,
    _alive_pairs,
    _flat,
    _hand_rollout,
    _nets,
    _pathwise_policy_reference,
    _use_sgd,
    float64_default,
    spy_on_rollouts,
)

from pglab.algos.actor_critic import ActorCritic, policy_hjb_residual
from pglab.algos.mc_pg import MonteCarloPolicyGradient
from pglab.algos.pathwise import PathwisePolicyGradient, soft_clip
from pglab.envs.dynamics import ContinuousTimeModel, ControlSpec
from pglab.envs.ghm import GHMParams
from pglab.envs.simulator import TrajectorySimulator
from pglab.nets import GaussianPolicy, ValueNetwork

GAMMA = math.exp(-PARAMS["rho"] * DT)
MC_KEYS = {
    "loss/policy",
    "return/mean",
    "return/std",
    "return/min",
    "return/max",
    "stats/advantage_mean",
    "stats/advantage_std",
    "stats/advantage_max",
    "stats/advantage_min",
    "episode/length",
    "episode/length_std",
    "stats/termination_rate",
    "policy/mean_action_L",
    "policy/mean_action_E",
    "policy/std_action_L",
    "policy/std_action_E",
    "policy/entropy",
    "stats/grad_norm/policy",
    "stats/lr/policy",
    "stats/alive_steps",
}
MC_BASELINE_KEYS = {"loss/baseline", "stats/grad_norm/baseline", "value/explained_variance", "stats/lr/baseline"}
PATHWISE_KEYS = {
    "loss/policy",
    "loss/baseline",
    "return/mean",
    "return/std",
    "return/min",
    "return/max",
    "episode/length",
    "stats/termination_rate",
    "policy/mean_action_L",
    "policy/mean_action_E",
    "stats/grad_norm/policy",
    "stats/grad_norm/baseline",
    "value/explained_variance",
    "stats/lr/policy",
    "stats/lr/baseline",
    "stats/alive_steps",
}


def _assert_metrics(metrics: dict[str, torch.Tensor], expected: dict[str, float], rel: float = 1e-9) -> None:
    assert set(metrics) == set(expected)
    for name, value in expected.items():
        # counts and rates kept in float32 (``.float()``) hold float32 rounding
        tol = max(rel, 1e-6) if metrics[name].dtype == torch.float32 else rel
        assert float(metrics[name]) == pytest.approx(value, rel=tol, abs=1e-11), name


def _sgd_grad_step(loss: torch.Tensor, module: torch.nn.Module) -> float:
    """``theta <- theta - LR grad`` in place; returns the gradient's L2 norm."""
    grads = torch.autograd.grad(loss, list(module.parameters()))
    with torch.no_grad():
        for p, g in zip(module.parameters(), grads, strict=False):
            p -= LR * g
    return float(torch.cat([g.reshape(-1) for g in grads]).norm())


def _std(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _explained_variance(predicted: list[float], targets: list[float]) -> float:
    """``1 - Var[y - y_hat] / Var[y]``; 0 for a single target (no spread to explain)."""
    if len(targets) < 2:
        return 0.0
    variance = _std(targets) ** 2
    return 1.0 - _std([y - p for p, y in zip(predicted, targets, strict=False)]) ** 2 / variance


# -- Monte Carlo policy gradient: every branch and every metric --------------------------------


def _mc_expected(
    policy,
    baseline,
    paths,
    initial,
    perm_generator,
    *,
    advantage,
    terminal_value,
    normalize,
    policy_steps,
    baseline_steps,
    score_samples,
    advantage_steps,
):
    """(policy params, baseline params, metrics) after one MC iteration with SGD, by loops over
    the captured batch (the formulas of docs/ghm.md; nothing from pglab.algos)."""
    B, T = paths.rewards.shape
    states, actions, rewards = paths.states, paths.actions, paths.rewards
    alive_end = [not bool(paths.dones[i, -1]) for i in range(B)]
    value = (lambda x: baseline(x.reshape(1, -1)).item()) if baseline is not None else (lambda x: 0.0)
    with torch.no_grad():
        boot = [value(states[i, -1]) if alive_end[i] and terminal_value == "critic" else 0.0 for i in range(B)]
        rtg = [[0.0] * T for _ in range(B)]
        for i in range(B):
            g = boot[i]
            for t in reversed(range(T)):
                g = rewards[i, t].item() + GAMMA * (0.0 if bool(paths.dones[i, t]) else 1.0) * g
                rtg[i][t] = g
        decisions = [
            (i, t) for i in range(B) for t in range(T) if paths.masks[i, t] > 0 and t % paths.action_repeat == 0
        ]
        chunk = len(decisions) // policy_steps
        if 0 < score_samples < chunk:
            chunk = score_samples
        order = torch.randperm(len(decisions), generator=perm_generator)[: chunk * policy_steps].tolist()
        used = [decisions[j] for j in order]
        if advantage == "trajectory":
            fitted = [(value(initial[i]), rtg[i][0]) for i in range(B)]
            adv = torch.tensor([rtg[i][0] - value(initial[i]) for i, _ in used])
        else:
            fitted = [(value(states[i, t]), rtg[i][t]) for i, t in used]

            def target(i, t):  # G_t, or the n-step return bootstrapped with the critic
                if baseline is None or advantage_steps == 0 or t + advantage_steps >= T:
                    return rtg[i][t]
                n = advantage_steps
                head = sum(GAMMA**j * rewards[i, t + j].item() for j in range(n))
                return head + GAMMA**n * paths.masks[i, t + n].item() * value(states[i, t + n])

            adv = torch.tensor([target(i, t) - value(states[i, t]) for i, t in used])
        if normalize:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)

    metrics = {}
    scale = len(decisions) / chunk / B
    for step in range(policy_steps):
        part = used[step * chunk : (step + 1) * chunk]
        x = torch.stack([states[i, t] for i, t in part])
        a = torch.stack([actions[i, t] for i, t in part])
        mean, std = policy.mean_std(x)
        log_pi = (-0.5 * ((a - mean) / std) ** 2 - std.log() - 0.5 * math.log(2 * math.pi)).sum(-1)
        loss = -(log_pi * adv[step * chunk : (step + 1) * chunk]).sum() * scale
        metrics["loss/policy"] = loss.item()
        metrics["stats/grad_norm/policy"] = _sgd_grad_step(loss, policy)
    if baseline is not None:
        metrics["value/explained_variance"] = _explained_variance(*zip(*fitted, strict=False))
        for step in range(baseline_steps):
            if advantage == "trajectory":
                x, y = initial, torch.tensor([rtg[i][0] for i in range(B)])
            else:
                part = used[(step % policy_steps) * chunk : (step % policy_steps + 1) * chunk]
                x = torch.stack([states[i, t] for i, t in part])
                y = torch.tensor([rtg[i][t] for i, t in part])
            loss = ((baseline(x) - y) ** 2).mean()
            metrics["loss/baseline"] = loss.item()
            metrics["stats/grad_norm/baseline"] = _sgd_grad_step(loss, baseline)
        metrics["stats/lr/baseline"] = LR

    returns = [rtg[i][0] for i in range(B)]
    lengths = [paths.masks[i].sum().item() for i in range(B)]
    advs = adv.tolist()
    with torch.no_grad():
        decision_states = torch.stack([states[i, t] for i, t in decisions])
        stds = policy.mean_std(decision_states)[1]  # after the update
        entropy = (0.5 + 0.5 * math.log(2 * math.pi) + stds[:4096].log()).sum(-1).mean().item()
    metrics.update(
        {
            "return/mean": sum(returns) / B,
            "return/std": _std(returns),
            "return/min": min(returns),
            "return/max": max(returns),
            "stats/advantage_mean": sum(advs) / len(advs),
            "stats/advantage_std": _std(advs),
            "stats/advantage_max": max(advs),
            "stats/advantage_min": min(advs),
            "episode/length": sum(lengths) / B,
            "episode/length_std": _std(lengths),
            "stats/termination_rate": 1.0 - sum(alive_end) / B,
            "policy/mean_action_L": sum(paths.controls[i, t, 0].item() for i, t in decisions) / len(decisions),
            "policy/mean_action_E": sum(paths.controls[i, t, 1].item() for i, t in decisions) / len(decisions),
            "policy/std_action_L": stds[:, 0].mean().item(),
            "policy/std_action_E": stds[:, 1].mean().item(),
            "policy/entropy": entropy,
            "stats/lr/policy": LR,
            "stats/alive_steps": sum(lengths),
        }
    )
    return _flat(policy), (_flat(baseline) if baseline is not None else None), metrics, len(decisions), len(used)


class CashAndLevel(ContinuousTimeModel):
    """A toy model with a 2-D state: GHM-like cash (absorbed at 0) and an uncontrolled level
    that scales the dividend's reward, so that a solver flattening ``[B, T, S]`` states into
    pairs must keep ``S`` (every pglab model has a 1-D state)."""

    state_names = ("cash", "level")
    discount_rate = PARAMS["rho"]
    state_low, state_high = (0.02, 0.5), (0.5, 1.5)
    control = ControlSpec(("dividend_rate", "issuance_rate"), (0.0, 0.0), (1.0, 1.0))

    def drift(self, states, controls):
        return torch.stack([0.1 - controls[:, 0] + 0.5 * controls[:, 1], 0.2 - 0.3 * states[:, 1]], 1)

    def diffusion(self, states, controls):
        return torch.full_like(states, 0.4)

    def reward_rate(self, states, controls):
        return states[:, 1] * controls[:, 0] - 1.25 * controls[:, 1]

    def terminated(self, states):
        return states[:, 0] <= 0.0

    def initial_states(self, num_paths, generator=None, *, device="cpu", dtype=torch.float64):
        return super().initial_states(num_paths, generator, device=device, dtype=torch.float64)


def _mc_run(*, n_trajectories=6, action_repeat=1, with_baseline=True, state_dependent_std=False, two_d=False, **kwargs):
    model = CashAndLevel() if two_d else GHM64(GHMParams(**PARAMS))
    simulator = TrajectorySimulator(model, dt=DT, horizon=DT * STEPS, action_repeat=action_repeat)
    policy, baseline = _nets()
    if two_d:
        torch.manual_seed(5)
        policy = GaussianPolicy(2, 2, (5,), log_std_init=-0.7, mean_init=(0.4, 0.3)).double()
        baseline = ValueNetwork(2, (5,)).double()
    if state_dependent_std:
        torch.manual_seed(3)
        policy = GaussianPolicy(1, 2, (5,), log_std_init=-0.7, mean_init=(0.4, 0.3), state_dependent_std=True).double()
        with torch.no_grad():  # make sigma(x) vary visibly with the state
            policy.std_net[-1].weight.normal_(0.0, 0.5)
    baseline = baseline if with_baseline else None
    algo = MonteCarloPolicyGradient(
        policy,
        simulator,
        baseline,
        n_trajectories=n_trajectories,
        max_grad_norm=1e9,
        generator=torch.Generator().manual_seed(4),
        **kwargs,
    )
    algo.policy_optimizer = torch.optim.SGD(policy.parameters(), lr=LR)
    if with_baseline:
        algo.baseline_optimizer = torch.optim.SGD(baseline.parameters(), lr=LR)
    policy0, baseline0 = copy.deepcopy(policy), copy.deepcopy(baseline)
    captured = spy_on_rollouts(simulator)
    metrics = algo.train_step()
    return algo, policy, baseline, policy0, baseline0, metrics, captured[0]


MC_CASES = {
    # name: constructor arguments (and _mc_run's: action_repeat, with_baseline, state_dependent_std, two_d)
    "rtg_repeat2_two_policy_steps": dict(advantage="reward_to_go", action_repeat=2, policy_steps=2, baseline_steps=3),
    "trajectory": dict(advantage="trajectory", baseline_steps=2),
    "no_baseline_rtg": dict(advantage="reward_to_go", with_baseline=False),
    "no_baseline_trajectory": dict(advantage="trajectory", with_baseline=False, policy_steps=2),
    "no_critic_bootstrap": dict(advantage="reward_to_go", terminal_value="none", baseline_steps=2),
    "one_scored_pair_per_step_unnormalised": dict(
        advantage="reward_to_go", score_samples=1, policy_steps=3, baseline_steps=2, advantage_normalization=False
    ),
    "score_samples_state_dependent_std": dict(
        advantage="reward_to_go", score_samples=3, policy_steps=2, baseline_steps=2, state_dependent_std=True
    ),
    "critic_after_one_step": dict(advantage="reward_to_go", advantage_steps=1),
    "critic_after_two_steps": dict(advantage="reward_to_go", advantage_steps=2),
    "critic_after_four_of_five_steps": dict(advantage="reward_to_go", advantage_steps=4, policy_steps=2),
    "two_dimensional_state": dict(advantage="reward_to_go", two_d=True, policy_steps=2, advantage_steps=2),
}


@pytest.mark.parametrize("case", list(MC_CASES))
@pytest.mark.usefixtures("float64_default")
def test_mc_policy_gradient_step_and_every_metric_match_a_reference_loop(case):
    kwargs = dict(MC_CASES[case])
    run_kwargs = {
        k: kwargs.pop(k) for k in ("action_repeat", "with_baseline", "state_dependent_std", "two_d") if k in kwargs
    }
    algo, policy, baseline, policy0, baseline0, metrics, (paths, initial, perm_state) = _mc_run(**run_kwargs, **kwargs)
    with_baseline = run_kwargs.get("with_baseline", True)
    # the batch has a liquidation and a truncation (bootstrapped with V unless told not to)
    assert bool(paths.dones[:, -1].any()) and bool((~paths.dones[:, -1]).any())
    new_policy, new_baseline, expected, n_decisions, n_used = _mc_expected(
        copy.deepcopy(policy0),
        copy.deepcopy(baseline0) if with_baseline else None,
        paths,
        initial,
        torch.Generator().set_state(perm_state),
        advantage=kwargs["advantage"],
        terminal_value=kwargs.get("terminal_value", "critic"),
        normalize=kwargs.get("advantage_normalization", True),
        policy_steps=kwargs.get("policy_steps", 1),
        baseline_steps=kwargs.get("baseline_steps", 1),
        score_samples=kwargs.get("score_samples", 0),
        advantage_steps=kwargs.get("advantage_steps", 0),
    )
    if "score_samples" in kwargs:
        assert n_used == kwargs["score_samples"] * kwargs["policy_steps"] < n_decisions
    assert (new_policy - _flat(policy0)).abs().max() > 1e-4
    torch.testing.assert_close(_flat(policy), new_policy, rtol=1e-9, atol=1e-11)
    if with_baseline:
        torch.testing.assert_close(_flat(baseline), new_baseline, rtol=1e-9, atol=1e-11)
        assert set(metrics) == MC_KEYS | MC_BASELINE_KEYS
    else:
        assert set(metrics) == MC_KEYS
    _assert_metrics(metrics, expected)


@pytest.mark.usefixtures("float64_default")
def test_mc_diagnostics_average_the_policy_over_the_first_4096_decisions():
    """The entropy diagnostic is a mean over (at most) the first 4096 decision states: a
    state-dependent sigma and more decisions than that show which states it averaged."""
    algo, policy, baseline, policy0, baseline0, metrics, (paths, initial, perm_state) = _mc_run(
        n_trajectories=1000, advantage="reward_to_go", score_samples=5, state_dependent_std=True
    )
    decisions = paths.decision_masks.reshape(-1).nonzero().squeeze(1)
    assert decisions.numel() > 4097
    x = paths.states[:, :-1].reshape(-1, 1)[decisions]
    with torch.no_grad():
        log_std = policy.mean_std(x)[1].log()
    entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
    assert float(metrics["policy/entropy"]) == pytest.approx(entropy[:4096].mean().item(), rel=1e-12)
    assert abs(entropy[:4097].mean().item() - entropy[:4096].mean().item()) > 1e-9  # the cap is visible
    assert float(metrics["policy/std_action_L"]) == pytest.approx(log_std[:, 0].exp().mean().item(), rel=1e-12)


# -- pathwise and actor-critic: several critic steps, metrics, the optimal HJB residual --------


def _pathwise_run(cls, *, n_trajectories=6, critic_steps=1, critic_samples=10_000, **kwargs):
    model = GHM64(GHMParams(**PARAMS))
    simulator = TrajectorySimulator(model, dt=DT, horizon=DT * STEPS)
    policy, critic = _nets(1)
    algo = cls(
        policy,
        simulator,
        critic,
        n_trajectories=n_trajectories,
        max_grad_norm=1e9,
        clip_sharpness=20.0,
        critic_steps=critic_steps,
        critic_samples=critic_samples,
        generator=torch.Generator().manual_seed(2),
        **kwargs,
    )
    _use_sgd(algo, "policy_optimizer", "critic_optimizer", policy, critic)
    policy0, critic0 = copy.deepcopy(policy), copy.deepcopy(critic)
    captured = []
    rollout = algo.rollout

    def spy(initial, noise):
        # the rollout draws nothing; the generator's state here is the one randperm starts from
        captured.append((initial.clone(), noise.clone(), algo.generator.get_state()))
        return rollout(initial, noise)

    algo.rollout = spy
    metrics = algo.train_step()
    initial, noise, perm_state = captured[0]
    cashes, rewards, survivals = _hand_rollout(policy0, initial, noise, model.params, 20.0)
    return model, algo, policy, critic, policy0, critic0, metrics, cashes, rewards, survivals, perm_state


def _hjb_residual_fd(critic, model, x, controls):
    """``rho V - [f + b V' + 0.5 sigma^2 V'']`` per state and per control row, with ``V'``,
    ``V''`` by central differences (float64, h = 1e-4); ``controls [B, 2]``."""
    p = model.params
    h = 1e-4
    v0, vp, vm = critic(x), critic(x + h), critic(x - h)
    first, second = (vp - vm) / (2 * h), (vp - 2 * v0 + vm) / h**2
    c, a_L, a_E = x[:, 0], controls[:, 0], controls[:, 1]
    hamiltonian = (
        (a_L - (1 + p.lambda_dilution) * a_E) + (p.mu + p.r * c - a_L + a_E) * first + 0.5 * p.sigma**2 * second
    )
    return p.rho * v0 - hamiltonian


def _pathwise_expected(
    policy,
    critic0,
    cashes,
    rewards,
    survivals,
    perm_state,
    *,
    policy_grad_norm,
    critic_steps,
    critic_samples,
    targets,
    hjb=None,
):
    """(critic params, metrics) of one iteration: ``critic_steps`` SGD steps on disjoint
    subsamples of the alive (state, target) pairs (a uniform permutation drawn from the
    solver's generator after the rollout), and the diagnostics."""
    B, T = cashes[0].shape[0], len(rewards)
    critic = copy.deepcopy(critic0)
    with torch.no_grad():
        payout = torch.zeros(B)
        weight = torch.ones(B)
        for t in range(T):
            payout = payout + GAMMA**t * weight * rewards[t]
            weight = weight * survivals[t]
        payout = (payout + GAMMA**T * weight * critic0(cashes[-1].unsqueeze(1))).tolist()
    pairs = _alive_pairs(cashes, survivals)
    # pair (t, i) sits at flat index i * T + t of the solver's [B, T] layout
    pairs.sort(key=lambda ti: ti[1] * T + ti[0])
    chunk = max(1, min(critic_samples, len(pairs) // critic_steps))
    order = torch.randperm(len(pairs), generator=torch.Generator().set_state(perm_state)).tolist()
    draws = [[pairs[j] for j in order[step * chunk : (step + 1) * chunk]] for step in range(critic_steps)]
    batch = [
        (torch.stack([cashes[t][i].detach() for t, i in d]).unsqueeze(1), torch.stack([targets[t][i] for t, i in d]))
        for d in draws
    ]
    metrics = {}
    with torch.no_grad():
        metrics["value/explained_variance"] = _explained_variance(critic(batch[0][0]).tolist(), batch[0][1].tolist())
    for x, y in batch:
        loss = ((critic(x) - y) ** 2).mean()
        metrics["loss/baseline"] = loss.item()
        if hjb is not None:
            weight_hjb, residual_fn = hjb
            hjb_loss = residual_fn(critic, x).pow(2).mean()
            metrics["loss/hjb_residual"] = hjb_loss.item()
            loss = loss + weight_hjb * hjb_loss
        metrics["stats/grad_norm/baseline"] = _sgd_grad_step(loss, critic)
    with torch.no_grad():
        x0 = batch[0][0][:4096]
        controls = policy.mean_std(x0)[0].clamp(0.0, 1.0)  # the hard clip of the updated policy
    lengths = [sum(1 for t, i in pairs if i == b) for b in range(B)]
    survive_all = [math.prod(s[b].item() for s in survivals) for b in range(B)]
    metrics.update(
        {
            "loss/policy": -sum(payout) / B,
            "return/mean": sum(payout) / B,
            "return/std": _std(payout),
            "return/min": min(payout),
            "return/max": max(payout),
            "episode/length": sum(lengths) / B,
            "stats/termination_rate": 1.0 - sum(survive_all) / B,
            "policy/mean_action_L": controls[:, 0].mean().item(),
            "policy/mean_action_E": controls[:, 1].mean().item(),
            "stats/grad_norm/policy": policy_grad_norm,
            "stats/lr/policy": LR,
            "stats/lr/baseline": LR,
            "stats/alive_steps": len(pairs),
        }
    )
    return _flat(critic), metrics, len(pairs), chunk


def _checked_policy_step(policy, policy0, critic0, cashes, rewards, survivals) -> float:
    """Assert the pathwise policy step against the reference; return its gradient's norm
    (SGD: ``grad = (theta_0 - theta_1) / LR``)."""
    new_policy = _pathwise_policy_reference(policy0, critic0, cashes, rewards, survivals, GAMMA)
    torch.testing.assert_close(_flat(policy), new_policy, rtol=1e-9, atol=1e-11)
    return float(((_flat(policy0) - new_policy) / LR).norm())


def _reward_to_go(critic0, cashes, rewards, survivals):
    with torch.no_grad():
        g = critic0(cashes[-1].unsqueeze(1))
        out = [None] * len(rewards)
        for t in reversed(range(len(rewards))):
            g = rewards[t] + GAMMA * survivals[t] * g
            out[t] = g
    return out


# (2, 1): one pair per critic step, whose explained variance is 0 by definition (torch warns
# that the variance of one value has no degrees of freedom)
@pytest.mark.filterwarnings("ignore:var\\(\\).*degrees of freedom:UserWarning")
@pytest.mark.parametrize("critic_steps, critic_samples", [(1, 10_000), (3, 10_000), (2, 4), (2, 1)])
@pytest.mark.usefixtures("float64_default")
def test_pathwise_critic_steps_on_disjoint_subsamples_and_every_metric_match_a_reference(critic_steps, critic_samples):
    model, algo, policy, critic, policy0, critic0, metrics, cashes, rewards, survivals, perm_state = _pathwise_run(
        PathwisePolicyGradient, critic_steps=critic_steps, critic_samples=critic_samples
    )
    assert bool((survivals[-1] == 0).any()) and bool((survivals[-1] > 0).any())
    grad_norm = _checked_policy_step(policy, policy0, critic0, cashes, rewards, survivals)
    targets = _reward_to_go(critic0, cashes, rewards, survivals)
    new_critic, expected, n_pairs, chunk = _pathwise_expected(
        policy,
        critic0,
        cashes,
        rewards,
        survivals,
        perm_state,
        policy_grad_norm=grad_norm,
        critic_steps=critic_steps,
        critic_samples=critic_samples,
        targets=targets,
    )
    assert chunk == min(critic_samples, n_pairs // critic_steps) > 0
    torch.testing.assert_close(_flat(critic), new_critic, rtol=1e-9, atol=1e-11)
    assert set(metrics) == PATHWISE_KEYS
    _assert_metrics(metrics, expected)


@pytest.mark.usefixtures("float64_default")
def test_pathwise_rollout_is_the_hand_written_euler_rollout_and_a_liquidated_path_stays_put():
    """States, rewards and survival of the differentiable rollout equal the hand-written
    Euler scheme's; once a path's survival is 0 its state is frozen where it was (rewards
    after that are weighted 0, but the states are what the critic and the bootstrap see)."""
    model, algo, policy, critic, policy0, critic0, metrics, cashes, rewards, survivals, perm_state = _pathwise_run(
        PathwisePolicyGradient
    )
    initial = torch.stack([cashes[0]], 1)
    generator = torch.Generator().manual_seed(11)
    noise = torch.randn((initial.shape[0], STEPS, 1), generator=generator)
    noise[0] = -10.0  # path 0 is liquidated at once and must stay at its initial cash
    cashes, rewards, survivals = _hand_rollout(policy, initial, noise, model.params, 20.0)
    states, step_rewards, survival = (x.detach() for x in algo.rollout(initial, noise))
    assert float(survival[0, 0]) == 0.0 and bool((survival.prod(1) > 0).any())
    assert bool((states[0, :, 0] == initial[0, 0]).all())
    torch.testing.assert_close(states[:, :, 0], torch.stack(cashes, 1), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(step_rewards, torch.stack(rewards, 1), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(survival, torch.stack(survivals, 1), rtol=1e-12, atol=1e-14)


@pytest.mark.usefixtures("float64_default")
def test_pathwise_diagnostic_controls_are_the_first_4096_states_of_the_first_draw():
    model, algo, policy, critic, policy0, critic0, metrics, cashes, rewards, survivals, perm_state = _pathwise_run(
        PathwisePolicyGradient, n_trajectories=1000, critic_steps=1, critic_samples=10_000
    )
    pairs = sorted(_alive_pairs(cashes, survivals), key=lambda ti: ti[1] * STEPS + ti[0])
    assert len(pairs) > 4097
    order = torch.randperm(len(pairs), generator=torch.Generator().set_state(perm_state)).tolist()
    x = torch.stack([cashes[pairs[j][0]][pairs[j][1]].detach() for j in order]).unsqueeze(1)
    with torch.no_grad():
        controls = policy.mean_std(x)[0].clamp(0.0, 1.0)
    assert float(metrics["policy/mean_action_L"]) == pytest.approx(controls[:4096, 0].mean().item(), rel=1e-12)
    assert float(metrics["policy/mean_action_E"]) == pytest.approx(controls[:4096, 1].mean().item(), rel=1e-12)
    assert abs(controls[:4097, 0].mean().item() - controls[:4096, 0].mean().item()) > 1e-12


@pytest.mark.parametrize("residual", ["none", "policy", "optimal"])
@pytest.mark.usefixtures("float64_default")
def test_actor_critic_critic_steps_hjb_residuals_and_metrics_match_a_reference(residual):
    """TD(lambda) targets; the HJB term off (weight 0: no "loss/hjb_residual" metric), of the
    policy, or of the optimal control (max of H over the 4 corners of the control box)."""
    lam, weight = 0.6, 0.7
    kwargs = dict(gae_lambda=lam, hjb_samples=10_000)
    if residual != "none":
        kwargs.update(hjb_weight=weight, hjb_residual=residual)
    model, algo, policy, critic, policy0, critic0, metrics, cashes, rewards, survivals, perm_state = _pathwise_run(
        ActorCritic, critic_steps=2, **kwargs
    )
    T = len(rewards)
    with torch.no_grad():
        values = [critic0(c.unsqueeze(1)) for c in cashes]
        adv, targets = torch.zeros_like(values[0]), [None] * T
        for t in reversed(range(T)):
            delta = rewards[t] + GAMMA * survivals[t] * values[t + 1] - values[t]
            adv = delta + GAMMA * lam * survivals[t] * adv
            targets[t] = adv + values[t]
    if residual == "none":
        hjb = None
    elif residual == "policy":

        def residual_fn(net, x):
            with torch.no_grad():
                u = policy.mean_std(x)[0].clamp(0.0, 1.0)
            return _hjb_residual_fd(net, model, x, u)

        hjb = (weight, residual_fn)
    else:
        corners = [(0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0)]

        def residual_fn(net, x):
            per_corner = [_hjb_residual_fd(net, model, x, torch.tensor([u]).expand(x.shape[0], 2)) for u in corners]
            return torch.stack(per_corner).min(0).values  # rho V - max_u H

        hjb = (weight, residual_fn)
    grad_norm = _checked_policy_step(policy, policy0, critic0, cashes, rewards, survivals)
    new_critic, expected, n_pairs, chunk = _pathwise_expected(
        policy,
        critic0,
        cashes,
        rewards,
        survivals,
        perm_state,
        policy_grad_norm=grad_norm,
        critic_steps=2,
        critic_samples=10_000,
        targets=targets,
        hjb=hjb,
    )
    torch.testing.assert_close(_flat(critic), new_critic, rtol=1e-6, atol=1e-8)
    if residual == "optimal":
        with torch.no_grad():  # the optimal residual differs from the policy's in this batch
            x = torch.cat([c.unsqueeze(1) for c in cashes[:-1]])
            u = policy0.mean_std(x)[0].clamp(0.0, 1.0)
            assert (hjb[1](critic0, x) - _hjb_residual_fd(critic0, model, x, u)).abs().max() > 1e-2
    assert set(metrics) == PATHWISE_KEYS | ({"loss/hjb_residual"} if hjb else set())
    _assert_metrics(metrics, expected, rel=1e-6 if hjb else 1e-9)  # finite-difference V', V'' (~1e-8)


def test_policy_hjb_residual_names_the_shape_it_refused():
    model = GHM64(GHMParams(**PARAMS))
    with pytest.raises(ValueError, match=r"^policy_hjb_residual: 1-D states expected, got states of shape \(3, 2\)$"):
        policy_hjb_residual(model, lambda x: x[:, 0], torch.zeros(3, 2), torch.zeros(3, 2))


# -- seeded steps draw only from the solver's generator --------------------------------------------


@pytest.mark.parametrize("solver", ["mc_pg", "pathwise", "actor_critic"])
@pytest.mark.usefixtures("float64_default")
def test_a_seeded_step_leaves_the_global_random_stream_alone(solver):
    """Initial states, noise and subsample permutations come from the solver's generator: the
    global stream is not drawn from, and the same seed gives the same step."""

    def step():
        model = GHM64(GHMParams(**PARAMS))
        simulator = TrajectorySimulator(model, dt=DT, horizon=DT * STEPS)
        policy, critic = _nets()
        generator = torch.Generator().manual_seed(7)
        if solver == "mc_pg":
            algo = MonteCarloPolicyGradient(
                policy, simulator, critic, n_trajectories=6, score_samples=4, generator=generator
            )
        elif solver == "pathwise":
            algo = PathwisePolicyGradient(
                policy, simulator, critic, n_trajectories=6, critic_steps=2, critic_samples=5, generator=generator
            )
        else:
            algo = ActorCritic(
                policy,
                simulator,
                critic,
                n_trajectories=6,
                critic_steps=2,
                critic_samples=5,
                hjb_weight=0.5,
                hjb_samples=8,
                hjb_interval=(0.05, 1.0),
                generator=generator,
            )
        global_state = torch.random.get_rng_state()
        metrics = algo.train_step()
        assert torch.equal(torch.random.get_rng_state(), global_state)
        return _flat(policy), _flat(critic), metrics

    first = step()
    torch.manual_seed(12345)
    second = step()
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    assert {k: float(v) for k, v in first[2].items()} == {k: float(v) for k, v in second[2].items()}


# -- soft_clip -------------------------------------------------------------------------------------


def test_soft_clip_is_its_softplus_formula_on_a_box_that_is_not_the_unit_box():
    """``low + softplus(k (v - low)) / k - softplus(k (v - high)) / k``, ``k = sharpness /
    (high - low)``, written with log1p/exp; a box of width 0.25 and a nonzero lower bound
    (the GHM box is [0, 1]^2, where width and ``high + low`` are both 1)."""
    low = torch.tensor([-0.5, 0.25], dtype=torch.float64)
    high = torch.tensor([-0.25, 0.5], dtype=torch.float64)
    values = torch.tensor([[-0.6, 0.2], [-0.4, 0.3], [-0.2, 0.55], [-0.26, 0.26]], dtype=torch.float64)
    sharpness = 5.0
    k = sharpness / (high - low)
    expected = low + torch.log1p(torch.exp(k * (values - low))) / k - torch.log1p(torch.exp(k * (values - high))) / k
    out = soft_clip(values, low, high, sharpness)
    torch.testing.assert_close(out, expected, rtol=1e-13, atol=1e-15)
    # within ln 2 / k of the hard clip, and a strictly increasing function of the value
    hard = torch.maximum(torch.minimum(values, high), low)
    assert bool(((out - hard).abs() <= math.log(2) / k + 1e-15).all())
    # a degenerate box (high == low) is the constant low, not NaN
    flat = soft_clip(values, low, low, sharpness)
    torch.testing.assert_close(flat, low.expand_as(values), rtol=0, atol=1e-12)

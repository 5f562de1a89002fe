"""Pinned update rules of the GHM solvers.

Each test runs ONE ``train_step`` of a solver on a tiny batch (a few paths, a few steps,
float64), captures the batch the solver simulated, and recomputes the update inside the
test from the solvers' formulas (docs/ghm.md) with slow Python loops (reward-to-go, TD(lambda),
a hand-written Euler rollout, finite-difference HJB derivatives). The optimisers are
replaced by plain SGD so that ``theta' = theta - lr * grad`` and the parameters after the
step pin the gradient itself (Adam's first step only sees its sign).

The reward test checks the GHM payout ``a_L - (1 + lambda) a_E`` on a deterministic
(sigma = 0) batch computed by hand.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from pglab.algos.actor_critic import ActorCritic
from pglab.algos.mc_pg import MonteCarloPolicyGradient
from pglab.algos.pathwise import PathwisePolicyGradient
from pglab.envs.ghm import GHMModel, GHMParams
from pglab.envs.simulator import TrajectorySimulator
from pglab.nets import GaussianPolicy, ValueNetwork

DT = 0.1
STEPS = 5
LR = 0.05
# rho = 0.5: per-step discount exp(-0.05) = 0.951, far enough from 1 that ignoring it shows
PARAMS = dict(mu=0.1, sigma=0.4, r=0.05, lambda_dilution=0.25, rho=0.5, initial_cash_low=0.02, initial_cash_high=0.5)


class GHM64(GHMModel):
    """The GHM model drawing float64 initial states (the solvers ask for the default)."""

    def initial_states(self, num_paths, generator=None, *, device="cpu", dtype=torch.float64):
        return super().initial_states(num_paths, generator, device=device, dtype=torch.float64)


@pytest.fixture
def float64_default():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _flat(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


def _grad(loss: torch.Tensor, module: torch.nn.Module) -> torch.Tensor:
    params = list(module.parameters())
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return torch.cat(
        [(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(params, grads, strict=False)]
    )


def _nets(seed: int = 0, mean_shift: tuple[float, float] = (0.0, 0.0)):
    torch.manual_seed(seed)
    policy = GaussianPolicy(1, 2, (5,), log_std_init=-0.7, mean_init=(0.4, 0.3), mean_shift=mean_shift).double()
    if mean_shift[1] > 0:
        with torch.no_grad():
            policy.mean_net[-1].bias[1] = -6.0  # issuance mean ~ softplus(-6) - shift < 0
    # larger weights than the default init so that V varies visibly across the cash range
    value = ValueNetwork(1, (5,)).double()
    with torch.no_grad():
        for p in value.parameters():
            p.mul_(3.0)
    return policy, value


def _use_sgd(algo, policy_attr: str, critic_attr: str, policy, critic) -> None:
    setattr(algo, policy_attr, torch.optim.SGD(policy.parameters(), lr=LR))
    setattr(algo, critic_attr, torch.optim.SGD(critic.parameters(), lr=LR))


# -- 1. the reward: dividends minus (1 + lambda) x issuance --------------------------------------


class _ConstantRates(torch.nn.Module):
    def __init__(self, rates):
        super().__init__()
        self.rates = torch.tensor(rates, dtype=torch.float64)

    def mean_std(self, states):
        return self.rates.to(states).expand(states.shape[0], -1), torch.ones(states.shape[0], 2, dtype=states.dtype)


def test_ghm_reward_is_dividends_minus_diluted_issuance_on_a_deterministic_batch():
    params = GHMParams(mu=0.1, sigma=0.0, r=0.05, lambda_dilution=0.25, rho=0.5)
    model = GHMModel(params)
    # the rate itself: 0.3 - 1.25 * 0.2 = 0.05 (a flipped dilution sign gives 0.15 or 0.55)
    rate = model.reward_rate(torch.zeros(1, 1, dtype=torch.float64), torch.tensor([[0.3, 0.2]], dtype=torch.float64))
    assert rate.item() == pytest.approx(0.05, abs=1e-15)

    dt, steps = 0.1, 4
    simulator = TrajectorySimulator(model, dt=dt, horizon=dt * steps)
    # path 0 stays solvent; path 1 (cash 0.05, net outflow 0.6 - 0.1 - 0.2 = 0.3 per unit
    # time) is liquidated in step 1 and earns nothing afterwards
    a_L, a_E = 0.6, 0.2
    initial = torch.tensor([[1.0], [0.05]], dtype=torch.float64)
    paths = simulator.rollout(_ConstantRates([a_L, a_E]), initial, deterministic=True)

    gamma = math.exp(-0.5 * dt)
    expected_rewards, expected_cash, expected_returns = [], [], []
    for c0 in (1.0, 0.05):
        cash, alive, row, traj, total = c0, True, [], [c0], 0.0
        for t in range(steps):
            reward = (a_L - (1.0 + 0.25) * a_E) * dt if alive else 0.0
            row.append(reward)
            total += gamma**t * reward
            if alive:
                cash = cash + (0.1 + 0.05 * cash - a_L + a_E) * dt
                alive = cash > 0.0
            traj.append(cash)
        expected_rewards.append(row)
        expected_cash.append(traj)
        expected_returns.append(total)
    expected_rewards = torch.tensor(expected_rewards, dtype=torch.float64)
    assert expected_rewards[0, 0].item() == pytest.approx(0.035)  # (0.6 - 1.25 * 0.2) * 0.1
    torch.testing.assert_close(paths.rewards, expected_rewards, rtol=0, atol=1e-14)
    torch.testing.assert_close(
        paths.states[:, :, 0], torch.tensor(expected_cash, dtype=torch.float64), rtol=0, atol=1e-14
    )
    torch.testing.assert_close(paths.returns(), torch.tensor(expected_returns, dtype=torch.float64), rtol=0, atol=1e-14)
    assert paths.dones.tolist() == [[False] * 4, [False, True, True, True]]


# -- 2. Monte Carlo policy gradient (REINFORCE with a learned baseline, reward-to-go) -----------


def _value_slope_fd(baseline, x: float, h: float = 1e-5) -> float:
    """V'(x) by a central finite difference (not autograd, as the solver uses)."""
    with torch.no_grad():
        up = baseline(torch.tensor([[x + h]], dtype=torch.float64)).item()
        down = baseline(torch.tensor([[x - h]], dtype=torch.float64)).item()
    return (up - down) / (2 * h)


def _martingale_terms(policy, baseline, paths, gamma, params):
    """The martingale control variate's per-step terms written out for GHM by slow loops:
    ``w_j = gamma m_j V'(c_j) (c_{j+1} - c_j - (mu + r c_j - a_L + a_E) dt)`` and, at decisions,
    ``v_j = sum_{s<k} gamma^s dt [(1 - gamma V'), (gamma V' - (1 + lambda))] . (a_j - mean(c_j))``
    per control whose mean lies strictly inside [0, max]. Returns lists ``[B][T]`` of
    ``w + v`` and of ``v``."""
    B, T = paths.rewards.shape
    k, dt = paths.action_repeat, paths.dt
    held = dt * sum(gamma**s for s in range(k))
    total = [[0.0] * T for _ in range(B)]
    own = [[0.0] * T for _ in range(B)]
    for i in range(B):
        for t in range(T):
            if paths.masks[i, t] == 0:
                continue
            c, c_next = paths.states[i, t, 0].item(), paths.states[i, t + 1, 0].item()
            a_L, a_E = paths.controls[i, t].tolist()
            slope = _value_slope_fd(baseline, c)
            w = gamma * slope * (c_next - c - (params.mu + params.r * c - a_L + a_E) * dt)
            v = 0.0
            if t % k == 0:
                with torch.no_grad():
                    mean = policy.mean_std(paths.states[i, t : t + 1])[0][0].tolist()
                marginal = [1.0 - gamma * slope, gamma * slope - (1.0 + params.lambda_dilution)]
                highs = [params.a_L_max, params.a_E_max]
                for d in range(2):
                    if 0.0 < mean[d] < highs[d]:
                        v += held * marginal[d] * (paths.actions[i, t, d].item() - mean[d])
            total[i][t], own[i][t] = w + v, v
    return total, own


def _mc_reference(
    policy,
    baseline,
    paths,
    initial,
    gamma,
    perm_generator,
    *,
    advantage,
    policy_steps,
    baseline_steps,
    advantage_steps=0,
    control_variate="none",
    params=None,
):
    """Parameters of (policy, baseline) after one MC iteration with SGD, by slow loops.

    The scored (path, step) pairs are the alive decision steps (t % action_repeat == 0); the
    solver splits a uniform permutation of them (drawn from ``perm_generator``, the solver's
    stream right after the rollout) into ``policy_steps`` disjoint chunks."""
    B, T = paths.rewards.shape
    states, actions, rewards = paths.states, paths.actions, paths.rewards
    k = paths.action_repeat
    alive_end = [not bool(paths.dones[i, -1]) for i in range(B)]
    with torch.no_grad():
        boot = [baseline(states[i, -1:]).item() if alive_end[i] else 0.0 for i in range(B)]
    noise_terms = own = [[0.0] * T for _ in range(B)]
    if control_variate == "martingale":
        noise_terms, own = _martingale_terms(policy, baseline, paths, gamma, params)
    rtg = [[0.0] * T for _ in range(B)]
    for i in range(B):
        g = boot[i]
        for t in reversed(range(T)):
            g = rewards[i, t].item() - noise_terms[i][t] + gamma * (0.0 if bool(paths.dones[i, t]) else 1.0) * g
            rtg[i][t] = g
    decisions = [(i, t) for i in range(B) for t in range(T) if paths.masks[i, t] > 0 and t % k == 0]
    chunk = len(decisions) // policy_steps
    order = torch.randperm(len(decisions), generator=perm_generator)[: chunk * policy_steps].tolist()
    used = [decisions[j] for j in order]
    with torch.no_grad():
        if advantage == "trajectory":
            path_adv = [rtg[i][0] - baseline(initial[i : i + 1]).item() for i in range(B)]
            adv = torch.tensor([path_adv[i] for i, _ in used])
        elif advantage_steps == 0:
            # the decision's own exploration term is added back: it is the signal
            adv = torch.tensor([rtg[i][t] + own[i][t] - baseline(states[i, t : t + 1]).item() for i, t in used])
        else:
            # n-step: the payout of steps t..t+n-1, then the critic (0 if liquidated by then)
            def n_step(i, t):
                if t + advantage_steps >= T:
                    return rtg[i][t]
                payout = sum(gamma**j * rewards[i, t + j].item() for j in range(advantage_steps))
                alive = paths.masks[i, t + advantage_steps].item()
                return (
                    payout
                    + gamma**advantage_steps
                    * alive
                    * baseline(states[i, t + advantage_steps : t + advantage_steps + 1]).item()
                )

            adv = torch.tensor([n_step(i, t) - baseline(states[i, t : t + 1]).item() for i, t in used])
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    for step in range(policy_steps):  # sequential SGD steps, each on its own chunk
        part = range(step * chunk, (step + 1) * chunk)
        x = torch.stack([states[used[j][0], used[j][1]] for j in part])
        a = torch.stack([actions[used[j][0], used[j][1]] for j in part])
        mean, std = policy.mean_std(x)
        log_pi = (-0.5 * ((a - mean) / std) ** 2 - std.log() - 0.5 * math.log(2 * math.pi)).sum(-1)
        # a chunk's loss is rescaled to estimate -(1/B) sum over ALL decisions of log pi * A
        loss = -(log_pi * adv[step * chunk : (step + 1) * chunk]).sum() * (len(decisions) / chunk) / B
        with torch.no_grad():
            for p, g in zip(policy.parameters(), torch.autograd.grad(loss, list(policy.parameters())), strict=False):
                p -= LR * g
    for step in range(baseline_steps):
        if advantage == "trajectory":
            x, y = initial, torch.tensor([rtg[i][0] for i in range(B)])
        else:
            part = range((step % policy_steps) * chunk, (step % policy_steps + 1) * chunk)
            x = torch.stack([states[used[j][0], used[j][1]] for j in part])
            y = torch.tensor([rtg[used[j][0]][used[j][1]] for j in part])
        loss = ((baseline(x) - y) ** 2).mean()
        with torch.no_grad():
            for p, g in zip(
                baseline.parameters(), torch.autograd.grad(loss, list(baseline.parameters())), strict=False
            ):
                p -= LR * g
    return _flat(policy), _flat(baseline), len(decisions)


def spy_on_rollouts(simulator) -> list:
    """Wrap ``simulator.rollout`` so that each call's (paths, initial states, generator state
    after the rollout) is appended to the returned list: the references recompute the
    update from exactly the batch the solver simulated."""
    captured = []
    rollout = simulator.rollout

    def spy(policy, initial, generator):
        captured.append((rollout(policy, initial, generator), initial.clone(), generator.get_state()))
        return captured[-1][0]

    simulator.rollout = spy
    return captured


@pytest.mark.parametrize(
    "advantage, action_repeat, policy_steps, baseline_steps, advantage_steps, control_variate",
    [
        ("reward_to_go", 1, 1, 1, 0, "none"),
        ("reward_to_go", 2, 2, 3, 0, "none"),  # held actions, several policy steps
        ("reward_to_go", 2, 2, 1, 2, "none"),  # the critic after 2 steps (advantage_horizon)
        ("trajectory", 2, 1, 2, 0, "none"),
        ("reward_to_go", 1, 1, 1, 0, "martingale"),
        ("reward_to_go", 2, 2, 3, 0, "martingale"),
    ],
)
def test_mc_policy_gradient_step_matches_a_reference_loop(
    float64_default, advantage, action_repeat, policy_steps, baseline_steps, advantage_steps, control_variate
):
    model = GHM64(GHMParams(**PARAMS))
    simulator = TrajectorySimulator(model, dt=DT, horizon=DT * STEPS, action_repeat=action_repeat)
    # with the control variate, a mean shift puts the issuance mean below 0 (outside the box,
    # where the exploration term is off) while the dividend mean stays inside
    policy, baseline = _nets(mean_shift=(0.0, 0.0) if control_variate == "none" else (0.2, 0.2))
    generator = torch.Generator().manual_seed(4)
    algo = MonteCarloPolicyGradient(
        policy,
        simulator,
        baseline,
        n_trajectories=6,
        max_grad_norm=1e9,
        advantage=advantage,
        terminal_value="critic",
        policy_steps=policy_steps,
        baseline_steps=baseline_steps,
        advantage_steps=advantage_steps,
        control_variate=control_variate,
        generator=generator,
    )
    _use_sgd(algo, "policy_optimizer", "baseline_optimizer", policy, baseline)
    policy0, baseline0 = copy.deepcopy(policy), copy.deepcopy(baseline)
    captured = spy_on_rollouts(simulator)
    algo.train_step()
    paths, initial, perm_state = captured[0]
    assert paths.rewards.dtype == torch.float64
    # the batch exercises both a liquidation and a truncation (bootstrapped with V)
    assert bool(paths.dones[:, -1].any()) and bool((~paths.dones[:, -1]).any())
    new_policy, new_baseline, n_decisions = _mc_reference(
        copy.deepcopy(policy0),
        copy.deepcopy(baseline0),
        paths,
        initial,
        math.exp(-PARAMS["rho"] * DT),
        torch.Generator().set_state(perm_state),
        advantage=advantage,
        policy_steps=policy_steps,
        baseline_steps=baseline_steps,
        advantage_steps=advantage_steps,
        control_variate=control_variate,
        params=model.params,
    )
    assert n_decisions > 6
    assert (new_policy - _flat(policy0)).abs().max() > 1e-4  # the step is not negligible
    # the control variate's reference takes V' by finite differences (1e-10), not autograd
    tolerance = dict(rtol=1e-9, atol=1e-11) if control_variate == "none" else dict(rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(_flat(policy), new_policy, **tolerance)
    assert (new_baseline - _flat(baseline0)).abs().max() > 1e-4
    torch.testing.assert_close(_flat(baseline), new_baseline, **tolerance)


# -- 3. pathwise gradient and the actor-critic's TD(lambda) + HJB critic ------------------------


def _soft_clip(v, low, high, k_total):
    k = k_total / (high - low)
    return low + torch.nn.functional.softplus(k * (v - low)) / k - torch.nn.functional.softplus(k * (v - high)) / k


def _hand_rollout(policy, initial, noise, p, sharpness):
    """Euler rollout of the deterministic softly clipped policy with Brownian-bridge survival
    written out for GHM: lists over time of cash [B], reward [B], survival [B]."""
    low = torch.tensor([0.0, 0.0])
    high = torch.tensor([p.a_L_max, p.a_E_max])
    cash = initial[:, 0]
    alive = cash > 0
    cashes, rewards, survivals = [cash], [], []
    for t in range(noise.shape[1]):
        u = _soft_clip(policy.mean_std(cash.unsqueeze(1))[0], low, high, sharpness)
        a_L, a_E = u[:, 0], u[:, 1]
        nxt = cash + (p.mu + p.r * cash - a_L + a_E) * DT + p.sigma * math.sqrt(DT) * noise[:, t, 0]
        rewards.append((a_L - (1.0 + p.lambda_dilution) * a_E) * DT)
        s = (1.0 - torch.exp(-2.0 * cash.clamp_min(0) * nxt.clamp_min(0) / (p.sigma**2 * DT))) * alive
        survivals.append(s)
        alive = alive & (s > 0)
        cash = torch.where(alive, nxt, cash)
        cashes.append(cash)
    return cashes, rewards, survivals


def _run_pathwise(cls, **kwargs):
    model = GHM64(GHMParams(**PARAMS))
    simulator = TrajectorySimulator(model, dt=DT, horizon=DT * STEPS)
    policy, critic = _nets(1)
    algo = cls(
        policy,
        simulator,
        critic,
        n_trajectories=6,
        max_grad_norm=1e9,
        clip_sharpness=20.0,
        critic_steps=1,
        critic_samples=10_000,
        generator=torch.Generator().manual_seed(2),
        **kwargs,
    )
    _use_sgd(algo, "policy_optimizer", "critic_optimizer", policy, critic)
    policy0, critic0 = copy.deepcopy(policy), copy.deepcopy(critic)
    captured = []
    rollout = algo.rollout

    def spy(initial, noise):
        captured.append((initial.clone(), noise.clone()))
        return rollout(initial, noise)

    algo.rollout = spy
    algo.train_step()
    initial, noise = captured[0]
    assert noise.dtype == torch.float64
    cashes, rewards, survivals = _hand_rollout(policy0, initial, noise, model.params, 20.0)
    return model, algo, policy, critic, policy0, critic0, cashes, rewards, survivals


def _pathwise_policy_reference(policy0, critic0, cashes, rewards, survivals, gamma):
    B = cashes[0].shape[0]
    weight = torch.ones(B)
    payout = torch.zeros(B)
    for t, (r, s) in enumerate(zip(rewards, survivals, strict=False)):
        payout = payout + gamma**t * weight * r
        weight = weight * s
    payout = payout + gamma ** len(rewards) * weight * critic0(cashes[-1].unsqueeze(1))
    return _flat(policy0) - LR * _grad(-payout.mean(), policy0)


def _alive_pairs(cashes, survivals):
    """(t, i) of the states alive on the grid (weight > 0 at the start of step t)."""
    B, T = cashes[0].shape[0], len(survivals)
    weight = torch.ones(B)
    pairs = []
    for t in range(T):
        for i in range(B):
            if weight[i] > 0:
                pairs.append((t, i))
        weight = weight * survivals[t].detach()
    return pairs


def test_pathwise_step_matches_autograd_through_a_hand_written_rollout(float64_default):
    model, algo, policy, critic, policy0, critic0, cashes, rewards, survivals = _run_pathwise(PathwisePolicyGradient)
    gamma = math.exp(-PARAMS["rho"] * DT)
    # the batch has a path liquidated before T (so survival and its gradient matter)
    assert bool((survivals[-1] == 0).any()) and bool((survivals[-1] > 0).any())
    new_policy = _pathwise_policy_reference(policy0, critic0, cashes, rewards, survivals, gamma)
    assert (new_policy - _flat(policy0)).abs().max() > 1e-4
    torch.testing.assert_close(_flat(policy), new_policy, rtol=1e-9, atol=1e-11)

    # critic: MSE on the survival-weighted reward-to-go G_t = r_t + gamma s_t G_{t+1}, G_T = V(x_T)
    T = len(rewards)
    with torch.no_grad():
        g = critic0(cashes[-1].unsqueeze(1))
        rtg = [None] * T
        for t in reversed(range(T)):
            g = rewards[t] + gamma * survivals[t] * g
            rtg[t] = g
    pairs = _alive_pairs(cashes, survivals)
    x = torch.stack([cashes[t][i].detach() for t, i in pairs]).unsqueeze(1)
    y = torch.stack([rtg[t][i] for t, i in pairs])
    loss = ((critic0(x) - y) ** 2).mean()
    new_critic = _flat(critic0) - LR * _grad(loss, critic0)
    assert (new_critic - _flat(critic0)).abs().max() > 1e-4
    torch.testing.assert_close(_flat(critic), new_critic, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("hjb_weight", [0.0, 0.7])
def test_actor_critic_td_lambda_and_hjb_critic_step_matches_a_reference(float64_default, hjb_weight):
    lam = 0.6
    model, algo, policy, critic, policy0, critic0, cashes, rewards, survivals = _run_pathwise(
        ActorCritic, gae_lambda=lam, hjb_weight=hjb_weight, hjb_samples=10_000
    )
    p = model.params
    gamma = math.exp(-p.rho * DT)
    new_policy = _pathwise_policy_reference(policy0, critic0, cashes, rewards, survivals, gamma)
    torch.testing.assert_close(_flat(policy), new_policy, rtol=1e-9, atol=1e-11)

    # TD(lambda) targets by the recursion, with the pre-step critic:
    #   delta_t = r_t + gamma s_t V(x_{t+1}) - V(x_t);  A_t = delta_t + gamma lam s_t A_{t+1}
    T = len(rewards)
    with torch.no_grad():
        values = [critic0(c.unsqueeze(1)) for c in cashes]  # V(x_0) .. V(x_T)
        adv = torch.zeros_like(values[0])
        targets = [None] * T
        for t in reversed(range(T)):
            delta = rewards[t] + gamma * survivals[t] * values[t + 1] - values[t]
            adv = delta + gamma * lam * survivals[t] * adv
            targets[t] = adv + values[t]
    pairs = _alive_pairs(cashes, survivals)
    x = torch.stack([cashes[t][i].detach() for t, i in pairs]).unsqueeze(1)
    y = torch.stack([targets[t][i] for t, i in pairs])
    loss = ((critic0(x) - y) ** 2).mean()
    if hjb_weight > 0:
        # policy-evaluation HJB residual rho V - [f + b V' + 0.5 sigma^2 V''] with the hard-clipped
        # mean of the policy as it is when the critic steps (after this iteration's actor step)
        # and V', V'' by central differences (float64, h = 1e-4: error ~1e-8)
        with torch.no_grad():
            u = policy.mean_std(x)[0].clamp(0.0, 1.0)
        c, a_L, a_E = x[:, 0], u[:, 0], u[:, 1]
        h = 1e-4
        v0, vp, vm = critic0(x), critic0(x + h), critic0(x - h)
        first, second = (vp - vm) / (2 * h), (vp - 2 * v0 + vm) / h**2
        hamiltonian = (
            (a_L - (1 + p.lambda_dilution) * a_E) + (p.mu + p.r * c - a_L + a_E) * first + 0.5 * p.sigma**2 * second
        )
        hjb = (p.rho * v0 - hamiltonian).pow(2).mean()
        assert hjb.item() > 1e-3  # the term is not negligible in this batch
        loss = loss + hjb_weight * hjb
    new_critic = _flat(critic0) - LR * _grad(loss, critic0)
    assert (new_critic - _flat(critic0)).abs().max() > 1e-4
    torch.testing.assert_close(_flat(critic), new_critic, rtol=1e-6, atol=1e-8)

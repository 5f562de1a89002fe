"""GHM pathwise and actor-critic solvers: smoothing, bridge survival, gradients, training, resume."""

from __future__ import annotations

import math

import pytest
import torch
from test_ghm import TINY

from pglab.algos.actor_critic import ActorCritic, policy_hjb_residual
from pglab.algos.ghm_train import GHMTrainConfig, train_ghm
from pglab.algos.pathwise import PathwisePolicyGradient, soft_clip
from pglab.envs.ghm import GHMModel, GHMParams
from pglab.envs.simulator import TrajectorySimulator
from pglab.estimators import compute_gae, discounted_return, reward_to_go
from pglab.nets import GaussianPolicy, ValueNetwork
from pglab.run.checkpoint import load_checkpoint_file

QUIET = dict(echo=lambda *a, **k: None)


def test_soft_clip_is_close_to_the_hard_clip_and_strictly_increasing():
    values = torch.linspace(-2.0, 3.0, 2001, dtype=torch.float64, requires_grad=True)
    low, high = torch.tensor(0.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64)
    sharpness = 50.0
    smooth = soft_clip(values, low, high, sharpness)
    hard = values.detach().clamp(0.0, 1.0)
    assert float((smooth.detach() - hard).abs().max()) <= math.log(2) / sharpness + 1e-9
    (slope,) = torch.autograd.grad(smooth.sum(), values)
    near = (values.detach() > -0.3) & (values.detach() < 1.3)
    assert bool((slope[near] > 0).all()) and bool((slope <= 1 + 1e-12).all())
    assert float(slope[values.detach() < -1].max()) < 1e-10  # gradient fades far outside the box


def test_bridge_survival_matches_fine_simulation_and_vanishes_continuously_at_zero():
    """P(a Brownian path from c to c' over dt stays above 0) against a fine Brownian bridge."""
    params = GHMParams(sigma=0.5)
    model = GHMModel(params)
    dt = 0.04
    start, end = 0.05, 0.08
    generator = torch.Generator().manual_seed(0)
    num_paths, substeps = 20_000, 2_000
    # Brownian bridge from start to end with volatility sigma: W_s - (s/dt) W_dt + linear interpolation
    increments = torch.randn((num_paths, substeps), generator=generator, dtype=torch.float64) * math.sqrt(dt / substeps)
    walk = torch.cumsum(increments, 1)
    times = torch.arange(1, substeps + 1, dtype=torch.float64) * dt / substeps
    bridge = params.sigma * (walk - times / dt * walk[:, -1:]) + start + (end - start) * times / dt
    survived = float((bridge.min(1).values > 0).double().mean())
    formula = float(model.step_survival(torch.tensor([[start]]), torch.tensor([[end]]), torch.zeros(1, 2), dt))
    assert formula == pytest.approx(1 - math.exp(-2 * start * end / (params.sigma**2 * dt)))
    # the discretised bridge misses crossings between substeps, so it survives slightly more often
    assert survived == pytest.approx(formula, abs=0.02)
    near_zero = model.step_survival(
        torch.tensor([[0.3]] * 3), torch.tensor([[1e-3], [1e-6], [-1e-3]]), torch.zeros(3, 2), 0.01
    )
    assert near_zero[0] > near_zero[1] > near_zero[2] and near_zero[1] < 1e-3 and near_zero[2] == 0


def test_returns_and_gae_accept_fractional_terminations():
    """dones = 1 - survival probability: the estimators weight the future by the survival
    product, as a reference loop does."""
    generator = torch.Generator().manual_seed(1)
    rewards = torch.randn((3, 6), generator=generator, dtype=torch.float64)
    survival = torch.rand((3, 6), generator=generator, dtype=torch.float64)
    values = torch.randn((3, 6), generator=generator, dtype=torch.float64)
    bootstrap = torch.randn(3, generator=generator, dtype=torch.float64)
    gamma, lam = 0.9, 0.7
    expected_rtg = torch.empty_like(rewards)
    expected_adv = torch.empty_like(rewards)
    for path in range(3):
        running, advantage = float(bootstrap[path]), 0.0
        for t in range(5, -1, -1):
            next_value = float(bootstrap[path]) if t == 5 else float(values[path, t + 1])
            running = float(rewards[path, t]) + gamma * float(survival[path, t]) * running
            expected_rtg[path, t] = running
            delta = float(rewards[path, t]) + gamma * float(survival[path, t]) * next_value - float(values[path, t])
            advantage = delta + gamma * lam * float(survival[path, t]) * advantage
            expected_adv[path, t] = advantage
    dones = 1.0 - survival
    assert torch.allclose(reward_to_go(rewards, dones, gamma, bootstrap), expected_rtg)
    assert torch.allclose(discounted_return(rewards, dones, gamma, bootstrap), expected_rtg[:, 0])
    advantages, targets = compute_gae(rewards, values, dones, None, bootstrap, gamma, lam)
    assert torch.allclose(advantages, expected_adv) and torch.allclose(targets, expected_adv + values)
    # lambda = 1: the TD(lambda) targets are the Monte Carlo reward-to-go
    assert torch.allclose(compute_gae(rewards, values, dones, None, bootstrap, gamma, 1.0)[1], expected_rtg)


def _pathwise_solver(cls=PathwisePolicyGradient, **kwargs):
    torch.manual_seed(0)
    model = GHMModel(GHMParams())
    simulator = TrajectorySimulator(model, dt=0.01, horizon=1.0)
    policy = GaussianPolicy(1, 2, (16,), action_high=(1.0, 1.0), mean_init=[0.3, 0.3], mean_shift=[0.2, 0.2])
    critic = ValueNetwork(1, (16,))
    return cls(policy, simulator, critic, n_trajectories=64, generator=torch.Generator().manual_seed(0), **kwargs)


def test_pathwise_gradient_equals_the_derivative_of_the_smoothed_payout():
    """With the Brownian noise held fixed, the smoothed payout is a differentiable function
    of the parameters: autograd must agree with a central finite difference along a random
    direction (it would not with the hard absorption rule, whose jumps autograd ignores)."""
    solver = _pathwise_solver()
    policy = solver.policy
    policy.double()
    solver.critic.double()
    generator = torch.Generator().manual_seed(5)
    initial = torch.rand((64, 1), generator=generator, dtype=torch.float64) * 0.5  # near 0: many absorptions
    noise = torch.randn((64, solver.simulator.num_steps, 1), generator=generator, dtype=torch.float64)

    def payout() -> torch.Tensor:
        states, rewards, survival = solver.rollout(initial, noise)
        return discounted_return(
            rewards, 1.0 - survival, solver.simulator.discount, solver.critic(states[:, -1])
        ).mean()

    parameters = [p for p in policy.parameters() if p.requires_grad]
    grads = torch.autograd.grad(payout(), parameters, allow_unused=True)
    direction = [torch.randn(p.shape, generator=generator, dtype=torch.float64) for p in parameters]
    analytic = sum(float((g * d).sum()) for g, d in zip(grads, direction, strict=False) if g is not None)
    eps = 1e-5
    with torch.no_grad():
        for p, d in zip(parameters, direction, strict=False):
            p.add_(eps * d)
        plus = float(payout())
        for p, d in zip(parameters, direction, strict=False):
            p.sub_(2 * eps * d)
        minus = float(payout())
    assert analytic == pytest.approx((plus - minus) / (2 * eps), rel=1e-4, abs=1e-9)
    _, _, survival = solver.rollout(initial, noise)
    assert float((survival == 0).any(1).double().mean()) > 0.05  # the test does exercise absorption


def test_policy_hjb_residual_matches_a_hand_computed_case():
    """V(c) = 2c - c^2 with constant controls (a_L, a_E) = (0.3, 0.1): residual =
    rho V - (a_L - 1.1 a_E) - (mu + r c - a_L + a_E)(2 - 2c) - 0.5 sigma^2 (-2)."""
    params = GHMParams()
    model = GHMModel(params)
    cash = torch.linspace(0.1, 2.0, 7).unsqueeze(1)
    controls = torch.tensor([[0.3, 0.1]]).expand(7, 2)
    residual = policy_hjb_residual(model, lambda s: 2 * s[:, 0] - s[:, 0] ** 2, cash, controls)
    c = cash[:, 0]
    expected = (
        params.rho * (2 * c - c**2)
        - (0.3 - 1.1 * 0.1)
        - (params.mu + params.r * c - 0.3 + 0.1) * (2 - 2 * c)
        + params.sigma**2
    )
    assert torch.allclose(residual, expected, atol=1e-5)


@pytest.mark.parametrize("hjb_weight", [0.0, 0.5])
def test_actor_critic_step_updates_both_networks(hjb_weight):
    solver = _pathwise_solver(ActorCritic, gae_lambda=0.9, hjb_weight=hjb_weight, critic_steps=2)
    before = {
        name: [p.detach().clone() for p in net.parameters()]
        for name, net in (("policy", solver.policy), ("critic", solver.critic))
    }
    metrics = solver.train_step()
    assert all(torch.isfinite(v).all() for v in metrics.values())
    assert ("loss/hjb_residual" in metrics) == (hjb_weight > 0)
    for name, net in (("policy", solver.policy), ("critic", solver.critic)):
        assert any(not torch.equal(b, p) for b, p in zip(before[name], net.parameters(), strict=False)), name


@pytest.mark.parametrize("algo", ["pathwise", "actor-critic"])
def test_new_solvers_learn_the_deterministic_toy_optimum(tmp_path, algo):
    """sigma = 0, mu = r = 0: pay the maximal dividend, never issue (value (1 - e^{-rho c}) / rho)."""
    config = GHMTrainConfig(
        **{
            **TINY,
            **dict(
                algo=algo,
                params=GHMParams(sigma=0.0, mu=0.0, r=0.0, rho=1.0, initial_cash_low=0.2, initial_cash_high=1.5),
                n_trajectories=128,
                T=2.0,
                dt=0.05,
                action_repeat=1,
                lr_policy=3e-3,
                lr_baseline=3e-3,
                n_iterations=40,
                policy_hidden_dims=(16,),
                baseline_hidden_dims=(16,),
                save_interval=1000,
                log_dir=tmp_path / "run",
            ),
        }
    )
    result = train_ghm(config, **QUIET)
    import pglab

    agent = pglab.load_checkpoint(result.run_dir / "checkpoints" / "checkpoint_latest.pt")
    rates = agent.policy.act(torch.tensor([[0.5], [1.0]]), deterministic=True)
    assert torch.all(rates[:, 0] > 0.9) and torch.all(rates[:, 1] < 0.05), rates


@pytest.mark.parametrize("algo", ["pathwise", "actor-critic"])
def test_new_solvers_resume_bit_identically(tmp_path, algo):
    extra = {"algo": algo, "hjb_weight": 0.1} if algo == "actor-critic" else {"algo": algo}
    train_ghm(GHMTrainConfig(n_iterations=4, log_dir=tmp_path / "full", **TINY, **extra), **QUIET)
    train_ghm(GHMTrainConfig(n_iterations=2, log_dir=tmp_path / "half", **TINY, **extra), **QUIET)
    train_ghm(GHMTrainConfig(n_iterations=4, resume=tmp_path / "half", **TINY, **extra), **QUIET)
    a, b = (load_checkpoint_file(tmp_path / name / "checkpoints") for name in ("full", "half"))
    assert a["kind"] == f"ghm-{algo}"
    for net in ("policy", "baseline"):
        for key, value in a["models"][net].items():
            assert torch.equal(value, b["models"][net][key]), (net, key)


def test_pathwise_without_a_critic_is_a_config_error(tmp_path):
    from pglab.cli import main as pglab_main

    code = pglab_main(
        [
            "train",
            "ghm",
            "--algo",
            "pathwise",
            "--no_baseline",
            "--log_dir",
            str(tmp_path / "x"),
            "--n_iterations",
            "1",
            "--device",
            "cpu",
        ]
    )
    assert code == 2
    assert not (tmp_path / "x").exists()


def test_compare_writes_one_table_csv_and_figure_consistent_with_the_runs(tmp_path, capsys):
    import csv
    import json

    from pglab.cli import main as pglab_main

    # coarse steps and no quick checks: the evaluation simulates until the discounted tail is
    # small, thousands of steps at dt = 0.01, and that is what this test would spend its time on
    evaluated = {
        **TINY,
        "final_eval": True,
        "eval_paths": 200,
        "eval_quick_paths": 0,
        "plots": False,
        "eval_cash": (0.5, 1.0),
        "eval_tail_tolerance": 0.5,
        "n_iterations": 2,
        "dt": 0.05,
        "eval_dt": 0.05,
    }
    for algo in ("mc", "pathwise"):
        train_ghm(GHMTrainConfig(algo=algo, log_dir=tmp_path / algo, **evaluated), **QUIET)
    out = tmp_path / "cmp"
    assert pglab_main(["compare", str(tmp_path / "mc"), str(tmp_path / "pathwise"), "--out", str(out)]) == 0
    markdown = (out / "comparison.md").read_text()
    assert "| mc |" in markdown and "| pathwise |" in markdown and "FD optimum" in markdown
    assert (out / "comparison.png").stat().st_size > 10_000
    rows = list(csv.DictReader((out / "comparison.csv").open()))
    assert [row["solver"] for row in rows] == ["mc", "pathwise", "FD optimum"]
    for row, algo in zip(rows, ("mc", "pathwise"), strict=False):
        evaluation = json.loads((tmp_path / algo / "evaluation.json").read_text())
        for point in evaluation["rows"]:
            assert float(row[f"% V* c={point['initial_cash']:g}"]) == pytest.approx(point["pct_of_optimum"], abs=0.006)
        assert float(row["HJB residual max"]) > 0
    # a second comparison into the same folder, or a run without a final evaluation: exit 2
    assert pglab_main(["compare", str(tmp_path / "mc"), "--out", str(out)]) == 2
    train_ghm(GHMTrainConfig(log_dir=tmp_path / "unevaluated", **{**evaluated, "final_eval": False}), **QUIET)
    assert pglab_main(["compare", str(tmp_path / "unevaluated"), "--out", str(tmp_path / "cmp2")]) == 2
    assert "evaluation.json" in capsys.readouterr().err
    assert not (tmp_path / "cmp2").exists()


@pytest.mark.parametrize(
    "flags, field",
    [
        (["--algo", "pathwise", "--simulator", "process"], "simulator"),
        (["--simulator", "batched", "--ray_address", "auto"], "ray_address"),
        (["--simulator", "process", "--n_workers", "0"], "n_workers"),
        (["--algo", "actor-critic", "--gae_lambda", "1.5"], "gae_lambda"),
        (["--algo", "actor-critic", "--hjb_weight", "-1"], "hjb_weight"),
        (["--algo", "actor-critic", "--hjb_residual", "best"], "hjb_residual"),
        (["--algo", "actor-critic", "--hjb_c_min", "-0.1"], "hjb_c_min"),
        (["--algo", "actor-critic", "--hjb_c_min", "1.0", "--hjb_c_max", "0.5"], "hjb_c_max"),
        (["--algo", "actor-critic", "--hjb_c_min", "3.0"], "hjb_c_min"),
        (["--clip_sharpness", "0"], "clip_sharpness"),
    ],
)
def test_bad_solver_flags_exit_2_naming_the_field(tmp_path, capsys, flags, field):
    from pglab.cli import main as pglab_main

    assert pglab_main(["train", "ghm", *flags, "--log_dir", str(tmp_path / "run"), "--device", "cpu"]) == 2
    assert field in capsys.readouterr().err
    assert not (tmp_path / "run").exists()

"""GHM cash model: dynamics, FD reference, Monte Carlo policy gradient, run machinery, CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import pglab
from pglab.algos.ghm_train import GHMTrainConfig, train_ghm
from pglab.algos.mc_pg import MonteCarloPolicyGradient
from pglab.cli import main as pglab_main
from pglab.envs.ghm import GHMModel, GHMParams
from pglab.envs.simulator import TrajectorySimulator, euler_maruyama_step
from pglab.errors import TensorContractError
from pglab.hjb.fd import solve_hjb_1d, solve_hjb_1d_extrapolated
from pglab.nets import GaussianPolicy, ValueNetwork
from pglab.run.checkpoint import load_checkpoint_file

# A run small enough for unit tests: 64 paths x 50 steps, tiny FD grid, no plots' heavy eval.
# constant learning rates and std clamp: the resume tests extend n_iterations (2 + 2 == 4), and a decaying
# schedule is a function of (iteration, n_iterations), so extending a run stretches its rest
TINY = dict(
    n_trajectories=64,
    T=0.5,
    dt=0.01,
    log_interval=1,
    eval_interval=1000,
    save_interval=2,
    eval_quick_paths=0,
    plots=False,
    final_eval=False,
    fd_nodes=400,
    device="cpu",
    seed=3,
    lr_final_fraction=1.0,
    final_max_std=None,
    refine_thresholds=False,  # the threshold search has its own tests (test_ghm_refine.py)
)


def rows_without_perf(path: Path) -> list[dict[str, str]]:
    """A metrics CSV's rows without the shell's ``perf/*`` columns (wall-clock rates,
    which differ from run to run); every other column is kept."""
    import csv

    with open(path, newline="") as handle:
        return [{k: v for k, v in row.items() if not k.startswith("perf/")} for row in csv.DictReader(handle)]


# -- dynamics ---------------------------------------------------------------------------------------


def test_euler_maruyama_step_matches_the_formula():
    params = GHMParams(mu=0.1, sigma=0.2, r=0.05, lambda_dilution=0.1, rho=0.1)
    model = GHMModel(params)
    cash = torch.tensor([[0.3], [1.2], [2.0]])
    controls = torch.tensor([[0.5, 0.0], [1.0, 0.25], [0.0, 1.0]])
    eps = torch.tensor([[0.7], [-1.3], [0.1]])
    dt = 0.01
    next_cash, reward = euler_maruyama_step(model, cash, controls, eps, dt)
    a_L, a_E = controls[:, 0], controls[:, 1]
    expected = cash[:, 0] + (0.1 + 0.05 * cash[:, 0] - a_L + a_E) * dt + 0.2 * math.sqrt(dt) * eps[:, 0]
    torch.testing.assert_close(next_cash[:, 0], expected)
    torch.testing.assert_close(reward, (a_L - 1.1 * a_E) * dt)


class _ConstantPolicy(torch.nn.Module):
    def __init__(self, rates):
        super().__init__()
        self.rates = torch.tensor(rates)

    def mean_std(self, states):
        return self.rates.expand(states.shape[0], -1), torch.full((states.shape[0], len(self.rates)), 0.5)


def test_rollout_clips_controls_absorbs_at_zero_and_matches_a_reference_loop():
    model = GHMModel(GHMParams())
    simulator = TrajectorySimulator(model, dt=0.01, horizon=1.0)
    policy = _ConstantPolicy([1.4, -0.3])  # raw means outside [0, 1]: the controls are clipped
    initial = torch.tensor([[0.05], [1.0], [0.5]])
    noise = simulator.draw_noise(3, torch.Generator().manual_seed(0), device="cpu")
    paths = simulator.rollout(policy, initial, noise=noise)
    assert paths.controls.min() >= 0 and paths.controls.max() <= 1
    # reference: a plain Python loop over paths and steps with the model's exact formulas
    gamma = math.exp(-0.1 * 0.01)
    for i in range(3):
        cash, alive, total = float(initial[i, 0]), True, 0.0
        for t in range(simulator.num_steps):
            raw = np.array([1.4, -0.3]) + 0.5 * noise.action_noise[i, t].numpy()
            a_L, a_E = np.clip(raw, 0.0, 1.0)
            if alive:
                total += gamma**t * (a_L - 1.1 * a_E) * 0.01
                cash = cash + (0.1 + 0.05 * cash - a_L + a_E) * 0.01 + 0.2 * 0.1 * float(noise.state_noise[i, t, 0])
                alive = cash > 0
            assert bool(paths.masks[i, t]) == (t == 0 or paths.masks[i, t - 1] == 1 and not paths.dones[i, t - 1])
        assert paths.returns()[i].item() == pytest.approx(total, rel=1e-4, abs=1e-6)
        assert bool(paths.alive_at_end[i]) == alive
    assert paths.dones[0].any()  # the path that starts at 0.05 paying 1.0 is liquidated
    # after absorption the state is frozen and nothing is earned
    first = int(paths.dones[0].float().argmax())
    assert torch.all(paths.rewards[0, first + 1 :] == 0)
    assert torch.all(paths.states[0, first + 1 :] == paths.states[0, first + 1])


def test_action_repeat_holds_the_action_between_decisions():
    model = GHMModel(GHMParams())
    simulator = TrajectorySimulator(model, dt=0.01, horizon=0.5, action_repeat=5)
    policy = GaussianPolicy(1, 2, (8,), log_std_init=-1.0, action_high=(1.0, 1.0))
    paths = simulator.rollout(policy, torch.full((4, 1), 1.0), torch.Generator().manual_seed(1))
    actions = paths.actions.view(4, 10, 5, 2)
    assert torch.equal(actions, actions[:, :, :1].expand_as(actions))
    assert paths.decision_masks.sum() == 4 * 10


# -- finite-difference reference ---------------------------------------------------------------------


def _barrier_closed_form(mu, sigma, rho, cash):
    """Dividend-barrier solution for dX = mu dt + sigma dW - dL, V(0) = 0, r = 0, no issuance:
    V = A (e^{b1 x} - e^{b2 x}) below the barrier b* = ln(b2^2 / b1^2) / (b1 - b2), slope 1 above."""
    disc = math.sqrt(mu**2 + 2 * rho * sigma**2)
    b1, b2 = (-mu + disc) / sigma**2, (-mu - disc) / sigma**2
    barrier = math.log(b2**2 / b1**2) / (b1 - b2)
    scale = 1.0 / (b1 * math.exp(b1 * barrier) - b2 * math.exp(b2 * barrier))
    below = scale * (np.exp(b1 * np.minimum(cash, barrier)) - np.exp(b2 * np.minimum(cash, barrier)))
    return barrier, below + np.maximum(cash - barrier, 0.0)


def test_fd_solver_matches_the_closed_form_barrier_solution():
    # unbounded-rate limit: a large maximal dividend rate approximates singular control
    model = GHMModel(GHMParams(mu=0.1, sigma=0.2, r=0.0, rho=0.1, a_L_max=200.0, a_E_max=0.0))
    solution = solve_hjb_1d_extrapolated(model, x_max=3.0, num_nodes=3000)
    cash = np.array([0.1, 0.25, 0.5, 1.0, 1.5])
    barrier, exact = _barrier_closed_form(0.1, 0.2, 0.1, cash)
    assert barrier == pytest.approx(0.5739, abs=1e-3)
    np.testing.assert_allclose(solution.value_at(cash), exact, rtol=2e-3)
    assert solution.thresholds()["dividend_rate"] == pytest.approx(barrier, abs=0.02)
    assert solution.converged


def test_fd_solver_matches_the_deterministic_closed_form():
    # sigma = 0, mu = 0, r = 0: pay at the maximal rate until cash runs out;
    # V(c) = a (1 - exp(-rho c / a)) / rho with a = a_L_max, and never issue.
    rho, rate = 0.5, 1.0
    model = GHMModel(GHMParams(mu=0.0, sigma=0.0, r=0.0, rho=rho, a_L_max=rate, a_E_max=1.0))
    solution = solve_hjb_1d(model, x_max=4.0, num_nodes=4000)
    cash = np.array([0.25, 0.5, 1.0, 2.0])
    np.testing.assert_allclose(solution.value_at(cash), rate * (1 - np.exp(-rho * cash / rate)) / rho, rtol=2e-3)
    assert np.all(solution.control_at(cash)[:, 0] == rate) and np.all(solution.control_at(cash)[:, 1] == 0)


def test_fd_policy_evaluation_matches_closed_forms_and_the_optimum():
    from pglab.hjb.fd import evaluate_policy_1d

    # (1) the closed-form barrier policy (r = 0, unbounded rate approximated by 200, no
    # issuance) evaluated at its own barrier: V = A (e^{b1 x} - e^{b2 x}) below, slope 1 above
    model = GHMModel(GHMParams(mu=0.1, sigma=0.2, r=0.0, rho=0.1, a_L_max=200.0, a_E_max=0.0))
    barrier, exact = _barrier_closed_form(0.1, 0.2, 0.1, np.array([0.1, 0.25, 0.5, 1.0]))
    solution = evaluate_policy_1d(
        model, lambda x: np.stack([200.0 * (x >= barrier), 0.0 * x], 1), x_max=3.0, num_nodes=6000
    )
    np.testing.assert_allclose(solution.value_at([0.1, 0.25, 0.5, 1.0]), exact, rtol=3e-3)
    # (2) deterministic: pay at rate a (< the maximum) until the cash runs out
    rho, rate = 0.5, 0.6
    model = GHMModel(GHMParams(mu=0.0, sigma=0.0, r=0.0, rho=rho, a_L_max=1.0, a_E_max=1.0))
    solution = evaluate_policy_1d(model, lambda x: np.stack([rate + 0 * x, 0 * x], 1), x_max=4.0, num_nodes=4000)
    cash = np.array([0.25, 0.5, 1.0, 2.0])
    np.testing.assert_allclose(solution.value_at(cash), rate * (1 - np.exp(-rho * cash / rate)) / rho, rtol=2e-3)
    # (3) the optimal controls of the HJB solve are worth V*, and any other policy less
    model = GHMModel(GHMParams())
    optimum = solve_hjb_1d_extrapolated(model, x_max=6.0, num_nodes=6000)
    optimal = evaluate_policy_1d(model, optimum.control_at, x_max=6.0, num_nodes=6000)
    cash = np.array([0.25, 0.5, 1.0, 1.5])
    np.testing.assert_allclose(optimal.value_at(cash), optimum.value_at(cash), rtol=1e-3)
    # the same issuance with the dividend barrier at 0.5 instead of 0.34 pays too late
    late = evaluate_policy_1d(
        model, lambda x: np.stack([(x >= 0.5) * 1.0, optimum.control_at(x)[:, 1]], 1), x_max=6.0, num_nodes=6000
    )
    assert np.all(late.value_at(cash) < optimum.value_at(cash) - 0.01)


def test_fd_default_model_has_a_dividend_barrier_and_issues_only_near_zero():
    model = GHMModel(GHMParams())
    solution = solve_hjb_1d(model, x_max=6.0, num_nodes=3000)
    thresholds = solution.thresholds()
    assert 0.30 < thresholds["dividend_rate"] < 0.38
    assert 0.10 < thresholds["issuance_rate"] < 0.18
    first, second = solution.derivatives()
    # the HJB holds in the interior (upwind scheme: first order in h)
    rho, mu, r, sigma = 0.1, 0.1, 0.05, 0.2
    x, v = solution.grid, solution.value
    hamiltonian = (
        0.5 * sigma**2 * second
        + (mu + r * x) * first
        + np.maximum(0, 1 - first) * 1.0
        + np.maximum(0, first - 1.1) * 1.0
    )
    # away from the boundary layer at 0 (issuance at the maximal rate pushes cash off zero:
    # V rises from 0 to ~0.9 within ~sigma^2 / (2 a_E_max) of the origin, where central
    # differences on this grid are too coarse) and from the artificial right end
    interior = (x > 0.15) & (x < 5.5)
    assert np.abs(rho * v - hamiltonian)[interior].max() < 2e-3


def test_simulated_value_of_the_fd_policy_matches_the_fd_value():
    # Two independent computations of the same number: the FD value of the optimal
    # barrier policy, and its value by long Monte Carlo simulation (default tail bound).
    from pglab.algos.ghm_eval import simulate_policy_value

    model = GHMModel(GHMParams())
    solution = solve_hjb_1d(model, x_max=6.0, num_nodes=3000)

    def fd_policy(states):
        return torch.as_tensor(solution.control_at(states[:, 0].numpy()), dtype=states.dtype)

    result = simulate_policy_value(
        model, fd_policy, [0.25, 1.0], num_paths=1500, generator=torch.Generator().manual_seed(0)
    )
    assert max(result.tail_bound) <= 0.005 * min(result.mean)
    for cash, mean, stderr in zip(result.initial_states, result.mean, result.stderr, strict=False):
        # Euler steps of 0.01 and first-order FD: agree within 4 stderr + 1%
        assert abs(mean - solution.value_at([cash])[0]) < 4 * stderr + 0.01 * mean


def test_evaluation_control_variate_keeps_the_value_and_cuts_its_standard_error():
    # the FD-optimal policy valued three ways: FD, plain simulation, and simulation minus
    # gamma V*'(c) sigma sqrt(dt) eps at every step (independent noise for the two runs)
    from pglab.algos.ghm_eval import simulate_policy_value
    from pglab.algos.ghm_train import fd_value_bound, fd_value_slope

    model = GHMModel(GHMParams())
    solution = solve_hjb_1d(model, x_max=6.0, num_nodes=3000)

    def fd_policy(states):
        return torch.as_tensor(solution.control_at(states[:, 0].numpy()), dtype=states.dtype)

    common = dict(num_paths=1500, value_bound=fd_value_bound(solution), tail_tolerance=0.01)
    plain = simulate_policy_value(model, fd_policy, [0.25, 1.0], generator=torch.Generator().manual_seed(0), **common)
    reduced = simulate_policy_value(
        model,
        fd_policy,
        [0.25, 1.0],
        generator=torch.Generator().manual_seed(1),
        value_slope=fd_value_slope(solution),
        **common,
    )
    for index, cash in enumerate((0.25, 1.0)):
        assert reduced.stderr[index] < plain.stderr[index] / 4, (reduced.stderr, plain.stderr)
        combined = math.hypot(plain.stderr[index], reduced.stderr[index])
        assert abs(plain.mean[index] - reduced.mean[index]) < 4 * combined
        # with the smaller error the simulated value meets the FD value (dt 0.01: within 1%)
        assert (
            abs(reduced.mean[index] - solution.value_at([cash])[0])
            < 4 * reduced.stderr[index] + 0.01 * reduced.mean[index]
        )


# -- Monte Carlo policy gradient ---------------------------------------------------------------------


def test_mc_policy_gradient_learns_the_deterministic_toy_optimum():
    """sigma = 0, mu = r = 0: the optimum pays the maximal dividend and never issues;
    the trained deterministic policy must get within 3% of the closed-form value."""
    torch.manual_seed(0)
    rho = 1.0
    params = GHMParams(
        mu=0.0, sigma=0.0, r=0.0, rho=rho, a_L_max=1.0, a_E_max=1.0, initial_cash_low=0.2, initial_cash_high=1.5
    )
    model = GHMModel(params)
    simulator = TrajectorySimulator(model, dt=0.05, horizon=3.0, action_repeat=2)
    policy = GaussianPolicy(1, 2, (32, 32), log_std_init=-1.0, action_high=(1.0, 1.0))
    baseline = ValueNetwork(1, (32, 32))
    solver = MonteCarloPolicyGradient(
        policy,
        simulator,
        baseline,
        n_trajectories=256,
        lr_policy=3e-3,
        lr_baseline=3e-3,
        generator=torch.Generator().manual_seed(0),
    )
    returns = [float(solver.train_step()["return/mean"]) for _ in range(150)]
    assert np.mean(returns[-10:]) > np.mean(returns[:10]) + 0.05  # training improves returns
    cash = torch.tensor([[0.5], [1.0]])
    rates = policy.act(cash, deterministic=True)
    assert torch.all(rates[:, 0] > 0.9) and torch.all(rates[:, 1] < 0.1)
    # value of the learned deterministic policy (cash falls at rate a_L - a_E, payout a_L - 1.1 a_E)
    from pglab.algos.ghm_eval import simulate_policy_value

    result = simulate_policy_value(model, lambda s: policy.mean_std(s)[0], [0.5, 1.0], num_paths=2, dt=0.01)
    exact = (1 - np.exp(-rho * np.array([0.5, 1.0]))) / rho
    assert np.all(np.array(result.mean) >= 0.97 * exact)


def test_reward_to_go_and_trajectory_advantages_both_run_without_baseline():
    model = GHMModel(GHMParams())
    simulator = TrajectorySimulator(model, dt=0.01, horizon=0.2)
    for advantage in ("trajectory", "reward_to_go"):
        policy = GaussianPolicy(1, 2, (8,), action_high=(1.0, 1.0))
        solver = MonteCarloPolicyGradient(
            policy, simulator, None, n_trajectories=32, advantage=advantage, generator=torch.Generator().manual_seed(0)
        )
        before = [p.detach().clone() for p in policy.parameters()]
        metrics = solver.train_step()
        assert "loss/baseline" not in metrics and torch.isfinite(metrics["loss/policy"])
        assert any(not torch.equal(b, p) for b, p in zip(before, policy.parameters(), strict=False))


# -- trainer: run directory, resume, checkpoints ---------------------------------------------------


def _same_state(a, b) -> bool:
    """Two (nested) state dicts hold equal values: tensors bit for bit, the rest by ``==``."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_state(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _state(run_dir: Path):
    checkpoint = load_checkpoint_file(run_dir / "checkpoints")
    return checkpoint


def test_train_writes_the_run_directory_and_resume_is_bit_identical(tmp_path):
    full = train_ghm(
        GHMTrainConfig(n_iterations=4, log_dir=tmp_path / "full", **{**TINY, "plots": True}), echo=lambda *a, **k: None
    )
    assert full.iterations == 4
    # one quick check, at the last iteration: its figure (--no-plots draws none, below)
    assert [p.name for p in (tmp_path / "full" / "plots").iterdir()] == ["policy_value_iter_000004.png"]
    for name in (
        "config.json",
        "metrics.csv",
        "fd_reference.npz",
        "checkpoints/checkpoint_latest.pt",
        "checkpoints/checkpoint_iter_000002.pt",
        "checkpoints/checkpoint_iter_000004.pt",
    ):
        assert (tmp_path / "full" / name).exists(), name
    assert list((tmp_path / "full" / "tensorboard").iterdir())
    train_ghm(GHMTrainConfig(n_iterations=2, log_dir=tmp_path / "half", **TINY), echo=lambda *a, **k: None)
    train_ghm(
        GHMTrainConfig(n_iterations=4, resume=tmp_path / "half", **{**TINY, "seed": 3}), echo=lambda *a, **k: None
    )
    a, b = _state(tmp_path / "full"), _state(tmp_path / "half")
    assert a["counters"]["iteration"] == b["counters"]["iteration"] == 4
    for net in ("policy", "baseline"):
        for key, value in a["models"][net].items():
            assert torch.equal(value, b["models"][net][key]), (net, key)
    assert not (tmp_path / "half" / "plots").exists()
    rows_full = rows_without_perf(tmp_path / "full" / "metrics.csv")
    assert len(rows_full) == 4 and "return/mean" in rows_full[0]
    assert rows_full == rows_without_perf(tmp_path / "half" / "metrics.csv")


def test_exact_policy_value_agrees_with_the_simulated_one_and_is_logged(tmp_path):
    # two independent computations of a deterministic policy's value: the long simulation
    # of the final table (Euler, dt 0.01) and the FD evaluation of the same policy (no noise)
    from pglab.algos.ghm_train import evaluate_against_reference, exact_policy_value

    model = GHMModel(GHMParams())
    solution = solve_hjb_1d_extrapolated(model, x_max=6.0, num_nodes=3000)

    class RampPolicy(torch.nn.Module):
        """Dividends ramp up from cash 0.5 to 0.9, issuance down from 0.05 to 0.25 (means
        beyond the box are clipped): a policy unlike the optimum, with a smooth shape."""

        def __init__(self):
            super().__init__()
            self.slope = torch.nn.Parameter(torch.tensor([2.5, -5.0]))

        def mean_std(self, states):
            mean = (states - torch.tensor([0.5, 0.25])) * self.slope
            return mean, torch.ones_like(mean)

    policy = RampPolicy()
    _, rows = evaluate_against_reference(
        policy,
        model,
        solution,
        [0.25, 1.0],
        num_paths=2000,
        dt=0.01,
        seed=0,
        tail_tolerance=0.01,
        device=torch.device("cpu"),
        table_points=2001,
    )
    exact = exact_policy_value(policy, model, solution, [0.25, 1.0])
    for row, exact_row in zip(rows, exact, strict=False):
        assert 50.0 < exact_row["exact_pct_of_optimum"] < 99.0
        assert abs(exact_row["exact_value"] - row["value"]) < 4 * row["stderr"] + 0.01 * row["fd_optimum"], (
            row,
            exact_row,
        )
    # training logs the exact value at every quick check
    train_ghm(
        GHMTrainConfig(
            n_iterations=1, log_dir=tmp_path / "run", **{**TINY, "eval_interval": 1, "eval_cash": (0.5, 1.5)}
        ),
        echo=lambda *a, **k: None,
    )
    header, last = (line.split(",") for line in (tmp_path / "run" / "eval.csv").read_text().splitlines()[:2])
    exact_logged = {name: float(value) for name, value in zip(header, last, strict=False) if name.startswith("exact/")}
    assert set(exact_logged) == {"exact/pct_optimal_c0.5", "exact/pct_optimal_c1.5", "exact/pct_optimal_min"}
    assert exact_logged["exact/pct_optimal_min"] == min(
        exact_logged["exact/pct_optimal_c0.5"], exact_logged["exact/pct_optimal_c1.5"]
    )


def test_unusable_log_dir_and_output_exit_2_naming_the_field(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    for log_dir in (blocker, blocker / "sub"):
        assert (
            pglab_main(
                [
                    "train",
                    "ghm",
                    "--n_iterations",
                    "1",
                    "--n_trajectories",
                    "8",
                    "--T",
                    "0.05",
                    "--no-final-eval",
                    "--fd_nodes",
                    "400",
                    "--device",
                    "cpu",
                    "--log_dir",
                    str(log_dir),
                ]
            )
            == 2
        )
        err = capsys.readouterr().err
        assert "log_dir" in err and "Traceback" not in err
    assert blocker.read_text() == "not a directory"  # nothing already there is touched
    run = tmp_path / "run"
    train_ghm(GHMTrainConfig(n_iterations=1, log_dir=run, **TINY), echo=lambda *a, **k: None)
    assert (
        pglab_main(
            [
                "evaluate",
                str(run),
                "--episodes",
                "4",
                "--cash",
                "0.5",
                "--tail_tolerance",
                "0.5",
                "--output",
                str(blocker / "x.json"),
            ]
        )
        == 2
    )
    assert "output" in capsys.readouterr().err
    assert pglab_main(["evaluate", str(run), "--episodes", "4", "--cash", "100"]) == 2
    assert "cash" in capsys.readouterr().err
    assert pglab_main(["validate", str(run), "--output", str(blocker)]) == 2
    assert "output" in capsys.readouterr().err


def test_same_seed_same_config_is_bit_identical(tmp_path):
    for name in ("a", "b"):
        train_ghm(GHMTrainConfig(n_iterations=2, log_dir=tmp_path / name, **TINY), echo=lambda *a, **k: None)
    a, b = _state(tmp_path / "a"), _state(tmp_path / "b")
    for key, value in a["models"]["policy"].items():
        assert torch.equal(value, b["models"]["policy"][key])


def test_kill_during_a_ghm_checkpoint_write_leaves_the_previous_one_loadable(tmp_path):
    run_dir = tmp_path / "run"
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        import pglab.run.checkpoint as ck
        from pglab.algos.ghm_train import GHMTrainConfig, train_ghm
        real = ck.atomic_torch_save
        calls = []
        def dying_save(obj, path):
            calls.append(path)
            if len(calls) == 2:  # the second checkpoint: write half of it, then die like kill -9
                import io, torch
                buffer = io.BytesIO(); torch.save(obj, buffer); payload = buffer.getvalue()
                tmp = Path(path).with_name(f".{{Path(path).name}}.tmp-{{os.getpid()}}")
                with open(tmp, "wb") as handle:
                    handle.write(payload[: len(payload) // 2]); handle.flush(); os.fsync(handle.fileno())
                os.kill(os.getpid(), signal.SIGKILL)
            return real(obj, path)
        ck.atomic_torch_save = dying_save
        train_ghm(GHMTrainConfig(n_iterations=6, log_dir=Path({str(run_dir)!r}), **{TINY!r}), echo=lambda *a, **k: None)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    checkpoint = load_checkpoint_file(run_dir / "checkpoints")
    assert checkpoint["counters"]["iteration"] == 2
    # and the run resumes from it, to where one uninterrupted run ends (constant schedules)
    result = train_ghm(GHMTrainConfig(n_iterations=4, resume=run_dir, **TINY), echo=lambda *a, **k: None)
    assert result.iterations == 4
    train_ghm(GHMTrainConfig(n_iterations=4, log_dir=tmp_path / "straight", **TINY), echo=lambda *a, **k: None)
    resumed, straight = _state(run_dir), _state(tmp_path / "straight")
    for section in ("models", "optimizers", "rng"):
        assert _same_state(resumed[section], straight[section]), section
    assert rows_without_perf(run_dir / "metrics.csv") == rows_without_perf(tmp_path / "straight" / "metrics.csv")


def test_python_api_load_checkpoint_and_evaluate_cli(tmp_path, capsys):
    train_ghm(GHMTrainConfig(n_iterations=2, log_dir=tmp_path / "run", **TINY), echo=lambda *a, **k: None)
    agent = pglab.load_checkpoint(tmp_path / "run" / "checkpoints" / "checkpoint_latest.pt")
    cash = torch.tensor([[0.1], [0.5], [2.0]])
    rates = agent.policy.act(cash, deterministic=True)
    assert rates.shape == (3, 2) and rates.min() >= 0 and rates.max() <= 1
    assert agent.value(cash).shape == (3,)
    for method in (agent.act, agent.value):  # NaN cash is refused, not turned into NaN rates
        with pytest.raises(TensorContractError, match="finite"):
            method(torch.tensor([[0.5], [float("nan")]]))
    code = pglab_main(
        [
            "evaluate",
            str(tmp_path / "run" / "checkpoints" / "checkpoint_latest.pt"),
            "--n_episodes",
            "200",
            "--cash",
            "0.5",
            "1.0",
            "--dt",
            "0.05",
            "--tail_tolerance",
            "0.05",
            "--json",
        ]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["initial_cash"] for row in report["rows"]] == [0.5, 1.0]
    fd = np.interp(
        [0.5, 1.0],
        np.load(tmp_path / "run" / "fd_reference.npz")["grid"],
        np.load(tmp_path / "run" / "fd_reference.npz")["value"],
    )
    for row, best in zip(report["rows"], fd, strict=False):
        assert row["fd_optimum"] == pytest.approx(best)
        assert row["pct_of_optimum"] == pytest.approx(100 * row["value"] / best)
        assert row["value"] <= best + 4 * row["stderr"] + 1e-3  # no policy beats the optimum


def test_solve_cli_prints_the_reference(capsys):
    # V*(0.5) = 1.3177 from a converged 24k-node extrapolated solve; the coarse extrapolated
    # grid is within 0.1% of it
    assert pglab_main(["solve", "ghm", "--nodes", "1000", "--json", "--cash", "0.5"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["converged"] and report["rows"][0]["value"] == pytest.approx(1.3177, rel=1e-3)
    assert report["thresholds"]["dividend_rate"] == pytest.approx(0.342, abs=0.03)


@pytest.mark.parametrize(
    "flags, field",
    [
        (["--sigma", "-0.1"], "sigma"),
        (["--dt", "-0.01"], "dt"),
        (["--dt", "1.0", "--T", "0.5"], "dt"),
        (["--rho", "0.04"], "rho"),
        (["--mu", "nan"], "mu"),
        (["--lr_policy", "inf"], "lr_policy"),
        (["--n_trajectories", "0"], "n_trajectories"),
        (["--final_action_repeat", "20"], "final_action_repeat"),
        (["--mean_shift_fraction", "-0.5"], "mean_shift_fraction"),
        (["--no-such-flag", "1"], "no-such-flag"),
        (["--a_L_max", "0"], "a_L_max"),  # no dividends: V* = 0, no % of V*
        (["--eval_cash", "100"], "eval_cash"),  # beyond the FD grid
    ],
)
def test_bad_training_input_exits_2_and_names_the_field(tmp_path, capsys, flags, field):
    code = pglab_main(["train", "ghm", "--log_dir", str(tmp_path / "run"), *flags])
    assert code == 2
    err = capsys.readouterr().err
    assert field in err or field.replace("_", "-") in err
    assert not (tmp_path / "run").exists()


def test_decision_interval_schedule_is_geometric_and_ends_where_asked():
    from pglab.algos.ghm_train import GHMTrainConfig, action_repeat_at

    constant = GHMTrainConfig(action_repeat=5)
    assert [action_repeat_at(constant, p) for p in (0.0, 0.5, 1.0)] == [5, 5, 5]
    schedule = GHMTrainConfig(action_repeat=16, final_action_repeat=1)
    # round(16 * (1/16) ** p): 16 at the start, 4 halfway, 1 at the end, never increasing
    assert [action_repeat_at(schedule, p) for p in (0.0, 0.5, 1.0)] == [16, 4, 1]
    values = [action_repeat_at(schedule, i / 100) for i in range(101)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))


def test_malformed_yaml_corrupt_and_mismatched_checkpoints_exit_2(tmp_path, capsys):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("sigma: [unclosed\n")
    assert pglab_main(["train", "ghm", "--config", str(bad_yaml)]) == 2
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("sigmaa: 0.2\n")
    assert pglab_main(["train", "ghm", "--config", str(unknown)]) == 2
    assert "sigmaa" in capsys.readouterr().err
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint")
    assert pglab_main(["evaluate", str(corrupt)]) == 2
    # a run that exists is never overwritten
    train_ghm(GHMTrainConfig(n_iterations=2, log_dir=tmp_path / "run", **TINY), echo=lambda *a, **k: None)
    before = (tmp_path / "run" / "metrics.csv").read_bytes()
    assert pglab_main(["train", "ghm", "--log_dir", str(tmp_path / "run"), "--n_iterations", "1"]) == 2
    assert (tmp_path / "run" / "metrics.csv").read_bytes() == before
    # resuming with a changed model parameter is refused
    assert pglab_main(["train", "ghm", "--resume", str(tmp_path / "run"), "--sigma", "0.3"]) == 2
    assert "sigma" in capsys.readouterr().err
    # a checkpoint of another kind is refused by the GHM loader
    from pglab.run.checkpoint import build_checkpoint, save_checkpoint

    foreign = save_checkpoint(
        tmp_path / "foreign.pt", build_checkpoint(kind="ghm-unknown", config={}, counters={"iteration": 0}, models={})
    )
    assert pglab_main(["train", "ghm", "--resume", str(foreign)]) == 2


def test_learning_rate_and_exploration_schedules_reach_their_final_values(tmp_path):
    import csv

    train_ghm(
        GHMTrainConfig(
            **{**TINY, "n_iterations": 3, "log_dir": tmp_path / "run", "lr_final_fraction": 0.25, "final_max_std": 0.1}
        ),
        echo=lambda *a, **k: None,
    )
    with open(tmp_path / "run" / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    lrs = [float(row["stats/lr/policy"]) for row in rows]
    assert lrs == pytest.approx([3e-4, 3e-4 * 0.625, 3e-4 * 0.25])  # linear in the iteration
    stds = [float(row["policy/std_action_L"]) for row in rows]
    # the clamp decays geometrically from exp(log_std_init) = e^-1 to 0.1
    assert stds == pytest.approx([math.exp(-1.0), math.sqrt(math.exp(-1.0) * 0.1), 0.1], rel=2e-3)

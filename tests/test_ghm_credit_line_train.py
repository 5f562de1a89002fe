"""``pglab train ghm --model credit-line``: the GHM firm with a credit line through the
same trainer, solvers, final evaluation, agent API, ``pglab evaluate`` and sweep as GHM.

Users give and read cash; the model's state is liquidity ``x = cash + credit_limit``. Each
test pins one side of that mapping against an independent computation: the FD optimum of
:class:`GHMCreditLineModel` at ``cash + L``, the policy network at ``cash + L``, and (at
``L = 0``) the plain GHM run bit for bit.
"""

from __future__ import annotations

import dataclasses
import functools
import json

import numpy as np
import pytest
import torch
from test_ghm import TINY, rows_without_perf

import pglab
from pglab.algos.ghm_eval import simulate_policy_value
from pglab.algos.ghm_sweep import build_trials, fd_lines, trial_row
from pglab.algos.ghm_train import (
    GHMTrainConfig,
    build_model,
    build_networks,
    build_simulator,
    build_solver,
    fd_value_bound,
    fd_value_slope,
    policy_plot_data,
    train_ghm,
)
from pglab.cli import main as pglab_main
from pglab.configs.ghm import final_eval_dt
from pglab.configs.sweep import GHMSweepConfig
from pglab.envs.ghm_credit_line import CreditLineParams, GHMCreditLineModel
from pglab.errors import ConfigError
from pglab.hjb.fd import solve_hjb_1d_extrapolated
from pglab.run.checkpoint import load_checkpoint_file
from pglab.run.seeding import make_generator

SOLVERS = ("mc", "pathwise", "actor-critic")
QUIET = dict(echo=lambda *args, **kwargs: None)
LIMIT = 0.25
# One iteration of small networks, then a coarse final evaluation: what is tested is where the
# evaluation starts and what it is compared with, not how good the policy is.
EVALUATED = {
    **TINY,
    "n_iterations": 1,
    "dt": 0.1,
    "eval_dt": 0.1,
    "policy_hidden_dims": (8,),
    "baseline_hidden_dims": (8,),
    "final_eval": True,
    "eval_paths": 64,
    "eval_tail_tolerance": 0.5,
    "eval_cash": (-0.1, 0.5, 1.0),
}
LINE = dict(model="credit-line", credit_limit=LIMIT, credit_spread=0.05)


@functools.lru_cache
def independent_fd(limit: float = LIMIT, nodes: int = TINY["fd_nodes"]):
    model = GHMCreditLineModel(CreditLineParams(credit_limit=limit, credit_spread=0.05))
    return model, solve_hjb_1d_extrapolated(model, x_max=6.0, num_nodes=nodes)


@pytest.fixture(scope="module")
def credit_line_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("credit-line")
    return {
        algo: train_ghm(GHMTrainConfig(algo=algo, log_dir=root / algo, **LINE, **EVALUATED), **QUIET).run_dir
        for algo in SOLVERS
    }


def test_a_credit_line_of_zero_trains_bit_for_bit_as_plain_ghm(tmp_path):
    """L = 0 is GHM: the same seed gives the same weights, metrics and evaluation, so the
    credit-line path adds nothing of its own (no other seeds, initial states or mapping).
    (pathwise: its rollout steps with the model's drift, which at L = 0 is GHM's to the bit;
    mc's held-action rollout takes GHM's closed form, equal only to rounding.)"""
    runs = {}
    for name, extra in (("ghm", {}), ("line", dict(model="credit-line", credit_limit=0.0, credit_spread=0.05))):
        config = GHMTrainConfig(
            algo="pathwise", log_dir=tmp_path / name, **{**EVALUATED, "final_eval": False, "eval_cash": (0.5,)}, **extra
        )
        run_dir = train_ghm(config, **QUIET).run_dir
        runs[name] = (
            load_checkpoint_file(run_dir)["models"],
            rows_without_perf(run_dir / "metrics.csv"),
            np.load(run_dir / "fd_reference.npz"),
        )
    (ghm_models, ghm_metrics, ghm_fd), (line_models, line_metrics, line_fd) = runs["ghm"], runs["line"]
    for network in ghm_models:
        for key, tensor in ghm_models[network].items():
            assert torch.equal(tensor, line_models[network][key]), f"{network}.{key}"
    assert ghm_metrics == line_metrics and len(ghm_metrics) == 1
    np.testing.assert_array_equal(ghm_fd["value"], line_fd["value"])


@pytest.mark.parametrize("algo", SOLVERS)
def test_each_solver_is_evaluated_from_cash_plus_the_line_against_the_credit_line_fd_optimum(credit_line_runs, algo):
    run_dir = credit_line_runs[algo]
    evaluation = json.loads((run_dir / "evaluation.json").read_text())
    model, solution = independent_fd()
    cash = np.array([row["initial_cash"] for row in evaluation["rows"]])
    assert cash.tolist() == [-0.1, 0.5, 1.0]  # rows report cash (negative: the line is drawn)
    np.testing.assert_allclose(
        [row["fd_optimum"] for row in evaluation["rows"]], solution.value_at(cash + LIMIT), rtol=1e-12
    )
    assert evaluation["fd_thresholds"] == pytest.approx(
        {name: state - LIMIT for name, state in solution.thresholds().items()}, abs=1e-12
    )
    assert evaluation["fd_thresholds"]["issuance_rate"] < 0  # issue only once the line is partly drawn
    # the simulated values start at liquidity cash + L: the same simulation, redone by hand
    agent = pglab.load_checkpoint(run_dir, device="cpu")
    config = agent.config
    redone = simulate_policy_value(
        model,
        lambda states: agent.policy.mean_std(states)[0],
        (cash + LIMIT).tolist(),
        num_paths=config.eval_paths,
        dt=final_eval_dt(config),
        generator=make_generator(config.seed + 2, torch.device("cpu")),
        value_bound=fd_value_bound(solution),
        tail_tolerance=config.eval_tail_tolerance,
        table_points=config.policy_table_points,
        value_slope=fd_value_slope(solution),
        absorption=config.absorption,
    )
    assert [row["value"] for row in evaluation["rows"]] == redone.mean


def test_the_loaded_agent_takes_cash_and_acts_at_liquidity(credit_line_runs):
    agent = pglab.load_checkpoint(credit_line_runs["mc"], device="cpu")
    assert isinstance(agent.model, GHMCreditLineModel) and agent.model.params.credit_limit == LIMIT
    cash = torch.tensor([[-0.2], [0.0], [0.5], [1.5]])
    with torch.no_grad():
        at_liquidity = agent.policy.act(cash + LIMIT, deterministic=True)
        value_at_liquidity = agent.baseline(cash + LIMIT)
    assert torch.equal(agent.act(cash), at_liquidity)
    assert torch.equal(agent.value(cash), value_at_liquidity)
    assert not torch.equal(agent.baseline(cash), value_at_liquidity)  # the shift matters for this network
    np.testing.assert_array_equal(agent.predict(cash.numpy()), at_liquidity.numpy())


def test_the_policy_figure_is_drawn_over_liquidity_and_says_so(credit_line_runs):
    """The figure's states are liquidity from 0 (cash -L) to initial_cash_high + L, and its
    axis label says what the state is; GHM's stays cash."""
    agent = pglab.load_checkpoint(credit_line_runs["mc"], device="cpu")
    data = policy_plot_data(agent.policy, agent.baseline, agent.model, 3.0, torch.device("cpu"), points=7)
    assert data.state_label == f"liquidity = cash + {LIMIT:g}"
    np.testing.assert_allclose(data.states, np.linspace(0.0, 3.0, 7), atol=1e-6)
    with torch.no_grad():
        expected = agent.policy.act(torch.as_tensor(data.states, dtype=torch.float32).unsqueeze(1), deterministic=True)
    np.testing.assert_allclose(data.rates, expected.numpy(), atol=1e-6)
    plain = build_model(GHMTrainConfig(**TINY))
    assert policy_plot_data(agent.policy, None, plain, 2.0, torch.device("cpu"), points=3).state_label == "cash c"


def test_the_actor_critic_collocation_interval_is_in_the_models_state():
    """Its default upper end is 1.25 x the state of initial_cash_high: liquidity 2 + L here."""
    config = GHMTrainConfig(algo="actor-critic", **LINE)
    assert config.hjb_interval() == (0.05, 1.25 * (2.0 + LIMIT))
    assert GHMTrainConfig(algo="actor-critic").hjb_interval() == (0.05, 1.25 * 2.0)
    model = build_model(config)
    policy, baseline = build_networks(config, model, torch.device("cpu"))
    solver = build_solver(config, policy, baseline, build_simulator(config, model), None)
    assert solver.hjb_interval == config.hjb_interval()


def test_pglab_validate_reports_a_credit_line_run_in_liquidity(credit_line_runs, capsys, tmp_path):
    """pglab validate works in the model's state and says so: its FD thresholds are the
    FD solution's own (liquidity), not cash."""
    argv = ["validate", str(credit_line_runs["actor-critic"]), "--n-points", "101", "--output", str(tmp_path)]
    assert pglab_main([*argv, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["state"] == f"liquidity = cash + {LIMIT:g}"
    _, solution = independent_fd()
    barrier = payload["fd_reference"]["thresholds"]["reference"]["dividend_rate"]
    assert barrier == pytest.approx(solution.thresholds()["dividend_rate"], abs=0.05)
    assert barrier > LIMIT  # liquidity: the cash barrier (0.12) plus the line
    assert pglab_main(argv) == 0
    assert f"(liquidity = cash + {LIMIT:g})" in capsys.readouterr().out


def test_pglab_evaluate_a_credit_line_run(credit_line_runs, capsys):
    run_dir = credit_line_runs["mc"]
    argv = ["evaluate", str(run_dir), "--episodes", "32", "--tail-tolerance", "0.5", "--device", "cpu", "--json"]
    assert pglab_main([*argv, "--cash", "-0.2", "0.5"]) == 0
    report = json.loads(capsys.readouterr().out)
    _, solution = independent_fd()
    assert [row["initial_cash"] for row in report["rows"]] == [-0.2, 0.5]
    np.testing.assert_allclose(
        [row["fd_optimum"] for row in report["rows"]], solution.value_at([0.05, 0.75]), rtol=1e-12
    )
    assert pglab_main([*argv, "--cash", "-0.25"]) == 2  # where this firm is liquidated
    assert "cash" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, field",
    [
        (["--credit-limit", "-0.1"], "credit_limit"),
        (["--credit_spread", "-0.01"], "credit_spread"),
        (["--eval-cash", "-0.3", "0.5"], "eval_cash"),
        (["--model", "overdraft"], "model"),
    ],
)
def test_bad_credit_line_flags_exit_2_naming_the_field(tmp_path, capsys, flags, field):
    log_dir = tmp_path / "run"
    assert (
        pglab_main(["train", "ghm", "--model", "credit-line", *flags, "--device", "cpu", "--log-dir", str(log_dir)])
        == 2
    )
    assert field in capsys.readouterr().err
    assert not log_dir.exists()


@pytest.mark.parametrize(
    "flags",
    [
        ["--fd_x_max", "0.3"],  # the default calibration's barrier (0.37) lies beyond the grid
        ["--sigma", "3", "--rho", "0.051", "--a_E_max", "0"],  # a reflecting end at 6 changes V by ~30%
        ["--model", "credit-line", "--fd_x_max", "0.5"],  # the line's barrier: liquidity 0.37
    ],
)
def test_a_calibration_whose_fd_reference_depends_on_the_grid_end_exits_2_naming_fd_x_max(tmp_path, capsys, flags):
    log_dir = tmp_path / "run"
    tiny = ["--n_iterations", "1", "--n_trajectories", "8", "--T", "0.1", "--no-final-eval", "--fd_nodes", "400"]
    assert pglab_main(["train", "ghm", *flags, *tiny, "--device", "cpu", "--log-dir", str(log_dir)]) == 2
    assert "fd_x_max" in capsys.readouterr().err
    assert not log_dir.exists()  # refused before the run directory is made


def test_a_credit_line_sweep_passes_the_model_to_every_run_and_draws_its_fd_lines_in_cash(credit_line_runs, tmp_path):
    sweep = GHMSweepConfig(
        model="credit-line",
        credit_limit=(0.1, LIMIT),
        credit_spread=(0.05,),
        fd_line_points=0,
        fd_line_nodes=200,
        backend="serial",
        log_dir=tmp_path,
    )
    trials = build_trials(sweep, tmp_path)
    assert [(t.config["model"], t.config["credit_limit"]) for t in trials] == [
        ("credit-line", 0.1),
        ("credit-line", LIMIT),
    ]
    # the FD lines along credit_limit, in cash, against an independent solve
    lines = fd_lines(sweep, trials, tmp_path, print)
    assert [point["value"] for point in lines["credit_limit"]] == [0.1, LIMIT]
    for point in lines["credit_limit"]:
        _, solution = independent_fd(point["value"], nodes=200)
        assert point["barrier"] == pytest.approx(solution.thresholds()["dividend_rate"] - point["value"], abs=1e-12)
    # a finished credit-line run's row of the table (the fixture's run stands in for the sweep's)
    row = trial_row(dataclasses.asdict(trials[1]), credit_line_runs["mc"])
    evaluation = json.loads((credit_line_runs["mc"] / "evaluation.json").read_text())
    assert (row["model"], row["credit_limit"], row["credit_spread"]) == ("credit-line", LIMIT, 0.05)
    assert row["barrier_fd"] == evaluation["fd_thresholds"]["dividend_rate"] and row["pct_c-0.1"] is not None
    with pytest.raises(ConfigError, match="credit_limit"):  # a credit-line parameter of the GHM model
        GHMSweepConfig(credit_limit=(0.1,))

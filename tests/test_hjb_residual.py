"""HJB residual validator, `pglab validate`, and the second model (GHM with a credit line)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from pglab.algos.ghm_train import GHMTrainConfig, build_networks
from pglab.cli import main as pglab_main
from pglab.envs.ghm import GHMModel, GHMParams
from pglab.envs.ghm_credit_line import CreditLineParams, GHMCreditLineModel
from pglab.errors import ConfigError, TensorContractError
from pglab.hjb.fd import FDSolution, solve_hjb_1d, solve_hjb_1d_extrapolated
from pglab.hjb.residual import HJBResidualValidator, value_derivatives
from pglab.nets import ValueNetwork
from pglab.run.checkpoint import build_checkpoint, save_checkpoint
from pglab.run.config import config_to_dict
from pglab.run.rundir import write_run_config

DOCS = Path(__file__).resolve().parents[1] / "docs" / "ghm-validation.md"


@pytest.fixture(scope="module")
def ghm_reference() -> FDSolution:
    # the reference `pglab train ghm` and `pglab validate` use (24k nodes, x_max 6, extrapolated)
    return solve_hjb_1d_extrapolated(GHMModel(), x_max=6.0, num_nodes=24_000)


@pytest.fixture(scope="module")
def ghm_validator(ghm_reference) -> HJBResidualValidator:
    return HJBResidualValidator(GHMModel(), reference=ghm_reference, n_points=1001)


def _modified(solution: FDSolution, value: np.ndarray) -> FDSolution:
    return dataclasses.replace(solution, value=value)


# -- the FD solution against its own HJB ---------------------------------------------------------------


def test_fd_reference_meets_the_criterion_on_the_interior_and_the_boundary_layer_is_reported(
    ghm_validator, ghm_reference
):
    report = ghm_validator.validate_solution(ghm_reference)
    stats = report.residual_optimal
    # measured 5.8e-4, at the issuance switch c = 0.139 (a first-order kink: 2.0e-3 at 6k
    # nodes, 9.9e-4 at 12k, 5.8e-4 at 24k); away from the switches ~1e-9
    assert report.meets_tolerance and stats.max < 1e-3
    assert stats.rms < 5e-5 and stats.mean < 5e-6
    # the boundary layer at c ~ 0 is not resolved to 1e-3 and is reported, not hidden
    assert report.boundary_layer_residual.max > report.tolerance
    assert report.value_at_zero == 0.0 and report.terminal_value == 0.0
    assert report.value_error["sup_abs"] == 0.0
    # the FD controls are optimal for V* up to the grid: their Hamiltonian gap is tiny
    assert report.hamiltonian_gap.max < 1e-4
    assert report.thresholds["policy"]["dividend_rate"] == pytest.approx(0.342, abs=2e-3)
    json.dumps(report.to_dict())  # JSON-ready


def test_plain_fd_solution_residual_shrinks_with_the_grid(ghm_validator):
    model = GHMModel()
    coarse = ghm_validator.validate_solution(solve_hjb_1d(model, x_max=6.0, num_nodes=3000))
    fine = ghm_validator.validate_solution(solve_hjb_1d(model, x_max=6.0, num_nodes=6000))
    # the upwind scheme's numerical diffusion h|b|/2 V'': first order in h
    assert fine.residual_optimal.rms < 0.6 * coarse.residual_optimal.rms
    assert fine.value_error["sup_abs"] < 0.6 * coarse.value_error["sup_abs"]


@pytest.mark.parametrize("wrong, expected_max", [("scaled", 0.02), ("shifted", 0.01)])
def test_a_wrong_value_function_has_a_large_residual(ghm_validator, ghm_reference, wrong, expected_max):
    if wrong == "scaled":
        report = ghm_validator.validate_solution(_modified(ghm_reference, 1.1 * ghm_reference.value))
        assert report.residual_optimal.max > expected_max
    else:
        report = ghm_validator.validate_solution(_modified(ghm_reference, ghm_reference.value + 0.1))
        # V* + 0.1 leaves V', V'' unchanged: R = rho * 0.1 = 0.01 everywhere (+ V*'s own residual)
        assert report.residual_optimal.max == pytest.approx(0.01, abs=1e-3)
        assert report.residual_optimal.mean == pytest.approx(0.01, abs=1e-5)
        assert report.value_at_zero == pytest.approx(0.1)
        assert report.value_error["sup_abs"] == pytest.approx(0.1)
    assert not report.meets_tolerance
    assert report.residual_optimal.max > 10 * report.tolerance


# -- derivatives: autograd and finite differences against closed forms ----------------------------------


def _smooth_value(states):
    cash = states[:, 0]
    return 2.0 * torch.tanh(cash) + 0.5 * cash


def test_autograd_and_fd_residuals_match_the_closed_form():
    model = GHMModel()  # mu 0.1, sigma 0.2, r 0.05, lambda 0.1, rho 0.1, rates <= 1
    validator = HJBResidualValidator(model, reference=solve_hjb_1d(model, x_max=4.0, num_nodes=1000), n_points=401)
    constant = torch.tensor([0.3, 0.2], dtype=torch.float64)
    policy = lambda states: constant.expand(states.shape[0], 2)  # noqa: E731
    c = validator.grid
    v = 2 * np.tanh(c) + 0.5 * c
    d1 = 2 / np.cosh(c) ** 2 + 0.5
    d2 = -4 * np.tanh(c) / np.cosh(c) ** 2
    diffusion = 0.5 * 0.2**2 * d2
    optimal = 0.1 * v - (diffusion + (0.1 + 0.05 * c) * d1 + np.maximum(0, 1 - d1) + np.maximum(0, d1 - 1.1))
    under_policy = 0.1 * v - (0.3 - 1.1 * 0.2 + (0.1 + 0.05 * c - 0.3 + 0.2) * d1 + diffusion)
    for method, tolerance in (("autograd", 1e-12), ("fd", 1e-6)):
        report = validator.validate(_smooth_value, policy, method=method)
        np.testing.assert_allclose(report.curves["residual_optimal"], optimal, atol=tolerance, rtol=0)
        np.testing.assert_allclose(report.curves["residual_policy"], under_policy, atol=tolerance, rtol=0)
        assert report.value_at_zero == 0.0
        assert report.residual_optimal.max == pytest.approx(np.abs(optimal[validator.interior]).max(), abs=tolerance)


def test_an_exact_solution_has_zero_residual_and_the_fd_optimum_agrees():
    # sigma = mu = r = 0: pay at the maximal rate a until cash runs out, V = a (1 - e^{-rho c / a}) / rho
    rho, rate = 0.5, 1.0
    model = GHMModel(GHMParams(mu=0.0, sigma=0.0, r=0.0, rho=rho, a_L_max=rate, a_E_max=1.0))
    validator = HJBResidualValidator(model, reference=solve_hjb_1d(model, x_max=4.0, num_nodes=4000), n_points=401)
    exact = lambda states: rate * (1 - torch.exp(-rho * states[:, 0] / rate)) / rho  # noqa: E731
    optimal_policy = lambda states: torch.tensor([rate, 0.0], dtype=states.dtype).expand(states.shape[0], 2)  # noqa: E731
    report = validator.validate(exact, optimal_policy)
    assert report.residual_optimal.max < 1e-12 and report.residual_policy.max < 1e-12
    assert report.hamiltonian_gap.max < 1e-3  # V*' from the FD reference
    assert report.value_error["sup_rel"] < 2e-3 and report.value_at_zero == 0.0
    assert all(errors["max_abs"] == 0 for errors in report.policy_error.values())


def test_autograd_and_fd_derivatives_agree_on_a_value_network():
    net = ValueNetwork(1, (16, 16)).double()
    states = torch.linspace(0.1, 2.0, 50, dtype=torch.float64).unsqueeze(1)
    exact = value_derivatives(net, states, method="autograd")
    approx = value_derivatives(net, states, method="fd")
    for a, b in zip(exact, approx, strict=False):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_contracts_are_checked_with_clear_errors(ghm_validator):
    with pytest.raises(TensorContractError, match=r"values expected float32\|float64\[1001\], got float64\[1001, 1\]"):
        ghm_validator.validate(lambda states: states.clone())
    with pytest.raises(TensorContractError, match="controls expected"):
        ghm_validator.validate(policy_fn=lambda states: states.repeat(1, 3))
    with pytest.raises(ValueError, match="without a graph"):
        ghm_validator.validate(lambda states: _smooth_value(states).detach())
    with pytest.raises(ValueError, match="give a value_fn, a policy_fn or both"):
        ghm_validator.validate()
    reference = ghm_validator.reference
    with pytest.raises(ConfigError, match="c_min"):
        HJBResidualValidator(GHMModel(), reference=reference, c_min=3.0)
    with pytest.raises(ConfigError, match="c_max"):
        HJBResidualValidator(GHMModel(), reference=reference, c_max=7.0)  # beyond the grid's x_max = 6


# -- pglab validate ------------------------------------------------------------------------------

TINY = dict(fd_nodes=400, device="cpu", seed=3)


def _checkpoint(run_dir: Path, **overrides) -> Path:
    """An untrained GHM checkpoint written with pglab's own checkpoint functions."""
    config = GHMTrainConfig(log_dir=run_dir, **TINY, **overrides)
    model = GHMModel(config.params)
    policy, baseline = build_networks(config, model, torch.device("cpu"))
    models = {"policy": policy.state_dict()}
    if baseline is not None:
        models["baseline"] = baseline.state_dict()
    checkpoint = build_checkpoint(
        kind=config.kind, config=config_to_dict(config), counters={"iteration": 0}, models=models
    )
    write_run_config(run_dir, config_to_dict(config), kind=config.kind)  # a run directory, as pglab train writes it
    return save_checkpoint(run_dir / "checkpoints" / "checkpoint_latest.pt", checkpoint)


def test_validate_cli_writes_json_and_plot_into_the_run_directory(tmp_path, capsys):
    path = _checkpoint(tmp_path / "run")
    before = {p.name for p in (tmp_path / "run").iterdir()}
    assert pglab_main(["validate", str(path), "--json", "--n_points", "201"]) == 0
    report = json.loads(capsys.readouterr().out)
    learned, reference = report["learned"], report["fd_reference"]
    for key in ("max", "mean", "rms"):
        assert learned["residual_optimal"][key] > 0 and learned["residual_policy"][key] > 0
    assert learned["value_at_zero"] is not None and learned["value_error"]["sup_abs"] > 0
    assert learned["meets_tolerance"] is False  # an untrained network
    assert set(learned["policy_error"]) == {"dividend_rate", "issuance_rate"}
    assert reference["value_at_zero"] == 0.0 and reference["c_max"] == 2.0
    after = {p.name for p in (tmp_path / "run").iterdir()}
    assert after - before == {"validation.json", "validation.png"}  # nothing else written
    assert json.loads((tmp_path / "run" / "validation.json").read_text())["iteration"] == 0
    # the table form, finite differences, into --out
    assert (
        pglab_main(
            ["validate", str(tmp_path / "run"), "--method", "fd", "--n_points", "101", "--out", str(tmp_path / "v")]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "|rho V - max_u H| max" in out and "V(0)" in out and "NOT met" in out
    assert {p.name for p in (tmp_path / "v").iterdir()} == {"validation.json", "validation.png"}


def test_validate_cli_without_a_value_network_compares_the_policy_only(tmp_path, capsys):
    path = _checkpoint(tmp_path / "run", no_baseline=True)
    assert pglab_main(["validate", str(path), "--n_points", "101", "--json"]) == 0
    learned = json.loads(capsys.readouterr().out)["learned"]
    assert learned["residual_optimal"] is None and learned["value_at_zero"] is None
    assert learned["hamiltonian_gap"]["max"] > 0 and learned["policy_error"]["dividend_rate"]["mean_abs"] > 0
    assert pglab_main(["validate", str(path), "--n_points", "101"]) == 0
    assert "no value network" in capsys.readouterr().out


@pytest.mark.parametrize(
    "flags, field",
    [
        (["--c_min", "-1"], "c_min"),
        (["--c_min", "0.5", "--c_max", "0.2"], "c_max"),
        (["--c_max", "10"], "c_max"),  # beyond the FD grid (x_max = 6)
        (["--c_min", "2.5"], "c_min"),  # above the run's initial_cash_high = 2
        (["--n_points", "3"], "n_points"),
        (["--method", "spline"], "method"),
        (["--fd_step", "0"], "fd_step"),
        (["--no-such-flag"], "no-such-flag"),
    ],
)
def test_bad_validate_flags_exit_2_and_name_the_field(tmp_path, capsys, flags, field):
    path = _checkpoint(tmp_path / "run")
    assert pglab_main(["validate", str(path), *flags]) == 2
    err = capsys.readouterr().err
    assert field in err or field.replace("_", "-") in err
    assert not (tmp_path / "run" / "validation.json").exists()


def test_validate_cli_missing_checkpoint_exits_2(tmp_path, capsys):
    assert pglab_main(["validate", str(tmp_path / "nothing.pt")]) == 2
    assert "no such file" in capsys.readouterr().err


# -- the second model: GHM with a credit line ----------------------------------------------------------


def test_credit_line_of_zero_is_ghm_bitwise():
    spread = CreditLineParams(credit_limit=0.0, credit_spread=0.08)
    with_line = solve_hjb_1d(GHMCreditLineModel(spread), x_max=6.0, num_nodes=2000)
    plain = solve_hjb_1d(GHMModel(), x_max=6.0, num_nodes=2000)
    assert np.array_equal(with_line.value, plain.value) and np.array_equal(with_line.controls, plain.controls)


def test_credit_line_without_interest_is_worth_exactly_its_size_in_cash():
    # r = spread = 0: the drift does not depend on the state, so in liquidity x = c + L the
    # model is GHM(r = 0): V_line(c) = V_GHM(c + L), thresholds shifted by -L
    limit = 0.25
    with_line = solve_hjb_1d(
        GHMCreditLineModel(CreditLineParams(r=0.0, credit_spread=0.0, credit_limit=limit)), x_max=6.0, num_nodes=2000
    )
    plain = solve_hjb_1d(GHMModel(GHMParams(r=0.0)), x_max=6.0, num_nodes=2000)
    assert np.array_equal(with_line.value, plain.value)
    cash = np.array([0.0, 0.25, 1.0])
    model = GHMCreditLineModel(CreditLineParams(r=0.0, credit_spread=0.0, credit_limit=limit))
    np.testing.assert_array_equal(with_line.value_at(model.liquidity(cash)), plain.value_at(cash + limit))


def test_credit_line_raises_value_lowers_the_barrier_and_solves_its_hjb():
    ghm = solve_hjb_1d_extrapolated(GHMModel(), x_max=6.0, num_nodes=6000)
    model = GHMCreditLineModel()  # L = 0.25, spread 0.05
    line = solve_hjb_1d_extrapolated(model, x_max=6.0, num_nodes=6000)
    cash = np.array([0.25, 0.5, 1.0, 1.5])
    v_line, limit = line.value_at(model.liquidity(cash)), model.params.credit_limit
    # V_GHM(c) <= V_line(c) <= V_GHM(c + L): ignore the line until cash runs out / a line is
    # worth less than the same cash (undrawn credit earns no interest)
    assert np.all(ghm.value_at(cash) < v_line) and np.all(v_line < ghm.value_at(cash + limit))
    np.testing.assert_allclose(v_line, [1.1802, 1.4266, 1.9089, 2.3772], atol=2e-4)  # 24k-node values (docs)
    ghm_thresholds, line_thresholds = ghm.thresholds(), line.thresholds()
    barrier = line_thresholds["dividend_rate"] - limit
    assert barrier == pytest.approx(0.117, abs=3e-3) and barrier < ghm_thresholds["dividend_rate"] - 0.2
    assert line_thresholds["issuance_rate"] - limit < 0  # equity only after drawing on the line
    report = HJBResidualValidator(model, reference=line, n_points=1001).validate_solution(line)
    assert report.c_max == pytest.approx(2.25)  # the model's state_high: initial cash 2 + L
    assert report.residual_optimal.max < 3e-3 and report.residual_optimal.rms < 2e-4  # 6k nodes: 1.4e-3, 7e-5
    assert report.boundary_layer_residual.max > report.residual_optimal.max


def test_credit_line_params_are_validated_and_the_model_simulates():
    from pglab.envs.simulator import TrajectorySimulator

    with pytest.raises(ConfigError, match="credit_limit"):
        CreditLineParams(credit_limit=-0.1)
    with pytest.raises(ConfigError, match="initial_cash_low"):
        CreditLineParams(credit_limit=0.2, initial_cash_low=-0.3)
    with pytest.raises(ConfigError, match="rho"):
        CreditLineParams(r=0.2, rho=0.1)
    model = GHMCreditLineModel(CreditLineParams(initial_cash_low=-0.2))
    assert model.initial_low == pytest.approx((0.05,)) and model.state_high == (2.25,)

    class Hold(torch.nn.Module):
        def mean_std(self, states):
            return torch.zeros(states.shape[0], 2), torch.full((states.shape[0], 2), 1e-3)

    simulator = TrajectorySimulator(model, dt=0.01, horizon=0.5)
    initial = model.initial_states(8, torch.Generator().manual_seed(0))
    paths = simulator.rollout(Hold(), initial, torch.Generator().manual_seed(1))
    assert paths.returns().shape == (8,)


def test_solve_credit_line_cli(capsys):
    assert pglab_main(["solve", "ghm-credit-line", "--nodes", "2000", "--json", "--cash", "0.5", "1.0"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["credit_line"]["converged"] and report["ghm"]["converged"]
    for cash in ("0.5", "1.0"):
        assert report["credit_line"]["values"][cash] > report["ghm"]["values"][cash]
    assert report["credit_line"]["thresholds"]["dividend_rate"] < report["ghm"]["thresholds"]["dividend_rate"]
    assert pglab_main(["solve", "ghm-credit-line", "--credit_limit", "-1"]) == 2
    assert "credit_limit" in capsys.readouterr().err


def test_the_docs_snippet_runs():
    text = DOCS.read_text()
    snippet = re.search(r"<!-- snippet: tested -->\s*```python\n(.*?)```", text, re.S)
    assert snippet, "docs/ghm-validation.md lost its tested snippet"
    namespace: dict = {}
    exec(compile(snippet.group(1), str(DOCS), "exec"), namespace)  # noqa: S102
    assert namespace["report"].residual_optimal.max < 3e-3
    assert math.isclose(namespace["report"].value_at_zero, 0.0)

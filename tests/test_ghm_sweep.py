"""``pglab sweep ghm``: the grid, the table against an independent FD solve, the
runs as ordinary run directories, resume after SIGKILL, and Ray == serial (the Ray sweep runs
in the Ray process of test_ghm_parallel.py)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ray_child_only

from pglab.algos.ghm_sweep import TIMING_COLUMNS, build_trials, calibration_name, calibrations
from pglab.cli import main as pglab_main
from pglab.configs.sweep import GHMSweepConfig
from pglab.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
TINY_TRAIN = """\
n_trajectories: 32
T: 0.5
dt: 0.05
eval_dt: 0.05
log_interval: 1
eval_interval: 1000
save_interval: 2
eval_quick_paths: 0
plots: false
eval_paths: 16
eval_cash: [0.5, 1.0]
eval_tail_tolerance: 0.5
fd_nodes: 200
lr_final_fraction: 1.0
policy_hidden_dims: [8]
baseline_hidden_dims: [8]
"""


def sweep_argv(tmp_path: Path, out: Path, *extra: str) -> list[str]:
    train = tmp_path / "tiny.yaml"
    train.write_text(TINY_TRAIN)
    return [
        "sweep",
        "ghm",
        "--sigma",
        "0.15",
        "0.25",
        "--n-iterations",
        "4",
        "--train-config",
        str(train),
        "--fd-line-points",
        "3",
        "--fd-line-nodes",
        "200",
        "--device",
        "cpu",
        "--log-dir",
        str(out),
        *extra,
    ]


def table(sweep_dir: Path) -> list[dict[str, str]]:
    """sweep.csv without the timing columns (they differ between two executions)."""
    with open(sweep_dir / "sweep.csv", newline="") as handle:
        return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in csv.DictReader(handle)]


@pytest.fixture(scope="module")
def serial_sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serial")
    out = tmp / "sweep"
    assert pglab_main(sweep_argv(tmp, out, "--backend", "serial")) == 0
    return out


# -- the grid -----------------------------------------------------------------------------------


def test_the_grid_is_the_product_of_the_flags_then_the_yaml_grid(tmp_path):
    config = GHMSweepConfig(sigma=(0.1, 0.3), rho=(0.08, 0.1, 0.12), backend="serial")
    grid = calibrations(config)
    assert grid == [{"sigma": s, "rho": r} for s in (0.1, 0.3) for r in (0.08, 0.1, 0.12)]
    product = tmp_path / "grid.yaml"
    product.write_text("lambda_dilution: [0.1, 0.3]\nsigma: 0.2\n")
    assert calibrations(GHMSweepConfig(grid=product)) == [
        {"lambda_dilution": 0.1, "sigma": 0.2},
        {"lambda_dilution": 0.3, "sigma": 0.2},
    ]
    listed = tmp_path / "listed.yaml"
    listed.write_text("calibrations:\n  - {sigma: 0.3}\n  - {rho: 0.08, r: 0.06}\n")
    assert calibrations(GHMSweepConfig(sigma=(0.3,), grid=listed)) == [{"sigma": 0.3}, {"rho": 0.08, "r": 0.06}]
    assert calibrations(GHMSweepConfig()) == [{}]
    assert calibration_name({"sigma": 0.3, "rho": 0.08}) == "sigma0.3_rho0.08" and calibration_name({}) == "base"
    trials = build_trials(GHMSweepConfig(sigma=(0.1, 0.3), algo=("mc", "pathwise"), seeds=(1, 2)), tmp_path)
    assert len(trials) == 2 * 2 * 2 and len({trial.name for trial in trials}) == 8
    assert {(t.calibration["sigma"], t.algo, t.seed) for t in trials} == {
        (s, a, seed) for s in (0.1, 0.3) for a in ("mc", "pathwise") for seed in (1, 2)
    }
    assert all(t.config["params"]["sigma"] == t.calibration["sigma"] and t.config["threads"] == 1 for t in trials)


def test_ill_posed_calibrations_and_bad_grids_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"^rho: must exceed r=0.05.*\[calibration rho0.04\]"):
        build_trials(GHMSweepConfig(rho=(0.04, 0.1)), tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("volatility: [0.1]\n")
    with pytest.raises(ConfigError, match="'volatility' is not a model parameter"):
        calibrations(GHMSweepConfig(grid=bad))
    with pytest.raises(ConfigError, match=r"^sigma: lists a value twice"):
        GHMSweepConfig(sigma=(0.1, 0.1))
    with pytest.raises(ConfigError, match=r"^algo: must be one of"):
        GHMSweepConfig(algo=("sarsa",))
    assert pglab_main(["sweep", "ghm", "--sigma", "nan", "--log-dir", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


# -- the table ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_table_rows_match_an_independent_fd_solve_and_runs_are_ordinary(serial_sweep):
    import pglab
    from pglab.envs.ghm import GHMModel, GHMParams
    from pglab.hjb.fd import solve_hjb_1d_extrapolated

    rows = table(serial_sweep)
    assert [row["run"] for row in rows] == ["sigma0.15-mc-s0", "sigma0.25-mc-s0"]
    for row in rows:
        sigma = float(row["sigma"])
        # the FD thresholds in the table are those of the run's own calibration
        fd = solve_hjb_1d_extrapolated(GHMModel(GHMParams(sigma=sigma)), x_max=6.0, num_nodes=200).thresholds()
        assert float(row["barrier_fd"]) == pytest.approx(fd["dividend_rate"])
        assert float(row["issuance_fd"]) == pytest.approx(fd["issuance_rate"])
        # the % of V* columns are the run's own final evaluation (simulated and exact)
        evaluation = json.loads((serial_sweep / "runs" / row["run"] / "evaluation.json").read_text())
        for entry in evaluation["rows"]:
            assert float(row[f"pct_c{entry['initial_cash']:g}"]) == pytest.approx(entry["pct_of_optimum"])
            assert float(row[f"exact_pct_c{entry['initial_cash']:g}"]) == pytest.approx(entry["exact_pct_of_optimum"])
            assert 0 < entry["exact_pct_of_optimum"] < 100
        agent = pglab.load_checkpoint(serial_sweep / "runs" / row["run"])
        assert agent.kind == "ghm-mc" and agent.config.params.sigma == sigma
    # a higher volatility raises the payout barrier (the FD truth; GHM's precautionary cash)
    assert float(rows[1]["barrier_fd"]) > float(rows[0]["barrier_fd"])
    assert (serial_sweep / "statics_sigma.png").stat().st_size > 0 and (serial_sweep / "sweep.md").exists()


@pytest.mark.slow
def test_a_finished_sweep_is_not_redone_and_a_resume_may_not_change_the_grid(serial_sweep, tmp_path, capsys):
    before = {path: path.stat().st_mtime_ns for path in serial_sweep.glob("runs/*/trial.json")}
    assert pglab_main(["sweep", "ghm", "--resume", str(serial_sweep), "--backend", "serial"]) == 0
    assert {path: path.stat().st_mtime_ns for path in serial_sweep.glob("runs/*/trial.json")} == before
    capsys.readouterr()
    assert pglab_main(["sweep", "ghm", "--resume", str(serial_sweep), "--sigma", "0.3"]) == 2
    assert capsys.readouterr().err.startswith("pglab: error: sigma: differs from the resumed sweep's value")
    assert pglab_main(sweep_argv(tmp_path, serial_sweep)) == 2  # the directory already holds a sweep


@pytest.mark.slow
@pytest.mark.dist
def test_a_sweep_killed_with_sigkill_resumes_to_the_same_table(serial_sweep, tmp_path):
    """Killed mid-sweep and resumed: the table equals the uninterrupted sweep's."""
    out = tmp_path / "killed"
    env = {**os.environ, "PGLAB_NO_PROGRESS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "pglab.cli", *sweep_argv(tmp_path, out, "--backend", "serial")],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # kill it once the first run has a checkpoint (midway through the sweep)
    deadline = time.time() + 240
    while time.time() < deadline and not list(out.glob("runs/*/checkpoints/checkpoint_latest.pt")):
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (out / "sweep.csv").exists()
    assert not (out / "runs" / "sigma0.25-mc-s0" / "trial.json").exists()  # the second run still to do
    assert pglab_main(["sweep", "ghm", "--resume", str(out)]) == 0
    assert table(out) == table(serial_sweep)


@ray_child_only
@pytest.mark.timeout(300)
def test_a_ray_sweep_gives_the_serial_table(local_ray, serial_sweep, tmp_path):
    """The sweep on Ray (one CPU per run; started in the Ray process of
    test_ghm_parallel.py, on its instance): the serial sweep's table, bit for bit."""
    out = tmp_path / "ray"
    assert pglab_main(sweep_argv(tmp_path, out, "--backend", "ray", "--max-parallel", "2")) == 0
    assert table(out) == table(serial_sweep)

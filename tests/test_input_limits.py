"""Inputs that would eat the machine, crash a library or fail after the work are refused up
front: one line naming the field, exit code 2, no traceback, nothing created."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pglab import validation
from pglab.cli import main
from pglab.errors import ConfigError

LONG = "a" * 300  # one path component over the usual 255-byte name limit


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def refused(capsys, tmp_path: Path, argv: list[str], field: str, *words: str) -> str:
    """Run ``pglab argv``; assert exit 2, one stderr line naming ``field`` (and ``words``),
    no traceback and no new file or folder in ``tmp_path``."""
    before = sorted(tmp_path.rglob("*"))
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith(f"pglab: error: {field}: "), err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], err
    assert sorted(tmp_path.rglob("*")) == before
    return lines[0]


@pytest.fixture
def small_memory(monkeypatch):
    """A machine with 1 GB available."""
    monkeypatch.setattr(validation, "available_memory_bytes", lambda: 10**9)


# -- memory --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["solve", "ghm", "--nodes", "2000000000"], "nodes"),
        (["solve", "ghm-credit-line", "--nodes", "2000000000"], "nodes"),
        (["train", "ghm", "--fd-nodes", "2000000000"], "fd_nodes"),
        (["train", "ghm", "--n-trajectories", "2000000000"], "n_trajectories"),
        (["train", "ghm", "--eval-paths", "2000000000"], "eval_paths"),
        (["sweep", "ghm", "--fd-line-nodes", "2000000000"], "fd_line_nodes"),
        (["train", "ppo", "--num-envs", "100000000", "--total-steps", "10000000000000"], "num_envs"),
        (["train", "ppo", "--num-steps", "10000000000", "--total-steps", "100000000000000"], "num_steps"),
        (["train", "ppo", "--eval-episodes", "1000000000"], "eval_episodes"),
        (["train", "a2c", "--num-envs", "100000000", "--total-env-steps", "1000000000"], "num_envs"),
        (["train", "a2c", "--pixel-goal.grid-size", "10000000"], "pixel_goal.grid_size"),
        (["train", "pso-tsp", "--instances-per-iteration", "1000000000"], "instances_per_iteration"),
        (["evaluate", "pso-tsp", "--episodes", "10000000000"], "episodes"),
        (["train", "maxk-pomo", "--batch-size", "100000000"], "batch_size"),
        (["train", "forecast", "--source", "synthetic", "--n-bins", "10000000000"], "n_bins"),
    ],
)
def test_sizes_beyond_the_available_memory_are_refused(capsys, tmp_path, argv, field):
    line = refused(capsys, tmp_path, argv, field, "needs ~", "GB", "available")
    assert "log_dir" not in line


def test_the_memory_limit_is_the_available_memory(capsys, tmp_path, small_memory):
    # on a machine with 1 GB available: 40,000 FD nodes need ~1.4 GB, 24,000 ~0.85 GB
    line = refused(capsys, tmp_path, ["train", "ghm", "--fd-nodes", "40000"], "fd_nodes", "1.0 GB available")
    assert "~1.4 GB" in line
    from pglab.configs.ghm import GHMSolveConfig

    GHMSolveConfig(nodes=24_000)  # 0.85 GB: accepted


def test_available_memory_is_read_from_the_machine():
    available = validation.available_memory_bytes()
    assert available is not None and 0 < available <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


# -- threads and seeds ---------------------------------------------------------------------------

TRAINERS_AND_EVALUATORS = [
    ["train", "ghm"],
    ["train", "ppo"],
    ["train", "a2c"],
    ["train", "pso-tsp"],
    ["train", "maxk-pomo"],
    ["train", "forecast", "--source", "synthetic"],
    ["evaluate", "pso-tsp"],
]


@pytest.mark.parametrize("command", TRAINERS_AND_EVALUATORS)
def test_threads_above_the_cap_are_refused(capsys, tmp_path, command):
    cap = validation.max_threads()
    refused(capsys, tmp_path, [*command, "--threads", str(cap + 1)], "threads", f"<= {cap}")


@pytest.mark.parametrize("command", [*TRAINERS_AND_EVALUATORS, ["backtest", "--source", "synthetic"]])
def test_seeds_beyond_64_bits_are_refused(capsys, tmp_path, command):
    refused(capsys, tmp_path, [*command, "--seed", str(2**70)], "seed", "2**63 - 1")


def test_sweep_seeds_beyond_64_bits_are_refused(capsys, tmp_path):
    refused(capsys, tmp_path, ["sweep", "ghm", "--seeds", "0", str(2**63)], "seeds", "2**63 - 1")


def test_the_largest_seed_and_thread_count_are_accepted():
    from pglab.configs.ppo import PPOConfig

    config = PPOConfig(seed=validation.MAX_SEED, threads=validation.max_threads())
    assert config.seed == 2**63 - 1
    with pytest.raises(ConfigError, match="threads"):
        PPOConfig(threads=validation.max_threads() + 1)
    with pytest.raises(ConfigError, match="seed"):
        PPOConfig(seed=validation.MAX_SEED + 1)


# -- maxk-pomo: RL4CO's attention ------------------------------------------------------------------


@pytest.mark.parametrize(("embed_dim", "num_heads"), [(16, 4), (1040, 4), (36, 3)])
def test_maxk_head_dim_outside_rl4co_rule_is_refused(capsys, tmp_path, embed_dim, num_heads):
    argv = ["train", "maxk-pomo", "--embed-dim", str(embed_dim), "--num-heads", str(num_heads)]
    refused(capsys, tmp_path, argv, "embed_dim", "multiple of 8", "<= 128")


def test_maxk_head_dim_rule_is_rl4cos():
    """The rule as the installed RL4CO asserts it (read from its source: importing rl4co
    takes tens of seconds)."""
    import importlib.util

    spec = importlib.util.find_spec("rl4co")
    if spec is None or spec.origin is None:
        pytest.skip("rl4co is not installed")
    source = (Path(spec.origin).parent / "models" / "nn" / "attention.py").read_text()
    from pglab.configs.maxk import MAX_HEAD_DIM, MaxKPOMOTrainConfig

    assert f"self.head_dim % 8 == 0 and self.head_dim <= {MAX_HEAD_DIM}" in source
    MaxKPOMOTrainConfig(embed_dim=16, num_heads=2)  # head_dim 8
    MaxKPOMOTrainConfig(embed_dim=256, num_heads=2)  # head_dim 128
    for embed_dim, num_heads in [(16, 4), (264, 1), (40, 4)]:  # head_dim 4, 264, 10
        with pytest.raises(ConfigError, match="embed_dim"):
            MaxKPOMOTrainConfig(embed_dim=embed_dim, num_heads=num_heads)


# -- sweeps --------------------------------------------------------------------------------------


def test_sweep_without_final_evaluation_is_refused(capsys, tmp_path):
    (tmp_path / "train.yaml").write_text("final_eval: false\n")
    argv = ["sweep", "ghm", "--train-config", "train.yaml", "--backend", "serial", "--log-dir", "sweep"]
    refused(capsys, tmp_path, argv, "train_config", "final_eval")


@pytest.mark.parametrize("grid", ["calibrations: []\n", "sigma: []\n"])
def test_sweep_with_an_empty_grid_is_refused(capsys, tmp_path, grid):
    (tmp_path / "grid.yaml").write_text(grid)
    argv = ["sweep", "ghm", "--grid", "grid.yaml", "--backend", "serial", "--log-dir", "sweep"]
    refused(capsys, tmp_path, argv, "grid", "empty")


def test_large_sweep_needs_yes(capsys, tmp_path):
    sigmas = [f"{0.1 + 0.01 * i:.2f}" for i in range(101)]
    argv = ["sweep", "ghm", "--sigma", *sigmas, "--seeds", "0", "1", "--backend", "serial", "--log-dir", "sweep"]
    from pglab.algos.ghm_sweep import check_sweep_size
    from pglab.configs.sweep import GHMSweepConfig

    sigma = tuple(0.1 + 0.01 * i for i in range(101))
    with pytest.raises(ConfigError, match="yes"):
        check_sweep_size(GHMSweepConfig(sigma=sigma, seeds=(0, 1)))
    refused(capsys, tmp_path, argv, "yes", "202 runs", "more than 200", "--yes")
    check_sweep_size(GHMSweepConfig(sigma=sigma, seeds=(0, 1), yes=True))  # accepted with --yes
    check_sweep_size(GHMSweepConfig(sigma=sigma[:100], seeds=(0, 1)))  # 200 runs: accepted


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--max-parallel", "2", "--backend", "serial"], ("--backend ray",)),
        (["--max-parallel", "1000000"], ("<=",)),
    ],
)
def test_sweep_max_parallel_is_checked(capsys, tmp_path, flags, words):
    refused(capsys, tmp_path, ["sweep", "ghm", *flags, "--log-dir", "sweep"], "max_parallel", *words)


# -- paths ---------------------------------------------------------------------------------------


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "a_file"
    path.write_text("x")
    return path


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["solve", "ghm", "--output", "{file}/q.json"], "output"),
        (["train", "forecast", "--source", "synthetic", "--output", "{file}/q.json"], "output"),
        (["backtest", "--source", "synthetic", "--output", "{file}/q"], "output"),
        (["plot", ".", "--output", "{file}/q.png"], "output"),
        (["train", "ppo", "--log-dir", "{file}/run"], "log_dir"),
        (["train", "ghm", "--log-dir", "{file}/sub/run"], "log_dir"),
        (["sweep", "ghm", "--log-dir", "{file}/sweep"], "log_dir"),
        (["evaluate", "pso-tsp", "--output", "{file}/q.json"], "output"),
    ],
)
def test_outputs_under_a_file_are_refused_before_the_work(capsys, tmp_path, a_file, argv, field):
    argv = [arg.replace("{file}", str(a_file)) for arg in argv]
    refused(capsys, tmp_path, argv, field, "is a file, not a folder")


def test_output_that_is_a_folder_is_refused(capsys, tmp_path):
    (tmp_path / "folder").mkdir()
    refused(capsys, tmp_path, ["train", "forecast", "--source", "synthetic", "--output", "folder"], "output", "folder")


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["train", "ppo", "--log-dir", LONG], "log_dir"),
        (["train", "ppo", "--resume", LONG], "resume"),
        (["train", "ghm", "--resume", f"runs/{LONG}/x"], "resume"),
        (["validate", LONG], "checkpoint"),
        (["plot", LONG], "run_dir"),
        (["compare", LONG], "run_dirs"),
        (["train", "forecast", "--source", f"csv:{LONG}.csv"], "source"),
        (["backtest", "--source", f"csv:{LONG}.csv"], "source"),
        (["solve", "ghm", "--output", LONG], "output"),
        (["sweep", "ghm", "--resume", LONG], "resume"),
        (["evaluate", "maxk-pomo", "--checkpoints", LONG], "checkpoints"),
        (["evaluate", "forecast", "--model", LONG], "model"),
    ],
)
def test_path_components_over_the_name_limit_are_refused_by_field(capsys, tmp_path, argv, field):
    refused(capsys, tmp_path, argv, field, "bytes (the limit is 255)")


def test_check_output_path_creates_nothing(tmp_path):
    target = tmp_path / "new" / "deeper" / "out.json"
    validation.check_output_path("output", target)
    validation.check_output_file("output", target)
    assert not (tmp_path / "new").exists()


# -- plot ----------------------------------------------------------------------------------------


def test_plot_of_an_empty_metrics_file_is_one_line(capsys, tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.csv").write_text("")
    refused(capsys, tmp_path, ["plot", "run"], "run/metrics.csv", "is empty")


def test_sweep_max_parallel_one_with_the_serial_backend_is_accepted():
    from pglab.configs.sweep import GHMSweepConfig

    assert GHMSweepConfig(backend="serial", max_parallel=1).max_parallel == 1  # one run at a time, as serial runs
    with pytest.raises(ConfigError, match="max_parallel"):
        GHMSweepConfig(backend="serial", max_parallel=2)

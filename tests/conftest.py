import os

os.environ.setdefault("PGLAB_NO_PROGRESS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# The pglab processes that tests start run one intra-op thread, as the tests themselves do
# (below): two test workers share the two cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Ray starts its worker processes at nice 15; beside the other test process (nice 0) they
# would run only when it waits, and a Ray test took three times as long.
os.environ.setdefault("RAY_worker_niceness", "0")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

# One intra-op thread: the suite's tensors are tiny, and with two threads on a busy 2-core
# machine small ops were measured ~20x slower (thread wake-ups). Tests that need another
# count set it themselves; the fixture below restores one thread after each test.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    matmul_precision = torch.get_float32_matmul_precision()
    validate_args = torch.distributions.Distribution._validate_args
    yield
    # Libraries may set process-wide torch state: RL4COTrainer sets the float32 matmul
    # precision to "medium", which on CPUs with AMX/AVX512-BF16 runs float32 matmuls in
    # bfloat16 (seen: 0.5% log-prob differences in a later test). Restore it so that no
    # test changes another's numbers.
    torch.set_float32_matmul_precision(matmul_precision)
    torch.set_num_threads(1)
    torch.distributions.Distribution.set_default_validate_args(validate_args)


# `make test` runs the files on two workers (pytest-xdist, `--dist loadfile
# --no-loadscope-reorder`): a worker takes the next file in collection order when it finishes
# one, so the files that take longest go first and the two workers end together. Seconds per
# file (wall), measured on the whole suite; the other files follow in their order. The two
# files that start Ray (the sweep's and the simulator's) are four apart, so that their Ray
# instances do not run at the same time.
LONGEST_FIRST = (
    "test_ghm_sweep.py",  # 100
    "test_ghm.py",  # 45
    "test_cli_fuzz.py",  # 31
    "test_signals.py",  # 31
    "test_ghm_parallel.py",  # 77
    "test_a2c_distributed.py",  # 25
    "test_ghm_shell.py",  # 25
    "test_ppo_train.py",  # 22
    "test_ghm_refine.py",  # 22
    "test_ghm_solvers.py",  # 22
    "test_run_shell.py",  # 22
    "test_a2c_shell.py",  # 20
    "test_hjb_residual.py",  # 18
    "test_atari.py",  # 16
    "test_ghm_credit_line_train.py",  # 12
    "test_forecast_shell.py",  # 12
    "test_a2c_trainer.py",  # 9
)


def pytest_collection_modifyitems(items):
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file keeps its order


# -- Ray ------------------------------------------------------------------------------------------
# The tests that start Ray run together in one pytest process of their own
# (tests/test_ghm_parallel.py::test_ray_checks_in_a_process_of_their_own): a Ray driver that
# loses its raylet (a busy machine's health checks) exits its process, which must not be the
# test runner's, and one Ray instance serves them all.
RAY_CHILD = "PGLAB_TEST_RAY_CHILD"  # set in that process
RAY_TESTS = (
    "tests/test_ghm_parallel.py::test_ray_backend_in_a_process_of_its_own",
    "tests/test_ghm_sweep.py::test_a_ray_sweep_gives_the_serial_table",
)
ray_child_only = pytest.mark.skipif(
    os.environ.get(RAY_CHILD) != "1", reason="runs in the Ray process (test_ray_checks_in_a_process_of_their_own)"
)


@pytest.fixture(scope="session")
def local_ray():
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        # Ray workers do not inherit pytest's sys.path; they need it to unpickle the
        # models defined in the test files.
        path = os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": path}},
        )
    yield ray
    if started:
        ray.shutdown()

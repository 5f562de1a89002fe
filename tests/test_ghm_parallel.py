"""ParallelTrajectorySimulator: bit-identical to the batched simulator for any number of
workers (process and Ray backends), honours action_repeat, validates its config, and
turns a dead, failing or hung worker into a SimulationWorkerError (after one retry)
instead of a hang.

The failing models below are module-level classes so that the worker processes (and
Ray workers, given this directory on their PYTHONPATH) can unpickle them.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import RAY_CHILD, RAY_TESTS, ray_child_only

from pglab.envs.ghm import GHMModel
from pglab.envs.parallel import SLICE_ALIGN, ParallelTrajectorySimulator, SimulationWorkerError
from pglab.envs.simulator import Trajectories, TrajectorySimulator
from pglab.errors import EXIT_FAILURE, ConfigError
from pglab.nets import GaussianPolicy

NUM_PATHS = 200  # three aligned slices of 64 paths and a ragged remainder (200 % 8 != 0)
DT, HORIZON = 0.01, 0.4  # 40 steps
FIELDS = ("states", "actions", "controls", "rewards", "masks", "dones")


class DyingGHMModel(GHMModel):
    """GHM whose drift kills the worker process running it while ``marker`` exists:
    ``once``: the first worker to see the marker removes it, then dies (a retry
    succeeds); otherwise every worker dies with SIGKILL."""

    def __init__(self, marker: str, once: bool):
        super().__init__()
        # the process that builds the model (the test's) is spared: were a chunk ever run
        # there, killing it would take the test runner down instead of failing the test
        self.marker, self.once, self.main_pid = marker, once, os.getpid()

    def drift(self, states, controls):
        if os.path.exists(self.marker) and os.getpid() != self.main_pid:
            if not self.once:
                os.kill(os.getpid(), signal.SIGKILL)
            try:
                os.remove(self.marker)
            except FileNotFoundError:  # another worker got there first
                pass
            else:
                os._exit(1)
        return super().drift(states, controls)


class RaisingGHMModel(GHMModel):
    """GHM whose drift raises, as a buggy model would."""

    def drift(self, states, controls):
        raise ValueError("drift exploded on purpose")


class HangingGHMModel(GHMModel):
    """GHM whose drift never returns (in practice)."""

    def drift(self, states, controls):
        time.sleep(120)
        return super().drift(states, controls)


def _policy() -> GaussianPolicy:
    torch.manual_seed(1)
    # mean_shift, action_high: non-persistent buffers must reach the workers too
    return GaussianPolicy(
        1, 2, (16, 16), log_std_init=-1.0, action_high=(1.0, 1.0), mean_shift=(0.5, 0.5), mean_init=(0.1, 0.1)
    )


def _initial(model, num_paths: int = NUM_PATHS, seed: int = 3):
    generator = torch.Generator().manual_seed(seed)
    return model.initial_states(num_paths, generator), generator


def _reference(
    model, policy, action_repeat: int = 1, deterministic: bool = False, absorption: str = "grid"
) -> tuple[Trajectories, torch.Tensor]:
    initial, generator = _initial(model)
    with torch.no_grad():
        paths = TrajectorySimulator(model, DT, HORIZON, action_repeat=action_repeat, absorption=absorption).rollout(
            policy, initial, generator, deterministic=deterministic
        )
    return paths, generator.get_state()


def _parallel(simulator, policy, deterministic: bool = False) -> tuple[Trajectories, torch.Tensor]:
    initial, generator = _initial(simulator.model)
    with torch.no_grad():
        paths = simulator.rollout(policy, initial, generator, deterministic=deterministic)
    return paths, generator.get_state()


def _assert_identical(got: Trajectories, want: Trajectories) -> None:
    for name in FIELDS:
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    assert (got.discount, got.dt, got.action_repeat) == (want.discount, want.dt, want.action_repeat)


# -- determinism ------------------------------------------------------------------------------


def test_process_backend_is_bitwise_identical_for_1_2_3_workers_and_to_the_batched_simulator():
    model, policy = GHMModel(), _policy()
    want, want_rng = _reference(model, policy)
    assert want.alive_at_end.any() and not want.alive_at_end.all()  # absorption is exercised
    for n_workers in (1, 2, 3):
        with ParallelTrajectorySimulator(model, DT, HORIZON, n_workers=n_workers) as simulator:
            assert len(simulator.slices(NUM_PATHS)) == n_workers
            got, got_rng = _parallel(simulator, policy)
            _assert_identical(got, want)
            assert torch.equal(got_rng, want_rng)  # the generator advanced exactly as the batched one
            got_mean, _ = _parallel(simulator, policy, deterministic=True)  # pool reused
            _assert_identical(got_mean, _reference(model, policy, deterministic=True)[0])


def test_bridge_absorption_is_bitwise_identical_across_workers():
    model, policy = GHMModel(), _policy()
    want, want_rng = _reference(model, policy, absorption="bridge")
    grid, _ = _reference(model, policy)
    assert not torch.equal(want.dones, grid.dones)  # the bridge kills paths the grid keeps
    with ParallelTrajectorySimulator(model, DT, HORIZON, n_workers=2, absorption="bridge") as simulator:
        got, got_rng = _parallel(simulator, policy)
    _assert_identical(got, want)
    assert torch.equal(got_rng, want_rng)


def test_action_repeat_is_honoured_and_can_change_between_rollouts():
    model, policy = GHMModel(), _policy()
    with ParallelTrajectorySimulator(model, DT, HORIZON, action_repeat=4, n_workers=2) as simulator:
        got, _ = _parallel(simulator, policy)
        _assert_identical(got, _reference(model, policy, action_repeat=4)[0])
        decisions = torch.arange(got.num_steps) // 4 * 4
        assert torch.equal(got.actions, got.actions[:, decisions])  # held between decisions
        simulator.action_repeat = 1  # as the trainer's schedule does
        got, _ = _parallel(simulator, policy)
        assert got.action_repeat == 1
        _assert_identical(got, _reference(model, policy, action_repeat=1)[0])


def test_slices_are_aligned_contiguous_and_default_worker_count():
    simulator = ParallelTrajectorySimulator(GHMModel(), DT, HORIZON)
    assert simulator.resolve_workers(25) == 2 or os.cpu_count() == 1  # min(cpu_count, 25 // 10)
    assert simulator.resolve_workers(5) == 1
    for num_paths in (1, 63, 64, 200, 1000, 1003):
        slices = ParallelTrajectorySimulator(GHMModel(), DT, HORIZON, n_workers=3).slices(num_paths)
        assert slices[0][0] == 0 and slices[-1][1] == num_paths
        assert all(a[1] == b[0] for a, b in zip(slices, slices[1:], strict=False))
        assert all(start % SLICE_ALIGN == 0 for start, _ in slices)
    assert ParallelTrajectorySimulator(GHMModel(), DT, HORIZON, n_workers=2).slices(1000) == [(0, 512), (512, 1000)]


# -- configuration and misuse ----------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"backend": "threads"}, "backend"),
        ({"n_workers": 0}, "n_workers"),
        ({"n_workers": 2.5}, "n_workers"),
        ({"ray_address": "auto"}, "ray_address"),  # with backend="process"
        ({"backend": "ray", "ray_address": ""}, "ray_address"),
        ({"action_repeat": 0}, "action_repeat"),
    ],
)
def test_bad_config_raises_config_error_naming_the_field(kwargs, field):
    with pytest.raises(ConfigError) as info:
        ParallelTrajectorySimulator(GHMModel(), DT, HORIZON, **kwargs)
    assert info.value.field == field
    with pytest.raises(ConfigError, match="dt"):
        ParallelTrajectorySimulator(GHMModel(), 0.0, HORIZON)


def test_rollout_with_gradients_enabled_is_refused():
    model, policy = GHMModel(), _policy()
    simulator = ParallelTrajectorySimulator(model, DT, HORIZON, n_workers=1)
    with pytest.raises(RuntimeError, match="no_grad"):
        simulator.rollout(policy, _initial(model)[0])


# -- worker failure ---------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_killed_worker_raises_simulation_worker_error_after_one_retry(tmp_path):
    marker = tmp_path / "die"
    marker.touch()
    policy = _policy()
    with ParallelTrajectorySimulator(DyingGHMModel(str(marker), once=False), DT, HORIZON, n_workers=2) as simulator:
        start = time.monotonic()
        with pytest.raises(SimulationWorkerError) as info:
            _parallel(simulator, policy)
        assert time.monotonic() - start < 30
    error = info.value
    assert error.exit_code == EXIT_FAILURE and error.backend == "process"
    assert "SIGKILL" in str(error) and "after one retry" in str(error)
    assert error.paths in simulator.slices(NUM_PATHS)


@pytest.mark.timeout(90)
def test_worker_dying_once_is_retried_and_gives_the_same_result(tmp_path):
    marker = tmp_path / "die-once"
    marker.touch()
    policy = _policy()
    with ParallelTrajectorySimulator(DyingGHMModel(str(marker), once=True), DT, HORIZON, n_workers=2) as simulator:
        got, _ = _parallel(simulator, policy)
    assert not marker.exists()  # a worker did die
    # the reference with the same model class: a model that overrides the drift is simulated
    # step by step, plain GHM in closed form over held actions (equal only to rounding)
    _assert_identical(got, _reference(DyingGHMModel(str(marker), once=True), policy)[0])


@pytest.mark.timeout(90)
def test_exception_in_worker_is_raised_at_once_with_its_traceback():
    simulator = ParallelTrajectorySimulator(RaisingGHMModel(), DT, HORIZON, n_workers=2)
    with pytest.raises(SimulationWorkerError, match="drift exploded on purpose") as info:
        _parallel(simulator, _policy())
    assert "after one retry" not in str(info.value)  # deterministic: not retried
    # the pool was replaced, so a good model works on the same simulator afterwards
    simulator.model = GHMModel()
    got, _ = _parallel(simulator, _policy())
    _assert_identical(got, _reference(GHMModel(), _policy())[0])
    simulator.close()


@pytest.mark.timeout(90)
def test_hung_worker_times_out_instead_of_hanging():
    simulator = ParallelTrajectorySimulator(HangingGHMModel(), DT, HORIZON, n_workers=1)
    simulator.timeout_s = 1.0
    start = time.monotonic()
    with pytest.raises(SimulationWorkerError, match="timeout_s"):
        _parallel(simulator, _policy())
    assert time.monotonic() - start < 20
    simulator.close()


# -- Ray --------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.dist
@pytest.mark.timeout(660)
def test_ray_checks_in_a_process_of_their_own():
    """The Ray tests (conftest.RAY_TESTS: the simulator's Ray backend below and the sweep on
    Ray) in one pytest process of their own, on one local Ray instance of 2 CPUs."""
    pytest.importorskip("ray")
    repo = Path(__file__).resolve().parents[1]
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *RAY_TESTS],
        cwd=repo,
        env={**os.environ, RAY_CHILD: "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    passed = f"{len(RAY_TESTS)} passed"
    assert child.returncode == 0 and passed in child.stdout, child.stdout[-3000:] + child.stderr[-2000:]


@ray_child_only
@pytest.mark.timeout(180)
def test_ray_backend_in_a_process_of_its_own(local_ray, tmp_path):
    model, policy = GHMModel(), _policy()
    with ParallelTrajectorySimulator(model, DT, HORIZON, backend="ray", n_workers=2) as ray_simulator:
        got, got_rng = _parallel(ray_simulator, policy)
        # equal to the batched simulator, paths and generator state (and so to the process
        # backend, which the test above holds to the same reference)
        want, want_rng = _reference(model, policy)
        _assert_identical(got, want)
        assert torch.equal(got_rng, want_rng)
        # the model's own exception: not retried
        ray_simulator.model = RaisingGHMModel()
        with pytest.raises(SimulationWorkerError, match="drift exploded on purpose"):
            _parallel(ray_simulator, policy)
        # a Ray task whose worker dies: retried once, then a clear error
        marker = tmp_path / "die"
        marker.touch()
        ray_simulator.model = DyingGHMModel(str(marker), once=False)
        with pytest.raises(SimulationWorkerError) as info:
            _parallel(ray_simulator, policy)
        assert info.value.backend == "ray" and "after one retry" in str(info.value)
    assert local_ray.is_initialized()  # the simulator did not start Ray, so it leaves it running


# -- the trainer on parallel rollouts ----------------------------------------------------------


class WorkerKillingGHMModel(GHMModel):
    """GHM whose drift SIGKILLs any *worker* process while ``marker`` exists (the main
    process, which solves the FD reference with the same model, is spared)."""

    def __init__(self, params=None, *, marker: str, main_pid: int):
        super().__init__(params)
        self.marker, self.main_pid = marker, main_pid

    def drift(self, states, controls):
        if os.getpid() != self.main_pid and os.path.exists(self.marker):
            os.kill(os.getpid(), signal.SIGKILL)
        return super().drift(states, controls)


@pytest.mark.timeout(180)
def test_trainer_on_process_workers_matches_batched_and_a_killed_worker_leaves_the_checkpoint_intact(
    tmp_path, monkeypatch
):
    from test_ghm import TINY

    import pglab.algos.ghm_train as ghm_train
    from pglab.algos.ghm_train import GHMTrainConfig, train_ghm
    from pglab.run.checkpoint import load_checkpoint_file

    quiet = dict(echo=lambda *a, **k: None)
    base = {**TINY, "n_trajectories": 130, "save_interval": 1}
    marker = tmp_path / "kill-workers"
    monkeypatch.setattr(
        ghm_train, "GHMModel", lambda params: WorkerKillingGHMModel(params, marker=str(marker), main_pid=os.getpid())
    )
    train_ghm(GHMTrainConfig(n_iterations=2, log_dir=tmp_path / "batched", **base), **quiet)
    run_dir = tmp_path / "process"
    train_ghm(GHMTrainConfig(n_iterations=2, log_dir=run_dir, simulator="process", n_workers=2, **base), **quiet)
    batched, parallel = (load_checkpoint_file(d / "checkpoints") for d in (tmp_path / "batched", run_dir))
    for key, value in batched["models"]["policy"].items():  # bit-identical training on 2 workers
        assert torch.equal(value, parallel["models"]["policy"][key]), key

    latest = run_dir / "checkpoints" / "checkpoint_latest.pt"
    before = latest.read_bytes()
    marker.touch()  # from now on every worker dies, the retry's too
    start = time.monotonic()
    with pytest.raises(SimulationWorkerError, match="after one retry"):
        train_ghm(GHMTrainConfig(n_iterations=4, resume=run_dir, simulator="process", n_workers=2, **base), **quiet)
    assert time.monotonic() - start < 60  # an error, not a hang
    assert latest.read_bytes() == before  # the last checkpoint is intact and still loads
    assert load_checkpoint_file(run_dir / "checkpoints")["counters"]["iteration"] == 2

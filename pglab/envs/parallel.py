"""Rollouts of a :class:`ContinuousTimeModel` spread over worker processes or Ray tasks.

:class:`ParallelTrajectorySimulator` has :class:`TrajectorySimulator`'s interface and
returns the same :class:`Trajectories`, bit for bit on the CPU, whatever the number of
workers::

    main process   noise = RolloutNoise.draw(B, T, ...)      (the batched simulator's draw)
                   split paths [0, B) into contiguous slices, one per worker
    worker k       TrajectorySimulator(...).rollout(policy, x0[slice_k], noise=noise[slice_k])
    main process   concatenate the slices along the path axis

Determinism comes from the noise, not from per-worker seeds: the main process draws the
whole path-major noise from the caller's generator exactly as the batched simulator
does, so path ``i`` sees the same draws whichever worker simulates it, and the generator
advances by the same amount. Two details keep the arithmetic identical as well:

* every slice but the last starts and ends on a multiple of :data:`SLICE_ALIGN` rows.
  torch's CPU kernels compute a row differently depending on where it falls in the
  batch: elementwise kernels run SIMD blocks of 16-32 elements and finish the tail of a
  tensor with scalar code (``softplus`` of a ``[B, 2]`` tensor differs in the last ulp
  when ``B % 8 != 0``), and the GEMM takes another path for 1-3 rows. Aligned slices put
  each row in the same position relative to those blocks as in the full batch;
* workers run single-threaded (``torch.set_num_threads(1)``), so no slice is split
  between threads. The result equals the single-threaded batched simulator's at any
  size, and the multi-threaded one's as long as that does not split its own tensors
  off the SIMD blocks (torch splits elementwise ops of more than 32,768 elements
  between threads: at 40,001 paths the 2-thread batched run differs from the 1-thread
  one in the last bits; at 4,097 paths it does not).

Backends: ``"process"`` keeps a pool of worker processes (started by ``forkserver``
where available, else ``spawn``; never ``fork``, which copies torch's thread pools in an
undefined state) alive across rollouts; ``"ray"`` runs one Ray task per slice, on a local
Ray instance or on the cluster at ``ray_address``.

Failure handling: a worker that dies (killed, segfault, out of memory), a Ray worker
that crashes, or a rollout that exceeds :attr:`ParallelTrajectorySimulator.timeout_s`
makes the simulator retry the whole rollout once on fresh workers (same noise, so the
same result); a second failure raises :class:`SimulationWorkerError`. An exception raised
by the simulation code itself (a bug in the model, a shape error) is deterministic, so it
is not retried and is raised at once as :class:`SimulationWorkerError` carrying the
worker's traceback. Nothing waits without a timeout, so a lost worker cannot hang the
training loop.

Gradients do not cross process boundaries: the parallel simulator is for rollouts under
``torch.no_grad()`` (Monte Carlo policy gradient, evaluation). Calling it with gradients
enabled on a policy that requires them raises an error instead of silently returning
detached tensors.
"""

from __future__ import annotations

import contextlib
import copy
import math
import multiprocessing
import os
import pickle
import signal
import time
import traceback
import weakref
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_for_ready
from typing import Any

import torch
from torch import nn

from pglab.envs.dynamics import ContinuousTimeModel
from pglab.envs.simulator import RolloutNoise, SimulatorPolicy, Trajectories, TrajectorySimulator
from pglab.errors import ConfigError, WorkerError
from pglab.validation import check_choice, check_int

BACKENDS = ("process", "ray")

#: Slice boundaries fall on multiples of this many paths (see the module docstring):
#: a multiple of every SIMD block of torch's CPU kernels (at most 32 float32 elements
#: per unrolled AVX-512 iteration) and above the GEMM's small-batch path (<= 3 rows).
SLICE_ALIGN = 64

_TRAJECTORY_FIELDS = ("states", "actions", "controls", "rewards", "masks", "dones")


class SimulationWorkerError(WorkerError):
    """A parallel rollout failed in a worker (exit code 1).

    Attributes:
        backend: ``"process"`` or ``"ray"``.
        paths: ``(start, stop)`` of the path slice whose worker failed, when known.
        cause: a one-line description of what went wrong.
    """

    def __init__(self, backend: str, paths: tuple[int, int] | None, cause: str):
        self.backend, self.paths, self.cause = backend, paths, cause
        where = f"paths {paths[0]}:{paths[1]}" if paths is not None else "the rollout"
        super().__init__(f"ParallelTrajectorySimulator(backend={backend!r}): worker simulating {where} failed: {cause}")


class _WorkerCrash(Exception):
    """Internal: a worker died or timed out (retried once)."""

    def __init__(self, paths: tuple[int, int] | None, cause: str):
        super().__init__(cause)
        self.paths, self.cause = paths, cause


class _WorkerException(Exception):
    """Internal: the simulation code raised in a worker (not retried)."""

    def __init__(self, paths: tuple[int, int] | None, cause: str):
        super().__init__(cause)
        self.paths, self.cause = paths, cause


# -- the work of one slice (runs in the workers) ------------------------------------------


@dataclass
class _SliceTask:
    """One worker's share of a rollout; ``payload`` is the pickled ``(model, policy)``
    shared by all slices of the rollout."""

    dt: float
    horizon: float
    action_repeat: int
    deterministic: bool
    initial_states: torch.Tensor  # [b, S]
    state_noise: torch.Tensor  # [b, T, w]
    action_noise: torch.Tensor  # [b, T, A]
    absorption: str = "grid"
    survival_noise: torch.Tensor | None = None  # [b, T], bridge absorption
    jump_noise: torch.Tensor | None = None  # [b, T, J], a model with jumps


def _simulate_slice(payload: bytes, task: _SliceTask) -> dict[str, Any]:
    """Run the batched simulator on one slice; returns the trajectory tensors by name and
    ``cpu_s``, the CPU seconds this took (a diagnostic, see ``last_worker_cpu_s``)."""
    start = time.thread_time()
    torch.set_num_threads(1)
    model, policy = pickle.loads(payload)
    simulator = TrajectorySimulator(
        model, task.dt, task.horizon, action_repeat=task.action_repeat, absorption=task.absorption
    )
    with torch.no_grad():
        noise = RolloutNoise(task.state_noise, task.action_noise, task.survival_noise, task.jump_noise)
        paths = simulator.rollout(policy, task.initial_states, noise=noise, deterministic=task.deterministic)
    result: dict[str, Any] = {name: getattr(paths, name) for name in _TRAJECTORY_FIELDS}
    if paths.euler_states is not None:
        result["euler_states"] = paths.euler_states
    result["cpu_s"] = time.thread_time() - start
    return result


def _process_worker_main(connection) -> None:
    """Loop of a pool process: receive ``(payload, task)``, reply ``("ok", tensors)`` or
    ``("error", traceback)``; an empty message or a closed pipe ends it."""
    # Ctrl-C reaches the whole process group; the main process decides what to do
    # (checkpoint, close the pool), so the workers must not die on it first.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    while True:
        try:
            message = connection.recv_bytes()
        except (EOFError, OSError):  # the main process is gone
            return
        if not message:
            return
        reply: tuple[str, Any]
        try:
            payload, task = pickle.loads(message)
            reply = ("ok", _simulate_slice(payload, task))
        except Exception:  # noqa: BLE001 - sent back whole, raised in the main process
            reply = ("error", traceback.format_exc())
        # Plain pickle (not multiprocessing's ForkingPickler) so that tensors travel as
        # bytes through the pipe instead of through shared-memory file descriptors.
        connection.send_bytes(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "stopped responding"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name}"
    return f"exited with code {exitcode}"


# -- process backend ------------------------------------------------------------------------


def _mp_context():
    # forkserver forks each worker from a clean server process that has already imported
    # torch and pglab (fast start, no inherited threads); spawn is the portable fallback.
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["torch", "pglab.envs.parallel"])
        return context
    return multiprocessing.get_context("spawn")


class _ProcessPool:
    """``n`` long-lived worker processes, one pipe each; worker ``k`` gets slice ``k``,
    so a death is attributed to the slice it was simulating."""

    def __init__(self, n_workers: int):
        context = _mp_context()
        self.workers: list[tuple[Any, Any]] = []
        for index in range(n_workers):
            parent_end, child_end = context.Pipe(duplex=True)
            process = context.Process(
                target=_process_worker_main, args=(child_end,), daemon=True, name=f"pglab-simulator-{index}"
            )
            process.start()
            child_end.close()
            self.workers.append((process, parent_end))
        # Shut the workers down even if the simulator is never closed explicitly.
        self._finalizer = weakref.finalize(self, _ProcessPool._stop, self.workers)

    @property
    def size(self) -> int:
        return len(self.workers)

    def run(
        self, payload: bytes, tasks: list[_SliceTask], slices: list[tuple[int, int]], timeout_s: float | None
    ) -> list[dict[str, torch.Tensor]]:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for index, task in enumerate(tasks):
            process, connection = self.workers[index]
            try:
                connection.send_bytes(pickle.dumps((payload, task), protocol=pickle.HIGHEST_PROTOCOL))
            except (BrokenPipeError, ConnectionResetError, OSError):
                process.join(timeout=1.0)
                raise _WorkerCrash(
                    slices[index], f"worker {index} (pid {process.pid}) {_describe_exit(process.exitcode)}"
                ) from None
        results: list[dict[str, torch.Tensor] | None] = [None] * len(tasks)
        pending = set(range(len(tasks)))
        while pending:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            waitables = {}
            for index in pending:
                process, connection = self.workers[index]
                waitables[connection] = index
                waitables[process.sentinel] = index
            ready = wait_for_ready(list(waitables), timeout=remaining)
            if not ready:
                index = min(pending)
                raise _WorkerCrash(slices[index], f"no result from worker {index} within timeout_s={timeout_s} s")
            for handle in ready:
                index = waitables[handle]
                if index not in pending:
                    continue
                process, connection = self.workers[index]
                # A reply may be in the pipe even if the process has exited since.
                if connection.poll():
                    try:
                        status, value = pickle.loads(connection.recv_bytes())
                    except (EOFError, OSError):
                        process.join(timeout=1.0)
                        raise _WorkerCrash(
                            slices[index], f"worker {index} (pid {process.pid}) {_describe_exit(process.exitcode)}"
                        ) from None
                    if status == "error":
                        raise _WorkerException(slices[index], f"worker {index} raised:\n{value}")
                    results[index] = value
                    pending.discard(index)
                elif not process.is_alive():
                    process.join(timeout=1.0)
                    raise _WorkerCrash(
                        slices[index], f"worker {index} (pid {process.pid}) {_describe_exit(process.exitcode)}"
                    )
        return results  # type: ignore[return-value]

    @staticmethod
    def _stop(workers, grace_s: float = 0.5) -> None:
        for _, connection in workers:
            with contextlib.suppress(OSError, ValueError):  # the worker is gone already
                connection.send_bytes(b"")
        deadline = time.monotonic() + grace_s
        for process, connection in workers:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
            if process.is_alive():  # busy or hung: do not wait for it
                process.kill()
                process.join(timeout=1.0)
            connection.close()

    def close(self) -> None:
        self._finalizer()


# -- Ray backend ------------------------------------------------------------------------------


def _import_ray():
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ConfigError(
            "backend", "ray", "needs Ray: install the pglab[dist] extra (pip install 'pglab[dist]')"
        ) from exc
    return ray


def _ray_dumps():
    _import_ray()
    from ray import cloudpickle

    return cloudpickle.dumps


_RAY_TASK = None


def _ray_task(ray):
    """The remote version of :func:`_simulate_slice`, built once Ray is imported.

    ``max_retries=0``: the simulator retries the whole rollout itself, once, so that
    "retried once" means the same thing for both backends.
    """
    global _RAY_TASK
    if _RAY_TASK is None:
        _RAY_TASK = ray.remote(num_cpus=1, max_retries=0)(_simulate_slice)
    return _RAY_TASK


# -- the simulator ----------------------------------------------------------------------------


class ParallelTrajectorySimulator(TrajectorySimulator):
    """:class:`TrajectorySimulator` with the paths split across workers (no gradients).

    Args:
        model: the continuous-time model (pickled to the workers at every rollout, so
            reassigning ``simulator.model`` between rollouts is honoured).
        dt: time step. horizon: simulated time ``T`` (``T / dt`` steps, rounded).
        action_repeat: the policy decides every ``action_repeat`` steps (see
            :class:`TrajectorySimulator`); may be reassigned between rollouts.
        backend: ``"process"`` (a pool of local worker processes) or ``"ray"`` (Ray
            tasks, local or on a cluster).
        n_workers: number of slices (and of pool processes); ``None``: at every rollout
            ``min(os.cpu_count(), B // 10)``, at least 1. A rollout of ``B`` paths uses at
            most ``max(1, B // SLICE_ALIGN)`` slices.
        ray_address: address of an existing Ray cluster (e.g. ``"ray://head:10001"`` or
            ``"auto"``); ``None`` starts a local Ray instance unless Ray is already
            initialised in this process.

    Attributes:
        timeout_s: the longest a rollout may wait for its workers (seconds, ``None``: no
            limit); past it the workers are treated as dead.
        last_worker_cpu_s: CPU seconds each slice of the last rollout took in its worker
            (unpickling and simulation; a diagnostic: on a machine with a free core per
            worker, a rollout's wall time is about the largest of them plus the main
            process's share).

    Use it as a context manager or call :meth:`close` to stop the worker processes (a
    local Ray instance that it started is shut down too). Scripts that use the process
    backend need the usual ``if __name__ == "__main__":`` guard (workers re-import the
    main module).
    """

    timeout_s: float | None = 600.0

    def __init__(
        self,
        model: ContinuousTimeModel,
        dt: float,
        horizon: float,
        *,
        action_repeat: int = 1,
        backend: str = "process",
        n_workers: int | None = None,
        ray_address: str | None = None,
        absorption: str = "grid",
    ):
        # validates dt, T, action_repeat, absorption
        super().__init__(model, dt, horizon, action_repeat=action_repeat, absorption=absorption)
        check_choice("backend", backend, BACKENDS)
        if n_workers is not None:
            check_int("n_workers", n_workers, minimum=1)
        if ray_address is not None:
            if backend != "ray":
                raise ConfigError(
                    "ray_address", ray_address, f"only applies to backend='ray' (got backend={backend!r})"
                )
            if not isinstance(ray_address, str) or not ray_address:
                raise ConfigError(
                    "ray_address", ray_address, "must be a non-empty address such as 'ray://head:10001' or 'auto'"
                )
        self.backend = backend
        self.n_workers = n_workers
        self.ray_address = ray_address
        self._pool: _ProcessPool | None = None
        self._started_ray = False
        self.last_worker_cpu_s: list[float] = []

    # -- the TrajectorySimulator interface -----------------------------------------------

    def rollout(
        self,
        policy: SimulatorPolicy,
        initial_states: torch.Tensor,
        generator: torch.Generator | None = None,
        *,
        noise: RolloutNoise | None = None,
        deterministic: bool = False,
    ) -> Trajectories:
        """Simulate ``B = len(initial_states)`` paths for ``T / dt`` steps on the workers.

        Same arguments and result as :meth:`TrajectorySimulator.rollout` (``initial_states``
        float ``[B, S]``; the result's tensors are ``[B, T+1, S]``, ``[B, T, A]``,
        ``[B, T]``), on ``initial_states``' device. The policy must be picklable (an
        ``nn.Module`` whose class can be imported by the workers); it is copied to the
        CPU for the workers.

        Raises:
            RuntimeError: gradients are enabled and the policy has parameters that
                require them (wrap the call in ``torch.no_grad()``).
            SimulationWorkerError: a worker failed twice, or the simulation raised.
        """
        model = self.model
        model.check_batch(initial_states, where="ParallelTrajectorySimulator.rollout")
        if torch.is_grad_enabled() and (initial_states.requires_grad or _requires_grad(policy)):
            raise RuntimeError(
                "ParallelTrajectorySimulator.rollout: gradients cannot flow back from worker processes; "
                "call it under torch.no_grad() (Monte Carlo rollouts, evaluation) or use TrajectorySimulator "
                "for pathwise gradients"
            )
        num_paths = initial_states.shape[0]
        device, dtype = initial_states.device, initial_states.dtype
        if noise is None:
            noise = self.draw_noise(num_paths, generator, device=device, dtype=dtype)
        else:
            self._check_noise(noise, initial_states)

        slices = self.slices(num_paths)
        # Ray workers may run elsewhere: cloudpickle also ships classes defined in a script.
        dumps = _ray_dumps() if self.backend == "ray" else pickle.dumps
        payload = _pickle_model_and_policy(model, policy, dumps)
        tasks = [
            _SliceTask(
                dt=self.dt,
                horizon=self.horizon,
                action_repeat=self.action_repeat,
                deterministic=bool(deterministic),
                # .clone(): pickling a view would ship the whole underlying storage
                initial_states=initial_states[start:stop].detach().to("cpu").clone(),
                state_noise=noise.state_noise[start:stop].to("cpu").clone(),
                action_noise=noise.action_noise[start:stop].to("cpu").clone(),
                absorption=self.absorption,
                survival_noise=None
                if noise.survival_noise is None
                else noise.survival_noise[start:stop].to("cpu").clone(),
                jump_noise=None if noise.jump_noise is None else noise.jump_noise[start:stop].to("cpu").clone(),
            )
            for start, stop in slices
        ]
        parts = self._run_with_retry(payload, tasks, slices)
        self.last_worker_cpu_s = [part.pop("cpu_s") for part in parts]
        names = (*_TRAJECTORY_FIELDS, "euler_states") if "euler_states" in parts[0] else _TRAJECTORY_FIELDS
        fields = {name: torch.cat([part[name] for part in parts], dim=0).to(device) for name in names}
        return Trajectories(**fields, discount=self.discount, dt=self.dt, action_repeat=self.action_repeat)

    # -- work split ------------------------------------------------------------------------

    def resolve_workers(self, num_paths: int) -> int:
        """Workers for a rollout of ``num_paths`` paths (``n_workers`` or the default)."""
        if self.n_workers is not None:
            return self.n_workers
        return max(1, min(os.cpu_count() or 1, num_paths // 10))

    def slices(self, num_paths: int) -> list[tuple[int, int]]:
        """Contiguous ``(start, stop)`` path ranges, one per worker used: boundaries on
        multiples of :data:`SLICE_ALIGN`, the remainder in the last slice."""
        count = max(1, min(self.resolve_workers(num_paths), num_paths // SLICE_ALIGN))
        # k B / count rounded to the nearest multiple of SLICE_ALIGN; since
        # B / count >= SLICE_ALIGN the bounds strictly increase and stay below B.
        bounds = [SLICE_ALIGN * math.floor(k * num_paths / count / SLICE_ALIGN + 0.5) for k in range(count)]
        bounds.append(num_paths)
        return [(bounds[k], bounds[k + 1]) for k in range(count)]

    # -- dispatch, retry ----------------------------------------------------------------------

    def _run_with_retry(self, payload: bytes, tasks: list[_SliceTask], slices: list[tuple[int, int]]) -> list[dict]:
        run = self._run_process if self.backend == "process" else self._run_ray
        for attempt in (1, 2):
            try:
                return run(payload, tasks, slices)
            except _WorkerException as exc:
                self._discard_workers()  # the other workers' replies would be read by the next rollout
                raise SimulationWorkerError(self.backend, exc.paths, exc.cause) from None
            except _WorkerCrash as exc:
                self._discard_workers()
                if attempt == 2:
                    raise SimulationWorkerError(
                        self.backend, exc.paths, f"{exc.cause} (again after one retry on fresh workers)"
                    ) from None
            except BaseException:  # e.g. Ctrl-C mid-rollout: replies still in flight
                self._discard_workers()
                raise
        raise AssertionError("unreachable")

    def _run_process(self, payload: bytes, tasks: list[_SliceTask], slices: list[tuple[int, int]]) -> list[dict]:
        # A larger pool serves a smaller rollout (evaluation may use fewer paths than training).
        if self._pool is not None and self._pool.size < len(tasks):
            self._pool.close()
            self._pool = None
        if self._pool is None:
            self._pool = _ProcessPool(len(tasks))
        return self._pool.run(payload, tasks, slices, self.timeout_s)

    def _run_ray(self, payload: bytes, tasks: list[_SliceTask], slices: list[tuple[int, int]]) -> list[dict]:
        ray = self._ensure_ray()
        from ray import exceptions as ray_errors

        remote = _ray_task(ray)
        payload_ref = ray.put(payload)  # once per rollout, shared by all tasks
        refs = [remote.remote(payload_ref, task) for task in tasks]
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        results = []
        for index, ref in enumerate(refs):
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                results.append(ray.get(ref, timeout=remaining))
            except ray_errors.GetTimeoutError:
                self._cancel(ray, refs)
                raise _WorkerCrash(
                    slices[index], f"no result from Ray task {index} within timeout_s={self.timeout_s} s"
                ) from None
            except ray_errors.RayTaskError as exc:
                # The task's own code raised: deterministic, not retried.
                self._cancel(ray, refs)
                raise _WorkerException(slices[index], f"Ray task {index} raised:\n{exc}") from None
            except ray_errors.RayError as exc:  # worker crashed, node died, object lost
                self._cancel(ray, refs)
                raise _WorkerCrash(
                    slices[index],
                    f"Ray task {index} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                ) from None
        return results

    @staticmethod
    def _cancel(ray, refs) -> None:
        for ref in refs:
            with contextlib.suppress(Exception):  # already finished or gone
                ray.cancel(ref, force=True)

    def _ensure_ray(self):
        ray = _import_ray()
        if not ray.is_initialized():
            if self.ray_address is not None:
                ray.init(address=self.ray_address)
            else:
                # "local": a new instance even if RAY_ADDRESS or a running cluster is around
                ray.init(address="local", num_cpus=self.n_workers, include_dashboard=False, log_to_driver=False)
            self._started_ray = True
        return ray

    def _discard_workers(self) -> None:
        if self._pool is not None:
            self._pool.close()  # kills workers that are still busy or hung
            self._pool = None

    # -- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the worker processes (and a local Ray instance this simulator started)."""
        self._discard_workers()
        if self._started_ray:
            ray = _import_ray()
            if ray.is_initialized():
                ray.shutdown()
            self._started_ray = False

    def __repr__(self) -> str:
        return (
            f"ParallelTrajectorySimulator(backend={self.backend!r}, n_workers={self.n_workers}, dt={self.dt}, "
            f"horizon={self.horizon}, action_repeat={self.action_repeat})"
        )


def _requires_grad(policy: Any) -> bool:
    return isinstance(policy, nn.Module) and any(p.requires_grad for p in policy.parameters())


def _pickle_model_and_policy(model: ContinuousTimeModel, policy: Any, dumps=pickle.dumps) -> bytes:
    """``dumps((model, policy))`` with the policy's tensors on the CPU."""
    if isinstance(policy, nn.Module) and any(t.device.type != "cpu" for t in [*policy.parameters(), *policy.buffers()]):
        policy = copy.deepcopy(policy).to("cpu")
    try:
        return dumps((model, policy), protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise TypeError(
            "ParallelTrajectorySimulator: the model and the policy must be picklable (module-level classes the "
            f"workers can import; no lambdas or closures): {exc}"
        ) from exc

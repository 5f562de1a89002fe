"""The training shell: the one place that owns a run's lifecycle, for every trainer.

A trainer is *config -> build -> step (and evaluate)*; everything around it lives here::

    spec = TrainerSpec(system="ppo", config_class=PPOConfig, kinds=("ppo",), step_key="iteration",
                       resumable=frozenset({"total_steps", "eval_episodes"}),
                       total_steps=lambda c: c.num_iterations, budget_field="total_steps")

    with TrainingRun(spec, config, given=given) as run:      # resume, device, threads, seed
        config, device = run.config, run.device
        ...build env, networks, optimiser...                # a failure here leaves nothing
        run.track(models={"agent": net}, optimizers={"agent": optimizer},
                  rngs={"action": generator}, state={"env": env})   # restored here on a resume
        for iteration in run.steps(config.num_iterations):  # checkpoints of the tracked state
            ...one training step...
            run.log(iteration, metrics)                     # metrics.csv, metrics.jsonl, TensorBoard
        run.finish({"return/mean": ...})                    # summary.json
    return run.exit_code                                     # 0, or EXIT_INTERRUPTED after SIGINT/SIGTERM

What the shell guarantees:

- **Run directories.** A fresh run creates its directory and ``config.json`` on entry. If
  the start fails (an unknown env id, an impossible device, any exception before the first
  checkpoint), the directory it created is removed again. A directory with a
  ``config.json`` but no checkpoint yet (a run killed early) resumes from step 0.
- **Resume.** ``--resume DIR`` (a run directory, its ``checkpoints/`` folder or a
  checkpoint file) continues from the latest checkpoint. The flags the user *gave* (from
  the command line or the ``--config`` file, never "differs from the default") are
  applied when they are resumable: the budget, evaluation, logging, device, threads and
  the checkpoint cadence. Any other given flag whose value differs from the stored run's
  is refused with a :class:`ConfigError` naming it (exit 2).
- **State and checkpoints.** What :meth:`TrainingRun.track` registers is restored on a
  resume and saved in every checkpoint (see :mod:`pglab.run.state`); checkpoints are
  atomic and carry a SHA-256 digest (see :mod:`pglab.run.checkpoint`).
- **Metadata and speed.** The first line of ``metrics.jsonl`` describes the run; every row
  gets ``perf/step_s`` and ``perf/env_steps_per_s``; an exception leaves an ``error`` line.
- **One owner.** A run directory is locked (:class:`pglab.run.rundir.RunDirLock`) before
  anything is read for a resume or written for a fresh run; a second start or resume on a
  live run is refused, naming the process that holds it.
- **Stops** (:mod:`pglab.run.signals`). Inside the loop SIGINT/SIGTERM finish the current
  step, save a checkpoint and stop; anywhere else they stop at once, and a run without a
  checkpoint removes its directory. Either way the command exits with
  :data:`pglab.errors.EXIT_INTERRUPTED` (130).
- **OS errors** (a full disk, a read-only file system) end the run with one line naming the
  path and the cause; the last checkpoint is intact (every write is atomic).
- **Checkpoints kept.** The newest ``keep_checkpoints`` numbered checkpoints (the config
  field; ``0`` keeps all) plus ``checkpoint_latest.pt``.
- **summary.json** is written at the end of every run, finished or interrupted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pglab.errors import EXIT_INTERRUPTED, EXIT_OK, CheckpointError, ConfigError, FileSystemError, UsageError
from pglab.run.state import Stateful, StateRegistry

if TYPE_CHECKING:
    from pglab.run.checkpoint import CheckpointManager
    from pglab.run.logger import MetricsLogger
    from pglab.run.rundir import RunDirLock

# The shell's own metrics, in every trainer's rows (docs/DEVELOPING.md, "Metrics"):
PERF_STEP_SECONDS = "perf/step_s"  # wall-clock seconds per unit of the step column, since the previous row
PERF_ENV_STEPS_PER_S = "perf/env_steps_per_s"  # environment transitions (all copies) per wall-clock second

# Fields every trainer config has, and which a resume may always change.
SHELL_RESUMABLE = frozenset(
    {"log_dir", "resume", "device", "threads", "save_interval", "keep_checkpoints", "tensorboard"}
)


@dataclass(frozen=True)
class TrainerSpec:
    """What the shell needs to know about a trainer.

    Attributes:
        system: the trainer's name (``ppo``); default run directory ``runs/<system>-<YYYYmmdd-HHMMSS>``.
        config_class: its frozen config dataclass.
        kinds: checkpoint kinds it writes and can resume.
        kind_of: the kind of a given config (default: ``kinds[0]``).
        step_key: the counter a run is measured in (``iteration``, ``opt_steps``...).
        resumable: trainer fields a resume may change (the budget, evaluation and logging
            fields), besides :data:`SHELL_RESUMABLE`.
        total_steps: the config's budget in ``step_key`` units.
        budget_field: the field named when a resumed budget is below the checkpoint.
        keep: numbered checkpoints to keep when the config has no ``keep_checkpoints``
            field (``None``: all).
        unstored: config fields a checkpoint stores at their defaults (one-off switches
            such as a self-test, which a resume must not repeat).
        stored_defaults: values for fields a stored config (of a run made before the field
            existed) does not have, when they differ from today's defaults: a resumed old run
            keeps training the way it started (e.g. the critic loss it was using).
    """

    system: str
    config_class: type
    kinds: tuple[str, ...]
    step_key: str
    resumable: frozenset[str]
    total_steps: Callable[[Any], int]
    budget_field: str
    kind_of: Callable[[Any], str] | None = None
    unstored: tuple[str, ...] = ()
    keep: int | None = 3
    stored_defaults: Mapping[str, Any] | None = None

    def kind(self, config: Any) -> str:
        return self.kind_of(config) if self.kind_of is not None else self.kinds[0]


def _plain(value: Any) -> Any:
    from pglab.run.config import config_to_dict

    return config_to_dict(value)


def resolve_resume(
    spec: TrainerSpec, config: Any, given: frozenset[str] | None, echo: Callable[..., None] | None = None
) -> tuple[Any, dict[str, Any] | None, Path | None]:
    """Merge ``config`` into the stored config of the run it resumes.

    Args:
        spec: the trainer.
        config: the config built from defaults, ``--config`` and flags (``resume`` set).
        given: the fields the user set. ``None`` (the Python API) counts every field that
            differs from the class default as given.
        echo: if given, told (one line on stderr) which stored values the resume changes,
            e.g. a budget raised by a ``--config`` file's ``total_steps``.

    Returns:
        ``(config, checkpoint or None, run directory)``; for a fresh run
        ``(config, None, None)``.
    """
    from pglab.run.config import config_from_dict
    from pglab.run.rundir import find_run_dir, read_run_config

    if config.resume is None:
        return config, None, None
    run_dir = find_run_dir(config.resume)
    stored_payload = read_run_config(run_dir)
    if stored_payload.get("kind") not in spec.kinds:
        raise CheckpointError(
            f"resume: holds a {stored_payload.get('kind')!r} run, "
            f"not one of {', '.join(spec.kinds)} (pglab train {spec.system}) (got {str(config.resume)!r})"
        )
    checkpoint = _resume_checkpoint(spec, Path(config.resume), run_dir)
    stored_fields = checkpoint["config"] if checkpoint is not None else stored_payload.get("config")
    if not isinstance(stored_fields, dict):
        raise CheckpointError(f"run directory {run_dir}: config.json holds no config mapping")
    stored: Any = config_from_dict(
        spec.config_class, {**(spec.stored_defaults or {}), **stored_fields, "resume": None, "log_dir": None}
    )
    if (
        given is not None
        and "log_dir" in given
        and config.log_dir is not None
        and Path(config.log_dir).resolve() != run_dir.resolve()
    ):
        # on the command line a --log-dir beside --resume was silently ignored; the run
        # continues in its own directory, so say so (the Python API keeps ignoring a
        # log_dir left in a reused config)
        raise ConfigError(
            "log_dir",
            str(config.log_dir),
            f"a resumed run continues in its own directory {run_dir}; drop --log-dir or give that directory",
        )
    if given is None:
        given = frozenset(_differing_paths(config, spec.config_class()))
    merged, described = _apply_given(spec, config, stored, given)
    done = int(checkpoint["counters"].get(spec.step_key, 0)) if checkpoint is not None else 0
    if spec.total_steps(merged) < done:
        raise ConfigError(
            spec.budget_field,
            getattr(merged, spec.budget_field),
            f"the resumed run has already done {spec.step_key} {done}; this budget ends at {spec.step_key} "
            f"{spec.total_steps(merged)}",
        )
    if echo is not None and described:  # only once the resume is accepted
        echo(f"resume: continuing {run_dir} with {described}", file=sys.stderr)
    return dataclasses.replace(merged, resume=run_dir, log_dir=run_dir), checkpoint, run_dir


def _resume_checkpoint(spec: TrainerSpec, named: Path, run_dir: Path) -> dict[str, Any] | None:
    """The checkpoint a resume continues from: the run's latest (``None``: killed before
    its first); a checkpoint file given by name must be that latest one."""
    from pglab.run.checkpoint import LATEST_NAME, load_checkpoint_file

    latest = run_dir / "checkpoints" / LATEST_NAME
    checkpoint = load_checkpoint_file(latest, kinds=spec.kinds) if latest.exists() else None
    if named.is_file() and named.suffix == ".pt" and not (latest.exists() and named.resolve() == latest.resolve()):
        # a checkpoint file given by name: the run continues from its latest checkpoint only
        # (its metrics and later checkpoints follow the latest); say so rather than
        # silently continuing from another file
        chosen = load_checkpoint_file(named, kinds=spec.kinds)
        done_named = int(chosen["counters"].get(spec.step_key, 0))
        if checkpoint is None:
            return chosen
        done_latest = int(checkpoint["counters"].get(spec.step_key, 0))
        if done_named != done_latest:
            raise ConfigError(
                "resume",
                str(named),
                f"is {spec.step_key} {done_named}, not the run's latest checkpoint ({spec.step_key} "
                f"{done_latest}, {latest}); a run continues from its latest checkpoint: give the run directory, "
                f"or copy the run and make that file its checkpoints/{LATEST_NAME} to branch from it",
            )
    return checkpoint


def _apply_given(spec: TrainerSpec, config: Any, stored: Any, given: frozenset[str]) -> tuple[Any, str]:
    """``stored`` with the given fields of ``config`` that differ from it: resumable ones
    applied (and described, ``"steps 3 -> 5"``), any other refused with a
    :class:`ConfigError` naming it."""
    from pglab.run.config import unprefixed_fields

    allowed = SHELL_RESUMABLE | spec.resumable
    plain_names = {dotted: leaf for leaf, dotted in unprefixed_fields(spec.config_class).items()}
    changes: dict[str, Any] = {}
    for name in sorted(given - {"resume", "log_dir"}):
        new, old = _get_dotted(config, name), _get_dotted(stored, name)
        if _plain(new) == _plain(old):
            continue
        if name not in allowed and name.partition(".")[0] not in allowed:
            name, new, old = _first_difference(name, new, old)
            raise ConfigError(
                plain_names.get(name, name),  # as on the command line: sigma, not params.sigma
                new,
                f"differs from the resumed run's value {old!r}; a resume may change only "
                f"{', '.join(sorted(allowed - {'resume', 'log_dir'}))}",
            )
        changes[name] = new
    described = ", ".join(
        f"{plain_names.get(name, name)} {_plain(_get_dotted(stored, name))!r} -> {_plain(new)!r}"
        for name, new in sorted(changes.items())
    )
    # resume=None: the merged config passes every check a fresh run would (cross-field ones too).
    return _replace_dotted(stored, changes), described


def _get_dotted(config: Any, name: str) -> Any:
    for part in name.split("."):
        config = getattr(config, part)
    return config


def _replace_dotted(config: Any, changes: dict[str, Any]) -> Any:
    """``dataclasses.replace`` for dotted names (``{"params.sigma": 0.3}``)."""
    top: dict[str, Any] = {name: value for name, value in changes.items() if "." not in name}
    nested: dict[str, dict[str, Any]] = {}
    for name, value in changes.items():
        if "." in name:
            head, _, rest = name.partition(".")
            nested.setdefault(head, {})[rest] = value
    for head, inner in nested.items():
        top[head] = _replace_dotted(getattr(config, head), inner)
    return dataclasses.replace(config, **top)


def _differing_paths(current: Any, defaults: Any, prefix: str = "") -> set[str]:
    """Dotted names of the fields of config ``current`` that differ from ``defaults``
    (a nested config's fields one by one)."""
    paths: set[str] = set()
    for field in dataclasses.fields(current):
        value, default = getattr(current, field.name), getattr(defaults, field.name)
        if dataclasses.is_dataclass(value) and type(value) is type(default):
            paths |= _differing_paths(value, default, prefix=f"{prefix}{field.name}.")
        elif _plain(value) != _plain(default):
            paths.add(prefix + field.name)
    return paths


def _first_difference(name: str, new: Any, old: Any) -> tuple[str, Any, Any]:
    """For a nested config, the first field that differs, dotted (``params.sigma``)."""
    if not (dataclasses.is_dataclass(new) and dataclasses.is_dataclass(old)):
        return name, new, old
    for inner in dataclasses.fields(new):
        new_value, old_value = getattr(new, inner.name), getattr(old, inner.name)
        if _plain(new_value) != _plain(old_value):
            return _first_difference(f"{name}.{inner.name}", new_value, old_value)
    return name, new, old


def _check_log_dir(config: Any) -> None:
    log_dir = getattr(config, "log_dir", None)
    if log_dir is not None and str(log_dir).strip() in ("", "."):
        raise ConfigError("log_dir", str(log_dir), "must name a run directory (the current directory is not one)")


class TrainingRun:
    """The lifecycle of one training run; see the module docstring.

    Args:
        spec: the trainer.
        config: its config (``resume`` may be set).
        given: the fields set by the user (see :func:`resolve_resume`).
        echo: where messages for the user go (``print``-like).
        stop_after: behave as if SIGTERM arrived after this many steps of this process
            (the test hook for exact resume).
    """

    def __init__(
        self,
        spec: TrainerSpec,
        config: Any,
        *,
        given: frozenset[str] | None = None,
        echo: Callable[..., None] = print,
        stop_after: int | None = None,
    ):
        from pglab.run.rundir import RunDirLock, default_run_dir, find_run_dir

        _check_log_dir(config)
        self.spec = spec
        self.echo = echo
        self.stop_after = stop_after
        # A resume locks its directory before it reads the checkpoint it continues from.
        self._lock: RunDirLock | None = None
        if config.resume is not None:
            self._lock = RunDirLock(find_run_dir(config.resume)).acquire()
        try:
            existing = self._resolve(config, given)
        except BaseException:
            self._release_lock()
            raise
        self.resumed = existing is not None
        self.kind = spec.kind(self.config)
        self.run_dir: Path = existing or Path(self.config.log_dir or default_run_dir(spec.system))
        self.counters: dict[str, Any] = {spec.step_key: 0, "wall_time": 0.0}
        if self.checkpoint is not None:
            self.counters.update(self.checkpoint["counters"])
        self.start = int(self.counters[spec.step_key])
        if self.resumed and self.checkpoint is None:  # killed before its first checkpoint, or its checkpoints removed
            echo(f"resume: {self.run_dir} holds no checkpoint; training starts again from step 0", file=sys.stderr)
        elif self.resumed:  # one line whatever the progress setting (a hidden bar does not show where)
            env_steps = self.counters.get("env_steps")
            at = f" (env_steps {int(env_steps)})" if env_steps is not None else ""
            echo(f"resumed {self.run_dir} at {spec.step_key} {self.start}{at}", file=sys.stderr)
        self.interrupted = False
        self.bar: Any = None  # the progress bar while steps() runs
        self._logger: MetricsLogger | None = None
        self._manager: CheckpointManager | None = None
        self._created: list[Path] = []
        self._saved = False
        self._installed_signals = False
        self._last_saved: int | None = self.start if self.checkpoint is not None else None
        self._steps_this_process = 0
        self._clock = time.perf_counter()
        self.registry: StateRegistry | None = None
        self._perf_mark: tuple[float, int, float] | None = None  # (time, step, env_steps) of the last row
        self._step_start: float | None = None  # when the step now running began

    def _resolve(self, config: Any, given: frozenset[str] | None) -> Path | None:
        """The config (merged with the resumed run's), the checkpoint, the device and threads
        (an impossible device fails here, before anything is written); returns the resumed
        run's directory (``None``: a fresh run)."""
        from pglab.run.device import resolve_device

        self.config, self.checkpoint, existing = resolve_resume(self.spec, config, given, self.echo)
        self.device = resolve_device(self.config.device)
        self._apply_threads()
        return existing

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _apply_threads(self) -> None:
        import torch

        threads = int(getattr(self.config, "threads", 0) or 0)
        if threads > 0:
            torch.set_num_threads(threads)

    # -- lifecycle ---------------------------------------------------------------------
    def __enter__(self) -> TrainingRun:
        from pglab.run.signals import STOP

        self._installed_signals = STOP.install()  # the pglab command installed it already
        STOP.clear()
        try:
            self._open()
        except BaseException as exc:
            replacement = self._close(exc)
            if replacement is not None:
                raise replacement from exc
            raise
        return self

    def _open(self) -> None:
        """Create (fresh) or reopen (resume) the run directory, its logs and checkpoints."""
        from pglab.run.checkpoint import CheckpointManager
        from pglab.run.logger import MetricsLogger
        from pglab.run.seeding import seed_everything

        if not self.resumed:
            self._create_run_dir()
        seed_everything(self.config.seed)
        self._logger = MetricsLogger(
            self.run_dir,
            step_key=self.spec.step_key,
            csv_name="metrics.csv",
            jsonl_name="metrics.jsonl",
            tensorboard_dir="tensorboard" if getattr(self.config, "tensorboard", True) else None,
            resume_step=self.start if self.resumed else None,
        )
        keep = getattr(self.config, "keep_checkpoints", self.spec.keep)
        self._manager = CheckpointManager(self.run_dir / "checkpoints", keep=keep or None)

    def _create_run_dir(self) -> None:
        """A fresh run's directory, locked, with its ``config.json``. The outermost directory
        this run creates is remembered, to be removed again if the start fails."""
        from pglab.run.config import config_to_dict
        from pglab.run.rundir import CONFIG_NAME, RunDirLock, write_run_config

        def already_holds_a_run() -> ConfigError:
            return ConfigError(
                "log_dir",
                str(self.run_dir),
                f"already holds a run; continue it with --resume {self.run_dir} or choose another --log-dir",
            )

        if (self.run_dir / CONFIG_NAME).exists():
            raise already_holds_a_run()
        missing = [p for p in (self.run_dir, *self.run_dir.parents) if not p.exists()]
        self._created = [missing[-1]] if missing else []
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # a file in the way, no permission, a name too long, a read-only file system
            raise ConfigError("log_dir", str(self.run_dir), f"cannot be created: {error.strerror or error}") from error
        try:
            self._lock = RunDirLock(self.run_dir).acquire()
        except UsageError:
            self._created = []  # another process owns the directory: none of it is this run's
            raise
        if (self.run_dir / CONFIG_NAME).exists():  # a run started there while this one was starting
            self._created = []
            raise already_holds_a_run()
        write_run_config(self.run_dir, config_to_dict(dataclasses.replace(self.config, resume=None)), kind=self.kind)

    def __exit__(self, exc_type, exc, tb) -> None:
        replacement = self._close(exc)
        if replacement is not None:
            raise replacement from exc

    def _close(self, exc: BaseException | None) -> BaseException | None:
        """Close the run after ``exc`` (``None``: it ended normally). A failed start removes
        what it created; a stop (:class:`pglab.run.signals.Stopped`) gets its note; an OS
        error becomes a one-line :class:`FileSystemError`, which this returns."""
        from pglab.run.signals import STOP, Stopped, stop_in

        kept = self.resumed or self._saved
        stop = stop_in(exc)
        with contextlib.suppress(Exception):
            if self.bar is not None:
                self.bar.close()
        if self._logger is not None:
            with contextlib.suppress(OSError):  # a full disk must not hide the error that ended the run
                if isinstance(exc, Exception) and stop is None:  # the last line of metrics.jsonl says why
                    self._logger.write_record(
                        {"error": {"type": type(exc).__name__, "message": str(exc), **dict(self.counters)}}
                    )
                self._logger.close()
        if exc is not None and not kept:
            self._remove_failed_start()
        elif stop is not None and self._logger is not None:
            self.interrupted = True
            with contextlib.suppress(OSError):
                self.finish()
        self._release_lock()
        if self._installed_signals:
            STOP.uninstall()
        if isinstance(stop, Stopped):
            stop.note = self._kept_note(kept)
        if isinstance(exc, OSError) and not isinstance(exc, BrokenPipeError):
            return FileSystemError.of(exc, kept=self._kept_note(kept))
        return None

    def _kept_note(self, kept: bool) -> str:
        """What a run that ends now leaves: where ``--resume`` continues, or nothing."""
        if not kept:
            return f"nothing was kept ({self.run_dir} holds no checkpoint, so it was removed)"
        if self._last_saved is None:
            return f"{self.run_dir} holds no checkpoint yet; --resume {self.run_dir} starts from step 0"
        return (
            f"the checkpoint of {self.spec.step_key} {self._last_saved} is intact; "
            f"continue with --resume {self.run_dir}"
        )

    def _remove_failed_start(self) -> None:
        """A failed start: nothing of this run may stay behind to block a retry."""
        for path in self._created:
            shutil.rmtree(path, ignore_errors=True)
        if not self._created:
            self._remove_own_files()

    def _remove_own_files(self) -> None:
        """The run directory existed before (e.g. empty): remove only what this run wrote."""
        from pglab.run.atomic import remove_stale_temporaries

        if self._lock is None:  # the directory is another process's
            return
        for name in ("config.json", "metrics.csv", "metrics.jsonl", "eval.csv", "eval.jsonl", "summary.json", ".lock"):
            (self.run_dir / name).unlink(missing_ok=True)
        remove_stale_temporaries(self.run_dir)
        for name in ("checkpoints", "tensorboard", "plots"):
            shutil.rmtree(self.run_dir / name, ignore_errors=True)

    @property
    def logger(self) -> MetricsLogger:
        """The run's metrics logger (exists inside the ``with`` block)."""
        if self._logger is None:
            raise RuntimeError("logger: the run has not been entered (use it as a context manager)")
        return self._logger

    # -- the run's state ---------------------------------------------------------------
    def track(
        self,
        *,
        models: Mapping[str, Any] | None = None,
        optimizers: Mapping[str, Stateful] | None = None,
        rngs: Mapping[str, Any] | None = None,
        state: Mapping[str, Stateful] | None = None,
        meta: Mapping[str, Any] | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> None:
        """Register the run's stateful objects, once, when they are built (see
        :mod:`pglab.run.state`); a resumed run restores them here. The shell then writes
        every checkpoint from them, and the first line of ``metrics.jsonl``: the kind,
        config, library versions, device, parameter count, ``meta`` and ``info`` (facts
        for the log only)."""
        from pglab.run.checkpoint import library_versions
        from pglab.run.config import config_to_dict

        if self.registry is not None:
            raise RuntimeError("track: a run registers its state once")
        self.registry = StateRegistry()
        self.registry.add(models=models, optimizers=optimizers, rngs=rngs, state=state, meta=meta)
        if self.checkpoint is not None:
            self.registry.restore(self.checkpoint)
        self._perf_mark = (time.perf_counter(), self.start, float(self.counters.get("env_steps", 0)))
        params = sum(p.numel() for module in self.registry.models.values() for p in module.parameters())
        self.logger.write_meta(
            {
                "kind": self.kind,
                "step_key": self.spec.step_key,
                "config": config_to_dict(self.stored_config()),
                "versions": library_versions(),
                "device": str(self.device),
                "num_params": params,
                **dict(meta or {}),
                **dict(info or {}),
            }
        )

    def stored_config(self) -> Any:
        """The config a checkpoint stores: without ``resume`` and the spec's
        ``unstored`` fields (reset to their defaults)."""
        defaults = self.spec.config_class()
        reset = {name: getattr(defaults, name) for name in self.spec.unstored}
        return dataclasses.replace(self.config, resume=None, **reset)

    def build_checkpoint(self) -> dict[str, Any]:
        """The checkpoint of everything :meth:`track` registered, now."""
        from pglab.run.checkpoint import build_checkpoint
        from pglab.run.config import config_to_dict

        if self.registry is None:
            raise RuntimeError("build_checkpoint: the trainer registered no state (TrainingRun.track)")
        return build_checkpoint(
            kind=self.kind,
            config=config_to_dict(self.stored_config()),
            counters=dict(self.counters),
            **self.registry.capture(),
        )

    def save_copy(self, name: str, step: int) -> Path:
        """A named checkpoint beside the numbered ones (``checkpoints/<name>``, e.g. the best
        model so far), of the tracked state as it is inside step ``step``; the run's latest
        checkpoint is untouched."""
        from pglab.run.checkpoint import save_checkpoint

        checkpoint = self.build_checkpoint()
        checkpoint["counters"][self.spec.step_key] = step
        return save_checkpoint(self.run_dir / "checkpoints" / name, checkpoint)

    # -- the loop ----------------------------------------------------------------------
    @property
    def stop_requested(self) -> bool:
        """SIGINT/SIGTERM arrived, or the ``stop_after`` test hook fired."""
        hook = self.stop_after is not None and self._steps_this_process >= self.stop_after
        from pglab.run.signals import STOP

        return STOP.requested or hook

    def request_stop(self) -> None:
        """Stop after the current step, as if SIGTERM had arrived (e.g. another DDP rank
        was signalled)."""
        self.stop_after = self._steps_this_process

    def steps(
        self,
        total: int,
        *,
        desc: str | None = None,
        unit: str = "iter",
    ) -> Iterator[int]:
        """Yield the step numbers ``start + 1 .. total``.

        After each step (when control comes back to the loop) the shell updates the
        progress bar and ``counters[step_key]``, saves a checkpoint of the tracked state
        every ``save_interval`` steps, at the last step and on a stop request, and ends
        the loop after a stop. Inside the loop a signal waits for the end of the step
        (:meth:`pglab.run.signals.StopSignals.deferred`); one that arrived during the last
        step raises :class:`pglab.run.signals.Stopped` once its checkpoint is saved, so a
        final evaluation does not hold up the exit (``--resume`` runs it).
        """
        from pglab.run.progress import progress_bar
        from pglab.run.signals import STOP, Stopped

        self.bar = progress_bar(total, desc=desc or f"train {self.spec.system}", initial=self.start, unit=unit)
        self._perf_mark = (time.perf_counter(), self.start, float(self.counters.get("env_steps", 0)))
        with STOP.deferred():
            yield from self._loop(total)
        if STOP.requested and not self.interrupted:
            raise Stopped(STOP.signal)

    def _loop(self, total: int) -> Iterator[int]:
        try:
            for step in range(self.start + 1, total + 1):
                tick = self._step_start = time.perf_counter()
                yield step
                self.counters[self.spec.step_key] = step
                self.counters["wall_time"] = float(self.counters.get("wall_time", 0.0)) + time.perf_counter() - tick
                self._step_start = None
                self._steps_this_process += 1
                self.bar.update(1)
                last = step == total
                stop_now = self.stop_requested
                if step % self.config.save_interval == 0 or last or stop_now:
                    self.save(step, self.build_checkpoint())
                if stop_now and not last:
                    self.interrupted = True
                    self.echo(
                        f"stopped: checkpoint saved at {self.spec.step_key} {step} in {self.run_dir}; "
                        f"continue with --resume {self.run_dir}",
                        file=sys.stderr,
                    )
                    return
        finally:
            self.bar.close()

    def save(self, step: int, checkpoint: dict[str, Any]) -> Path:
        """Write a checkpoint (from :func:`pglab.run.checkpoint.build_checkpoint`)."""
        if self._manager is None:
            raise RuntimeError("save: the run has not been entered (use it as a context manager)")
        path = self._manager.save(step, checkpoint)
        self._saved = True
        self._last_saved = step
        return path

    def log(self, step: int, metrics: Mapping[str, Any]) -> dict[str, float]:
        """One row of ``metrics.csv`` / ``metrics.jsonl`` / TensorBoard, with the shell's
        ``perf/*`` metrics of the interval since the previous row added."""
        return self.logger.log(step, {**metrics, **self._perf(step)})

    @property
    def elapsed(self) -> float:
        """Seconds spent in steps so far (the ``wall_time`` counter), the running step's
        time included: what a trainer stamps on an evaluation taken inside a step."""
        running = time.perf_counter() - self._step_start if self._step_start is not None else 0.0
        return float(self.counters.get("wall_time", 0.0)) + running

    def _perf(self, step: int) -> dict[str, float]:
        """``perf/step_s`` and (for a trainer that counts ``env_steps``) ``perf/env_steps_per_s``:
        wall-clock rates over the rows' interval, including logging and checkpoints."""
        now = time.perf_counter()
        env_steps = float(self.counters.get("env_steps", 0))
        if self._perf_mark is None:
            self._perf_mark = (self._clock, self.start, env_steps)
        then, then_step, then_env_steps = self._perf_mark
        self._perf_mark = (now, step, env_steps)
        elapsed = max(now - then, 1e-9)
        perf = {PERF_STEP_SECONDS: elapsed / max(step - then_step, 1)}
        if "env_steps" in self.counters:
            perf[PERF_ENV_STEPS_PER_S] = (env_steps - then_env_steps) / elapsed
        return perf

    def set_postfix(self, **values: Any) -> None:
        if self.bar is not None:
            self.bar.set_postfix(**values)

    def finish(self, summary: Mapping[str, Any] | None = None) -> Path:
        """Write ``summary.json``: the run's status, counters and ``summary``."""
        from pglab.run.atomic import atomic_write_json

        payload = {
            "kind": self.kind,
            "run_dir": str(self.run_dir),
            "status": "interrupted" if self.interrupted else "completed",
            "counters": dict(self.counters),
            "process_seconds": time.perf_counter() - self._clock,
            **dict(summary or {}),
        }
        return atomic_write_json(self.run_dir / "summary.json", payload)

    @property
    def exit_code(self) -> int:
        """0 for a finished run, :data:`EXIT_INTERRUPTED` after a stop request."""
        return EXIT_INTERRUPTED if self.interrupted else EXIT_OK

"""Gymnasium vector environments (and ALE's C++ vector env) as pglab batched envs.

``make_gym_env("CartPole-v1", num_envs=8)`` builds a ``gymnasium`` vector env in
``SAME_STEP`` autoreset mode: with ``vectorization="vector"`` (or ``"auto"``, where one
exists) an implementation that steps all copies as array operations
(:class:`SameStepCartPoleVectorEnv` for CartPole; :mod:`pglab.envs.mujoco_vector` for
``Swimmer-v4``, ``HalfCheetah-v4``, ``InvertedPendulum-v4`` and
``InvertedDoublePendulum-v4``, equal to gymnasium's step for step),
otherwise gymnasium's ``SyncVectorEnv``/``AsyncVectorEnv`` of single copies;
``make_gym_env("ALE/Pong-v5", ...)`` (or ``"ale:pong"``) builds
:class:`pglab.envs.atari.AtariEnv`: ALE's C++ vector env with the standard Atari
preprocessing (stacked 84x84 greyscale frames ``uint8 [N, 4, 84, 84]``, episodic life,
reward clipping, the game score in ``info``). Gymnasium envs are wrapped in
:class:`GymVectorAdapter`, which converts NumPy to torch tensors on the chosen device.

MinAtar: ``make_gym_env("MinAtar/Breakout-v1", ...)`` registers the ``minatar`` package's
Gymnasium ids (``minatar.gym.register_envs()``) and returns its boards channel-first,
bool ``[N, C, 10, 10]``, as pglab's native MinAtar games do.

Time feature (``time_feature=True``, stream-AC's input for vector observations, as the
``AddTimeInfo`` wrapper of Elsayed et al.'s code): vector observations of an environment
with a time limit ``T`` get one more element, ``-0.5 + max(k - 1, 0) / T`` after the
``k``-th step of an episode (``-0.5`` after a reset); other observations are unchanged.

Checkpoints: :meth:`GymVectorAdapter.state_dict` captures the simulation state held in
plain attributes (NumPy arrays, numbers, strings, ``None``, ``np.random.Generator``) of the
vector env and of each copy's chain of wrappers: the whole state of Gymnasium's classic
control and toy text envs, so a run resumed from it continues bit for bit. It captures
nothing (``None``) where the state lives elsewhere: in an ``AsyncVectorEnv``'s worker
processes, or in a physics engine's C objects (Box2D, MuJoCo, PyBullet), except for
:mod:`pglab.envs.mujoco_vector`'s envs, which snapshot their MuJoCo state themselves.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from pglab.contracts import check_tensor
from pglab.envs.atari import AtariEnv, make_atari_env
from pglab.envs.atari import ale_game as _ale_game
from pglab.envs.base import ActionSpec, StepResult
from pglab.envs.wrappers import load_wrappers
from pglab.errors import CheckpointError, ConfigError

_TORCH_DTYPES = {
    np.dtype(np.bool_): torch.bool,  # MinAtar's boards
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float32,  # gymnasium's float64 boxes -> float32 for the nets
    np.dtype(np.int64): torch.int64,
    np.dtype(np.int32): torch.int32,
}

# the NumPy dtype of a torch dtype the adapter returns (for the zero-copy fast path)
_NUMPY_DTYPES = {
    torch.float32: np.dtype(np.float32),
    torch.bool: np.dtype(np.bool_),
    torch.uint8: np.dtype(np.uint8),
    torch.int64: np.dtype(np.int64),
}


def _to_tensor(array: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """NumPy (or a list) -> torch tensor of ``dtype`` on ``device``, sharing memory where
    it can, as ``torch.as_tensor`` does. ``torch.from_numpy`` costs ~2 us against ~5-10 us
    for ``torch.as_tensor(..., dtype=, device=)``; with four conversions per step that is
    a sixth of a 4-copy CartPole step. Read-only or non-native-byte-order arrays, which
    torch cannot wrap, are copied first."""
    target = _NUMPY_DTYPES.get(dtype)
    if type(array) is np.ndarray and array.dtype == target and array.flags.writeable and device.type == "cpu":
        return torch.from_numpy(array)  # the usual case on the CPU: ~0.5 us
    if target is not None and type(array) is np.ndarray and array.dtype.kind in "fb" and device.type == "cpu":
        # float64 rewards -> float32: NumPy's cast and a wrap (~1 us) beat a torch .to() (~2 us)
        return torch.from_numpy(array.astype(target))
    array = np.asarray(array)
    if not (array.dtype.isnative and array.flags.writeable):
        array = array.astype(array.dtype.newbyteorder("="), copy=True)
    tensor = torch.from_numpy(array)
    if tensor.dtype == dtype and tensor.device == device:
        return tensor
    return tensor.to(device=device, dtype=dtype)


def _as_array(values: Any, dtype: type) -> np.ndarray:
    """``values`` as a NumPy array of ``dtype`` (no copy when it already is one)."""
    if type(values) is np.ndarray and values.dtype == dtype:
        return values
    return np.asarray(values).astype(dtype)


# -- checkpoints ---------------------------------------------------------------------------
# Attributes that are configuration, rendering or links between layers, not simulation state.
_NOT_STATE = frozenset(
    {
        "env",
        "envs",
        "env_fns",
        "spec",
        "_saved_kwargs",
        "metadata",
        "_metadata",
        "render_mode",
        "_cached_spec",
        "action_space",
        "observation_space",
        "_action_space",
        "_observation_space",
        "single_action_space",
        "single_observation_space",
        "screen",
        "clock",
        "autoreset_mode",
    }
)
# Physics engines whose state lives in C objects, not in plain attributes: an env holding
# one cannot be captured, and restoring its other attributes onto a fresh world would mix
# two states.
_OPAQUE_SIMULATORS = ("Box2D", "mujoco", "pybullet", "minatar")


def _is_opaque_simulator(value: Any) -> bool:
    return type(value).__module__.split(".")[0] in _OPAQUE_SIMULATORS


def _storable(value: Any) -> dict[str, Any] | None:
    """A ``weights_only``-loadable copy of one attribute value, or ``None`` for a value
    that is not simulation state the adapter knows how to store (lists, dicts, objects)."""
    # NumPy scalars first: np.float64 is also a Python float, but pickles as a NumPy object
    # that a weights_only load refuses (LunarLander's prev_shaping).
    if isinstance(value, np.generic) and not isinstance(value, np.object_):
        return {"ndarray": torch.from_numpy(np.asarray(value).copy()), "dtype": str(value.dtype), "scalar": True}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"py": value}
    if isinstance(value, np.ndarray) and value.dtype != object:
        return {"ndarray": torch.from_numpy(value.copy()), "dtype": str(value.dtype)}
    if isinstance(value, np.random.Generator):
        return {"np_generator": value.bit_generator.state}
    return None


def _restored(stored: dict[str, Any], current: Any) -> Any:
    """The attribute value :func:`_storable` stored (a generator is restored in place)."""
    if "py" in stored:
        return stored["py"]
    if "ndarray" in stored:
        array = stored["ndarray"].numpy().astype(stored["dtype"], copy=True)
        return array[()] if stored.get("scalar") else array
    state = stored["np_generator"]
    generator = (
        current
        if isinstance(current, np.random.Generator)
        else np.random.Generator(getattr(np.random, state["bit_generator"])())
    )
    generator.bit_generator.state = state
    return generator


def _action_spec(space: Any) -> ActionSpec:
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        if int(space.start) != 0:
            raise ConfigError("env", str(space), "Discrete action spaces must start at 0")
        return ActionSpec(kind="discrete", num_actions=int(space.n), dtype=torch.int64)
    if isinstance(space, spaces.Box) and np.issubdtype(space.dtype, np.floating):
        return ActionSpec(
            kind="continuous",
            shape=tuple(int(s) for s in space.shape),
            low=tuple(float(v) for v in np.asarray(space.low).ravel()),
            high=tuple(float(v) for v in np.asarray(space.high).ravel()),
            dtype=torch.float32,
        )
    raise ConfigError(
        "env", f"action space {space}", "unsupported: pglab's trainers handle Discrete and float Box action spaces"
    )


class GymVectorAdapter:
    """Wrap a Gymnasium ``VectorEnv`` whose autoreset mode is ``SAME_STEP``.

    Observations come back as tensors of ``observation_dtype`` (uint8 pixels stay uint8,
    bool boards bool; float observations become float32). ``info["final_obs"]`` is a
    dense tensor: the pre-reset observation where ``done | trunc``, the current observation
    elsewhere. ``channel_first`` turns ``[H, W, C]`` observations into ``[C, H, W]``;
    ``time_limit`` (the episodes' step limit ``T``) appends the module docstring's time
    feature to vector observations (``time_feature`` says whether it does).
    """

    def __init__(
        self,
        env: Any,
        *,
        device: torch.device | str = "cpu",
        channel_first: bool = False,
        time_limit: int | None = None,
    ):
        self.env = env
        self.device = torch.device(device)
        self.num_envs = int(env.num_envs)
        obs_space = env.single_observation_space
        from gymnasium import spaces

        # a Box of a dtype the nets take (not, e.g., FrozenLake's Discrete states)
        if not isinstance(obs_space, spaces.Box) or np.dtype(obs_space.dtype) not in _TORCH_DTYPES:
            raise ConfigError("env", str(obs_space), "unsupported observation space: need a Box of numbers")
        shape = tuple(int(s) for s in obs_space.shape)
        self.channel_first = channel_first and len(shape) == 3
        self.time_feature = time_limit is not None and len(shape) == 1
        self.time_limit = time_limit
        self.observation_shape = (shape[2], shape[0], shape[1]) if self.channel_first else shape
        self.observation_dtype = _TORCH_DTYPES[np.dtype(obs_space.dtype)]
        if self.time_feature:
            self.observation_shape = (shape[0] + 1,)
            self.observation_dtype = torch.float32
        self.action_spec = _action_spec(env.single_action_space)
        # the actions' contract (shape, dtypes), checked every step: built once
        if self.action_spec.kind == "discrete":
            self._action_contract: tuple[tuple[int, ...], tuple[torch.dtype, ...]] = (
                (self.num_envs,),
                (torch.int32, torch.int64),
            )
        else:
            self._action_contract = ((self.num_envs, *self.action_spec.shape), (torch.float32, torch.float64))
        self.episode_steps = np.zeros(self.num_envs, dtype=np.int64)  # steps of each copy's episode

    def _obs(self, array: np.ndarray, steps: np.ndarray) -> torch.Tensor:
        """A batch of observations as a tensor; ``steps``: each row's steps into its episode."""
        return _to_tensor(self._obs_array(array, steps), self.observation_dtype, self.device)

    def _obs_array(self, array: Any, steps: np.ndarray) -> np.ndarray:
        """:meth:`_obs` as a NumPy array (the tensor's values, dtype and layout)."""
        if self.time_feature:
            assert self.time_limit is not None  # time_feature needs it
            time = -0.5 + np.maximum(steps - 1, 0) / self.time_limit
            array = np.concatenate([np.asarray(array, dtype=np.float32), time[:, None].astype(np.float32)], axis=1)
        target = _NUMPY_DTYPES.get(self.observation_dtype)
        if target is not None and (type(array) is not np.ndarray or array.dtype != target):
            array = np.asarray(array).astype(target)
        return np.ascontiguousarray(array.transpose(0, 3, 1, 2)) if self.channel_first else array

    def reset(self, seed: int | None = None) -> torch.Tensor:
        obs, _ = self.env.reset(seed=seed)
        self.episode_steps[:] = 0
        return self._obs(obs, self.episode_steps)

    def step(self, actions: torch.Tensor) -> StepResult:
        check_tensor("actions", actions, *self._action_contract, where="GymVectorAdapter.step")
        on_host = actions.device.type == "cpu" and not actions.requires_grad
        obs, reward, terminated, truncated, final_obs = self.step_arrays(
            actions.numpy() if on_host else actions.detach().cpu().numpy()
        )
        obs_t = _to_tensor(obs, self.observation_dtype, self.device)
        final_t = obs_t if final_obs is obs else _to_tensor(final_obs, self.observation_dtype, self.device)
        return (
            obs_t,
            _to_tensor(reward, torch.float32, self.device),
            _to_tensor(terminated, torch.bool, self.device),
            _to_tensor(truncated, torch.bool, self.device),
            {"final_obs": final_t},
        )

    def step_arrays(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`step` on NumPy arrays, for a rollout loop that stays in NumPy (unchecked):
        ``(obs, rewards float32, terminated, truncated, final_obs)``, the arrays of the
        tensors :meth:`step` returns (``final_obs is obs`` when no copy finished)."""
        obs, reward, terminated, truncated, info = self.env.step(actions)
        finished = np.logical_or(terminated, truncated)
        steps = self.episode_steps + 1
        self.episode_steps = np.where(finished, 0, steps)
        obs = self._obs_array(obs, self.episode_steps)
        final_obs = obs
        # same-step envs add final_obs only when a copy finished (count_nonzero: ndarray.any's wrapper costs more)
        if "final_obs" in info and np.count_nonzero(finished):
            raw = info["final_obs"]
            if isinstance(raw, np.ndarray) and raw.dtype != object:
                final_obs = self._obs_array(raw, steps)  # a dense array
            else:
                index = np.flatnonzero(info.get("_final_obs", finished))
                final_obs = obs.copy()
                final_obs[index] = self._obs_array(np.stack([raw[i] for i in index]), steps[index])
        return (
            obs,
            _as_array(reward, np.float32),
            _as_array(terminated, np.bool_),
            _as_array(truncated, np.bool_),
            final_obs,
        )

    def close(self) -> None:
        self.env.close()

    # -- checkpoints -------------------------------------------------------------------
    def _state_holders(self) -> list[Any] | None:
        """Every object whose attributes make up the simulation state: the vector env and,
        for a ``SyncVectorEnv``, each copy's chain of wrappers. ``None`` when the copies
        live in worker processes (``AsyncVectorEnv``)."""
        from gymnasium.vector import AsyncVectorEnv

        if isinstance(self.env, AsyncVectorEnv):
            return None
        holders = [self.env]
        for copy in getattr(self.env, "envs", []):
            layer = copy
            while layer is not None:
                if not isinstance(layer, _without_info()):  # stateless, and absent from older snapshots
                    holders.append(layer)
                layer = getattr(layer, "env", None)
        return holders

    def state_dict(self) -> dict[str, Any] | None:
        """The simulation state of every copy (see the module docstring), or ``None`` when it
        cannot be captured: the copies run in worker processes, or an env holds a physics
        engine's C objects. Attributes of other types (lists, dicts, other objects) are not
        captured; no classic control or toy text env keeps its state in one. A vector env
        with its own ``state_dict`` (:mod:`pglab.envs.mujoco_vector`) snapshots itself."""
        if callable(getattr(self.env, "state_dict", None)):
            return {"vector_env": self.env.state_dict(), "episode_steps": torch.from_numpy(self.episode_steps.copy())}
        holders = self._state_holders()
        if holders is None:
            return None
        layers = []
        for holder in holders:
            fields = {}
            for name, value in vars(holder).items():
                if name in _NOT_STATE:
                    continue
                if _is_opaque_simulator(value):
                    return None
                stored = _storable(value)
                if stored is not None:
                    fields[name] = stored
            layers.append({"type": type(holder).__name__, "fields": fields})
        return {"layers": layers, "episode_steps": torch.from_numpy(self.episode_steps.copy())}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Put back a :meth:`state_dict`. ``None`` (nothing was captured) leaves the
        environments as they are; a snapshot of other environments is a
        :class:`~pglab.errors.CheckpointError`."""
        if state is None:
            return
        own_snapshot = callable(getattr(self.env, "load_state_dict", None))
        if own_snapshot != ("vector_env" in state):
            raise CheckpointError(
                "checkpoint: its environment snapshot does not match the environment built from the config"
            )
        if own_snapshot:
            self.env.load_state_dict(state["vector_env"])
            self.episode_steps = state["episode_steps"].numpy().copy()
            return
        holders = self._state_holders()
        if holders is None or len(holders) != len(state["layers"]):
            raise CheckpointError(
                "checkpoint: its environment snapshot does not match the environment built from the config"
            )
        for holder, layer in zip(holders, state["layers"], strict=True):
            if type(holder).__name__ != layer["type"]:
                raise CheckpointError(f"checkpoint: environment layer {layer['type']} != {type(holder).__name__}")
            for name, stored in layer["fields"].items():
                setattr(holder, name, _restored(stored, getattr(holder, name, None)))
        if "episode_steps" in state:
            self.episode_steps = state["episode_steps"].numpy().copy()


@functools.cache
def _same_step_cartpole() -> type:
    """Gymnasium's array-vectorised CartPole-v1 (its ``vector_entry_point``) with ``SAME_STEP`` autoreset.

    Gymnasium's ``CartPoleVectorEnv`` steps every copy with one set of NumPy array ops
    but resets a finished copy on the *next* call (``NEXT_STEP``), which pglab's trainers
    do not model. This subclass keeps the parent's constants, spaces, reset distribution
    and seeding, and replaces ``step``: the same Euler step of the Barto-Sutton-Anderson
    cart-pole equations and the same termination/truncation rules (tested bit-for-bit
    against gymnasium's single ``CartPoleEnv``), after which finished copies are re-drawn
    at once; their pre-reset observation goes to ``info["final_obs"]`` (dense, with
    ``info["_final_obs"]`` marking the finished rows). It also skips the parent's
    per-step ``action_space.contains`` assertion (half of the parent's step time at 4
    copies); pglab's adapter has already checked the action tensor's shape and dtype.
    """
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv
    from gymnasium.vector import AutoresetMode

    class SameStepCartPoleVectorEnv(CartPoleVectorEnv):
        metadata = {**CartPoleVectorEnv.metadata, "autoreset_mode": AutoresetMode.SAME_STEP}

        def step(self, action):
            if self.state is None:
                raise RuntimeError("SameStepCartPoleVectorEnv: call reset() before step()")
            x, x_dot, theta, theta_dot = self.state
            force = np.where(np.asarray(action) == 1, self.force_mag, -self.force_mag)
            cos_theta, sin_theta = np.cos(theta), np.sin(theta)
            # Pole angular acceleration first, then the cart's (Barto, Sutton & Anderson 1983).
            temp = (force + self.polemass_length * theta_dot**2 * sin_theta) / self.total_mass
            theta_acc = (self.gravity * sin_theta - cos_theta * temp) / (
                self.length * (4.0 / 3.0 - self.masspole * cos_theta**2 / self.total_mass)
            )
            x_acc = temp - self.polemass_length * theta_acc * cos_theta / self.total_mass
            # Explicit Euler with the old velocities (CartPole-v1's "euler" integrator).
            # One [4, N] update, elementwise the same operations as CartPoleEnv's
            # x + tau * x_dot etc.: each NumPy call on 4-element rows costs ~1 us of
            # dispatch, so 3 calls instead of 9 (and np.array, not the slower np.stack).
            self.state = self.state + self.tau * np.array((x_dot, x_acc, theta_dot, theta_acc))
            x, theta = self.state[0], self.state[2]
            terminated = (np.abs(x) > self.x_threshold) | (np.abs(theta) > self.theta_threshold_radians)
            self.steps += 1
            truncated = self.steps >= self.max_episode_steps
            reward = (
                -terminated.astype(np.float32)
                if self._sutton_barto_reward
                else np.ones(self.num_envs, dtype=np.float32)
            )
            obs = self.state.T.astype(np.float32)
            finished = terminated | truncated
            info = {}
            if finished.any():
                info = {"final_obs": obs, "_final_obs": finished}
                # Same distribution and generator as the parent's reset: U(low, high)^4.
                self.state[:, finished] = self.np_random.uniform(
                    low=self.low, high=self.high, size=(4, int(finished.sum()))
                )
                self.steps[finished] = 0
                obs = self.state.T.astype(np.float32)
            return obs, reward, terminated, truncated, info

    return SameStepCartPoleVectorEnv


@functools.cache
def _without_info() -> type:
    """A Gymnasium wrapper whose ``reset`` and ``step`` return empty ``info`` dicts: the
    outermost layer of each copy in a ``SyncVectorEnv``/``AsyncVectorEnv``.

    The adapter reads nothing of the copies' own ``info`` (only the vector env's
    ``final_obs``), but the vector env merges every key of every copy's ``info`` into
    per-key arrays on every step: for a MuJoCo copy (seven keys) a fifth of what the
    vector env adds to the copies' own step time. Checkpoints skip this layer (it holds
    no state), so snapshots keep one layer per wrapper the user asked for."""
    import gymnasium as gym

    class WithoutInfo(gym.Wrapper):
        def reset(self, **kwargs):
            return self.env.reset(**kwargs)[0], {}

        def step(self, action):
            obs, reward, terminated, truncated, _ = self.env.step(action)
            return obs, reward, terminated, truncated, {}

    return WithoutInfo


def _mujoco_task(name: str) -> Callable[[], type]:
    """The factory of :mod:`pglab.envs.mujoco_vector`'s ``name`` (imported when first built)."""

    def factory() -> type:
        try:
            from pglab.envs import mujoco_vector
        except ImportError as exc:
            raise ConfigError("env", name, "needs the mujoco package (pip install 'pglab[mujoco]')") from exc
        return getattr(mujoco_vector, name)

    return factory


class VectorImplementation(NamedTuple):
    """A batched, same-step implementation of a Gymnasium id (``--vectorization vector``):
    ``factory()`` returns the vector env class; ``defaults`` are its keyword arguments
    (``max_episode_steps``: the registered time limit); ``covers`` are the ``env_kwargs``
    it reproduces exactly, where ``auto`` still picks it (with any other keyword ``auto``
    picks gymnasium's ``SyncVectorEnv``)."""

    factory: Callable[[], type]
    defaults: dict[str, Any]
    covers: frozenset[str]


_FORWARD_REWARD_KWARGS = frozenset(
    {
        "max_episode_steps",
        "forward_reward_weight",
        "ctrl_cost_weight",
        "reset_noise_scale",
        "exclude_current_positions_from_observation",
    }
)
# Gymnasium ids with an array-vectorised, same-step implementation ("vector" mode).
_VECTOR_IMPLEMENTATIONS = {
    "CartPole-v1": VectorImplementation(_same_step_cartpole, {"max_episode_steps": 500}, frozenset()),
    **{
        env_id: VectorImplementation(_mujoco_task(name), {"max_episode_steps": 1000}, covers)
        for env_id, name, covers in (
            ("Swimmer-v4", "SwimmerVectorEnv", _FORWARD_REWARD_KWARGS),
            ("HalfCheetah-v4", "HalfCheetahVectorEnv", _FORWARD_REWARD_KWARGS),
            ("InvertedPendulum-v4", "InvertedPendulumVectorEnv", frozenset({"max_episode_steps"})),
            ("InvertedDoublePendulum-v4", "InvertedDoublePendulumVectorEnv", frozenset({"max_episode_steps"})),
        )
    },
}
VECTORIZATION_MODES = ("auto", "vector", "sync", "async")


MINATAR_NAMESPACE = "MinAtar/"


def _register_minatar(env_id: str) -> None:
    """Register the ``minatar`` package's Gymnasium ids (``MinAtar/Breakout-v1`` ...) once."""
    import gymnasium as gym

    if env_id in gym.registry:
        return
    try:
        import minatar.gym
    except ImportError as exc:
        raise ConfigError("env", env_id, "needs the minatar package (pip install 'pglab[minatar]')") from exc
    if not any(name.startswith(MINATAR_NAMESPACE) for name in gym.registry):
        minatar.gym.register_envs()


def _time_limit(env_id: str, env_kwargs: dict[str, Any]) -> int | None:
    """The step limit of ``env_id``'s episodes: ``max_episode_steps`` given, or registered."""
    import gymnasium as gym

    if env_kwargs.get("max_episode_steps") is not None:
        return int(env_kwargs["max_episode_steps"])
    if env_id in _VECTOR_IMPLEMENTATIONS:
        return int(_VECTOR_IMPLEMENTATIONS[env_id].defaults["max_episode_steps"])
    limit = gym.spec(env_id).max_episode_steps
    return None if limit is None else int(limit)


def _make_vector_env(
    env_id: str,
    num_envs: int,
    device: torch.device | str,
    time_feature: bool,
    wrappers: Sequence[str],
    env_kwargs: dict[str, Any],
) -> GymVectorAdapter:
    """``vectorization="vector"``: the id's :class:`VectorImplementation`, wrapped."""
    if wrappers:
        raise ConfigError("vectorization", "vector", "wraps no copies: env_wrappers need 'sync' or 'async'")
    if env_id not in _VECTOR_IMPLEMENTATIONS:
        raise ConfigError(
            "vectorization",
            "vector",
            f"no array-vectorised implementation of {env_id!r} "
            f"(available: {', '.join(_VECTOR_IMPLEMENTATIONS)}); use 'sync' or 'async'",
        )
    implementation = _VECTOR_IMPLEMENTATIONS[env_id]
    limit = _time_limit(env_id, env_kwargs) if time_feature else None
    try:
        vector_env = implementation.factory()(num_envs=num_envs, **{**implementation.defaults, **env_kwargs})
    except TypeError as exc:  # a keyword the implementation does not take
        if not env_kwargs:
            raise
        raise ConfigError("env_kwargs", env_kwargs, f"rejected by the vectorised {env_id} ({exc})") from exc
    return GymVectorAdapter(vector_env, device=device, time_limit=limit)


def _mujoco_warning(message: str) -> None:
    warnings.warn(f"MuJoCo: {message}", UserWarning, stacklevel=2)


def route_mujoco_warnings(env_id: str) -> None:
    """Before a MuJoCo task is made: MuJoCo's own warnings (a deprecated attribute in a
    model file, say) become Python ``UserWarning``s instead of lines printed by the C
    library and appended to ``MUJOCO_LOG.TXT`` in the working directory. The handler is
    MuJoCo's, process-wide (``mujoco.set_mju_user_warning``)."""
    import gymnasium as gym

    spec = gym.registry.get(env_id)
    if spec is not None and "mujoco" in str(spec.entry_point):
        import mujoco

        mujoco.set_mju_user_warning(_mujoco_warning)


def make_gym_env(
    env_id: str,
    num_envs: int,
    *,
    device: torch.device | str = "cpu",
    vectorization: str = "auto",
    time_feature: bool = False,
    wrappers: Sequence[str] = (),
    **env_kwargs: Any,
) -> GymVectorAdapter | AtariEnv:
    """Build a vectorised Gymnasium (or ALE) environment wrapped as a batched env.

    ``vectorization``: ``"vector"`` steps all copies as array operations (only ids in
    ``_VECTOR_IMPLEMENTATIONS``: CartPole-v1 and the MuJoCo -v4 tasks of
    :mod:`pglab.envs.mujoco_vector`),
    ``"sync"`` / ``"async"`` are gymnasium's ``SyncVectorEnv`` / ``AsyncVectorEnv`` of
    single copies, ``"auto"`` is ``"vector"`` where available for the given ``env_kwargs``
    (:class:`VectorImplementation`'s ``covers``) and ``"sync"`` otherwise. ``wrappers``: Gymnasium wrappers around each
    copy by import path (:mod:`pglab.envs.wrappers`; ``sync``/``async`` only). ALE games
    always use ALE's C++ vector env (:func:`pglab.envs.atari.make_atari_env`; ``env_kwargs``
    are its options). ``time_feature``: append the time feature (module docstring) to vector
    observations of environments with a time limit.

    Raises:
        ConfigError: unknown environment id or unsupported spaces (exit code 2).
    """
    import gymnasium as gym

    route_mujoco_warnings(env_id)
    game = _ale_game(env_id)
    if game is not None:
        if wrappers:
            raise ConfigError(
                "env_wrappers",
                list(wrappers),
                "Atari games run pglab's own preprocessing (pglab.envs.atari), no wrappers",
            )
        # The standard Atari preprocessing lives in one place, shared by every trainer.
        return make_atari_env(game, num_envs, device=device, **env_kwargs)
    if env_id.startswith(MINATAR_NAMESPACE):
        _register_minatar(env_id)
    if vectorization not in VECTORIZATION_MODES:
        raise ConfigError("vectorization", vectorization, f"must be one of {', '.join(VECTORIZATION_MODES)}")
    if vectorization == "auto":
        covered = env_id in _VECTOR_IMPLEMENTATIONS and set(env_kwargs) <= _VECTOR_IMPLEMENTATIONS[env_id].covers
        vectorization = "vector" if covered and not wrappers else "sync"
    if vectorization == "vector":
        return _make_vector_env(env_id, num_envs, device, time_feature, wrappers, env_kwargs)
    try:
        env = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode=vectorization,
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
            wrappers=[*load_wrappers(wrappers), _without_info()],
            **env_kwargs,
        )
    except (gym.error.NameNotFound, gym.error.NamespaceNotFound, gym.error.VersionNotFound) as exc:
        raise ConfigError("env", env_id, f"not a registered Gymnasium environment ({exc})") from exc
    except (gym.error.Error, ImportError) as exc:  # registered, but not makeable here (a missing or moved package)
        raise ConfigError("env", env_id, f"cannot be made here ({exc})") from exc
    except TypeError as exc:  # an unknown keyword of the environment or of a wrapper
        if not (env_kwargs or wrappers):
            raise
        field = "env_kwargs" if env_kwargs else "env_wrappers"
        raise ConfigError(field, env_kwargs or list(wrappers), f"rejected by {env_id} or its wrappers ({exc})") from exc
    try:
        limit = _time_limit(env_id, env_kwargs) if time_feature else None
        return GymVectorAdapter(
            env, device=device, channel_first=env_id.startswith(MINATAR_NAMESPACE), time_limit=limit
        )
    except ConfigError:
        env.close()
        raise

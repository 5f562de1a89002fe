"""Gymnasium's MuJoCo ``-v4`` tasks stepped as one batch: an accelerated path of ``gym.make_vec``.

:class:`SwimmerVectorEnv` (``Swimmer-v4``), :class:`HalfCheetahVectorEnv`
(``HalfCheetah-v4``), :class:`InvertedPendulumVectorEnv` (``InvertedPendulum-v4``) and
:class:`InvertedDoublePendulumVectorEnv` (``InvertedDoublePendulum-v4``) are Gymnasium
``VectorEnv`` s with ``SAME_STEP`` autoreset that give, for the same seed and the same
actions, the same observations, rewards, terminations and truncations as gymnasium's
``SyncVectorEnv`` of the registered ids (a ``TimeLimit`` of ``max_episode_steps``, 1,000
by default), bit for bit. They load the same model XML from gymnasium's assets and keep
one ``MjData`` per copy, stepped with the same ``mj_step(model, data,
nstep=frame_skip)`` call; everything around it is array code over the copies:
observations, rewards, terminations, the time limit, and the autoreset of the finished
copies (their pre-reset observation goes to ``info["final_obs"]``, dense, with
``info["_final_obs"]`` marking them).

The reset noise is drawn as gymnasium draws it: one generator per copy,
``gymnasium.utils.seeding.np_random(seed + i)`` at ``reset(seed=seed)``, the same draws in
the same order, so a seeded run through this path equals the same run through
``--vectorization sync``. Gymnasium's per-step costs that change nothing in the numbers
are left out: the wrappers' checks, the ``info`` dicts, and ``mj_rnePostConstraint`` (it
computes body accelerations and forces that neither task reads).

Checkpoints: :meth:`MujocoVectorEnv.state_dict` holds each copy's full integration state
(``mj_getState`` with ``mjSTATE_INTEGRATION``: time, positions, velocities, controls,
the constraint solver's warm start), the episodes' step counts and the generators, so a
run resumed from it continues bit for bit.
"""

from __future__ import annotations

from typing import Any, ClassVar

import mujoco
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.envs.mujoco.mujoco_env import expand_model_path
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from pglab.errors import CheckpointError

# What mj_step needs to continue exactly: time, qpos, qvel, act, warm start, controls, ...
_INTEGRATION_STATE = mujoco.mjtState.mjSTATE_INTEGRATION


class MujocoVectorEnv(VectorEnv):
    """``num_envs`` copies of one MuJoCo task, one ``MjData`` each (see the module docstring).

    A task names its ``model_file`` (in gymnasium's assets), ``frame_skip``, the ``MjData``
    fields it reads (``gathered``, copied into ``[num_envs, ...]`` arrays in :attr:`state`
    after every step and reset), and defines :meth:`observe`, :meth:`reward_and_termination`
    and :meth:`reset_noise`.
    """

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.SAME_STEP}
    model_file: ClassVar[str]
    frame_skip: ClassVar[int]
    observation_size: int
    gathered: ClassVar[tuple[str, ...]] = ("qpos", "qvel")

    def __init__(self, num_envs: int = 1, max_episode_steps: int = 1000):
        self.num_envs = int(num_envs)
        self.max_episode_steps = int(max_episode_steps)
        self.render_mode = None
        self.model = mujoco.MjModel.from_xml_path(expand_model_path(self.model_file))
        self.datas = [mujoco.MjData(self.model) for _ in range(self.num_envs)]
        self.init_qpos = self.datas[0].qpos.ravel().copy()
        self.init_qvel = self.datas[0].qvel.ravel().copy()
        self.dt = self.model.opt.timestep * self.frame_skip
        # the copies' arrays as NumPy views of their MjData, made once (each attribute read costs ~1 us)
        self._ctrl = [data.ctrl for data in self.datas]
        self._views = {name: [getattr(data, name) for data in self.datas] for name in self.gathered}
        self.state = {name: np.zeros((self.num_envs, *views[0].shape)) for name, views in self._views.items()}
        self.steps = np.zeros(self.num_envs, dtype=np.int64)  # steps into each copy's episode
        self.generators: list[np.random.Generator | None] = [None] * self.num_envs
        self._action_shape = (self.num_envs, self.model.nu)
        low, high = self.model.actuator_ctrlrange.copy().astype(np.float32).T
        self.single_action_space = spaces.Box(low=low, high=high, dtype=np.float32)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.single_observation_space = spaces.Box(-np.inf, np.inf, shape=(self.observation_size,), dtype=np.float64)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)

    # -- the task ----------------------------------------------------------------------
    def observe(self) -> np.ndarray:
        """The ``[num_envs, observation_size]`` float64 observations of :attr:`state`."""
        raise NotImplementedError(f"{type(self).__name__} does not override observe")

    def reward_and_termination(self, actions: np.ndarray, before: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The step's rewards (float64) and terminations (bool), ``[num_envs]`` each, from the
        actions, :attr:`state` after the step and ``before``, the positions before it."""
        raise NotImplementedError(f"{type(self).__name__} does not override reward_and_termination")

    def reset_noise(self, generator: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One copy's reset ``qpos`` and ``qvel``, drawn from ``generator`` as gymnasium does."""
        raise NotImplementedError(f"{type(self).__name__} does not override reset_noise")

    # -- stepping ----------------------------------------------------------------------
    def _gather(self, index: int) -> None:
        for name, views in self._views.items():
            self.state[name][index] = views[index]

    def _reset_copy(self, index: int) -> None:
        """``mj_resetData``, the reset noise, ``mj_forward``: gymnasium's ``MujocoEnv.reset``."""
        data, generator = self.datas[index], self.generators[index]
        assert generator is not None  # made by reset()
        mujoco.mj_resetData(self.model, data)
        data.qpos[:], data.qvel[:] = self.reset_noise(generator)
        mujoco.mj_forward(self.model, data)
        self._gather(index)
        self.steps[index] = 0

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        """Reset every copy; ``seed`` as ``SyncVectorEnv.reset``: ``seed + i`` for copy ``i``
        (a list: one seed per copy; ``None``: keep each copy's generator)."""
        if options:
            raise ValueError(f"{type(self).__name__}.reset: options are not supported (got {options!r})")
        seeds: list[int | None]
        if isinstance(seed, int):
            seeds = [seed + i for i in range(self.num_envs)]
        else:
            seeds = [None] * self.num_envs if seed is None else list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(f"{type(self).__name__}.reset: {len(seeds)} seeds for {self.num_envs} copies")
        for index, copy_seed in enumerate(seeds):
            if copy_seed is not None or self.generators[index] is None:
                self.generators[index] = seeding.np_random(copy_seed)[0]
            self._reset_copy(index)
        return self.observe(), {}

    def step(self, actions: Any):
        actions = np.asarray(actions)
        if actions.shape != self._action_shape:
            raise ValueError(f"{type(self).__name__}.step: actions of shape {actions.shape}")
        if self.generators[0] is None:
            raise RuntimeError(f"{type(self).__name__}: call reset() before step()")
        before = self.state["qpos"].copy()
        model, frame_skip, ctrl = self.model, self.frame_skip, self._ctrl
        for index, data in enumerate(self.datas):
            ctrl[index][:] = actions[index]
            mujoco.mj_step(model, data, nstep=frame_skip)
            self._gather(index)
        obs = self.observe()
        reward, terminated = self.reward_and_termination(actions, before)
        self.steps += 1
        truncated = self.steps >= self.max_episode_steps
        finished = terminated | truncated
        info: dict[str, Any] = {}
        if np.count_nonzero(finished):  # ndarray.any's Python wrapper costs more
            info = {"final_obs": obs, "_final_obs": finished}
            for copy in np.flatnonzero(finished).tolist():
                self._reset_copy(copy)
            obs = self.observe()
        return obs, reward, terminated, truncated, info

    # -- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Each copy's integration state, the episodes' step counts and the generators."""
        size = mujoco.mj_stateSize(self.model, _INTEGRATION_STATE)
        physics = np.zeros((self.num_envs, size))
        for index, data in enumerate(self.datas):
            mujoco.mj_getState(self.model, data, physics[index], _INTEGRATION_STATE)
        return {
            "task": type(self).__name__,
            "physics": torch.from_numpy(physics),
            "steps": torch.from_numpy(self.steps.copy()),
            "generators": [None if g is None else g.bit_generator.state for g in self.generators],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        physics = state["physics"].numpy()
        if state["task"] != type(self).__name__ or physics.shape[0] != self.num_envs:
            raise CheckpointError(
                f"checkpoint: its environment snapshot ({state['task']}, {physics.shape[0]} copies) does not match "
                f"the environment built from the config ({type(self).__name__}, {self.num_envs} copies)"
            )
        for index, data in enumerate(self.datas):
            mujoco.mj_setState(self.model, data, physics[index].copy(), _INTEGRATION_STATE)
            mujoco.mj_forward(self.model, data)  # the derived quantities the task reads
            self._gather(index)
        self.steps = state["steps"].numpy().copy()
        for index, stored in enumerate(state["generators"]):
            generator = None
            if stored is not None:
                generator = np.random.Generator(getattr(np.random, stored["bit_generator"])())
                generator.bit_generator.state = stored
            self.generators[index] = generator


class ForwardRewardVectorEnv(MujocoVectorEnv):
    """A task rewarded for forward speed, never terminating (Swimmer, HalfCheetah): reward
    ``forward_reward_weight * x velocity - ctrl_cost_weight * |action|^2``; observation
    ``qpos`` without its first ``excluded_positions`` entries (the whole of it with
    ``exclude_current_positions_from_observation=False``), then ``qvel``; reset noise
    ``U(-s, s)`` on ``qpos``, and on ``qvel`` ``U(-s, s)`` or ``s N(0, 1)``
    (``normal_velocity_noise``), ``s = reset_noise_scale``."""

    excluded_positions: ClassVar[int]
    normal_velocity_noise: ClassVar[bool]
    default_ctrl_cost_weight: ClassVar[float]
    """the task's ``ctrl_cost_weight`` in gymnasium (the other options' defaults are shared)"""

    def __init__(
        self,
        num_envs: int = 1,
        max_episode_steps: int = 1000,
        forward_reward_weight: float = 1.0,
        ctrl_cost_weight: float | None = None,
        reset_noise_scale: float = 0.1,
        exclude_current_positions_from_observation: bool = True,
    ):
        self.forward_reward_weight = forward_reward_weight
        self.ctrl_cost_weight = self.default_ctrl_cost_weight if ctrl_cost_weight is None else ctrl_cost_weight
        self.reset_noise_scale = reset_noise_scale
        self.first_position = self.excluded_positions if exclude_current_positions_from_observation else 0
        super().__init__(num_envs, max_episode_steps)

    @property
    def observation_size(self) -> int:  # type: ignore[override]  # the instance's, from its options
        return self.model.nq - self.first_position + self.model.nv

    def observe(self) -> np.ndarray:
        return np.concatenate([self.state["qpos"][:, self.first_position :], self.state["qvel"]], axis=1)

    def reward_and_termination(self, actions: np.ndarray, before: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        velocity = (self.state["qpos"][:, 0] - before[:, 0]) / self.dt
        # float32 actions: a float32 cost, as gymnasium's np.sum(np.square(action)) of one copy's
        # action (np.sum's own reduction, without its Python wrapper)
        ctrl_cost = self.ctrl_cost_weight * np.add.reduce(np.square(actions), axis=1)
        return self.forward_reward_weight * velocity - ctrl_cost, np.zeros(self.num_envs, dtype=bool)

    def reset_noise(self, generator: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        low, high = -self.reset_noise_scale, self.reset_noise_scale
        qpos = self.init_qpos + generator.uniform(low=low, high=high, size=self.model.nq)
        if self.normal_velocity_noise:
            return qpos, self.init_qvel + self.reset_noise_scale * generator.standard_normal(self.model.nv)
        return qpos, self.init_qvel + generator.uniform(low=low, high=high, size=self.model.nv)


class SwimmerVectorEnv(ForwardRewardVectorEnv):
    """``Swimmer-v4`` (:class:`ForwardRewardVectorEnv`): observation ``qpos[2:]``, ``qvel``;
    uniform reset noise on both."""

    model_file = "swimmer.xml"
    frame_skip = 4
    excluded_positions = 2
    normal_velocity_noise = False
    default_ctrl_cost_weight = 1e-4


class HalfCheetahVectorEnv(ForwardRewardVectorEnv):
    """``HalfCheetah-v4`` (:class:`ForwardRewardVectorEnv`): observation ``qpos[1:]``,
    ``qvel``; normal reset noise on ``qvel``."""

    model_file = "half_cheetah.xml"
    frame_skip = 5
    excluded_positions = 1
    normal_velocity_noise = True
    default_ctrl_cost_weight = 0.1


class InvertedPendulumVectorEnv(MujocoVectorEnv):
    """``InvertedPendulum-v4``: reward 1 per step, terminated when an observation is not
    finite or the pole's angle leaves [-0.2, 0.2]; observation ``qpos``, ``qvel``; reset
    noise ``U(-0.01, 0.01)`` on both."""

    model_file = "inverted_pendulum.xml"
    frame_skip = 2
    observation_size = 4

    def observe(self) -> np.ndarray:
        return np.concatenate([self.state["qpos"], self.state["qvel"]], axis=1)

    def reward_and_termination(self, actions: np.ndarray, before: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        obs = self.observe()
        terminated = ~np.isfinite(obs).all(axis=1) | (np.abs(obs[:, 1]) > 0.2)
        return np.ones(self.num_envs), terminated

    def reset_noise(self, generator: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        qpos = self.init_qpos + generator.uniform(size=self.model.nq, low=-0.01, high=0.01)
        return qpos, self.init_qvel + generator.uniform(size=self.model.nv, low=-0.01, high=0.01)


class InvertedDoublePendulumVectorEnv(MujocoVectorEnv):
    """``InvertedDoublePendulum-v4``: reward ``10 - 0.01 x^2 - (y - 2)^2 - 1e-3 v1^2 - 5e-3
    v2^2`` (``x, y``: the tip's site, ``v1, v2``: the hinges' velocities), terminated when
    ``y <= 1``; observation: cart position, sines and cosines of the hinge angles, ``qvel``
    and ``qfrc_constraint`` clipped to [-10, 10]; reset noise ``U(-0.1, 0.1)`` on ``qpos``,
    ``0.1 N(0, 1)`` on ``qvel``. The squares are ``np.float_power``: gymnasium squares NumPy
    scalars with ``**``, i.e. C's ``pow``, which differs from an array's ``x * x`` in the
    last bit for about one value in a thousand."""

    model_file = "inverted_double_pendulum.xml"
    frame_skip = 5
    observation_size = 11
    gathered = ("qpos", "qvel", "site_xpos", "qfrc_constraint")

    def observe(self) -> np.ndarray:
        # written into one array with ufuncs: np.concatenate and np.clip's Python wrappers
        # cost more than the arithmetic on these few numbers (min(max(v, -10), 10) is np.clip's value)
        qpos, qvel = self.state["qpos"], self.state["qvel"]
        obs = np.empty((self.num_envs, self.observation_size))
        obs[:, 0] = qpos[:, 0]
        np.sin(qpos[:, 1:], out=obs[:, 1:3])
        np.cos(qpos[:, 1:], out=obs[:, 3:5])
        np.minimum(np.maximum(qvel, -10), 10, out=obs[:, 5:8])
        np.minimum(np.maximum(self.state["qfrc_constraint"], -10), 10, out=obs[:, 8:11])
        return obs

    # the penalties' weights on x^2, (y - 2)^2, v1^2, v2^2 (1.0 * a is a)
    _WEIGHTS = np.array([[0.01], [1.0], [1e-3], [5e-3]])

    def reward_and_termination(self, actions: np.ndarray, before: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # the four squared terms as one [4, num_envs] array: one float_power and one
        # product instead of four of each (each NumPy call costs ~1-2 us on one copy)
        site, qvel = self.state["site_xpos"], self.state["qvel"]
        terms = np.empty((4, len(site)))
        terms[0] = site[:, 0, 0]
        np.subtract(site[:, 0, 2], 2, out=terms[1])
        terms[2:] = qvel[:, 1:3].T
        np.multiply(np.float_power(terms, 2, out=terms), self._WEIGHTS, out=terms)
        dist_penalty, vel_penalty = terms[0] + terms[1], terms[2] + terms[3]
        return 10 - dist_penalty - vel_penalty, site[:, 0, 2] <= 1

    def reset_noise(self, generator: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        qpos = self.init_qpos + generator.uniform(low=-0.1, high=0.1, size=self.model.nq)
        return qpos, self.init_qvel + generator.standard_normal(self.model.nv) * 0.1

"""Atari 2600 games through ale-py, with the standard DQN/PPO preprocessing.

``make_atari_env("breakout", num_envs=8)`` steps ``num_envs`` games in ale-py's C++
vector env (``ale_py.vector_env.AtariVectorEnv``, its threads) and returns them as one
pglab batched env with uint8 observations ``[N, 4, 84, 84]``. The preprocessing is the
one of Mnih et al. (2015) and of CleanRL's ``ppo_atari.py`` / SB3's ``AtariWrapper``:

==========================  =============================================  ===============
wrapper                     what                                           done by
==========================  =============================================  ===============
noop reset                  0..30 random no-ops after every game reset     ALE (C++)
frame skip 4 + max-pool     an action is held 4 frames; the observation   ALE (C++)
                            is the pixel-wise max of the last 2 (flicker)
fire reset                  FIRE after a reset in games that need it       ALE (C++)
84x84 greyscale             resized luminance                              ALE (C++)
frame stack 4               the last 4 processed frames, oldest first      ALE (C++)
episodic life               losing a life ends the *training* episode      here (Python)
reward clipping             the trainer sees ``sign(r)``                   here (Python)
episode statistics          the real game score and length                here (Python)
==========================  =============================================  ===============

Why the last three live here and not in ALE's C++ options:

- ALE's ``reward_clipping`` throws the raw reward away, so the game score could no
  longer be reported. Here the C++ env returns raw rewards; the trainer gets the clipped
  ones and ``info`` carries the score.
- ALE 0.12's ``episodic_life=True`` *restarts the whole game* when a life is lost (its
  ``lives`` never drop below the start value), so the agent never plays a game's later
  lives and no full-game score exists. DeepMind's ``EpisodicLifeEnv`` (and CleanRL's,
  SB3's) instead marks the life loss as terminal for learning but lets the game go on.
  This module does the latter: the C++ env runs whole games, and a drop of
  ``info["lives"]`` while the game continues sets ``done``.

Same-step autoreset (pglab's convention): when a game ends, the returned observation is
the first one of the next game and ``info["final_obs"]`` holds the last one. A life
loss needs no reset: the next observation continues the game, and ``done`` only stops
the bootstrap there.

Terminated vs truncated: ``done`` = game over, or a lost life when ``episodic_life``;
``trunc`` = ALE's frame limit (108,000 frames = 30 minutes of play by default).

``info`` of every step (tensors on the env's device):

- ``final_obs`` uint8 ``[N, 4, 84, 84]``: the pre-reset observation where a game ended;
- ``lives`` int64 ``[N]``: lives left (0 in games without lives, e.g. Pong);
- ``episode_end`` bool ``[N]``: a *game* ended at this step (game over or time limit);
- ``episode_return`` float64 ``[N]``: that game's score, unclipped and summed over all
  of its lives (0 where no game ended);
- ``episode_length`` int64 ``[N]``: that game's length in agent steps (0 elsewhere).

Trainers log these instead of summing the rewards they learn from (which would give
clipped per-life returns); see :func:`reported_episodes`.

Evaluation (:data:`EVALUATION_OPTIONS`) turns episodic life and clipping off, so the
rewards summed over an episode *are* the game score.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pglab.contracts import check_tensor
from pglab.envs.base import ActionSpec, StepResult
from pglab.errors import CheckpointError, ConfigError
from pglab.extras import require

# Options of the C++ env that this module owns (set from episodic_life/clip_rewards).
_OWNED_ALE_OPTIONS = ("reward_clipping", "episodic_life", "life_loss_info", "autoreset_mode")
# make_env(..., **EVALUATION_OPTIONS): whole games, raw rewards (their sum is the score).
EVALUATION_OPTIONS = {"episodic_life": False, "clip_rewards": False}


def ale_game(env_id: str) -> str | None:
    """The ROM name of an ALE id: ``"ALE/Pong-v5"`` or ``"ale:pong"`` -> ``"pong"``,
    ``"ALE/SpaceInvaders-v5"`` -> ``"space_invaders"``; other ids -> ``None``."""
    if env_id.startswith("ale:"):
        return env_id[4:]
    if env_id.startswith("ALE/"):
        name = env_id[4:].split("-v")[0]
        # CamelCase -> snake_case ("SpaceInvaders" -> "space_invaders")
        return "".join("_" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(name))
    return None


def is_atari_spec(spec: str) -> bool:
    """Whether an ``--env`` spec (``gym:ALE/Pong-v5``, ``ale:pong``) names an Atari game."""
    kind, _, name = spec.partition(":")
    return kind == "ale" or (kind == "gym" and ale_game(name) is not None)


def evaluation_options(spec: str) -> dict[str, Any]:
    """Extra ``make_env`` options for evaluating on ``spec``: :data:`EVALUATION_OPTIONS`
    for Atari games (whole games, raw score), nothing for other environments."""
    return dict(EVALUATION_OPTIONS) if is_atari_spec(spec) else {}


class AtariEnv:
    """``num_envs`` Atari games as a pglab batched env (see the module docstring).

    Args:
        game: ROM name (``"pong"``, ``"breakout"``; ``ale_py.roms`` lists them).
        num_envs: games stepped together (in ALE's C++ threads).
        device: where the returned tensors live.
        episodic_life: a lost life ends the training episode (``done``), the game goes on.
        clip_rewards: return ``sign(r)`` (in {-1, 0, 1}) instead of the raw reward.
        noop_max: at most this many random no-ops after each game reset (0: none).
        frame_skip: emulator frames per action (the observation max-pools the last 2).
        frame_stack: processed frames per observation.
        repeat_action_probability: sticky actions (0: the v4/CleanRL setting; v5 uses 0.25).
        **ale_options: further ``AtariVectorEnv`` options (``max_num_frames_per_episode``,
            ``full_action_space``, ``num_threads``, ...).
    """

    def __init__(
        self,
        game: str,
        num_envs: int,
        *,
        device: torch.device | str = "cpu",
        episodic_life: bool = True,
        clip_rewards: bool = True,
        noop_max: int = 30,
        frame_skip: int = 4,
        frame_stack: int = 4,
        repeat_action_probability: float = 0.0,
        **ale_options: Any,
    ):
        from gymnasium import spaces

        AtariVectorEnv = require("ale_py.vector_env", needed_by=f"the Atari game {game!r}").AtariVectorEnv
        for name in _OWNED_ALE_OPTIONS:
            if name in ale_options:
                raise ConfigError(
                    name, ale_options[name], "set by pglab's Atari wrappers (use episodic_life / clip_rewards)"
                )
        try:
            self.games = AtariVectorEnv(
                game=game,
                num_envs=num_envs,
                autoreset_mode="SameStep",
                noop_max=noop_max,
                frameskip=frame_skip,
                maxpool=True,
                stack_num=frame_stack,
                img_height=84,
                img_width=84,
                grayscale=True,
                use_fire_reset=True,
                repeat_action_probability=repeat_action_probability,
                # raw rewards and whole games from C++; the two wrappers below work on them
                reward_clipping=False,
                episodic_life=False,
                life_loss_info=False,
                **ale_options,
            )
        except Exception as exc:
            raise ConfigError("env", game, f"ALE could not start this game ({exc})") from exc
        self.game = game
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.episodic_life, self.clip_rewards = bool(episodic_life), bool(clip_rewards)
        frames, actions = self.games.single_observation_space, self.games.single_action_space
        assert isinstance(frames, spaces.Box) and isinstance(actions, spaces.Discrete)  # ALE's spaces
        self.observation_shape = tuple(int(s) for s in frames.shape)
        self.observation_dtype = torch.uint8
        self.action_spec = ActionSpec(kind="discrete", num_actions=int(actions.n), dtype=torch.int64)
        # Per game (NumPy, host side): lives at the previous step, running score and length.
        self._lives = np.zeros(self.num_envs, dtype=np.int64)
        self._score = np.zeros(self.num_envs, dtype=np.float64)
        self._length = np.zeros(self.num_envs, dtype=np.int64)

    def _tensor(self, array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(device=self.device, dtype=dtype)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Start new games (game ``i`` seeded with ``seed + i``); uint8 ``[N, 4, 84, 84]``."""
        obs, info = self.games.reset(seed=seed)
        self._lives[:] = info["lives"]
        self._score[:] = 0.0
        self._length[:] = 0
        return self._tensor(obs, torch.uint8)

    def step(self, actions: torch.Tensor) -> StepResult:
        """One agent step (``frame_skip`` frames) of every game; see the module docstring."""
        check_tensor("actions", actions, (self.num_envs,), (torch.int32, torch.int64), where="AtariEnv.step")
        obs, raw_reward, game_over, time_limit, info = self.games.step(actions.detach().cpu().numpy())
        raw_reward = np.asarray(raw_reward, dtype=np.float64)
        game_over, time_limit = np.asarray(game_over, dtype=bool), np.asarray(time_limit, dtype=bool)
        game_end = game_over | time_limit
        lives = np.asarray(info["lives"], dtype=np.int64)

        # -- episode statistics: the real score, over all lives -----------------------
        self._score += raw_reward
        self._length += 1
        episode_return = np.where(game_end, self._score, 0.0)
        episode_length = np.where(game_end, self._length, 0)
        self._score[game_end] = 0.0
        self._length[game_end] = 0

        # -- episodic life: a life lost in a game that goes on ends the training episode.
        # At a game end ALE has already reset, and `lives` are the new game's.
        life_lost = (lives < self._lives) & ~game_end
        self._lives = lives
        done = game_over | life_lost if self.episodic_life else game_over

        # -- reward clipping: the learner sees sign(r); the score above stays raw ----------
        reward = np.sign(raw_reward) if self.clip_rewards else raw_reward

        obs_t = self._tensor(obs, torch.uint8)
        final_obs = self._tensor(info["final_obs"], torch.uint8) if "final_obs" in info else obs_t
        out_info = {
            "final_obs": final_obs,
            "lives": self._tensor(lives, torch.int64),
            "episode_end": self._tensor(game_end, torch.bool),
            "episode_return": self._tensor(episode_return, torch.float64),
            "episode_length": self._tensor(episode_length, torch.int64),
        }
        return (
            obs_t,
            self._tensor(reward, torch.float32),
            self._tensor(done, torch.bool),
            self._tensor(time_limit, torch.bool),
            out_info,
        )

    def close(self) -> None:
        self.games.close()

    # -- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> None:
        """Nothing: the emulators run in ALE's C++ threads, and ale-py's vector env offers
        no snapshot of them, so a resumed run starts new games (the trainer says so)."""
        return None

    def load_state_dict(self, state: None) -> None:
        """Accepts the ``None`` of :meth:`state_dict`: the games stay as they are."""
        if state is not None:
            raise CheckpointError("checkpoint: holds an environment snapshot, which an Atari environment cannot load")


def make_atari_env(game: str, num_envs: int, *, device: torch.device | str = "cpu", **options: Any) -> AtariEnv:
    """``num_envs`` copies of ``game`` (a ROM name, or an id :func:`ale_game` understands)
    with the standard preprocessing; ``options``: see :class:`AtariEnv`."""
    rom = ale_game(game) or game
    return AtariEnv(rom, num_envs, device=device, **options)


def reported_episodes(info: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(returns float64 [N], lengths int64 [N])`` of the episodes an environment reports
    itself (an :class:`AtariEnv`: whole games, unclipped score; 0 where none ended), or
    ``None`` when it does not, and the trainer's own :class:`~pglab.envs.base.EpisodeTracker`
    (the sum of the rewards it learns from) applies."""
    if "episode_end" not in info:
        return None
    return info["episode_return"], info["episode_length"]

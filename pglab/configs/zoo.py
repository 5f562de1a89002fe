"""RL-Zoo's PPO hyperparameters (``rl_zoo3``'s ``hyperparams/ppo.yml``) as a :class:`PPOConfig`.

``pglab train ppo --zoo ENV_ID`` reads the entry of ``ENV_ID`` from the installed
``rl_zoo3`` package's file (or ``--zoo-file PATH``), as RL-Zoo picks it: the entry named
``ENV_ID``, else ``atari`` for an Atari game, else ``default``. :func:`translate_entry`
turns every key of the entry into :class:`~pglab.configs.ppo.PPOConfig` fields with SB3's
meaning; the fields the entry leaves unset take SB3's defaults
(:data:`~pglab.configs.ppo.SB3_DEFAULTS`). A key pglab cannot express the way SB3 does is
refused: a :class:`~pglab.errors.ConfigError` naming the key (``policy_kwargs.use_expln``),
never dropped.

The YAML file is read with ``yaml.safe_load``; its Python strings (``"dict(pi=[64],
vf=[64])"``, ``"nn.ReLU"``) are read by :mod:`pglab.configs.expressions`, which evaluates
nothing. Gymnasium's registry says whether an id is an Atari game (and how ALE registered
it); nothing here builds an environment or imports torch.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pglab.configs.expressions import Call, Symbol, parse_expression
from pglab.configs.ppo import SB3_DEFAULTS, PPOConfig, value_coef_from_vf_coef
from pglab.errors import ConfigError

ATARI_WRAPPER = "stable_baselines3.common.atari_wrappers.AtariWrapper"
FRAME_STACK_WRAPPER = "gymnasium.wrappers.FrameStackObservation"
ACTIVATION_FNS = {"Tanh": "tanh", "ReLU": "relu", "ELU": "elu", "SiLU": "silu", "GELU": "gelu"}
"""``torch.nn`` activation classes (``nn.ReLU``, ``torch.nn.ReLU``) -> pglab's ``activation``."""

ATARI_WRAPPER_OPTIONS = {
    "noop_max": "noop_max",
    "frame_skip": "frame_skip",
    "terminal_on_life_loss": "episodic_life",
    "clip_reward": "clip_rewards",
    "action_repeat_probability": "repeat_action_probability",
}
"""SB3's ``AtariWrapper`` arguments -> :class:`pglab.envs.atari.AtariEnv`'s options (same defaults;
``screen_size`` must be its 84)."""


@dataclass
class ZooTranslation:
    """An entry as :func:`pglab.run.config.make_config` fields (flat names), and which zoo
    key set each field (errors name the key)."""

    entry: str
    """the entry's name in the file (``ENV_ID``, ``atari`` or ``default``)"""
    fields: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def set(self, key: str, **values: Any) -> None:
        self.fields.update(values)
        self.sources.update(dict.fromkeys(values, key))


def installed_zoo_file() -> Path:
    """``hyperparams/ppo.yml`` of the installed ``rl_zoo3`` (found without importing it)."""
    spec = importlib.util.find_spec("rl_zoo3")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("zoo_file", None, "rl_zoo3 is not installed (pip install 'pglab[zoo]'); pass --zoo-file PATH")
    return Path(next(iter(spec.submodule_search_locations))) / "hyperparams" / "ppo.yml"


def read_zoo_file(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The entries of an RL-Zoo hyperparameter file (default: :func:`installed_zoo_file`)."""
    source = installed_zoo_file() if path is None else Path(path)
    try:
        text = source.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("zoo_file", str(source), f"cannot be read ({exc})") from exc
    return {name: dict(entry) for name, entry in _parsed(str(source), text).items()}


@functools.lru_cache(maxsize=4)
def _parsed(source: str, text: str) -> dict[str, dict[str, Any]]:
    """``text`` read by YAML's safe loader (libyaml's where installed), once per text."""
    try:
        table = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise ConfigError("zoo_file", source, f"is not YAML that pglab reads safely ({yaml_problem(exc)})") from exc
    if not isinstance(table, dict) or not all(isinstance(entry, dict) for entry in table.values()):
        raise ConfigError("zoo_file", source, "must map environment ids to mappings of hyperparameters")
    return table


def yaml_problem(exc: Exception) -> str:
    """A YAML error in one line: what is wrong and where (line and column, from 1)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)  # (ConfigError joins its lines)
    return problem if mark is None else f"{problem} at line {mark.line + 1}, column {mark.column + 1}"


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean X?"`` for the closest of ``known`` to ``name`` (case aside), or ``""``."""
    by_folded = {candidate.lower(): candidate for candidate in known}
    close = difflib.get_close_matches(name.lower(), list(by_folded), n=1, cutoff=0.8)
    return f"; did you mean {by_folded[close[0]]}?" if close else ""


def gym_spec(env_id: str) -> Any:
    """Gymnasium's registration of ``env_id`` (ALE's ids registered first where needed);
    ``None`` when nothing registers it."""
    import gymnasium as gym

    if env_id not in gym.registry:
        try:
            import ale_py

            gym.register_envs(ale_py)
        except ImportError:
            pass
    return gym.registry.get(env_id)


def is_atari(spec: Any) -> bool:
    """RL-Zoo's test: the registered entry point is ALE's ``AtariEnv``."""
    return spec is not None and "AtariEnv" in str(spec.entry_point)


def zoo_entry(env_id: str, table: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """``(name, entry)`` as RL-Zoo picks it: ``env_id``'s, else ``atari``'s for an Atari
    game, else ``default``'s."""
    if env_id in table:
        return env_id, table[env_id]
    if is_atari(gym_spec(env_id)) and "atari" in table:
        return "atari", table["atari"]
    if "default" in table:
        return "default", table["default"]
    raise ConfigError("zoo", env_id, "has no entry in the zoo file (and the file has no 'default')")


def zoo_fields(env_id: str, zoo_file: str | Path | None = None) -> ZooTranslation:
    """The entry RL-Zoo uses for ``env_id`` (:func:`zoo_entry`), translated."""
    table = read_zoo_file(zoo_file)
    if gym_spec(env_id) is None:
        import gymnasium as gym

        hint = did_you_mean(env_id, [*table, *gym.registry])
        raise ConfigError("zoo", env_id, f"is not a registered Gymnasium environment id{hint}")
    name, entry = zoo_entry(env_id, table)
    return translate_entry(env_id, entry, name)


def zoo_config(env_id: str, zoo_file: str | Path | None = None, **overrides: Any) -> PPOConfig:
    """The :class:`PPOConfig` of ``env_id``'s zoo entry: SB3's defaults, the entry's
    translation, then ``overrides`` (flat field names). A field the entry set and
    PPOConfig refuses is reported under the entry's key."""
    from pglab.run.config import make_config

    translation = zoo_fields(env_id, zoo_file)
    try:
        return make_config(PPOConfig, **{**SB3_DEFAULTS, **translation.fields, **overrides})
    except ConfigError as exc:
        raise as_zoo_error(exc, translation) from exc


def as_zoo_error(error: ConfigError, translation: ZooTranslation) -> ConfigError:
    """``error`` under the zoo key that set its field (unchanged for other fields)."""
    key = translation.sources.get(error.field.partition("[")[0])
    if key is None:
        return error
    return ConfigError(key, error.value, f"{error.field} {error.expected} (zoo entry {translation.entry})")


# --------------------------------------------------------------------------------------
# The keys
# --------------------------------------------------------------------------------------
def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(key, value, "must be a number")
    return float(value)


def _integer(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, value, "must be an integer")
    return value


def _boolean(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, value, "must be true or false")
    return value


def _schedule(key: str, value: Any) -> tuple[float, str]:
    """``(initial value, schedule)`` of a number (constant) or ``lin_X`` (linear from X to 0)."""
    if isinstance(value, str):
        kind, _, number = value.partition("_")
        try:
            initial = float(number)
        except ValueError:
            initial = math.nan
        if kind != "lin" or not math.isfinite(initial):
            raise ConfigError(key, value, "must be a number or lin_X (linear from X to 0)")
        return initial, "linear"
    return _number(key, value), "constant"


def _scalar_keys() -> dict[str, Callable[[str, Any, ZooTranslation], None]]:
    """The keys that map onto one or two fields each."""

    def plain(name: str, convert: Callable[[str, Any], Any]) -> Callable[[str, Any, ZooTranslation], None]:
        return lambda key, value, out: out.set(key, **{name: convert(key, value)})

    def schedule(value_name: str, schedule_name: str) -> Callable[[str, Any, ZooTranslation], None]:
        def apply(key: str, value: Any, out: ZooTranslation) -> None:
            initial, kind = _schedule(key, value)
            out.set(key, **{value_name: initial, schedule_name: kind})

        return apply

    def optional_number(key: str, value: Any) -> float | None:
        return None if value is None else _number(key, value)

    return {
        "n_timesteps": plain("total_steps", lambda key, value: int(_number(key, value))),
        "n_envs": plain("num_envs", _integer),
        "n_steps": plain("num_steps", _integer),
        "batch_size": plain("minibatch_size", _integer),
        "n_epochs": plain("ppo_epochs", _integer),
        "gamma": plain("gamma", _number),
        "gae_lambda": plain("gae_lambda", _number),
        "ent_coef": plain("entropy_coef", _number),
        "vf_coef": plain("value_coef", lambda key, value: value_coef_from_vf_coef(_number(key, value))),
        "max_grad_norm": plain("max_grad_norm", _number),
        "normalize_advantage": plain("normalize_advantages", _boolean),
        "target_kl": plain("target_kl", optional_number),
        "use_sde": plain("use_sde", _boolean),
        "sde_sample_freq": plain("sde_sample_freq", _integer),
        "learning_rate": schedule("lr", "lr_schedule"),
        "clip_range": schedule("clip_coef", "clip_schedule"),
    }


REFUSED_KEYS = {
    "clip_range_vf": "SB3 clips the value prediction and takes its loss; pglab's value_clip_coef takes the "
    "larger of the clipped and unclipped losses (CleanRL's form)",
}
"""SB3 ``PPO`` arguments whose meaning pglab does not have, and why."""


def translate_entry(env_id: str, entry: dict[str, Any], name: str | None = None) -> ZooTranslation:
    """``entry`` (one mapping of ``ppo.yml``) for ``env_id`` as PPOConfig fields. Every key
    is translated or refused with a :class:`ConfigError` naming it; the environment keys
    (``env_wrapper``, ``frame_stack``, ``env_kwargs``, ``policy``) are read together."""
    out = ZooTranslation(entry=name or env_id)
    spec = gym_spec(env_id)
    scalars = _scalar_keys()
    environment_keys = {"env_wrapper", "frame_stack", "env_kwargs", "policy"}
    for key, value in entry.items():
        if key in scalars:
            scalars[key](key, value, out)
        elif key == "normalize":
            _normalize(value, entry, out)
        elif key == "policy_kwargs":
            _policy_kwargs(value, out)
        elif key in REFUSED_KEYS:
            raise ConfigError(key, value, f"is not translated: {REFUSED_KEYS[key]}")
        elif key not in environment_keys:
            raise ConfigError(key, value, "is not a key pglab translates from RL-Zoo's PPO hyperparameters")
    if is_atari(spec):
        _atari_environment(env_id, spec, entry, out)
    else:
        _gym_environment(env_id, entry, out)
    return out


# -- normalize ----------------------------------------------------------------------------
NORMALIZE_OPTIONS = {
    "norm_obs": "normalize_obs",
    "norm_reward": "normalize_reward",
    "clip_obs": "clip_obs",
    "clip_reward": "clip_reward",
    "epsilon": "normalize_epsilon",
    "gamma": "normalize_gamma",
}
"""``VecNormalize`` arguments -> PPOConfig fields."""


def _normalize(value: Any, entry: dict[str, Any], out: ZooTranslation) -> None:
    """``normalize: true`` or a mapping of ``VecNormalize`` arguments (possibly a Python
    string). RL-Zoo gives VecNormalize the entry's ``gamma`` where the entry sets one,
    otherwise the mapping's ``gamma``, else VecNormalize's 0.99 (SB3's default ``gamma``
    too): ``normalize_gamma`` is the mapping's gamma where the entry sets none, else
    None, which follows ``gamma`` (a command-line ``--gamma`` included)."""
    if isinstance(value, str):
        value = parse_expression(value, "normalize")
    if value is False:
        out.set("normalize", normalize_obs=False, normalize_reward=False)
        return
    if value is True:
        value = {}
    if not isinstance(value, dict):
        raise ConfigError("normalize", value, "must be true, false or a mapping of VecNormalize arguments")
    options = {"norm_obs": True, "norm_reward": True, "gamma": None, **value}
    for option in options:
        if option not in NORMALIZE_OPTIONS:
            raise ConfigError(f"normalize.{option}", options[option], "is not a VecNormalize argument pglab has")
    for option in ("norm_obs", "norm_reward"):
        _boolean(f"normalize.{option}", options[option])
    if "gamma" in entry:
        options["gamma"] = None  # follows gamma
    out.set("normalize", **{NORMALIZE_OPTIONS[option]: setting for option, setting in options.items()})


# -- policy_kwargs ------------------------------------------------------------------------
POLICY_KWARGS_REFUSED = {
    "squash_output": (False, "pglab clips Box actions at the environment and does not squash them with tanh"),
    "use_expln": (False, "pglab's gSDE takes exp(log_std), not expln"),
    "full_std": (True, "pglab's gSDE learns one log_std per (feature, action) pair (full_std=True)"),
}
"""``policy_kwargs`` accepted at one value only: ``(value pglab has, why not another)``."""


def _policy_kwargs(value: Any, out: ZooTranslation) -> None:
    """``net_arch`` (a list, or ``dict(pi=..., vf=...)``), ``activation_fn``, ``ortho_init``,
    ``log_std_init``; ``full_std`` / ``squash_output`` / ``use_expln`` at pglab's value."""
    kwargs = parse_expression(value, "policy_kwargs") if isinstance(value, str) else value
    if not isinstance(kwargs, dict):
        raise ConfigError("policy_kwargs", value, "must be a mapping, dict(...)")
    for name, setting in kwargs.items():
        key = f"policy_kwargs.{name}"
        if name == "net_arch":
            out.set(key, **_net_arch(key, setting))
        elif name == "activation_fn":
            out.set(key, activation=_activation(key, setting))
        elif name == "ortho_init":
            out.set(key, ortho_init=_boolean(key, setting))
        elif name == "log_std_init":
            out.set(key, log_std_init=_number(key, setting))
        elif name in POLICY_KWARGS_REFUSED:
            supported, why = POLICY_KWARGS_REFUSED[name]
            if setting != supported:
                raise ConfigError(key, setting, why)
        else:
            raise ConfigError(key, setting, "is not a policy argument pglab translates")


def _net_arch(key: str, value: Any) -> dict[str, Any]:
    """SB3 (>= 1.8): a list gives actor and critic the same hidden sizes (separate networks),
    ``dict(pi=..., vf=...)`` each its own."""
    if isinstance(value, dict):
        if set(value) != {"pi", "vf"}:
            raise ConfigError(key, value, "a mapping must hold exactly pi and vf")
        return {"hidden_dims": tuple(value["pi"]), "critic_hidden_dims": tuple(value["vf"])}
    if isinstance(value, (list, tuple)) and not any(isinstance(item, dict) for item in value):
        return {"hidden_dims": tuple(value), "critic_hidden_dims": None}
    raise ConfigError(key, value, "must be a list of layer sizes or dict(pi=[...], vf=[...])")


def _activation(key: str, value: Any) -> str:
    path = value.path if isinstance(value, Symbol) else str(value)
    module, _, name = path.rpartition(".")
    if module not in ("nn", "torch.nn", "th.nn") or name not in ACTIVATION_FNS:
        raise ConfigError(key, path, f"must be one of {', '.join('nn.' + n for n in ACTIVATION_FNS)}")
    return ACTIVATION_FNS[name]


# -- the environment ----------------------------------------------------------------------
def _wrapper_calls(value: Any) -> list[Call]:
    """RL-Zoo's ``env_wrapper``: a name, or a list of names and ``{name: kwargs}`` mappings."""
    items = value if isinstance(value, list) else [value]
    calls = []
    for index, item in enumerate(items):
        where = f"env_wrapper[{index}]" if isinstance(value, list) else "env_wrapper"
        if isinstance(item, dict) and len(item) == 1:
            ((path, kwargs),) = item.items()
            kwargs = {} if kwargs is None else kwargs
        else:
            path, kwargs = item, {}
        if not isinstance(path, str) or "." not in path or not isinstance(kwargs, dict):
            raise ConfigError(where, item, "must be module.Class or {module.Class: {key: value, ...}}")
        calls.append(Call(path, dict(kwargs)))
    return calls


def _frame_stack(entry: dict[str, Any]) -> int:
    """``frame_stack``: frames per observation, 1 (none) when absent, 0 or 1."""
    stack = _integer("frame_stack", entry.get("frame_stack", 1))
    if stack < 0:
        raise ConfigError("frame_stack", stack, "must be >= 0")
    return max(stack, 1)


def _gym_environment(env_id: str, entry: dict[str, Any], out: ZooTranslation) -> None:
    """A Gymnasium id: ``env_wrapper`` around each copy, ``frame_stack`` as the outermost
    wrapper (zero-padded, as ``VecFrameStack``), ``env_kwargs``, ``policy: MlpPolicy``."""
    out.set("policy", env=f"gym:{env_id}")
    if entry.get("policy", "MlpPolicy") != "MlpPolicy":
        raise ConfigError(
            "policy", entry["policy"], "pglab runs MlpPolicy here; its CNN policy reads Atari games' frames only"
        )
    wrappers = [call.source() for call in _wrapper_calls(entry["env_wrapper"])] if "env_wrapper" in entry else []
    if wrappers:
        out.set("env_wrapper", env_wrappers=tuple(wrappers))
    stack = _frame_stack(entry)
    if stack > 1:
        if out.fields.get("normalize_obs"):
            raise ConfigError(
                "frame_stack",
                stack,
                "RL-Zoo stacks normalised frames after VecNormalize; pglab would normalise the stack",
            )
        frame_stack = Call(FRAME_STACK_WRAPPER, {"stack_size": stack, "padding_type": "zero"}).source()
        out.set("frame_stack", env_wrappers=(*wrappers, frame_stack))
    if "env_kwargs" in entry:
        if not isinstance(entry["env_kwargs"], dict):
            raise ConfigError("env_kwargs", entry["env_kwargs"], "must be a mapping")
        out.set("env_kwargs", env_kwargs=dict(entry["env_kwargs"]))


def _atari_environment(env_id: str, spec: Any, entry: dict[str, Any], out: ZooTranslation) -> None:
    """An ALE id with SB3's ``AtariWrapper`` and ``frame_stack``: pglab's Atari env
    (:mod:`pglab.envs.atari`: the wrapper's preprocessing in ALE's C++; docs/atari.md says
    where it differs) with the wrapper's arguments and the registered id's ALE settings,
    and its Nature CNN (``CnnPolicy``)."""
    calls = _wrapper_calls(entry.get("env_wrapper", []))
    if [call.path for call in calls] != [ATARI_WRAPPER]:
        raise ConfigError(
            "env_wrapper", entry.get("env_wrapper"), f"pglab runs {env_id} with {ATARI_WRAPPER}'s preprocessing only"
        )
    if entry.get("policy", "MlpPolicy") != "CnnPolicy":
        raise ConfigError("policy", entry.get("policy", "MlpPolicy"), "pglab runs Atari games with its Nature CNN")
    ale = dict(spec.kwargs)
    if ale.get("frameskip", 1) != 1:
        raise ConfigError(
            "env_wrapper", ATARI_WRAPPER, f"skips frames on top of {env_id}'s own frameskip; use <Game>NoFrameskip-v4"
        )
    options: dict[str, Any] = {"repeat_action_probability": float(ale.get("repeat_action_probability", 0.0))}
    for name in ("full_action_space", "max_num_frames_per_episode"):
        if name in ale:
            options[name] = ale[name]
    for name, setting in calls[0].kwargs.items():
        if name == "screen_size" and setting == 84:
            continue
        if name not in ATARI_WRAPPER_OPTIONS:
            raise ConfigError(f"env_wrapper.{name}", setting, "is not an AtariWrapper argument pglab's Atari env has")
        if name == "action_repeat_probability" and options["repeat_action_probability"] and setting:
            raise ConfigError(f"env_wrapper.{name}", setting, f"adds sticky actions to {env_id}'s own")
        options[ATARI_WRAPPER_OPTIONS[name]] = setting
    options["frame_stack"] = _frame_stack(entry)
    if "env_kwargs" in entry:
        raise ConfigError("env_kwargs", entry["env_kwargs"], "are not passed to pglab's Atari env")
    out.set("policy", env=f"ale:{ale['game']}")
    out.set("env_wrapper", env_kwargs=options)

"""Configs: frozen dataclasses filled from defaults, a YAML file and the command line.

Precedence is ``dataclass defaults < --config file.yaml < command-line flags``. Every
config validates itself in ``__post_init__`` (see :mod:`pglab.validation`), so an invalid
combination cannot be constructed from any of the three sources.

Flags accept both spellings, ``--n_iterations`` (the field's name) and
``--n-iterations`` (tyro's default).
"""

from __future__ import annotations

import dataclasses
import enum
import os
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import yaml

from pglab.errors import ConfigError

ConfigT = TypeVar("ConfigT")


def config_to_dict(config: Any) -> dict[str, Any]:
    """A JSON-ready dict of a config dataclass (tuples become lists, paths strings)."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, enum.Enum):
            return value.value
        return value

    return plain(config)


def _coerce(field: str, annotation: Any, value: Any) -> Any:
    """Convert a YAML/JSON value to ``annotation``'s type, or raise ConfigError."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Any:
        return value
    if origin is typing.Annotated:
        if _omits_prefix(annotation) and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
            # Its flags carry no prefix (--sigma, not --params.sigma): nor do its errors.
            if not isinstance(value, dict):
                raise ConfigError(field, value, f"must be a mapping of {args[0].__name__} fields")
            return config_from_dict(args[0], value, prefix=field.rpartition(".")[0] + "." if "." in field else "")
        return _coerce(field, args[0], value)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in args:
            if option is type(None):
                continue
            try:
                return _coerce(field, option, value)
            except ConfigError as exc:
                errors.append(exc.expected)
        raise ConfigError(field, value, " or ".join(errors) or "has the wrong type")
    if origin is Literal:
        if value not in args:
            raise ConfigError(field, value, f"must be one of {', '.join(map(repr, args))}")
        return value
    if origin in (tuple, list, Sequence, typing.Sequence) or annotation in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(field, value, "must be a list")
        item_type = args[0] if args else Any
        items = [_coerce(f"{field}[{i}]", item_type, v) for i, v in enumerate(value)]
        return list(items) if origin is list else tuple(items)
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):  # built in Python already (make_config)
            return value
        if not isinstance(value, dict):
            raise ConfigError(field, value, f"must be a mapping of {annotation.__name__} fields")
        return config_from_dict(annotation, value, prefix=f"{field}.")
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(field, value, "must be true or false")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(field, value, "must be an integer")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            # YAML reads 1e-3 without a dot as a string; accept numeric strings.
            if isinstance(value, str):
                try:
                    return float(value)
                except ValueError:
                    pass
            raise ConfigError(field, value, "must be a number")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(field, value, "must be a string")
        return value
    if annotation is Path or (isinstance(annotation, type) and issubclass(annotation, os.PathLike)):
        if isinstance(value, os.PathLike):
            return Path(value)
        if not isinstance(value, str):
            raise ConfigError(field, value, "must be a path string")
        return Path(value)
    return value


def config_from_dict(cls: type[ConfigT], mapping: dict[str, Any], *, prefix: str = "") -> ConfigT:
    """Build ``cls`` from a mapping, rejecting unknown keys and ill-typed values."""
    if not isinstance(mapping, dict):
        raise ConfigError(prefix.rstrip(".") or "config", mapping, "must be a mapping of field names to values")
    mapping = _nest(cls, mapping, warn=False, source="")
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cast(Any, cls)) if f.init}
    unknown = sorted(set(mapping) - set(fields))
    if unknown:
        plain = unprefixed_fields(cls)  # list the nested fields by the names a user types
        known = (set(fields) - {dotted.partition(".")[0] for dotted in plain.values()}) | set(plain)
        raise ConfigError(
            f"{prefix}{unknown[0]}", mapping[unknown[0]], f"unknown field; known fields: {', '.join(sorted(known))}"
        )
    for name, value in mapping.items():
        # A partial mapping for a nested config overrides its field's default instance
        # (PSOTSPTrainConfig.update defaults to PSO's own OnPolicyHyperparams, not the class's).
        default = _default_of(fields[name])
        if isinstance(value, dict) and dataclasses.is_dataclass(default):
            mapping = {**mapping, name: {**config_to_dict(default), **value}}
    kwargs = {name: _coerce(f"{prefix}{name}", hints[name], value) for name, value in mapping.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(prefix.rstrip(".") or cls.__name__, mapping, str(exc)) from exc


def _default_of(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def make_config(cls: type[ConfigT], **fields: Any) -> ConfigT:
    """Build ``cls`` from flat keyword arguments, as the command line and YAML name them.

    The fields of an unprefixed nested config go in by their plain names:
    ``make_config(PPOConfig, algo="vpg_gae", gamma=0.9, total_steps=4096)`` sets
    ``config.update.algo`` and ``config.update.gamma``. Values are checked like YAML values
    (unknown names and ill-typed values raise :class:`ConfigError`)."""
    return config_from_dict(cls, fields)


def deprecated_names(cls: type) -> dict[str, str]:
    """Old field names a config still accepts, ``{old: new}`` (``DEPRECATED_NAMES`` on the
    class). ``new`` may be dotted (``ghm.mu``) for a field of a nested config."""
    return dict(getattr(cls, "DEPRECATED_NAMES", {}) or {})


def _omits_prefix(annotation: Any) -> bool:
    """Whether ``annotation`` is ``Annotated[SomeConfig, tyro.conf.OmitArgPrefixes]``: a
    nested config whose flags (and YAML keys) keep their plain names (``--sigma``)."""
    if typing.get_origin(annotation) is not typing.Annotated:
        return False
    import tyro

    return any(marker is tyro.conf.OmitArgPrefixes for marker in typing.get_args(annotation)[1:])


def _field_type(annotation: Any) -> Any:
    """``annotation`` without ``Annotated[...]``."""
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation


def unprefixed_fields(cls: type) -> dict[str, str]:
    """``{leaf: "nested.leaf"}`` for the fields of ``cls``'s nested configs whose names carry
    no prefix on the command line and in YAML (``sigma`` -> ``params.sigma``)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    leaves: dict[str, str] = {}
    for field in dataclasses.fields(cls):
        annotation = hints[field.name]
        if field.init and _omits_prefix(annotation) and dataclasses.is_dataclass(_field_type(annotation)):
            leaves.update(
                {
                    inner.name: f"{field.name}.{inner.name}"
                    for inner in dataclasses.fields(_field_type(annotation))
                    if inner.init
                }
            )
    return leaves


def _nest(cls: type, mapping: dict[str, Any], *, warn: bool, source: str) -> dict[str, Any]:
    """Rename deprecated keys of ``mapping`` (a flat or nested dict) to their new names and
    fold the plain keys of unprefixed nested configs (``sigma``) into their config."""
    renames = {**unprefixed_fields(cls), **deprecated_names(cls)}
    if not renames:
        return mapping
    plain_names = unprefixed_fields(cls)
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        new = renames.get(key)
        if new in plain_names and key not in plain_names:  # rl_mode -> algo -> update.algo
            new = plain_names[new]
        if new is None:
            if isinstance(value, dict):  # a copy: the caller's mapping is not changed
                out[key] = {**out[key], **value} if isinstance(out.get(key), dict) else dict(value)
            else:
                out[key] = value
            continue
        if warn and key not in plain_names:
            _deprecation_note(f"{source} key {key!r} is deprecated; use {deprecated_names(cls)[key]!r}")
        head, dot, tail = new.partition(".")
        if dot:
            inner = out.setdefault(head, {})
            if isinstance(inner, dict):
                inner[tail] = value
        else:
            out[new] = value
    return out


def _deprecation_note(text: str) -> None:
    import sys

    print(f"pglab: note: {text}", file=sys.stderr)


def load_yaml_config(cls: type[ConfigT], path: str | os.PathLike, *, base: ConfigT | None = None) -> ConfigT:
    """Read a YAML file into ``cls``. Keys override ``base`` (or the defaults)."""
    return config_from_dict(cls, _merged_yaml(cls, path, base))


def read_yaml_mapping(path: str | os.PathLike) -> dict[str, Any]:
    """The top-level mapping of a YAML config file, or a ConfigError naming ``config``."""
    from pglab.validation import check_path

    check_path("config", path)
    source = Path(path)
    if source.is_dir():
        raise ConfigError("config", str(source), "is a directory, not a YAML file")
    if not source.exists():
        raise ConfigError("config", str(source), "no such file")
    try:
        text = source.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            "config", str(source), f"cannot be read ({type(exc).__name__}: {getattr(exc, 'strerror', None) or exc})"
        ) from exc
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError("config", str(source), f"is not valid YAML{where}: {getattr(exc, 'problem', exc)}") from exc
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise ConfigError("config", str(source), "must hold a mapping of field names to values at the top level")
    return loaded


def _merged_yaml(cls: type, path: str | os.PathLike, base: Any) -> dict[str, Any]:
    loaded = _nest(cls, read_yaml_mapping(path), warn=True, source=f"config {path}:")
    merged = config_to_dict(base) if base is not None else {}
    for key, value in loaded.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def normalise_flags(argv: Sequence[str]) -> list[str]:
    """``--n_iterations=5`` -> ``--n-iterations=5``; values are left untouched."""
    out = []
    for arg in argv:
        if arg.startswith("--") and len(arg) > 2:
            name, eq, value = arg[2:].partition("=")
            out.append("--" + name.replace("_", "-") + eq + value)
        else:
            out.append(arg)
    return out


def split_config_flag(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """Take ``--config PATH`` (or ``--config=PATH``) out of ``argv``."""
    rest: list[str] = []
    path: str | None = None
    iterator = iter(argv)
    for arg in iterator:
        if arg == "--config":
            path = next(iterator, None)
            if path is None:
                raise ConfigError("config", None, "--config needs a path to a YAML file")
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return path, rest


def _flag_names(cls: type, prefix: str = "") -> dict[str, tuple[str, bool]]:
    """``{flag-name: (dotted field, is_bool)}`` for every field of ``cls`` and of its
    nested config dataclasses (``--ghm.mu``)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    names: dict[str, tuple[str, bool]] = {}
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        annotation = hints[field.name]
        dotted = prefix + field.name
        if dataclasses.is_dataclass(_field_type(annotation)):
            inner = _flag_names(_field_type(annotation), prefix=dotted + ".")
            if _omits_prefix(annotation):  # --sigma sets params.sigma
                inner = {flag.rpartition(".")[2]: entry for flag, entry in inner.items()}
            names.update(inner)
            continue
        names[dotted.replace("_", "-")] = (dotted, annotation is bool)
    return names


def rename_deprecated_flags(cls: type, argv: Sequence[str], *, warn: bool = True) -> list[str]:
    """Rewrite deprecated flag names (``--torch-threads`` -> ``--threads``), one note each."""
    renames = {old.replace("_", "-"): new.replace("_", "-") for old, new in deprecated_names(cls).items()}
    if not renames:
        return list(argv)
    out = []
    for arg in argv:
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            negated = name.startswith("no-") and name[3:] in renames and name not in renames
            base = name[3:] if negated else name
            if base in renames:
                new = renames[base]
                if warn:
                    _deprecation_note(f"--{base} is deprecated; use --{new}")
                head, dot, tail = new.rpartition(".")
                flag = (f"{head}.no-{tail}" if dot else f"no-{new}") if negated else new
                out.append("--" + flag + eq + value)
                continue
        out.append(arg)
    return out


def given_fields(cls: type, argv: Sequence[str]) -> frozenset[str]:
    """Field names set by ``argv`` (already normalised and renamed).

    This is what ``--resume`` applies: a flag counts as given because it is on the
    command line, never because its value differs from the default. A field of a nested
    config is named by its dotted path (``--sigma`` -> ``params.sigma``,
    ``--pixel-goal.grid-size`` -> ``pixel_goal.grid_size``).
    """
    names = _flag_names(cls)
    given = set()
    for arg in argv:
        if not arg.startswith("--") or arg in ("--help", "-h"):
            continue
        name = arg[2:].partition("=")[0]
        entry = names.get(name)
        if entry is None and name.startswith("no-"):
            entry = names.get(name[3:])
        if entry is not None:
            given.add(entry[0])
    return frozenset(given)


def dotted_keys(cls: type, mapping: dict[str, Any], prefix: str = "") -> set[str]:
    """The fields a (nested, already renamed) mapping sets, dotted for nested configs."""
    hints = typing.get_type_hints(cls, include_extras=True)
    keys: set[str] = set()
    for name, value in mapping.items():
        annotation = _field_type(hints[name]) if name in hints else None
        if isinstance(value, dict) and isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
            keys |= dotted_keys(annotation, value, prefix=f"{prefix}{name}.")
        else:
            keys.add(prefix + name)
    return keys


@dataclasses.dataclass(frozen=True)
class ParsedConfig:
    """A parsed command line: the config and the fields the user set (on the command line
    or in the ``--config`` YAML file; dotted for the fields of nested configs)."""

    config: Any
    given: frozenset[str]


def _one_line_parse_errors(argv: Sequence[str] = ()):
    """tyro reports parse errors in a multi-line box; pglab's rule is one line,
    ``pglab: error: FIELD: what is wrong (got VALUE)``, exit 2. tyro's parse-error hook
    (private, hence the exact tyro pin) lets us raise a ConfigError instead. ``argv``
    names the flag in front of a stray value (``--fused-update maybe``)."""
    try:
        from tyro import _errors as tyro_errors
    except ImportError:  # pragma: no cover - another tyro: keep its own output
        import contextlib

        return contextlib.nullcontext()

    def field_of(argument: Any) -> str:
        try:
            flag = argument.lowered.name_or_flags[0]
        except (AttributeError, IndexError, TypeError):
            return "argument"
        return flag.lstrip("-").replace("-", "_")

    def hook(event: Any) -> None:
        if isinstance(event, tyro_errors.InstantiationFailure):
            message = " ".join(str(event.message).split())
            if event.argument is not None and not message.startswith(field_of(event.argument)):
                message = f"{field_of(event.argument)}: invalid value ({message})"
            raise UsageErrorLine(message)
        if isinstance(event, tyro_errors.UnrecognizedArgs):
            flags = [t for t in event.tokens if t.startswith("-")]
            if not flags:
                tokens = list(argv)
                stray = event.tokens[0] if event.tokens else None
                # the last occurrence: an earlier flag may have taken the same text as its value
                position = len(tokens) - 1 - tokens[::-1].index(stray) if stray in tokens else -1
                attached = [t for t in tokens if t.startswith("--") and t.partition("=")[2] == stray]
                if attached or (position > 0 and tokens[position - 1].startswith("--")):
                    # a value given to a switch: booleans are --name / --no-name, with no value
                    flag = (attached[0] if attached else tokens[position - 1]).split("=", 1)[0]
                    name = flag[2:].removeprefix("no-").replace("-", "_")
                    raise UsageErrorLine(
                        f"{name}: {flag} takes no value (got {stray!r}); a true/false option is "
                        f"--{name.replace('_', '-')} or --no-{name.replace('_', '-')}"
                    )
                raise UsageErrorLine(
                    f"argument: unexpected value (got {' '.join(event.tokens)}); see {event.prog} --help"
                )
            name = flags[0].lstrip("-").replace("-", "_")
            raise UsageErrorLine(f"{name}: unknown flag (got {' '.join(event.tokens)}); see {event.prog} --help")
        if isinstance(event, tyro_errors.InvalidChoice):
            raise UsageErrorLine(
                f"{field_of(event.argument)}: must be one of {', '.join(event.choices)} (got {event.value!r})"
            )
        if isinstance(event, tyro_errors.BadValue):
            what = "needs a value" if event.offending_value is None else "does not take a value"
            got = "" if event.offending_value is None else f" (got {event.offending_value!r})"
            raise UsageErrorLine(f"{field_of(event.argument)}: {what}{got}")
        if isinstance(event, tyro_errors.MissingArgs):
            names = ", ".join(field_of(a.arg) for a in event.missing_arguments)
            raise UsageErrorLine(f"{names}: required flag missing; see {event.prog} --help")

    return tyro_errors.on_parse_error(hook)


class UsageErrorLine(ConfigError):
    """A command-line parse error already worded as one line."""

    def __init__(self, message: str):
        self.field, self.value, self.expected = "argument", None, message
        Exception.__init__(self, message)


def parse_flags(
    cls: type[ConfigT],
    argv: Sequence[str],
    *,
    prog: str,
    description: str | None = None,
    base: ConfigT | None = None,
) -> ParsedConfig:
    """Parse ``argv`` into ``cls`` (defaults < ``base`` < ``--config`` YAML < flags) with
    tyro and report which top-level fields the user set (``base``'s are not counted).

    Deprecated flag names are accepted with a one-line note. Every error (unknown flag,
    bad value, invalid combination, bad YAML) raises a :class:`ConfigError`: ``pglab``
    prints it on one line and exits 2. ``--help`` prints the flags and exits 0.
    """
    import tyro

    yaml_path, rest = split_config_flag(list(argv))
    rest = rename_deprecated_flags(cls, normalise_flags(rest))
    kwargs: dict[str, Any] = {}
    given: set[str] = set(given_fields(cls, rest))
    if base is not None:
        kwargs["default"] = base
    if yaml_path is not None:
        kwargs["default"] = load_yaml_config(cls, yaml_path, base=base)
        given.update(dotted_keys(cls, _nest(cls, read_yaml_mapping(yaml_path), warn=False, source="")))
    with _one_line_parse_errors(argv):
        config = tyro.cli(cls, args=rest, prog=prog, description=description, **kwargs)
    return ParsedConfig(config, frozenset(given))


def parse_config(cls: type[ConfigT], argv: Sequence[str], *, prog: str, description: str | None = None) -> ConfigT:
    """:func:`parse_flags` without the set of given fields."""
    return parse_flags(cls, argv, prog=prog, description=description).config

"""Configs: frozen dataclasses filled from defaults, a YAML file and the command line.

Precedence is ``dataclass defaults < --config file.yaml < command-line flags``. Every
config validates itself in ``__post_init__`` (see :mod:`pglab.validation`), so an invalid
combination cannot be constructed from any of the three sources.

Flags accept both spellings, ``--n_iterations`` (as in the design notes) and
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
from typing import Any, Literal, TypeVar

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
    if dataclasses.is_dataclass(annotation):
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
        if not isinstance(value, str):
            raise ConfigError(field, value, "must be a path string")
        return Path(value)
    return value


def config_from_dict(cls: type[ConfigT], mapping: dict[str, Any], *, prefix: str = "") -> ConfigT:
    """Build ``cls`` from a mapping, rejecting unknown keys and ill-typed values."""
    if not isinstance(mapping, dict):
        raise ConfigError(prefix.rstrip(".") or "config", mapping, "must be a mapping of field names to values")
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(mapping) - set(fields))
    if unknown:
        raise ConfigError(f"{prefix}{unknown[0]}", mapping[unknown[0]], f"unknown field; known fields: {', '.join(sorted(fields))}")
    kwargs = {name: _coerce(f"{prefix}{name}", hints[name], value) for name, value in mapping.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(prefix.rstrip(".") or cls.__name__, mapping, str(exc)) from exc


def load_yaml_config(cls: type[ConfigT], path: str | os.PathLike, *, base: ConfigT | None = None) -> ConfigT:
    """Read a YAML file into ``cls``. Keys override ``base`` (or the defaults)."""
    source = Path(path)
    if not source.is_file():
        raise ConfigError("config", str(source), "no such file")
    try:
        loaded = yaml.safe_load(source.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError("config", str(source), f"is not valid YAML{where}: {getattr(exc, 'problem', exc)}") from exc
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise ConfigError("config", str(source), "must hold a mapping of field names to values at the top level")
    merged = config_to_dict(base) if base is not None else {}
    merged.update(loaded)
    return config_from_dict(cls, merged)


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


def parse_config(cls: type[ConfigT], argv: Sequence[str], *, prog: str, description: str | None = None) -> ConfigT:
    """Parse ``argv`` into ``cls`` (defaults < ``--config`` YAML < flags) with tyro.

    Unknown flags and invalid values make tyro print a message and raise
    ``SystemExit(2)``; a bad YAML file raises :class:`ConfigError` (also exit code 2).
    """
    import tyro

    yaml_path, rest = split_config_flag(list(argv))
    kwargs: dict[str, Any] = {}
    if yaml_path is not None:
        kwargs["default"] = load_yaml_config(cls, yaml_path)
    return tyro.cli(cls, args=normalise_flags(rest), prog=prog, description=description, **kwargs)

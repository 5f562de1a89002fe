"""Python-like expressions in config values, read without running them.

RL-Zoo's hyperparameter files hold Python source in strings (``"dict(pi=[64], vf=[64])"``,
``"nn.ReLU"``) and name classes by import path (``rl_zoo3.wrappers.FrameSkip``); pglab's
``env_wrappers`` field names wrappers as ``"module.Class"`` or
``"module.Class(key=value, ...)"``. :func:`parse_expression` reads such text with
:mod:`ast` and builds the value from an allow-list of node types: literals (numbers,
strings, booleans, ``None``, lists, tuples, dicts), ``dict(key=value, ...)``, dotted names
(a :class:`Symbol`, never looked up here) and calls of a dotted name with keyword
arguments (a :class:`Call`, never made here). Nothing is evaluated; anything else
(arithmetic, comprehensions, positional arguments, attribute access on a call) is a
:class:`~pglab.errors.ConfigError` naming the field.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from pglab.errors import ConfigError


@dataclass(frozen=True)
class Symbol:
    """A dotted name as written (``nn.ReLU``, ``rl_zoo3.wrappers.FrameSkip``)."""

    path: str


@dataclass(frozen=True)
class Call:
    """A dotted name called with keyword arguments (``FrameSkip(skip=2)``)."""

    path: str
    kwargs: dict[str, Any]

    def source(self) -> str:
        """The call as text that :func:`parse_expression` reads back to an equal ``Call``."""
        if not self.kwargs:
            return self.path
        arguments = ", ".join(f"{key}={value!r}" for key, value in self.kwargs.items())
        return f"{self.path}({arguments})"


def parse_expression(text: str, field: str) -> Any:
    """The value of ``text`` (see the module docstring); ``field`` names it in errors."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ConfigError(field, text, f"is not a Python expression ({exc.msg})") from exc
    return _value(tree.body, field, text)


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of attribute accesses on a name, else ``None``."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _value(node: ast.expr, field: str, text: str) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _value(node.operand, field, text)
        if isinstance(operand, (int, float)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    elif isinstance(node, (ast.List, ast.Tuple)):
        items = [_value(item, field, text) for item in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    elif isinstance(node, ast.Dict):
        keys = [key for key in node.keys if key is not None]  # None: a ``**mapping`` entry
        if len(keys) == len(node.values):
            return {_value(k, field, text): _value(v, field, text) for k, v in zip(keys, node.values, strict=True)}
    elif isinstance(node, (ast.Name, ast.Attribute)) and (path := _dotted(node)) is not None:
        return Symbol(path)
    elif isinstance(node, ast.Call) and (path := _dotted(node.func)) is not None:
        if node.args or any(keyword.arg is None for keyword in node.keywords):
            raise ConfigError(field, text, f"{path}(...) takes keyword arguments only here")
        kwargs = {str(keyword.arg): _value(keyword.value, field, text) for keyword in node.keywords}
        return kwargs if path == "dict" else Call(path, kwargs)
    raise ConfigError(
        field,
        text,
        f"holds {ast.unparse(node)!r}: only literals, dict(...), dotted names and calls with keyword "
        "arguments are read (nothing is evaluated)",
    )


def parse_call(text: str, field: str) -> Call:
    """``module.Name`` or ``module.Name(key=value, ...)`` as a :class:`Call` (no arguments
    for the bare name): how ``env_wrappers`` names a class and its keyword arguments."""
    value = parse_expression(text, field) if isinstance(text, str) else text
    if isinstance(value, Symbol):
        value = Call(value.path, {})
    if not isinstance(value, Call) or "." not in value.path:
        raise ConfigError(field, text, "must name a class by import path: module.Class or module.Class(key=value, ...)")
    return value


def check_plain_data(field: str, value: Any) -> None:
    """``value`` is JSON-like data (strings, numbers, booleans, None, lists and string-keyed
    mappings of them), as a config file can hold and ``config.json`` can store."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check_plain_data(f"{field}[{index}]", item)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(field, key, "keys must be strings")
            check_plain_data(f"{field}.{key}", item)
        return
    raise ConfigError(field, value, "must hold strings, numbers, booleans, None, lists and mappings only")

"""Report every function in the given folders longer than a screen (`make lint`).

A function's length counts from its ``def`` line (decorators excluded) to its last line,
docstring included. Exit status 1 when any function is longer than ``--max`` lines.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def long_functions(root: Path, limit: int) -> list[tuple[str, int, str, int]]:
    """``(path, line, name, length)`` for each function under ``root`` longer than ``limit``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    found.append((str(path), node.lineno, node.name, length))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--max", type=int, default=80, help="the longest function allowed, in lines")
    args = parser.parse_args(argv)
    found = [item for folder in args.folders for item in long_functions(folder, args.max)]
    for path, line, name, length in sorted(found, key=lambda item: -item[3]):
        print(f"{path}:{line}: {name} is {length} lines (at most {args.max})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

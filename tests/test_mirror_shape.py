"""The mirror of burn-autodiff (``sim/autodiff``) reads like burn: no function or method
is longer than 60 lines (burn's longest runtime functions are ~40), so a reader can lay
each beside its Rust counterpart; what the simulator adds (costs, compressed runs) sits
behind helpers, not inside the mirrored bodies."""

from __future__ import annotations

import ast
from pathlib import Path

import sim.autodiff

MIRROR = Path(sim.autodiff.__file__).parent
MAX_LINES = 60


def _functions(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1


def test_no_mirror_function_over_60_lines():
    long = [f"{path.name}:{line} {name} ({n} lines)"
            for path in sorted(MIRROR.glob("*.py"))
            for name, line, n in _functions(path) if n > MAX_LINES]
    assert not long, "over 60 lines: " + ", ".join(long)

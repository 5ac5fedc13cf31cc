"""The mirror of burn-autodiff (``sim/burn``: ``runtime/``, ``graph/``, ``ops``,
``op_facts``, ``checkpoint``) reads like burn: no function or method
is longer than 60 lines (burn's longest runtime functions are ~40), so a reader can lay
each beside its Rust counterpart; what the simulator adds (costs, compressed runs) sits
behind helpers, not inside the mirrored bodies. The mirror never asks which allocator
runs (a glibc arena or a size-class one): that is behind the heap's interface and the
two modules that are not burn (``runs``, ``pass_blocks``)."""

from __future__ import annotations

import ast
from pathlib import Path

import sim.burn

BURN = Path(sim.burn.__file__).parent
#: burn-autodiff's mirror: the burn layer less the API workloads use (burn-tensor,
#: burn-nn, burn-optim) and the inner backend's buffers (burn-flex)
MIRROR = sorted(p for p in BURN.rglob("*.py")
                if p.name not in {"tensor.py", "nn.py", "optim.py", "backend.py"})
MAX_LINES = 60
#: the modules of the mirror that are not a mirror of burn's code
NOT_MIRRORED = {"runs.py", "pass_blocks.py", "__init__.py"}
#: attributes that tell the allocator's kind
ALLOCATOR_KIND = {"orders_frees", "bulk_exact", "arena", "_arena", "allocator"}


def _functions(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1


def test_no_mirror_function_over_60_lines():
    long = [f"{path.name}:{line} {name} ({n} lines)"
            for path in MIRROR
            for name, line, n in _functions(path) if n > MAX_LINES]
    assert not long, "over 60 lines: " + ", ".join(long)


def test_the_mirror_never_branches_on_the_allocator():
    found = [f"{path.name}:{node.lineno} .{node.attr}"
             for path in MIRROR if path.name not in NOT_MIRRORED
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Attribute) and node.attr in ALLOCATOR_KIND]
    assert not found, "the allocator's kind asked in the mirror: " + ", ".join(found)


def test_the_mirror_is_found():
    names = {p.relative_to(BURN).as_posix() for p in MIRROR}
    assert {"runtime/graph.py", "runtime/server.py", "runtime/memory_management.py",
            "graph/node.py", "graph/traversal.py", "ops.py", "checkpoint.py"} <= names

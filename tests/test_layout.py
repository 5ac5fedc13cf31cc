"""The package's layout: no import cycle in sim/, and layers that import one way.

Every import counts, at module level and inside functions (an import moved into a function
still makes the modules depend on each other). The layers, lowest first: platform, burn,
policies, engine, analysis, output, commands; a module imports from its own layer and the
layers below, and the base modules (errors, units, paths, userfile) from no layer.
"""

import ast
from pathlib import Path

import networkx as nx

SIM = Path(__file__).resolve().parent.parent / "sim"

LAYERS = ["platform", "burn", "policies", "engine", "analysis", "output", "commands"]
#: the modules below every layer, importable from all of them
BASE = {"sim", "sim.errors", "sim.units", "sim.paths", "sim.userfile"}
#: the names users' workload and policy files import (``from sim.tensor import Tensor``):
#: each re-exports the burn layer's module of that name, and no module of sim imports it
API = {"sim.tensor": "sim.burn.tensor", "sim.nn": "sim.burn.nn", "sim.optim": "sim.burn.optim"}


def _modules():
    mods = {}
    for path in sorted(SIM.rglob("*.py")):
        parts = list(path.relative_to(SIM.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _owner(name, mods):
    while name not in mods:
        name = name.rsplit(".", 1)[0]
    return name


def import_graph():
    """``networkx.DiGraph`` of sim's modules: an edge per module another imports (the
    module a ``from P import m`` names when ``P.m`` is a module, else ``P``)."""
    mods = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(mods)
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in mods else module
                           for a in node.names]
            else:
                continue
            for target in targets:
                if target == "sim" or target.startswith("sim."):
                    target = _owner(target, mods)
                    if target != name:
                        graph.add_edge(name, target, line=node.lineno)
    return graph


def layer_of(module):
    """Index of ``module``'s layer in :data:`LAYERS`, -1 for a base module, None for
    a module in no layer (an :data:`API` name sits above them all)."""
    if module in BASE:
        return -1
    if module in API:
        return len(LAYERS)
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_no_import_cycle():
    graph = import_graph()
    cycles = [nx.find_cycle(graph.subgraph(c)) for c in nx.strongly_connected_components(graph)
              if len(c) > 1]
    assert not cycles, "import cycles (module:line -> module):\n" + "\n".join(
        ", ".join(f"{a}:{graph.edges[a, b]['line']} -> {b}" for a, b in cycle)
        for cycle in cycles)


def test_layers_import_downwards():
    graph = import_graph()
    upward = [f"{a}:{graph.edges[a, b]['line']} -> {b}" for a, b in graph.edges
              if layer_of(a) is not None and layer_of(b) is not None
              and layer_of(a) < layer_of(b)]
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_every_module_has_a_layer():
    assert [m for m in import_graph() if layer_of(m) is None] == []


def test_the_api_names_only_re_export_and_nothing_inside_imports_them():
    graph = import_graph()
    for alias, module in API.items():
        assert list(graph.successors(alias)) == [module]
        assert list(graph.predecessors(alias)) == []

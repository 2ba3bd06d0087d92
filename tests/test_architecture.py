"""The shape docs/architecture.md promises: imports run one way between the layers (imports
inside functions and ``importlib.import_module`` counted), no cycle, and no module or
function grown past the sizes a reader can hold."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "mpidwe"

# bottom to top: a module may import from its own layer or a lower one
LAYERS = {
    "mpidwe.version": 0, "mpidwe.core": 1, "mpidwe.kernels": 2, "mpidwe.io": 3, "mpidwe.parallel": 4,
    "mpidwe.evaluate": 5, "mpidwe.synth": 5, "mpidwe.preprocess": 6, "mpidwe.train": 7, "mpidwe.api": 8,
    "mpidwe.evaluate.cli": 9, "mpidwe.evaluate.__main__": 9, "mpidwe.inspect": 9, "mpidwe.demo": 9,
    "mpidwe.cli": 9, "mpidwe.warm": 9, "mpidwe": 10,
}
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 100
LONG_FUNCTION_LINES, MAX_LONG_FUNCTIONS = 60, 5
MANY_PARAMETERS, MAX_MANY_PARAMETER_FUNCTIONS = 8, 3


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _layer(module: str) -> int:
    while module not in LAYERS:
        module = module.rsplit(".", 1)[0]
    return LAYERS[module]


def _resolve(importer: str, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The mpidwe modules an import statement loads (a name that is a module counts as one)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names if a.name.split(".")[0] == "mpidwe"]
    else:
        if node.level:
            base = importer.split(".")
            if not MODULES[importer].name == "__init__.py":
                base = base[:-1]
            base = base[:len(base) - node.level + 1]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        if module.split(".")[0] != "mpidwe":
            return []
        names = [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module for a in node.names]
    out = []
    for name in names:
        while name not in MODULES and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in MODULES and name != importer:
            out.append(name)
    return out


def _imports() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps.update(_resolve(name, node))
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
                  and node.args and isinstance(node.args[0], ast.Constant)):
                target = node.args[0].value
                target = "mpidwe" + target if target.startswith(".") else target
                if target in MODULES:
                    deps.add(target)
        graph[name] = deps
    return graph


def _functions():
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                if a.args and a.args[0].arg in ("self", "cls"):
                    n -= 1
                yield f"{path.relative_to(PKG.parent)}:{node.lineno} {node.name}", node.end_lineno - node.lineno + 1, n


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, or None (depth-first search with colours)."""
    colour, stack = {}, []

    def visit(v):
        colour[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if colour.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in colour:
                found = visit(w)
                if found:
                    return found
        colour[v] = 2
        stack.pop()
        return None

    for v in sorted(graph):
        if v not in colour:
            found = visit(v)
            if found:
                return found
    return None


def test_the_import_graph_has_no_cycle():
    assert _cycle(_imports()) is None


def test_imports_run_down_the_layers():
    upward = [f"{a} -> {b}" for a, deps in _imports().items() for b in deps if _layer(b) > _layer(a)]
    assert not upward, "imports that run up a layer (docs/architecture.md):\n" + "\n".join(sorted(upward))


def test_the_checker_sees_a_cycle_and_an_upward_import():
    """The two checks above would fail on a tree that has what they forbid."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    assert _layer("mpidwe.core.vocab") < _layer("mpidwe.parallel.sharded") < _layer("mpidwe.train.loop")
    assert "mpidwe.train.runner" in _imports()["mpidwe.train.follow"]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_over_600_lines(name):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{name} has {lines} lines"


def test_functions_stay_short_and_take_few_parameters():
    functions = list(_functions())
    assert len(functions) > 500
    too_long = [(where, n) for where, n, _ in functions if n > MAX_FUNCTION_LINES]
    long_ = [(where, n) for where, n, _ in functions if n > LONG_FUNCTION_LINES]
    many = [(where, p) for where, _, p in functions if p > MANY_PARAMETERS]
    assert not too_long, too_long
    assert len(long_) <= MAX_LONG_FUNCTIONS, long_
    assert len(many) <= MAX_MANY_PARAMETER_FUNCTIONS, many

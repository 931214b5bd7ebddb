"""The house's shape: imports point down only, with no cycles, and privates stay private.

Read from the source with ``ast`` (lazy imports inside functions count too), against
the floors below. A module may import from its own floor or lower, never higher.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOORS = {
    0: ["kernel"],
    1: ["tuner.problem", "tuner.status", "tuner.gpus", "tuner.space", "tuner.cli", "tuner.outcome"],
    2: ["tuner.budget", "tuner.study", "tuner.store", "tuner.studies"],
    3: ["tuner.gate", "tuner.runner", "tuner.search", "tuner.records", "tuner.finalists", "tuner.stages",
        "tuner.budget_only",
        "tuner.report"],
    4: ["tuner.driver", "tuner.emit", "tuner.dashboard", "tuner.verify", "tuner.profile"],
    5: ["tuner.sweep", "tuner.__main__", "tuner.bench_search", "tuner.bench_timing", "tuner.bench_store"],
}
MAX_LINES = 400
# Longer than MAX_LINES on purpose, each with the reason at its top.
LONG_ON_PURPOSE = {"kernel/flash_fwd.py"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(list((ROOT / "tuner").rglob("*.py")) + list((ROOT / "kernel").rglob("*.py"))):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _floor(module: str) -> int:
    for floor, prefixes in FLOORS.items():
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return floor
    raise AssertionError(f"{module} has no floor in tests/test_imports.py: add it where it belongs")


def _imports(module: str) -> set[str]:
    """Project modules that ``module`` imports, resolved to the deepest existing module."""
    tree = ast.parse(MODULES[module].read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
    resolved = set()
    for name in names:
        parts = name.split(".")
        while parts and ".".join(parts) not in MODULES:
            parts.pop()
        if parts and parts[0] in ("tuner", "kernel"):
            resolved.add(".".join(parts))
    return resolved - {module}


def _graph() -> dict[str, set[str]]:
    # The packages' own __init__ files are facades that re-export their floors; they are
    # left out, but what imports *them* is resolved to the submodule it names.
    return {m: {t for t in _imports(m) if t not in ("tuner", "kernel")} for m in MODULES if m not in ("tuner",)}


def test_imports_point_down_only():
    upward = [f"{m} (floor {_floor(m)}) imports {t} (floor {_floor(t)})"
              for m, targets in _graph().items() for t in targets if _floor(t) > _floor(m)]
    assert not upward, "\n".join(upward)


def test_there_is_no_import_cycle():
    graph = _graph()
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path + [node, target]
            if target not in state:
                found = visit(target, path + [node])
                if found:
                    return found
        state[node] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module, [])
            assert cycle is None, " -> ".join(cycle)


def test_the_kernel_never_imports_the_tuner():
    assert not [(m, t) for m, ts in _graph().items() if m.startswith("kernel") for t in ts if t.startswith("tuner")]


def _private_package(name: str) -> str | None:
    """The package whose private module ``name`` is (``tuner.store._tables`` -> ``tuner.store``), else None."""
    parts = name.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def test_nothing_outside_a_package_imports_its_private_modules():
    offenders = [(m, t) for m, ts in _graph().items() for t in ts
                 if _private_package(t) and not (m + ".").startswith(_private_package(t) + ".")]
    tests = [(p.name, line) for p in (ROOT / "tests").glob("test_*.py") if p.name != "test_imports.py"
             for line in p.read_text().splitlines() if line.lstrip().startswith(("import ", "from "))
             and any(_private_package(word) for word in line.replace(",", " ").split() if word.startswith("tuner."))]
    assert not offenders and not tests, offenders + tests


def test_the_private_module_rule_sees_private_modules():
    assert _private_package("tuner.store._tables") == "tuner.store"
    assert _private_package("tuner.budget._compile") == "tuner.budget"
    assert _private_package("tuner.store") is None and _private_package("tuner.__main__") is None


def test_modules_and_functions_stay_small():
    too_long = []
    for path in MODULES.values():
        relative = str(path.relative_to(ROOT))
        lines = path.read_text().count("\n")
        if lines > MAX_LINES and relative not in LONG_ON_PURPOSE:
            too_long.append(f"{relative}: {lines} lines")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > 60 and "# long on purpose" not in ast.get_source_segment(path.read_text(), node):
                    too_long.append(f"{relative}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, "\n".join(too_long)
    for relative in LONG_ON_PURPOSE:
        assert "longer than our ~400-line rule" in (ROOT / relative).read_text()[:2000]

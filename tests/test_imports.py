"""The house's shape: imports point down only, with no cycles, and privates stay private.

Read from the source with ``ast`` (lazy imports inside functions count too), against
the floors below. A module may import from its own floor or lower, never higher; and no
two packages may import each other, however many modules the loop passes through
(:func:`find_cycle` over the graph of packages as well as of modules). Modules stay under
:data:`MAX_LINES` lines and functions under :data:`MAX_FUNCTION_LINES`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kernel", "tuner", "benchmarks")
FLOORS = {
    # kernel/: what the GPU is, stopwatches and references; the checks; the Triton kernels, which never
    # import Gluon; the Gluon kernels; the route between them; the entry points.
    0: ["kernel.arch", "kernel.measure", "kernel.reference", "kernel.gluon.smem", "kernel.route_table",
        "kernel.candidates"],
    1: ["kernel.checks"],
    2: ["kernel.triton"],
    3: ["kernel.gluon"],
    4: ["kernel.route"],
    5: ["kernel.forward", "kernel.backward", "kernel.autograd"],
    6: ["tuner.problem", "tuner.status", "tuner.gpus", "tuner.space", "tuner.formatting", "tuner.outcome",
        "tuner.store", "tuner.studies", "tuner.gate", "tuner.counters", "tuner.trace", "tuner.spawn",
        "tuner.console", "tuner.paths", "tuner.restrictions"],
    7: ["tuner.kernels", "tuner.worker_rounds", "tuner.samplers", "tuner.pipeline"],
    8: ["tuner.study", "tuner.budget", "tuner.search", "tuner.pre_gpu_stages", "tuner.runner", "tuner.sweep_args",
        "tuner.retry"],
    9: ["tuner.records", "tuner.finalists", "tuner.winners", "tuner.report", "tuner.contenders"],
    10: ["tuner.driver", "tuner.budget_only", "tuner.emit", "tuner.verify", "tuner.dashboard", "tuner.profile"],
    11: ["tuner.sweep", "tuner.__main__", "tuner.commands", "tuner.outputs"],
    12: ["benchmarks"],
}

MAX_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")):
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


def imports_of(source: str, modules=MODULES) -> set[str]:
    """Project modules a source imports (anywhere in it: lazy imports too), resolved to the deepest existing module."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # "from a.b import c": the module a.b.c where there is one, else a name of a.b
            names |= {f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                      for alias in node.names}
    resolved = set()
    for name in names:
        parts = name.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        if parts and parts[0] in PACKAGES:
            resolved.add(".".join(parts))
    return resolved


def _graph() -> dict[str, set[str]]:
    # The packages' own __init__ files are facades that re-export their floors; they are
    # left out, but what imports *them* is resolved to the submodule it names.
    return {m: {t for t in imports_of(path.read_text()) - {m} if t not in PACKAGES}
            for m, path in MODULES.items() if m not in PACKAGES}


def package_of(module: str) -> str:
    """The unit a loop must not span: a package of ``tuner`` (``tuner.profile``), a top-level
    module of ``tuner`` (``tuner.emit``), or ``kernel`` and ``benchmarks`` whole."""
    parts = module.split(".")
    if parts[0] != "tuner" or len(parts) < 2:
        return parts[0]
    package = ".".join(parts[:2])
    return package if (ROOT / "tuner" / parts[1]).is_dir() else module


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    collapsed: dict[str, set[str]] = {}
    for module, targets in graph.items():
        edges = collapsed.setdefault(package_of(module), set())
        edges |= {package_of(t) for t in targets} - {package_of(module)}
    return collapsed


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A path that comes back to where it started, or None (depth-first search)."""
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

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node, [])
            if cycle:
                return cycle
    return None


def test_imports_point_down_only():
    upward = [f"{m} (floor {_floor(m)}) imports {t} (floor {_floor(t)})"
              for m, targets in _graph().items() for t in targets if _floor(t) > _floor(m)]
    assert not upward, "\n".join(upward)


def test_there_is_no_import_cycle_between_modules():
    cycle = find_cycle(_graph())
    assert cycle is None, " -> ".join(cycle)


def test_there_is_no_import_cycle_between_packages():
    """Two packages on one floor may import each other lazily without a module-level cycle
    (``tuner.dashboard`` and ``tuner.profile`` once did): the package graph shows it."""
    cycle = find_cycle(package_graph(_graph()))
    assert cycle is None, " -> ".join(cycle)


def test_the_checker_finds_a_planted_loop_through_lazy_imports():
    graph = {m: set(targets) for m, targets in _graph().items()}
    # planted: a function of the dashboard importing the profile, which rebuilds the dashboards
    planted = imports_of("def page():\n    from tuner.profile._run import verdict_lines\n")
    graph["tuner.dashboard._profile_page"] |= planted
    assert planted == {"tuner.profile._run"}
    assert find_cycle(graph) is None                         # no module imports itself back...
    cycle = find_cycle(package_graph(graph))                 # ...but the two packages do
    assert cycle is not None and {"tuner.dashboard", "tuner.profile"} <= set(cycle)
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_kernel_never_imports_the_tuner_and_nothing_imports_the_benchmarks():
    graph = _graph()
    assert not [(m, t) for m, ts in graph.items() if m.startswith("kernel") for t in ts if t.startswith("tuner")]
    assert not [(m, t) for m, ts in graph.items() if not m.startswith("benchmarks") for t in ts
                if t.startswith("benchmarks")]


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
    tests = [(p.name, line) for p in (ROOT / "tests").rglob("test_*.py") if p.name != "test_imports.py"
             for line in p.read_text().splitlines() if line.lstrip().startswith(("import ", "from "))
             and any(_private_package(word) for word in line.replace(",", " ").split() if word.startswith("tuner."))]
    assert not offenders and not tests, offenders + tests


def test_the_private_module_rule_sees_private_modules():
    assert _private_package("tuner.store._tables") == "tuner.store"
    assert _private_package("tuner.budget._compile") == "tuner.budget"
    assert _private_package("tuner.store") is None and _private_package("tuner.__main__") is None


def private_kernel_names(source: str) -> list[str]:
    """Private names of ``kernel`` a source uses: ``from kernel.x import _y``, and ``x._y`` where
    ``x`` is ``kernel`` or a module of it (``kernel.triton.fwd._flash_fwd_kernel``)."""
    tree = ast.parse(source)
    used, modules = [], {"kernel"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "kernel":
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    used.append(f"{node.module}.{alias.name}")
                elif f"{node.module}.{alias.name}" in MODULES or node.module == "kernel":
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules |= {alias.asname or alias.name.split(".")[0] for alias in node.names
                        if alias.name.split(".")[0] == "kernel"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in modules:
                used.append(f"{ast.unparse(node.value)}.{node.attr}")
    return used


def test_the_tuner_and_the_benchmarks_use_no_private_name_of_the_kernel():
    """``kernel`` publishes what the rest needs (its knob table, JIT functions, checks, launch plans)."""
    sources = [p for package in ("tuner", "benchmarks", "scripts") for p in (ROOT / package).rglob("*.py")]
    offenders = [(str(p.relative_to(ROOT)), name) for p in sources for name in private_kernel_names(p.read_text())]
    assert not offenders, offenders
    planted = ("from kernel.triton.fwd import _attend_tiles\nimport kernel.triton.fwd as ff\n"
               "from kernel.triton import launch\n"
               "x = ff._PLANS, kernel.triton.fwd._flash_fwd_kernel, launch._busy, ff.KNOBS, ff.__name__\n")
    assert private_kernel_names(planted) == ["kernel.triton.fwd._attend_tiles", "ff._PLANS",
                                             "kernel.triton.fwd._flash_fwd_kernel", "launch._busy"]


def test_modules_and_functions_stay_small():
    too_long = []
    sources = list(MODULES.values()) + sorted((ROOT / "scripts").glob("*.py"))
    for path in sources:
        relative, text = str(path.relative_to(ROOT)), path.read_text()
        if text.count("\n") > MAX_LINES:
            too_long.append(f"{relative}: {text.count(chr(10))} lines > {MAX_LINES}")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{relative}:{node.lineno} {node.name}: {length} lines > {MAX_FUNCTION_LINES}")
    assert not too_long, "\n".join(too_long)


# ------------------------------------------------------------------ the layout's bars (issue 41)


def test_kernels_top_level_holds_entry_points_route_and_arch_and_no_gluon_module():
    top = sorted(p.stem for p in (ROOT / "kernel").glob("*.py") if p.stem != "__init__")
    assert len(top) <= 14 and not [name for name in top if "gluon" in name], top
    assert {"arch", "route", "forward", "backward", "autograd"} <= set(top)
    for package in ("triton", "gluon", "gluon/fwd", "gluon/bwd", "measure"):
        assert (ROOT / "kernel" / package / "__init__.py").is_file(), package


HOPPER_TEST = r"(capability|cap)\w*\s*(//\s*10|[<>]=?\s*(90|100|120)\b|[=!]=\s*(9|90)\b)|\b(90|9)\s*<=?\s*\w*capability"


def hopper_tests(source: str) -> list[str]:
    """Lines that decide "is this GPU a Hopper / TMA / wgmma?" by comparing a capability with a number."""
    import re

    return [line.strip() for line in source.splitlines() if re.search(HOPPER_TEST, line)]


def test_the_hopper_test_is_written_in_kernel_arch_only():
    """kernel.arch answers what the GPU is and can do; every other module of kernel/ and tuner/ asks it."""
    found = {str(p.relative_to(ROOT)): hopper_tests(p.read_text()) for package in ("kernel", "tuner")
             for p in (ROOT / package).rglob("*.py")}
    assert [path for path, lines in found.items() if lines] == ["kernel/arch.py"], found
    assert hopper_tests("if gpu.capability // 10 != HOPPER:") and hopper_tests("hopper = 90 <= capability < 100")
    assert hopper_tests("if gpu.capability < 90:") and not hopper_tests("if is_hopper(gpu.capability):")


def test_no_test_class_is_defined_in_two_files():
    """One set of fakes (tests/gluon_fakes.py and the like), not copies that drift apart."""
    where: dict[str, set[str]] = {}
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, set()).add(path.name)
    assert not {name: files for name, files in where.items() if len(files) > 1}

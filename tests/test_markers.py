"""The GPU suite's markers: a test that times or profiles the GPU is marked ``timing`` (and ``gpu``), so that
the parallel run of the rest (``pytest -m "gpu and not timing" -n 12``) never runs it beside other tests."""

from __future__ import annotations

import ast

from conftest import ROOT

# What a test calls when it measures the GPU: the timers (kernel.measure), their rounds, the profiler, a sweep.
TIMERS = {"do_bench", "do_bench_median", "gpu_time", "host_us", "elapsed_time", "adaptive_rounds", "Rounds",
          "find_ncu", "sweep.main"}


def _marks(node: ast.FunctionDef) -> set[str]:
    return {d.attr for d in node.decorator_list if isinstance(d, ast.Attribute)
            and isinstance(d.value, ast.Attribute) and d.value.attr == "mark"}


def _tests():
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        module = ast.parse(path.read_text())
        file_marks = {ast.unparse(n) for n in module.body if isinstance(n, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)}
        for node in ast.walk(module):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                yield path.relative_to(ROOT), node, _marks(node) | ({"gpu"} if any("gpu" in m for m in file_marks)
                                                                   else set())


def test_every_timing_test_is_a_gpu_test():
    wrong = [f"{path}::{node.name}" for path, node, marks in _tests() if "timing" in marks and "gpu" not in marks]
    assert not wrong


def test_a_gpu_test_that_calls_a_timer_is_marked_timing():
    untagged = []
    for path, node, marks in _tests():
        if "gpu" not in marks or "timing" in marks:
            continue
        calls = [ast.unparse(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)]
        called = {c.rsplit(".", 1)[-1] for c in calls} | set(calls)
        if called & TIMERS:
            untagged.append(f"{path}::{node.name} calls {sorted(called & TIMERS)}")
    assert not untagged

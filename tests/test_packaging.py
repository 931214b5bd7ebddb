"""The package as installed: studies ship as package data, every import is declared, CLIs resolve,
and the benchmarks run from any folder."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel ``pip`` builds from the repo, unpacked into a folder of its own."""
    out = tmp_path_factory.mktemp("wheel")
    # From a copy of the files git knows of: a stale build/ folder in the checkout would
    # otherwise ship modules that no longer exist.
    source = tmp_path_factory.mktemp("source")
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split("\n")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(source)], check=True, capture_output=True, cwd=out)
    wheel = next(out.glob("fa2_tuner-*.whl"))
    site = out / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return site


BENCHMARKS = ("vs_sdpa", "knobs", "search", "timing", "store", "timing_experiment")


def test_the_wheel_ships_the_studies_and_the_packages(installed):
    assert {p.name for p in (installed / "tuner" / "studies").glob("*.toml")} >= {
        "article.toml", "head_dim_128.toml", "long_context.toml", "autotune_race.toml"}
    for module in ("triton/fwd.py", "gluon/fwd/kernel_ws.py", "gluon/bwd/kernel.py", "measure/timing.py", "arch.py"):
        assert (installed / "kernel" / module).exists(), module
    assert (installed / "tuner" / "kernels" / "triton_fwd.py").exists()
    assert {f"{name}.py" for name in BENCHMARKS} <= {p.name for p in (installed / "benchmarks").glob("*.py")}
    assert (installed / "tuner" / "budget" / "__main__.py").exists()
    metadata = next(installed.glob("fa2_tuner-*.dist-info")) / "METADATA"
    requires = [line for line in metadata.read_text().splitlines() if line.startswith("Requires-Dist")]
    for name in ("torch", "triton", "optuna", "sqlalchemy", "plotly", "tqdm"):
        assert any(name in line.lower() for line in requires), name
    entry_points = (next(installed.glob("fa2_tuner-*.dist-info")) / "entry_points.txt").read_text()
    assert "fa2-tuner = tuner.commands:console_main" in entry_points


def test_the_wheel_holds_every_module_of_the_repo(installed):
    def python_files(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for folder in ("kernel", "tuner", "benchmarks")
                for p in (root / folder).rglob("*.py")}

    modules, shipped = python_files(ROOT), python_files(installed)
    assert modules <= shipped, sorted(modules - shipped)
    assert shipped <= modules | {"tuner/studies/__init__.py"}, sorted(shipped - modules)     # nothing stale


def test_the_installed_package_finds_its_studies_from_another_folder(installed, tmp_path):
    code = ("import tuner, tuner.study as s; assert 'site' in tuner.__file__, tuner.__file__; "
            "print(s.load('article').name, s.load('head_dim_128').name)")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            env={"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin", "TRITON_INTERPRET": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["article", "head_dim_128"]
    help_text = subprocess.run([sys.executable, "-m", "tuner.sweep", "--help"], cwd=tmp_path, capture_output=True,
                               text=True, env={"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin"})
    assert help_text.returncode == 0 and "examples:" in help_text.stdout


def _run_installed(installed: Path, folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=folder, capture_output=True, text=True,
                          env={"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("name", BENCHMARKS)
def test_every_benchmark_runs_from_outside_the_checkout(installed, tmp_path, name):
    result = _run_installed(installed, tmp_path, "-m", f"benchmarks.{name}", "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"python -m benchmarks.{name}" in result.stdout
    probe = _run_installed(installed, tmp_path, "-c", f"import benchmarks.{name} as b, sys; print(b.__file__)")
    assert str(installed) in probe.stdout, probe.stdout + probe.stderr[-1000:]


def test_the_console_entry_point_lists_its_commands_and_refuses_an_unknown_one(installed, tmp_path):
    help_text = _run_installed(installed, tmp_path, "-m", "tuner.commands", "--help")
    assert help_text.returncode == 0, help_text.stderr[-2000:]
    for command in ("sweep", "budget", "emit", "dashboard", "profile", "kernels"):
        assert f"\n  {command} " in help_text.stdout and f"fa2-tuner {command}" in help_text.stdout
    unknown = _run_installed(installed, tmp_path, "-m", "tuner.commands", "nope")
    assert unknown.returncode == 2 and "unknown command 'nope'" in unknown.stderr
    bad = _run_installed(installed, tmp_path, "-m", "tuner.commands", "budget", "--gpu", "sm_77")
    assert bad.returncode == 2 and "unknown GPU" in bad.stderr
    listed = _run_installed(installed, tmp_path, "-m", "tuner.commands", "kernels")
    assert listed.returncode == 0 and "triton (pass fwd)" in listed.stdout, listed.stderr[-2000:]
    as_before = _run_installed(installed, tmp_path, "-m", "tuner.commands", "--gpu", "sm_77")     # the sweep's flags
    assert as_before.returncode == 2 and "python -m tuner.sweep: error: --gpu" in as_before.stderr


def test_every_third_party_import_is_a_declared_dependency():
    import ast

    declared = {"torch", "triton", "optuna", "sqlalchemy", "plotly", "tqdm", "tomli", "numpy"}   # numpy: torch's
    stdlib = set(sys.stdlib_module_names)
    found = set()
    for path in list((ROOT / "tuner").rglob("*.py")) + list((ROOT / "kernel").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                     else [])
            found |= {name.split(".")[0] for name in names}
    third_party = found - stdlib - {"tuner", "kernel", "__future__"}
    assert third_party <= declared, third_party - declared

"""Every command the tool prints as advice works as printed (issue 43): each is collected from what the
tool says, parsed by that command's own parser, and its study loaded to the very study the advice is
about (a study file, a study tuned for another ``--pass``), on the store the advice came from.

And the small answers of the command line: ``python -m tuner.kernels``, ``emit --help``'s ``--pass``,
``profile``'s flags named one at a time, ``--workers`` without a GPU, the budget's limit column.
"""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT

from tuner import commands, emit, sweep
from tuner.budget.__main__ import main as budget_main
from tuner.profile.__main__ import main as profile_main
from tuner.store import Store
from tuner.study import load

ONE_CONFIG = """name = "small"
[problem]
n = 64
head_dim = 16
dtype = "fp32"
[space]
block_m = [16]
block_n = [16]
num_warps = [1]
num_stages = [1]
tma = [false]
"""
# A printed command: python -m tuner.<module> (not a "prog: error:" prefix), then flags, each with at most one
# value (never the word "on").
COMMAND = re.compile(r"python -m tuner\.(\w+)(?![\w:])((?: --?[\w+-]+(?: (?!on\b)[^\s)<]+)?)*)")
PARSERS = {"sweep": "tuner.sweep", "emit": "tuner.emit", "profile": "tuner.profile.__main__",
           "budget": "tuner.budget.__main__"}


def advice_in(text: str) -> list[tuple[str, list[str]]]:
    """(module, arguments) of every ``python -m tuner.<module> ...`` in ``text``."""
    return [(m.group(1), shlex.split(m.group(2))) for m in COMMAND.finditer(text)]


def check_advice(text: str, study_name: str, target: str, storage: str | None = None) -> list:
    """Each command in ``text`` parses, and names ``study_name`` (loaded as it says), ``target`` and
    ``storage``; returns the parsed arguments (at least one command must be there)."""
    found = advice_in(text)
    assert found, f"no command in: {text}"
    parsed = []
    for module, argv in found:
        parser = importlib.import_module(PARSERS[module]).build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"the advice python -m tuner.{module} {shlex.join(argv)} does not parse")
        assert load(args.study).for_pass(getattr(args, "pass_", None)).name == study_name, (module, argv)
        assert args.gpu == target, (module, argv)
        if storage is not None:
            assert args.storage == storage, (module, argv)
        parsed.append(args)
    return parsed


@pytest.fixture
def study_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)            # advice names the file as given, from where it was given
    Path("small.toml").write_text(ONE_CONFIG)
    return "small.toml"


@pytest.mark.parametrize("pass_", [None, "fwd+bwd"])
def test_emit_with_nothing_timed_advises_a_sweep_of_the_same_study(study_file, capsys, pass_):
    url = "sqlite:///store.db"
    Store(url).engine.dispose()
    more = ["--pass", pass_] if pass_ else []
    assert emit.main(["--study", study_file, "--gpu", "sm_90", "--storage", url, *more]) == 2
    err = capsys.readouterr().err.splitlines()[-1]         # the error, after the usage lines
    args = check_advice(err, "small" if not pass_ else "small-fwd+bwd", "sm_90", url)
    assert args[0].study == study_file and args[0].pass_ == pass_


@pytest.mark.parametrize("pass_", [None, "bwd"])
def test_profile_with_nothing_timed_advises_a_sweep_of_the_same_study(study_file, pass_):
    from tuner.profile import ProfileContext, ProfileError, select_targets

    db = Store("sqlite:///store.db")
    study = load(study_file).for_pass(pass_)
    with pytest.raises(ProfileError) as info:
        select_targets(db, ProfileContext(study, "sm_90", "NVIDIA H200", {}), top=3)
    check_advice(str(info.value), study.name, "sm_90", db.url)


def test_a_shipped_study_is_advised_by_its_name(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Store(url).engine.dispose()
    assert emit.main(["--study", "article.toml", "--gpu", "sm_89", "--storage", url]) == 2
    args = check_advice(capsys.readouterr().err.splitlines()[-1], "article", "sm_89", url)
    assert args[0].study == "article"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the budget-only run is the CPU's")
def test_a_budget_only_run_of_a_study_file_advises_its_own_command(study_file, capsys):
    """The run's closing lines and its heatmap page both say what to run on the GPU: the run's own command."""
    argv = ["--gpu", "sm_90", "--study", study_file, "--out", "out"]
    assert sweep.main(argv) == 0
    pages = [p for p in Path("out/dashboards").glob("small*.html") if "roofline" not in p.name]
    assert pages
    text = pages[0].read_text()
    assert "on a machine with one: python -m tuner.sweep" in text
    title = text[text.index("on a machine with one:"):]
    check_advice(title[:title.index(")")], "small", "sm_90")
    assert "run the same command" in capsys.readouterr().out


def test_python_m_tuner_kernels_runs_and_its_help_exits_0():
    listed = subprocess.run([sys.executable, "-m", "tuner.kernels"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert listed.returncode == 0 and "triton (pass fwd)" in listed.stdout, listed.stderr[-2000:]
    helped = subprocess.run([sys.executable, "-m", "tuner.commands", "kernels", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "usage: python -m tuner.kernels" in helped.stdout, helped.stderr[-2000:]
    assert commands.COMMANDS["kernels"][0] == "tuner.kernels.__main__"


def test_kernels_refuses_arguments(capsys):
    with pytest.raises(SystemExit) as info:
        commands.main(["kernels", "extra"])
    assert info.value.code == 2 and "unrecognized arguments: extra" in capsys.readouterr().err


def test_emit_help_describes_its_own_pass(capsys):
    with pytest.raises(SystemExit):
        emit.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the pass to tune" not in text and "the pass whose results to list" in text


@pytest.mark.parametrize("flags, named, not_named", [
    (["--top", "0"], "--top 0 must be at least 1", "--timeout"),
    (["--timeout", "0"], "--timeout 0.0 must be a positive", "--top"),
])
def test_profile_names_only_the_flag_that_is_wrong(capsys, flags, named, not_named):
    assert profile_main(["--study", "article", "--gpu", "sm_90", *flags]) == 2
    message = capsys.readouterr().err.splitlines()[-1]
    assert named in message and not_named not in message


@pytest.mark.skipif(torch.cuda.is_available(), reason="--workers is refused where no GPU is visible")
def test_workers_without_a_gpu_are_refused(tmp_path, capsys):
    db = tmp_path / "never.db"
    assert sweep.main(["--gpu", "sm_90", "--workers", "4", "--storage", f"sqlite:///{db}",
                       "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "--workers 4: no CUDA GPU is visible here" in err and "Traceback" not in err
    assert not db.exists() and not (tmp_path / "out").exists()


def test_budget_says_what_its_limit_column_is(capsys):
    """sm_90's opt-in is its per-SM figure less the 1 KB reserved per block; the limit column is that less
    the cubin's own static shared memory (1024 B for a Triton kernel on sm_90), said under the table."""
    assert budget_main(["--gpu", "sm_90", "--config", "16,16,1,1", "--head-dim", "64"]) == 0
    out = capsys.readouterr().out
    assert "opt-in shared memory 232448 B per block (233472 B per SM less 1024 B the hardware reserves" in out
    limits = {int(line.split()[3]) for line in out.splitlines() if line.strip().startswith("16x16_w1_s1")}
    static = 232448 - limits.pop()
    assert static > 0, out
    assert f"less the static shared memory the compiled cubin declares itself ({static} B" in out


def test_the_dashboard_on_an_empty_store_advises_a_sweep_into_that_store(tmp_path, capsys):
    from tuner import dashboard

    url = f"sqlite:///{tmp_path / 'empty.db'}"
    Store(url).engine.dispose()
    assert dashboard.main(["--storage", url, "--out", str(tmp_path / "pages")]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    check_advice(err, "article", "sm_89", url)

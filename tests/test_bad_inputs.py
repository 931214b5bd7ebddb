"""Every bad input gets a clear error: exit 2 and a message naming the value, no traceback,
nothing created or overwritten. The kernel's API raises TypeError or ValueError naming it.

One table per entry point; each row is (arguments, a fragment the message must hold).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import kernel
from benchmarks import search as bench_search, vs_sdpa as kernel_bench
from tuner import dashboard, emit, sweep
from tuner.budget.__main__ import main as budget_main
from tuner.store import Run, Store

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture
def files(tmp_path):
    """Paths the tables refer to: a directory, a binary file, corrupt and foreign databases, a store."""
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "binary.toml").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    (tmp_path / "bad.toml").write_text("[problem\n")
    (tmp_path / "bad-dtype.toml").write_text("[problem]\ndtype = 'bf32'\n")
    (tmp_path / "a-file").write_text("keep me")
    (tmp_path / "corrupt.db").write_bytes(b"not a database at all " * 64)
    import sqlite3

    with sqlite3.connect(tmp_path / "foreign.db") as connection:
        connection.execute("create table t (x int)")
    empty = Store(f"sqlite:///{tmp_path / 'empty.db'}")
    empty.add(Run(study="x", target="sm_90", gpu="g", sampler="grid", command="", torch_version="",
                  triton_version="", driver=""))
    (tmp_path / "renamed.toml").write_text('name = "article"\n[problem]\nn = 128\n')
    claimed = Store(f"sqlite:///{tmp_path / 'claimed.db'}")
    claimed.claim_study("article", "another-fingerprint", "somewhere/article.toml")
    for store in (empty, claimed):      # close them, so SQLite folds its write-ahead log into the files now
        store.engine.dispose()
    return tmp_path


def _code(main, argv) -> int:
    try:
        return main(argv)
    except SystemExit as exit_:             # argparse's own errors
        return exit_.code


def _t(path: str) -> str:
    return "{tmp}/" + path


SWEEP = [
    (["--gpu", "sm_77"], "valid: sm_80"),
    (["--gpu", ""], "unknown GPU ''"),
    (["--gpu", "rtx9999"], "unknown GPU 'rtx9999'"),
    (["--gpu", "sm_89", "--sampler", "bayes"], "tpe, grid, random"),
    (["--gpu", "sm_89", "--sampler", "GRID"], "'GRID' is not one of"),
    (["--gpu", "sm_89", "--study", "no_such_study"], "available: article"),
    (["--gpu", "sm_89", "--study", _t("a-dir")], "is a directory"),
    (["--gpu", "sm_89", "--study", ""], "--study is empty"),
    (["--gpu", "sm_89", "--study", _t("binary.toml")], "not a text file"),
    (["--gpu", "sm_89", "--study", _t("bad.toml")], "not valid TOML"),
    (["--gpu", "sm_89", "--study", _t("bad-dtype.toml")], "dtype = 'bf32'"),
    (["--gpu", "sm_89", "--trials", "0"], "--trials 0 must be at least 1"),
    (["--gpu", "sm_89", "--trials", "-3"], "--trials -3"),
    (["--gpu", "sm_89", "--trials", "abc"], "invalid int value: 'abc'"),
    (["--gpu", "sm_89", "--timeout", "-5"], "--timeout -5"),
    (["--gpu", "sm_89", "--timeout", "0"], "--timeout 0"),
    (["--gpu", "sm_89", "--timeout", "nan"], "--timeout nan"),
    (["--gpu", "sm_89", "--trial-timeout", "0"], "--trial-timeout 0"),
    (["--gpu", "sm_89", "--jobs", "0"], "--jobs 0"),
    (["--gpu", "sm_89", "--batch", "0"], "--batch 0"),
    (["--gpu", "sm_89", "--finalists", "-1"], "--finalists -1 must be at least 0"),
    (["--gpu", "sm_89", "--rounds", "1"], "--rounds 1 must be at least 2"),
    (["--gpu", "sm_89", "--seed", "abc"], "invalid int value"),
    (["--gpu", "sm_89", "--storage", "not a url"], "not a database URL"),
    (["--gpu", "sm_89", "--storage", "sqlite://"], "in-memory database"),
    (["--gpu", "sm_89", "--storage", "sqlite:///:memory:"], "in-memory database"),
    (["--gpu", "sm_89", "--storage", "nosuchdialect://x"], "cannot load a driver for 'nosuchdialect'"),
    (["--gpu", "sm_89", "--storage", "postgresql+nosuchdriver://h/db"], "cannot load a driver"),
    (["--gpu", "sm_89", "--storage", "sqlite:///{tmp}/corrupt.db"], "cannot open"),
    (["--gpu", "sm_89", "--storage", "sqlite:///{tmp}/a-file/x.db"], "cannot make the folder"),
    (["--gpu", "sm_89", "--out", _t("a-file")], "is a file"),
    (["--gpu", "sm_89", "--device", "gpu"], "invalid choice: 'gpu'"),
    (["--gpu", "sm_89", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["--gpu", "sm_89", "--study", _t("renamed.toml"), "--storage", "sqlite:///{tmp}/claimed.db"],
     "already holds a different study"),
]
if not torch.cuda.is_available():
    SWEEP.append((["--gpu", "auto"], "--gpu auto needs a CUDA device"))

EMIT = [
    (["--gpu", "sm_90"], "the following arguments are required: --study"),
    (["--study", "article", "--gpu", "sm_77"], "unknown GPU 'sm_77'"),
    (["--study", _t("a-dir"), "--gpu", "sm_90"], "is a directory"),
    (["--study", "article", "--gpu", "sm_90", "--top", "-1"], "--top -1 must be 0 or more"),
    (["--study", "article", "--gpu", "sm_90", "--storage", "sqlite:///{tmp}/typo.db"], "no such database file"),
    (["--study", "article", "--gpu", "sm_90", "--storage", "sqlite:///{tmp}/corrupt.db"], "cannot open"),
    (["--study", "article", "--gpu", "sm_90", "--storage", "sqlite:///{tmp}/foreign.db"], "not an fa2-tuner store"),
    (["--study", "article", "--gpu", "sm_90", "--storage", "not a url"], "not a database URL"),
    (["--study", "article", "--gpu", "sm_90", "--storage", "nosuchdialect://x"], "cannot load a driver"),
    (["--study", "article", "--gpu", "sm_90", "--storage", "sqlite:///{tmp}/empty.db"], "was timed on every shape"),
    (["--study", "article", "--gpu", "sm_90", "--storage", "sqlite:///{tmp}/empty.db", "--gpu-used", "X"],
     "--gpu-used 'X'"),
    (["--study", "article", "--gpu", "sm_90", "--out", _t("a-dir")], "is a folder"),
    (["--study", "article", "--gpu", "sm_90", "--verify", _t("a-dir")], "is a folder"),
]

DASHBOARD = [
    (["--storage", "sqlite:///{tmp}/empty.db", "--out", _t("a-file")], "is a file"),
    (["--storage", "sqlite:///{tmp}/typo.db", "--out", _t("pages")], "no such database file"),
    (["--storage", "sqlite:///{tmp}/corrupt.db", "--out", _t("pages")], "cannot open"),
    (["--storage", "sqlite:///{tmp}/foreign.db", "--out", _t("pages")], "not an fa2-tuner store"),
    (["--storage", "not a url", "--out", _t("pages")], "not a database URL"),
    (["--storage", "nosuchdialect://x", "--out", _t("pages")], "cannot load a driver"),
    (["--storage", "sqlite:///{tmp}/empty.db", "--out", _t("pages")], "has no results"),
    (["--storage", "sqlite:///{tmp}/empty.db", "--plotlyjs", "inline"], "invalid choice: 'inline'"),
]

BUDGET = [
    (["--gpu", "gtx480"], "unknown GPU 'gtx480'"),
    ([], "the following arguments are required: --gpu"),
    (["--gpu", "sm_89", "--head-dim", "96"], "--head-dim 96 is not supported"),
    (["--gpu", "sm_89", "--head-dim", "x"], "invalid int value: 'x'"),
    (["--gpu", "sm_89", "--dtype", "bf32"], "--dtype 'bf32'"),
    (["--gpu", "sm_89", "--config", "128,64"], "config '128,64' must be BM,BN,WARPS,STAGES"),
    (["--gpu", "sm_89", "--config", "a,b,c,d"], "config 'a,b,c,d'"),
    (["--gpu", "sm_89", "--config", "0,64,8,3"], "config '0,64,8,3'"),
    (["--gpu", "sm_89", "--jobs", "0"], "--jobs 0 must be at least 1"),
]

BENCH_SEARCH = [
    ([], "the following arguments are required: command"),
    (["quality", "--storage", "sqlite:///{tmp}/typo.db", "--study", "article", "--gpu", "sm_90"],
     "no such database file"),
    (["quality", "--storage", "sqlite:///{tmp}/empty.db", "--study", "nope", "--gpu", "sm_90"], "study 'nope'"),
    (["quality", "--storage", "sqlite:///{tmp}/empty.db", "--study", "article", "--gpu", "sm_7"], "unknown GPU"),
    (["quality", "--storage", "sqlite:///{tmp}/empty.db", "--study", "article", "--gpu", "sm_90", "--seeds", "0"],
     "--seeds 0"),
    (["quality", "--storage", "sqlite:///{tmp}/empty.db", "--study", "article", "--gpu", "sm_90", "--samplers",
      "cma"], "--samplers 'cma'"),
    (["stability", "--storage", "sqlite:///{tmp}/empty.db", "--study", "article", "--gpu", "sm_90", "--top", "0"],
     "--top 0"),
]

KERNEL_BENCH = [
    (["--config", "1,2"], "--config '1,2' must be BM,BN,WARPS,STAGES"),
    (["--head-dim", "96"], "--head-dim 96 is not one of"),
    (["--n", "0"], "--n 0 must be a positive length"),
]

CLIS = ([(sweep.main, args, fragment) for args, fragment in SWEEP]
        + [(emit.main, args, fragment) for args, fragment in EMIT]
        + [(dashboard.main, args, fragment) for args, fragment in DASHBOARD]
        + [(budget_main, args, fragment) for args, fragment in BUDGET]
        + [(bench_search.main, args, fragment) for args, fragment in BENCH_SEARCH]
        + [(kernel_bench.main, args, fragment) for args, fragment in KERNEL_BENCH])


def _snapshot(folder: Path) -> dict[str, object]:
    """Every file's content; a database's as its SQL dump (SQLite's -wal and -shm files come and go
    with open connections and hold no content of their own once closed)."""
    import sqlite3

    content: dict[str, object] = {}
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.name.endswith(("-wal", "-shm")):
            continue
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
                content[str(path.relative_to(folder))] = list(connection.iterdump())
        except sqlite3.DatabaseError:
            content[str(path.relative_to(folder))] = path.read_bytes()
    return content


@pytest.mark.parametrize("main, args, fragment", CLIS,
                         ids=[f"{m.__module__.split('.')[-1]}:{' '.join(a)[:60]}" for m, a, _ in CLIS])
def test_bad_cli_input_exits_2_with_a_message_and_changes_nothing(main, args, fragment, files, capsys,
                                                                   monkeypatch):
    monkeypatch.chdir(files)            # default output folders would land here: nothing may
    argv = [a.replace("{tmp}", str(files)) for a in args]
    before = _snapshot(files)
    assert _code(main, argv) == 2
    err = capsys.readouterr().err
    assert fragment in err, err
    assert "Traceback" not in err
    assert _snapshot(files) == before


# ------------------------------------------------------------------------------ the kernel API


def _q(*shape, dtype=torch.float32):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.randn(*shape, device=device, dtype=dtype)


KERNEL = [
    (lambda: kernel.flash_attn_fwd(_q(2, 8, 64)[0], _q(8, 64), _q(8, 64)), "got 2 dims"),
    (lambda: kernel.flash_attn_fwd(_q(1, 1, 8, 64).double(), _q(1, 1, 8, 64).double(),
                                   _q(1, 1, 8, 64).double()), "float64"),
    (lambda: kernel.flash_attn_fwd(_q(1, 1, 8, 64), _q(1, 1, 8, 64).half(), _q(1, 1, 8, 64)), "share a dtype"),
    (lambda: kernel.flash_attn_fwd(_q(1, 1, 8, 64), _q(1, 1, 8, 64), _q(1, 1, 5, 64)), "same shape"),
    (lambda: kernel.flash_attn_fwd(_q(2, 1, 8, 64), _q(1, 1, 8, 64), _q(1, 1, 8, 64)), "agree on batch"),
    (lambda: kernel.flash_attn_fwd(_q(1, 1, 8, 48), _q(1, 1, 8, 48), _q(1, 1, 8, 48)), "head dim 48"),
    (lambda: kernel.flash_attn_fwd(_q(1, 1, 8, 32), _q(1, 1, 8, 16), _q(1, 1, 8, 16)), "share the head dim"),
    (lambda: kernel.flash_attn_fwd([[1.0]], _q(1, 1, 8, 16), _q(1, 1, 8, 16)), "must be a torch.Tensor"),
    (lambda: kernel.flash_attn_fwd(_q(1, 1, 8, 16), _q(1, 8, 16), _q(1, 8, 16)), "same rank"),
    (lambda: kernel.flash_attn_fwd(*[_q(1, 1, 8, 16)] * 3, "no"), "causal must be True or False; got 'no'"),
    (lambda: kernel.flash_attn_fwd(*[_q(1, 1, 8, 16)] * 3, 1), "causal must be True or False; got 1"),
    (lambda: kernel.flash_attn_fwd(*[_q(1, 1, 8, 16)] * 3, block_m=24), "block_m=24"),
    (lambda: kernel.flash_attn_fwd(*[_q(1, 1, 8, 16)] * 3, block_n=8), "block_n=8"),
    (lambda: kernel.flash_attn_fwd(*[_q(1, 1, 8, 16)] * 3, num_warps=3), "num_warps=3"),
    (lambda: kernel.flash_attn_fwd(*[_q(1, 1, 8, 16)] * 3, num_warps=64), "num_warps=64"),
    (lambda: kernel.flash_attn_fwd(*[_q(1, 1, 8, 16)] * 3, num_stages=0), "num_stages=0"),
    (lambda: kernel.flash_attn_fwd(*[_q(1, 1, 8, 16)] * 3, num_stages=True), "num_stages=True"),
    (lambda: kernel.flash_attn_fwd(*[_q(1, 1, 8, 16)] * 3, out=_q(1, 1, 8, 32)), "out must be"),
    (lambda: kernel.flash_attn_fwd(*[_q(1, 1, 8, 16)] * 3, out=[1]), "out must be a torch.Tensor"),
    (lambda: kernel.flash_attn_fwd(*[_q(1, 1, 8, 16)] * 3, lse=_q(1, 1, 8).half()), "lse must be"),
    (lambda: kernel.flash_attn_fwd(*[_q(1, 2, 8, 16)] * 3, lse=_q(1, 8, 2).transpose(1, 2)),
     "lse must be contiguous"),
    (lambda: kernel.flash_attn_fwd(*[_q(1, 2, 8, 16)] * 3, out=_q(1, 2, 16, 8).transpose(2, 3)),
     "out needs a unit last stride"),
]
if kernel.interpreting():
    KERNEL.append((lambda: kernel.flash_attn_fwd(*[_q(1, 1, 8, 16, dtype=torch.bfloat16)] * 3),
                   "bfloat16 does not work under TRITON_INTERPRET=1"))


@pytest.mark.parametrize("call, fragment", KERNEL, ids=[f[1][:40] for f in KERNEL])
def test_bad_kernel_input_raises_naming_the_value(call, fragment):
    with pytest.raises((TypeError, ValueError), match=fragment.replace("(", r"\(").replace(")", r"\)")):
        call()


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q = torch.randn(1, 1, 8, 16)
    with pytest.raises(ValueError, match="needs CUDA tensors"):
        kernel.flash_attn_fwd(q, q, q)


def test_there_are_at_least_76_bad_inputs():
    assert len(CLIS) + len(KERNEL) + 1 >= 76, len(CLIS) + len(KERNEL) + 1
    assert os.environ.get("TRITON_INTERPRET") or torch.cuda.is_available()

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
    (tmp_path / "uneven.toml").write_text('name = "uneven"\n[problem]\nn = 128\n[space]\nnum_stages = [1, 2, 4]\n')
    (tmp_path / "bad-restriction.toml").write_text(SMALL_STUDY.replace("RULE", "block_m //"))
    (tmp_path / "all-raise.toml").write_text(SMALL_STUDY.replace("RULE", "block_m // (num_stages - num_stages) > 0"))
    (tmp_path / "no-shapes.toml").write_text('name = "x"\nproblem = []\n')
    (tmp_path / "float-warps.toml").write_text(SMALL_STUDY.replace("RULE", "block_m > 0").replace(
        "num_warps = [1]", "num_warps = [4.0]"))
    (tmp_path / "deep.toml").write_text(SMALL_STUDY.replace("RULE", "not " * 20000 + "block_m"))
    (tmp_path / "minus.toml").write_text(SMALL_STUDY.replace("RULE", "-" * 100000 + "block_m > 0"))
    (tmp_path / "dot-kernel.toml").write_text('name = "x"\nkernel = ".foo"\n[problem]\nn = 64\n')
    _corrupt_store(tmp_path / "mid-corrupt.db", first=2)        # every page after the first is garbage
    _corrupt_store(tmp_path / "tail-corrupt.db", first=None)    # schema intact, the data pages garbage
    results = Store(f"sqlite:///{tmp_path / 'results.db'}")
    results.add(_result_row(results))
    claimed = Store(f"sqlite:///{tmp_path / 'claimed.db'}")
    claimed.claim_study("article", "another-fingerprint", "somewhere/article.toml")
    for store in (empty, claimed, results):      # close them, so SQLite folds its write-ahead log into the files now
        store.engine.dispose()
    return tmp_path


SMALL_STUDY = """name = "small"
[problem]
n = 64
head_dim = 16
dtype = "fp32"
[space]
block_m = [16, 32]
block_n = [16]
num_warps = [1]
num_stages = [1, 2]
tma = [false]
restrictions = ["RULE"]
"""


def _store_with_runs(path: Path, runs: int = 200) -> None:
    store = Store(f"sqlite:///{path}")
    store.add(*[Run(study=f"s{i}", target="sm_90", gpu="g", sampler="grid", command="python -m tuner.sweep " * 20,
                    torch_version="", triton_version="", driver="") for i in range(runs)])
    store.engine.dispose()


def _corrupt_store(path: Path, first: int | None) -> None:
    """A store whose header is intact and whose pages from ``first`` on (None: the second half) are garbage."""
    _store_with_runs(path)
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    start = page * (first - 1) if first else len(data) // 2
    for offset in range(start, len(data), 61):
        data[offset:offset + 13] = b"\xde\xad garbage \xff"
    path.write_bytes(bytes(data))


def _result_row(store: Store):
    """One stored result, so that the readers get past 'no results'."""
    from tuner.store import Result

    run = Run(study="x", target="sm_90", gpu="g", sampler="grid", command="", torch_version="", triton_version="",
              driver="")
    store.add(run)
    return Result(run_id=run.id, study="x", target="sm_90", gpu="g", torch_version="", triton_version="", driver="",
                  shape="B1 H1 Nq64 Nk64 D16 fp32", batch=1, heads=1, n_q=64, n_k=64, head_dim=16, dtype="fp32",
                  causal=False, config="16x16_w1_s1", block_m=16, block_n=16, num_warps=1, num_stages=1,
                  status="over_smem", stage="budget", reason="model needs 1 B > 0 B")


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
    (["--gpu", "sm_89", "--study", _t("uneven.toml")], "num_stages values must be evenly spaced for the tpe sampler"),
    (["--gpu", "sm_89", "--trials", "0"], "--trials 0 must be at least 1"),
    (["--gpu", "sm_89", "--trials", "-3"], "--trials -3"),
    (["--gpu", "sm_89", "--trials", "abc"], "invalid int value: 'abc'"),
    (["--gpu", "sm_89", "--timeout", "-5"], "--timeout -5"),
    (["--gpu", "sm_89", "--timeout", "0"], "--timeout 0"),
    (["--gpu", "sm_89", "--timeout", "nan"], "--timeout nan"),
    (["--gpu", "sm_89", "--trial-timeout", "0"], "--trial-timeout 0"),
    (["--gpu", "sm_89", "--jobs", "0"], "--jobs 0"),
    (["--gpu", "sm_89", "--jobs", "99999999999999999999"], "--jobs 99999999999999999999 must be at most 1024"),
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
    (["--gpu", "sm_89", "--study", _t("bad-restriction.toml")], "restriction 'block_m //' is not a valid expression"),
    (["--gpu", "sm_89", "--study", _t("all-raise.toml")],
     "leave no config to search (e.g. 16x16_w1_s1: restriction 'block_m // (num_stages - num_stages) > 0' raised "
     "ZeroDivisionError"),
    (["--gpu", "sm_89", "--storage", "sqlite:///{tmp}/mid-corrupt.db"], "cannot open"),
    (["--gpu", "sm_89", "--storage", "sqlite:///{tmp}/tail-corrupt.db"], "the database is corrupt"),
    (["--gpu", "sm_89", "--storage", "sqlite:///{tmp}/foreign.db"], "none of fa2-tuner's"),
    (["--gpu", "sm_89", "--study", _t("no-shapes.toml")], "[problem] holds no shapes"),
    (["--gpu", "sm_89", "--study", _t("float-warps.toml")], "num_warps value 4.0 is not allowed"),
    (["--gpu", "sm_89", "--study", _t("deep.toml")], "is at most 500"),
    (["--gpu", "sm_89", "--study", _t("minus.toml")], "is at most 500"),
    (["--gpu", "sm_89", "--study", _t("dot-kernel.toml")], "kernel = '.foo'"),
    (["--gpu", "sm_89", "--storage", "sqlite:///file:mem1?mode=memory&uri=true"], "in-memory database"),
    (["--gpu", "sm_89", "--storage", "sqlite:///~/t.db"], "SQLite does not expand '~'"),
    (["--gpu", "sm_89", "--out", ""], "--out '' is empty"),
    (["--gpu", "sm_89", "--out", _t("a-file/out")], "{tmp}/a-file is a file, not a folder"),
    (["--gpu", "sm_89", "--out", "/proc/fa2-out"], "--out '/proc/fa2-out' cannot be made: /proc is not writable"),
    (["--gpu", "sm_89", "--trial-timeout", "inf"], "--trial-timeout inf must be a positive number of seconds, at most"),
    (["--gpu", "sm_89", "--timeout", "1e300"], "--timeout 1e+300 must be"),
    (["--gpu", "sm_89", "--seed", "-1"], "--seed -1 must be from 0 to 4294967295"),
    (["--gpu", "sm_89", "--seed", "18446744073709551617"], "--seed 18446744073709551617 must be"),
    (["--gpu", "sm_89", "--trace", ""], "--trace '' is empty"),
    (["--gpu", "sm_89", "--trace", "/proc/t.json"], "--trace '/proc/t.json' cannot be made: /proc is not writable"),
    # the battery of 2026-12-05: a name over the filesystem's 255 bytes was an OSError traceback
    (["--gpu", "sm_89", "--out", _t("x" * 300)], "cannot be made: a name of 300 bytes, over the 255"),
    (["--gpu", "sm_89", "--trace", _t("t" * 251 + ".json")], "cannot be made: a name of 256 bytes, over the 255"),
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
    (["--study", "article", "--gpu", "sm_90", "--storage", "sqlite:///{tmp}/mid-corrupt.db"], "cannot open"),
    (["--study", "article", "--gpu", "sm_90", "--storage", "sqlite:///{tmp}/tail-corrupt.db"],
     "the database is corrupt"),
    (["--study", "article", "--gpu", "sm_90", "--storage", "not a url"], "not a database URL"),
    (["--study", "article", "--gpu", "sm_90", "--storage", "nosuchdialect://x"], "cannot load a driver"),
    (["--study", "article", "--gpu", "sm_90", "--storage", "sqlite:///{tmp}/empty.db"], "was timed on every shape"),
    (["--study", "article", "--gpu", "sm_90", "--storage", "sqlite:///{tmp}/empty.db", "--gpu-used", "X"],
     "--gpu-used 'X'"),
    (["--study", "article", "--gpu", "sm_90", "--out", _t("a-dir")], "is a folder"),
    (["--study", "article", "--gpu", "sm_90", "--verify", _t("a-dir")], "is a folder"),
    (["--study", "article", "--gpu", "sm_90", "--out", _t("a-file/c.py")], "{tmp}/a-file is a file, not a folder"),
    (["--study", "article", "--gpu", "sm_90", "--out", "/proc/c.py"], "cannot be made: /proc is not writable"),
    (["--study", "article", "--gpu", "sm_90", "--out", ""], "--out '' is empty"),
    (["--study", "article", "--gpu", "sm_90", "--out", _t("c" * 300 + "/c.py")], "a name of 300 bytes, over the 255"),
    # the battery of 2026-12-04 evening: the list written over the store it was read from
    (["--study", "article", "--gpu", "sm_90", "--storage", "sqlite:///{tmp}/results.db", "--out", _t("results.db")],
     "is the database --storage"),
    (["--study", "article", "--gpu", "sm_90", "--storage", "sqlite:///results.db", "--out", "./results.db"],
     "writing there would replace it"),
    (["--study", "article", "--gpu", "sm_90", "--storage", "sqlite:///{tmp}/results.db", "--verify",
      _t("results.db")], "--verify '{tmp}/results.db' is the database"),
]
if not torch.cuda.is_available():
    EMIT.append((["--study", "article", "--gpu", "sm_90", "--storage", "sqlite:///{tmp}/results.db", "--out",
                  _t("c.py"), "--verify", _t("v.md")], "--verify '{tmp}/v.md' times the emitted list on a CUDA GPU"))

DASHBOARD = [
    (["--storage", "sqlite:///{tmp}/empty.db", "--out", _t("a-file")], "is a file"),
    (["--storage", "sqlite:///{tmp}/results.db", "--out", _t("p" * 300)], "a name of 300 bytes, over the 255"),
    (["--storage", "sqlite:///{tmp}/results.db", "--out", ""], "--out '' is empty; give a folder"),
    (["--storage", "sqlite:///{tmp}/results.db", "--out", "  "], "--out '  ' is empty; give a folder"),
    (["--storage", "sqlite:///{tmp}/typo.db", "--out", _t("pages")], "no such database file"),
    (["--storage", "sqlite:///{tmp}/corrupt.db", "--out", _t("pages")], "cannot open"),
    (["--storage", "sqlite:///{tmp}/foreign.db", "--out", _t("pages")], "not an fa2-tuner store"),
    (["--storage", "not a url", "--out", _t("pages")], "not a database URL"),
    (["--storage", "nosuchdialect://x", "--out", _t("pages")], "cannot load a driver"),
    (["--storage", "sqlite:///{tmp}/empty.db", "--out", _t("pages")], "has no results"),
    (["--storage", "sqlite:///{tmp}/empty.db", "--plotlyjs", "inline"], "invalid choice: 'inline'"),
    (["--storage", "sqlite:///{tmp}/mid-corrupt.db", "--out", _t("pages")], "cannot open"),
    (["--storage", "sqlite:///{tmp}/tail-corrupt.db", "--out", _t("pages")], "the database is corrupt"),
    (["--storage", "sqlite:///{tmp}/results.db", "--out", _t("a-file/pages")], "--out '{tmp}/a-file/pages' cannot "
     "be made: {tmp}/a-file is a file, not a folder"),
    (["--storage", "sqlite:///{tmp}/results.db", "--out", "/proc/fa2-tuner-pages"], "--out '/proc/fa2-tuner-pages' "
     "cannot be made: /proc is not writable"),
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
    (["--gpu", "sm_89", "--jobs", "0"], "--jobs 0 must be 1 to 1024"),
    # the battery of 2026-12-04 evening: a huge count overflowed the compile pool's feed, which then hung
    (["--gpu", "sm_89", "--jobs", "99999999999999999999"], "--jobs 99999999999999999999 must be 1 to 1024"),
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
if not torch.cuda.is_available():
    KERNEL_BENCH.append(([], "no CUDA GPU is visible here"))

# A flag given empty means nothing: refused, not taken as its default (the 2026-12-04 battery: --storage ''
# ran the sweep into the default store, --kernel '' judged the default kernel).
EMPTY = "'' is empty: give a value, or leave the flag out for its default"
SWEEP.append((["--gpu", "sm_89", "--storage", ""], f"argument --storage: {EMPTY}"))
EMIT.append((["--study", "article", "--gpu", "sm_90", "--storage", ""], f"argument --storage: {EMPTY}"))
DASHBOARD += [(["--storage", ""], f"argument --storage: {EMPTY}"),
              (["--storage", "  "], "argument --storage: '  ' is empty: give a value")]
BUDGET += [(["--gpu", "sm_89", "--kernel", ""], f"argument --kernel: {EMPTY}"),
           (["--gpu", "sm_89", "--pass", ""], f"argument --pass: {EMPTY}"),
           # the battery of 2026-12-04 evening: a pass the kernel lacks was blamed on --kernel
           (["--gpu", "sm_89", "--pass", "abc"], "error: --pass: kernel 'triton' has no pass 'abc'; it has bwd, fwd, "
                                                 "fwd+bwd")]

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
    assert fragment.replace("{tmp}", str(files)) in err, err
    assert err.strip().splitlines()[-1].count("error") >= 1 and "\n" not in err.strip().split("error: ", 1)[-1]
    assert "Traceback" not in err
    assert _snapshot(files) == before


# ------------------------------------------------------------------------------ the kernel API


def _q(*shape, dtype=torch.float32):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.randn(*shape, device=device, dtype=dtype)


KERNEL = [
    (lambda: kernel.flash_attn_bwd(*[_q(1, 1, 20, 16)] * 5, _q(1, 1, 20), config={"block_m": 16}),
     "config must be None or a kernel.BwdConfig; got dict (pass its fields as keywords"),
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


# ------------------------------------------------------------------ the store, the sweep's run, its log


def _quick_study(tmp_path: Path, space: str = "tma = [true]") -> Path:
    """A study for sm_89 whose budget stage needs no real compile: TMA configs are unsupported there
    (or, with another space, the compiles are faked by the test)."""
    path = tmp_path / "quick.toml"
    path.write_text(f'name = "quick"\n[problem]\nn = 64\nhead_dim = 16\ndtype = "fp32"\n[space]\nblock_m = [16, 32]\n'
                    f'block_n = [16]\nnum_warps = [1]\nnum_stages = [1, 2]\n{space}\n')
    return path


def test_a_restriction_that_raises_rejects_that_config_with_the_reason(tmp_path):
    from tuner.gpus import GpuSpec
    from tuner.pre_gpu_stages import budget_stage
    from tuner.study import load

    path = tmp_path / "divides.toml"
    path.write_text(SMALL_STUDY.replace("RULE", "block_m // (num_stages - 1) >= 16"))
    study = load(str(path))
    by_stages = {c.num_stages: c for c in study.space.all_configs() if c.block_m == 32}
    assert sorted(c.key for c in study.configs()) == ["16x16_w1_s2", "32x16_w1_s2"]
    rejection = budget_stage(by_stages[1], study, GpuSpec.from_name("sm_89"))
    assert rejection is not None and str(rejection.status) == "restricted"
    assert rejection.reason == ("restriction 'block_m // (num_stages - 1) >= 16' raised ZeroDivisionError "
                                "at head_dim 16")
    assert budget_stage(by_stages[2], study, GpuSpec.from_name("sm_89")) is None


def _sqlite_files(folder: Path, name: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.name.startswith(name)}


def test_a_foreign_database_is_left_byte_identical_by_every_command(files, capsys):
    before = _sqlite_files(files, "foreign.db")
    url = f"sqlite:///{files / 'foreign.db'}"
    assert sweep.main(["--gpu", "sm_89", "--storage", url, "--out", str(files / "out")]) == 2
    assert emit.main(["--study", "article", "--gpu", "sm_90", "--storage", url]) == 2
    assert dashboard.main(["--storage", url, "--out", str(files / "pages")]) == 2
    err = capsys.readouterr().err
    assert "none of fa2-tuner's" in err and "--storage-init" in err and "Traceback" not in err
    assert _sqlite_files(files, "foreign.db") == before          # no -wal, no -journal left, the bytes as they were
    assert not (files / "out").exists() and not (files / "pages").exists()


def test_storage_init_adds_our_tables_and_keeps_the_journal_mode(files, tmp_path, capsys):
    import sqlite3

    study = _quick_study(tmp_path)
    url = f"sqlite:///{files / 'foreign.db'}"
    assert sweep.main(["--gpu", "sm_89", "--study", str(study), "--storage", url, "--storage-init",
                       "--out", str(files / "out"), "--no-outputs"]) == 0
    with sqlite3.connect(files / "foreign.db") as connection:
        assert connection.execute("pragma journal_mode").fetchone() == ("delete",)
        assert connection.execute("select * from t").fetchall() == []
        tables = {name for (name,) in connection.execute("select name from sqlite_master where type = 'table'")}
    assert {"t", "fa2_runs", "fa2_results", "trials"} <= tables
    # a database we create is in WAL mode
    assert sweep.main(["--gpu", "sm_89", "--study", str(study), "--out", str(files / "new"), "--no-outputs"]) == 0
    with sqlite3.connect(files / "new" / "tuning.db") as connection:
        assert connection.execute("pragma journal_mode").fetchone() == ("wal",)


def test_runs_whose_process_is_gone_are_marked_interrupted(tmp_path, capsys):
    import datetime as dt
    import socket
    import subprocess
    import sys

    from tuner.store import mark_gone_runs, now

    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    here, stale, fresh = socket.gethostname(), now() - dt.timedelta(minutes=5), now()
    owners = {"remote, my pid alive here, stale": ("elsewhere", os.getpid(), stale),
              "remote, fresh": ("elsewhere", os.getpid(), fresh),
              "local, dead pid, fresh": (here, dead.pid, fresh),
              "local, alive, stale": (here, os.getpid(), stale),
              "no owner (an older fa2-tuner)": (None, None, stale)}
    for label, (host, pid, beat) in owners.items():
        store.add(Run(study=label, target="sm_89", gpu="none", sampler="grid", command=label, torch_version="",
                      triton_version="", driver="", host=host, pid=pid, heartbeat_at=beat))
    store.add(Run(study="finished long ago", target="sm_89", gpu="none", sampler="grid", command="", torch_version="",
                  triton_version="", driver="", host="elsewhere", pid=1, heartbeat_at=stale, status="finished"))
    gone = mark_gone_runs(store, grace_s=60)
    assert sorted(r.study for r in gone) == ["local, dead pid, fresh", "remote, my pid alive here, stale"]
    status = {r.study: r.status for r in store.runs()}
    assert status == {"remote, my pid alive here, stale": "interrupted", "remote, fresh": "running",
                      "local, dead pid, fresh": "interrupted", "local, alive, stale": "running",
                      "no owner (an older fa2-tuner)": "running", "finished long ago": "finished"}
    # the sweep does it on its way in, and says so
    assert sweep.main(["--gpu", "sm_89", "--study", str(_quick_study(tmp_path)), "--storage", store.url,
                       "--no-outputs"]) == 0
    assert store.runs()[-1].status == "budget-only" and store.runs()[-1].pid == os.getpid()
    store.add(Run(study="killed", target="sm_89", gpu="none", sampler="grid", command="killed", torch_version="",
                  triton_version="", driver="", host=here, pid=dead.pid, heartbeat_at=fresh))
    capsys.readouterr()
    assert sweep.main(["--gpu", "sm_89", "--study", str(_quick_study(tmp_path)), "--storage", store.url,
                       "--no-outputs"]) == 0
    assert f"pid {dead.pid}) was left running by a process that is gone" in capsys.readouterr().err
    assert {r.study: r.status for r in store.runs()}["killed"] == "interrupted"


def test_a_sweep_owner_elsewhere_is_never_judged_by_a_local_pid():
    import socket
    from types import SimpleNamespace

    from tuner.search import OWNER_ATTR, owner_dead

    def trial(owner):
        return SimpleNamespace(user_attrs={OWNER_ATTR: owner})

    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not owner_dead(trial(f"elsewhere:{dead.pid}"))           # left to the heartbeat
    assert not owner_dead(trial(f"elsewhere:{os.getpid()}"))
    assert owner_dead(trial(f"{socket.gethostname()}:{dead.pid}"))
    assert not owner_dead(trial(f"{socket.gethostname()}:{os.getpid()}"))


def _wait_for(stream, text: str, lines: list[str], timeout_s: float = 120.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        lines.append(line)
        if text in line:
            return
    raise AssertionError(f"{text!r} never came: {''.join(lines)}")


def test_ctrl_c_marks_the_run_interrupted_and_says_how_to_resume(tiny, tmp_path):
    """Ctrl-C reaches the sweep's whole process group (its workers too), as a terminal sends it."""
    import signal
    import subprocess
    import sys

    study = tiny
    db = tmp_path / "c.db"
    argv = ["--gpu", "sm_89", "--study", str(study), "--storage", f"sqlite:///{db}", "--no-outputs", "--device", "cpu",
            "--sampler", "grid", "--finalists", "0"]
    process = subprocess.Popen([sys.executable, "-m", "tuner.sweep", *argv], stderr=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, start_new_session=True,
                               env=os.environ | {"TRITON_INTERPRET": "1"})
    lines: list[str] = []
    _wait_for(process.stderr, "worker 0 ready", lines)      # trials in flight, on the worker and the compilers
    os.killpg(process.pid, signal.SIGINT)
    out, rest = process.communicate(timeout=300)
    err = "".join(lines) + rest
    assert process.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "config(s) stored by this run" in err and "Resume with the same command" in err
    assert "python -m tuner.sweep " + " ".join(argv) in err
    store = Store(f"sqlite:///{db}", create=False)
    assert [r.status for r in store.runs()] == ["interrupted"] and store.runs()[0].finished_at is not None
    # the trials in flight finished as they would have: Ctrl-C is no verdict on a config
    assert {r.status for r in store.results()} <= {"timed", "restricted"}, [r.reason for r in store.results()]


def _fake_compiles(infos):
    """``compile_many`` without a compiler: the given info for every task."""
    def compile_many(tasks, *args, **kwargs):
        return [infos for _ in tasks]
    return compile_many


PTXAS_ERROR = ("PTXASError: `ptxas` failed with error code 255\n`ptxas` stderr:\n"
               "ptxas fatal   : (C7600) Insufficient registers for Entry function 'attn_fwd'\n\n"
               "Repro command: /opt/triton/ptxas -v --gpu-name=sm_89 /tmp/tmpx.ptx -o /tmp/tmpx.ptx.o\n")


def test_a_compile_error_is_one_line_in_the_log_and_whole_in_the_store(tmp_path, monkeypatch, capsys):
    from tuner import budget
    from tuner.budget import CompileInfo

    monkeypatch.setattr(budget, "compile_many", _fake_compiles(CompileInfo(error=PTXAS_ERROR.strip())))
    db = tmp_path / "e.db"
    assert sweep.main(["--gpu", "sm_89", "--study", str(_quick_study(tmp_path, "tma = [false]")),
                       "--storage", f"sqlite:///{db}", "--no-outputs"]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("compile_error ")]
    assert len(lines) == 4, err     # the four configs, one line each
    assert lines[0] == ("compile_error 16x16_w1_s1: PTXASError: ptxas fatal : (C7600) Insufficient registers for "
                        "Entry function 'attn_fwd'")
    assert "Repro command" not in err
    reasons = {r.reason for r in Store(f"sqlite:///{db}", create=False).results()}
    assert reasons == {PTXAS_ERROR.strip()}


def test_compiler_pages_go_to_the_compile_log(tmp_path):
    import subprocess
    import sys

    code = ("import os, sys; from tuner.budget import quiet_compiler_pages, compile_log; quiet_compiler_pages(); "
            "print('PAGE OF PTX'); os.system('echo CHILD PAGE'); sys.stderr.write('MLIR SAYS\\n')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=os.environ | {"FA2_TUNER_CACHE": str(tmp_path)}, timeout=120)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == "", done
    log = next(tmp_path.rglob("compile-errors.log")).read_text()
    assert "PAGE OF PTX" in log and "CHILD PAGE" in log and "MLIR SAYS" in log


def test_budget_only_run_leaves_an_optuna_study_and_says_what_it_wrote(tmp_path, monkeypatch, capsys):
    import optuna

    from tuner import budget
    from tuner.budget import CompileInfo

    fits = CompileInfo(shared_bytes=50688, registers=96, spill_bytes=0, binary="b")
    monkeypatch.setattr(budget, "compile_many", _fake_compiles(fits))
    out = tmp_path / "out"
    study = _quick_study(tmp_path, "tma = [false, true]")
    assert sweep.main(["--gpu", "sm_89", "--study", str(study), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "No config list was written" in text and "run the same command on a machine with the GPU" in text
    assert "optuna-dashboard sqlite:///" in text and not (out / "configs").exists()
    trials = optuna.load_study(study_name="quick@sm_89-budget", storage=f"sqlite:///{out / 'tuning.db'}").trials
    by_key = {t.user_attrs["config"]: t for t in trials}
    # sm_89 cannot run tma=True: the target's space leaves it out (said once), so 4 configs, not 8
    assert len(by_key) == len(trials) == 4 and not [key for key in by_key if "tma" in key]
    assert "tma" in captured.err and "sm_89" in captured.err, captured.err
    fitting = by_key["32x16_w1_s2"]
    assert fitting.state.name == "COMPLETE" and fitting.value == pytest.approx(50688 / 101376)
    assert fitting.user_attrs["status"] == "pending" and fitting.user_attrs["smem_bytes"] == 50688
    assert {t.state.name for t in trials} == {"COMPLETE"}
    assert fitting.params == {"block_m": 32, "block_n": 16, "num_warps": 1, "num_stages": 2, "tma": False,
                              "warp_specialize": False, "maxnreg": 0, "persistent": 0}


def test_budget_says_invalid_tiles_without_compiling_and_each_verdict_once(monkeypatch, capsys):
    from tuner.budget import _verdict

    asked: list = []
    real = _verdict.compile_many
    monkeypatch.setattr(_verdict, "compile_many", lambda tasks, *a, **k: asked.extend(tasks) or real([], *a, **k))
    assert budget_main(["--gpu", "sm_89", "--config", "100,64,4,3", "--config", "64x64_w4_s2_tma",
                        "--config", "64,64,4,9"]) == 2          # two of them bad inputs: named, after every verdict
    captured = capsys.readouterr()
    out = captured.out
    assert "--config 100,64,4,3: block_m=100" in captured.err and "--config 64,64,4,9: num_stages=9" in captured.err
    assert "64x64_w4_s2_tma" not in captured.err
    assert ("invalid: block_m=100 is not allowed (powers of two only); use one of 16, 32, 64, 128, 256"
            in out), out
    assert "invalid: num_stages=9 is not allowed; use one of 1, 2, 3, 4, 5, 6, 7, 8" in out
    assert "unsupported: TMA needs sm_90 or later" in out and "unsupported: unsupported" not in out
    assert asked == []


def test_budget_prints_a_compile_error_on_one_line(monkeypatch, capsys):
    from tuner.budget import CompileInfo, _verdict

    monkeypatch.setattr(_verdict, "compile_many", _fake_compiles(CompileInfo(error=PTXAS_ERROR.strip())))
    assert budget_main(["--gpu", "sm_89", "--config", "64,64,4,2"]) == 0
    row = [line for line in capsys.readouterr().out.splitlines() if "64x64_w4_s2" in line]
    assert len(row) == 1 and row[0].endswith("compile_error: PTXASError: ptxas fatal : (C7600) Insufficient "
                                             "registers for Entry function 'attn_fwd'"), row


def test_a_live_run_beats_its_heartbeat_and_stops_when_told(tmp_path):
    import time

    from tuner.store import RunHeartbeat, run_gone

    store = Store(f"sqlite:///{tmp_path / 'beat.db'}")
    run = Run(study="s", target="sm_89", gpu="none", sampler="grid", command="", torch_version="", triton_version="",
              driver="", host="elsewhere", pid=1)
    store.add(run)
    beat = RunHeartbeat(store, run.id, 0.05)
    beat.start()
    time.sleep(0.5)
    first = store.runs()[0].heartbeat_at
    time.sleep(0.3)
    assert first is not None and store.runs()[0].heartbeat_at > first
    assert not run_gone(store.runs()[0], grace_s=5)        # a remote run that beats is alive
    beat.stop()
    beat.join(2)
    stopped = store.runs()[0].heartbeat_at
    time.sleep(0.3)
    assert store.runs()[0].heartbeat_at == stopped and not beat.is_alive()
    assert run_gone(store.runs()[0], grace_s=0.1)          # and one that stopped beating is gone


@pytest.mark.parametrize("interpret, study, fragment", [
    ("0", None, "which is off here: run it as TRITON_INTERPRET=1 python -m tuner.sweep"),
    ("false", None, "which is off here"),
    ("1", "bf16.toml", "the interpreter's bf16 dot is wrong"),
])
def test_the_cpu_device_without_a_working_interpreter_is_refused_before_anything(files, capsys, monkeypatch,
                                                                                  interpret, study, fragment):
    """--device cpu under an interpreter that is off (the kernels then need a GPU and every trial would be
    stored as crashed) or with bf16 shapes (its dot is wrong there): exit 2, nothing written."""
    (files / "bf16.toml").write_text(SMALL_STUDY.replace("RULE", "block_m > 0").replace('"fp32"', '"bf16"'))
    monkeypatch.chdir(files)
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    before = _snapshot(files)
    argv = ["--gpu", "sm_89", "--device", "cpu", "--study", str(files / (study or "bad.toml"))]
    if study is None:
        argv[-1] = "small"
        (files / "small.toml").write_text(SMALL_STUDY.replace("RULE", "block_m > 0"))
        argv[-1] = str(files / "small.toml")
        before = _snapshot(files)
    assert _code(sweep.main, argv) == 2
    assert fragment in capsys.readouterr().err
    assert _snapshot(files) == before


def test_a_kernel_module_that_fails_as_it_loads_is_named_with_its_error(tmp_path, monkeypatch):
    from tuner import kernels

    (tmp_path / "fa2_user_kernel_that_raises.py").write_text("raise RuntimeError('the user module is broken')\n")
    (tmp_path / "fa2_user_kernel_bad_syntax.py").write_text("def (:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for module, fragment in (("fa2_user_kernel_that_raises", "RuntimeError: the user module is broken"),
                             ("fa2_user_kernel_bad_syntax", "SyntaxError"), ("..", "nor a module path")):
        with pytest.raises(kernels.KernelNotFound, match=fragment):
            kernels.get(module)

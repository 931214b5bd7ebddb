"""The profile stage on the CPU: real ncu output read back, every failure told apart, the
rows stored whole, the verdicts, the pages; ncu itself is replaced by a script that
replays the saved output (tests/fixtures/ncu, from an H200: each file's first lines say
how it was made)."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest
from conftest import FIXTURES, HAND_GPU, HAND_SHAPES

from tuner import profile
from tuner.kernels.triton_fwd import KERNEL, FwdConfig as Config
from tuner.problem import Problem
from tuner.profile.__main__ import main as profile_main
from tuner.store import Finalist, Profile, Store

NCU = FIXTURES / "ncu"
HAND_STUDY = types.SimpleNamespace(name="hand", shapes=tuple(Problem.from_label(s) for s in HAND_SHAPES),
                                   kernel=KERNEL, kernel_name="triton", pass_="fwd")
FAKE_NCU = """#!{python}
# Stands in for ncu: replays the H200 output saved for the requested target.
import json, os, sys
from pathlib import Path
if "--version" in sys.argv:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (build 36398880) (public-release)")
    sys.exit(0)
request = json.loads(sys.argv[-1])
with open(os.environ["FAKE_NCU_LOG"], "a") as log:
    log.write(json.dumps(request) + "\\n")
mode = os.environ.get("FAKE_NCU_" + request["target"].upper(), "replay")
if mode == "permission":
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
          "Counters on the target device 0.", file=sys.stderr)
    sys.exit(1)
if mode == "crash":
    print("Traceback (most recent call last):\\nRuntimeError: CUDA error: an illegal memory access", file=sys.stderr)
    print("==ERROR== The application returned an error code (1).")
    sys.exit(1)
if mode == "empty":
    sys.exit(0)
text = (Path({fixtures!r}) / (request["target"] + ".csv")).read_text()
if mode == "no_tensor_metric":
    text = text.replace("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", "renamed_metric")
print(text)
"""


def fixture(name: str) -> str:
    return (NCU / name).read_text()


def target(kind: str = "ours") -> profile.Target:
    return profile.Target(kind, Problem(), Config(128, 64, 8, 3) if kind == "ours" else None, 1)


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    path = tmp_path / "bin" / "ncu"
    path.parent.mkdir()
    path.write_text(FAKE_NCU.format(python=sys.executable, fixtures=str(NCU)))
    path.chmod(0o755)
    monkeypatch.setenv("FAKE_NCU_LOG", str(tmp_path / "ncu.log"))
    return path


# ------------------------------------------------------------------------------ reading ncu's output


def test_real_output_of_our_kernel_reads_back_in_stored_units():
    (ours,) = profile.parse_raw_csv(fixture("ours.csv"))
    assert "H200" in fixture("ours.csv").splitlines()[1] and "2026-11-30" in fixture("ours.csv").splitlines()[1]
    assert ours.kernel_name == "_flash_fwd_kernel"
    values = ours.values
    assert values["duration_us"] == pytest.approx(326.368)          # 326,368 ns
    assert values["tensor_pct"] == pytest.approx(46.45) and values["warps_active_pct"] == pytest.approx(24.08)
    assert values["registers"] == 126 and values["smem_dynamic_bytes"] == 65536
    assert values["dram_read_bytes"] == 50_367_232 and values["sm_clock_mhz"] == pytest.approx(1738.3, abs=0.1)
    assert (values["grid_size"], values["block_size"]) == (1024, 256)
    # "selected" is issuing, not waiting; the three largest real stalls, largest first
    assert [name for name, _ in ours.top_stalls()] == ["wait", "barrier", "not_selected"]


def test_sdpa_backends_are_found_by_their_kernel_names():
    flash = profile.pick_kernel(profile.parse_raw_csv(fixture("flash.csv")), target("sdpa_flash").pattern)
    cudnn = profile.pick_kernel(profile.parse_raw_csv(fixture("cudnn.csv")), target("sdpa_cudnn").pattern)
    assert "flash_fwd_kernel" in flash.kernel_name and "cudnn" in cudnn.kernel_name
    assert cudnn.values["duration_us"] < flash.values["duration_us"]


def test_a_kernel_name_that_is_not_found_is_named_with_what_ran():
    pattern = target("sdpa_flash").pattern
    with pytest.raises(profile.NcuOutputError, match=r"no profiled kernel matches .*; kernels profiled: _flash_fwd_k"):
        profile.pick_kernel(profile.parse_raw_csv(fixture("ours.csv")), pattern)
    with pytest.raises(profile.NcuOutputError):
        profile.pick_kernel(profile.parse_raw_csv(fixture("flash.csv")), target("ours").pattern)


def test_a_metric_missing_from_the_output_is_named():
    text = fixture("ours.csv").replace("lts__t_sector_hit_rate.pct", "lts__renamed")
    with pytest.raises(profile.NcuOutputError, match="lts__t_sector_hit_rate.pct"):
        profile.parse_raw_csv(text)


@pytest.mark.parametrize("stdout, stderr, code, error, words", [
    ("", "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission", 1, profile.CountersNotPermitted,
     "NVreg_RestrictProfilingToAdminUsers=0"),
    ("", "", 0, profile.NcuOutputError, "printed nothing"),
    ("==ERROR== The application returned an error code (1).", "RuntimeError: CUDA error: illegal address", 1,
     profile.ProfileError, "exit status 1.*illegal address"),
])
def test_each_failure_of_ncu_is_told_apart(stdout, stderr, code, error, words):
    with pytest.raises(error, match=words) as info:
        profile.interpret(stdout, stderr, code, target())
    assert type(info.value) is error


def test_no_kernel_profiled_lists_the_kernels_ncu_saw():
    with pytest.raises(profile.NcuOutputError, match="cudnn_generated_fort_native_sdpa_sm90"):
        profile.interpret(fixture("no_kernel.txt"), "", 0, target("sdpa_cudnn"))


def test_ncu_is_found_where_the_user_says_or_its_absence_is_explained(tmp_path, monkeypatch, fake_ncu):
    with pytest.raises(profile.NcuMissing, match="--ncu"):
        profile.find_ncu(str(tmp_path / "nowhere" / "ncu"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.delenv("FA2_TUNER_NCU", raising=False)
    if not Path("/usr/local/cuda/bin/ncu").exists():
        with pytest.raises(profile.NcuMissing, match="ncu was not found"):
            profile.find_ncu()
    monkeypatch.setenv("PATH", str(fake_ncu.parent))
    assert profile.find_ncu() == str(fake_ncu)
    assert profile.ncu_version(str(fake_ncu)) == "2025.3.1.0"


def test_the_command_profiles_only_the_launch_program_with_clocks_left_alone():
    line = profile.command("ncu", target())
    assert line[line.index("--clock-control") + 1] == "none"
    assert line[line.index("--profile-from-start") + 1] == "off"
    assert "regex:" in line[line.index("--metrics") + 1]
    request = json.loads(line[-1])
    assert request["target"] == "ours" and request["config"] == Config(128, 64, 8, 3).as_kwargs()
    assert Problem(**request["shape"]) == Problem()


# ------------------------------------------------------------------------------ profiling a store


def _finalists(db: Store, shape: str, keys: list[str]) -> None:
    """``keys`` re-timed in that order: each round of a later rank a little slower."""
    db.replace_finalists([Finalist(run_id=1, study="hand", target="sm_90", gpu=HAND_GPU, shape=shape, config=key,
                                   rank=rank, rounds=5, median_ms=0.01, min_ms=0.01, max_ms=0.01, spread=0.0,
                                   times=json.dumps([0.01 * (1 + rank / 100)] * 5))
                          for rank, key in enumerate(keys, start=1)])


def _profile(db: Store, ncu: Path, top: int = 2) -> list[Profile]:
    return profile.profile_study(db, HAND_STUDY, "sm_90", HAND_GPU, top=top, ncu=str(ncu), say=lambda line: None)


def test_each_shape_gets_its_best_configs_then_sdpa_on_the_same_inputs(hand_store, fake_ncu, tmp_path):
    db = hand_store()
    _finalists(db, HAND_SHAPES[0], ["128x128_w8_s2", "64x64_w4_s2", "128x64_w8_s2"])   # not in time order
    rows = _profile(db, fake_ncu)
    stored = db.profiles("hand")
    assert len(stored) == len(rows) == 8 and all(r.status == "ok" for r in stored)
    by_shape = {shape: [(r.kind, r.config, r.rank) for r in rows if r.shape == shape] for shape in HAND_SHAPES}
    # the re-timed finalists in rank order where there are any, else the fastest timed configs
    assert by_shape[HAND_SHAPES[0]] == [("ours", "128x128_w8_s2", 1), ("ours", "64x64_w4_s2", 2),
                                        ("sdpa_flash", "", None), ("sdpa_cudnn", "", None)]
    assert [c for _, c, _ in by_shape[HAND_SHAPES[1]][:2]] == ["64x64_w4_s2", "128x128_w8_s2"]
    requests = [json.loads(line) for line in (tmp_path / "ncu.log").read_text().splitlines()]
    assert [r["target"] for r in requests[:4]] == ["ours", "ours", "flash", "cudnn"]
    assert {json.dumps(r["shape"], sort_keys=True) for r in requests[:4]} == {
        json.dumps(requests[0]["shape"], sort_keys=True)}
    ours = next(r for r in stored if r.kind == "ours")
    assert (ours.kernel_name, ours.duration_us, ours.registers, ours.smem_bytes) == (
        "_flash_fwd_kernel", pytest.approx(326.368), 126, 65536)
    assert ours.ncu_version == "2025.3.1.0" and [s for s, _ in profile.stalls_of(ours)] == [
        "wait", "barrier", "not_selected"]
    assert len(_profile(db, fake_ncu)) == 8 and len(db.profiles("hand")) == 8     # a rerun replaces


def test_a_failing_kernel_is_stored_whole_as_failed_and_the_others_go_on(hand_store, fake_ncu, monkeypatch):
    db = hand_store()
    monkeypatch.setenv("FAKE_NCU_CUDNN", "crash")
    monkeypatch.setenv("FAKE_NCU_FLASH", "no_tensor_metric")
    rows = _profile(db, fake_ncu, top=1)
    status = {(r.shape, r.kind): r for r in db.profiles("hand")}
    assert len(rows) == len(status) == 6
    for shape in HAND_SHAPES:
        assert status[(shape, "ours")].status == "ok"
        cudnn, flash = status[(shape, "sdpa_cudnn")], status[(shape, "sdpa_flash")]
        assert cudnn.status == flash.status == "failed"
        assert "illegal memory access" in cudnn.reason and "sm__pipe_tensor_op_hmma" in flash.reason
        for row in (cudnn, flash):      # never half a row: no counter at all
            assert all(getattr(row, c) is None for c in ("duration_us", "tensor_pct", "dram_read_bytes", "registers",
                                                        "stalls", "kernel_name", "smem_bytes"))


def test_counters_off_limits_stop_the_run_and_say_what_to_change(hand_store, fake_ncu, monkeypatch):
    db = hand_store()
    monkeypatch.setenv("FAKE_NCU_OURS", "permission")
    with pytest.raises(profile.CountersNotPermitted, match="NVreg_RestrictProfilingToAdminUsers"):
        _profile(db, fake_ncu)
    assert db.profiles() == []


def test_a_store_with_nothing_timed_has_nothing_to_profile(hand_store, fake_ncu):
    db = hand_store()
    with pytest.raises(profile.ProfileError, match="no timed config.*run python -m tuner.sweep"):
        profile.profile_study(db, HAND_STUDY, "sm_89", HAND_GPU, ncu=str(fake_ncu))


# ------------------------------------------------------------------------------ verdicts and pages


def _row(**values) -> Profile:
    base = dict(status="ok", tensor_pct=40.0, warps_active_pct=50.0, dram_pct=10.0, duration_us=100.0, stalls="[]")
    return Profile(**{**base, **values})


def test_the_verdict_names_the_bound_from_the_counters():
    assert profile.verdict(_row(dram_pct=80.0)).endswith("memory-bound")
    assert profile.verdict(_row(tensor_pct=72.0)).endswith("compute-bound")
    line = profile.verdict(_row(warps_active_pct=24.0, stalls='[["wait", 1.48]]'), _row(tensor_pct=71.0,
                                                                                          duration_us=80.0))
    assert "warps active 24%, DRAM 10%" in line and "top stalls wait 1.48: latency-bound" in line
    assert line.endswith("cuDNN: tensor pipe 71%, warps active 50%, 0.80x our time")
    assert profile.verdict(_row(status="failed", reason="ncu printed nothing")) == "not profiled: ncu printed nothing"


def test_verdict_lines_compare_each_kernel_with_cudnn(hand_store, fake_ncu):
    db = hand_store()
    lines = profile.verdict_lines(_profile(db, fake_ncu, top=1))
    ours = next(line for line in lines if "64x64_w4_s2" in line)
    assert "tensor pipe 46% of peak" in ours and "latency-bound" in ours and "; cuDNN: tensor pipe" in ours
    cudnn = [line for line in lines if "SDPA-cuDNN:" in line]
    assert len(cudnn) == 2 and not any("; cuDNN:" in line for line in cudnn)


def test_the_pages_show_each_profiled_shape_and_measured_bytes_on_the_roofline(hand_store, fake_ncu, tmp_path):
    from tuner import dashboard

    db = hand_store()
    _profile(db, fake_ncu)
    pages = dashboard.build_all(db, tmp_path / "pages", plotlyjs="cdn")
    profile_pages = [p for p in pages if p.name.endswith("__profile.html")]
    assert len(profile_pages) == 2
    text = profile_pages[0].read_text()
    assert "SDPA-cuDNN" in text and "latency-bound" in text and "tensor pipe active" in text
    roof = next(p for p in pages if p.name.endswith("__roofline.html")).read_text()
    assert "profiled: our finalists (measured bytes)" in roof and "profiled: SDPA-cuDNN (measured bytes)" in roof
    assert "profile · " + HAND_SHAPES[0] in (tmp_path / "pages" / "index.html").read_text()


def test_a_profiled_point_sits_at_its_measured_bytes():
    from tuner.dashboard import profiled_point

    shape = Problem()
    row = _row(shape=shape.label, dram_read_bytes=50e6, dram_write_bytes=10e6, duration_us=500.0)
    flops = 4 * 4 * 8 * 4096 * 4096 * 64
    x, y = profiled_point(row)
    assert x == pytest.approx(flops / 60e6) and y == pytest.approx(flops / 500e-6 / 1e12)


# ------------------------------------------------------------------------------ the command line


def test_the_command_line_refuses_what_it_cannot_do_with_exit_2(hand_store, fake_ncu, tmp_path, monkeypatch, capsys):
    db = hand_store()
    url = db.url
    base = ["--study", "article", "--gpu", "sm_90", "--storage", url]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.delenv("FA2_TUNER_NCU", raising=False)
    cases = [
        (base + ["--shape", "B1 H1 Nq1 Nk1 D64 bf16"], "is not a shape of article"),
        (base + ["--n", "3"], "--n [3] matches no shape of article; its lengths are [512, 1024, 2048, 4096]"),
        (base + ["--top", "0"], "--top 0 must be at least 1"),
        (["--study", "article", "--gpu", "sm_99", "--storage", url], "--gpu: unknown GPU 'sm_99'"),
        (base + ["--out", str(tmp_path / "hand.db")], "is a file; give a folder"),
        (base + ["--markdown", str(tmp_path)], "--markdown"),
    ]
    missing_store = ["--study", "article", "--gpu", "sm_90", "--storage", f"sqlite:///{tmp_path / 'none.db'}"]
    cases.append((missing_store, "no such database file"))      # an argument: said before the GPU is asked for
    import torch
    if torch.cuda.is_available():
        cases.append((base + ["--ncu", str(tmp_path / "nowhere")], "ncu was not found"))
        if not Path("/usr/local/cuda/bin/ncu").exists():
            cases.append((base, "ncu was not found"))
    else:     # no GPU is said first, whether ncu is there or not
        cases += [(base + ["--ncu", str(fake_ncu)], "needs the CUDA GPU"), (base, "needs the CUDA GPU"),
                  (base + ["--ncu", str(tmp_path / "nowhere")], "needs the CUDA GPU")]
    for argv, words in cases:
        assert profile_main(argv) == 2, argv
        assert words in capsys.readouterr().err, (argv, words)


def _asks_for_no_gpu(monkeypatch) -> None:
    """The GPU asked for fails the test: every argument must have been judged first."""
    from tuner.profile import __main__ as profile_cli

    def present_gpu(parser):
        raise AssertionError("the GPU was asked for before every argument was checked")

    monkeypatch.setattr(profile_cli, "_present_gpu", present_gpu)


@pytest.mark.parametrize("extra, said", [
    (["--markdown", ""], "argument --markdown: '' is empty: give a value, or leave the flag out for its default"),
    (["--timeout", "inf"], "--timeout inf must be a positive, finite number of seconds"),
    (["--timeout", "nan"], "--timeout nan must be a positive, finite number of seconds"),
    (["--storage", "not a url"], "--storage: 'not a url' is not a database URL"),
    (["--storage", "sqlite:///{tmp}/none.db"], "--storage: sqlite:///{tmp}/none.db: no such database file"),
])
def test_bad_arguments_are_refused_before_the_gpu_is_asked_for(extra, said, tmp_path, monkeypatch, capsys):
    """Bugs caught (the 2026-12-04 evening battery): ``--markdown ''`` said "'.' is a folder"; ``--timeout inf``
    was taken; these and a bad --storage were answered "needs the CUDA GPU" on a machine without one."""
    _asks_for_no_gpu(monkeypatch)
    argv = ["--study", "article", "--gpu", "sm_90", "--no-outputs"] + [a.replace("{tmp}", str(tmp_path)) for a in extra]
    try:
        code = profile_main(argv)
    except SystemExit as exit_:             # argparse's own errors
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and said.replace("{tmp}", str(tmp_path)) in err.strip().splitlines()[-1], err
    assert "Traceback" not in err and not list(tmp_path.iterdir())


def test_a_store_profile_cannot_write_is_refused_before_the_gpu_is_asked_for(hand_store, monkeypatch, capsys):
    """It stores the counters there: a read-only store is refused naming --storage, as the sweep refuses it."""
    db = hand_store()
    file = Path(db.url.removeprefix("sqlite:///"))
    db.engine.dispose()
    _asks_for_no_gpu(monkeypatch)
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: False if Path(path) == file and mode & os.W_OK
                        else real(path, mode, *a, **k))
    assert profile_main(["--study", "article", "--gpu", "sm_90", "--storage", db.url, "--no-outputs"]) == 2
    assert f"error: --storage: {db.url}: {str(file)!r} cannot be written" in capsys.readouterr().err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the refusal for want of a GPU")
def test_a_profile_refused_for_want_of_a_gpu_leaves_the_store_as_it_was(hand_store, fake_ncu, tmp_path, capsys):
    """The GPU is asked about before the store is opened (the 2026-12-04 battery: the store file changed first)."""
    import hashlib

    db = hand_store()
    path = Path(db.url.removeprefix("sqlite:///"))
    db.engine.dispose()
    files = sorted(path.parent.glob(path.name + "*"))
    before = {f.name: (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime_ns) for f in files}
    assert profile_main(["--study", "article", "--gpu", "sm_90", "--storage", db.url, "--ncu", str(fake_ncu),
                         "--out", str(tmp_path / "out")]) == 2
    assert "needs the CUDA GPU" in capsys.readouterr().err
    after = {f.name: (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime_ns)
             for f in sorted(path.parent.glob(path.name + "*"))}
    assert after == before and not (tmp_path / "out").exists()


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit):
        profile_main(["--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and "--n 4096" in text


def test_the_sweep_skips_its_profile_saying_why(tiny, tmp_path, sweep_args, monkeypatch, capsys, fake_ncu):
    from tuner import sweep

    monkeypatch.setenv("PATH", str(tmp_path / "empty") + os.pathsep + os.path.dirname(sys.executable))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.delenv("FA2_TUNER_NCU", raising=False)
    db = tmp_path / "p.db"
    args = sweep_args(tiny, db, "--sampler", "random", "--trials", "1", "--finalists", "0", "--profile")
    assert sweep.main(args) == 0
    if not Path("/usr/local/cuda/bin/ncu").exists():
        assert "profile skipped: Nsight Compute's ncu was not found" in capsys.readouterr().err
    monkeypatch.setenv("FA2_TUNER_NCU", str(fake_ncu))
    assert sweep.main(args) == 0
    assert "profile skipped: ncu profiles GPU kernels, and this sweep ran in the interpreter" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.timing
def test_ncu_profiles_our_kernel_and_sdpa_on_this_gpu():
    """On a GPU with ncu: one real profile of each kind, with every counter in range."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    try:
        ncu = profile.find_ncu()
    except profile.NcuMissing as exc:
        pytest.skip(str(exc))
    shape = Problem(2, 4, 1024, 1024, 64, "bf16", True)
    for kind, config in (("ours", Config(64, 64, 4, 3)), ("sdpa_flash", None), ("sdpa_cudnn", None)):
        counters = profile.profile(ncu, profile.Target(kind, shape, config))
        values = counters.values
        assert 0 < values["duration_us"] < 10_000 and 0 < values["tensor_pct"] <= 100, (kind, values)
        assert 0 < values["warps_active_pct"] <= 100 and values["dram_read_bytes"] > 0 and values["registers"] > 0
        assert len(counters.top_stalls()) == 3
        print(f"ncu {kind}: {counters.kernel_name[:60]} {values['duration_us']:.1f} us, "
              f"tensor {values['tensor_pct']:.0f}%, warps {values['warps_active_pct']:.0f}%")


def test_every_name_the_package_exports_resolves():
    assert all(getattr(profile, name) is not None for name in profile.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        profile.nothing  # noqa: B018


def test_the_markdown_report_has_a_table_per_shape_and_the_verdicts(hand_store, fake_ncu, monkeypatch):
    db = hand_store()
    monkeypatch.setenv("FAKE_NCU_FLASH", "empty")
    text = profile.markdown(_profile(db, fake_ncu, top=1))
    assert text.count("### ") == 2 and text.count("| #1 64x64_w4_s2 | 326.4 | 46.5 |") == 1
    assert "| SDPA-flash | failed: ncu printed nothing" in text and "latency-bound" in text

"""``emit --top N`` with more candidates than it keeps: the N best across shapes by score (each
shape counted against its own best), after the shape winners, whatever order they were stored in."""

from __future__ import annotations

import datetime as dt
import types

import pytest

from tuner import emit
from tuner.gpus import GpuSpec
from tuner.kernels.triton_fwd import KERNEL, FwdConfig
from tuner.store import Result, Run, Store

STUDY = types.SimpleNamespace(name="top", kernel=KERNEL)
SM90 = GpuSpec.from_name("sm_90")
SHAPES = ("B1 H2 Nq128 Nk128 D64 bf16", "B1 H2 Nq256 Nk256 D64 bf16")
# key -> ms on each shape; ranked by the geometric mean of (shape's best / ms), the bests being
# 0.5 (CRASHED's one timed row) and 1.0
TIMES = {
    "32x32_w4_s2": (1.50, 1.50),     # 0.471: last
    "64x64_w4_s2": (1.00, 2.00),     # wins shape 0 among the candidates; 0.5
    "64x32_w4_s2": (2.00, 1.00),     # wins shape 1; 0.5
    "32x64_w4_s2": (1.20, 1.20),     # 0.589: second
    "64x16_w4_s2": (1.10, 1.10),     # 0.643: first
    "16x64_w4_s2": (1.05, 1.60),     # 0.546: third
}
CRASHED = "16x16_w4_s2"              # fastest on shape 0, crashed on shape 1: never a candidate


def _store(tmp_path) -> Store:
    db = Store(f"sqlite:///{tmp_path / 'top.db'}")
    run = Run(study="top", target="sm_90", gpu="G", sampler="grid", command="", torch_version="t",
              triton_version="r", driver="d")
    db.add(run)
    rows = []
    for key, times in [*TIMES.items(), (CRASHED, (0.5, None))]:
        config = FwdConfig.parse(key)
        for shape, n, ms in zip(SHAPES, (128, 256), times):
            rows.append(Result(run_id=run.id, study="top", target="sm_90", gpu="G", torch_version="t",
                               triton_version="r", driver="d", shape=shape, batch=1, heads=2, n_q=n, n_k=n,
                               head_dim=64, dtype="bf16", causal=False, config=key, block_m=config.block_m,
                               block_n=config.block_n, num_warps=4, num_stages=2,
                               status="timed" if ms else "crashed", stage="time", ms=ms,
                               tflops=1.0 / ms if ms else None, pct_flash=100 / ms if ms else None,
                               pct_cudnn=50 / ms if ms else None, created_at=dt.datetime(2026, 12, 1)))
    db.replace_results(rows)
    return db


@pytest.mark.parametrize("top, extra", [
    (0, []), (1, ["64x16_w4_s2"]), (2, ["64x16_w4_s2", "32x64_w4_s2"]),
    (3, ["64x16_w4_s2", "32x64_w4_s2", "16x64_w4_s2"]),
    (5, ["64x16_w4_s2", "32x64_w4_s2", "16x64_w4_s2"]),          # the 4th and 5th best are the winners
    (6, ["64x16_w4_s2", "32x64_w4_s2", "16x64_w4_s2", "32x32_w4_s2"]), (60, ["64x16_w4_s2", "32x64_w4_s2",
                                                                            "16x64_w4_s2", "32x32_w4_s2"])])
def test_top_keeps_the_best_across_shapes_after_the_winners(tmp_path, top, extra):
    emitted = emit.emit(_store(tmp_path), STUDY, SM90, top=top)
    assert [e.config.key for e in emitted.entries] == ["64x32_w4_s2", "64x64_w4_s2", *extra]
    assert [e.wins for e in emitted.entries] == [1, 1] + [0] * len(extra)
    assert emitted.text.count("triton.Config(") == 2 + len(extra)
    assert CRASHED not in emitted.text and '"BLOCK_M": 16, "BLOCK_N": 16' not in emitted.text


def test_the_scores_in_the_notes_are_each_configs_own(tmp_path):
    emitted = emit.emit(_store(tmp_path), STUDY, SM90, top=3)
    notes = {e.config.key: e.notes for e in emitted.entries}
    assert notes["64x16_w4_s2"] == ["not a shape's best; 0.643 of the best time, geometric mean over shapes"]
    assert notes["16x64_w4_s2"] == ["not a shape's best; 0.546 of the best time, geometric mean over shapes"]
    assert notes["64x64_w4_s2"][0].startswith("best for B1 H2 Nq128 Nk128 D64 bf16: 1.0000 ms")


def test_the_cli_passes_top_through_and_refuses_a_negative_one(tmp_path, capsys):
    db = _store(tmp_path)
    study = tmp_path / "top.toml"
    study.write_text('name = "top"\n[problem]\nbatch = 1\nheads = 2\nn = [128, 256]\n')
    out = tmp_path / "c.py"
    assert emit.main(["--study", str(study), "--gpu", "sm_90", "--storage", db.url, "--out", str(out),
                      "--top", "1"]) == 0
    assert out.read_text().count("triton.Config(") == 3
    assert emit.main(["--study", str(study), "--gpu", "sm_90", "--storage", db.url, "--top", "-1"]) == 2
    assert "--top -1 must be 0 or more" in capsys.readouterr().err

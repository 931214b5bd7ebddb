"""Test setup and shared fixtures.

Without CUDA, kernels run in Triton's interpreter on the CPU. TRITON_INTERPRET must be
set before ``kernel`` is imported (``@triton.jit`` reads it when the kernel is
decorated), so it is set here, at collection time.

The tests are laid out as the packages they test (tests/kernel/triton/ for kernel/triton/, and so on);
the shared helpers (this file, gluon_fakes.py, gluon_smoke.py, the fake drivers, fixtures/) stay here,
on the path through pyproject's ``pythonpath``. Paths into the repository start from :data:`ROOT`.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent     # the repository: tests/.. wherever a test file sits
FIXTURES = ROOT / "tests" / "fixtures"

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
DEVICE = "cuda" if HAS_CUDA else "cpu"

TINY_STUDY = """
name = "tiny"
[problem]
batch = 1
heads = 2
n = 64
head_dim = 16
dtype = "fp32"
causal = [false, true]
[space]
block_m = [16, 32]
block_n = [16, 32]
num_warps = [1]
num_stages = [1, 2]
tma = [false]
persistent = [0]
restrictions = ["block_m >= block_n"]
[timing]
warmup_ms = 1
rep_ms = 1
"""


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        if os.environ.get("PYTEST_XDIST_WORKER"):       # beside other GPU tests a timer measures them too
            alone = pytest.mark.skip(reason="times the GPU: run alone, with -m 'gpu and timing' and no -n")
            for item in items:
                if "timing" in item.keywords:
                    item.add_marker(alone)
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> str:
    return DEVICE


@pytest.fixture
def fresh_inputs():
    """A function making new random q, k, v for every call (never a fixed seed); it returns the seed too."""
    def make(shape_q, shape_kv, dtype, device=DEVICE):
        seed = int.from_bytes(os.urandom(4), "little")
        gen = torch.Generator(device="cpu").manual_seed(seed)
        q, k, v = (torch.randn(s, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
                   for s in (shape_q, shape_kv, shape_kv))
        return q, k, v, seed
    return make


def nan_outputs_like(q):
    """Outputs filled with NaN, so an element the kernel does not write fails the check."""
    out = torch.full(q.shape, float("nan"), device=q.device, dtype=q.dtype)
    lse = torch.full(q.shape[:-1], float("nan"), device=q.device, dtype=torch.float32)
    return out, lse


@pytest.fixture
def nan_outputs():
    return nan_outputs_like


@pytest.fixture
def assert_matches_reference():
    """The flash-attention test rule (``kernel.reference.accuracy``), with the seed on failure."""
    from kernel.reference import accuracy

    def check(out, lse, q, k, v, causal, seed, label=""):
        result = accuracy(out, lse, q, k, v, causal)
        assert result.ok, f"{label} {result.reason}, seed {seed}"
        return result
    return check


@pytest.fixture
def tiny(tmp_path) -> Path:
    """A study of 8 configs on two fp32 shapes, small enough for the interpreter."""
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_STUDY)
    return path


@pytest.fixture
def sweep_args():
    """Arguments of a CPU sweep (the interpreter stands in for the GPU) on a study and database."""
    def args(study: Path, db: Path, *extra: str) -> list[str]:
        return ["--gpu", "sm_89", "--study", str(study), "--storage", f"sqlite:///{db}", "--no-outputs",
                "--device", "cpu", "--trial-timeout", "120", *extra]
    return args


@pytest.fixture
def query():
    """Run SQL on a SQLite file and return the rows."""
    def run(db: Path, sql: str) -> list[tuple]:
        with sqlite3.connect(db) as connection:
            return connection.execute(sql).fetchall()
    return run


# --------------------------------------------------------------- a hand-written store

HAND_SHAPES = ("B1 H2 Nq128 Nk128 D64 bf16", "B1 H2 Nq128 Nk128 D64 bf16 causal")
HAND_GPU = "NVIDIA H200 (sm_90)"
# config key -> (status, ms on each shape or None, reason); every status, and one mixed-status config.
HAND_ROWS = {
    "64x64_w4_s2": ("timed", (0.010, 0.008), ""),
    "128x64_w8_s2": ("timed", (0.009, 0.012), ""),
    "128x128_w8_s2": ("timed", (0.011, 0.009), ""),
    "256x256_w8_s3": ("over_smem", None, "needs 393216 B > 232448 B on sm_90"),
    "256x256_w1_s1": ("over_registers", None, "registers: S and O accumulators alone need 2560 per thread > 255"),
    "16x16_w16_s1": ("invalid", None, "warps: 16 warps for 2 mma tiles of 16x8; use fewer warps"),
    "64x32_w4_s1": ("compile_error", None, "PTXASError: Insufficient registers"),
    "64x16_w4_s2": ("incorrect", None, "gate one-key (193x33): out rel err 4.1e-02 (bound 9.0e-03)"),
    "32x32_w4_s2": ("crashed", None, "worker died during trial (exit code -11)"),
    "32x16_w4_s2": ("timeout", None, "no answer to trial within 180 s; worker killed"),
    "16x32_w4_s2": ("restricted", None, "excluded by the study's restrictions ['block_m >= block_n']"),
    "32x64_w4_s3": ("pending", None, "fits sm_90; timing needs a CUDA GPU"),
    "64x128_w4_s2": ("mixed", (0.007, None), "worker died during trial (exit code -11)"),
}


def hand_rows(run_id: int, overrides: dict | None = None) -> list:
    """Result rows for :data:`HAND_ROWS` on both shapes (``overrides``: config -> column values)."""
    import datetime as dt

    from tuner.kernels.triton_fwd import FwdConfig as Config
    from tuner.store import Result

    rows = []
    for key, (status, times, reason) in HAND_ROWS.items():
        config = Config.parse(key)
        for index, shape in enumerate(HAND_SHAPES):
            ms = times[index] if times else None
            row_status = status if status != "mixed" else ("timed" if ms else "crashed")
            flops = 4.0 * 2 * 128 * 128 * 64 * (0.5 if index else 1.0)
            values = dict(
                run_id=run_id, study="hand", target="sm_90", gpu=HAND_GPU, torch_version="2.11.0",
                triton_version="3.6.0", driver="580.159.04", shape=shape, batch=1, heads=2, n_q=128, n_k=128,
                head_dim=64, dtype="bf16", causal=bool(index), config=key, block_m=config.block_m,
                block_n=config.block_n, num_warps=config.num_warps, num_stages=config.num_stages,
                status=row_status, stage="time" if ms else "check", reason="" if ms else reason,
                smem_bytes=393216 if status == "over_smem" else (config.block_m + 2 * config.block_n) * 128,
                smem_limit_bytes=232448, ms=ms, tflops=flops / ms * 1e-9 if ms else None,
                host_us=12.5 + index if ms else None, timer="cuda_graph" if ms else None,
                flash_ms=0.02 if ms else None, cudnn_ms=0.01 if ms else None,
                pct_flash=100 * 0.02 / ms if ms else None, pct_cudnn=100 * 0.01 / ms if ms else None,
                created_at=dt.datetime(2026, 11, 30, 12, 0))
            values.update((overrides or {}).get(key, {}))
            rows.append(Result(**values))
    return rows


@pytest.fixture
def hand_store(tmp_path):
    """A store holding :data:`HAND_ROWS`: every status, and a config timed on one shape only."""
    def make(overrides: dict | None = None):
        from tuner.store import Run, Store

        db = Store(f"sqlite:///{tmp_path / 'hand.db'}")
        run = Run(study="hand", target="sm_90", gpu=HAND_GPU, sampler="grid", command="", torch_version="2.11.0",
                  triton_version="3.6.0", driver="580.159.04")
        db.add(run)
        db.replace_results(hand_rows(run.id, overrides))
        return db
    return make

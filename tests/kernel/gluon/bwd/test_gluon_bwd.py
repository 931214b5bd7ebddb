"""The warp-specialized Gluon backward for Hopper (kernel/gluon/bwd/launch.py).

* Compile tests (no GPU): the defaults and the knob variants compile for sm_90 under Triton 3.6
  with no register spills (but those of :data:`SPILLING`), the PTX holds wgmma, bulk tensor copies,
  the bulk reduce (dQ) and ``setmaxnreg``, and the shared memory is the model's figure, within the 227 KB limit.
  Skipped, with the reason, on a Triton whose Gluon API is not 3.6's (as tests/kernel/gluon/fwd/test_gluon.py).
* GPU tests (``gpu`` mark, an sm_90 GPU with Triton 3.6): dQ, dK and dV against a float32
  autograd reference of the math, within 3x PyTorch's own bf16 error on the same inputs
  (``kernel.reference.grad_accuracy``), on NaN-filled gradients and fresh random inputs. A
  smoke run in a subprocess with a timeout goes first, so a kernel that deadlocks on its
  barriers fails the tests instead of hanging them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict, replace

import pytest
import torch
from conftest import ROOT
from gluon_smoke import cross_compile_in_processes, smoke_verdict, spill_allowance

from kernel.candidates import BACKWARD
from kernel.gluon.api import GluonUnavailable, gluon_api_support, gluon_bwd_support
from kernel.gluon.bwd.config import GLUON_BWD_DEFAULTS, GluonBwdConfig
from kernel.gluon.bwd.launch import flash_attn_bwd_gluon
from kernel.gluon.smem import SMEM_LIMIT, STATIC_SMEM

SPILLS = spill_allowance()      # stack bytes allowed (0 but under Triton 3.9's ptxas)
API_REASON = gluon_api_support()
needs_gluon_api = pytest.mark.skipif(API_REASON is not None,
                                     reason=f"compile tests need a Gluon with the kernels' API: {API_REASON}")
RUN_REASON = gluon_bwd_support() if torch.cuda.is_available() else "needs a CUDA GPU"
needs_hopper = pytest.mark.skipif(RUN_REASON is not None, reason=str(RUN_REASON))
DEFAULT_CASES = sorted(GLUON_BWD_DEFAULTS)           # (head_dim, causal)

# ------------------------------------------------------------------ compile tests (CPU)

# The backward candidate gluon_128 as a default call runs it (its knobs over D=64's default).
GLUON_128 = replace(GLUON_BWD_DEFAULTS[(64, False)], **BACKWARD["gluon_128"].settings)
# Knob variants that must compile without spills, but SPILLING's (config, head_dim).
VARIANTS = [
    (GluonBwdConfig(128, num_stages=2, dq_bufs=2, consumer_regs=256), 64),
    (GluonBwdConfig(64, num_stages=1, dq_bufs=1), 64),
    (GluonBwdConfig(64, num_stages=3, dq_bufs=2), 128),
    (GluonBwdConfig(64, num_stages=2, dq_bufs=1), 128),
    (GluonBwdConfig(64, num_stages=2, dq_bufs=2, persistent=1), 128),
    (GluonBwdConfig(64, num_stages=4, dq_bufs=2, persistent=2, consumer_regs=232), 64),
    (GluonBwdConfig(64, num_stages=2, dq_bufs=2, consumers=2), 128),
    (GluonBwdConfig(64, num_stages=2, dq_bufs=1, consumers=2, persistent=1), 128),
    # D=64 over 128 keys (candidate gluon_2c): each consumer's dQ is a 32-column slice of K's 128-byte swizzle.
    (GluonBwdConfig(64, num_stages=3, dq_bufs=2, consumers=2, consumer_regs=240), 64),
    (GluonBwdConfig(64, num_stages=3, dq_bufs=1, consumers=2, persistent=1, consumer_regs=240), 64),
    (GluonBwdConfig(64, num_stages=3, dq_bufs=1, consumers=2, consumer_regs=240), 64),   # gluon_2c itself
    (GLUON_128, 64),
]
# Variants timed with the stack they spill (bytes allowed, over SPILLS): gluon_128's two consumers hold
# [64, 128] fp32 scores and dP^T each at the 168-register launch cap; ptxas 12.x spills 40 B of them under
# Triton 3.6 (the GPU's), up to 48 B under 3.8 (13.x, 3.9: up to 128, under SPILLS). It ran the fastest of
# D=64's backwards with them (docs/results/2026-12-08-h100-gluon-128-route-and-job.md): more fails.
SPILLING = {GLUON_128: 48}
# Knobs each smoke run takes: the defaults (two consumer warpgroups at D=128, their own barriers),
# one consumer everywhere, and two at D=64 too (32 of dQ's columns each).
TWO_CONSUMERS_D64 = "consumers=2,consumer_regs=240"
SMOKE_KNOBS = ("", "consumers=1", TWO_CONSUMERS_D64)


def _case_id(case) -> str:
    return f"D{case[0]}-{'causal' if case[1] else 'full'}"


def _compile_cases() -> dict:
    cases = {f"default-{_case_id(c)}": (GLUON_BWD_DEFAULTS[c], c[0], c[1], 1000, 1000) for c in DEFAULT_CASES}
    for d in (64, 128):
        cases[f"n1-D{d}"] = (GLUON_BWD_DEFAULTS[(d, True)], d, True, 1, 1)
        cases[f"n16-D{d}"] = (GLUON_BWD_DEFAULTS[(d, False)], d, False, 16, 16)
        cases[f"ragged-D{d}"] = (GLUON_BWD_DEFAULTS[(d, True)], d, True, 385, 129)
    for index, (config, d) in enumerate(VARIANTS):
        cases[f"variant{index}"] = (config, d, index % 2 == 1, 1000, 3000)
    return cases


@pytest.fixture(scope="module")
def compiled() -> dict:
    """Every compile case, cross-compiled outside Triton's interpreter (the CPU tests run under
    TRITON_INTERPRET=1, which Gluon's compiler cannot work under), in up to 4 processes."""
    cases = _compile_cases()
    payload = [dict(config=asdict(config), head_dim=d, causal=causal, n_q=n_q, n_k=n_k)
               for config, d, causal, n_q, n_k in cases.values()]
    return dict(zip(cases, cross_compile_in_processes("kernel.gluon.bwd.compile", payload)))


def _ok(report: dict) -> dict:
    assert report["error"] is None, report["error"]
    return report


def _no_spills(report: dict, allowed: int = 0) -> None:
    resources = report["resources"]
    if resources:               # cuobjdump ships with Triton's NVIDIA backend
        assert resources["STACK"] <= max(SPILLS, allowed), f"register spills: {resources}"
        assert resources["SHARED"] == STATIC_SMEM, "static shared memory changed: the launch limit is off"


@needs_gluon_api
@pytest.mark.parametrize("case", DEFAULT_CASES, ids=_case_id)
def test_the_defaults_compile_for_sm90_with_the_hopper_pieces_and_no_spills(case, compiled):
    report = _ok(compiled[f"default-{_case_id(case)}"])
    markers = report["markers"]
    assert markers["wgmma"], "no wgmma.mma_async"
    assert markers["tma"], "no TMA copy (cp.async.bulk.tensor)"
    assert markers["reduce"], "no TMA reduce of dQ (cp.reduce.async.bulk)"
    assert markers["mbarrier"] and markers["setmaxnreg"]
    config = GLUON_BWD_DEFAULTS[case]
    assert report["maxnreg"] == [str(config.maxnreg)]
    assert ["setmaxnreg.dec", str(config.producer_regs)] in report["regs"], "the producer gives registers back"
    assert ["setmaxnreg.inc", str(config.consumer_regs)] in report["regs"], "the consumer takes them"
    assert report["shared"] == report["model"], "the shared-memory model is off"
    assert report["shared"] + STATIC_SMEM <= SMEM_LIMIT
    _no_spills(report)
    assert not report["ptxas_warnings"], f"ptxas: {report['ptxas_warnings']}"


@needs_gluon_api
@pytest.mark.parametrize("name", ["n1-D64", "n1-D128", "n16-D64", "n16-D128", "ragged-D64", "ragged-D128"])
def test_short_and_ragged_lengths_compile(name, compiled):
    """The JIT makes N == 1 a constant and gives N % 16 == 0 divisibility; both must compile."""
    report = _ok(compiled[name])
    assert report["markers"]["reduce"] and report["shared"] == report["model"]
    _no_spills(report)


@needs_gluon_api
@pytest.mark.parametrize("index", range(len(VARIANTS)))
def test_knob_variants_compile_without_spills_and_match_the_model(index, compiled):
    report = _ok(compiled[f"variant{index}"])
    assert report["shared"] == report["model"]
    assert report["shared"] + STATIC_SMEM <= SMEM_LIMIT
    _no_spills(report, SPILLING.get(VARIANTS[index][0], 0))


def test_every_config_the_tests_use_is_valid():
    for (d, _), config in GLUON_BWD_DEFAULTS.items():
        assert config.problems(d) == [], (d, config)
    for config, d in VARIANTS:
        assert config.problems(d) == [], config
    assert GluonBwdConfig(block_m=96).problems(64) and GluonBwdConfig().problems(96)
    assert GluonBwdConfig(128, num_stages=4).problems(128), "over the shared-memory limit"


def test_without_hopper_it_says_why():
    if RUN_REASON is None:
        pytest.skip("this machine can run the Gluon backward")
    q = torch.zeros(1, 1, 8, 64, dtype=torch.bfloat16)
    lse = torch.zeros(1, 1, 8)
    with pytest.raises(GluonUnavailable, match="Gluon backward|Triton|sm_90|CUDA"):
        flash_attn_bwd_gluon(q, q, q, q, lse, q)


# ------------------------------------------------------------------------- GPU tests

SMOKE_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def smoke() -> dict:
    """``python -m benchmarks.bwd_gluon --smoke --smoke-knobs K`` for each of :data:`SMOKE_KNOBS`,
    side by side in subprocesses with a timeout: K -> None when every case passed, else what
    went wrong (a hang is killed and reported with the last case)."""
    runs = {knobs: subprocess.Popen([sys.executable, "-m", "benchmarks.bwd_gluon", "--smoke", "--smoke-knobs", knobs],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
            for knobs in SMOKE_KNOBS}
    return {knobs: _smoke_verdict(run) for knobs, run in runs.items()}


def _smoke_verdict(run: subprocess.Popen) -> str | None:
    return smoke_verdict(run, SMOKE_TIMEOUT_S, 2)


def _smoke_knobs(knobs: dict | None, head_dim: int) -> str:
    """The smoke run that went through the code path of ``knobs`` at ``head_dim``."""
    consumers = (knobs or {}).get("consumers")
    if consumers == 1:
        return "consumers=1"
    return TWO_CONSUMERS_D64 if consumers == 2 and head_dim == 64 else ""


def _healthy(smoke: dict, knobs: dict | None = None, head_dim: int = 128) -> None:
    verdict = smoke[_smoke_knobs(knobs, head_dim)]
    if verdict is not None:
        pytest.fail(verdict)


def check_gradients(b, h, n_q, n_k, d, causal, label="", **knobs):
    """Our gradients (into NaN-filled tensors) against float32 autograd, within 3x PyTorch's bf16 error."""
    from kernel.gluon.bwd.check import check_gluon_bwd

    seed = int.from_bytes(os.urandom(4), "little")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(b, h, n_q, d, generator=gen).to("cuda", torch.bfloat16)
    k, v = (torch.randn(b, h, n_k, d, generator=gen).to("cuda", torch.bfloat16) for _ in range(2))
    dout = torch.randn(b, h, n_q, d, generator=gen).to("cuda", torch.bfloat16)
    verdict, ours = check_gluon_bwd(q, k, v, dout, causal, knobs)
    assert all(g.shape == t.shape and g.dtype == t.dtype for g, t in zip(ours, (q, k, v)))
    assert verdict.ok, f"{label} B{b} H{h} N_q={n_q} N_k={n_k} D={d} causal={causal} {knobs} seed={seed}: " \
                       f"{verdict.reason}"


GPU_SHAPES = [(2, 3, 385, 129), (2, 3, 1, 1), (2, 3, 16, 16), (1, 2, 1000, 3000), (4, 8, 1024, 1024)]


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "B{}H{}-{}x{}".format(*s))
def test_gradients_match_the_reference(shape, causal, head_dim, smoke):
    _healthy(smoke)
    check_gradients(*shape, head_dim, causal)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "B{}H{}-{}x{}".format(*s))
def test_one_consumer_warpgroup_at_d128_matches_the_reference(shape, causal, smoke):
    """The defaults at D=128 run two consumer warpgroups (test_gradients_match_the_reference); one, here."""
    _healthy(smoke, dict(consumers=1))
    check_gradients(*shape, 128, causal, consumers=1)
    for n in (1, 2, 63, 64, 65, 127, 128, 129):
        check_gradients(1, 2, n, n + 3, 128, causal, consumers=1)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("index", range(len(VARIANTS)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_every_knob_variant_is_right(index, causal, smoke):
    """Each variant on 2 x 24 heads (a persistent program walks several key tiles), ragged."""
    config, d = VARIANTS[index]
    _healthy(smoke, asdict(config), d)
    check_gradients(2, 24, 777, 333 if causal else 1000, d, causal, **asdict(config))


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("n", [*range(1, 18), 63, 64, 65, 127, 128, 129])
def test_short_and_tile_edge_lengths(n, smoke):
    _healthy(smoke)
    for causal in (False, True):
        check_gradients(1, 2, n, n, 64, causal)
        check_gradients(1, 2, n, n + 3, 128, causal)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("head_dim", [64, 128])
def test_causal_key_tiles_in_several_groups_of_heads_are_right(head_dim, smoke):
    """The causal key-tile order in groups of heads (kernel.gluon.schedule), with a budget of 5 heads'
    queries: 2 x 24 heads in 10 groups, the last of 3; through the JIT, then the direct launch."""
    from kernel.gluon.bwd.check import references
    from kernel.gluon.bwd.launch import checked_plan
    from kernel.reference import grad_accuracy
    from kernel.triton.fwd import JIT_KERNEL, KNOB_DEFAULTS, plan_for

    _healthy(smoke)
    seed = int.from_bytes(os.urandom(4), "little")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    n_q, n_k = 333, 777
    q, dout = (torch.randn(2, 24, n_q, head_dim, generator=gen).to("cuda", torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(2, 24, n_k, head_dim, generator=gen).to("cuda", torch.bfloat16) for _ in range(2))
    out, lse = plan_for(JIT_KERNEL, KNOB_DEFAULTS, q, k, v, True)(q, k, v)
    refs = references(q, k, v, dout, True)
    grads = [torch.empty_like(t) for t in (q, k, v)]
    plan = checked_plan(q, k, v, out, lse, dout, True, {}, tuple(grads), l2_bytes=5 * n_q * head_dim * 8)
    for launch in ("jit", "direct"):
        ours = plan(q, k, v, out, lse, dout, *(g.fill_(float("nan")) for g in grads))
        torch.cuda.synchronize()
        verdict = grad_accuracy(ours, *refs, q.dtype)
        assert verdict.ok, f"D{head_dim} groups of 5, {launch}, seed={seed}: {verdict.reason}"
    assert plan.mode in ("maps", "descriptors")


@pytest.mark.gpu
@needs_hopper
def test_no_keys_or_no_queries_give_zeros(smoke):
    _healthy(smoke)
    q, dout = (torch.randn(1, 2, 70, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    k = torch.randn(1, 2, 0, 64, device="cuda", dtype=torch.bfloat16)
    lse = torch.zeros(1, 2, 70, device="cuda")
    dq, dk, dv = flash_attn_bwd_gluon(q, k, k, q, lse, dout, False)
    assert torch.equal(dq, torch.zeros_like(dq)) and dk.numel() == dv.numel() == 0


@pytest.mark.gpu
@needs_hopper
def test_refusals_name_the_field():
    q = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.bfloat16)
    lse = torch.zeros(1, 2, 64, device="cuda")
    with pytest.raises(TypeError, match="float16 and bfloat16"):
        flash_attn_bwd_gluon(q.float(), q.float(), q.float(), q.float(), lse, q.float())
    wide = torch.randn(1, 2, 64, 96, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="head dim 96"):
        flash_attn_bwd_gluon(wide, wide, wide, wide, lse, wide)
    with pytest.raises(ValueError, match="lse must be float32"):
        flash_attn_bwd_gluon(q, q, q, q, lse.double(), q)
    with pytest.raises(ValueError, match="dout must be like q"):
        flash_attn_bwd_gluon(q, q, q, q, lse, q[:, :, :32])
    with pytest.raises(ValueError, match=r"\[B, H, N, D\]"):
        flash_attn_bwd_gluon(q[0], q[0], q[0], q[0], lse[0], q[0])
    with pytest.raises(ValueError, match="block_m=96"):
        flash_attn_bwd_gluon(q, q, q, q, lse, q, block_m=96)
    storage = torch.randn(2 * 64 * 64 + 1, device="cuda", dtype=torch.bfloat16)
    shifted = storage[1:].view(1, 2, 64, 64)
    with pytest.raises(ValueError, match=r"contiguous\(\)"):
        flash_attn_bwd_gluon(shifted, q, q, q, lse, q)


def test_the_benchmark_table_gives_the_backward_and_the_training_step():
    from benchmarks.bwd_gluon import table

    row = dict(D=128, causal=True, best="consumers=2", gluon_ms=0.7, gluon_tflops=480.0, triton_ms=1.0, flash_ms=1.4,
               cudnn_ms=0.75, vs_triton=1.0 / 0.7, vs_flash=2.0, vs_cudnn=0.75 / 0.7, step_gluon_vs_triton=1.21,
               step_gluon_vs_flash=1.9, step_gluon_vs_cudnn=0.97, default_vs_cudnn=1.06, step_default_vs_cudnn=0.96)
    bare = dict(row, best=None, gluon_ms=None, gluon_tflops=None, vs_triton=None, vs_flash=None, vs_cudnn=None)
    for key in ("step_gluon_vs_triton", "step_gluon_vs_flash", "step_gluon_vs_cudnn", "default_vs_cudnn",
                "step_default_vs_cudnn"):
        bare.pop(key)
    env = dict(gpu="test", driver="d", torch="t", triton="3.6.0", date="today")
    text = table([row, bare], env)
    full = ("| 128 | yes | consumers=2 | 0.7000 | 480 | 1.0000 | 1.4000 | 0.7500 | 1.43 | 2.00 | 1.07 | 1.06 "
            "| 1.21 | 1.90 | 0.97 | 0.96 |")
    assert full in text
    assert "| 128 | yes | none | - | - | 1.0000 | 1.4000 | 0.7500 | - | - | - | - | - | - | - | - |" in text

"""The Gluon forward for Hopper (kernel/gluon/fwd/launch.py).

* Compile tests (no GPU): each variant compiles for sm_90 under Triton 3.6, its PTX holds
  the Hopper pieces, and its shared memory is the model's figure. Skipped, with the reason,
  on a Triton whose Gluon API is not 3.6's (CI's main suite runs Triton 3.9; .ci/run runs
  this file again in a small Triton 3.6 venv).
* (The gates, on any Triton, are in test_gluon_gate.py; the schedule's arithmetic, mirrored in
  PyTorch, in test_gluon_schedule.py.)
* GPU tests (``gpu`` mark, an sm_90 GPU with Triton 3.6): against the float32 reference by
  the project's accuracy rule, on NaN-filled outputs and fresh random inputs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import asdict

import pytest
import torch
from conftest import ROOT
from gluon_smoke import cross_compile_in_processes, smoke_verdict, spill_allowance

from kernel.gluon import schedule
from kernel.gluon.api import gluon_api_support, gluon_support
from kernel.gluon.fwd.config import VARIANTS, GluonConfig, default_gluon_config, smem_bytes
from kernel.gluon.fwd.launch import flash_attn_fwd_gluon
from kernel.gluon.smem import SMEM_LIMIT, STATIC_SMEM

SPILLS = spill_allowance()      # stack bytes allowed (0 but under Triton 3.9's ptxas)
API_REASON = gluon_api_support()
needs_gluon_api = pytest.mark.skipif(API_REASON is not None,
                                     reason=f"compile tests need a Gluon with the kernels' API: {API_REASON}")
RUN_REASON = gluon_support() if torch.cuda.is_available() else "needs a CUDA GPU"
needs_hopper = pytest.mark.skipif(RUN_REASON is not None, reason=str(RUN_REASON))
CASES = [(d, causal, variant) for d in (64, 128) for causal in (False, True) for variant in VARIANTS]


def _case_id(case) -> str:
    d, causal, variant = case
    return f"D{d}-{'causal' if causal else 'full'}-{variant}"


# ------------------------------------------------------------------ compile tests (CPU)

FALLBACKS = [
    GluonConfig("pipelined", 64, 64, num_stages=1, overlap=False),
    GluonConfig("pipelined", 128, 64, num_stages=4, persistent=2),
    GluonConfig("ws", 64, 128, num_stages=2, overlap=False, pingpong=False),
    GluonConfig("ws", 128, 64, num_stages=4, overlap=True, pingpong=False),
    GluonConfig("ws", 128, 128, num_stages=1, overlap=False, pingpong=False),
]
SPLIT = GluonConfig("ws", 128, 128, num_stages=2, producer_regs=32, consumer_regs=232)
# 192-row tiles over three consumers at D=64 (in order, without turns; 152 registers each): 1.00x
# SDPA-cuDNN causal and 0.97x not on the H200 (docs/results/2026-12-01-h200-gluon.md).
THREE = GluonConfig("ws", 192, 128, num_stages=2, overlap=False, pingpong=False, persistent=0, consumer_regs=152)


def _compile_cases() -> dict:
    cases = {f"default-{_case_id(case)}": (default_gluon_config(case[0], case[1], case[2]), case[0], case[1], 1000)
             for case in CASES}
    for variant in VARIANTS:
        for n in (1, 16):
            cases[f"n{n}-{variant}"] = (default_gluon_config(64, True, variant), 64, True, n)
        cases[f"n1-full-{variant}"] = (default_gluon_config(128, False, variant), 128, False, 1)
    for index, config in enumerate(FALLBACKS):
        cases[f"fallback{index}"] = (config, 128, index % 2 == 1, 300)
    cases["split"] = (SPLIT, 128, False, 1000)
    cases["three"] = (THREE, 64, True, 1000)
    for name, (config, d) in TAIL_SPLITS.items():
        cases[name] = (config, d, False, 1000, True)
    for name, (config, d, causal) in ROUTE_CANDIDATES.items():
        cases[name] = (config, d, causal, 1000, config.may_split and not causal)
    return cases


def _route_candidates() -> dict:
    """The Gluon forward's configs that kernel/candidates.py names beside the defaults (the route table may
    send a bucket to them), at each head dim and mask where they are another config than the default."""
    from kernel.candidates import FORWARD
    from kernel.gluon.fwd.launch import config_from

    found = {}
    for name, candidate in FORWARD.items():
        for d, causal in [(d, c) for d in candidate.head_dims for c in (False, True)]:
            config = config_from(candidate.kernel, d, causal, candidate.settings) if candidate.gluon else None
            if config is not None and config != default_gluon_config(d, causal, candidate.kernel):
                found[f"candidate-{name}-D{d}-{'causal' if causal else 'full'}"] = (config, d, causal)
    return found


ROUTE_CANDIDATES = _route_candidates()


# The binaries that split a persistent grid's last wave over the keys (kernel.gluon.fwd.split): the
# D=64 default and an in-order two-consumer tile at D=128.
TAIL_SPLITS = {"tail-d64": (default_gluon_config(64, False, "ws"), 64),
               "tail-d128": (GluonConfig("ws", 128, 128, num_stages=2, overlap=False, pingpong=False, persistent=1),
                             128)}


@pytest.fixture(scope="module")
def compiled() -> dict:
    """Every compile case, cross-compiled in fresh processes outside Triton's interpreter (the
    CPU tests run under TRITON_INTERPRET=1, which Gluon's compiler cannot work under), one
    process per core, side by side."""
    cases = _compile_cases()
    payload = [dict(config=asdict(config), head_dim=d, causal=causal, n_q=n, n_k=n, split=bool(rest))
               for config, d, causal, n, *rest in cases.values()]
    return dict(zip(cases, cross_compile_in_processes("kernel.gluon.fwd.compile", payload)))


def _ok(report: dict) -> dict:
    assert report["error"] is None, report["error"]
    return report


@needs_gluon_api
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_default_configs_compile_for_sm90_with_the_hopper_pieces(case, compiled):
    report = _ok(compiled[f"default-{_case_id(case)}"])
    assert report["markers"]["wgmma"], "no wgmma.mma_async"
    assert report["markers"]["tma"], "no TMA copy (cp.async.bulk.tensor)"
    assert report["markers"]["mbarrier"], "no mbarrier wait"
    assert report["markers"]["setmaxnreg"] == (case[2] == "ws"), "a register split only with warp specialization"
    assert report["shared"] == report["model"], "the shared-memory model is off"
    assert report["shared"] + STATIC_SMEM <= SMEM_LIMIT
    resources = report["resources"]
    if resources:               # cuobjdump ships with Triton's NVIDIA backend
        assert resources["SHARED"] == STATIC_SMEM, "static shared memory changed: the launch limit is off"
        assert resources["STACK"] <= SPILLS, f"register spills: {resources}"
    assert not report["ptxas_warnings"], f"ptxas: {report['ptxas_warnings']}"


@needs_gluon_api
@pytest.mark.parametrize("name", list(ROUTE_CANDIDATES))
def test_the_route_candidates_compile_without_spills_and_match_the_smem_model(name, compiled):
    report = _ok(compiled[name])
    assert report["markers"]["wgmma"] and report["markers"]["tma"] and report["markers"]["setmaxnreg"]
    assert report["shared"] == report["model"], "the shared-memory model is off"
    assert report["shared"] + STATIC_SMEM <= SMEM_LIMIT
    if report["resources"]:
        assert report["resources"]["STACK"] <= SPILLS + CANDIDATE_SPILLS.get(name, 0), \
            f"register spills: {report['resources']}"
    assert not report["ptxas_warnings"], f"ptxas: {report['ptxas_warnings']}"


# ws_p0 (D=128's default tile on a program per tile) keeps 24 B (48 B causal) on the stack under Triton 3.6's ptxas at
# the compile tests' lengths; it was timed so on the H200 and won one bucket, (128, True, 2048, 32), 1.13 against
# ws_64x64's 1.10 (docs/results/2026-12-04-h200-many-programs.md). No more than that.
CANDIDATE_SPILLS = {"candidate-ws_p0-D128-full": 24, "candidate-ws_p0-D128-causal": 48}


@needs_gluon_api
@pytest.mark.parametrize("name", list(TAIL_SPLITS))
def test_the_binaries_that_split_the_last_wave_compile_without_spills(name, compiled):
    """The split's binary is a second one (SPLIT is a constexpr: the default binary stays as it
    was); it must compile with no spill, its workspaces captured as the model says."""
    report = _ok(compiled[name])
    assert report["shared"] == report["model"], "the shared-memory model of a splitting binary is off"
    assert report["shared"] == smem_bytes(GluonConfig(**report["config"]), report["head_dim"], split=True)
    assert "TAIL" not in report["constants"] and "SPLITS" not in report["constants"]
    if report["resources"]:
        assert report["resources"]["STACK"] <= SPILLS, f"register spills: {report['resources']}"
    assert not report["ptxas_warnings"], f"ptxas: {report['ptxas_warnings']}"


@needs_gluon_api
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n", [1, 16])
def test_the_jits_specialisations_of_small_lengths_compile(variant, n, compiled):
    """The JIT makes N == 1 a constant and gives N % 16 == 0 divisibility; both must compile
    (Triton's own pipeliner failed on the Triton kernel at N = 1)."""
    report = _ok(compiled[f"n{n}-{variant}"])
    if n == 1:
        assert report["constants"] == {"N_Q": 1, "N_K": 1}
        unmasked = _ok(compiled[f"n1-full-{variant}"])
        assert unmasked["constants"] == {"N_Q": 1, "N_K": 1}
        # From Triton 3.8 the ws partitions' captures leave out the two constant lengths (16 B after
        # rounding), which the model still counts: it may be over by that, never under.
        assert unmasked["model"] - unmasked["shared"] in (0, 16), (unmasked["shared"], unmasked["model"])
    else:
        assert report["constants"] == {} and {"N_Q", "N_K", "LSE"} <= set(report["divisible"])
    assert "H" not in report["divisible"] and "BH" not in report["divisible"], "H and BH are not specialised"
    assert report["markers"]["wgmma"] and report["shared"] == report["model"]


@needs_gluon_api
@pytest.mark.parametrize("index", range(len(FALLBACKS)))
def test_fallback_configs_compile_and_match_the_smem_model(index, compiled):
    report = _ok(compiled[f"fallback{index}"])
    assert report["shared"] == report["model"]
    assert report["markers"]["setmaxnreg"] == (FALLBACKS[index].variant == "ws")


@needs_gluon_api
def test_three_consumers_compile_without_spills_and_match_the_smem_model(compiled):
    report = _ok(compiled["three"])
    assert report["shared"] == report["model"] == 115_100
    assert ["setmaxnreg.inc", "152"] in report["regs"] and ["setmaxnreg.dec", "24"] in report["regs"]
    assert report["maxnreg"] == [str(THREE.maxnreg)] == ["120"]       # 4 warpgroups x 128 threads x 120 <= 65,536
    if report["resources"]:
        assert report["resources"]["STACK"] <= SPILLS, f"register spills: {report['resources']}"


def test_three_consumers_are_ws_only_and_need_their_registers_to_fit():
    assert GluonConfig("pipelined", 192, 128).problems(64) == [
        "block_m=192 must be 64 or 128 (ws: also 192, three consumers)"]
    assert not THREE.problems(64)
    assert GluonConfig("ws", 192, 128, pingpong=True).pingpong is False      # turns are for two consumers
    assert any(p.startswith("registers:") for p in GluonConfig("ws", 192, 128, consumer_regs=240).problems(64))


@needs_gluon_api
def test_the_register_split_reaches_the_ptx(compiled):
    report = _ok(compiled["split"])
    assert report["maxnreg"] == [str(SPLIT.maxnreg)]
    assert ["setmaxnreg.dec", "32"] in report["regs"], "the producer warp gives registers back"
    assert ["setmaxnreg.inc", "232"] in report["regs"], "the second consumer takes its share"


@needs_gluon_api
def test_both_variants_compile_under_consan():
    """The GPU's ConSan run needs the instrumented binaries, which compile here too."""
    payload = [dict(config=dict(variant=variant, persistent=1), head_dim=64, causal=True, n_q=200, n_k=200)
               for variant in VARIANTS]
    consan = dict(TRITON_INSTRUMENTATION_MODE="consan")
    for report in cross_compile_in_processes("kernel.gluon.fwd.compile", payload, consan):
        _ok(report)
        assert report["markers"]["consan"], "not instrumented: no ConSan check in the PTX"


@needs_gluon_api
def test_the_tuners_budget_stage_cross_compiles_for_sm90_and_the_model_is_the_binarys(tmp_path, monkeypatch):
    """The tuner's Gluon kernel (tuner/kernels/gluon_fwd.py) through the budget stage: each unit is
    compiled for sm_90 (a fresh cache, so nothing is read back) and its shared memory is the model's
    figure; registers are the launch's maxnreg over every partition's warpgroup."""
    from tuner.budget import check_many
    from tuner.gpus import GpuSpec
    from tuner.kernels.gluon_fwd import GluonFwdConfig, to_kernel
    from tuner.problem import Problem

    monkeypatch.setenv("FA2_TUNER_CACHE", str(tmp_path))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    configs = [GluonFwdConfig(128, 128, 4, 2, overlap=True, pingpong=True, persistent=1),
               GluonFwdConfig(64, 128, 4, 3, overlap=True, persistent=0),
               GluonFwdConfig(128, 64, 4, 3, overlap=True, pingpong=False, persistent=2, consumer_regs=224)]
    problem = Problem(4, 8, 4096, 4096, 128, "bf16", True)
    results = check_many(configs, problem, GpuSpec.from_name("sm_90"), jobs=min(3, os.cpu_count() or 1))
    for config, result in zip(configs, results):
        assert result.launchable, (config.key, result.verdict, result.reason)
        assert result.compiled_bytes is not None and result.compiled_bytes == result.model_bytes, config.key
        assert result.registers == to_kernel(config).maxnreg, (config.key, result.registers)
    assert len({r.compiled_bytes for r in results}) == len(configs)
    assert list(tmp_path.rglob("*.json")), "nothing was compiled into the fresh cache"


# ------------------------------------------------------------------------- GPU tests

SMOKE_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def smoke() -> dict:
    """Each variant's smoke run (``python -m benchmarks.gluon --smoke``) in a subprocess with a
    timeout, before any test calls it in this process: a kernel that deadlocks on its barriers
    then fails its tests at once, naming the case, instead of hanging the suite. The variants
    run side by side."""
    runs = {variant: subprocess.Popen([sys.executable, "-m", "benchmarks.gluon", "--smoke", "--variant", variant],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
            for variant in VARIANTS}
    return {variant: _smoke_verdict(run) for variant, run in runs.items()}


def _smoke_verdict(run: subprocess.Popen) -> str | None:
    return smoke_verdict(run, SMOKE_TIMEOUT_S, 1)


def _healthy(smoke: dict, variant: str) -> None:
    if smoke[variant] is not None:
        pytest.fail(f"{variant}: {smoke[variant]}")


GPU_SHAPES = [  # (B, H or None for [B, N, D], N_q, N_k): ragged, non-square, one valid key or query in a tile
    (2, 3, 1552, 1040),
    (1, 2, 3 * 128 + 1, 2 * 128 + 1),
    (2, None, 3 * 64 + 1, 2 * 64 + 1),
    (1, 2, 200, 900),
]


def _inputs(fresh_inputs, b, h, n_q, n_k, d, dtype=torch.bfloat16):
    shape_q = (b, n_q, d) if h is None else (b, h, n_q, d)
    shape_kv = (b, n_k, d) if h is None else (b, h, n_k, d)
    return fresh_inputs(shape_q, shape_kv, dtype, "cuda")


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_ragged_nonsquare_shapes_and_both_layouts(case, smoke, fresh_inputs, nan_outputs, assert_matches_reference):
    d, causal, variant = case
    _healthy(smoke, variant)
    for b, h, n_q, n_k in GPU_SHAPES:
        q, k, v, seed = _inputs(fresh_inputs, b, h, n_q, n_k, d)
        out, lse = nan_outputs(q)
        flash_attn_fwd_gluon(q, k, v, causal, variant=variant, out=out, lse=lse)
        assert_matches_reference(out, lse, q, k, v, causal, seed, label=f"{case} {(b, h, n_q, n_k)}")
    # [B, N, H, D] tensors seen as [B, H, N, D]: strided views, read in place by the descriptors.
    q, k, v, seed = fresh_inputs((2, 300, 3, d), (2, 200, 3, d), torch.bfloat16, "cuda")
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    out, lse = nan_outputs(q)
    flash_attn_fwd_gluon(q, k, v, causal, variant=variant, out=out, lse=lse)
    assert_matches_reference(out, lse, q, k, v, causal, seed, label=f"{case} transposed view")


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
def test_short_and_tile_edge_lengths(variant, causal, smoke, fresh_inputs, nan_outputs, assert_matches_reference):
    _healthy(smoke, variant)
    for n in [*range(1, 18), 63, 64, 65, 127, 128, 129]:
        q, k, v, seed = _inputs(fresh_inputs, 2, 2, n, n, 64)
        out, lse = nan_outputs(q)
        flash_attn_fwd_gluon(q, k, v, causal, variant=variant, out=out, lse=lse)
        assert_matches_reference(out, lse, q, k, v, causal, seed, label=f"{variant} N={n}")


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("variant", VARIANTS)
def test_float16(variant, smoke, fresh_inputs, nan_outputs, assert_matches_reference):
    _healthy(smoke, variant)
    q, k, v, seed = _inputs(fresh_inputs, 2, 3, 333, 517, 128, torch.float16)
    out, lse = nan_outputs(q)
    flash_attn_fwd_gluon(q, k, v, True, variant=variant, out=out, lse=lse)
    assert_matches_reference(out, lse, q, k, v, True, seed, label=f"{variant} fp16")


# Each fallback and knob setting, on one mask each (a compile each); both masks occur for each variant.
KNOB_CASES = [(config, index % 2 == 1) for index, config in enumerate(
    FALLBACKS + [GluonConfig("ws", 128, 128, 2, persistent=0), GluonConfig("pipelined", 128, 128, 2, persistent=1)])]


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("config, causal", KNOB_CASES,
                         ids=lambda c: f"{c.variant}-{c.block_m}x{c.block_n}-s{c.num_stages}-p{c.persistent}"
                         if isinstance(c, GluonConfig) else ("causal" if c else "full"))
def test_every_knob_setting_is_right(config, causal, smoke, fresh_inputs, nan_outputs, assert_matches_reference):
    _healthy(smoke, config.variant)
    knobs = {name: getattr(config, name) for name in GluonConfig.__dataclass_fields__ if name != "variant"}
    # 2 x 24 heads of 7 to 13 query tiles: a persistent program walks several tiles.
    q, k, v, seed = _inputs(fresh_inputs, 2, 24, 777, 333 if causal else 1000, 128)
    out, lse = nan_outputs(q)
    flash_attn_fwd_gluon(q, k, v, causal, variant=config.variant, **knobs, out=out, lse=lse)
    assert_matches_reference(out, lse, q, k, v, causal, seed, label=f"{config} causal={causal}")


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("config", [default_gluon_config(64, False, "ws"), TAIL_SPLITS["tail-d128"][0]],
                         ids=["d64-default", "d128-in-order"])
def test_the_last_wave_split_over_the_keys_is_right(config, smoke, fresh_inputs, nan_outputs,
                                                    assert_matches_reference):
    """A persistent launch whose last wave is short splits those tiles over the keys and merges
    them (kernel.gluon.fwd.split): ragged N_q (a last tile of 40 rows), N_k of 7 key tiles in 4
    parts, both layouts; the plan says it split."""
    from kernel.arch import sm_count
    from kernel.gluon.fwd.launch import checked_plan

    _healthy(smoke, "ws")
    d = 64 if config.block_m == 192 else 128
    knobs = {name: getattr(config, name) for name in GluonConfig.__dataclass_fields__ if name != "variant"}
    tiles_m = -(-1000 // config.block_m)
    heads = 2 * sm_count(torch.device("cuda")) // tiles_m + 1       # two waves and a few tiles
    for h in (heads, None):
        q, k, v, seed = _inputs(fresh_inputs, 1 if h else heads, h, 1000, 777, d)
        out, lse = nan_outputs(q)
        plan = checked_plan(q, k, v, False, "ws", knobs, out, lse)
        assert plan.split is not None and plan.split.splits >= 2, plan.split
        flash_attn_fwd_gluon(q, k, v, False, variant="ws", **knobs, out=out, lse=lse)
        assert_matches_reference(out, lse, q, k, v, False, seed, label=f"{config} split {plan.split} h={h}")
        plan(q, k, v, out.fill_(float("nan")), lse.fill_(float("nan")))     # the first call: the JIT
        plan(q, k, v, out.fill_(float("nan")), lse.fill_(float("nan")))     # then the direct launch
        assert plan.mode in ("maps", "descriptors")
        assert_matches_reference(out, lse, q, k, v, False, seed, label=f"{config} split, direct, h={h}")


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("variant, head_dim", [("ws", 64), ("ws", 128), ("pipelined", 128)])
def test_causal_tiles_in_several_groups_of_heads_are_right(variant, head_dim, smoke, fresh_inputs, nan_outputs,
                                                           assert_matches_reference):
    """The causal tile order in groups of heads (kernel.gluon.schedule), with a budget of 5 heads' keys:
    2 x 24 heads in 10 groups, the last of 3 (at the real budget, a shape this small is one group). The
    default configs: D=64 a program per tile, D=128 persistent. Through the JIT, then the direct launch."""
    from kernel.gluon.fwd.launch import checked_plan

    _healthy(smoke, variant)
    n_q, n_k = 777, 333
    q, k, v, seed = _inputs(fresh_inputs, 2, 24, n_q, n_k, head_dim)
    out, lse = nan_outputs(q)
    plan = checked_plan(q, k, v, True, variant, {}, out, lse, l2_bytes=5 * n_k * head_dim * 4)
    for launch in ("jit", "direct"):
        plan(q, k, v, out.fill_(float("nan")), lse.fill_(float("nan")))
        assert_matches_reference(out, lse, q, k, v, True, seed, label=f"{variant} D{head_dim} groups of 5, {launch}")
    assert variant != "ws" or plan.mode in ("maps", "descriptors")


@pytest.mark.gpu
@needs_hopper
def test_the_balanced_order_is_right_and_takes_the_budget_the_model_picks(smoke, fresh_inputs, nan_outputs,
                                                                          assert_matches_reference):
    """A first call's plan (checked_plan as plan_for makes it, no budget named) on a persistent causal launch
    (D=128's default, and the 4-per-SM 64 x 64 tile at D=64) takes the budget kernel.gluon.schedule.balanced_budget
    picks, and its output is right through the JIT and then the direct launch."""
    from kernel.gluon.fwd.launch import balanced_l2_bytes, checked_plan

    _healthy(smoke, "ws")
    for head_dim, knobs in ((128, {}), (64, dict(block_m=64, block_n=64, num_stages=2, overlap=False, persistent=4,
                                                 consumer_regs=104))):
        q, k, v, seed = _inputs(fresh_inputs, 2, 40, 777, 777, head_dim)
        out, lse = nan_outputs(q)
        plan = checked_plan(q, k, v, True, "ws", knobs, out, lse)
        budget = balanced_l2_bytes(q, k, True, plan.config)
        assert plan.config.persistent and budget in schedule.BALANCE_BUDGETS
        assert plan.arguments.keywords["l2_bytes"] == budget
        for launch in ("jit", "direct"):
            plan(q, k, v, out.fill_(float("nan")), lse.fill_(float("nan")))
            assert_matches_reference(out, lse, q, k, v, True, seed, label=f"balanced D{head_dim} {knobs} {launch}")


@pytest.mark.gpu
@needs_hopper
def test_no_keys_and_returned_outputs(smoke, fresh_inputs):
    _healthy(smoke, "ws")
    q, k, v, _ = _inputs(fresh_inputs, 1, 2, 70, 0, 64)
    out, lse = flash_attn_fwd_gluon(q, k, v)
    assert torch.equal(out, torch.zeros_like(out)) and bool(torch.isneginf(lse).all())
    q, k, v, _ = _inputs(fresh_inputs, 1, 2, 70, 50, 64)
    out, lse = flash_attn_fwd_gluon(q, k, v, True, variant="ws")
    assert out.shape == q.shape and lse.shape == q.shape[:-1] and lse.dtype == torch.float32


@pytest.mark.gpu
@needs_hopper
def test_refusals_name_the_fix():
    q = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.float32)
    with pytest.raises(TypeError, match="float16 and bfloat16"):
        flash_attn_fwd_gluon(q, q, q)
    with pytest.raises(ValueError, match="head dim 96"):
        flash_attn_fwd_gluon(*(torch.randn(1, 2, 64, 96, device="cuda", dtype=torch.bfloat16),) * 3)
    storage = torch.randn(1 * 2 * 64 * 64 + 1, device="cuda", dtype=torch.bfloat16)
    shifted = storage[1:].view(1, 2, 64, 64)
    with pytest.raises(ValueError, match=r"contiguous\(\)"):
        flash_attn_fwd_gluon(shifted, shifted, shifted)


CONSAN_SCRIPT = textwrap.dedent("""
    import json
    import sys
    import torch
    import triton
    from kernel.gluon.fwd.launch import flash_attn_fwd_gluon
    from kernel.gluon.fwd.kernel_ws import _fwd_ws_kernel
    from kernel.reference import accuracy
    assert triton.knobs.compilation.instrumentation_mode == "consan", triton.knobs.compilation.instrumentation_mode
    # ConSan keeps its state in global scratch memory, which the launch asks an allocator for.
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    # 70 heads of 2 query tiles (the last one ragged: 200 rows; D=64's tile is 192 rows over three
    # consumers, D=128's 128 over two in turns), 150 keys (a ragged last key tile, causal,
    # non-square): 140 tiles for the 132 programs of a persistent grid, so some programs reuse
    # their Q, output and key buffers for a second tile.
    # "split": non-causal at 140 heads, 280 tiles: two waves and 16 tiles, each split over the keys
    # in 2 parts then merged (kernel.gluon.fwd.split).
    d, split = int(sys.argv[1]), sys.argv[2:] == ["split"]
    heads, causal = (140, False) if split else (70, True)
    q = torch.randn(1, heads, 200, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, heads, 150, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:-1], float("nan"), device="cuda")
    flash_attn_fwd_gluon(q, k, v, causal, variant="ws", persistent=1, out=out, lse=lse)
    torch.cuda.synchronize()
    result = accuracy(out, lse, q, k, v, causal)
    compiled = [kernel for cache in _fwd_ws_kernel.device_caches.values() for kernel in cache[0].values()]
    print(json.dumps(dict(ok=result.ok, reason=result.reason, kernels=len(compiled),
                          debug=[bool(kernel.metadata.debug) for kernel in compiled])))
""")
# What ConSan prints where it finds a race (a device-side assert; Triton 3.6's libtriton).
CONSAN_RACE = ("outstanding writes", "outstanding reads", "device-side assert", "Assertion")


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("head_dim, mode", [(64, "causal"), (128, "causal"), (64, "split")])
def test_the_ws_kernel_has_no_races_under_consan(smoke, head_dim, mode):
    """The ws kernel at each head dim's default tile under Triton's concurrency sanitizer, in a
    subprocess (the variable must be set before Triton loads): no race reported, the output
    right, the binary instrumented; D=64's also in the binary that splits its last wave."""
    _healthy(smoke, "ws")
    env = dict(os.environ, TRITON_INSTRUMENTATION_MODE="consan")
    result = subprocess.run([sys.executable, "-c", CONSAN_SCRIPT, str(head_dim), mode], env=env,
                            capture_output=True, text=True, timeout=360, cwd=ROOT)
    races = [line for line in (result.stdout + result.stderr).splitlines() if any(m in line for m in CONSAN_RACE)]
    assert not races, f"ConSan reports: {races[:5]}"
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["ok"], report["reason"]
    assert report["kernels"] == 1 and report["debug"] == [True], f"not the instrumented binary: {report}"


def test_every_config_the_tests_launch_is_valid():
    for config, _ in KNOB_CASES:
        assert config.problems(128) == [], config
    assert SPLIT.problems(128) == [] and SPLIT.maxnreg == 160

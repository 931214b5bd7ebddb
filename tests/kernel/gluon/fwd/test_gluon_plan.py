"""The Gluon forward's launch plans (kernel/gluon/fwd/plan.py, ``kernel.gluon.fwd.launch.plan_for``):
the JIT once per call signature, then the compiled kernel directly.

* CPU, any Triton: what a plan is kept under (its key), that a refused call keeps none, that the
  default call's route makes its launch plan once (the machine's gate and the device check are
  replaced: a plan is made, never launched).
* CPU, Triton 3.6 (a subprocess running ``tests/gluon_fake_driver.py``: the real JIT and launcher
  wrapper, a recording driver): a direct launch passes what the JIT passes, each input set's own
  pointers, and a repeated pointer encodes no new CUtensorMap.
* GPU (``gpu`` mark, sm_90 with Triton 3.6): the direct path against the JIT path, bit for bit, on
  NaN-filled outputs and two fresh input sets of one signature (a stale pointer would show);
  outputs of a later call land in its own tensors; hooks and the route.
(The direct path's fall-backs, on fakes and any Triton: test_gluon_plan_paths.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, nan_outputs_like
from gluon_fakes import flat_launcher_reason

import kernel.gluon.fwd.launch as gluon_module
from kernel.gluon.api import gluon_api_support, gluon_support
from kernel.gluon.checks import check_shapes
from kernel.gluon.fwd.config import VARIANTS
from kernel.gluon.fwd.launch import KNOB_NAMES, flash_attn_fwd_gluon, flash_attn_fwd_gluon_jit, plan_for
from kernel.gluon.fwd.plan import GluonLaunchPlan
from kernel.triton.launch import PLANS

FLAT_REASON = flat_launcher_reason()
API_REASON = gluon_api_support()
RUN_REASON = gluon_support() if torch.cuda.is_available() else "needs a CUDA GPU"
needs_hopper = pytest.mark.skipif(RUN_REASON is not None, reason=str(RUN_REASON))


@pytest.fixture(autouse=True)
def fresh_plans():
    PLANS.clear()
    yield
    PLANS.clear()


@pytest.fixture
def hopper(monkeypatch):
    """Plans are made on CPU tensors: the machine's gate passes and every input check but the device's runs."""
    monkeypatch.setattr(gluon_module, "gluon_support", lambda capability=None: None)
    monkeypatch.setattr(gluon_module, "check_inputs", check_shapes)


def _plan(q, k, v, causal=False, out=None, lse=None, variant="ws", **knobs):
    """The plan flash_attn_fwd_gluon(q, k, v, causal, variant=..., **knobs, out=..., lse=...) runs."""
    return plan_for(q, k, v, causal, variant, {name: knobs.get(name) for name in KNOB_NAMES}, out, lse)


def _qkv(shape=(1, 2, 64, 64), dtype=torch.bfloat16):
    return tuple(torch.randn(shape, dtype=dtype) for _ in range(3))


# ------------------------------------------------------------------------------ keys (CPU)


def test_a_signature_keeps_its_plan_whatever_the_data(hopper):
    q, k, v = _qkv()
    plan = _plan(q, k, v)
    assert isinstance(plan, GluonLaunchPlan) and plan.config.variant == "ws"
    assert _plan(*_qkv()) is plan, "other tensors of the same layout: the same plan"
    out, lse = torch.empty_like(q), torch.empty(q.shape[:-1])
    with_outputs = _plan(q, k, v, out=out, lse=lse)
    assert with_outputs is not plan
    assert _plan(*_qkv(), out=torch.empty_like(q), lse=torch.empty(q.shape[:-1])) is with_outputs


CHANGES = {
    "a length": lambda q, k, v: (_qkv((1, 2, 65, 64)), {}),
    "strides": lambda q, k, v: (tuple(t.transpose(1, 2) for t in _qkv((1, 64, 2, 64))), {}),
    "dtype": lambda q, k, v: (_qkv(dtype=torch.float16), {}),
    "3-D": lambda q, k, v: (_qkv((1, 64, 64)), {}),
    "causal": lambda q, k, v: ((q, k, v), dict(causal=True)),
    "variant": lambda q, k, v: ((q, k, v), dict(variant="pipelined")),
    "a knob": lambda q, k, v: ((q, k, v), dict(num_stages=3)),
    "the same knob value as another type": lambda q, k, v: ((q, k, v), dict(persistent=True)),
    "lse given": lambda q, k, v: ((q, k, v), dict(lse=torch.empty(q.shape[:-1]))),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_each_part_of_the_signature_has_its_own_plan(hopper, change):
    q, k, v = _qkv()
    base = _plan(q, k, v, persistent=1)
    tensors, extra = CHANGES[change](q, k, v)
    other = _plan(*tensors, **{"persistent": 1, **extra})
    assert other is not base and len(PLANS) == 2


def test_a_refused_call_keeps_no_plan_and_is_refused_again(hopper):
    q, k, v = _qkv()
    _plan(q, k, v, persistent=1)
    for _ in range(2):                   # persistent=1.0 equals 1 but is refused, however often it comes
        with pytest.raises(ValueError, match="persistent=1.0"):
            _plan(q, k, v, persistent=1.0)
    shifted = torch.randn(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape)
    with pytest.raises(ValueError, match=r"q.contiguous\(\)"):
        _plan(shifted, k, v)
    with pytest.raises(TypeError, match="float16 and bfloat16"):
        _plan(*_qkv(dtype=torch.float32))
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        _plan([1.0], k, v)
    with pytest.raises(ValueError, match="out must be"):
        _plan(q, k, v, out=torch.empty(2, 2))
    assert len(PLANS) == 1


def test_a_machine_that_cannot_run_it_is_told_so_before_any_check(monkeypatch):
    monkeypatch.setattr(gluon_module, "gluon_support", lambda capability=None: "no Hopper here")
    with pytest.raises(gluon_module.GluonUnavailable, match="no Hopper here"):
        _plan([1.0], [2.0], [3.0])
    assert not PLANS


def test_the_default_calls_route_makes_its_launch_plan_once(hopper, monkeypatch):
    """GluonPlan is kept per layout by the Triton plan cache: one launch plan, made on its first call."""
    from kernel.route import GluonPlan

    made, launched = [], []
    real = gluon_module.checked_plan
    monkeypatch.setattr(gluon_module, "checked_plan", lambda *args: made.append(args) or real(*args))
    monkeypatch.setattr(GluonLaunchPlan, "__call__", lambda plan, *args: launched.append(plan) or "launched")
    route = GluonPlan("ws", True)
    q, k, v = _qkv((1, 2, 64, 128))
    assert route(q, k, v) == route(*_qkv((1, 2, 64, 128))) == "launched"
    assert len(made) == 1 and launched == [route.launch, route.launch]
    assert route.launch.config == gluon_module.default_gluon_config(128, True, "ws") and route.launch.causal


# ------------------------------------------------------------- Triton 3.6's JIT, on a CPU


@pytest.mark.skipif(API_REASON is not None or FLAT_REASON is not None, reason=str(API_REASON or FLAT_REASON))
def test_the_direct_launch_passes_what_the_jit_passes_on_triton_36():
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"} | {"PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, os.path.join("tests", "gluon_fake_driver.py")], capture_output=True,
                            text=True, timeout=900, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    cases = json.loads(result.stdout)
    assert len(cases) == 3
    for case in cases:
        label = case["case"]
        first_jit, second_direct, second_jit, first_direct, first_again = case["launches"]
        first, second = case["pointers"]
        assert case["mode"] == "maps", label
        # The JIT gives the launcher its launch metadata and Triton's hook chains, empty here; the
        # direct path gives None for the three, which the launcher then does not call.
        assert first_jit[10:13] == second_jit[10:13] == ["launch-metadata", ["hook-chain", 0], ["hook-chain", 0]]
        for direct, jit in ((second_direct, second_jit), (first_direct, first_jit), (first_again, first_jit)):
            assert direct[10:13] == [None, None, None], label
            assert direct[:10] == jit[:10] and direct[13:] == jit[13:], label
        for launch, pointers in ((second_direct, second), (first_direct, first)):
            maps = [arg for arg in launch[13:] if isinstance(arg, list) and arg[:1] == ["map"]]
            assert [m[1] for m in maps] == pointers[:4], f"{label}: descriptors of another input set"
            assert ["tensor", pointers[4]] in launch[13:], f"{label}: lse of another input set"
        # Maps encoded: by the JIT's wrapper, the plan (set 2), the JIT, the plan (set 1), then none.
        assert case["encoded"] == [4, 4, 4, 4, 0], label


# ------------------------------------------------------------------------------ GPU tests

GPU_CASES = [(d, causal, n_q, n_k) for d in (64, 128) for causal in (False, True)
             for n_q, n_k in ((385, 129), (1, 1), (16, 16))]


def _gpu_sets(fresh_inputs, shape_q, shape_kv, count=2):
    return [fresh_inputs(shape_q, shape_kv, torch.bfloat16, "cuda")[:3] for _ in range(count)]


def _jit_outputs(q, k, v, causal, variant, **knobs):
    out, lse = nan_outputs_like(q)
    flash_attn_fwd_gluon_jit(q, k, v, causal, variant=variant, out=out, lse=lse, **knobs)
    assert not (out.isnan().any() or lse.isnan().any()), "the JIT path left an output unwritten"
    return out, lse


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("d, causal, n_q, n_k", GPU_CASES, ids=lambda c: str(c))
def test_the_direct_path_is_bit_identical_to_the_jit_path(variant, d, causal, n_q, n_k, fresh_inputs):
    """Set 1 (the plan's JIT call), set 2 and set 1 again (direct, the second from kept maps)."""
    first, second = _gpu_sets(fresh_inputs, (2, 3, n_q, d), (2, 3, n_k, d))
    for round_, (q, k, v) in enumerate((first, second, first)):
        out, lse = nan_outputs_like(q)
        flash_attn_fwd_gluon(q, k, v, causal, variant=variant, out=out, lse=lse)
        ref, ref_lse = _jit_outputs(q, k, v, causal, variant)
        assert torch.equal(out, ref) and torch.equal(lse, ref_lse), f"round {round_}: not the JIT path's outputs"
    plan = _plan(q, k, v, causal, out, lse, variant)
    assert plan.compiled is not None and plan.mode == "maps", plan


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_a_later_call_writes_into_its_own_outputs(causal, fresh_inputs):
    (q, k, v), (q2, k2, v2) = _gpu_sets(fresh_inputs, (2, 3, 385, 128), (2, 3, 129, 128))
    out, lse = nan_outputs_like(q)
    flash_attn_fwd_gluon(q, k, v, causal, variant="ws", out=out, lse=lse)
    kept = out.clone(), lse.clone()
    out2, lse2 = nan_outputs_like(q2)
    flash_attn_fwd_gluon(q2, k2, v2, causal, variant="ws", out=out2, lse=lse2)
    assert torch.equal(out, kept[0]) and torch.equal(lse, kept[1]), "the second call wrote the first's outputs"
    ref2, ref_lse2 = _jit_outputs(q2, k2, v2, causal, "ws")
    assert torch.equal(out2, ref2) and torch.equal(lse2, ref_lse2)
    # Outputs the plan allocates: each call its own.
    mine, mine2 = (flash_attn_fwd_gluon(*qkv, causal, variant="ws") for qkv in ((q, k, v), (q2, k2, v2)))
    assert mine[0].data_ptr() != mine2[0].data_ptr()
    assert torch.equal(mine[0], out) and torch.equal(mine2[0], out2) and torch.equal(mine2[1], lse2)
    # out may be q itself: each query tile is read before its rows are stored.
    in_place = q2.clone()
    flash_attn_fwd_gluon(in_place, k2, v2, causal, variant="ws", out=in_place, lse=torch.empty_like(lse2))
    assert torch.equal(in_place, out2)


LAYOUTS = {
    "[B, N, D]": lambda t: t[:, 0],
    "[B, N, H, D] seen as [B, H, N, D]": lambda t: t.transpose(1, 2).contiguous().transpose(1, 2),
    "a non-unit last stride (copied)": lambda t: t.transpose(-1, -2).contiguous().transpose(-1, -2),
}


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_other_layouts_launch_directly_and_bit_identically(layout, fresh_inputs):
    sets = [tuple(LAYOUTS[layout](t) for t in qkv) for qkv in _gpu_sets(fresh_inputs, (2, 3, 300, 64),
                                                                           (2, 3, 200, 64))]
    for q, k, v in (*sets, sets[0]):
        out, lse = flash_attn_fwd_gluon(q, k, v, True, variant="ws")
        ref, ref_lse = _jit_outputs(q, k, v, True, "ws")
        assert torch.equal(out, ref) and torch.equal(lse, ref_lse), layout
    assert _plan(q, k, v, True).mode == "maps"


@pytest.mark.gpu
@needs_hopper
def test_a_profilers_launch_hook_sees_every_call(fresh_inputs):
    """With a launch hook installed each call goes through the JIT, which calls it; removed, direct again."""
    import triton

    (q, k, v), = _gpu_sets(fresh_inputs, (2, 3, 385, 128), (2, 3, 129, 128), count=1)
    flash_attn_fwd_gluon(q, k, v, variant="ws")                  # the plan's JIT call: compiled
    seen = []
    hook = triton.knobs.runtime.launch_enter_hook
    hook.add(seen.append)
    try:
        outs = [flash_attn_fwd_gluon(q, k, v, variant="ws") for _ in range(3)]
        torch.cuda.synchronize()
    finally:
        hook.remove(seen.append)
    assert len(seen) == 3 and all("_fwd_ws_kernel" in meta.get()["name"] for meta in seen)
    flash_attn_fwd_gluon(q, k, v, variant="ws")
    assert len(seen) == 3, "the hook was called after its removal"
    ref, _ = _jit_outputs(q, k, v, False, "ws")
    assert all(torch.equal(out, ref) for out, _ in outs)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_the_routed_default_call_launches_its_plan_directly(causal, fresh_inputs, monkeypatch):
    import kernel
    import kernel.route as route
    import kernel.route_table as route_table

    if route.default_variant(128, causal) is None:
        pytest.skip("this machine does not route D=128 to the Gluon kernel")
    monkeypatch.setattr(route, "ROUTE_MIN_FLOPS", 0)
    monkeypatch.setattr(route_table, "FORWARD", {})       # the plan's launches, not the measured table's choice
    for q, k, v in _gpu_sets(fresh_inputs, (2, 3, 385, 128), (2, 3, 129, 128)):
        out, lse = nan_outputs_like(q)
        kernel.flash_attn_fwd(q, k, v, causal, out=out, lse=lse)
        ref, ref_lse = _jit_outputs(q, k, v, causal, route.default_variant(128, causal))
        assert torch.equal(out, ref) and torch.equal(lse, ref_lse)
    routed = kernel.plan_for(kernel.JIT_KERNEL, kernel.triton.fwd.KNOB_DEFAULTS, q, k, v, causal, out, lse,
                             route.gluon_plan)
    assert isinstance(routed, route.GluonPlan) and routed.launch.mode == "maps"

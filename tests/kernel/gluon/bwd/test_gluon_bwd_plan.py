"""The Gluon backward's launch plans (kernel/gluon/bwd/plan.py, ``kernel.gluon.bwd.launch.plan_for``):
its three kernels through the JITs once per call signature, then directly.

* CPU, any Triton, on fakes shaped as Triton 3.6's pieces: the first call is the JITs', later ones
  pass each launcher what the JIT passes, descriptor maps are kept per pointer, the fall-backs (a
  profiler's hooks, another current device, ``direct=False``, a launcher of another shape, a
  kernel of other parameters), per-call allocations and overlap checks, empty lengths; what a plan
  is kept under and that a refused call keeps none.
* CPU, Triton 3.6 (a subprocess running ``tests/gluon_bwd_fake_driver.py``: the real JITs and
  launcher wrapper over a recording driver): every direct launch passes what the JIT passes.
* GPU (``gpu`` mark, sm_90 with Triton 3.6): the plan against the JIT path on NaN-filled gradients
  and two fresh input sets of one signature: dK and dV bit for bit; dQ bit for bit with one key tile
  per head, else within one bf16 ulp (its fp32 TMA reduce-adds run in no fixed order); the hooks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, nan_outputs_like
from gluon_fakes import ENCODED, HEAD, FakeDescriptor, FakeGluonKernel, flat_launcher_reason

import kernel.gluon.api as gluon_api
import kernel.gluon.bwd.launch as gluon_bwd
import kernel.gluon.bwd.plan as plan_module
import kernel.triton.bwd_launch as bwd_launch
import kernel.triton.launch as launch_module
from kernel.gluon.bwd.config import GluonBwdConfig
from kernel.gluon.bwd.plan import DESCRIPTORS, GluonBwdPlan
from kernel.triton.launch import PLANS

FLAT_REASON = flat_launcher_reason()
API_REASON = gluon_api.gluon_api_support()
RUN_REASON = gluon_api.gluon_bwd_support() if torch.cuda.is_available() else "needs a CUDA GPU"
needs_hopper = pytest.mark.skipif(RUN_REASON is not None, reason=str(RUN_REASON))
GLUON_NAMES = [*DESCRIPTORS, "LSE", "DELTA", "H", "BH", "N_Q", "N_K", "qk_scale", "sm_scale", "CAUSAL", "NUM_STAGES"]
class Fakes:
    """The plan's three kernels replaced by fakes: ``kernels(log)`` gives the Gluon one's ``arguments``."""

    def __init__(self, **gluon_options):
        self.log = []
        self.gluon = FakeGluonKernel("gluon", self.log, gluon_options.pop("arg_names", GLUON_NAMES), len(DESCRIPTORS),
                          **gluon_options)

    def arguments(self, q, k, v, dout, dq_acc, dk, dv, lse, delta, config, causal):
        descriptors = tuple(FakeDescriptor(t, list(t.shape), list(t.stride()), [1, 1, 64, 64], "LAYOUT")
                            for t in (q, k, v, dout, dq_acc, dk, dv))
        args = (*descriptors, lse, delta, q.shape[1], q.shape[0] * q.shape[1], q.shape[2], k.shape[2], 0.18, 0.125)
        return self.gluon, args, dict(CAUSAL=causal, NUM_STAGES=config.num_stages), dict(num_warps=4, maxnreg=128)

    def plan(self, tensors, grads=(None, None, None), causal=True, **options):
        plan = GluonBwdPlan(*tensors, causal, CONFIG, grads, self.arguments, **options)
        for unit, name in ((plan.preprocess, "preprocess"), (plan.finish, "finish")):
            unit.fn = FakeGluonKernel(name, self.log, unit.fn.arg_names)
        return plan

    def calls(self, kind):
        return [entry for entry in self.log if entry[1] == kind]


CONFIG = GluonBwdConfig(64, num_stages=2, persistent=1)


@pytest.fixture(autouse=True)
def cpu_machine(monkeypatch):
    """CPU tensors (device index None), a fixed stream, 4 SMs, compiled kernels (not the interpreter),
    Triton 3.6's direct entry (any Triton); no plan kept before or after."""
    ENCODED.clear()
    PLANS.clear()
    for module in (plan_module, bwd_launch):
        monkeypatch.setattr(module, "current_device", lambda: None)
        monkeypatch.setattr(module, "current_stream", lambda index: "STREAM")
    monkeypatch.setattr(plan_module, "sm_count", lambda device: 4)
    monkeypatch.setattr(bwd_launch, "interpreting", lambda: False)
    monkeypatch.setattr(launch_module, "_DIRECT_LAUNCH", True)
    yield
    PLANS.clear()


def _tensors(shape=(2, 3, 200, 64), n_k=100):
    q, out, dout = (torch.randn(shape, dtype=torch.bfloat16) for _ in range(3))
    k, v = (torch.randn((*shape[:2], n_k, shape[3]), dtype=torch.bfloat16) for _ in range(2))
    return q, k, v, out, torch.randn(shape[:3]), dout


def _grads(tensors):
    return tuple(torch.empty_like(t) for t in tensors[:3])


def test_the_first_call_is_the_jits_and_later_ones_pass_each_launcher_what_the_jit_passes():
    fakes, tensors = Fakes(), _tensors()
    grads = _grads(tensors)
    plan = fakes.plan(tensors, grads)
    assert plan.grid == (4, 1, 1), "persistent=1 on 4 SMs: 4 programs for 6 x 2 key tiles"
    plan(*tensors, *grads)
    jits = fakes.calls("jit")
    assert [(name, grid) for name, _, grid, _, _ in jits] == [("preprocess", (4, 6)), ("gluon", (4, 1, 1)),
                                                              ("finish", (4, 6))]
    assert plan.mode == "maps" and fakes.calls("entry") == []
    plan(*tensors, *grads)
    entries = fakes.calls("entry")
    assert [name for name, _, _ in entries] == ["preprocess", "gluon", "finish"]
    pre, gluon, finish = (args for _, _, args in entries)
    delta, dq_acc = pre[HEAD + 2], pre[HEAD + 3]
    assert delta.shape == (2 * 3 * 200,) and dq_acc.shape == (2, 3, 200, 64) and dq_acc.dtype == torch.float32
    for (name, _, grid, args, kwargs), direct in zip((jits[0], jits[2]), (pre, finish)):
        # the JIT's arguments with this call's delta and dQ accumulator, then its constexprs in signature order
        fresh = [delta if a is jits[0][3][2] else dq_acc if a is jits[0][3][3] else a for a in args]
        constexprs = [kwargs[n] for n in getattr(plan, "preprocess" if name == "preprocess" else "finish").fn.arg_names
                      if n in kwargs]
        assert direct == (*grid, 1, "STREAM", f"{name}-FUNCTION", False, False, None, None, "PACKED", None, None, None,
                          *fresh, *constexprs), name
    q, k, v, out, lse, dout = tensors
    maps = [arg for arg in gluon if isinstance(arg, tuple)]
    assert [(m[1], m[3]) for m in maps] == [(t.data_ptr(), f"m{i}") for i, t in enumerate(
        (q, k, v, dout, dq_acc, grads[1], grads[2]))]
    assert gluon[:HEAD] == (4, 1, 1, "STREAM", "gluon-FUNCTION", False, False, None, None, "PACKED", None, None, None)
    assert gluon[HEAD + 7 * 9:] == (lse, delta, 3, 6, 200, 100, 0.18, 0.125, True, 2)
    assert finish[HEAD + 1] is grads[0], "dq of the call"


def test_each_pointer_gets_its_own_map_once():
    fakes, first, second = Fakes(), _tensors(), _tensors()
    grads1, grads2 = _grads(first), _grads(second)
    plan = fakes.plan(first, grads1)
    plan(*first, *grads1)
    kept = []
    for tensors, grads in ((second, grads2), (first, grads1), (second, grads2)):
        before = len(ENCODED)
        plan(*tensors, *grads)
        gluon = fakes.calls("entry")[-2][2]
        pointers = [arg[1] for arg in gluon if isinstance(arg, tuple)]
        assert pointers == [t.data_ptr() for t in (*tensors[:3], tensors[5])] + [pointers[4]] + [
            g.data_ptr() for g in grads[1:]]
        # only pointers this descriptor has not seen are encoded (the dQ accumulator is allocated per call)
        expected = [p for i, p in enumerate(pointers) if all(p != seen[i] for seen in kept)]
        assert ENCODED[before:] == expected
        kept.append(pointers)
    assert len(ENCODED) >= 14


@pytest.mark.parametrize("why", ["a profiler's hooks", "another current device", "direct=False"])
def test_every_call_goes_through_the_jits_when(why, monkeypatch):
    fakes, tensors = Fakes(), _tensors()
    plan = fakes.plan(tensors, direct=why != "direct=False")
    plan(*tensors)
    for module in (plan_module, bwd_launch):
        if why == "a profiler's hooks":
            monkeypatch.setattr(module, "hooks_busy", lambda: True)
        elif why == "another current device":
            monkeypatch.setattr(module, "current_device", lambda: 3)
    for _ in range(3):
        plan(*tensors)
    assert len(fakes.calls("jit")) == 12 and fakes.calls("entry") == []


@pytest.mark.parametrize("launcher", ["not Triton 3.6's wrapper", "a descriptor without metadata", "cache_maps=False"])
def test_otherwise_descriptors_are_rebuilt_for_each_call(launcher):
    metas = ["m0", None, *[f"m{i}" for i in range(2, 7)]] if launcher == "a descriptor without metadata" else None
    fakes = Fakes(wrapped=launcher != "not Triton 3.6's wrapper", metas=metas)
    first, second = _tensors(), _tensors()
    plan = fakes.plan(first, cache_maps=launcher != "cache_maps=False")
    plan(*first)
    plan(*second)
    assert plan.mode == "descriptors"
    gluon = fakes.calls("entry")[1][2]
    if launcher == "not Triton 3.6's wrapper":    # the runner gets descriptor objects, as the JIT gives them
        bases = [d.base.data_ptr() for d in gluon[HEAD:HEAD + 7]]
    else:                                         # the wrapper expands them, every call anew
        bases = [arg[1] for arg in gluon if isinstance(arg, tuple)]
        plan(*second)
        assert ENCODED[-14:-7][:4] == ENCODED[-7:][:4] == bases[:4]
    assert bases[:4] == [t.data_ptr() for t in (*second[:3], second[5])]


def test_a_kernel_with_other_parameters_keeps_every_kernel_on_the_jit():
    fakes, tensors = Fakes(arg_names=["q", *GLUON_NAMES[1:]]), _tensors()
    plan = fakes.plan(tensors)
    plan(*tensors)
    plan(*tensors)
    assert plan.mode is None and len(fakes.calls("jit")) == 6 and fakes.calls("entry") == []


def test_gradients_are_allocated_per_call_or_checked_against_the_inputs_per_call():
    fakes, tensors = Fakes(), _tensors()
    q, k, v, out, lse, dout = tensors
    plan = fakes.plan(tensors)
    first, second = plan(*tensors), plan(*tensors)
    assert [g.shape for g in first] == [q.shape, k.shape, v.shape] and first[0].data_ptr() != second[0].data_ptr()
    given = fakes.plan(tensors, _grads(tensors))
    given(*tensors, *_grads(tensors))
    with pytest.raises(ValueError, match="dk overlaps k"):
        given(*tensors, torch.empty_like(q), k, torch.empty_like(v))     # the plan cannot tell, the check can
    dk = torch.empty_like(k)
    with pytest.raises(ValueError, match="dv overlaps dk"):
        given(*tensors, torch.empty_like(q), dk, dk)
    with pytest.raises(ValueError, match="dq overlaps out"):
        given(*tensors, out, torch.empty_like(k), torch.empty_like(v))
    assert len(fakes.calls("jit")) == 6 and len(fakes.calls("entry")) == 3, "a refused call launches nothing"


@pytest.mark.parametrize("empty", ["no keys", "no queries"])
def test_an_empty_length_launches_nothing_and_zeroes_the_gradients_it_has(empty):
    fakes = Fakes()
    tensors = _tensors(n_k=0) if empty == "no keys" else _tensors((2, 3, 0, 64))
    grads = tuple(torch.full_like(t, float("nan")) for t in tensors[:3])
    plan = fakes.plan(tensors, grads)
    assert plan.grid is None
    plan(*tensors, *grads)
    assert fakes.log == []
    assert all(bool((g == 0).all()) for g in grads), "every gradient of an empty length is 0 (or has no element)"


# ------------------------------------------------------------------------------ keys (CPU)


@pytest.fixture
def hopper(monkeypatch):
    """Plans are made on CPU tensors: the machine's gate passes and every check but the device's runs."""
    real = gluon_bwd.check_bwd_inputs

    def on_cpu(*args):
        try:
            real(*args)
        except ValueError as exc:
            if "needs CUDA tensors" not in str(exc):
                raise
    monkeypatch.setattr(gluon_bwd, "gluon_bwd_support", lambda capability=None: None)
    monkeypatch.setattr(gluon_bwd, "check_bwd_inputs", on_cpu)


def _plan(tensors, causal=False, grads=(None, None, None), **knobs):
    """The plan flash_attn_bwd_gluon(*tensors, causal, **knobs, dq=, dk=, dv=) runs."""
    return gluon_bwd.plan_for(*tensors, causal, {name: knobs.get(name) for name in gluon_bwd.KNOB_NAMES}, grads)


CHANGES = {
    "a length": lambda t: (_tensors(n_k=101), {}),
    "dtype": lambda t: (tuple(x.half() if x.dtype == torch.bfloat16 else x for x in t), {}),
    "dout's strides": lambda t: ((*t[:5], t[5].transpose(1, 2).contiguous().transpose(1, 2)), {}),
    "causal": lambda t: (t, dict(causal=True)),
    "a knob": lambda t: (t, dict(num_stages=3)),
    "the same knob value as another type": lambda t: (t, dict(persistent=True)),
    "gradients given": lambda t: (t, dict(grads=_grads(t))),
}


def test_a_signature_keeps_its_plan_whatever_the_data(hopper):
    plan = _plan(_tensors(), persistent=1)
    assert isinstance(plan, GluonBwdPlan) and plan.config.persistent == 1
    assert _plan(_tensors(), persistent=1) is plan and len(PLANS) == 1


@pytest.mark.parametrize("change", list(CHANGES))
def test_each_part_of_the_signature_has_its_own_plan(hopper, change):
    tensors = _tensors()
    base = _plan(tensors, persistent=1)
    other_tensors, extra = CHANGES[change](tensors)
    other = _plan(other_tensors, **{"persistent": 1, **extra})
    assert other is not base and len(PLANS) == 2


def test_a_refused_call_keeps_no_plan_and_is_refused_again(hopper):
    tensors = _tensors()
    _plan(tensors, persistent=1)
    for _ in range(2):                   # equal to a kept plan's key values, but refused however often they come
        with pytest.raises(ValueError, match="persistent=1.0"):
            _plan(tensors, persistent=1.0)
        with pytest.raises(TypeError, match="causal must be True or False"):
            _plan(tensors, causal=0, persistent=1)
    q = tensors[0]
    shifted = torch.randn(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape)
    with pytest.raises(ValueError, match=r"q.contiguous\(\)"):
        _plan((shifted, *tensors[1:]), persistent=1)
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        _plan(([1.0], *tensors[1:]))
    with pytest.raises(ValueError, match="dq must be a contiguous tensor"):
        _plan(tensors, grads=(torch.empty(2, 2), None, None))
    assert len(PLANS) == 1


def test_a_machine_that_cannot_run_it_is_told_so_before_any_check(monkeypatch):
    monkeypatch.setattr(gluon_bwd, "gluon_bwd_support", lambda capability=None: "no Hopper here")
    with pytest.raises(gluon_bwd.GluonUnavailable, match="no Hopper here"):
        gluon_bwd.flash_attn_bwd_gluon([1.0], [2.0], [3.0], [4.0], [5.0], [6.0])
    assert not PLANS


# ------------------------------------------------------------- Triton 3.6's JIT, on a CPU


def _named(args, names: dict):
    return [names.get(tuple(a), a) if isinstance(a, list) and a[:1] == ["tensor"] else a for a in args]


@pytest.mark.skipif(API_REASON is not None or FLAT_REASON is not None, reason=str(API_REASON or FLAT_REASON))
def test_the_direct_launches_pass_what_the_jits_pass_on_triton_36():
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"} | {"PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, os.path.join("tests", "gluon_bwd_fake_driver.py")], capture_output=True,
                            text=True, timeout=900, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    cases = json.loads(result.stdout)
    assert len(cases) == 3
    for case in cases:
        label, (first, second) = case["case"], case["pointers"]
        assert case["mode"] == "maps" and [len(step) for step in case["launches"]] == [3] * 5, label
        steps = []
        for launches in case["launches"]:        # each call's own delta and dQ accumulator, by name
            pre = launches[0]
            names = {("tensor", pre[15][1]): "DELTA", ("tensor", pre[16][1]): "DQ_ACC"}
            acc = pre[16][1]
            steps.append([[("map-of", "DQ_ACC") if isinstance(a, list) and a[:2] == ["map", acc] else a
                           for a in _named(args, names)] for args in launches])
        first_jit, second_direct, second_jit, first_direct, first_again = steps
        for jit in (first_jit, second_jit):
            assert all(args[10:13] == ["launch-metadata", ["hook-chain", 0], ["hook-chain", 0]] for args in jit)
        for direct, jit in ((second_direct, second_jit), (first_direct, first_jit), (first_again, first_jit)):
            for kernel, (d, j) in zip(("preprocess", "gluon", "finish"), zip(direct, jit)):
                assert d[10:13] == [None, None, None], (label, kernel)
                assert d[:10] == j[:10] and d[13:] == j[13:], (label, kernel)
        for launches, pointers in ((second_direct, second), (first_direct, first)):
            maps = [a[1] for a in launches[1][13:] if isinstance(a, list) and a[:1] == ["map"]]
            q, k, v, out, lse, dout, dq, dk, dv = pointers
            assert maps == [q, k, v, dout, dk, dv], f"{label}: descriptors of another input set"
            assert ["tensor", lse] in launches[1] and ["tensor", dq] in launches[2], label
            assert ["tensor", out] in launches[0] and ["tensor", dout] in launches[0], label
        # Maps encoded: the JIT's wrapper (7), the plan on set 2 (7), the JIT (7), the plan on set 1 (its
        # 6 and the call's accumulator), then the accumulator alone, and only if its pointer is new.
        encoded = case["encoded"]
        assert [len(e) for e in encoded[:3]] == [7, 7, 7] and len(encoded[3]) in (6, 7), label
        assert set(encoded[3]) >= {first[i] for i in (0, 1, 2, 5, 7, 8)} and len(encoded[4]) <= 1, label


# ------------------------------------------------------------------------------ GPU tests

GPU_CASES = [(d, causal, n_q, n_k, {}) for d in (64, 128) for causal in (False, True)
             for n_q, n_k in ((385, 129), (1, 1), (16, 16))] + [
    (128, causal, 385, 129, dict(consumers=2)) for causal in (False, True)]


def _gpu_set(fresh_inputs, n_q, n_k, d, causal):
    from kernel import flash_attn_fwd

    q, k, v, _ = fresh_inputs((2, 3, n_q, d), (2, 3, n_k, d), torch.bfloat16, "cuda")
    out, lse = flash_attn_fwd(q, k, v, causal)
    return q, k, v, out, lse, torch.randn_like(q)


def _nan_grads(tensors):
    return tuple(nan_outputs_like(t)[0] for t in tensors[:3])


def _same(ours, ref, one_key_tile: bool, label) -> None:
    for name, g, r in zip(("dq", "dk", "dv"), ours, ref):
        assert not g.isnan().any(), f"{label}: {name} left unwritten"
        if name != "dq" or one_key_tile:
            assert torch.equal(g, r), f"{label}: {name} is not the JIT path's"
        else:      # the fp32 reduce-adds of several key tiles run in no fixed order: one bf16 ulp apart at most
            torch.testing.assert_close(g, r, rtol=2 ** -7, atol=1e-4 * float(r.abs().max()), msg=label)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("d, causal, n_q, n_k, knobs", GPU_CASES, ids=lambda c: str(c))
def test_the_plan_gives_the_jit_paths_gradients(d, causal, n_q, n_k, knobs, fresh_inputs):
    """Set 1 (the plan's JIT call), set 2 and set 1 again (direct, the second from kept maps), into
    NaN-filled gradients; then into gradients the plan allocates."""
    first, second = (_gpu_set(fresh_inputs, n_q, n_k, d, causal) for _ in range(2))
    one_key_tile = n_k <= gluon_bwd.config_from(d, causal, knobs).block_n
    for round_, tensors in enumerate((first, second, first)):
        grads, ref = _nan_grads(tensors), _nan_grads(tensors)
        gluon_bwd.flash_attn_bwd_gluon(*tensors, causal, **knobs, dq=grads[0], dk=grads[1], dv=grads[2])
        gluon_bwd.flash_attn_bwd_gluon_jit(*tensors, causal, **knobs, dq=ref[0], dk=ref[1], dv=ref[2])
        _same(grads, ref, one_key_tile, f"round {round_}")
        _same(gluon_bwd.flash_attn_bwd_gluon(*tensors, causal, **knobs), ref, one_key_tile, f"allocated {round_}")
    plan = gluon_bwd.plan_for(*first, causal, {n: knobs.get(n) for n in gluon_bwd.KNOB_NAMES}, grads)
    assert plan.compiled is not None and plan.mode == "maps", plan


@pytest.mark.gpu
@needs_hopper
def test_a_profilers_launch_hook_sees_every_kernel_of_every_call(fresh_inputs):
    import triton

    tensors = _gpu_set(fresh_inputs, 385, 129, 128, True)
    gluon_bwd.flash_attn_bwd_gluon(*tensors, True)              # the plan's JIT call: compiled
    seen = []
    hook = triton.knobs.runtime.launch_enter_hook
    hook.add(seen.append)
    try:
        grads = [gluon_bwd.flash_attn_bwd_gluon(*tensors, True) for _ in range(2)]
        torch.cuda.synchronize()
    finally:
        hook.remove(seen.append)
    names = [meta.get()["name"] for meta in seen]
    assert len(names) == 6 and all(kernel in name for kernel, name in zip(
        ["bwd_preprocess_kernel", "bwd_gluon_kernel", "bwd_dq_finish_kernel"] * 2, names)), names
    gluon_bwd.flash_attn_bwd_gluon(*tensors, True)
    assert len(seen) == 6, "the hook was called after its removal"
    ref = gluon_bwd.flash_attn_bwd_gluon_jit(*tensors, True)
    for ours in grads:
        _same(ours, ref, False, "under the hook")

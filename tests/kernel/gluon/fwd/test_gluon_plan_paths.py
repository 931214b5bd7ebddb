"""How a Gluon launch plan launches (kernel/gluon/fwd/plan.py), on fakes and any Triton: the first call
through the JIT, later ones direct with the argument list the JIT gives the launcher, maps kept per
pointer, and the fall-backs (a profiler's hooks, another current device, a launcher of another
shape, a kernel of other parameters). The fakes are shaped as Triton 3.6's pieces: a JIT function
indexed by its grid, a CompiledKernel whose launcher's ``launch`` is a closure over ``launcher``,
``tensordesc_indices`` and ``tensordesc_meta`` calling ``make_tensordesc_arg`` (test_gluon_plan.py
runs the real ones on Triton 3.6).
"""

from __future__ import annotations

import pytest
import torch
from gluon_fakes import ENCODED, HEAD, FakeDescriptor, FakeGluonKernel

import kernel.gluon.direct as gluon_direct
import kernel.gluon.fwd.plan as gluon_launch
import kernel.triton.launch as launch_module
from kernel.gluon.fwd.config import GluonConfig
from kernel.gluon.fwd.plan import GluonLaunchPlan

ARG_NAMES = ["q_desc", "k_desc", "v_desc", "o_desc", "LSE", "H", "BH", "N_Q", "N_K", "qk_scale", "CAUSAL", "OVERLAP",
             "NUM_STAGES"]


class FakeForward(FakeGluonKernel):
    """The Gluon forward's JIT function, compiled kernel and launcher (its four descriptors wrapped)."""

    def __init__(self, metas=("m0", "m1", "m2", "m3"), wrapped=True, arg_names=ARG_NAMES):
        super().__init__("gluon", [], arg_names, 4, wrapped, metas, pdl=True)
        self.function = "FUNCTION"

    def arguments(self, q4, k4, v4, o4, lse, config, causal):
        """kernel.gluon.fwd.launch.launch_arguments' shape: (kernel, args, constexprs, options)."""
        descriptors = tuple(FakeDescriptor(t, list(t.shape), list(t.stride()), [1, 1, 64, t.shape[3]], "LAYOUT")
                            for t in (q4, k4, v4, o4))
        batch, heads, n_q, _ = q4.shape
        args = (*descriptors, lse, heads, batch * heads, n_q, k4.shape[2], 0.125)
        return self, args, dict(CAUSAL=causal, OVERLAP=config.overlap, NUM_STAGES=config.num_stages), dict(num_warps=4)


CONFIG = GluonConfig("ws", 128, 128, num_stages=2, persistent=1)


@pytest.fixture(autouse=True)
def cpu_machine(monkeypatch):
    """CPU tensors (device index None), a fixed stream, 4 SMs, Triton 3.6's direct entry (any Triton)."""
    ENCODED.clear()
    monkeypatch.setattr(gluon_launch, "current_device", lambda: None)
    monkeypatch.setattr(gluon_launch, "current_stream", lambda index: "STREAM")
    monkeypatch.setattr(gluon_launch, "sm_count", lambda device: 4)
    monkeypatch.setattr(launch_module, "_DIRECT_LAUNCH", True)


def _tensors(shape=(2, 3, 200, 64), n_k=100):
    q = torch.randn(shape, dtype=torch.bfloat16)
    kv_shape = (*shape[:-2], n_k, shape[-1])
    k, v = (torch.randn(kv_shape, dtype=torch.bfloat16) for _ in range(2))
    return q, k, v, torch.empty_like(q), torch.empty(q.shape[:-1])


def _plan(fake, tensors, causal=True, **options):
    return GluonLaunchPlan(*tensors[:3], causal, CONFIG, *tensors[3:], fake.arguments, **options)


def test_the_first_call_is_the_jits_and_later_ones_pass_the_launcher_what_the_jit_passes():
    fake, tensors = FakeForward(), _tensors()
    plan = _plan(fake, tensors)
    assert plan.grid == (4, 1, 1), "persistent=1 on 4 SMs: 4 programs for 2 x 6 tiles"
    plan(*tensors)
    (_, grid, jit_args, jit_kwargs), = fake.jit_launches()
    assert grid == (4, 1, 1) and jit_kwargs == dict(CAUSAL=True, OVERLAP=True, NUM_STAGES=2, num_warps=4)
    assert plan.mode == "maps" and fake.entries() == []
    plan(*tensors)
    direct, = fake.entries()
    # What the JIT's launch gives the wrapper, less the launch metadata and hooks (none are installed).
    fake.run.launch(4, 1, 1, "STREAM", "FUNCTION", False, True, None, None, "PACKED", None, None, None,
                    *jit_args, True, True, 2)
    assert fake.entries()[1] == direct
    assert direct[:HEAD] == (4, 1, 1, "STREAM", "FUNCTION", False, True, None, None, "PACKED", None, None, None)
    q, k, v, out, lse = tensors
    maps = [arg for arg in direct if isinstance(arg, tuple)]
    assert [(m[1], m[3]) for m in maps] == [(t.data_ptr(), f"m{i}") for i, t in enumerate((q, k, v, out))]
    # each map is followed by the descriptor's shape and strides (4 + 4), then lse, the scalars, the constexprs
    assert direct[HEAD + 4 * 9:] == (lse, 3, 6, 200, 100, 0.125, True, True, 2)


def test_each_pointer_gets_its_own_map_once():
    fake, first = FakeForward(), _tensors()
    plan = _plan(fake, first)
    plan(*first)                                   # the JIT (the fake one encodes nothing)
    second = _tensors()
    for tensors in (second, first, second, first):
        plan(*tensors)
    encoded_once = [t.data_ptr() for t in second[:4]] + [t.data_ptr() for t in first[:4]]
    assert encoded_once == ENCODED
    for entry, tensors in zip(fake.entries(), (second, first, second, first)):
        assert [arg[1] for arg in entry if isinstance(arg, tuple)] == [t.data_ptr() for t in tensors[:4]]
        assert entry[HEAD + 4 * 9] is tensors[4], "the lse of the call"


def test_the_kept_maps_start_over_past_their_limit(monkeypatch):
    monkeypatch.setattr(gluon_direct, "MAP_LIMIT", 2)
    fake, sets = FakeForward(), [_tensors() for _ in range(4)]
    plan = _plan(fake, sets[0])
    for tensors in sets:
        plan(*tensors)
    assert all(len(args.by_pointer) <= 2 for args in plan._maps)
    plan(*sets[3])
    assert [arg[1] for arg in fake.entries()[-1] if isinstance(arg, tuple)] == [t.data_ptr() for t in sets[3][:4]]


@pytest.mark.parametrize("why", ["a profiler's hooks", "another current device", "direct=False"])
def test_every_call_goes_through_the_jit_when(why, monkeypatch):
    fake, tensors = FakeForward(), _tensors()
    plan = _plan(fake, tensors, direct=why != "direct=False")
    plan(*tensors)
    if why == "a profiler's hooks":
        monkeypatch.setattr(gluon_launch, "hooks_busy", lambda: True)
    elif why == "another current device":
        monkeypatch.setattr(gluon_launch, "current_device", lambda: 3)
    for _ in range(3):
        plan(*tensors)
    assert len(fake.jit_launches()) == 4 and fake.entries() == []


@pytest.mark.parametrize("launcher", ["not Triton 3.6's wrapper", "a descriptor without metadata", "cache_maps=False"])
def test_otherwise_descriptors_are_rebuilt_for_each_call(launcher):
    metas = ("m0", None, "m2", "m3") if launcher == "a descriptor without metadata" else ("m0", "m1", "m2", "m3")
    fake = FakeForward(metas, wrapped=launcher != "not Triton 3.6's wrapper")
    first, second = _tensors(), _tensors()
    plan = _plan(fake, first, cache_maps=launcher != "cache_maps=False")
    plan(*first)
    plan(*second)
    assert plan.mode == "descriptors"
    (_, _, jit_args, _), = fake.jit_launches()
    if launcher == "not Triton 3.6's wrapper":    # the runner gets descriptor objects, as the JIT gives them
        direct = fake.entries()[0]
        rebuilt = direct[HEAD:HEAD + 4]
        assert [d.base.data_ptr() for d in rebuilt] == [t.data_ptr() for t in second[:4]]
        assert [(d.shape, d.strides, d.block_shape, d.layout) for d in rebuilt] == [
            (d.shape, d.strides, d.block_shape, d.layout) for d in jit_args[:4]]
        assert direct[HEAD + 4:] == (second[4], *jit_args[5:], True, True, 2)
    else:                                         # the wrapper expands them, every call anew
        assert [arg[1] for arg in fake.entries()[0] if isinstance(arg, tuple)] == [t.data_ptr() for t in second[:4]]
        plan(*second)
        assert ENCODED[-8:] == [t.data_ptr() for t in second[:4]] * 2


def test_a_kernel_with_other_parameters_stays_on_the_jit():
    fake, tensors = FakeForward(arg_names=["q", *ARG_NAMES[1:]]), _tensors()
    plan = _plan(fake, tensors)
    plan(*tensors)
    plan(*tensors)
    assert plan.mode is None and len(fake.jit_launches()) == 2


def test_three_d_inputs_are_read_as_one_head():
    fake = FakeForward()
    tensors = _tensors((2, 200, 64))
    plan = _plan(fake, tensors)
    plan(*tensors)
    plan(*_tensors((2, 200, 64)))
    (_, _, jit_args, _), = fake.jit_launches()
    assert [tuple(d.base.shape) for d in jit_args[:4]] == [(2, 1, 200, 64), (2, 1, 100, 64), (2, 1, 100, 64),
                                                           (2, 1, 200, 64)]
    assert [arg[2] for arg in fake.entries()[0] if isinstance(arg, tuple)] == [(2, 1, 200, 64), (2, 1, 100, 64),
                                                                               (2, 1, 100, 64), (2, 1, 200, 64)]


def test_outputs_are_checked_against_the_inputs_on_every_call():
    fake = FakeForward()
    q, k, v, out, lse = _tensors((2, 3, 100, 64))
    plan = _plan(fake, (q, k, v, out, lse))
    plan(q, k, v, out, lse)
    plan(q, k, v, out, lse)
    with pytest.raises(ValueError, match="out overlaps k"):
        plan(q, k, v, k, lse)                      # same layout as out: the plan cannot tell, the check can
    in_q = q.view(torch.float32).view(-1)[: lse.numel()].view(lse.shape)    # lse's layout, in q's memory
    with pytest.raises(ValueError, match="lse overlaps q"):
        plan(q, k, v, out, in_q)
    plan(q, k, v, q, lse)                          # out may be q itself
    assert len(fake.entries()) == 2


def test_no_query_rows_or_no_keys_launch_nothing():
    fake = FakeForward()
    empty = _tensors((2, 3, 0, 64))
    assert _plan(fake, empty).grid is None
    _plan(fake, empty)(*empty)
    q, k, v, out, lse = _tensors(n_k=0)
    out.fill_(float("nan"))
    lse.fill_(float("nan"))
    _plan(fake, (q, k, v, out, lse))(q, k, v, out, lse)
    assert fake.log == [] and torch.equal(out, torch.zeros_like(out)) and bool(torch.isneginf(lse).all())


def test_inputs_with_a_non_unit_last_stride_are_copied_and_read_from_the_copy():
    fake = FakeForward()
    q, k, v, out, lse = _tensors()
    strided = q.transpose(-1, -2).contiguous().transpose(-1, -2)
    plan = _plan(fake, (strided, k, v, out, lse))
    assert plan.copy_inputs
    plan(strided, k, v, out, lse)
    plan(strided, k, v, out, lse)
    (_, _, jit_args, _), = fake.jit_launches()
    assert jit_args[0].base.is_contiguous() and jit_args[0].strides == list(q.stride())
    assert torch.equal(jit_args[0].base, strided)
    assert [arg for arg in fake.entries()[0] if isinstance(arg, tuple)][0][1] != strided.data_ptr()

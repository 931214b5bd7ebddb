"""The kernel API's odd inputs: integers of other kinds, bools, ``maxnreg=0``, tensors with no data,
and outputs that share memory with an input the kernels still read.

Each test names the bug it catches. The overlap cases gave wrong numbers without an error before
they were refused (in the interpreter, fp32: ``out=k`` a max error of 0.86 against float64, ``out=v``
1.05, ``lse`` inside ``k`` 1.93; the backward's ``dq=k`` 1.04, ``dk=q`` 0.98, ``dv=dout`` 0.78).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton

import kernel
from kernel.triton.bwd_launch import bwd_plan_for
from kernel.triton.defaults import default_bwd_config
from kernel.triton.fwd import _with_defaults, plan_for

TILES = dict(block_m=16, block_n=16, num_warps=1, num_stages=1)


def _qkv(device, n_q=40, n_k=40, heads=2, dim=16):
    torch.manual_seed(3)
    return tuple(torch.randn(1, heads, n, dim, device=device) for n in (n_q, n_k, n_k))


def _nan_like(t):
    return torch.full_like(t, float("nan"))


# ------------------------------------------------------------------ integers of any kind, never bools


def test_numpy_integers_are_taken_as_python_ints(device):
    """Bug caught: ``block_m=np.int64(64)`` refused as "not a power of two", or passed on to the JIT as is."""
    q, k, v = _qkv(device)
    expected, _ = kernel.flash_attn_fwd(q, k, v, **TILES)
    odd = dict(block_m=np.int64(16), block_n=np.int32(16), num_warps=np.int64(1), num_stages=np.uint8(1),
               persistent=np.int64(2), maxnreg=np.int64(64))
    got, _ = kernel.flash_attn_fwd(q, k, v, **odd)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    config = (odd["block_m"], odd["block_n"], odd["num_warps"], odd["num_stages"], False, False, odd["maxnreg"],
              odd["persistent"])
    launch = plan_for(kernel.triton.fwd._flash_fwd_kernel, config, q, k, v).launch
    assert {type(launch[name]) for name in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "PERSISTENT",
                                            "maxnreg")} == {int}, launch


def test_numpy_integers_in_the_backward(device):
    q, k, v = _qkv(device)
    out, lse = kernel.flash_attn_fwd(q, k, v, **TILES)
    dout = torch.randn_like(q)
    expected = kernel.flash_attn_bwd(dout, q, k, v, out, lse, block_m=16, block_n=16)
    got = kernel.flash_attn_bwd(dout, q, k, v, out, lse, block_m=np.int64(16), block_n=np.int16(16),
                                num_warps=np.int64(1), num_stages_q=np.int32(1), persistent=np.int64(1))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("field", ["block_m", "block_n", "num_warps", "num_stages", "persistent", "maxnreg"])
@pytest.mark.parametrize("value", [True, np.True_], ids=["bool", "np.bool_"])
def test_a_bool_is_refused_naming_the_field(device, field, value):
    """Bug caught: ``num_warps=True`` taken as 1 (and ``persistent=True`` as one program per SM)."""
    q, k, v = _qkv(device)
    out = _nan_like(q)
    with pytest.raises(ValueError, match=rf"{field}=(np\.)?True_? must be an int \(.+\), not a bool"):
        kernel.flash_attn_fwd(q, k, v, **(TILES | {field: value}), out=out)
    assert out.isnan().all()                  # nothing ran


@pytest.mark.parametrize("field", ["block_m", "block_n_q", "num_warps", "num_warps_q", "num_stages", "persistent",
                                   "maxnreg"])
def test_a_bool_is_refused_by_the_backward(device, field):
    q, k, v = _qkv(device)
    out, lse = kernel.flash_attn_fwd(q, k, v, **TILES)
    with pytest.raises(ValueError, match=rf"{field}=True must be an int \(.+\), not a bool"):
        kernel.flash_attn_bwd(torch.randn_like(q), q, k, v, out, lse, **(dict(block_m=16, block_n=16) | {field: True}))


@pytest.mark.parametrize("value, kind", [(64.0, "float"), ("64", "str"), (16.5, "float")])
def test_a_non_integer_tile_says_must_be_an_int(device, value, kind):
    q, k, v = _qkv(device)
    with pytest.raises(ValueError, match=rf"block_n={value!r} must be an int \(a power of two >= 16\); got {kind}"):
        kernel.flash_attn_fwd(q, k, v, block_m=16, block_n=value, num_warps=1, num_stages=1)


# ------------------------------------------------------------------ maxnreg=0: no cap, as in study files


def test_maxnreg_zero_is_no_cap_in_the_forward(device):
    """Bug caught: ``maxnreg=0`` refused (study files use 0 for no cap), or passed on as a cap of 0."""
    q, k, v = _qkv(device)
    expected, _ = kernel.flash_attn_fwd(q, k, v, **TILES)
    got, _ = kernel.flash_attn_fwd(q, k, v, **TILES, maxnreg=0)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    plan = plan_for(kernel.triton.fwd._flash_fwd_kernel, (16, 16, 1, 1, False, False, 0, 0), q, k, v)
    assert "maxnreg" not in plan.launch


def test_maxnreg_zero_is_the_same_call_as_none(device):
    """Bug caught: a call with only ``maxnreg=0`` counted as "a knob given", so it lost the defaults'
    knobs (TMA on Hopper) and the Gluon route that a call naming nothing takes."""
    q, k, v = _qkv(device, dim=64)
    unset = (None, None, None, None, False, False, None, 0)
    zero = unset[:6] + (0, 0)
    assert plan_for(kernel.triton.fwd._flash_fwd_kernel, zero, q, k, v) is plan_for(
        kernel.triton.fwd._flash_fwd_kernel, unset, q, k, v)                 # one plan: one key
    assert _with_defaults(unset, q, k, v, False, 90)[4] is True          # the Hopper default takes TMA


def test_maxnreg_zero_is_no_cap_in_the_backward(device):
    q, k, v = _qkv(device)
    out, lse = kernel.flash_attn_fwd(q, k, v, **TILES)
    dout = torch.randn_like(q)
    expected = kernel.flash_attn_bwd(dout, q, k, v, out, lse, block_m=16, block_n=16)
    got = kernel.flash_attn_bwd(dout, q, k, v, out, lse, block_m=16, block_n=16, maxnreg=0)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    config = default_bwd_config(16, False, 0).__class__(**{**default_bwd_config(16, False, 0).__dict__,
                                                           "maxnreg": 0})
    plan = bwd_plan_for(config, dout, q, k, v, out, lse, False)
    assert plan.config.maxnreg is None
    assert all("maxnreg" not in unit.options for unit in plan.units), [unit.options for unit in plan.units]


@pytest.mark.parametrize("cap", [8, 100, 256, -8])
def test_a_bad_cap_names_the_allowed_values(device, cap):
    q, k, v = _qkv(device)
    with pytest.raises(ValueError, match=rf"maxnreg={cap} must be None or a multiple of 8 from 24 to 255 .*0 for no"):
        kernel.flash_attn_fwd(q, k, v, **TILES, maxnreg=cap)


# ------------------------------------------------------------------ devices the kernel cannot run on


def test_meta_tensors_are_refused_naming_the_device():
    """Bug caught: a NotImplementedError from inside torch ("Cannot copy out of meta tensor")."""
    meta = torch.empty(1, 2, 40, 16, device="meta")
    with pytest.raises(ValueError, match=r"q is on the 'meta' device; .*meta tensors hold no data"):
        kernel.flash_attn_fwd(meta, meta, meta)
    with pytest.raises(ValueError, match=r"q is on the 'meta' device"):
        kernel.flash_attn_fwd(meta, meta, meta, block_m=16, block_n=16)
    lse = torch.empty(1, 2, 40, device="meta")
    with pytest.raises(ValueError, match=r"q is on the 'meta' device"):
        kernel.flash_attn_bwd(meta, meta, meta, meta, meta, lse)


def test_one_meta_input_among_real_ones_is_named(device):
    q, k, _ = _qkv(device)
    with pytest.raises(ValueError, match=r"v is on the 'meta' device"):
        kernel.flash_attn_fwd(q, k, torch.empty_like(k, device="meta"), **TILES)


# ------------------------------------------------------------------ outputs in an input's memory


def _unchanged(*tensors):
    copies = [t.clone() for t in tensors]
    return lambda: all(torch.equal(t, c) for t, c in zip(tensors, copies))


@pytest.mark.parametrize("alias", ["k", "v"])
def test_out_in_k_or_v_is_refused_and_nothing_is_written(device, alias):
    """Bug caught: ``out=k`` returns wrong numbers (0.86 off in fp32) and overwrites k, with nothing raised."""
    q, k, v = _qkv(device)
    inputs = dict(q=q, k=k, v=v)
    intact = _unchanged(q, k, v)
    with pytest.raises(ValueError, match=rf"out overlaps {alias}'s memory .* give out memory of its own"):
        kernel.flash_attn_fwd(q, k, v, **TILES, out=inputs[alias])
    assert intact()


def test_lse_inside_an_input_or_out_is_refused(device):
    q, k, v = _qkv(device)
    intact = _unchanged(q, k, v)
    with pytest.raises(ValueError, match=r"lse overlaps k's memory"):
        kernel.flash_attn_fwd(q, k, v, **TILES, lse=k.view(-1)[:80].view(1, 2, 40))
    out = _nan_like(q)
    with pytest.raises(ValueError, match=r"lse overlaps out's memory"):
        kernel.flash_attn_fwd(q, k, v, **TILES, out=out, lse=out.view(-1)[-80:].view(1, 2, 40))
    assert intact()


def test_out_shifted_over_q_is_refused(device):
    """``out`` a row below ``q`` in one buffer: a tile's store clobbers rows the next tile has yet to read."""
    buffer = torch.randn(1, 2, 41, 16, device=device)
    q, out = buffer[:, :, :40], buffer[:, :, 1:]
    _, k, v = _qkv(device)
    intact = _unchanged(buffer)
    with pytest.raises(ValueError, match=r"out overlaps q's memory"):
        kernel.flash_attn_fwd(q, k, v, **TILES, out=out)
    assert intact()


def test_an_out_whose_elements_share_memory_is_refused(device):
    q, k, v = _qkv(device)
    out = torch.empty(1, 1, 40, 16, device=device).expand(1, 2, 40, 16)     # both heads in one buffer
    with pytest.raises(ValueError, match=r"out has elements that share memory .*strides \(640, 0, 16, 1\)"):
        kernel.flash_attn_fwd(q, k, v, **TILES, out=out)


def test_a_cached_plan_still_checks_the_pointers(device):
    """Bug caught: the check made once per layout, so a later call with ``out=k`` reuses the plan unchecked."""
    q, k, v = _qkv(device)
    kernel.flash_attn_fwd(q, k, v, **TILES, out=torch.empty_like(q))      # the plan for this layout
    intact = _unchanged(k)
    with pytest.raises(ValueError, match=r"out overlaps k's memory"):
        kernel.flash_attn_fwd(q, k, v, **TILES, out=k)
    assert intact()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("persistent", [0, 1, 2])
@pytest.mark.parametrize("tma", [False, True])
def test_out_equal_to_q_is_right_in_every_tile_order(device, causal, persistent, tma):
    """``out=q`` under a fixed config: each program reads its query rows before it stores the same rows,
    and no other program touches them, in any tile order (causal reverses it; persistent programs walk
    several tiles; on a GPU, compiled with TMA loads of K and V too). Bug caught: refusing it, or a
    kernel that rereads q after storing."""
    q, k, v = _qkv(device, n_q=45, n_k=37)
    config = TILES | dict(persistent=persistent, tma=tma)
    expected, expected_lse = kernel.flash_attn_fwd(q, k, v, causal, **config)
    in_place = q.clone()
    got, lse = kernel.flash_attn_fwd(in_place, k, v, causal, **config, out=in_place)
    assert got.data_ptr() == in_place.data_ptr()
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    torch.testing.assert_close(lse, expected_lse, rtol=0, atol=0)


def test_out_equal_to_q_is_refused_under_an_autotuner(device):
    """The autotuner runs the kernel once per config on the same arguments: the second run would read
    the first one's output as q."""
    from kernel.triton.autotune import AutotunedFlashAttention

    q, k, v = _qkv(device)
    tuned = AutotunedFlashAttention([triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=1, num_stages=1),
                                     triton.Config({"BLOCK_M": 32, "BLOCK_N": 16}, num_warps=1, num_stages=1)],
                                    ["N_Q"])
    intact = _unchanged(q)
    with pytest.raises(ValueError, match=r"out overlaps q's memory"):
        tuned(q, k, v, out=q)
    assert intact()


# ------------------------------------------------------------------ gradients in an input's memory


BWD_ALIASES = [("dq", "k"), ("dk", "q"), ("dv", "dout"), ("dk", "k"), ("dv", "v"), ("dq", "q"), ("dq", "out"),
               ("dk", "lse")]


@pytest.mark.parametrize("grad, alias", BWD_ALIASES, ids=[f"{g}={a}" for g, a in BWD_ALIASES])
def test_a_gradient_in_an_input_is_refused_and_nothing_is_written(device, grad, alias):
    """Bug caught: ``dq=k``, ``dk=q``, ``dv=dout`` give wrong gradients (about 1.0 off) with nothing raised.
    ``dk=k``, ``dv=v``, ``dq=q`` happen to come out right with the passes run in order, and are refused
    too: with ``overlap=True`` the dQ pass writes dq while the dK/dV kernel still reads q."""
    q, k, v = _qkv(device)
    out, lse = kernel.flash_attn_fwd(q, k, v, **TILES)
    dout = torch.randn_like(q)
    inputs = dict(dout=dout, q=q, k=k, v=v, out=out, lse=lse)
    target = inputs[alias]
    if alias == "lse":                        # lse at the start of the buffer the gradient is given
        target = torch.empty(k.numel(), device=device)
        target[:lse.numel()] = lse.view(-1)
        lse = inputs["lse"] = target[:lse.numel()].view(lse.shape)
        target = target.view(k.shape)
    intact = _unchanged(*inputs.values())
    with pytest.raises(ValueError, match=rf"{grad} overlaps {alias}'s memory"):
        kernel.flash_attn_bwd(dout, q, k, v, out, lse, block_m=16, block_n=16, **{grad: target})
    assert intact()


def test_two_gradients_in_one_buffer_are_refused(device):
    q, k, v = _qkv(device)
    out, lse = kernel.flash_attn_fwd(q, k, v, **TILES)
    shared = torch.empty_like(q)
    with pytest.raises(ValueError, match=r"dk overlaps dq's memory .*the kernels write both"):
        kernel.flash_attn_bwd(torch.randn_like(q), q, k, v, out, lse, block_m=16, block_n=16, dq=shared, dk=shared)


def test_a_cached_backward_plan_still_checks_the_pointers(device):
    q, k, v = _qkv(device)
    out, lse = kernel.flash_attn_fwd(q, k, v, **TILES)
    dout = torch.randn_like(q)
    kernel.flash_attn_bwd(dout, q, k, v, out, lse, block_m=16, block_n=16, dq=torch.empty_like(q))
    intact = _unchanged(k)
    with pytest.raises(ValueError, match=r"dq overlaps k's memory"):
        kernel.flash_attn_bwd(dout, q, k, v, out, lse, block_m=16, block_n=16, dq=k)
    assert intact()


def test_separate_gradients_are_taken(device):
    """The check refuses only overlap: gradients of their own memory are written and right."""
    q, k, v = _qkv(device)
    out, lse = kernel.flash_attn_fwd(q, k, v, **TILES)
    dout = torch.randn_like(q)
    expected = kernel.flash_attn_bwd(dout, q, k, v, out, lse, block_m=16, block_n=16)
    given = tuple(_nan_like(t) for t in (q, k, v))
    got = kernel.flash_attn_bwd(dout, q, k, v, out, lse, block_m=16, block_n=16, dq=given[0], dk=given[1],
                                dv=given[2])
    for g, t, e in zip(got, given, expected):
        assert g.data_ptr() == t.data_ptr()
        torch.testing.assert_close(g, e, rtol=0, atol=0)

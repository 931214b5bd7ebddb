"""The backward where each tensor has its own layout, and where the dQ pass has its own tiles.

Every gradient is written into a NaN-filled tensor first, so a row the kernels never write
fails the check (``torch.empty`` may hand back zeros, which pass where a gradient is 0).
Each layout is one the kernels read through its own strides: a kernel that reads it with
another tensor's strides reads the wrong elements. fp32 in the interpreter, tiny shapes.
"""

from __future__ import annotations

import pytest
import torch

import kernel
from kernel.reference import causal_keep, grad_accuracy
from tuner.kernels.triton_bwd import KERNEL as BWD, TritonBwdConfig


def _randn(device, b, h, n, d, layout="bhnd"):
    """[B, H, N, D] random normals, stored as ``layout`` ("bnhd": strided over heads)."""
    if layout == "bnhd":
        return torch.randn(b, n, h, d, device=device).transpose(1, 2)
    return torch.randn(b, h, n, d, device=device)


def _relaid(t, layout):
    """``t``'s values in a tensor stored as ``layout``."""
    if layout == "bhnd":
        return t.contiguous()
    copy = torch.full((t.shape[0], t.shape[2], t.shape[1], t.shape[3]), float("nan"), device=t.device,
                      dtype=t.dtype).transpose(1, 2)
    copy.copy_(t)
    return copy


def _poisoned(*likes):
    return [torch.full(t.shape, float("nan"), device=t.device, dtype=t.dtype) for t in likes]


def _expected(q, k, v, dout, causal):
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    out, _ = kernel.attention_reference(q64, k64, v64, causal)
    reference = torch.autograd.grad(out, (q64, k64, v64), dout.double())
    q1, k1, v1 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    mask = causal_keep(q.shape[-2], k.shape[-2], q.device) if causal else None
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        mine = torch.nn.functional.scaled_dot_product_attention(q1, k1, v1, attn_mask=mask)
    return reference, torch.autograd.grad(mine, (q1, k1, v1), dout)


def _check(q, k, v, dout, causal, out_layout="bhnd", **config):
    """The gradients of a NaN-poisoned call against float64 autograd; returns them."""
    out, lse = kernel.flash_attn_fwd(q, k, v, causal)
    out = _relaid(out, out_layout)
    dq, dk, dv = _poisoned(q.contiguous(), k.contiguous(), v.contiguous())
    got = kernel.flash_attn_bwd(dout, q, k, v, out, lse, causal, dq=dq, dk=dk, dv=dv, **config)
    assert got[0] is dq and got[1] is dk and got[2] is dv        # written where the caller said
    reference, pytorchs = _expected(q, k, v, dout, causal)
    verdict = grad_accuracy(got, reference, pytorchs, q.dtype)
    assert verdict.ok, f"{config} {verdict.reason}"
    return got


@pytest.mark.parametrize("dq_mode", ["pass", "atomic"])
@pytest.mark.parametrize("dout_layout, out_layout", [("bnhd", "bhnd"), ("bhnd", "bnhd")])
def test_dout_and_out_in_layouts_of_their_own(device, dq_mode, dout_layout, out_layout):
    """delta = rowsum(dO * O) reads each with its own strides; the dQ pass and the dK/dV kernel
    read dO with its own (q's are contiguous, so a mix-up shows)."""
    torch.manual_seed(23)
    q, k, v = _randn(device, 1, 2, 37, 16), _randn(device, 1, 2, 29, 16), _randn(device, 1, 2, 29, 16)
    dout = _randn(device, 1, 2, 37, 16, dout_layout)
    _check(q, k, v, dout, True, out_layout, block_m=16, block_n=16, dq_mode=dq_mode)


@pytest.mark.parametrize("dq_mode", ["pass", "atomic"])
def test_q_k_and_v_each_in_a_layout_of_their_own(device, dq_mode):
    """q strided over heads, k contiguous, v strided over heads with another row count: every
    kernel takes each input's strides, never another's."""
    torch.manual_seed(29)
    q = _randn(device, 2, 2, 33, 16, "bnhd")
    k = _randn(device, 2, 2, 21, 16)
    v = _randn(device, 2, 2, 21, 16, "bnhd")
    _check(q, k, v, torch.randn(q.shape, device=device), False, block_m=16, block_n=16, dq_mode=dq_mode)


@pytest.mark.parametrize("tiles", [dict(block_m=32, block_n=32, block_m_q=16, block_n_q=16),
                                   dict(block_m=16, block_n=16, block_m_q=32, block_n_q=32),
                                   dict(block_m=16, block_n=32, block_m_q=32, block_n_q=16)],
                         ids=["dq-smaller", "dq-larger", "crossed"])
@pytest.mark.parametrize("causal", [False, True])
def test_dq_tiles_of_their_own_size_cover_every_row(device, tiles, causal):
    """The dQ pass's grid and loops use its own tiles: with smaller ones than the dK/dV kernel's,
    a grid of the dK/dV tiles leaves rows unwritten (NaN); with larger ones, loops stepping by the
    other tiles add keys twice or skip them. 70 queries and 45 keys: no tile divides them."""
    torch.manual_seed(31)
    q, k, v = _randn(device, 1, 2, 70, 16), _randn(device, 1, 2, 45, 16), _randn(device, 1, 2, 45, 16)
    _check(q, k, v, torch.randn_like(q), causal, **tiles)


def test_the_dq_pass_launches_its_own_tiles_and_warps():
    """What a config launches: the dK/dV kernel its tiles, warps and stages, the dQ pass its own."""
    config = kernel.BwdConfig(block_m=16, block_n=32, block_m_q=64, block_n_q=128, num_warps=2, num_stages=3,
                              num_warps_q=8, num_stages_q=1)
    units = {name: (constexprs, options) for name, _, constexprs, options in config.units()}
    assert list(units) == ["preprocess", "kv", "q"]
    assert (units["kv"][0]["BLOCK_M"], units["kv"][0]["BLOCK_N"]) == (16, 32)
    assert (units["kv"][1]["num_warps"], units["kv"][1]["num_stages"]) == (2, 3)
    assert (units["q"][0]["BLOCK_M"], units["q"][0]["BLOCK_N"]) == (64, 128)
    assert (units["q"][1]["num_warps"], units["q"][1]["num_stages"]) == (8, 1)
    assert units["preprocess"][0]["ZERO_DQ"] is False
    atomic = {name: c for name, _, c, _ in kernel.BwdConfig(dq_mode="atomic").units()}
    assert list(atomic) == ["preprocess", "kv", "dq_finish"] and atomic["preprocess"]["ZERO_DQ"] is True
    assert atomic["kv"]["DQ_MODE"] == 1


def test_a_call_naming_the_dk_dv_tiles_gives_the_dq_pass_the_same_unless_it_names_its_own(device, monkeypatch):
    import kernel.backward as bl

    seen = []
    monkeypatch.setattr(bl, "bwd_plan_for", lambda config, *a, **k: seen.append(config) or (lambda *a: None))
    q = torch.randn(1, 1, 16, 16, device=device)
    args = (q, q, q, q, q, q[..., 0].float())
    bl.flash_attn_bwd(*args, block_m=32, block_n=16, num_warps=2, num_stages=3)
    bl.flash_attn_bwd(*args, block_m=32, block_n=16, num_warps=2, num_stages=3, block_m_q=64, block_n_q=128,
                      num_warps_q=8, num_stages_q=1)
    first, second = seen
    assert (first.block_m_q, first.block_n_q, first.num_warps_q, first.num_stages_q) == (32, 16, 2, 3)
    assert (second.block_m_q, second.block_n_q, second.num_warps_q, second.num_stages_q) == (64, 128, 8, 1)
    assert (second.block_m, second.block_n, second.num_warps, second.num_stages) == (32, 16, 2, 3)


@pytest.mark.parametrize("n_q, n_k", [(20, 0), (0, 20)])
def test_an_empty_side_gives_zero_gradients_into_poisoned_outputs(device, n_q, n_k):
    """No key: dQ is 0; no query: dK and dV are 0; the kernels never run, so the launcher writes them."""
    q, k, v = _randn(device, 1, 2, n_q, 16), _randn(device, 1, 2, n_k, 16), _randn(device, 1, 2, n_k, 16)
    out, lse = kernel.flash_attn_fwd(q, k, v, False)
    dq, dk, dv = _poisoned(q, k, v)
    kernel.flash_attn_bwd(torch.randn_like(q), q, k, v, out, lse, False, dq=dq, dk=dk, dv=dv, block_m=16, block_n=16)
    for g in (dq, dk, dv):
        assert torch.equal(g, torch.zeros_like(g))


@pytest.mark.parametrize("key, edge", [("32x64_w4_s1_q16x16_w4_s1", (32, 64)), ("16x16_w4_s1_q64x32_w4_s1", (64, 32)),
                                       ("16x128_w4_s1_q128x16_w4_s1", (128, 128))])
def test_the_gate_edges_are_made_of_the_largest_tiles_of_either_pass(key, edge):
    """The gate's one-valid-row and one-valid-key shapes must be ragged for both passes' tiles."""
    from tuner.problem import Problem

    config = TritonBwdConfig.parse(key)
    tiles = BWD.edge_tiles(config)
    assert (tiles.block_m, tiles.block_n) == edge
    shapes = {g.name: g.problem for g in BWD.gate_shapes(Problem(1, 2, 256, 256, 16, "fp32", False), config)}
    assert shapes["one-key"].n_k == 2 * edge[1] + 1


@pytest.mark.parametrize("persistent", [1, 2])
@pytest.mark.parametrize("causal", [False, True])
def test_a_persistent_dk_dv_grid_visits_every_key_tile_of_every_head_once(device, persistent, causal):
    """A few programs walk (key tile, head) pairs: a wrong split of the pair index leaves some
    tiles unwritten (NaN) and others written twice."""
    torch.manual_seed(59)
    q, k, v = _randn(device, 2, 3, 41, 16), _randn(device, 2, 3, 75, 16), _randn(device, 2, 3, 75, 16)
    _check(q, k, v, torch.randn_like(q), causal, block_m=16, block_n=16, persistent=persistent)


def test_a_plan_is_never_reused_for_a_layout_it_was_not_made_for(device):
    """The same shapes with dout contiguous, then strided: the second call needs its own strides."""
    torch.manual_seed(61)
    q, k, v = _randn(device, 1, 2, 35, 16), _randn(device, 1, 2, 27, 16), _randn(device, 1, 2, 27, 16)
    dout = torch.randn_like(q)
    for layout in ("bhnd", "bnhd", "bhnd"):
        _check(q, k, v, _relaid(dout, layout), False, block_m=16, block_n=16, dq_mode="atomic")


def test_the_gates_strided_case_gives_v_and_dout_layouts_unlike_k_and_out():
    """The tuner's gate shape "short-keys" reads V and dO from [B, N, H, D] storage."""
    from tuner.gate import GateShape
    from tuner.problem import Problem

    case = BWD.make_case(GateShape("short-keys", Problem(1, 2, 24, 8, 16, "fp32", False), strided_v=True), "cpu")
    t = case.tensors
    assert t["v"].stride() != t["k"].stride() and t["dout"].stride() != t["out"].stride()
    assert t["dout"].stride(2) == 2 * 16 and t["v"].stride(2) == 2 * 16
    assert all(t[name].is_contiguous() for name in ("dq", "dk", "dv"))
    plain = BWD.make_case(Problem(1, 2, 24, 8, 16, "fp32", False), "cpu").tensors
    assert plain["dout"].is_contiguous() and plain["v"].is_contiguous()


@pytest.mark.parametrize("dq_mode", ["pass", "atomic"])
def test_every_scratch_buffer_the_launcher_allocates_may_start_as_nan(device, monkeypatch, dq_mode):
    """delta and the fp32 dQ accumulator come from ``torch.empty``, which may hand back zeros; here
    every one it makes is NaN, so an accumulator added into without being zeroed first shows."""
    torch.manual_seed(67)
    q, k, v = _randn(device, 1, 2, 37, 16), _randn(device, 1, 2, 29, 16), _randn(device, 1, 2, 29, 16)
    dout = torch.randn_like(q)
    out, lse = kernel.flash_attn_fwd(q, k, v, True)
    real_empty = torch.empty

    def nan_empty(*args, **kwargs):
        made = real_empty(*args, **kwargs)
        return made.fill_(float("nan")) if made.is_floating_point() else made

    monkeypatch.setattr(torch, "empty", nan_empty)
    got = kernel.flash_attn_bwd(dout, q, k, v, out, lse, True, block_m=16, block_n=16, dq_mode=dq_mode)
    monkeypatch.undo()
    reference, pytorchs = _expected(q, k, v, dout, True)
    verdict = grad_accuracy(got, reference, pytorchs, q.dtype)
    assert verdict.ok, verdict.reason


def test_a_dq_mode_field_turns_off_a_default_overlap_it_cannot_have(device, monkeypatch):
    """Hopper's D=128 causal default overlaps its dQ pass; a call naming dq_mode "atomic" or "tma" has no
    dQ pass to overlap, so the default's overlap goes (naming overlap=True with them is still an error)."""
    import kernel.backward as bl
    from kernel.triton.defaults import HOPPER_BWD

    seen = []
    monkeypatch.setattr(bl, "default_bwd_config", lambda *a: HOPPER_BWD[(128, True)])
    monkeypatch.setattr(bl, "bwd_plan_for", lambda config, *a, **k: seen.append(config) or (lambda *a: None))
    q = torch.randn(1, 1, 16, 16, device=device)
    args = (q, q, q, q, q, q[..., 0].float())
    for mode in ("atomic", "tma", "pass"):
        bl.flash_attn_bwd(*args, True, dq_mode=mode)
    assert [(c.dq_mode, c.overlap) for c in seen] == [("atomic", False), ("tma", False), ("pass", True)]

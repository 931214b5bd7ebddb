"""The kernel's knobs (TMA descriptors, warp specialization, register cap, persistent grid)
against the float32/float64 reference, on the shapes that break tiling: ragged, non-square,
causal, one valid key in the last tile, every head dim.

Without CUDA these run in Triton's interpreter, which executes the TMA descriptor path
(zero-filled out-of-bounds rows) and the persistent loop; warp specialization and the
register cap are compiler options there, so their effect is tested on the GPU.
"""

import pytest
import torch

import kernel

FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
GPU_ONLY = pytest.mark.gpu

KNOBS = {
    "tma": dict(tma=True),
    "p1": dict(persistent=1),
    "p3": dict(persistent=3),
    "tma-p2": dict(tma=True, persistent=2),
    "tma-ws": dict(tma=True, warp_specialize=True),
    "ws-r128-p1": dict(warp_specialize=True, maxnreg=128, persistent=1),
}
# (B, H, N_q, N_k, D): ragged both ways, non-square both ways, one valid key in the last
# key tile (N_k = 17 with BLOCK_N = 16), single rows.
SHAPES = [(2, 3, 77, 77, 64), (1, 2, 65, 130, 32), (1, 3, 130, 33, 64), (1, 1, 1, 1, 16), (1, 2, 40, 17, 32),
          (1, 2, 77, 1, 32)]


def _run(q, k, v, causal, **config):
    out = torch.full(q.shape, float("nan"), device=q.device, dtype=q.dtype)
    lse = torch.full(q.shape[:-1], float("nan"), device=q.device, dtype=torch.float32)
    return kernel.flash_attn_fwd(q, k, v, causal, out=out, lse=lse, **config)


@pytest.mark.parametrize("dtype", [FP32, FP16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("knobs", KNOBS.values(), ids=KNOBS.keys())
@pytest.mark.parametrize("B,H,Nq,Nk,D", SHAPES)
def test_knobs_on_ragged_nonsquare_causal_shapes(B, H, Nq, Nk, D, knobs, causal, dtype, device, fresh_inputs,
                                                 assert_matches_reference):
    q, k, v, seed = fresh_inputs((B, H, Nq, D), (B, H, Nk, D), dtype, device)
    out, lse = _run(q, k, v, causal, block_m=32, block_n=16, num_warps=4, num_stages=2, **knobs)
    assert_matches_reference(out, lse, q, k, v, causal, seed, label=f"knobs {knobs}")


@pytest.mark.parametrize("D", kernel.HEAD_DIMS)
def test_tma_and_persistent_at_every_head_dim(D, device, fresh_inputs, assert_matches_reference):
    q, k, v, seed = fresh_inputs((2, 2, 50, D), (2, 2, 45, D), FP16, device)
    for causal in (False, True):
        out, lse = _run(q, k, v, causal, block_m=16, block_n=16, num_warps=1, num_stages=1, tma=True, persistent=1)
        assert_matches_reference(out, lse, q, k, v, causal, seed, label=f"D={D}")


def test_tma_reads_each_head_alone(device, fresh_inputs, assert_matches_reference):
    """A descriptor over a [B*H*N, D] view would read the next head's rows into a ragged last
    tile; with inf there, a wrong bound gives NaN instead of a small error."""
    q, k, v, seed = fresh_inputs((1, 3, 20, 32), (1, 3, 40, 32), FP32, device)
    storage_k = torch.full((1, 3, 48, 32), float("inf"), device=device)
    storage_v = torch.full((1, 3, 48, 32), float("inf"), device=device)
    storage_k[:, :, :40], storage_v[:, :, :40] = k, v
    k_view, v_view = storage_k[:, :, :40], storage_v[:, :, :40]       # head stride 48 rows, 40 valid
    out, lse = _run(q, k_view, v_view, False, block_m=16, block_n=32, tma=True)
    assert_matches_reference(out, lse, q, k, v, False, seed)


def test_a_layout_tma_cannot_read_is_refused_naming_the_fix(device):
    q = torch.randn(1, 1, 8, 24, device=device)[..., :16]          # rows of 24 fp32: 96 B, fine
    k = torch.randn(1, 1, 8, 18, device=device)[..., :16]          # rows of 18 fp32: 72 B, not a multiple of 16
    with pytest.raises(ValueError, match=r"tma=True needs k's start.*use tma=False"):
        kernel.flash_attn_fwd(q, k, k, block_m=16, block_n=16, tma=True)
    out, _ = kernel.flash_attn_fwd(q, k, k, block_m=16, block_n=16)    # the pointer path reads it
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("knob, value, message", [
    ("tma", 1, "tma must be True or False"),
    ("warp_specialize", "yes", "warp_specialize must be True or False"),
    ("maxnreg", 100, "maxnreg=100 must be None or a multiple of 8"),
    ("maxnreg", 256, "maxnreg=256"),
    ("persistent", -1, "persistent=-1 must be 0"),
    ("persistent", True, "persistent=True"),
])
def test_bad_knob_values_name_the_value(knob, value, message, device):
    q = torch.randn(1, 1, 8, 16, device=device)
    with pytest.raises((TypeError, ValueError), match=message):
        kernel.flash_attn_fwd(q, q, q, block_m=16, block_n=16, **{knob: value})


def test_knobs_are_part_of_the_plan(device):
    """A call with a knob must never reuse the plain config's plan (and its binary)."""
    from kernel.triton.launch import PLANS

    q = torch.randn(1, 2, 40, 16, device=device)
    kernel.flash_attn_fwd(q, q, q, block_m=16, block_n=16)
    before = len(PLANS)
    kernel.flash_attn_fwd(q, q, q, block_m=16, block_n=16, persistent=1)
    kernel.flash_attn_fwd(q, q, q, block_m=16, block_n=16, tma=True)
    assert len(PLANS) == before + 2


# ------------------------------------------------------------------------------- GPU only

GPU_KNOBS = {"tma": dict(tma=True), "ws": dict(warp_specialize=True), "tma-ws": dict(tma=True, warp_specialize=True),
             "p1": dict(persistent=1), "tma-ws-p1": dict(tma=True, warp_specialize=True, persistent=1),
             "r168": dict(maxnreg=168), "ws-r128-p2": dict(warp_specialize=True, maxnreg=128, persistent=2)}


@GPU_ONLY
@pytest.mark.parametrize("knobs", GPU_KNOBS.values(), ids=GPU_KNOBS.keys())
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tile", [(64, 64, 4, 3), (128, 128, 8, 2)], ids=lambda t: "x".join(map(str, t)))
def test_knobs_bf16_gpu(tile, causal, knobs, device, fresh_inputs, assert_matches_reference):
    bm, bn, warps, stages = tile
    if knobs.get("warp_specialize") and warps < 8:
        pytest.skip("the budget refuses warp specialization below 8 warps (Triton's pass fails there)")
    for B, H, Nq, Nk, D in [(2, 3, 1000, 777, 64), (1, 4, 777, 1025, 128)]:
        q, k, v, seed = fresh_inputs((B, H, Nq, D), (B, H, Nk, D), BF16, device)
        for _ in range(2):          # the JIT's launch, then the plan's direct one
            out, lse = _run(q, k, v, causal, block_m=bm, block_n=bn, num_warps=warps, num_stages=stages, **knobs)
            assert_matches_reference(out, lse, q, k, v, causal, seed, label=f"{tile} {knobs} {(B, H, Nq, Nk, D)}")


def test_default_config_takes_the_hopper_winners_with_knobs_and_keeps_ada_plain():
    assert kernel.default_config(128, False, capability=90)["tma"] is True
    assert kernel.default_config(64, True, capability=90)["tma"] is True
    assert kernel.default_config(128, True, capability=90)["persistent"] == 2
    for d in (64, 128):
        for causal in (False, True):
            ada = kernel.default_config(d, causal, capability=89)
            assert set(ada) == {"block_m", "block_n", "num_warps", "num_stages"}


def test_a_default_call_drops_tma_where_the_layout_cannot_take_it(device, fresh_inputs, monkeypatch,
                                                                   assert_matches_reference):
    """A call that names no config must never fail on a layout only TMA refuses: the default's
    TMA is dropped there (an explicit tma=True is refused, see above)."""
    import kernel.triton.fwd as ff
    from kernel.triton.launch import PLANS

    monkeypatch.setattr(ff, "default_config", lambda head_dim, causal, capability=None: dict(
        block_m=16, block_n=16, num_warps=4, num_stages=2, tma=True, persistent=1))
    PLANS.clear()
    q, k, v, seed = fresh_inputs((1, 2, 30, 18), (1, 2, 30, 18), FP32, device)
    q, k, v = (t[..., :16] for t in (q, k, v))                          # rows of 72 B
    out, lse = _run(q, k, v, True)
    assert_matches_reference(out, lse, q, k, v, True, seed)
    plan = next(iter(PLANS.values()))
    assert plan.launch["TMA"] is False and plan.launch["PERSISTENT"] == 1
    PLANS.clear()


@GPU_ONLY
@pytest.mark.parametrize("D", kernel.HEAD_DIMS)
def test_tma_and_persistent_at_every_head_dim_bf16_gpu(D, device, fresh_inputs, assert_matches_reference):
    tile = dict(block_m=64, block_n=32, num_warps=4, num_stages=2) if D == 256 else \
        dict(block_m=128, block_n=64, num_warps=8, num_stages=3)
    q, k, v, seed = fresh_inputs((2, 3, 1000, D), (2, 3, 777, D), BF16, device)
    for causal in (False, True):
        for knobs in (dict(tma=True), dict(tma=True, persistent=2), dict(persistent=1)):
            out, lse = _run(q, k, v, causal, **tile, **knobs)
            assert_matches_reference(out, lse, q, k, v, causal, seed, label=f"D={D} {knobs}")

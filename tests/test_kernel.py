"""The Triton FA2 forward against a float32 reference.

On a machine without CUDA these run in Triton's interpreter (fp32 and fp16); bf16 and
the large shapes are marked ``gpu`` (the interpreter's bf16 dot multiplies raw bits).
"""

import pytest
import torch

import kernel
from helpers import assert_matches_reference, fresh_inputs, nan_outputs, rel_err

FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
GPU_ONLY = pytest.mark.gpu

# The article's test file: (batch, n_queries, n_keys, head_dim), [B, N, D] inputs,
# deliberately not multiples of 16 and not square.
ARTICLE_SHAPES = [(4, 128, 128, 64), (2, 1024, 1024, 64), (2, 100, 100, 64), (1, 37, 53, 32), (1, 200, 96, 128)]


def _run(q, k, v, causal, **config):
    out, lse = nan_outputs(q)
    return kernel.flash_attn_fwd(q, k, v, causal, out=out, lse=lse, **config)


@pytest.mark.parametrize("dtype", [FP32, pytest.param(BF16, marks=GPU_ONLY)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B,Nq,Nk,D", ARTICLE_SHAPES)
def test_article_cases(B, Nq, Nk, D, causal, dtype, device):
    if causal and Nq != Nk:
        pytest.skip("the article keeps causal cases square (non-square causal is tested below)")
    q, k, v, seed = fresh_inputs((B, Nq, D), (B, Nk, D), dtype, device)
    out, lse = _run(q, k, v, causal)
    assert out.shape == q.shape and lse.shape == (B, Nq) and lse.dtype == FP32
    assert_matches_reference(out, lse, q, k, v, causal, seed)


# (B, H, N_q, N_k, D): ragged on both axes, non-square both ways, single rows.
MORE_SHAPES = [(1, 2, 77, 77, 64), (2, 1, 65, 130, 32), (1, 3, 130, 33, 64), (1, 1, 1, 1, 16),
               (1, 2, 1, 77, 32), (1, 2, 77, 1, 32), (1, 1, 17, 300, 16)]
# (block_m, block_n, num_warps, num_stages): the interpreter ignores the last two.
TILES = [(16, 16, 1, 1), (32, 64, 2, 2), (64, 32, 4, 3), (128, 64, 8, 3)]


@pytest.mark.parametrize("dtype", [FP32, FP16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tile", TILES, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("B,H,Nq,Nk,D", MORE_SHAPES)
def test_ragged_nonsquare_tiles(B, H, Nq, Nk, D, tile, causal, dtype, device):
    q, k, v, seed = fresh_inputs((B, H, Nq, D), (B, H, Nk, D), dtype, device)
    bm, bn, warps, stages = tile
    out, lse = _run(q, k, v, causal, block_m=bm, block_n=bn, num_warps=warps, num_stages=stages)
    assert_matches_reference(out, lse, q, k, v, causal, seed, label=f"tile {tile}")


@pytest.mark.parametrize("dtype", [FP32, FP16])
@pytest.mark.parametrize("D", kernel.HEAD_DIMS)
def test_every_head_dim(D, dtype, device):
    q, k, v, seed = fresh_inputs((1, 2, 70, D), (1, 2, 90, D), dtype, device)
    for causal in (False, True):
        out, lse = _run(q, k, v, causal, block_m=32, block_n=32, num_warps=4, num_stages=2)
        assert_matches_reference(out, lse, q, k, v, causal, seed, label=f"D={D} causal={causal}")


def test_strided_inputs(device):
    """A [B, N, H, D] tensor viewed as [B, H, N, D] has non-contiguous strides."""
    q, k, v, seed = fresh_inputs((2, 50, 3, 32), (2, 70, 3, 32), FP32, device)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    out, lse = _run(q, k, v, True, block_m=32, block_n=16)
    assert_matches_reference(out, lse, q, k, v, True, seed)


def test_no_keys_gives_zero_and_minus_inf(device):
    q, k, v, _ = fresh_inputs((1, 2, 40, 16), (1, 2, 0, 16), FP32, device)
    for causal in (False, True):
        out, lse = _run(q, k, v, causal, block_m=16, block_n=16)
        assert torch.equal(out, torch.zeros_like(out))
        assert torch.isneginf(lse).all()


def test_default_config_and_autograd(device):
    q, k, v, seed = fresh_inputs((1, 2, 100, 64), (1, 2, 100, 64), FP32, device)
    q.requires_grad_(True)
    out = kernel.flash_attention(q, k, v, True)
    ref, _ = kernel.attention_reference(q.detach(), k, v, True)
    assert rel_err(out.detach(), ref) < 2e-3
    with pytest.raises(NotImplementedError, match="no backward"):
        out.sum().backward()


def test_tiled_reference_matches_sdpa(device):
    for (Nq, Nk, causal, tq, tk) in [(100, 100, False, 16, 16), (100, 100, True, 16, 32),
                                     (37, 53, False, 16, 16), (53, 37, True, 32, 16), (1, 5, True, 16, 16)]:
        q, k, v, seed = fresh_inputs((2, 3, Nq, 32), (2, 3, Nk, 32), FP32, device)
        out, lse = kernel.flash_attn_tiled_reference(q, k, v, causal, tile_q=tq, tile_k=tk)
        ref_out, ref_lse = kernel.attention_reference(q, k, v, causal, dtype=torch.float64)
        assert rel_err(out, ref_out) < 1e-5, (Nq, Nk, causal, seed)
        assert rel_err(lse, ref_lse) < 1e-5, (Nq, Nk, causal, seed)


@pytest.mark.parametrize("bad, message", [
    (lambda q: (q[0], q, q), "same rank"),
    (lambda q: (q[0, 0], q[0, 0], q[0, 0]), "got 2 dims"),
    (lambda q: (q, q.half(), q), "share a dtype"),
    (lambda q: (q, q, q[:, :, :5]), "k and v must have the same shape"),
    (lambda q: (q, q[:1], q[:1]), "agree on batch"),
    (lambda q: (q[..., :48], q[..., :48], q[..., :48]), "head dim 48 is not supported"),
    (lambda q: (q.double(), q.double(), q.double()), "float64"),
    (lambda q: (q.tolist(), q, q), "must be a torch.Tensor"),
])
def test_bad_inputs_name_the_value(bad, message, device):
    q = torch.randn(2, 2, 8, 64, device=device)
    with pytest.raises((ValueError, TypeError), match=message):
        kernel.flash_attn_fwd(*bad(q))


@pytest.mark.parametrize("config, message", [
    (dict(block_m=24), "block_m=24"), (dict(block_n=8), "block_n=8"),
    (dict(num_warps=3), "num_warps=3"), (dict(num_stages=0), "num_stages=0"),
])
def test_bad_config_names_the_value(config, message, device):
    q = torch.randn(1, 1, 8, 16, device=device)
    with pytest.raises(ValueError, match=message):
        kernel.flash_attn_fwd(q, q, q, **config)


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q = torch.randn(1, 1, 8, 16)
    with pytest.raises(ValueError, match="needs CUDA tensors"):
        kernel.flash_attn_fwd(q, q, q)


# ------------------------------------------------------------------------------- GPU only

LARGE = [(4, 8, 4096, 4096, 64), (4, 8, 4096, 4096, 128), (2, 4, 8192, 8192, 64), (1, 8, 3000, 5000, 128)]


@GPU_ONLY
@pytest.mark.parametrize("dtype", [BF16, FP16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B,H,Nq,Nk,D", LARGE)
def test_large_shapes_gpu(B, H, Nq, Nk, D, causal, dtype, device):
    q, k, v, seed = fresh_inputs((B, H, Nq, D), (B, H, Nk, D), dtype, device)
    out, lse = _run(q, k, v, causal)
    assert_matches_reference(out, lse, q, k, v, causal, seed)


@GPU_ONLY
@pytest.mark.parametrize("tile", [(16, 16, 1, 1), (64, 64, 4, 3), (128, 128, 8, 2), (256, 64, 16, 2), (64, 256, 8, 1)],
                         ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("causal", [False, True])
def test_bf16_tiles_ragged_gpu(tile, causal, device):
    bm, bn, warps, stages = tile
    for D in (64, 128, 256):
        if D == 256 and bm * bn > 128 * 64:
            continue
        q, k, v, seed = fresh_inputs((2, 3, 1000, D), (2, 3, 777, D), BF16, device)
        out, lse = _run(q, k, v, causal, block_m=bm, block_n=bn, num_warps=warps, num_stages=stages)
        assert_matches_reference(out, lse, q, k, v, causal, seed, label=f"tile {tile} D={D}")

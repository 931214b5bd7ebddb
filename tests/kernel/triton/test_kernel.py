"""The Triton FA2 forward against a float32/float64 reference, its input checks and launch plans.

On a machine without CUDA these run in Triton's interpreter (fp32 and fp16); bf16 and
the large shapes are marked ``gpu`` (the interpreter's bf16 dot multiplies raw bits).
"""

import pytest
import torch

import kernel
from kernel.reference import rel_err
from kernel.triton.fwd import JIT_KERNEL, plan_for
from kernel.triton.launch import PLANS

FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
GPU_ONLY = pytest.mark.gpu

# The article's test file: (batch, n_queries, n_keys, head_dim), [B, N, D] inputs,
# deliberately not multiples of 16 and not square.
ARTICLE_SHAPES = [(4, 128, 128, 64), (2, 1024, 1024, 64), (2, 100, 100, 64), (1, 37, 53, 32), (1, 200, 96, 128)]


def _run(q, k, v, causal, **config):
    """The kernel into NaN-filled outputs, so an element it does not write fails the check."""
    out = torch.full(q.shape, float("nan"), device=q.device, dtype=q.dtype)
    lse = torch.full(q.shape[:-1], float("nan"), device=q.device, dtype=torch.float32)
    return kernel.flash_attn_fwd(q, k, v, causal, out=out, lse=lse, **config)


@pytest.mark.parametrize("dtype", [FP32, pytest.param(BF16, marks=GPU_ONLY)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B,Nq,Nk,D", ARTICLE_SHAPES)
def test_article_cases(B, Nq, Nk, D, causal, dtype, device, fresh_inputs, assert_matches_reference):
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
def test_ragged_nonsquare_tiles(B, H, Nq, Nk, D, tile, causal, dtype, device, fresh_inputs,
                               assert_matches_reference):
    q, k, v, seed = fresh_inputs((B, H, Nq, D), (B, H, Nk, D), dtype, device)
    bm, bn, warps, stages = tile
    out, lse = _run(q, k, v, causal, block_m=bm, block_n=bn, num_warps=warps, num_stages=stages)
    assert_matches_reference(out, lse, q, k, v, causal, seed, label=f"tile {tile}")


@pytest.mark.parametrize("dtype", [FP32, FP16])
@pytest.mark.parametrize("D", kernel.HEAD_DIMS)
def test_every_head_dim(D, dtype, device, fresh_inputs, assert_matches_reference):
    q, k, v, seed = fresh_inputs((1, 2, 70, D), (1, 2, 90, D), dtype, device)
    for causal in (False, True):
        out, lse = _run(q, k, v, causal, block_m=32, block_n=32, num_warps=4, num_stages=2)
        assert_matches_reference(out, lse, q, k, v, causal, seed, label=f"D={D} causal={causal}")


def test_strided_inputs(device, fresh_inputs, assert_matches_reference):
    """A [B, N, H, D] tensor viewed as [B, H, N, D] has non-contiguous strides."""
    q, k, v, seed = fresh_inputs((2, 50, 3, 32), (2, 70, 3, 32), FP32, device)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    out, lse = _run(q, k, v, True, block_m=32, block_n=16)
    assert_matches_reference(out, lse, q, k, v, True, seed)


def test_no_keys_gives_zero_and_minus_inf(device, fresh_inputs):
    q, k, v, _ = fresh_inputs((1, 2, 40, 16), (1, 2, 0, 16), FP32, device)
    for causal in (False, True):
        out, lse = _run(q, k, v, causal, block_m=16, block_n=16)
        assert torch.equal(out, torch.zeros_like(out))
        assert torch.isneginf(lse).all()


def test_default_config_and_autograd(device, fresh_inputs):
    q, k, v, seed = fresh_inputs((1, 2, 100, 64), (1, 2, 100, 64), FP32, device)
    q.requires_grad_(True)
    out = kernel.flash_attention(q, k, v, True)
    ref, _ = kernel.attention_reference(q.detach(), k, v, True)
    assert rel_err(out.detach(), ref) < 2e-3
    out.sum().backward()                 # the backward's accuracy is tests/kernel/triton/test_backward.py's
    assert q.grad is not None and q.grad.shape == q.shape and torch.isfinite(q.grad).all()


def test_tiled_reference_matches_sdpa(device, fresh_inputs):
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
    (lambda q: (q, q.to(torch.float16), q.to(torch.float16)), "share a dtype"),
    (lambda q: (q[:, :, :, :32], q[:, :, :, :16], q[:, :, :, :16]), "share the head dim"),
])
def test_bad_inputs_name_the_value(bad, message, device):
    q = torch.randn(2, 2, 8, 64, device=device)
    with pytest.raises((ValueError, TypeError), match=message):
        kernel.flash_attn_fwd(*bad(q))


@pytest.mark.parametrize("config, message", [
    (dict(block_m=24), "block_m=24"), (dict(block_n=8), "block_n=8"),
    (dict(num_warps=3), "num_warps=3"), (dict(num_stages=0), "num_stages=0"),
    (dict(num_warps=64), "num_warps=64"), (dict(num_stages=True), "num_stages=True"),
    (dict(block_m=64.0), "block_m=64.0"),
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


def test_k_and_v_with_different_strides(device, fresh_inputs, assert_matches_reference):
    """V read from a [B, N, H, D] layout, K contiguous: a kernel that reads V with K's strides fails."""
    for causal in (False, True):
        q, k, _, seed = fresh_inputs((1, 3, 45, 32), (1, 3, 70, 32), torch.float32, device)
        v = torch.randn(1, 70, 3, 32, device=device).transpose(1, 2)
        assert k.stride() != v.stride()
        out, lse = _run(q, k, v, causal, block_m=16, block_n=32)
        assert_matches_reference(out, lse, q, k, v, causal, seed, label="strided v")


def test_last_key_tile_with_one_valid_key(device, fresh_inputs, assert_matches_reference):
    """N_k = 2 x BLOCK_N + 1 and N_q = 2 x BLOCK_M + 1: an off-by-one in either mask shows."""
    for causal in (False, True):
        q, k, v, seed = fresh_inputs((1, 2, 65, 16), (1, 2, 65, 16), torch.float32, device)
        out, lse = _run(q, k, v, causal, block_m=32, block_n=32)
        assert_matches_reference(out, lse, q, k, v, causal, seed, label="one valid key")


def test_nan_in_q_or_k_gives_nan_lse_never_minus_inf(device, fresh_inputs):
    """-inf means "no valid key"; a NaN input must not pose as that."""
    for poisoned in ("q", "k"):
        q, k, v, _ = fresh_inputs((1, 1, 20, 16), (1, 1, 20, 16), torch.float32, device)
        {"q": q, "k": k}[poisoned][0, 0, 3, 5] = float("nan")
        out, lse = _run(q, k, v, False, block_m=16, block_n=16)
        assert not torch.isneginf(lse).any(), poisoned
        assert torch.isnan(lse).any() and torch.isnan(out).any(), poisoned


@pytest.mark.skipif(not kernel.interpreting(), reason="checks the interpreter's refusal")
def test_bf16_under_the_interpreter_is_refused():
    q = torch.randn(1, 1, 16, 16, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="bfloat16 does not work under TRITON_INTERPRET=1"):
        kernel.flash_attn_fwd(q, q, q)


@pytest.mark.parametrize("causal", ["no", 1, None, torch.tensor(True)], ids=repr)
def test_causal_must_be_a_bool(causal, device):
    q = torch.randn(1, 1, 16, 16, device=device)
    with pytest.raises(TypeError, match="causal must be True or False"):
        kernel.flash_attn_fwd(q, q, q, causal)


def test_bad_outputs_name_the_value(device):
    q = torch.randn(1, 2, 16, 16, device=device)
    with pytest.raises(ValueError, match="out must be"):
        kernel.flash_attn_fwd(q, q, q, out=torch.empty(1, 2, 16, 32, device=device))
    with pytest.raises(ValueError, match="lse must be"):
        kernel.flash_attn_fwd(q, q, q, lse=torch.empty(1, 2, 16, device=device, dtype=torch.float16))
    with pytest.raises(ValueError, match="lse must be contiguous"):
        kernel.flash_attn_fwd(q, q, q, lse=torch.empty(1, 16, 2, device=device).transpose(1, 2))


# ---------------------------------------------------------------------------- launch plans


def _plan(q, k, v, causal=False, config=(32, 32, 4, 2), out=None, lse=None):
    return plan_for(JIT_KERNEL, config, q, k, v, causal, out, lse)


def test_a_repeated_call_reuses_its_plan_and_any_change_makes_another(device):
    q = torch.randn(1, 2, 40, 16, device=device)
    first = _plan(q, q, q)
    assert _plan(torch.randn_like(q), torch.randn_like(q), torch.randn_like(q)) is first   # same layout
    others = [
        _plan(q, q, q, causal=True),
        _plan(q, q, q, config=(16, 32, 4, 2)),
        _plan(q, q, q, config=(32, 32, 4, 3)),
        _plan(q.half(), q.half(), q.half()),
        _plan(q.transpose(2, 3).contiguous().transpose(2, 3), q, q),       # other strides
        _plan(q[:, :, 1:], q[:, :, 1:], q[:, :, 1:]),                       # other length and alignment
        _plan(q, q, q, out=torch.empty_like(q)),
    ]
    assert len({id(p) for p in others + [first]}) == len(others) + 1


def test_a_misaligned_view_gets_its_own_plan(device):
    """The JIT compiles 16-byte aligned pointers differently; a view 4 bytes in must not share."""
    base = torch.randn(2 * 40 * 16 + 1, device=device)
    aligned = base[:2 * 40 * 16].view(1, 2, 40, 16)
    shifted = base[1:].view(1, 2, 40, 16)
    assert aligned.stride() == shifted.stride() and shifted.data_ptr() % 16 != 0
    assert _plan(aligned, aligned, aligned) is not _plan(shifted, shifted, shifted)


def test_plans_give_right_answers_for_non_contiguous_inputs_call_after_call(device, fresh_inputs,
                                                                            assert_matches_reference):
    for _ in range(2):          # the second call runs from the cached plan
        q, k, v, seed = fresh_inputs((2, 50, 3, 32), (2, 70, 3, 32), torch.float32, device)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))                 # [B, H, N, D] views
        v_rows = v.transpose(2, 3).contiguous().transpose(2, 3)          # a non-unit last stride: copied
        out, lse = _run(q, k, v_rows, True, block_m=32, block_n=16)
        assert_matches_reference(out, lse, q, k, v, True, seed, label="plan")


def test_a_hit_skips_no_check_that_a_changed_input_needs(device):
    """A call that differs from a planned one in any checked property is checked again."""
    q = torch.randn(1, 2, 32, 16, device=device)
    kernel.flash_attn_fwd(q, q, q, block_m=16, block_n=16)
    with pytest.raises(TypeError, match="share a dtype"):
        kernel.flash_attn_fwd(q, q, q.half(), block_m=16, block_n=16)
    with pytest.raises(ValueError, match="k and v must have the same shape"):
        kernel.flash_attn_fwd(q, q, q[:, :, :8], block_m=16, block_n=16)
    assert len(PLANS) >= 1


def test_three_d_inputs_use_one_head(device, fresh_inputs, assert_matches_reference):
    q, k, v, seed = fresh_inputs((3, 33, 16), (3, 47, 16), torch.float32, device)
    for _ in range(2):
        out, lse = _run(q, k, v, True, block_m=16, block_n=16)
        assert out.shape == q.shape and lse.shape == (3, 33)
        assert_matches_reference(out, lse, q, k, v, True, seed, label="3-D")


# (config, the grid on a CPU plan (4 "SMs", 2 query tiles x 6 heads), the knob constexprs)
LAUNCH_CASES = [((32, 16, 4, 2), (2, 6), (False, False, 0)),
                ((32, 16, 4, 2, True, True, 128, 2), (8, 1), (True, True, 2)),
                ((32, 16, 4, 2, False, False, None, 1), (4, 1), (False, False, 1))]


@pytest.mark.parametrize("config, grid, knobs", LAUNCH_CASES, ids=["plain", "tma-ws-r128-p2", "p1"])
@pytest.mark.parametrize("direct", [True, False])
def test_a_planned_call_passes_the_launcher_what_the_jit_passes(direct, config, grid, knobs, device, monkeypatch):
    """The direct path as Triton's own launch would make it: grid, stream, function, (the C entry
    point's cooperative and PDL flags and scratch buffers), packed metadata, no launch metadata or
    hooks, then every kernel argument with the constexprs. CI has no GPU, so a fake launcher records."""
    import kernel.triton.launch as ff

    calls = []

    class RecordingLauncher:
        launch_cooperative_grid, launch_pdl, global_scratch_size, profile_scratch_size = 0, 1, 0, 0

        def __call__(self, *args):
            calls.append(("wrapper", args))

        def launch(self, *args):
            calls.append(("entry", args))

    class Compiled:
        function, packed_metadata, run = "FUNCTION", "PACKED", RecordingLauncher()

    monkeypatch.setattr(ff, "_DIRECT_LAUNCH", direct)
    monkeypatch.setattr(ff, "_current_device", lambda: None if device == "cpu" else 0)
    monkeypatch.setattr(ff, "_current_stream", lambda index: "STREAM")
    q = torch.randn(2, 3, 40, 16, device=device)
    out, lse = torch.empty_like(q), torch.empty(q.shape[:-1], device=device)
    monkeypatch.setattr(ff, "sm_count", lambda device: 4)
    plan = _plan(q, q, q, True, config, out, lse)
    args = [value for _, value in kernel.kernel_arguments((q, q, q, out, lse), plan.shape, True)]
    plan._adopt(Compiled(), args)
    plan(q, q, q, out, lse)
    flags = (0, 1, None, None) if direct else ()
    head = (*grid, 1, "STREAM", "FUNCTION", *flags, "PACKED", None, None, None)
    assert calls[0][0] == ("entry" if direct else "wrapper")
    assert calls[0][1][:len(head)] == head
    # the knob constexprs in signature order: the ones the case sets, then the defaults of any others
    constexprs = (*knobs, *(default for _, default in kernel.triton.fwd.KNOB_CONSTEXPRS[len(knobs):]))
    assert calls[0][1][len(head):] == (*args, 16, 32, 16, True, *constexprs)


# ------------------------------------------------------------------------------- GPU only

LARGE = [(4, 8, 4096, 4096, 64), (4, 8, 4096, 4096, 128), (2, 4, 8192, 8192, 64), (1, 8, 3000, 5000, 128)]


@GPU_ONLY
@pytest.mark.parametrize("dtype", [BF16, FP16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B,H,Nq,Nk,D", LARGE)
def test_large_shapes_gpu(B, H, Nq, Nk, D, causal, dtype, device, fresh_inputs, assert_matches_reference):
    q, k, v, seed = fresh_inputs((B, H, Nq, D), (B, H, Nk, D), dtype, device)
    out, lse = _run(q, k, v, causal)
    assert_matches_reference(out, lse, q, k, v, causal, seed)


@GPU_ONLY
def test_the_compiled_launch_path_matches_the_jit_path(device, fresh_inputs, assert_matches_reference):
    """From the second call a plan launches the compiled kernel directly; both calls must agree."""
    q, k, v, seed = fresh_inputs((2, 4, 1000, 64), (2, 4, 777, 64), BF16, device)
    first, _ = _run(q, k, v, True, block_m=64, block_n=64, num_warps=4, num_stages=3)
    plan = _plan(q, k, v, True, (64, 64, 4, 3), out=torch.empty_like(q),
                 lse=torch.empty(q.shape[:-1], device=device))
    second, lse = _run(q, k, v, True, block_m=64, block_n=64, num_warps=4, num_stages=3)
    assert plan.compiled is not None and torch.equal(first, second)
    assert_matches_reference(second, lse, q, k, v, True, seed)


@GPU_ONLY
def test_the_autotuned_entry_point_launches_its_pick_directly(device, fresh_inputs, assert_matches_reference):
    from kernel.triton.autotune import flash_attn_fwd_autotuned as entry

    q, k, v, seed = fresh_inputs((2, 4, 1024, 64), (2, 4, 1024, 64), BF16, device)
    outs = [entry(q, k, v, False) for _ in range(3)]
    assert all(torch.equal(outs[0][0], o[0]) for o in outs[1:])
    assert_matches_reference(*outs[-1], q, k, v, False, seed)


@GPU_ONLY
@pytest.mark.parametrize("tile", [(16, 16, 1, 1), (64, 64, 4, 3), (128, 128, 8, 2), (256, 64, 16, 2), (64, 256, 8, 1)],
                         ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("causal", [False, True])
def test_bf16_tiles_ragged_gpu(tile, causal, device, fresh_inputs, assert_matches_reference):
    bm, bn, warps, stages = tile
    for D in (64, 128, 256):
        if D == 256 and bm * bn > 128 * 64:
            continue
        q, k, v, seed = fresh_inputs((2, 3, 1000, D), (2, 3, 777, D), BF16, device)
        out, lse = _run(q, k, v, causal, block_m=bm, block_n=bn, num_warps=warps, num_stages=stages)
        assert_matches_reference(out, lse, q, k, v, causal, seed, label=f"tile {tile} D={D}")


@pytest.mark.parametrize("n_q, n_k", [(1, 1), (1, 64), (64, 1)])
def test_the_hopper_defaults_drop_tma_at_a_length_of_one(n_q, n_k):
    """The JIT makes a length of 1 a constant, and the Hopper pipeliner then fails on TMA
    descriptors (seen on the H200): the default call takes plain loads there, TMA elsewhere."""
    from kernel.triton.fwd import KNOB_DEFAULTS, _with_defaults

    q, k = torch.zeros(1, 2, n_q, 64), torch.zeros(1, 2, n_k, 64)
    unset = (None, None, None, None) + KNOB_DEFAULTS[4:]
    chosen = _with_defaults(unset, q, k, k, False, capability=90)
    portable = kernel.default_config(64, False, capability=0)
    assert chosen[4] is False and chosen[:4] == tuple(portable[n] for n in ("block_m", "block_n", "num_warps",
                                                                             "num_stages"))
    assert _with_defaults(unset, torch.zeros(1, 2, 1, 128), torch.zeros(1, 2, 1, 128), k, True, 90)[:4] == tuple(
        kernel.default_config(128, True, capability=0)[n] for n in ("block_m", "block_n", "num_warps", "num_stages"))
    assert _with_defaults(unset, torch.zeros(1, 2, 17, 64), torch.zeros(1, 2, 16, 64), k, False, 90)[4] is True


def test_the_autotuned_entry_drops_tma_configs_at_a_length_of_one():
    import triton

    from kernel.triton.autotune import _without_tma_at_length_one

    configs = [triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "TMA": True}), triton.Config({"BLOCK_M": 64,
                                                                                          "BLOCK_N": 64})]
    assert _without_tma_at_length_one(configs, {"N_Q": 1, "N_K": 8}) == configs[1:]
    assert _without_tma_at_length_one(configs, {"N_Q": 8, "N_K": 8}) == configs
    assert _without_tma_at_length_one(configs[:1], {"N_Q": 8, "N_K": 1}) == configs[:1]


def _forward_is_right(q, k, v, causal, **config):
    from kernel.reference import accuracy

    out, lse = torch.full_like(q, float("nan")), torch.full(q.shape[:-1], float("nan"), device=q.device)
    kernel.flash_attn_fwd(q, k, v, causal, **config, out=out, lse=lse)
    verdict = accuracy(out, lse, q, k, v, causal)
    assert verdict.ok, f"N_q={q.shape[-2]} N_k={k.shape[-2]} causal={causal} {config}: {verdict.reason}"


SHORT_LENGTHS = [*range(1, 18), 63, 64, 65, 127, 128, 129]


@pytest.mark.gpu
@pytest.mark.parametrize("n", SHORT_LENGTHS)
def test_the_default_call_at_every_short_length_on_a_gpu(n):
    """Lengths of 1 become constants to the JIT (the Hopper pipeliner once failed there with TMA);
    lengths around the tiles exercise the ragged tiles. Every default (D 64 and 128, causal and not)."""
    torch.manual_seed(n)
    for head_dim in (64, 128):
        for causal in (False, True):
            q, k, v = (torch.randn(1, 2, m, head_dim, device="cuda", dtype=torch.bfloat16) for m in (n, n, n))
            _forward_is_right(q, k, v, causal)
            k2, v2 = (torch.randn(1, 2, n + 3, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            _forward_is_right(q, k2, v2, causal)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 17])
def test_every_emitted_config_at_a_length_of_one_and_a_ragged_one_on_a_gpu(n):
    """Each config of the shipped lists (kernel/configs_h200*.py) at N=1 (a constant to the JIT;
    its TMA configs are what the autotuned entry leaves out there) and N=17 (no divisibility)."""
    from kernel.triton import configs_h200, configs_h200_knobs
    from kernel.triton.autotune import _without_tma_at_length_one

    triton_configs = _without_tma_at_length_one(configs_h200.CONFIGS + configs_h200_knobs.CONFIGS,
                                                {"N_Q": n, "N_K": n})
    seen = set()
    for config in triton_configs:
        kw = config.kwargs
        call = dict(block_m=kw["BLOCK_M"], block_n=kw["BLOCK_N"], num_warps=config.num_warps,
                    num_stages=config.num_stages, tma=bool(kw.get("TMA", False)),
                    warp_specialize=bool(kw.get("WARP_SPEC", False)), persistent=int(kw.get("PERSISTENT", 0)),
                    maxnreg=config.maxnreg or None)
        if tuple(call.items()) in seen:
            continue
        seen.add(tuple(call.items()))
        for causal in (False, True):
            q, k, v = (torch.randn(1, 2, n, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            _forward_is_right(q, k, v, causal, **call)

"""The ws forward's last wave split over the keys (kernel/gluon/fwd/split.py): which launches split, and
the merge of the parts (a Triton kernel: under the interpreter on the CPU, against float64 math)."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import ROOT

from kernel.gluon.fwd.config import GluonConfig, default_gluon_config
from kernel.gluon.fwd.split import MAX_SPLITS, TailSplit, merge_parts, tail_split

D64 = default_gluon_config(64, False, "ws")          # 192-row tiles, in order, persistent


def test_b4_h8_n4096s_last_wave_becomes_three_parts_a_tile():
    """704 tiles on 132 programs: 660 whole (5 waves), 44 in 3 key ranges each (one more wave of
    thirds); 792 items, 6 a program."""
    split = tail_split(D64, False, 32, 4096, 4096, 132)
    assert split == TailSplit(tail=660, splits=3, tiles=704, tiles_m=22)
    assert split.parts == 132 and (split.tail + split.parts) == 6 * 132


@pytest.mark.parametrize("config, causal, batch_heads, n_q, n_k, programs", [
    (D64, True, 32, 4096, 4096, 132),                         # causal: heaviest tiles go first already
    (GluonConfig("ws", 128, 128, 2, overlap=True), False, 32, 4096, 4096, 132),   # the overlapped schedule
    (GluonConfig("ws", 192, 128, 2, overlap=False, pingpong=False, persistent=0, consumer_regs=152),
     False, 32, 4096, 4096, 704),                             # a program per tile: no last wave to split
    (GluonConfig("pipelined", 128, 128, 2, persistent=1), False, 32, 4096, 4096, 132),
    (D64, False, 35, 4096, 4096, 132),                        # 770 tiles: a rest of 110, over half a wave
    (D64, False, 132, 4096, 4096, 132),                       # whole waves
    (D64, False, 4, 4096, 4096, 132),                         # fewer tiles than programs
    (D64, False, 23, 1000, 777, 132),                         # 138 tiles: under two whole waves
    (D64, False, 32, 4096, 64, 132),                          # one key tile: nothing to share out
])
def test_launches_that_do_not_split(config, causal, batch_heads, n_q, n_k, programs):
    assert tail_split(config, causal, batch_heads, n_q, n_k, programs) is None


def test_parts_are_bounded_by_the_programs_the_key_tiles_and_max_splits():
    assert tail_split(D64, False, 45, 1000, 777, 132).splits == MAX_SPLITS     # 270 tiles, rest 6
    assert tail_split(D64, False, 45, 1000, 300, 132).splits == 3              # 3 key tiles of 128
    assert tail_split(D64, False, 8, 16384, 16384, 132) == TailSplit(660, 4, 688, 86)   # B1 H8 N16384: rest 28
    assert tail_split(D64, False, 30, 4096, 4096, 132) is None                # 660 tiles: 5 whole waves
    assert tail_split(D64, False, 33, 4096, 4096, 132).splits == 2            # 726: half a wave, in halves


def _partials(q, k, v, ranges, scale):
    """Each key range's out (normalised) and log2-sum-exp of scaled scores, in float64."""
    outs, lses = [], []
    for lo, hi in ranges:
        s = (q @ k[lo:hi].T) * scale * math.log2(math.e)
        m = s.max(dim=1).values
        p = torch.exp2(s - m[:, None])
        outs.append((p @ v[lo:hi]) / p.sum(1)[:, None])
        lses.append(m + torch.log2(p.sum(1)))
    return outs, lses


@pytest.mark.parametrize("layout", ["bhnd", "bnd"])
def test_the_merge_weighs_each_part_by_its_sum_and_writes_only_the_split_tiles(layout):
    """Two heads of 300 rows in 192-row tiles (tiles_m 2, 4 tiles); tiles 2 and 3, head 1's, split
    in 3 key ranges: head 1's rows equal whole-row attention (out and natural-log lse), head 0's
    (whole tiles: the kernel's to write) are untouched, and no row past N_q is read as data."""
    torch.manual_seed(0)
    heads, n_q, n_k, d, block_m = 2, 300, 200, 64, 192
    split = TailSplit(tail=2, splits=3, tiles=4, tiles_m=2)
    ranges = [(0, 64), (64, 128), (128, 200)]
    q = torch.randn(heads, n_q, d, dtype=torch.float64)
    k, v = torch.randn(heads, n_k, d, dtype=torch.float64), torch.randn(heads, n_k, d, dtype=torch.float64)
    ws_o = torch.full((split.parts * block_m * d,), float("nan"), dtype=torch.float32)
    ws_l = torch.full((split.parts * block_m,), float("nan"), dtype=torch.float32)
    for r, tile in enumerate(range(split.tail, split.tiles)):
        bh, tile_m = divmod(tile, split.tiles_m)
        rows = torch.arange(tile_m * block_m, min(tile_m * block_m + block_m, n_q))
        outs, lses = _partials(q[bh, rows], k[bh], v[bh], ranges, 1 / math.sqrt(d))
        for s_ in range(split.splits):
            base = (r * split.splits + s_) * block_m
            ws_o[base * d:(base + len(rows)) * d] = outs[s_].float().flatten()
            ws_l[base:base + len(rows)] = lses[s_].float()
    if layout == "bhnd":
        out = torch.full((1, heads, n_q, d), float("nan"), dtype=torch.float16)
        o4, merged = out, lambda: out[0]
    else:                                    # [B, N, D] (B = the heads here), seen as [B, 1, N, D]
        out = torch.full((heads, n_q, d), float("nan"), dtype=torch.float16)
        o4, merged = out.unsqueeze(1), lambda: out
    lse = torch.full((heads, n_q), float("nan"), dtype=torch.float32)
    merge_parts(split, ws_o, ws_l, o4, lse, block_m)
    scores = (q @ k.transpose(1, 2)) / math.sqrt(d)
    expected, expected_lse = torch.softmax(scores, -1) @ v, torch.logsumexp(scores, -1)
    assert torch.allclose(merged()[1].double(), expected[1], atol=2e-3, rtol=2e-3)
    assert torch.allclose(lse[1].double(), expected_lse[1], atol=1e-5, rtol=1e-5)
    assert torch.isnan(merged()[0]).all() and torch.isnan(lse[0]).all()


MERGE_COMPILE = r"""
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernel.gluon.fwd.split import MAX_SPLITS, MERGE_ROWS, _merge_kernel
from kernel.gluon.fwd.compile import resource_usage
from tuner.kernels import specialise

block_m, head_dim = int(sys.argv[1]), int(sys.argv[2])
arguments = [("WS_O", "*fp32"), ("WS_L", "*fp32"), ("OUT", "*bf16"), ("LSE", "*fp32"), ("TAIL", 660),
             ("SPLITS", 3), ("tiles_m", 22), ("H", 8), ("N_Q", 4096), ("so_b", 8 * 4096 * head_dim),
             ("so_h", 4096 * head_dim), ("so_n", head_dim)]
constexprs = [("BLOCK_M", block_m), ("ROWS", MERGE_ROWS), ("D", head_dim), ("MAX_S", MAX_SPLITS)]
kernel = triton.compile(ASTSource(_merge_kernel, *specialise(arguments, constexprs)),
                        target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
print(json.dumps(dict(resources=resource_usage(kernel.asm["cubin"]), ptx="st.global" in kernel.asm["ptx"])))
"""


@pytest.mark.parametrize("block_m, head_dim", [(192, 64), (128, 128)])
def test_the_merge_kernel_compiles_for_hopper(block_m, head_dim):
    """The interpreter runs what the compiler refuses (a plain-float global, for one): the merge
    is cross-compiled for sm_90 too, outside the interpreter, as the GPU's JIT would."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", MERGE_COMPILE, str(block_m), str(head_dim)], env=env,
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["ptx"], report
    assert not report["resources"].get("STACK"), f"the merge spills: {report}"

"""The ws forward's last wave split over the keys, and the merge of the parts.

Why: a persistent grid of P programs walks T query tiles; when T is not a multiple of P the
last wave has T % P tiles, and the other SMs idle while they run. On the H200 the D=64 default
(192-row tiles) has 704 tiles at B4 H8 N4096: 5.33 waves run in 6, and the kernel is 0.97x
SDPA-cuDNN there against 1.06x at shapes that fill whole waves (B33 H4 N4096, B11 H12 N4096;
docs/results/2026-12-01-h200-gluon.md). Here the T % P last tiles are each split into S ranges
of their key tiles, S = min(MAX_SPLITS, P // (T % P), key tiles), so the last wave holds up
to P items of 1/S of a tile: 44 tiles x 3 at B4 H8 N4096, 792 items in 6 waves of which the
last is a third as long.

Each part of a split tile leaves its rows' out (O / l, fp32) and log2-sum-exp in a workspace
(``kernel.gluon.fwd.kernel_ws.store_part``); :func:`merge_parts` then weighs the S parts of each
row by exp2(lse_s - max) into out and lse. Only non-causal, in-order (``overlap=False``),
persistent ws configs split (the overlapped schedule's first tile is special-cased, and causal
tiles are already ordered heaviest first).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernel.gluon.fwd.config import GluonConfig

__all__ = ["MAX_SPLITS", "MIN_WAVES", "TailSplit", "merge_parts", "tail_split"]

MAX_SPLITS = 4
# Launches of fewer whole waves keep their tiles whole: the split costs a merge launch and two
# workspaces (host µs a call that short may not hide), and buys at most a wave of several.
MIN_WAVES = 2
LN2 = tl.constexpr(0.6931471805599453)   # a constexpr: the compiled kernel reads it (a plain float
# passes the interpreter and fails the compiler)


@dataclass(frozen=True)
class TailSplit:
    """How a launch splits its last wave: tiles from ``tail`` on, each in ``splits`` parts;
    ``parts`` = the workspace's parts (``(tiles - tail) * splits``)."""

    tail: int
    splits: int
    tiles: int
    tiles_m: int

    @property
    def parts(self) -> int:
        return (self.tiles - self.tail) * self.splits

    def workspaces(self, block_m: int, head_dim: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """(WS_O [parts x block_m, D], WS_L [parts x block_m]) fp32, for one launch."""
        rows = self.parts * block_m
        return (torch.empty(rows * head_dim, device=device, dtype=torch.float32),
                torch.empty(rows, device=device, dtype=torch.float32))


def tail_split(config: GluonConfig, causal: bool, batch_heads: int, n_q: int, n_k: int,
               programs: int) -> TailSplit | None:
    """The split of a launch of ``programs`` programs, or None (nothing to split, or a config
    the split does not apply to: module docstring)."""
    if causal or not config.may_split:
        return None
    tiles_m = triton.cdiv(n_q, config.block_m)
    tiles = tiles_m * batch_heads
    rest = tiles % programs
    if tiles < MIN_WAVES * programs or rest == 0:
        return None
    splits = min(MAX_SPLITS, programs // rest, triton.cdiv(n_k, config.block_n))
    return TailSplit(tiles - rest, splits, tiles, tiles_m) if splits >= 2 else None


@triton.jit
def _merge_kernel(WS_O, WS_L, OUT, LSE, TAIL, SPLITS, tiles_m, H, N_Q, so_b, so_h, so_n,
                  BLOCK_M: tl.constexpr, ROWS: tl.constexpr, D: tl.constexpr, MAX_S: tl.constexpr):
    """Rows [ROWS * sub, ROWS * (sub + 1)) of split tile r (a program each): out and lse from the parts."""
    pid = tl.program_id(0)
    r = pid // (BLOCK_M // ROWS)
    rows = (pid % (BLOCK_M // ROWS)) * ROWS + tl.arange(0, ROWS)
    tile = TAIL + r
    tile_m = tile % tiles_m                         # kernel.gluon.schedule.query_tile_coords, non-causal
    bh = tile // tiles_m
    cols = tl.arange(0, D)
    m = tl.full([ROWS], float("-inf"), tl.float32)
    for s in tl.static_range(MAX_S):
        if s < SPLITS:         # a branch, not a load mask: Triton 3.9's interpreter refuses a scalar mask
            m = tl.maximum(m, tl.load(WS_L + (r * SPLITS + s) * BLOCK_M + rows))
    total = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, D], tl.float32)
    for s in tl.static_range(MAX_S):
        if s < SPLITS:
            base = (r * SPLITS + s) * BLOCK_M
            w = tl.exp2(tl.load(WS_L + base + rows) - m)
            acc += w[:, None] * tl.load(WS_O + (base + rows)[:, None] * D + cols[None, :])
            total += w
    offs_m = tile_m * BLOCK_M + rows
    keep = offs_m < N_Q
    batch = bh // H
    head = bh % H
    out_ptrs = OUT + batch.to(tl.int64) * so_b + head * so_h + offs_m[:, None].to(tl.int64) * so_n + cols[None, :]
    tl.store(out_ptrs, (acc / total[:, None]).to(OUT.dtype.element_ty), mask=keep[:, None])
    tl.store(LSE + bh.to(tl.int64) * N_Q + offs_m, (m + tl.log2(total)) * LN2, mask=keep)


MERGE_ROWS = 64


def merge_parts(split: TailSplit, ws_o, ws_l, o4: torch.Tensor, lse: torch.Tensor, block_m: int) -> None:
    """Out and lse of the split tiles from their parts (after the ws kernel, on the same stream).
    ``o4``: the [B, H, N, D] output view (unit last stride), ``lse``: [B*H, N_q] fp32."""
    _, heads, n_q, head_dim = o4.shape
    grid = ((split.tiles - split.tail) * (block_m // MERGE_ROWS),)
    _merge_kernel[grid](ws_o, ws_l, o4, lse, split.tail, split.splits, split.tiles_m, heads, n_q,
                        o4.stride(0), o4.stride(1), o4.stride(2), BLOCK_M=block_m, ROWS=MERGE_ROWS, D=head_dim,
                        MAX_S=MAX_SPLITS, num_warps=4)

"""The Gluon kernels' schedule, mirrored in PyTorch and checked against the reference.

``kernel/gluon/attention.py`` splits the work in ways a GPU run may not cover shape by shape:
persistent programs walking tiles (``kernel.gluon.schedule.query_tile_coords``, run here on
Python ints, in groups of heads), each consumer taking the whole tile's
key range (``key_tiles``), tile 0 always through the mask and later tiles masked from
``max(full, 1)``, and the overlapped step that adds P_{j-1} V_{j-1} before rescaling by tile
j's alpha. This file runs those steps line for line on the CPU, on ragged shapes, so a slip in
the arithmetic of the schedule fails here; the GPU tests check the kernels themselves.
"""

from __future__ import annotations

import math

import pytest
import torch

LOG2E = 1.4426950408889634


def _key_tile(t, j, block_n):
    """Key tile j of t [N, D], zero past N (as the copy engine fills it)."""
    tile = torch.zeros(block_n, t.shape[1])
    valid = max(0, min(block_n, t.shape[0] - j * block_n))
    tile[:valid] = t[j * block_n:j * block_n + valid]
    return tile


def _consumer_model(q, k, v, first, rows, full, total, causal, block_n):
    """One consumer's rows [first, first + rows) of one head, as ``attend_overlapped`` does them:
    tile 0 through the mask, later tiles masked from max(full, 1), P_{j-1} V_{j-1} added before
    the rescale by tile j's alpha, the last PV after the loop. Returns (out, lse) of the rows."""
    scale = LOG2E / math.sqrt(q.shape[1])
    offs = torch.arange(first, first + rows)
    q_rows = _key_tile(q, 0, first + rows)[first:]                     # rows past N_q are zeros
    m_i, l_i, acc = torch.full((rows,), -math.inf), torch.zeros(rows), torch.zeros(rows, q.shape[1])
    for j in range(total):
        keys = torch.arange(j * block_n, (j + 1) * block_n)
        s = q_rows @ _key_tile(k, j, block_n).T
        if j == 0 or j >= max(full, 1):
            keep = (keys[None, :] < k.shape[0]) & ((keys[None, :] <= offs[:, None]) if causal else True)
            s = torch.where(keep, s, -math.inf)
        m_new = torch.maximum(m_i, s.max(1).values * scale)
        p = torch.exp2(s * scale - m_new[:, None])
        alpha = torch.exp2(m_i - m_new)
        l_i = l_i * alpha + p.sum(1)
        if j > 0:
            acc = (acc + p_prev @ v_prev) * alpha[:, None]              # noqa: F821 (set on tile 0)
        m_i, p_prev, v_prev = m_new, p, _key_tile(v, j, block_n)
    acc = acc + p_prev @ v_prev
    return acc / l_i[:, None], (m_i + torch.log2(l_i)) * math.log(2)


def _schedule_model(q, k, v, causal, block_m, block_n, rows, programs, group=2):
    """The kernels' schedule in PyTorch: persistent programs walk the tiles as ``query_tile_coords``
    orders them (causal: in groups of ``group`` heads), each consumer of ``rows`` rows takes the whole
    tile's key range (``key_tiles``)."""
    from kernel.gluon.schedule import query_tile_coords

    coords = getattr(query_tile_coords, "fn", query_tile_coords)     # the device function's body, on ints
    bh_count, n_q, _ = q.shape
    n_k = k.shape[1]
    out, lse = torch.full_like(q, float("nan")), torch.full((bh_count, n_q), float("nan"))
    tiles_m = -(-n_q // block_m)
    seen = []
    for program in range(programs):
        for tile in range(program, tiles_m * bh_count, programs):
            tile_m, bh = coords(tile, tiles_m, bh_count, min(group, bh_count), causal)
            seen.append((tile_m, bh))
            start = tile_m * block_m
            key_stop = min(start + block_m, n_k) if causal else n_k
            full, total = (min(start + 1, n_k) if causal else n_k) // block_n, -(-key_stop // block_n)
            for first in range(start, start + block_m, rows):
                o_rows, lse_rows = _consumer_model(q[bh], k[bh], v[bh], first, rows, full, total, causal, block_n)
                stop = min(first + rows, n_q)           # rows past N_q are never stored
                if stop > first:
                    out[bh, first:stop], lse[bh, first:stop] = o_rows[:stop - first], lse_rows[:stop - first]
    assert sorted(seen) == sorted({(t, b) for t in range(tiles_m) for b in range(bh_count)}), "a tile twice or never"
    return out, lse


@pytest.mark.parametrize("n_q, n_k", [(1, 1), (17, 5), (129, 257), (300, 130), (65, 400)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_m, block_n, rows", [(128, 128, 128), (128, 64, 64), (64, 128, 64)])
def test_the_schedule_in_python_gives_the_reference(n_q, n_k, causal, block_m, block_n, rows, monkeypatch):
    from kernel.gluon import schedule
    from kernel.reference import attention_reference

    # query_tile_coords' body calls tile_coords: on ints, its body
    monkeypatch.setattr(schedule, "tile_coords", getattr(schedule.tile_coords, "fn", schedule.tile_coords))

    gen = torch.Generator().manual_seed(n_q * 1000 + n_k)
    q, k, v = (torch.randn(3, n, 16, generator=gen, dtype=torch.float64).float() for n in (n_q, n_k, n_k))
    out, lse = _schedule_model(q, k, v, causal, block_m, block_n, rows, programs=2)
    ref_out, ref_lse = attention_reference(q, k, v, causal, dtype=torch.float64)
    assert torch.allclose(out.double(), ref_out, atol=1e-5) and torch.allclose(lse.double(), ref_lse, atol=1e-5)

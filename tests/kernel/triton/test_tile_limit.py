"""A tile over Triton's largest tensor is refused at the call, naming the tiles (issue 43's battery, 2026-12-04:
block_m=2**40 reached the interpreter and failed there, 'Scalar ... is out of range for type int32')."""

from __future__ import annotations

import pytest
import torch

import kernel


@pytest.mark.parametrize("tiles", [dict(block_m=2 ** 40), dict(block_m=2 ** 12, block_n=2 ** 9)])
def test_a_tile_over_tritons_largest_tensor_is_refused_by_name(tiles):
    q, k, v = (torch.randn(1, 1, 16, 16) for _ in range(3))
    with pytest.raises(ValueError, match=r"block_m=\d+ x block_n=\d+ is over Triton's largest tensor"):
        kernel.flash_attn_fwd(q, k, v, **tiles)


def _backward_inputs(head_dim=16):
    q, k, v = (torch.randn(1, 1, 16, head_dim) for _ in range(3))
    out, lse = kernel.flash_attn_fwd(q, k, v)
    return torch.randn_like(out), q, k, v, out, lse


@pytest.mark.parametrize("tiles, named", [
    (dict(block_m=4096, block_n=4096), "block_m=4096 x block_n=4096"),            # the 2026-12-04 evening battery
    (dict(block_m=2 ** 12, block_n=2 ** 9), "block_m=4096 x block_n=512"),
    (dict(block_m_q=4096, block_n_q=4096), "block_m_q=4096 x block_n_q=4096"),    # the dQ pass's own tiles
    (dict(block_m=16, block_n=16, block_m_q=2 ** 17, block_n_q=16), "block_m_q=131072 x block_n_q=16"),
])
def test_a_backward_tile_over_tritons_largest_tensor_is_refused_by_name(tiles, named):
    """Bug caught: the backward had no tile limit; these failed inside Triton's interpreter (InterpreterError:
    'numel (16777216) exceeds triton maximum tensor numel')."""
    with pytest.raises(ValueError, match=rf"{named} is over Triton's largest tensor \(1048576 elements, the score "
                                         r"tile\); use tiles whose product is at most 1048576"):
        kernel.flash_attn_bwd(*_backward_inputs(), **tiles)


def test_a_tile_of_q_k_or_v_over_tritons_largest_tensor_is_refused_by_name():
    """Bug caught: a tile whose score block fits but whose [tile, head dim] block of q, k or v does not
    (2**16 x 16 at D=256) failed inside Triton's interpreter, forward and backward."""
    q, k, v = (torch.randn(1, 1, 16, 256) for _ in range(3))
    too_long = r"block_m=65536 x head dim 256 is over Triton's largest tensor .* use block_m <= 4096 at this head dim"
    with pytest.raises(ValueError, match=too_long):
        kernel.flash_attn_fwd(q, k, v, block_m=2 ** 16, block_n=16)
    with pytest.raises(ValueError, match=r"block_m_q=65536 x head dim 256 .* use block_m_q <= 4096"):
        kernel.flash_attn_bwd(*_backward_inputs(256), block_m=16, block_n=16, block_m_q=2 ** 16, block_n_q=16)

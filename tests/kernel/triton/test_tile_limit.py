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

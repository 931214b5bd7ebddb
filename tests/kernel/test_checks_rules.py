"""kernel.checks' rules, each at its edges: the register cap, TMA's 16-byte layout rule, a tensor's byte
extent (what the overlap check compares), and q and k agreeing on batch and heads."""

from __future__ import annotations

import pytest
import torch

from kernel import checks


@pytest.mark.parametrize("value, cap", [(None, None), (0, None), (24, 24), (128, 128), (248, 248)])
def test_a_register_cap_from_24_to_255_in_steps_of_8_is_taken(value, cap):
    assert checks.register_cap(value) == cap


@pytest.mark.parametrize("value", [16, 25, 256, -8, 8])
def test_a_register_cap_outside_that_is_refused_naming_the_range(value):
    with pytest.raises(ValueError, match="multiple of 8 from 24 to 255"):
        checks.register_cap(value)


def _rows_apart(row_elements: int, dtype=torch.float16):
    return torch.zeros(1, 2, 16, row_elements, dtype=dtype)[..., :64]


@pytest.mark.parametrize("tensor, fits", [
    (torch.zeros(1, 2, 16, 64, dtype=torch.float16), True),
    (_rows_apart(72), True),                                   # rows 144 bytes apart: a multiple of 16
    (_rows_apart(68), False),                                  # rows 136 bytes apart
    (torch.zeros(1, 3, 5, 64, dtype=torch.float16).transpose(1, 2)[:, :, :2], True),   # heads strided, 16-byte steps
    (torch.zeros(2 * 16 * 64 + 1, dtype=torch.float16)[1:].view(1, 2, 16, 64), False),  # its start off by 2 bytes
    (torch.zeros(1, 2, 16, 64, dtype=torch.float16).expand(3, 2, 16, 64), True),      # a batch stride of 0
])
def test_tma_reads_a_layout_whose_start_and_batch_head_and_row_strides_are_16_byte_multiples(tensor, fits):
    misfit = checks.tma_misfit((("k", tensor),), "tma=True", "use tma=False")
    assert (misfit is None) is fits, misfit
    if not fits:
        assert misfit.startswith("tma=True needs k's start") and misfit.endswith("use tma=False")


@pytest.mark.parametrize("tensor, extent", [
    (torch.zeros(2, 3, dtype=torch.float16), 12),
    (torch.zeros(3, 2, dtype=torch.float32).t(), 24),
    (torch.zeros(10)[::2], 36),                  # 5 elements 8 bytes apart: from the first to one past the last
    (torch.zeros(7)[3:4], 4),
    (torch.zeros(0, 4), 0),
])
def test_a_tensors_byte_extent_runs_from_its_first_byte_to_one_past_its_last(tensor, extent):
    assert checks.byte_extent(tensor) == extent


@pytest.mark.parametrize("k_shape", [(2, 2, 16, 64), (1, 3, 16, 64)])
def test_q_and_k_must_agree_on_batch_and_heads(k_shape):
    q, k = torch.zeros(1, 2, 16, 64), torch.zeros(k_shape)
    with pytest.raises(ValueError, match=r"q and k must agree on batch \(and heads\)"):
        checks.check_agreement(q, k, k, (64,))
    checks.check_agreement(q, torch.zeros(1, 2, 40, 64), torch.zeros(1, 2, 40, 64), (64,))   # lengths may differ

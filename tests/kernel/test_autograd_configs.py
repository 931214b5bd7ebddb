"""kernel.flash_attention's backward choices: an autotuned backward (any callable with flash_attn_bwd's
arguments) is taken and called with the saved tensors; anything else is refused at the call."""

from __future__ import annotations

import pytest
import torch

import kernel


def test_an_autotuned_backward_is_called_with_the_saved_tensors_and_its_gradients_are_returned():
    calls = []

    def tuned(dout, q, k, v, out, lse, causal):
        calls.append((dout.shape, q.shape, out.shape, lse.shape, causal))
        return tuple(torch.full_like(t, 2.0) for t in (q, k, v))

    q, k, v = (torch.randn(1, 2, 16, 16, requires_grad=True) for _ in range(3))
    kernel.flash_attention(q, k, v, causal=True, bwd_config=tuned).sum().backward()
    assert calls == [((1, 2, 16, 16), (1, 2, 16, 16), (1, 2, 16, 16), (1, 2, 16), True)]
    assert all(torch.equal(t.grad, torch.full_like(t, 2.0)) for t in (q, k, v))


@pytest.mark.parametrize("bad", ["fast", 3, {"block_m": 64}])
def test_a_backward_config_that_is_none_of_those_is_refused_at_the_call(bad):
    q = torch.randn(1, 2, 16, 16, requires_grad=True)
    with pytest.raises(TypeError, match="bwd_config must be None, a kernel.BwdConfig"):
        kernel.flash_attention(q, q, q, bwd_config=bad)

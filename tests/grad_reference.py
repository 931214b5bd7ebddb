"""The backward's references, shared by the backward's tests (tests/kernel/triton/test_backward.py, the
routes' tests in tests/kernel/) and by the planted-bug subprocess of test_backward.py, which imports this
file with tests/ on its path."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import kernel
from kernel.reference import causal_keep


def reference_grads(q, k, v, dout, causal):
    """Gradients by autograd through the attention math in float64."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    out, _ = kernel.attention_reference(q64, k64, v64, causal)
    return torch.autograd.grad(out, (q64, k64, v64), dout.double())


def torch_grads(q, k, v, dout, causal):
    """PyTorch's own gradients at the inputs' precision (SDPA's math backend)."""
    q1, k1, v1 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    mask = causal_keep(q.shape[-2], k.shape[-2], q.device) if causal else None
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q1, k1, v1, attn_mask=mask)
    return torch.autograd.grad(out, (q1, k1, v1), dout)


def bwd_inputs(device, shape_q, shape_kv, dtype=torch.float32):
    """Random q, k and v of the given shapes (the caller seeds the generator)."""
    return (torch.randn(shape_q, device=device, dtype=dtype), torch.randn(shape_kv, device=device, dtype=dtype),
            torch.randn(shape_kv, device=device, dtype=dtype))

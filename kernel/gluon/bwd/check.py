"""The Gluon backward checked against the math, by the project's gradient rule (GPU only).

:func:`check_gluon_bwd` runs ``flash_attn_bwd_gluon`` into NaN-filled gradients (an element
it never writes fails the check) on the forward's ``out`` and ``lse`` (the Triton forward at its
default config), and compares dQ, dK and dV with float32 autograd through the attention
math, each within 3x PyTorch's own error at the inputs' precision (autograd through SDPA's
math backend), ``kernel.reference.grad_accuracy``. The tests and ``benchmarks.bwd_gluon`` use it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernel.reference import attention_reference, causal_keep, grad_accuracy


def reference_grads(q, k, v, dout, causal: bool, dtype=torch.float32):
    """Gradients by autograd through the attention math in ``dtype``."""
    leaves = tuple(t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    out, _ = attention_reference(*leaves, causal, dtype=dtype)
    return torch.autograd.grad(out, leaves, dout.to(dtype))


def torch_grads(q, k, v, dout, causal: bool):
    """PyTorch's own gradients at the inputs' precision (SDPA's math backend)."""
    leaves = tuple(t.detach().clone().requires_grad_() for t in (q, k, v))
    mask = causal_keep(q.shape[-2], k.shape[-2], q.device) if causal else None
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        out = F.scaled_dot_product_attention(*leaves, attn_mask=mask)
    return torch.autograd.grad(out, leaves, dout)


def references(q, k, v, dout, causal: bool):
    """(float32 autograd gradients, PyTorch's own at the inputs' precision): what a check compares with."""
    return reference_grads(q, k, v, dout, causal), torch_grads(q, k, v, dout, causal)


def check_gluon_bwd(q, k, v, dout, causal: bool, knobs: dict | None = None, out_lse=None, refs=None):
    """(GradAccuracy, (dq, dk, dv)) of one call of the Gluon backward with ``knobs``; ``out_lse``
    and ``refs`` (:func:`references`) are computed when not given."""
    from kernel.gluon.bwd.launch import flash_attn_bwd_gluon
    from kernel.triton.fwd import JIT_KERNEL, KNOB_DEFAULTS, plan_for

    out, lse = plan_for(JIT_KERNEL, KNOB_DEFAULTS, q, k, v, causal)(q, k, v) if out_lse is None else out_lse
    grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
    ours = flash_attn_bwd_gluon(q, k, v, out, lse, dout, causal, **(knobs or {}), dq=grads[0], dk=grads[1],
                                dv=grads[2])
    torch.cuda.synchronize()
    reference, pytorchs = references(q, k, v, dout, causal) if refs is None else refs
    verdict = grad_accuracy(ours, reference, pytorchs, q.dtype)
    return verdict, ours

"""What every attention backward shares, whatever language its kernels are written in.

An attention backward takes (dout, q, k, v, out, lse) and writes (dq, dk, dv). It is checked
against autograd through the float64 (CPU) or float32 (GPU) attention math, each gradient
within 3x PyTorch's own error on the same inputs (:func:`kernel.reference.grad_accuracy`);
``out`` and ``lse`` come from the same reference, so only the backward is judged. It is timed
next to SDPA's flash and cuDNN backward (``torch.autograd.grad`` of SDPA's forward, captured
on the stream its forward ran on), on input sets that together miss the L2. It does 2.5x the
forward's FLOPs. :class:`AttentionBackward` says so once; :class:`AttentionStep` is the
training step's attention (forward then backward) against SDPA's.
"""

from __future__ import annotations

import contextlib
import os

from tuner.kernels._attention import random_qkv
from tuner.kernels._base import Case, GateResult, NamedError, Pinned, TunableKernel
from tuner.problem import Problem

__all__ = ["AttentionBackward", "AttentionStep", "backward_reference"]

REFERENCE_BYTES = 2 << 30        # a group of batch x heads slices whose scores fit this is one autograd pass


def _groups(q, k, dtype) -> int:
    import torch

    per_slice = q.shape[-2] * k.shape[-2] * torch.finfo(dtype).bits // 8 * 6    # scores, P, dP, dS and their grads
    return max(1, min(q.shape[0] * q.shape[1], REFERENCE_BYTES // max(per_slice, 1)))


def _grads(q, k, v, dout, causal: bool, dtype):
    """(out, lse, (dq, dk, dv)) by autograd through the attention math in ``dtype``, a group of
    batch x heads slices at a time."""
    import torch

    from kernel.reference import attention_reference

    batch, heads = q.shape[:2]
    flat = [t.reshape(batch * heads, t.shape[-2], t.shape[-1]) for t in (q, k, v, dout)]
    group, outs, lses, grads = _groups(q, k, dtype), [], [], []
    for start in range(0, batch * heads, group):
        leaves = [t[start:start + group].detach().to(dtype).requires_grad_() for t in flat[:3]]
        out, lse = attention_reference(*leaves, causal, dtype=dtype)
        grads.append(torch.autograd.grad(out, leaves, flat[3][start:start + group].to(dtype)))
        outs.append(out.detach())
        lses.append(lse.detach())
    shaped = [torch.cat([g[i] for g in grads]).reshape(t.shape) for i, t in enumerate((q, k, v))]
    return torch.cat(outs).reshape(q.shape), torch.cat(lses).reshape(q.shape[:-1]), tuple(shaped)


def _torch_grads(q, k, v, dout, causal: bool):
    """PyTorch's own gradients at q's precision (SDPA's math backend; tf32 for fp32 on a GPU, as
    our kernels' dots), a group of slices at a time."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernel.reference import causal_keep

    batch, heads = q.shape[:2]
    flat = [t.reshape(batch * heads, t.shape[-2], t.shape[-1]) for t in (q, k, v, dout)]
    mask = causal_keep(q.shape[-2], k.shape[-2], q.device) if causal else None
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = previous or (q.dtype == torch.float32 and q.is_cuda)
    grads, group = [], _groups(q, k, q.dtype)
    try:
        for start in range(0, batch * heads, group):
            leaves = [t[start:start + group].detach().clone().requires_grad_() for t in flat[:3]]
            with sdpa_kernel(SDPBackend.MATH):
                out = F.scaled_dot_product_attention(*leaves, attn_mask=mask)
            grads.append(torch.autograd.grad(out, leaves, flat[3][start:start + len(leaves[0])]))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return tuple(torch.cat([g[i] for g in grads]).reshape(t.shape) for i, t in enumerate((q, k, v)))


def backward_reference(q, k, v, dout, causal: bool, device: str) -> tuple:
    """(out in q's dtype, lse fp32, reference gradients, PyTorch's gradients) for a gate case."""
    import torch

    dtype = torch.float64 if device == "cpu" else torch.float32
    out, lse, reference = _grads(q, k, v, dout, causal, dtype)
    return out.to(q.dtype).contiguous(), lse.float().contiguous(), reference, _torch_grads(q, k, v, dout, causal)


class _StreamPin:
    """An SDPA backend's pin that also says on which stream its backward calls must be captured."""

    def __init__(self, backend: str | None, stream):
        self.backend, self.stream = backend, stream

    def __call__(self):
        if self.backend is None:
            return contextlib.nullcontext()
        from kernel.measure.timing import sdpa_pin

        return sdpa_pin(self.backend)()


class AttentionBackward(TunableKernel):
    """An attention backward: (dout, q, k, v, out, lse) in, (dq, dk, dv) out; checked, timed and counted as one."""

    pass_ = "bwd"
    emitted_imports = "from kernel import BwdConfig"
    emitted_what = "kernel.BwdConfig configs (for kernel.triton.autotune.AutotunedBackward)"

    def inputs(self, problem: Problem, device: str, generator=None) -> dict:
        import torch

        q, k, v = random_qkv(problem, device, generator)
        dout = torch.randn(q.shape, device=q.device, dtype=q.dtype, generator=generator)
        out, lse = self._forward(q, k, v, problem.causal)
        return dict(q=q, k=k, v=v, dout=dout, out=out, lse=lse, dq=torch.empty_like(q), dk=torch.empty_like(k),
                    dv=torch.empty_like(v))

    @staticmethod
    def _forward(q, k, v, causal: bool):
        """The forward's out and lse for timing inputs (our forward: it is fast, and a timing set needs
        no reference)."""
        from kernel import flash_attn_fwd

        return flash_attn_fwd(q, k, v, causal)

    def make_case(self, gate, device: str) -> Case:
        """Fresh random inputs (never a fixed seed), ``out`` and ``lse`` from the reference, its
        gradients and PyTorch's own. The gate's strided shape reads V and dO from [B, N, H, D]."""
        import torch

        from tuner.gate import GateShape

        gate = gate if isinstance(gate, GateShape) else GateShape("study", gate)
        problem = gate.problem
        seed = int.from_bytes(os.urandom(4), "little")
        generator = torch.Generator(device=device).manual_seed(seed)
        q, k, v = random_qkv(problem, device, generator, gate.strided_v)
        dout = torch.randn(q.shape, device=device, dtype=q.dtype, generator=generator)
        if gate.strided_v:          # dO in another layout than O, as V is in another than K
            dout = torch.randn(problem.batch, problem.n_q, problem.heads, problem.head_dim, device=device,
                               dtype=q.dtype, generator=generator).transpose(1, 2)
        out, lse, reference, pytorchs = backward_reference(q, k, v, dout, problem.causal, device)
        tensors = dict(q=q, k=k, v=v, dout=dout, out=out, lse=lse, dq=torch.empty_like(q, memory_format=torch.
                       contiguous_format), dk=torch.empty_like(k), dv=torch.empty_like(v, memory_format=torch.
                       contiguous_format))
        return Case(gate=gate.name, problem=problem, seed=seed, tensors=tensors, outputs=("dq", "dk", "dv"),
                    reference=reference, torch_error=pytorchs)

    def judge(self, case: Case) -> GateResult:
        from kernel.reference import GRADIENTS, grad_accuracy

        t = case.tensors
        result = grad_accuracy((t["dq"], t["dk"], t["dv"]), case.reference, case.torch_error, t["q"].dtype)
        return GateResult(result.ok, result.reason, tuple(NamedError(name, e, b) for name, e, b in
                                                          zip(GRADIENTS, result.errors, result.bounds)))

    def timing_sets(self, case: Case, device: str) -> list[dict]:
        sets = [case.tensors]
        if device != "cpu":
            from kernel.measure.timing import input_sets

            first = case.tensors
            per_set = 9 * first["q"].numel() * first["q"].element_size()
            sets += [self.inputs(case.problem, device) for _ in range(input_sets(per_set) - 1)]
        return sets

    def baselines(self, sets: list[dict], problem: Problem) -> dict[str, Pinned]:
        """SDPA's backward by backend: autograd.grad of its forward, made on a stream of its own
        (autograd runs each backward op on its forward's stream: the graph captures there)."""
        return {backend: self._sdpa_backward(sets, problem, backend) for backend in ("flash", "cudnn")}

    @staticmethod
    def _sdpa_backward(sets: list[dict], problem: Problem, backend: str) -> Pinned:
        import torch
        import torch.nn.functional as F

        from kernel.measure.timing import OnStream

        cuda = sets[0]["q"].is_cuda
        stream = torch.cuda.Stream() if cuda else None
        pin = _StreamPin(backend if cuda else None, stream)
        calls = []
        with pin(), (torch.cuda.stream(stream) if cuda else contextlib.nullcontext()):
            for s in sets:
                leaves = tuple(s[n].detach().requires_grad_() for n in ("q", "k", "v"))
                try:
                    out = F.scaled_dot_product_attention(*leaves, is_causal=problem.causal)
                except RuntimeError as exc:          # the backend refuses the shape: so does each call
                    def refused(exc=exc):
                        raise RuntimeError(str(exc))
                    calls.append(refused)
                    continue
                calls.append(lambda out=out, leaves=leaves, dout=s["dout"]: torch.autograd.grad(
                    out, leaves, dout, retain_graph=True))
        if cuda:
            torch.cuda.current_stream().wait_stream(stream)
        return pin, OnStream(calls, stream) if cuda else calls

    def flops(self, problem: Problem) -> float:
        """2.5x the forward's: the five matmuls of a fused backward against the forward's two."""
        from kernel.measure.timing import attention_flops

        return 2.5 * attention_flops(problem.batch, problem.heads, problem.n_q, problem.n_k, problem.head_dim,
                                     problem.causal)

    def compulsory_bytes(self, problem: Problem) -> float:
        """q, dO, O read and dQ written per query row; k, v read and dK, dV written per key; lse and delta."""
        element = 4 if problem.dtype == "fp32" else 2
        per_head = (4 * problem.n_q + 4 * problem.n_k) * problem.head_dim * element + 8 * problem.n_q
        return float(problem.batch * problem.heads * per_head)

    def baseline_ncu_kernels(self) -> dict[str, str]:
        """SDPA's backward kernels, by backend."""
        return {"flash": r"flash_bwd\w*kernel", "cudnn": r"bprop|dgrad|cudnn"}


class AttentionStep(AttentionBackward):
    """The training step's attention: the forward (at its default config) then the backward being
    tuned, against SDPA's forward and autograd backward; the gate is the backward's."""

    pass_ = "fwd+bwd"

    def flops(self, problem: Problem) -> float:
        return super().flops(problem) * 3.5 / 2.5

    def baselines(self, sets: list[dict], problem: Problem) -> dict[str, Pinned]:
        import torch
        import torch.nn.functional as F

        from kernel.measure.timing import sdpa_pin

        def step(s):
            leaves = tuple(s[n].detach().requires_grad_() for n in ("q", "k", "v"))
            return lambda: torch.autograd.grad(F.scaled_dot_product_attention(*leaves, is_causal=problem.causal),
                                               leaves, s["dout"])

        cuda = sets[0]["q"].is_cuda
        return {backend: (sdpa_pin(backend) if cuda else contextlib.nullcontext, [step(s) for s in sets])
                for backend in ("flash", "cudnn")}

"""What every attention forward shares, whatever language its kernel is written in.

An attention forward takes (q, k, v) and writes (out, lse); it is checked against the float64
(CPU) or float32 (GPU) reference, ``out`` and ``lse`` each within 3x PyTorch's own error
(:func:`kernel.reference.accuracy`); it is timed next to SDPA's flash and cuDNN forward
backends, on input sets that together miss the L2; it does the FLOPs of
:func:`kernel.measure.timing.attention_flops`. :class:`AttentionForward` says so once, for the
Triton forward and for any other forward kernel (a Gluon one); the backward differs in its
outputs (dq, dk, dv), reference (autograd), baseline (SDPA's backward) and FLOPs (2.5x).
"""

from __future__ import annotations

import os

from tuner.kernels._base import Case, GateResult, NamedError, Pinned, TunableKernel
from tuner.problem import Problem

__all__ = ["AttentionForward", "random_qkv"]


def random_qkv(problem: Problem, device: str, generator=None, strided_v: bool = False) -> tuple:
    """q [B, H, N_q, D], k and v [B, H, N_k, D] of random normals; ``strided_v``: v read from a
    [B, N, H, D] tensor, so its strides differ from k's."""
    import torch

    def randn(n: int, transposed: bool = False):
        if transposed:
            return torch.randn(problem.batch, n, problem.heads, problem.head_dim, device=device,
                               dtype=problem.torch_dtype, generator=generator).transpose(1, 2)
        return torch.randn(problem.batch, problem.heads, n, problem.head_dim, device=device, dtype=problem.torch_dtype,
                           generator=generator)

    return randn(problem.n_q), randn(problem.n_k), randn(problem.n_k, strided_v)


def _chunked_reference(q, k, v, causal: bool, dtype):
    """The reference (out, lse), a group of batch x heads slices at a time (never more than ~2 GB)."""
    import torch

    from kernel.reference import attention_reference

    batch, heads, n_q, _ = q.shape
    per_slice = n_q * k.shape[-2] * torch.finfo(dtype).bits // 8 * 3     # scores, probabilities, lse pass
    group = max(1, min(batch * heads, (2 << 30) // max(per_slice, 1)))
    flat = [t.reshape(batch * heads, t.shape[-2], t.shape[-1]) for t in (q, k, v)]
    outs, lses = [], []
    for start in range(0, batch * heads, group):
        out, lse = attention_reference(*(t[start:start + group] for t in flat), causal, dtype=dtype)
        outs.append(out)
        lses.append(lse)
    return (torch.cat(outs).reshape(batch, heads, n_q, q.shape[-1]),     # [B, H, N_q, D]
            torch.cat(lses).reshape(batch, heads, n_q))                 # [B, H, N_q]


class AttentionForward(TunableKernel):
    """An attention forward: (q, k, v) in, (out, lse) out; checked, timed and counted as one."""

    pass_ = "fwd"

    def inputs(self, problem: Problem, device: str, generator=None) -> dict:
        import torch

        q, k, v = random_qkv(problem, device, generator)
        return dict(q=q, k=k, v=v, out=torch.empty_like(q),
                    lse=torch.empty(q.shape[:-1], device=q.device, dtype=torch.float32))

    def make_case(self, gate, device: str) -> Case:
        """Fresh random inputs (never a fixed seed), the reference and PyTorch's own error
        (the reference is float64 on the CPU, float32 on a GPU)."""
        import torch

        from kernel.reference import torch_low_precision_error
        from tuner.gate import GateShape

        gate = gate if isinstance(gate, GateShape) else GateShape("study", gate)
        problem = gate.problem
        seed = int.from_bytes(os.urandom(4), "little")
        generator = torch.Generator(device=device).manual_seed(seed)
        q, k, v = random_qkv(problem, device, generator, gate.strided_v)
        reference = _chunked_reference(q, k, v, problem.causal, torch.float64 if device == "cpu" else torch.float32)
        tensors = dict(q=q, k=k, v=v, out=torch.empty_like(q, memory_format=torch.contiguous_format),
                       lse=torch.empty(q.shape[:-1], device=device, dtype=torch.float32))
        return Case(gate=gate.name, problem=problem, seed=seed, tensors=tensors, outputs=("out", "lse"),
                    reference=reference, torch_error=torch_low_precision_error(q, k, v, problem.causal, reference))

    def judge(self, case: Case) -> GateResult:
        from kernel.reference import accuracy

        t = case.tensors
        result = accuracy(t["out"], t["lse"], t["q"], t["k"], t["v"], case.problem.causal, reference=case.reference,
                          torch_error=case.torch_error)
        return GateResult(result.ok, result.reason, (NamedError("out", result.err_out, result.bound_out),
                                                     NamedError("lse", result.err_lse, result.bound_lse)))

    def timing_sets(self, case: Case, device: str) -> list[dict]:
        sets = [case.tensors]
        if device != "cpu":
            import torch

            from kernel.measure.timing import input_sets

            first = case.tensors
            per_set = 4 * first["q"].numel() * first["q"].element_size()
            for _ in range(input_sets(per_set) - 1):
                q, k, v = (torch.randn(first[n].shape, device=first[n].device, dtype=first[n].dtype)
                           for n in ("q", "k", "v"))
                sets.append(dict(q=q, k=k, v=v, out=torch.empty_like(q), lse=torch.empty_like(first["lse"])))
        return sets

    def baselines(self, sets: list[dict], problem: Problem) -> dict[str, Pinned]:
        from kernel.measure.timing import sdpa_backends

        return sdpa_backends([(s["q"], s["k"], s["v"]) for s in sets], problem.causal)

    def flops(self, problem: Problem) -> float:
        from kernel.measure.timing import attention_flops

        return attention_flops(problem.batch, problem.heads, problem.n_q, problem.n_k, problem.head_dim,
                               problem.causal)

    def compulsory_bytes(self, problem: Problem) -> float:
        """Q, K and V read once, O and lse written once. The kernel re-reads K and V once per
        query tile, but at these sizes the re-reads come from L2 (50 MB on an H100/H200), so they
        do not count against HBM bandwidth."""
        element = 4 if problem.dtype == "fp32" else 2
        per_head = (2 * problem.n_q * problem.head_dim + 2 * problem.n_k * problem.head_dim) * element + 4 * problem.n_q
        return float(problem.batch * problem.heads * per_head)

    def baseline_ncu_kernels(self) -> dict[str, str]:
        """SDPA's forward kernels, by backend."""
        return {"flash": r"flash_fwd\w*_kernel<", "cudnn": r"cudnn|sdpa|fmha|fprop"}

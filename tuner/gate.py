"""The correctness gate: which shapes a config is checked on, and how.

Every config is checked, from NaN-filled outputs and on fresh random inputs, on:

1. every shape of the study (the very binaries that are timed);
2. a ragged, non-square shape in the same JIT specialisation as the study's shapes
   (:func:`ragged_gate`), so long rows and partial tiles run in the timed binary too;
3. two edge shapes built from the config's own tiles (:func:`edge_gates`): one whose
   last query tile holds one valid row and last key tile one valid key, and one with
   fewer keys than ``BLOCK_N``, whose V has other strides than its K (read from a
   [B, N, H, D] layout). Their odd lengths give them one JIT specialisation of their
   own, which the sweep compiles ahead with the rest (:func:`gate_compile_problems`).

``out`` and ``lse`` must each be within 3x PyTorch's own error on the same inputs
(:func:`kernel.reference.accuracy`). A one-key or one-row bug costs far more than that
on the edge shapes, where one key is a large share of a row.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace

from tuner.problem import Problem
from tuner.space import Config

__all__ = ["GateShape", "edge_gates", "gate_compile_problems", "gate_shapes", "make_case", "ragged_gate"]


@dataclass(frozen=True)
class GateShape:
    """A shape the gate checks, and how its V is laid out."""

    name: str
    problem: Problem
    strided_v: bool = False      # V read from a [B, N, H, D] tensor: its strides differ from K's


def ragged_gate(problem: Problem, small: bool = False) -> GateShape:
    """1552 x 1040 (80 x 48 under the interpreter): ragged for every tile of 32 and up,
    yet multiples of 16 like the study's lengths, so the gate runs the timed binary.
    The head count keeps the study's class too (1 is a constant to the JIT, multiples
    of 16 get a divisibility hint; anything else, such as 3, gets neither)."""
    heads = 1 if problem.heads == 1 else 16 if problem.heads % 16 == 0 else 3
    n_q, n_k = (80, 48) if small else (1552, 1040)
    return GateShape("ragged", Problem(batch=1 if small else 2, heads=heads, n_q=n_q, n_k=n_k,
                                       head_dim=problem.head_dim, dtype=problem.dtype, causal=problem.causal))


def edge_gates(problem: Problem, config: Config) -> list[GateShape]:
    """The config's edge shapes: one valid row and one valid key in the last tiles; and
    fewer keys than a key tile, with V in another layout than K."""
    base = replace(problem, batch=1, heads=2)
    one = replace(base, n_q=3 * config.block_m + 1, n_k=2 * config.block_n + 1)     # never square
    short = replace(base, n_q=config.block_m + 3, n_k=config.block_n // 2 + 1)
    return [GateShape("one-key", one), GateShape("short-keys", short, strided_v=True)]


def gate_shapes(problem: Problem, config: Config, small: bool = False) -> list[GateShape]:
    return [ragged_gate(problem, small), *edge_gates(problem, config)]


def gate_compile_problems(problem: Problem, config: Config) -> list[Problem]:
    """Problems to compile ahead for the gate beyond the study's own specialisation: the
    edge shapes' (all odd lengths, so one specialisation serves both)."""
    return [edge_gates(problem, config)[0].problem]


# -------------------------------------------------------------------------- cases


def make_case(gate_or_problem, device: str) -> dict:
    """Fresh random inputs (never a fixed seed), the reference and PyTorch's own error.

    The reference is float64 on the CPU and float32 on a GPU (computed a group of
    batch x heads slices at a time, so a long sequence never needs more than ~2 GB).
    """
    import torch

    from kernel.reference import torch_low_precision_error

    gate = gate_or_problem if isinstance(gate_or_problem, GateShape) else GateShape("study", gate_or_problem)
    problem = gate.problem
    dtype = problem.torch_dtype
    seed = int.from_bytes(os.urandom(4), "little")
    generator = torch.Generator(device=device).manual_seed(seed)

    def randn(n: int, transposed: bool = False):
        if transposed:       # [B, N, H, D] viewed as [B, H, N, D]: other strides than a contiguous K
            return torch.randn(problem.batch, n, problem.heads, problem.head_dim, device=device, dtype=dtype,
                               generator=generator).transpose(1, 2)
        return torch.randn(problem.batch, problem.heads, n, problem.head_dim, device=device, dtype=dtype,
                           generator=generator)

    q, k, v = randn(problem.n_q), randn(problem.n_k), randn(problem.n_k, gate.strided_v)
    reference = _chunked_reference(q, k, v, problem.causal, torch.float64 if device == "cpu" else torch.float32)
    return dict(q=q, k=k, v=v, seed=seed, gate=gate.name, reference=reference,
                torch_error=torch_low_precision_error(q, k, v, problem.causal, reference),
                out=torch.empty_like(q, memory_format=torch.contiguous_format),
                lse=torch.empty(q.shape[:-1], device=device, dtype=torch.float32))


def _chunked_reference(q, k, v, causal: bool, dtype):
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


def finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None

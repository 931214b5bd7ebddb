"""The correctness gate: which shapes a config is checked on, and how.

Every config is checked, from NaN-filled outputs and on fresh random inputs, on:

1. every shape of the study (the very binaries that are timed);
2. a ragged, non-square shape in the same JIT specialisation as the study's shapes
   (:func:`ragged_gate`), so long rows and partial tiles run in the timed binary too;
3. two edge shapes built from the config's own tiles (:func:`edge_gates`): one whose
   last query tile holds one valid row and last key tile one valid key, and one with
   fewer keys than ``BLOCK_N``, whose V has other strides than its K (read from a
   [B, N, H, D] layout). Their head count keeps the study's class (as the ragged gate's), so
   a kernel that does not specialise on lengths checks them in the timed binary too; for one
   that does (the Triton kernels), their odd lengths give them one JIT specialisation of their
   own, which the sweep compiles ahead with the rest (:func:`gate_compile_problems`), or, by
   default, only for a config that times within :data:`EDGE_MARGIN` of the best so far at some
   shape (:mod:`tuner.driver`): a config slower than that everywhere can never be chosen, and its
   rows say that its edge shapes were not checked (:data:`EDGE_UNCHECKED`).

A kernel's outputs must each be within its bound on every one of them (the forward's
``out`` and ``lse``: 3x PyTorch's own error on the same inputs, :func:`kernel.reference.accuracy`;
the inputs and the reference are the kernel's, :meth:`tuner.kernels.TunableKernel.make_case`).
A one-key or one-row bug costs far more than that on the edge shapes, where one key is a
large share of a row. Nothing here depends on the kernel beyond its ``block_m`` and ``block_n``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tuner.problem import Problem

__all__ = ["EDGE_MARGIN", "EDGE_UNCHECKED", "GateShape", "edge_gates", "edges_checked", "finite",
           "gate_compile_problems", "gate_shapes", "ragged_gate"]

# A config whose edge shapes need a binary of their own has them checked (and that binary compiled)
# only where it times within this factor of the best timed so far at some shape of the study; the
# best only falls, so a config outside it would never be chosen; such rows are kept out of the
# finalists, the winners and the emitted list all the same (:func:`edges_checked`).
EDGE_MARGIN = 1.3
EDGE_UNCHECKED = "edge shapes not checked"      # how such a timed row's reason starts


@dataclass(frozen=True)
class GateShape:
    """A shape the gate checks, and how its V is laid out."""

    name: str
    problem: Problem
    strided_v: bool = False      # V read from a [B, N, H, D] tensor: its strides differ from K's
    edge: bool = False           # one of :func:`edge_gates` (which a sweep may check for contenders only)


def ragged_gate(problem: Problem, small: bool = False) -> GateShape:
    """1552 x 1040 (80 x 48 under the interpreter): ragged for every tile of 32 and up,
    yet multiples of 16 like the study's lengths, so the gate runs the timed binary.
    The head count keeps the study's class too (1 is a constant to the JIT, multiples
    of 16 get a divisibility hint; anything else, such as 3, gets neither)."""
    heads = _heads_like(problem.heads, 3)
    n_q, n_k = (80, 48) if small else (1552, 1040)
    return GateShape("ragged", Problem(batch=1 if small else 2, heads=heads, n_q=n_q, n_k=n_k,
                                       head_dim=problem.head_dim, dtype=problem.dtype, causal=problem.causal))


def _heads_like(heads: int, plain: int) -> int:
    """A head count in ``heads``' class for the JIT: 1 (a constant), a multiple of 16 (a
    divisibility hint), else ``plain`` (neither)."""
    return 1 if heads == 1 else 16 if heads % 16 == 0 else plain


def edge_gates(problem: Problem, config) -> list[GateShape]:
    """The config's edge shapes: one valid row and one valid key in the last tiles; and
    fewer keys than a key tile, with V in another layout than K."""
    base = replace(problem, batch=1, heads=_heads_like(problem.heads, 2))
    one = replace(base, n_q=3 * config.block_m + 1, n_k=2 * config.block_n + 1)     # never square
    short = replace(base, n_q=config.block_m + 3, n_k=config.block_n // 2 + 1)
    return [GateShape("one-key", one, edge=True), GateShape("short-keys", short, strided_v=True, edge=True)]


def gate_shapes(problem: Problem, config, small: bool = False) -> list[GateShape]:
    return [ragged_gate(problem, small), *edge_gates(problem, config)]


def gate_compile_problems(problem: Problem, config) -> list[Problem]:
    """The edge shapes' problem, one for both (all odd lengths: where lengths are specialised,
    one specialisation serves both). A kernel compiles it ahead only where its specialisation
    differs from the study's (:meth:`tuner.kernels.TunableKernel.gate_compile_problems`)."""
    return [edge_gates(problem, config)[0].problem]


def edges_checked(row) -> bool:
    """Whether a timed row's config passed the whole gate (its edge shapes included)."""
    return not (row.reason or "").startswith(EDGE_UNCHECKED)


def finite(value: float | None) -> float | None:
    """``value``, or None for None, NaN and the infinities (which a stored float cannot say)."""
    return value if value is not None and math.isfinite(value) else None

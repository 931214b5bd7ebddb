"""Outputs that share memory with an input the kernels still read: refused, on every call.

A kernel that writes ``out`` into ``k``'s memory while other programs still load ``k``
returns wrong numbers without an error. The launch plans are keyed by layout, not by
pointer, so the check runs per call from the pointers alone: a plan's shapes and strides
fix each tensor's byte extent, computed once. Two tensors overlap when their byte ranges
[data_ptr, data_ptr + extent) intersect, which also refuses interleaved views of one buffer
that share no element (a packed layout: give the outputs their own memory).
"""

from __future__ import annotations

import torch

__all__ = ["OverlapCheck", "byte_extent", "has_internal_overlap"]


def byte_extent(t: torch.Tensor) -> int:
    """Bytes from ``t.data_ptr()`` to one past its last element; 0 for an empty tensor."""
    if t.numel() == 0:
        return 0
    return (sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1) * t.element_size()


def has_internal_overlap(t: torch.Tensor) -> bool:
    """Whether two elements of ``t`` may share memory: its dims, smallest stride first, must each
    step past everything the smaller ones span (a stride-0 broadcast fails, a transpose passes)."""
    span = 0
    for stride, size in sorted((s, n) for s, n in zip(t.stride(), t.shape) if n > 1):
        if stride <= span:
            return True
        span += (size - 1) * stride
    return False


class OverlapCheck:
    """The output/input pairs of one plan that must not share memory, checked from pointers per call.

    Args:
        outputs: (name, tensor or None) the caller gives; None are allocated fresh and never checked.
        inputs: (name, tensor) read while the outputs are written.
        same_view_ok: (output, input) pairs allowed to be exactly the same view (same pointer, shape
            and strides), because each element is read before the program that writes it stores it.
    """

    def __init__(self, outputs, inputs, same_view_ok=()):
        outputs, inputs = list(outputs), list(inputs)
        # Where the given outputs and the inputs sit among the call's arguments (outputs, then inputs).
        self.slots = [i for i, (_, t) in enumerate(outputs) if t is not None] + [
            len(outputs) + i for i in range(len(inputs))]
        self._passed: list[int] | None = None     # the pointers of the last call that passed
        given = [(name, t) for name, t in outputs if t is not None]
        for name, t in given:
            if has_internal_overlap(t):
                raise ValueError(f"{name} has elements that share memory (shape {tuple(t.shape)}, strides "
                                 f"{tuple(t.stride())}); give a tensor of its own, such as a contiguous one")
        self.names = [name for name, _ in given] + [name for name, _ in inputs]
        self.given = len(given)
        extents = [byte_extent(t) for _, t in given] + [byte_extent(t) for _, t in inputs]
        tensors = dict(given) | dict(inputs)
        self.pairs = []
        for i, (out_name, out) in enumerate(given):
            # Each output against the inputs and the outputs given before it.
            for j in [*range(i), *range(len(given), len(self.names))]:
                other = tensors[self.names[j]]
                same = ((out_name, self.names[j]) in same_view_ok and out.shape == other.shape
                        and out.stride() == other.stride() and out.dtype == other.dtype)
                self.pairs.append((i, j, extents[i], extents[j], same))

    def __call__(self, *tensors: torch.Tensor | None) -> None:
        """``tensors``: the outputs (None where not given) then the inputs, in the order the check was
        made with. A call with the pointers of the last one that passed (a loop over preallocated
        outputs) costs their comparison alone."""
        if not self.pairs:
            return
        ptrs = [tensors[i].data_ptr() for i in self.slots]
        if ptrs == self._passed:
            return
        for i, j, size_i, size_j, same in self.pairs:
            a, b = ptrs[i], ptrs[j]
            if a < b + size_j and b < a + size_i and not (same and a == b):
                name, other = self.names[i], self.names[j]
                why = ("the kernels write both" if j < self.given else
                       f"the kernels would overwrite {other} while still reading it")
                raise ValueError(f"{name} overlaps {other}'s memory (bytes [{a:#x}, {a + size_i:#x}) and [{b:#x}, "
                                 f"{b + size_j:#x})): {why}; give {name} memory of its own")
        self._passed = ptrs

"""What the launchers accept: attention inputs, TMA-readable layouts, the outputs a caller gives.

Shared by the forward (:mod:`kernel.triton.fwd`) and the backward (:mod:`kernel.triton.bwd`),
which take the same q, k, v; each error names the input and what is allowed.
"""

from __future__ import annotations

import operator

import torch

from kernel.arch import interpreting

__all__ = ["DTYPES", "HEAD_DIMS", "MAX_PERSISTENT", "MAX_STAGES", "MAX_TILE", "as_int", "check_agreement",
           "check_inputs", "check_kinds", "check_output", "check_outputs", "check_tile_area", "check_tile_rows",
           "check_tma_layout", "OverlapCheck", "byte_extent", "has_internal_overlap", "is_count", "is_pow2",
           "programs_per_sm", "register_cap", "stage_count", "tma_misfit"]

HEAD_DIMS = (16, 32, 64, 128, 256)
DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
MAX_TILE = 2 ** 20          # Triton's largest tensor (triton.language.TRITON_MAX_TENSOR_NUMEL): a score tile's elements
# The launchers' bounds, those of the tuner's config space (tuner.kernels.triton_fwd and triton_bwd) and of the Gluon
# configs' persistent grids: each stage a shared-memory buffer more (beyond 8 no tile worth running fits), and more
# programs per SM than it runs at once make a persistent grid a plain grid with a loop; a huge value is a typo.
MAX_STAGES = 8
MAX_PERSISTENT = 8


def is_pow2(value: int) -> bool:
    """A positive integer power of two."""
    return isinstance(value, int) and value > 0 and value & (value - 1) == 0


def is_count(value, low: int) -> bool:
    """An integer (not a bool) of at least ``low``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def as_int(name: str, value, allowed: str) -> int:
    """``value`` as a Python int when it is an integer of any kind (``np.int64(64)``, a 0-dim integer
    tensor), else ValueError naming ``name`` and ``allowed``. A bool is refused, never taken as 0 or 1."""
    if isinstance(value, bool) or "bool" in type(value).__name__ or getattr(value, "dtype", None) == torch.bool:
        raise ValueError(f"{name}={value!r} must be an int ({allowed}), not a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{name}={value!r} must be an int ({allowed}); got {type(value).__name__}") from None


def register_cap(value) -> int | None:
    """``maxnreg`` as the launchers take it: None or 0 is no cap (as in study files), else a multiple of
    8 from 24 to 255 registers per thread; ValueError otherwise."""
    allowed = "None or 0 for no cap, or a multiple of 8 from 24 to 255 registers per thread"
    if value is None:
        return None
    cap = as_int("maxnreg", value, allowed)
    if cap != 0 and not (24 <= cap <= 255 and cap % 8 == 0):
        raise ValueError(f"maxnreg={value!r} must be None or a multiple of 8 from 24 to 255 (registers per "
                         "thread), or 0 for no cap")
    return cap or None


def check_tile_area(rows: str, block_m: int, cols: str, block_n: int) -> None:
    """A ``block_m`` x ``block_n`` score tile within Triton's largest tensor (:data:`MAX_TILE`), which Triton
    checks only inside its compiler or interpreter; ValueError naming both tile arguments otherwise."""
    if block_m * block_n > MAX_TILE:
        raise ValueError(f"{rows}={block_m} x {cols}={block_n} is over Triton's largest tensor ({MAX_TILE} elements, "
                         f"the score tile); use tiles whose product is at most {MAX_TILE}, e.g. {rows}=128, {cols}=128")


def check_tile_rows(head_dim: int, **tiles: int) -> None:
    """Each tile's rows of q, k or v (``[tile, head_dim]``) within Triton's largest tensor (:data:`MAX_TILE`),
    which Triton checks only inside its compiler or interpreter; ValueError naming the tile otherwise."""
    for name, tile in tiles.items():
        if tile * head_dim > MAX_TILE:
            raise ValueError(f"{name}={tile} x head dim {head_dim} is over Triton's largest tensor ({MAX_TILE} "
                             f"elements, a tile of q, k or v); use {name} <= {MAX_TILE // head_dim} at this head dim")


def stage_count(name: str, value) -> int:
    """``num_stages`` (``name``: which pass's) as an int from 1 to :data:`MAX_STAGES`; ValueError naming it."""
    stages = as_int(name, value, f"1 to {MAX_STAGES}")
    if not 1 <= stages <= MAX_STAGES:
        raise ValueError(f"{name}={value!r} must be an integer from 1 to {MAX_STAGES} (software pipeline stages)")
    return stages


def programs_per_sm(value) -> int:
    """``persistent`` as an int: 0 (a program per tile) or 1 to :data:`MAX_PERSISTENT` programs per SM, each
    looping over tiles; ValueError naming it otherwise."""
    allowed = f"0 (a program per tile) or 1 to {MAX_PERSISTENT} programs per SM"
    persistent = as_int("persistent", value, allowed)
    if not 0 <= persistent <= MAX_PERSISTENT:
        raise ValueError(f"persistent={value!r} must be {allowed}")
    return persistent


def _check_device(name: str, t: torch.Tensor) -> None:
    """CUDA tensors, or CPU tensors under the interpreter; a meta tensor (no data) or another device never."""
    if t.device.type == "cuda" or (t.device.type == "cpu" and interpreting()):
        return
    if t.device.type == "cpu":
        raise ValueError(f"{name} is on {t.device}; the kernel needs CUDA tensors "
                         "(or TRITON_INTERPRET=1 set before importing kernel, to run on the CPU)")
    raise ValueError(f"{name} is on the {t.device.type!r} device; the kernel runs on CUDA tensors (or on CPU "
                     f"tensors under TRITON_INTERPRET=1){': meta tensors hold no data' if t.is_meta else ''}")


def check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> None:
    """Raise TypeError or ValueError, naming the input, unless q, k, v and causal can be launched."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim not in (3, 4):
            raise ValueError(f"{name} must be [B, H, N, D] or [B, N, D]; got {t.ndim} dims, shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise TypeError(f"{name}.dtype is {t.dtype}; supported: float32, float16, bfloat16")
        _check_device(name, t)
    check_kinds(q, k, v, causal)
    if q.dtype == torch.bfloat16 and interpreting():
        raise TypeError("bfloat16 does not work under TRITON_INTERPRET=1: the interpreter's dot multiplies the raw "
                        "bits and returns garbage; use float32 or float16 there, bfloat16 on a GPU")
    check_agreement(q, k, v, HEAD_DIMS)


def check_kinds(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal) -> None:
    """causal a bool; q, k, v of one rank and one dtype (each tensor's own checks come first)."""
    if causal is not True and causal is not False:
        raise TypeError(f"causal must be True or False; got {causal!r} ({type(causal).__name__})")
    if not (q.ndim == k.ndim == v.ndim):
        raise ValueError(f"q, k, v must have the same rank; got {q.ndim}, {k.ndim}, {v.ndim}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype; got {q.dtype}, {k.dtype}, {v.dtype}")


def check_agreement(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, head_dims, by: str = "") -> None:
    """q, k, v on one device, k and v alike, q and k agreeing on batch, heads and a head dim in
    ``head_dims`` (``by``: who does not support another, for the message)."""
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device; got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape; got {tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[:-2] != k.shape[:-2]:
        raise ValueError(f"q and k must agree on batch (and heads); got {tuple(q.shape)} and {tuple(k.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the head dim; got {q.shape[-1]} and {k.shape[-1]}")
    if q.shape[-1] not in head_dims:
        raise ValueError(f"head dim {q.shape[-1]} is not supported{by}; use one of {head_dims}")


def check_output(given: torch.Tensor, name: str, shape, dtype, device) -> None:
    """Raise TypeError or ValueError unless a given output tensor is ``shape`` ``dtype`` on ``device``."""
    if not isinstance(given, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(given).__name__}")
    if tuple(given.shape) != tuple(shape) or given.dtype != dtype or given.device != device:
        raise ValueError(f"{name} must be {tuple(shape)} {dtype} on {device}; "
                         f"got {tuple(given.shape)} {given.dtype} on {given.device}")


def check_outputs(q: torch.Tensor, out: torch.Tensor | None, lse: torch.Tensor | None) -> None:
    """The forward's given outputs: ``out`` like ``q`` with a unit last stride, ``lse`` contiguous fp32."""
    if out is not None:
        check_output(out, "out", q.shape, q.dtype, q.device)
        if out.stride(-1) != 1:
            raise ValueError(f"out needs a unit last stride; got strides {tuple(out.stride())}")
    if lse is not None:
        check_output(lse, "lse", q.shape[:-1], torch.float32, q.device)
        if not lse.is_contiguous():
            raise ValueError(f"lse must be contiguous; got strides {tuple(lse.stride())}")


def tma_misfit(tensors, knob: str, fix: str) -> str | None:
    """Why TMA cannot read these (name, tensor) pairs through per-head descriptors, or None: a
    head's first byte and every batch, head and row stride must be multiples of 16 bytes. The
    message names ``knob`` ("tma=True") and ends with ``fix``."""
    for name, t in tensors:
        element = t.element_size()
        if t.data_ptr() % 16 or any(t.stride(i) * element % 16 for i in range(t.ndim - 1)):
            return (f"{knob} needs {name}'s start and its batch, head and row strides in multiples of 16 bytes; got "
                    f"strides {tuple(t.stride())} of {element}-byte elements at address % 16 = {t.data_ptr() % 16}; "
                    f"{fix}")
    return None


def check_tma_layout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """TMA reads each head's [N_k, D] keys through a descriptor (:func:`tma_misfit`'s rule)."""
    misfit = tma_misfit((("k", k), ("v", v)), "tma=True", "use tma=False or a contiguous copy")
    if misfit:
        raise ValueError(misfit)


# --------------------------------------------------------------------- outputs overlapping inputs
# Outputs that share memory with an input the kernels still read: refused, on every call.
#
# A kernel that writes ``out`` into ``k``'s memory while other programs still load ``k``
# returns wrong numbers without an error. The launch plans are keyed by layout, not by
# pointer, so the check runs per call from the pointers alone: a plan's shapes and strides
# fix each tensor's byte extent, computed once. Two tensors overlap when their byte ranges
# [data_ptr, data_ptr + extent) intersect, which also refuses interleaved views of one buffer
# that share no element (a packed layout: give the outputs their own memory).


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

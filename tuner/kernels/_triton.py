"""What every Triton kernel's description shares: the JIT's specialisation, what the installed
Triton offers, and the emitted ``triton.Config`` source."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = ["TritonFeatures", "device_source", "specialise", "triton_config_source", "triton_features"]


def _int_type(value: int) -> str:
    return "i32" if -(2**31) <= value < 2**31 else "i64"


def specialise(arguments: Sequence[tuple[str, Any]], constexprs: Sequence[tuple[str, Any]],
               unspecialised: Sequence[str] = ()) -> tuple[dict, dict, dict]:
    """The ``triton.compile`` inputs the JIT would build for a launch with these arguments.

    Mirrors Triton's run-time specialisation (3.6 to 3.9): pointers (given as their type,
    ``"*bf16"``) 16-byte aligned, as torch allocations are; integers divisible by 16 get
    ``tt.divisibility = 16``; integers equal to 1 become constexprs, except those named in
    ``unspecialised`` (``do_not_specialize``). Without the divisibility hints Triton does not
    pipeline the loads, and shared memory no longer depends on ``num_stages``. ``constexprs``
    follow the runtime arguments in signature order.

    Returns:
        ``(signature, constexprs, attrs)`` for ``triton.compiler.ASTSource``.
    """
    signature: dict[str, str] = {}
    fixed: dict[tuple[int, ...], Any] = {}
    attrs: dict[tuple[int, ...], list] = {}
    divisible = [["tt.divisibility", 16]]
    for index, (name, value) in enumerate(arguments):
        if isinstance(value, str):
            signature[name] = value
            attrs[(index,)] = divisible
        elif isinstance(value, float):
            signature[name] = "fp32"
        elif name in unspecialised:
            signature[name] = _int_type(value)
        elif value == 1:
            signature[name] = "constexpr"
            fixed[(index,)] = 1
        else:
            signature[name] = _int_type(value)
            if value % 16 == 0:
                attrs[(index,)] = divisible
    first = len(signature)
    for offset, (name, value) in enumerate(constexprs):
        signature[name] = "constexpr"
        fixed[(first + offset,)] = value
    return signature, fixed, attrs


@lru_cache(maxsize=16)
def device_source(functions: tuple) -> str:
    """The source of JIT functions (their device code; editing a launcher leaves it alone), read once."""
    return "".join(inspect.getsource(f.fn) for f in functions)


@dataclass(frozen=True)
class TritonFeatures:
    """What the installed Triton offers the knobs."""

    version: str
    tensor_descriptors: bool        # tl.make_tensor_descriptor (device-side TMA descriptors)
    warp_specialize: bool           # tl.range(..., warp_specialize=True)
    maxnreg: bool                   # the maxnreg compile option


@lru_cache(maxsize=1)
def triton_features() -> TritonFeatures:
    """Read off the installed Triton (cached: it does not change within a process)."""
    import triton
    import triton.language as tl

    try:
        from triton.backends.nvidia.compiler import CUDAOptions
        options = set(CUDAOptions.__dataclass_fields__)
    except ImportError:                                   # pragma: no cover (a Triton without NVIDIA)
        options = set()
    return TritonFeatures(version=triton.__version__,
                          tensor_descriptors=hasattr(tl, "make_tensor_descriptor"),
                          warp_specialize="warp_specialize" in inspect.signature(tl.range.__init__).parameters,
                          maxnreg="maxnreg" in options)


def triton_config_source(kwargs: dict, num_warps: int, num_stages: int, **options) -> str:
    """``triton.Config({...}, num_warps=..., num_stages=..., option=...)`` as source (options
    that are falsy are left out)."""
    text = ", ".join(f'"{name}": {value}' for name, value in kwargs.items())
    extra = "".join(f", {name}={value}" for name, value in options.items() if value)
    return f"triton.Config({{{text}}}, num_warps={num_warps}, num_stages={num_stages}{extra})"

"""The fakes of the Gluon launch-plan tests, one set for both passes (kernel/gluon/direct.py and the plans).

Shaped as Triton 3.6's pieces: a host descriptor, the launcher's ``make_tensordesc_arg`` expansion, its
``wrap_handle_tensordesc`` closure over the C entry point (found by those names by
:func:`kernel.gluon.direct.unwrap_descriptor_launch`), and a JIT function whose compiled kernel is itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import torch

HEAD = 13                 # grid (3), stream, function, 2 flags, 2 scratch buffers, metadata, launch metadata, 2 hooks
ENCODED: list[int] = []   # the base pointer of every map make_tensordesc_arg encoded


@dataclass
class FakeDescriptor:
    base: torch.Tensor
    shape: list
    strides: list
    block_shape: list
    layout: str
    padding: str = "zero"


def make_tensordesc_arg(arg, meta):
    """The launcher's expansion of a descriptor: a map of its base pointer, then shape and strides."""
    ENCODED.append(arg.base.data_ptr())
    return [("map", arg.base.data_ptr(), tuple(arg.base.shape), meta), *arg.shape, *arg.strides]


def wrap_handle_tensordesc(launcher, tensordesc_indices, tensordesc_meta):
    """Triton 3.6's wrapper of the C entry point, as a closure of the same names."""
    def inner(*args):
        final_args, found = list(args[:HEAD]), 0
        for i, arg in enumerate(args[HEAD:]):
            if i in tensordesc_indices:
                final_args.extend(make_tensordesc_arg(arg, tensordesc_meta[found]))
                found += 1
            else:
                final_args.append(arg)
        return launcher(*final_args)
    return inner


class FakeGluonKernel:
    """A JIT function and its compiled kernel; every launch goes into ``log`` as (name, "jit", grid, args,
    kwargs) or (name, "entry", args). ``descriptors``: its first parameters that are host descriptors
    (their launcher is wrapped as Triton 3.6 wraps it, unless ``wrapped`` is False)."""

    def __init__(self, name, log, arg_names, descriptors=0, wrapped=True, metas=None, pdl=False):
        self.name, self.log, self.arg_names = name, log, list(arg_names)
        entry = lambda *args: log.append((name, "entry", args))            # noqa: E731 (the C entry point)
        metas = list(metas or [f"m{i}" for i in range(descriptors)])
        launch = wrap_handle_tensordesc(entry, set(range(descriptors)), metas) if descriptors and wrapped else entry
        self.run = SimpleNamespace(launch=launch, launch_cooperative_grid=False, launch_pdl=pdl,
                                   global_scratch_size=0, profile_scratch_size=0)
        self.function, self.packed_metadata = f"{name}-FUNCTION", "PACKED"

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.log.append((self.name, "jit", grid, args, kwargs)) or self

    def jit_launches(self) -> list[tuple]:
        """("jit", grid, args, kwargs) of each launch through the JIT."""
        return [entry[1:] for entry in self.log if entry[0] == self.name and entry[1] == "jit"]

    def entries(self) -> list[tuple]:
        """The arguments of each direct launch of the C entry point."""
        return [entry[2] for entry in self.log if entry[0] == self.name and entry[1] == "entry"]


def flat_launcher_reason() -> str | None:
    """None where Triton's CUDA launcher passes a kernel's arguments flat to its C entry point (Triton
    3.6's, which the recording drivers tests/gluon_fake_driver.py and gluon_bwd_fake_driver.py are
    shaped as), else why the recording drivers cannot stand in for it here."""
    import inspect

    try:
        from triton.backends.nvidia.driver import CudaLauncher
    except ImportError as exc:
        return f"no CUDA launcher in this Triton ({exc})"
    if "arg_annotations" in inspect.getsource(CudaLauncher.__init__):
        return ("this Triton's launcher passes the arguments as one tuple after their annotations (3.8 on); "
                "the recording drivers are shaped as 3.6's flat one")
    return None

"""Launch plans: what a call with a given input layout needs, worked out once.

Binding ~25 arguments through the JIT costs tens of microseconds of Python per call,
more than the kernel itself at small N. So the first call with a given layout checks
everything and works out a plan: output shapes, grid, the scalar arguments and, after
the JIT's own first launch, the compiled kernel. A later call whose plan key matches
(shapes, strides, dtypes, devices, pointer alignment, causal, config, the outputs
given) has passed the same checks and launches the compiled kernel directly.

This module is the one tied to Triton's launcher internals (3.6's direct C entry point,
its launch hooks, the scratch allocator of device-side tensor descriptors). It knows a
kernel only through a :class:`LaunchSpec`: how to order its arguments, its knob
constexprs and its compile options; :mod:`kernel.triton.fwd` checks the inputs and makes
the plans. It imports nothing from ``tuner``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import triton

from kernel.arch import interpreting, sm_count
from kernel.checks import OverlapCheck

__all__ = ["PLANS", "LaunchPlan", "LaunchShape", "LaunchSpec", "cached_plan", "current_device", "current_stream",
           "direct_runner", "hooks_busy", "plan_key", "tma_scratch", "use_tma_allocator"]


@dataclass(frozen=True)
class LaunchShape:
    """Everything about a launch that the JIT specialises on, except the pointers.

    Strides are (batch, head, row) in elements; the unit stride of the head dimension
    is not an argument at all (the launcher makes it 1), so it can never be
    specialised differently by the launcher and the tuner's cross-compiler.
    """

    batch: int
    heads: int
    n_q: int
    n_k: int
    head_dim: int
    q_strides: tuple[int, int, int]
    k_strides: tuple[int, int, int]
    v_strides: tuple[int, int, int]
    o_strides: tuple[int, int, int]

    @classmethod
    def contiguous(cls, batch: int, heads: int, n_q: int, n_k: int, head_dim: int) -> LaunchShape:
        """The shape of contiguous [B, H, N, D] tensors, as the tuner assumes."""
        q = (heads * n_q * head_dim, n_q * head_dim, head_dim)
        k = (heads * n_k * head_dim, n_k * head_dim, head_dim)
        return cls(batch, heads, n_q, n_k, head_dim, q, k, k, q)


@dataclass(frozen=True)
class LaunchSpec:
    """How a kernel takes its arguments, for a plan to launch it without the JIT.

    Attributes:
        arguments: ``(pointers, shape, causal) -> [(name, value), ...]``, the runtime
            arguments in signature order (the kernel's ``kernel_arguments``).
        knob_constexprs: the knob constexprs after ``CAUSAL``, in signature order, with defaults.
        options: compile options every launch passes.
    """

    arguments: Callable[[Sequence[Any], LaunchShape, bool], list[tuple[str, Any]]]
    knob_constexprs: tuple[tuple[str, Any], ...]
    options: dict


def _row_strides(shape, strides) -> tuple[int, int, int]:
    """(batch, head, row) strides in elements; a [B, N, D] tensor is read as [B, 1, N, D]
    with the head stride ``unsqueeze(1)`` would give (never used: there is one head)."""
    if len(shape) == 3:
        return strides[0], strides[1] * shape[1], strides[1]
    return strides[0], strides[1], strides[2]


def _contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


_RUNTIME = triton.knobs.runtime      # one object; profilers add their launch hooks to it


def _busy(hook) -> bool:
    """A launch hook is installed (a HookChain with calls, or a plain callable of older Triton)."""
    return hook is not None and getattr(hook, "calls", True)


def hooks_busy() -> bool:
    """A profiler's launch hooks are installed: launches must go through the JIT, which calls them."""
    return _busy(_RUNTIME.launch_enter_hook) or _busy(_RUNTIME.launch_exit_hook)


try:
    _current_stream = torch._C._cuda_getCurrentRawStream     # what Triton itself calls: no Python objects
    _current_device = torch._C._cuda_getDevice
except AttributeError:                                        # pragma: no cover (a torch without CUDA)
    _current_stream = _current_device = None
# Tests switch the direct entry point off (False: every launch through the launcher's wrapper).
_DIRECT_LAUNCH = True


def flat_entry_point(launcher) -> bool:
    """Whether the launcher's C entry point takes the kernel's arguments flat, after the flags and the
    two scratch buffers (Triton 3.6's launcher). From Triton 3.8 the entry point is one function shared
    by every kernel that takes them as a tuple after their annotations and signature (the launcher's
    ``arg_annotations`` and ``kernel_signature``): such launches go through the launcher's wrapper,
    which costs a frame and two scratch checks per call. Found by what the launcher holds."""
    return (_DIRECT_LAUNCH and hasattr(launcher, "launch") and not hasattr(launcher, "arg_annotations")
            and not hasattr(launcher, "kernel_signature") and not getattr(launcher, "gsan_enabled", False))


def direct_runner(compiled) -> tuple:
    """(run, head) for launching ``compiled`` without the JIT: ``run(gx, gy, gz, stream, *head,
    *arguments)``, every argument in signature order, constexprs included. ``run`` is the C entry
    point where it takes the arguments flat (:func:`flat_entry_point`) and no scratch buffer is
    needed, else the launcher's wrapper."""
    launcher = compiled.run
    direct = (flat_entry_point(launcher) and getattr(launcher, "global_scratch_size", 1) == 0
              and getattr(launcher, "profile_scratch_size", 1) == 0)
    # What follows the stream: the C entry point also takes the cooperative and PDL flags and the
    # two scratch buffers (none here); both take the packed metadata, launch metadata and the hooks.
    flags = (launcher.launch_cooperative_grid, launcher.launch_pdl, None, None) if direct else ()
    return (launcher.launch if direct else launcher), (compiled.function, *flags, compiled.packed_metadata, None,
                                                        None, None)


def current_stream(device_index: int):
    return _current_stream(device_index)


def current_device() -> int:
    return _current_device()


class PlanTensors:
    """What both forward plans (this module's :class:`LaunchPlan`, ``kernel.gluon.fwd.plan.GluonLaunchPlan``)
    do with a call's tensors, worked out from the first call's: the given outputs checked apart from
    q, k and v (per call: the key holds no pointers; ``out_may_be_q``: a kernel where each program
    loads its query rows before it stores them, and no other program touches them), inputs with a
    non-unit last stride copied (the kernels read rows), the outputs not given allocated."""

    def __init__(self, q, k, v, out, lse, out_may_be_q: bool):
        self.out_shape, self.lse_shape = tuple(q.shape), tuple(q.shape[:-1])
        self.dtype, self.device, self._device_index = q.dtype, q.device, q.device.index
        self.copy_inputs = not (q.stride(-1) == k.stride(-1) == v.stride(-1) == 1)
        self._apart = OverlapCheck((("out", out), ("lse", lse)), (("q", q), ("k", k), ("v", v)),
                                   {("out", "q")} if out_may_be_q else ())

    def _tensors(self, q, k, v, out, lse) -> tuple:
        """(q, k, v, out, lse) as the kernel takes them this call."""
        if out is not None or lse is not None:
            self._apart(out, lse, q, k, v)
        if self.copy_inputs:
            q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
        if out is None:
            out = torch.empty(self.out_shape, dtype=self.dtype, device=self.device)
        if lse is None:
            lse = torch.empty(self.lse_shape, dtype=torch.float32, device=self.device)
        return q, k, v, out, lse


class LaunchPlan(PlanTensors):
    """One launch layout, worked out once from checked inputs; calling it runs the kernel.

    Attributes:
        shape: the :class:`LaunchShape` the kernel is specialised on.
        grid: (query tiles, batch x heads); None when there is nothing to compute, and
            unknown (None) tiles until an autotuner has chosen a config.
        compiled: the compiled kernel once the JIT has launched it; None under the
            interpreter, where every call goes through the JIT.
        scalars: once compiled, every argument after the five tensors, constexprs included,
            in signature order, as the compiled kernel's own runner takes them.
    """

    def __init__(self, kernel, launch: dict, q, k, v, causal: bool, out, lse, spec: LaunchSpec):
        batch, heads = q.shape[0], 1 if q.ndim == 3 else q.shape[1]
        n_q, n_k, head_dim = q.shape[-2], k.shape[-2], q.shape[-1]
        self.kernel, self.launch, self.causal, self.spec = kernel, launch, causal, spec
        # out may be q itself under a fixed config; not under an autotuner, which reruns the kernel.
        super().__init__(q, k, v, out, lse, out_may_be_q=bool(launch))
        strides = [t.stride() if t.stride(-1) == 1 else _contiguous_strides(t.shape) for t in (q, k, v)]
        o_strides = out.stride() if out is not None else _contiguous_strides(q.shape)
        self.shape = LaunchShape(batch, heads, n_q, n_k, head_dim, *(_row_strides(q.shape, s) for s in strides),
                                 _row_strides(q.shape, o_strides))
        self._sms = sm_count(q.device)
        block_m = launch.get("BLOCK_M")
        self.grid = None if batch * heads * n_q == 0 else (
            self._grid(block_m, launch.get("PERSISTENT", 0)) if block_m else (None, batch * heads))
        self.compiled = self._run = self.scalars = None

    def _grid(self, block_m: int, persistent: int) -> tuple[int, int]:
        """A program per (query tile, batch x head), or ``persistent`` programs per SM."""
        tiles, heads = triton.cdiv(self.shape.n_q, block_m), self.shape.batch * self.shape.heads
        if persistent:
            return min(persistent * self._sms, tiles * heads), 1
        return tiles, heads

    def __call__(self, q, k, v, out=None, lse=None):
        q, k, v, out, lse = self._tensors(q, k, v, out, lse)
        grid, run = self.grid, self._run
        if grid is None:
            return out, lse
        if run is None or _current_device() != self._device_index or hooks_busy():
            self._launch_jit(q, k, v, out, lse)      # first call, another device current, or a profiler's hooks
        else:
            run(grid[0], grid[1], 1, _current_stream(self._device_index), *self._head, q, k, v, out, lse,
                *self.scalars)
        return out, lse

    def _launch_jit(self, q, k, v, out, lse) -> None:
        """Launch through the JIT (or an autotuner over it), then keep its compiled kernel."""
        args = [value for _, value in self.spec.arguments((q, k, v, out, lse), self.shape, self.causal)]
        compiled = self.kernel[lambda meta: self._grid(meta["BLOCK_M"], meta.get("PERSISTENT", 0))](
            *args, HEAD_DIM=self.shape.head_dim, CAUSAL=self.causal, **self.launch, **self.spec.options)
        if self.compiled is None and not interpreting() and getattr(compiled, "function", None) is not None:
            self._adopt(compiled, args)

    def _adopt(self, compiled, args) -> None:
        """Keep what a direct launch of ``compiled`` needs: its launcher, grid and arguments."""
        chosen = self.launch or self.kernel.best_config.kwargs      # an autotuner's pick
        run, self._head = direct_runner(compiled)
        knobs = tuple(chosen.get(name, default) for name, default in self.spec.knob_constexprs)
        self.grid = self._grid(chosen["BLOCK_M"], chosen.get("PERSISTENT", 0))
        # The launcher takes every argument, constexprs included, in signature order.
        self.scalars = (tuple(args[5:]) + (self.shape.head_dim, chosen["BLOCK_M"], chosen["BLOCK_N"], self.causal)
                        + knobs)
        self.compiled, self._run = compiled, run


_KEPT_SCRATCH: list | None = None      # while kept_scratch() is open: every scratch given out, held


def tma_scratch(size: int, alignment: int, stream) -> torch.Tensor:
    """Global scratch for device-side tensor descriptors (Triton asks for it per launch)."""
    scratch = torch.empty(size, dtype=torch.int8, device="cuda")
    if _KEPT_SCRATCH is not None:
        _KEPT_SCRATCH.append(scratch)
    return scratch


@contextlib.contextmanager
def kept_scratch():
    """Hold every TMA scratch given out inside the block until it ends. Triton drops a launch's
    scratch as the launch returns, so the caching allocator hands the same bytes to the next
    launch's: harmless on one stream, a race between kernels on two (a dK/dV kernel beside its dQ
    pass: in a replayed CUDA graph its descriptors were overwritten, dK and dV wrong). Close the
    block after the streams are joined."""
    global _KEPT_SCRATCH
    outer, _KEPT_SCRATCH = _KEPT_SCRATCH, []
    try:
        yield
    finally:
        _KEPT_SCRATCH = outer


def use_tma_allocator() -> None:
    """Give Triton :func:`tma_scratch`, which device-side TMA descriptors need (not under the interpreter)."""
    if not interpreting():
        triton.set_allocator(tma_scratch)


PLANS: dict[tuple, LaunchPlan] = {}
PLAN_LIMIT = 4096        # layouts kept; a process that makes more starts over


def plan_key(kernel, q, k, v, causal, config, out, lse) -> tuple:
    """What a call's plan depends on; raises AttributeError or TypeError for inputs that are not tensors."""
    # Pointer alignment is in the key: the JIT compiles 16-byte aligned pointers
    # differently, so a misaligned view must never reuse an aligned tensor's binary.
    return (kernel, q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype,
            q.device, k.device, v.device, q.data_ptr() % 16, k.data_ptr() % 16, v.data_ptr() % 16, causal, config,
            None if out is None else (out.shape, out.stride(), out.dtype, out.device, out.data_ptr() % 16),
            None if lse is None else (lse.shape, lse.stride(), lse.dtype, lse.device, lse.data_ptr() % 16))


def cached_plan(key: tuple | None, make: Callable[[], Any]) -> Any:
    """The plan kept under ``key``, else ``make()``'s, kept (``key`` None: not kept)."""
    plan = None if key is None else PLANS.get(key)
    if plan is None:
        plan = make()
        if key is not None:
            if len(PLANS) >= PLAN_LIMIT:
                PLANS.clear()
            PLANS[key] = plan
    return plan

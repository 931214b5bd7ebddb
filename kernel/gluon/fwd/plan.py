"""The Gluon forward's launch plan: checks, config, TMA rules and grid once per call signature, then
direct launches of the compiled kernel (how: :mod:`kernel.gluon.direct`)."""

from __future__ import annotations

import torch
import triton

from kernel.arch import sm_count
from kernel.gluon.checks import tma_strides
from kernel.gluon.direct import DESCRIPTOR_ARGS, direct_parts, on_device
from kernel.gluon.fwd.config import GluonConfig
from kernel.gluon.fwd.split import merge_parts, tail_split
from kernel.triton.launch import PlanTensors, current_device, current_stream, hooks_busy

__all__ = ["GluonLaunchPlan", "grid_for"]


def grid_for(config: GluonConfig, batch_heads: int, n_q: int, device: torch.device) -> tuple[int, int, int]:
    """A program per query tile of every head, or ``config.persistent`` programs per SM (no more than tiles)."""
    tiles = triton.cdiv(n_q, config.block_m) * batch_heads
    if config.persistent:
        tiles = min(tiles, config.persistent * sm_count(device))
    return tiles, 1, 1


class GluonLaunchPlan(PlanTensors):
    """One call signature of the Gluon forward, worked out once from checked inputs; calling it runs the kernel.

    Args:
        q, k, v, out, lse: a first call's tensors, already checked (``kernel.gluon.fwd.launch.checked_plan``).
        causal, config: the mask and the :class:`GluonConfig`.
        arguments: ``(q4, k4, v4, o4, lse, config, causal) -> (kernel, args, constexprs, options)``
            (``kernel.gluon.fwd.launch.launch_arguments``): what a JIT launch is given.
        direct: False keeps every call on the JIT (the reference path of the tests and benchmarks).
        cache_maps: False rebuilds the descriptors on every call even where they could be kept.

    Attributes:
        grid: (programs, 1, 1); None when there is no query row.
        compiled: the CompiledKernel once the JIT has launched it, else None.
        mode: how later calls launch: None (the JIT), ``"maps"`` or ``"descriptors"`` (module docstring).
    """

    def __init__(self, q, k, v, causal: bool, config: GluonConfig, out, lse, arguments, *, direct: bool = True,
                 cache_maps: bool = True):
        self.causal, self.config, self.arguments = causal, config, arguments
        self.direct, self.cache_maps = direct, cache_maps
        super().__init__(q, k, v, out, lse, out_may_be_q=True)      # a program loads its query rows first
        self.unsqueeze = q.ndim == 3
        batch, heads, n_q = q.shape[0], 1 if q.ndim == 3 else q.shape[1], q.shape[-2]
        self.grid = None if batch * heads * n_q == 0 else grid_for(config, batch * heads, n_q, q.device)
        self.no_keys = k.shape[-2] == 0
        self.split = None
        if self.grid is not None and not self.no_keys:
            self._check_tma(q, k, v, out)
            self.split = tail_split(config, causal, batch * heads, n_q, k.shape[-2], self.grid[0])
        self.compiled = self.mode = self._run = None
        self._workspace_args = False
        self._head = self._scalars = self._maps = self._templates = ()

    def _check_tma(self, q, k, v, out) -> None:
        """The copy engine's rules on every tensor read or written in place (the plan key holds their
        layouts and alignment, so once is enough); copies and fresh outputs are contiguous."""
        for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
            if t is not None and t.stride(-1) == 1:
                tma_strides(name, t.unsqueeze(1) if self.unsqueeze else t)

    def __call__(self, q, k, v, out=None, lse=None):
        q, k, v, out, lse = self._tensors(q, k, v, out, lse)
        if self.grid is None:
            return out, lse
        if self.no_keys:                          # every row is empty
            out.zero_()
            lse.fill_(float("-inf"))
            return out, lse
        workspaces = self.split.workspaces(self.config.block_m, q.shape[-1], q.device) if self.split else ()
        if self._run is None or current_device() != self._device_index or hooks_busy():
            self._launch_jit(q, k, v, out, lse, workspaces)   # first call, another device, or a profiler's hooks
        elif self._maps:
            q_args, k_args, v_args, o_args = self._maps
            self._run(*self.grid, current_stream(self._device_index), *self._head, *q_args(q), *k_args(k),
                      *v_args(v), *o_args(out), *self._pointers(lse, workspaces), *self._scalars)
        else:
            views = (t.unsqueeze(1) for t in (q, k, v, out)) if self.unsqueeze else (q, k, v, out)
            self._run(*self.grid, current_stream(self._device_index), *self._head,
                      *(template.build(t) for template, t in zip(self._templates, views)),
                      *self._pointers(lse, workspaces), *self._scalars)
        if self.split:
            with on_device(self.device):
                merge_parts(self.split, *workspaces, out.unsqueeze(1) if self.unsqueeze else out, lse,
                            self.config.block_m)
        return out, lse

    def _pointers(self, lse, workspaces) -> tuple:
        """The direct launch's pointers after the descriptors: lse, and where the kernel takes them
        (the ws kernel) the split's workspaces (lse itself, never written, where nothing is split)."""
        return (lse, *(workspaces or (lse, lse))) if self._workspace_args else (lse,)

    def _launch_jit(self, q, k, v, out, lse, workspaces=()) -> None:
        """Launch through the Gluon JIT, then keep its compiled kernel for direct launches."""
        views = [t.unsqueeze(1) if self.unsqueeze else t for t in (q, k, v, out)]
        split = dict(split=(self.split.tail, self.split.splits, *workspaces)) if self.split else {}
        kernel, args, constexprs, options = self.arguments(*views, lse, self.config, self.causal, **split)
        with on_device(self.device):
            compiled = kernel[self.grid](*args, **constexprs, **options)
        if self.direct and self.compiled is None and getattr(compiled, "function", None) is not None:
            self._adopt(kernel, compiled, args, constexprs)

    def _adopt(self, kernel, compiled, args, constexprs) -> None:
        """Keep what a direct launch of ``compiled`` needs (:func:`direct_parts`): its runner and the JIT's
        argument list but the tensors. A kernel whose parameters are not the ones described stays on the JIT."""
        self._workspace_args = "WS_O" in kernel.arg_names
        pointers = ("LSE", "WS_O", "WS_L") if self._workspace_args else ("LSE",)
        parts = direct_parts(kernel, compiled, args, constexprs, DESCRIPTOR_ARGS, pointers, cache_maps=self.cache_maps,
                             unsqueeze=self.unsqueeze)
        if parts is not None:
            run, self._head, self._templates, self._maps, self._scalars = parts
            self.compiled, self._run, self.mode = compiled, run, "maps" if self._maps else "descriptors"

    def __repr__(self) -> str:
        return f"GluonLaunchPlan({self.config}, causal={self.causal}, grid={self.grid}, mode={self.mode})"

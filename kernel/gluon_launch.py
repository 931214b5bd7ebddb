"""Launch plans of the Gluon forward: the JIT once per call signature, then its compiled kernel directly.

Why: a call through the Gluon JIT cost 164-252 µs of host time on the H200 (B4 H8 N512 D128),
the Triton kernel's launch plan (:mod:`kernel.launch`) 17-26 µs. Timed on a CPU (Triton 3.6,
CPU tensors, ``time.perf_counter``), one JIT call's Python was: the four host tensor descriptors
52 µs (each ``NVMMASharedLayout.get_default_for`` 7 µs, ``TensorDescriptor``'s own checks 4 µs,
the TMA stride rules 2 µs), the JIT's argument binder and cache key 11 µs, the config 5-7 µs,
the input and output checks 5 µs; then the JIT's launch, which needs a GPU to time.

A :class:`GluonLaunchPlan` does the checks, the config, the TMA layout rules and the grid once,
for one call signature; the caller keys it (``kernel.flash_fwd_gluon.plan_for``, or the default
call's plan, by :func:`kernel.launch.plan_key`). Its first call launches through the JIT, which
compiles and returns the CompiledKernel; later calls launch that kernel with the argument list
the JIT gives it. Triton 3.6's ``JITFunction.run`` launches with::

    kernel.run(gx, gy, gz, stream, kernel.function, kernel.packed_metadata, launch_metadata,
               launch_enter_hook, launch_exit_hook, *bound_args.values())

``bound_args`` holds every parameter in signature order, constexprs included (the C launcher
skips them). ``kernel.run`` (the ``CudaLauncher``) adds the cooperative and PDL flags and the
scratch buffers (none here: :func:`kernel.launch.direct_runner` skips it) and calls its ``launch``,
a Python wrapper that replaces each host ``TensorDescriptor`` by ``make_tensordesc_arg(desc,
meta)``: a CUtensorMap encoded from the base's ``data_ptr()``, then the shape and strides.

Within a plan that expansion depends on the base pointer alone (shape, strides, block and
swizzle are the plan's), so the direct path keeps it per ``data_ptr`` (:class:`DescriptorArgs`,
no tensor referenced) and calls the C entry point under the wrapper: no descriptor object, binder
or map encoding on a repeated call (mode ``"maps"``). Where the wrapper is not the one described
(:func:`unwrap_descriptor_launch` says None), descriptors are rebuilt per call and given to the
runner as the JIT gives them (mode ``"descriptors"``). A profiler's launch hooks, another current
device or the first call go through the JIT; with no hooks the JIT's launch metadata and empty
hook chains do nothing, which the direct path's ``None``s say.

On the same CPU, with Triton 3.6's JIT and launcher wrapper over a recording driver
(``tests/gluon_fake_driver.py``; no map encoding, no C launch), a repeated call's Python cost
about 3 µs in mode ``"maps"``, 17 µs with descriptors rebuilt, 140 µs through the JIT; the key
lookup of ``plan_for`` adds about 5 µs. ``python -m benchmarks.gluon --host`` measures it on a GPU.
"""

from __future__ import annotations

import contextlib

import torch
import triton

from kernel.gluon_checks import tma_strides
from kernel.gluon_config import GluonConfig
from kernel.gluon_split import merge_parts, tail_split
from kernel.launch import PlanTensors, current_device, current_stream, direct_runner, hooks_busy, sm_count

__all__ = ["DESCRIPTOR_ARGS", "MAP_LIMIT", "DescriptorArgs", "DescriptorTemplate", "GluonLaunchPlan", "direct_parts",
           "grid_for", "on_device", "unwrap_descriptor_launch"]

# The kernels' first parameters: the four host descriptors, then the lse pointer.
DESCRIPTOR_ARGS = ("q_desc", "k_desc", "v_desc", "o_desc")
MAP_LIMIT = 64        # base pointers whose expansion a plan keeps per descriptor; more start over


def grid_for(config: GluonConfig, batch_heads: int, n_q: int, device: torch.device) -> tuple[int, int, int]:
    """A program per query tile of every head, or ``config.persistent`` programs per SM (no more than tiles)."""
    tiles = triton.cdiv(n_q, config.block_m) * batch_heads
    if config.persistent:
        tiles = min(tiles, config.persistent * sm_count(device))
    return tiles, 1, 1


def unwrap_descriptor_launch(launch, count: int = len(DESCRIPTOR_ARGS)) -> tuple | None:
    """(C entry point, expand, per-descriptor metadata) under Triton 3.6's descriptor wrapper, else None.

    ``launch`` is the ``CudaLauncher.launch`` of a kernel with host descriptors: in 3.6 the closure
    ``inner`` of ``wrap_handle_tensordesc`` over ``launcher`` (the C entry point),
    ``tensordesc_indices`` and ``tensordesc_meta``, calling ``make_tensordesc_arg`` of its module;
    the kernel's first ``count`` parameters are its descriptors, and no other. Found by those names,
    so another Triton's wrapper (or a descriptor without metadata, whose expansion would hold the
    tensor) gives None.
    """
    code, closure = getattr(launch, "__code__", None), getattr(launch, "__closure__", None)
    if code is None or not closure:
        return None
    try:
        cells = {name: cell.cell_contents for name, cell in zip(code.co_freevars, closure)}
    except ValueError:                                     # an empty cell
        return None
    expand = getattr(launch, "__globals__", {}).get("make_tensordesc_arg")
    entry, indices, meta = cells.get("launcher"), cells.get("tensordesc_indices"), cells.get("tensordesc_meta")
    if (expand is None or entry is None or indices != set(range(count)) or not meta
            or len(meta) != count or any(m is None for m in meta)):
        return None
    return entry, expand, tuple(meta)


class DescriptorTemplate:
    """A host descriptor but its base: what rebuilds it for another tensor of the plan's layout
    (no tensor is kept, so a plan never holds a caller's memory)."""

    def __init__(self, descriptor):
        self.cls = type(descriptor)
        self.fields = (descriptor.shape, descriptor.strides, descriptor.block_shape, descriptor.layout,
                       descriptor.padding)

    def build(self, base):
        return self.cls(base, *self.fields)


class DescriptorArgs:
    """One descriptor's expansion by the launcher (``expand(descriptor, meta)``), kept per base pointer.

    Args:
        template: the descriptor's :class:`DescriptorTemplate`.
        meta: its entry of the compiled kernel's ``tensordesc_meta``.
        expand: the launcher's ``make_tensordesc_arg``.
        unsqueeze: the calls give [B, N, D] tensors, which the descriptor reads as [B, 1, N, D].
    """

    def __init__(self, template: DescriptorTemplate, meta, expand, unsqueeze: bool):
        self.template, self.meta, self.expand, self.unsqueeze = template, meta, expand, unsqueeze
        self.by_pointer: dict[int, tuple] = {}

    def __call__(self, t: torch.Tensor) -> tuple:
        found = self.by_pointer.get(t.data_ptr())
        return found if found is not None else self._encode(t)

    def _encode(self, t: torch.Tensor) -> tuple:
        if len(self.by_pointer) >= MAP_LIMIT:
            self.by_pointer.clear()
        descriptor = self.template.build(t.unsqueeze(1) if self.unsqueeze else t)
        found = self.by_pointer[t.data_ptr()] = tuple(self.expand(descriptor, self.meta))
        return found


def direct_parts(kernel, compiled, args, constexprs: dict, descriptors: tuple, pointers: tuple, *,
                 cache_maps: bool = True, unsqueeze: bool = False) -> tuple | None:
    """What direct launches of ``compiled`` (the JIT's launch of ``kernel`` with ``args`` and
    ``constexprs``) need: ``(run, head, templates, maps, tail)``, or None for a kernel whose parameters
    do not start with ``descriptors`` then ``pointers`` (it stays on the JIT).

    ``run(gx, gy, gz, stream, *head, *descriptor arguments, *pointers, *tail)`` launches it: with
    ``maps`` (a :class:`DescriptorArgs` per descriptor, under Triton 3.6's wrapper and ``cache_maps``)
    ``run`` is the C entry point under the wrapper and each descriptor's arguments are ``maps[i](t)``;
    without, ``run`` is :func:`kernel.launch.direct_runner`'s and each descriptor is
    ``templates[i].build(t)``. ``tail``: the JIT's arguments after the pointers, constexprs included,
    in signature order (its ``bound_args.values()``).
    """
    names = list(kernel.arg_names)
    given = dict(zip(names, args)) | constexprs
    lead = (*descriptors, *pointers)
    if tuple(names[:len(lead)]) != lead or len(args) + len(constexprs) != len(names) or set(given) != set(names):
        return None
    bound = [given[name] for name in names]          # the JIT's bound_args.values()
    templates = tuple(DescriptorTemplate(descriptor) for descriptor in bound[:len(descriptors)])
    run, head = direct_runner(compiled)
    unwrapped = (unwrap_descriptor_launch(run, len(descriptors))
                 if cache_maps and run is getattr(compiled.run, "launch", None) else None)
    maps = ()
    if unwrapped is not None:
        run, expand, metas = unwrapped
        maps = tuple(DescriptorArgs(template, meta, expand, unsqueeze) for template, meta in zip(templates, metas))
    return run, head, templates, maps, tuple(bound[len(lead):])


def on_device(device: torch.device):
    """The JIT compiles for, and launches on, the current device: make it the tensors'."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


class GluonLaunchPlan(PlanTensors):
    """One call signature of the Gluon forward, worked out once from checked inputs; calling it runs the kernel.

    Args:
        q, k, v, out, lse: a first call's tensors, already checked (``kernel.flash_fwd_gluon.checked_plan``).
        causal, config: the mask and the :class:`GluonConfig`.
        arguments: ``(q4, k4, v4, o4, lse, config, causal) -> (kernel, args, constexprs, options)``
            (``kernel.flash_fwd_gluon.launch_arguments``): what a JIT launch is given.
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

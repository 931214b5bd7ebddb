"""Direct launches of the Gluon kernels: the JIT once per call signature, then its compiled kernel directly.

Shared by the forward's plan (:mod:`kernel.gluon.fwd.plan`) and the backward's (:mod:`kernel.gluon.bwd.plan`).

Why: a call through the Gluon JIT cost 164-252 µs of host time on the H200 (B4 H8 N512 D128),
the Triton kernel's launch plan (:mod:`kernel.triton.launch`) 17-26 µs. Timed on a CPU (Triton 3.6,
CPU tensors, ``time.perf_counter``), one JIT call's Python was: the four host tensor descriptors
52 µs (each ``NVMMASharedLayout.get_default_for`` 7 µs, ``TensorDescriptor``'s own checks 4 µs,
the TMA stride rules 2 µs), the JIT's argument binder and cache key 11 µs, the config 5-7 µs,
the input and output checks 5 µs; then the JIT's launch, which needs a GPU to time.

A :class:`GluonLaunchPlan` does the checks, the config, the TMA layout rules and the grid once,
for one call signature; the caller keys it (``kernel.gluon.fwd.launch.plan_for``, or the default
call's plan, by :func:`kernel.triton.launch.plan_key`). Its first call launches through the JIT, which
compiles and returns the CompiledKernel; later calls launch that kernel with the argument list
the JIT gives it. Triton 3.6's ``JITFunction.run`` launches with::

    kernel.run(gx, gy, gz, stream, kernel.function, kernel.packed_metadata, launch_metadata,
               launch_enter_hook, launch_exit_hook, *bound_args.values())

``bound_args`` holds every parameter in signature order, constexprs included (the C launcher
skips them). ``kernel.run`` (the ``CudaLauncher``) adds the cooperative and PDL flags and the
scratch buffers (none here: :func:`kernel.triton.launch.direct_runner` skips it) and calls its ``launch``,
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

from kernel.triton.launch import direct_runner

__all__ = ["DESCRIPTOR_ARGS", "MAP_LIMIT", "DescriptorArgs", "DescriptorTemplate", "direct_parts", "on_device",
           "unwrap_descriptor_launch"]

# The kernels' first parameters: the four host descriptors, then the lse pointer.
DESCRIPTOR_ARGS = ("q_desc", "k_desc", "v_desc", "o_desc")
MAP_LIMIT = 64        # base pointers whose expansion a plan keeps per descriptor; more start over


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
    without, ``run`` is :func:`kernel.triton.launch.direct_runner`'s and each descriptor is
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

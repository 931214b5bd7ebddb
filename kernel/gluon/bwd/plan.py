"""Launch plans of the Gluon backward: its three kernels worked out once per call signature, then launched directly.

A call of ``kernel.gluon.bwd.launch.flash_attn_bwd_gluon`` runs ``kernel.triton.bwd``'s preprocess
(delta, the fp32 dQ accumulator zeroed), the Gluon kernel, and the dQ conversion. Through the
JITs, every call checks every input, works out the config, builds seven host tensor descriptors
(each with its TMA layout rules) and binds three kernels' arguments: the Gluon forward's JIT
launch alone cost about 175 µs of host time on the H200 (``kernel.gluon.fwd.plan``).

A :class:`GluonBwdPlan` is made once per call signature (``kernel.gluon.bwd.launch.plan_for``
keys it): the checks, the config, the TMA rules and the grids are done then. Its first call goes
through the JITs; later calls launch the two Triton kernels as the Triton backward's plans do
(:class:`kernel.triton.bwd_launch._Unit`, :func:`kernel.triton.launch.direct_runner`) and the Gluon kernel as the
Gluon forward's plan does (:func:`kernel.gluon.fwd.plan.direct_parts`: the JIT's argument list, each
descriptor's CUtensorMap expansion kept per ``data_ptr``, mode ``"maps"``; else descriptors rebuilt,
mode ``"descriptors"``). Per call, as in the Triton plans: the given gradients checked against the
inputs' memory (:class:`kernel.checks.OverlapCheck`), the gradients not given, delta and the dQ
accumulator allocated. A profiler's launch hooks or another current device send the whole call
through the JITs (on the tensors' device); ``direct=False`` always does (the reference path).

On a CPU, with Triton 3.6's JITs and launcher wrapper over the recording driver of
``tests/gluon_fake_driver.py`` (no map encoding, no C launch; bf16 B4 H8 N512 D128 causal,
gradients given), a call's Python cost about 300-350 µs through the JITs, 8-9 µs through the plan
once its maps are kept (the dQ accumulator's pointer repeating, as the caching allocator gives it),
18 µs with ``plan_for``'s key (9 tensors) around it. ``python -m benchmarks.bwd_gluon --host``
measures it on a GPU.
"""

from __future__ import annotations

import torch
import triton

from kernel.arch import sm_count
from kernel.checks import OverlapCheck
from kernel.gluon.bwd.config import GluonBwdConfig
from kernel.gluon.checks import tma_strides
from kernel.gluon.direct import direct_parts, on_device
from kernel.triton.bwd import PREPROCESS_BLOCK, BwdShape, bwd_dq_finish_kernel, bwd_preprocess_kernel
from kernel.triton.bwd_launch import UNIT_ARGUMENTS, _Unit, unit_constexprs
from kernel.triton.launch import current_device, current_stream, hooks_busy

__all__ = ["DESCRIPTORS", "POINTERS", "GluonBwdPlan", "bwd_grid"]

# The Gluon kernel's first parameters: seven host descriptors, then two fp32 pointers.
DESCRIPTORS = ("q_desc", "k_desc", "v_desc", "do_desc", "dq_desc", "dk_desc", "dv_desc")
POINTERS = ("LSE", "DELTA")
SMALL = dict(num_warps=4, num_stages=1)      # the preprocess's and the dQ conversion's launch options


def bwd_grid(config: GluonBwdConfig, batch_heads: int, n_k: int, device) -> tuple[int]:
    """A program per key tile of every head, or ``config.persistent`` programs per SM (no more than tiles)."""
    tiles = triton.cdiv(n_k, config.block_n) * batch_heads
    if config.persistent:
        return (min(tiles, config.persistent * sm_count(device)),)
    return (tiles,)


def _strides(t: torch.Tensor) -> tuple[int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2)


class GluonBwdPlan:
    """One call signature of the Gluon backward, worked out once from checked inputs; calling it runs the kernels.

    Args:
        q, k, v, out, lse, dout: a first call's tensors, already checked (``kernel.gluon.bwd.launch.checked_plan``).
        causal, config: the mask and the :class:`GluonBwdConfig`.
        grads: the (dq, dk, dv) the first call gives (None where not given).
        arguments: ``kernel.gluon.bwd.launch.launch_arguments``: the Gluon kernel's JIT launch.
        direct: False keeps every call on the JITs; cache_maps: False rebuilds descriptors per call.

    Attributes:
        grid: the Gluon kernel's (programs, 1, 1); None when no kernel runs (a length 0).
        preprocess, finish: the Triton kernels (:class:`kernel.triton.bwd_launch._Unit`).
        compiled, mode: the Gluon kernel's CompiledKernel and how later calls launch it: None (the JIT),
            ``"maps"`` or ``"descriptors"`` (module docstring).
    """

    def __init__(self, q, k, v, out, lse, dout, causal: bool, config: GluonBwdConfig, grads, arguments, *,
                 direct: bool = True, cache_maps: bool = True):
        batch, heads, n_q, head_dim = q.shape
        n_k = k.shape[2]
        self.causal, self.config, self.arguments = causal, config, arguments
        self.direct, self.cache_maps = direct, cache_maps
        self.q_shape, self.k_shape, self.n_q, self.n_k = tuple(q.shape), tuple(k.shape), n_q, n_k
        self.dtype, self.device, self._device_index = q.dtype, q.device, q.device.index
        self.rows = batch * heads * n_q
        empty = self.rows * n_k == 0
        self.grid = None if empty else (*bwd_grid(config, batch * heads, n_k, q.device), 1, 1)
        if not empty:
            for name, t in (("q", q), ("k", k), ("v", v), ("dout", dout), *zip(("dq", "dk", "dv"), grads)):
                if t is not None:
                    tma_strides(name, t)         # the plan key holds layouts and alignment: once is enough
        contiguous_q = (heads * n_q * head_dim, n_q * head_dim, head_dim)
        contiguous_k = (heads * n_k * head_dim, n_k * head_dim, head_dim)
        shape = BwdShape(batch, heads, n_q, n_k, head_dim, _strides(q), _strides(k), _strides(v), _strides(dout),
                         contiguous_q, contiguous_k, contiguous_k, _strides(out))
        rows = (triton.cdiv(n_q, PREPROCESS_BLOCK), batch * heads)
        self.preprocess, self.finish = (
            _Unit(fn, rows, arguments_of(names, shape), unit_constexprs(fn, head_dim, causal, constexprs), SMALL)
            for fn, (arguments_of, names), constexprs in (
                (bwd_preprocess_kernel, UNIT_ARGUMENTS["preprocess"], dict(BLOCK=PREPROCESS_BLOCK, ZERO_DQ=True)),
                (bwd_dq_finish_kernel, UNIT_ARGUMENTS["dq_finish"], dict(BLOCK=PREPROCESS_BLOCK))))
        # Given gradients may share memory with no input and no other gradient (checked per call).
        self._apart = OverlapCheck(zip(("dq", "dk", "dv"), grads), (("q", q), ("k", k), ("v", v), ("out", out),
                                                                    ("lse", lse), ("dout", dout)))
        self.compiled = self.mode = self._run = None
        self._head = self._tail = self._maps = self._templates = ()

    def __call__(self, q, k, v, out, lse, dout, dq=None, dk=None, dv=None):
        if dq is not None or dk is not None or dv is not None:
            self._apart(dq, dk, dv, q, k, v, out, lse, dout)
        dq = torch.empty(self.q_shape, dtype=self.dtype, device=self.device) if dq is None else dq
        dk = torch.empty(self.k_shape, dtype=self.dtype, device=self.device) if dk is None else dk
        dv = torch.empty(self.k_shape, dtype=self.dtype, device=self.device) if dv is None else dv
        if self.grid is None:
            if self.n_k == 0:
                dq.zero_()            # no key: no gradient
            if self.n_q == 0:
                dk.zero_()
                dv.zero_()
            return dq, dk, dv
        delta = torch.empty(self.rows, dtype=torch.float32, device=self.device)
        dq_acc = torch.empty(self.q_shape, dtype=torch.float32, device=self.device)
        tensors = dict(q=q, out=out, dout=dout, delta=delta, dq_acc=dq_acc, dq=dq)
        if self._run is None or current_device() != self._device_index or hooks_busy():
            with on_device(self.device):      # first call, another device current, or a profiler's hooks
                self.preprocess(tensors, jit=True)
                self._launch_jit(q, k, v, dout, dq_acc, dk, dv, lse, delta)
                self.finish(tensors, jit=True)
            return dq, dk, dv
        self.preprocess(tensors)
        stream = current_stream(self._device_index)
        if self._maps:
            q_args, k_args, v_args, do_args, acc_args, dk_args, dv_args = self._maps
            self._run(*self.grid, stream, *self._head, *q_args(q), *k_args(k), *v_args(v), *do_args(dout),
                      *acc_args(dq_acc), *dk_args(dk), *dv_args(dv), lse, delta, *self._tail)
        else:
            self._run(*self.grid, stream, *self._head, *(template.build(t) for template, t in zip(
                self._templates, (q, k, v, dout, dq_acc, dk, dv))), lse, delta, *self._tail)
        self.finish(tensors)
        return dq, dk, dv

    def _launch_jit(self, q, k, v, dout, dq_acc, dk, dv, lse, delta) -> None:
        """The Gluon kernel through its JIT, then its compiled kernel kept for direct launches."""
        kernel, args, constexprs, options = self.arguments(q, k, v, dout, dq_acc, dk, dv, lse, delta, self.config,
                                                           self.causal)
        compiled = kernel[self.grid](*args, **constexprs, **options)
        if self.direct and self.compiled is None and getattr(compiled, "function", None) is not None:
            parts = direct_parts(kernel, compiled, args, constexprs, DESCRIPTORS, POINTERS, cache_maps=self.cache_maps)
            if parts is not None:
                run, self._head, self._templates, self._maps, self._tail = parts
                self.compiled, self._run, self.mode = compiled, run, "maps" if self._maps else "descriptors"

    def __repr__(self) -> str:
        return f"GluonBwdPlan({self.config.key()}, causal={self.causal}, grid={self.grid}, mode={self.mode})"

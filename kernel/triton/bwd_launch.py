"""The backward's launcher: input checks and a cached launch plan per input layout.

Read after :mod:`kernel.triton.bwd` (the kernels). The first call with a given layout
(shapes, strides, dtypes, devices, pointer alignment, causal, config) checks every
input and works out a plan: the kernels' grids and scalar arguments and, after the
JIT's first launch, the compiled kernels, which later calls launch directly. Binding
~40 arguments through the JIT costs tens of microseconds per kernel; a direct launch a
few.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

import torch
import triton

from kernel.arch import interpreting, sm_count
from kernel.checks import (
    OverlapCheck,
    as_int,
    check_inputs,
    check_tile_area,
    check_tile_rows,
    is_count,
    is_pow2,
    programs_per_sm,
    register_cap,
    stage_count,
    tma_misfit,
)
from kernel.triton.bwd import (
    DQ_MODES,
    PREPROCESS_BLOCK,
    BwdConfig,
    BwdShape,
    finish_arguments,
    kv_arguments,
    preprocess_arguments,
    q_arguments,
)
from kernel.triton.launch import (
    cached_plan,
    current_device,
    current_stream,
    direct_runner,
    hooks_busy,
    kept_scratch,
    use_tma_allocator,
)

# Each kernel's argument list and the tensors it takes, by the plan's names for them: the launcher
# and the tuner's cross-compile both build a kernel's arguments from here (fp32: FP32_TENSORS).
UNIT_ARGUMENTS = {"preprocess": (preprocess_arguments, ("out", "dout", "delta", "dq_acc")),
                  "kv": (kv_arguments, ("q", "k", "v", "dout", "lse", "delta", "dk", "dv", "dq_acc")),
                  "q": (q_arguments, ("q", "k", "v", "dout", "lse", "delta", "dq")),
                  "dq_finish": (finish_arguments, ("dq_acc", "dq"))}
FP32_TENSORS = ("lse", "delta", "dq_acc")


def unit_constexprs(fn, head_dim: int, causal: bool, constexprs: dict) -> list[tuple[str, object]]:
    """A kernel's constexprs in signature order: the config's, the head dim, and causal where it takes it."""
    given = dict(HEAD_DIM=head_dim, CAUSAL=bool(causal), **constexprs)
    return [(name, given[name]) for name in fn.arg_names if name in given]


# ------------------------------------------------------------------------------ checks


def check_bwd_config(config: BwdConfig) -> BwdConfig:
    """``config`` in Python ints (integers of any kind taken, bools refused), ``maxnreg`` 0 as None (no
    cap); ValueError / TypeError naming the first bad field."""
    ints = {}
    for name in ("block_m", "block_n", "block_m_q", "block_n_q"):
        value = ints[name] = as_int(name, getattr(config, name), "a power of two >= 16")
        if not is_count(value, 16) or not is_pow2(value):
            raise ValueError(f"{name}={value!r} must be a power of two >= 16 (tl.dot's smallest tile)")
    check_tile_area("block_m", ints["block_m"], "block_n", ints["block_n"])           # the dK/dV kernel's
    check_tile_area("block_m_q", ints["block_m_q"], "block_n_q", ints["block_n_q"])   # the dQ pass's
    for name in ("num_warps", "num_warps_q"):
        value = ints[name] = as_int(name, getattr(config, name), "a power of two from 1 to 32")
        if not is_count(value, 1) or not is_pow2(value) or value > 32:
            raise ValueError(f"{name}={value!r} must be a power of two from 1 to 32")
    for name in ("num_stages", "num_stages_q"):
        ints[name] = stage_count(name, getattr(config, name))
    if not isinstance(config.dq_mode, str) or config.dq_mode not in DQ_MODES:
        raise ValueError(f"dq_mode={config.dq_mode!r} must be one of {', '.join(DQ_MODES)}")
    if config.tma is not True and config.tma is not False:
        raise TypeError(f"tma must be True or False; got {config.tma!r}")
    persistent = programs_per_sm(config.persistent)
    if config.overlap is not True and config.overlap is not False:
        raise TypeError(f"overlap must be True or False; got {config.overlap!r}")
    if config.overlap and config.dq_mode != "pass":
        raise ValueError(f"overlap=True needs dq_mode='pass' (a second kernel to overlap); got {config.dq_mode!r}")
    return replace(config, **ints, maxnreg=register_cap(config.maxnreg), persistent=persistent)


def _check_like(t, name: str, like: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor) or t.shape != like.shape or t.dtype != like.dtype or t.device != like.device:
        raise ValueError(f"{name} must be like q ({tuple(like.shape)}, {like.dtype}, {like.device}); got "
                         f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}"
                         + (f" {t.dtype} on {t.device}" if isinstance(t, torch.Tensor) else ""))


TMA_FIX = "use tma=False, dq_mode='pass' or 'atomic', or contiguous inputs"


def _tma_misfit(tensors) -> str | None:
    """Why TMA cannot read these (name, tensor) pairs (:func:`kernel.checks.tma_misfit`); None when it can."""
    return tma_misfit(tensors, "tma", TMA_FIX)


def _check_tma(config: BwdConfig, q, tensors) -> None:
    if config.dq_mode == "tma" and (interpreting() or not q.is_cuda):
        # The interpreter has no TMA reduce (create_descriptor_reduce): it would fail deep inside Triton.
        raise ValueError("dq_mode='tma' (dQ by TMA reduce-add) needs a CUDA GPU with TMA (sm_90 or later), "
                         "not the interpreter; use dq_mode='pass' or 'atomic'")
    if config.tma or config.dq_mode == "tma":
        misfit = _tma_misfit(tensors)
        if misfit:
            raise ValueError(misfit)


def check_bwd_inputs(dout, q, k, v, out, lse, causal: bool, config: BwdConfig) -> BwdConfig:
    """Every check a first call makes; raises TypeError or ValueError naming the bad input. Returns
    the config in Python ints (:func:`check_bwd_config`)."""
    check_inputs(q, k, v, causal)
    _check_like(dout, "dout", q)
    _check_like(out, "out", q)
    if not isinstance(lse, torch.Tensor) or lse.shape != q.shape[:-1] or lse.dtype != torch.float32:
        raise ValueError(f"lse must be float32 {tuple(q.shape[:-1])} (the forward's); got "
                         f"{tuple(lse.shape) if isinstance(lse, torch.Tensor) else type(lse).__name__}"
                         + (f" {lse.dtype}" if isinstance(lse, torch.Tensor) else ""))
    if lse.device != q.device:
        raise ValueError(f"lse is on {lse.device}, q on {q.device}; they must share a device")
    config = check_bwd_config(config)
    check_tile_rows(q.shape[-1], **{name: getattr(config, name) for name in ("block_m", "block_n", "block_m_q",
                                                                             "block_n_q")})
    _check_tma(config, q, (("q", q), ("k", k), ("v", v), ("dout", dout)))
    return config


# ---------------------------------------------------------------------------- plans


def _four_dims(t: torch.Tensor) -> torch.Tensor:
    """[B, N, D] as [B, 1, N, D]; the last dim made unit-stride (the kernels assume it)."""
    t = t.unsqueeze(1) if t.ndim == 3 else t
    return t if t.stride(-1) == 1 else t.contiguous()


def _strides(t: torch.Tensor) -> tuple[int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2)


class _Unit:
    """One kernel of a plan: its grid and every argument but the tensors; launched through
    the JIT until it has compiled, then directly (Triton 3.6's C entry point)."""

    def __init__(self, fn, grid, arguments: list[tuple[str, object]], constexprs: list[tuple[str, object]],
                 options: dict):
        self.fn, self.grid, self.options = fn, grid, options
        self.values = [value for _, value in arguments]
        self.tensor_slots = [i for i, value in enumerate(self.values) if isinstance(value, str)]
        self.constexprs = dict(constexprs)
        # Every argument, constexprs included, goes to a direct launch in signature order; the runtime
        # arguments come first in every kernel here, so the constexprs follow as the tail.
        self.tail = tuple(value for _, value in constexprs)
        self.run = self.head = None

    def __call__(self, tensors: dict[str, torch.Tensor], side: torch.cuda.Stream | None = None, jit=False) -> None:
        """Launch on the current stream, or on ``side``; through the JIT if ``jit``."""
        values = list(self.values)
        for slot in self.tensor_slots:
            values[slot] = tensors[values[slot]]
        if jit or self.run is None or current_device() != tensors["q"].device.index or hooks_busy():
            with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
                self._launch_jit(values)      # first call, another device current, or a profiler's hooks
        else:
            stream = side.cuda_stream if side is not None else current_stream(tensors["q"].device.index)
            self.run(*self.grid, 1, stream, *self.head, *values, *self.tail)

    def _launch_jit(self, values: list) -> None:
        compiled = self.fn[self.grid](*values, **self.constexprs, **self.options)
        if self.run is None and not interpreting() and getattr(compiled, "function", None) is not None:
            self.run, self.head = direct_runner(compiled)


class BwdPlan:
    """One backward launch layout, worked out once from checked inputs; calling it runs the kernels."""

    def __init__(self, config: BwdConfig, q, k, v, dout, out, causal: bool):
        q4, k4, v4, do4, o4 = (_four_dims(t) for t in (q, k, v, dout, out))
        batch, heads, n_q, head_dim = q4.shape
        n_k = k4.shape[2]
        self.config, self.causal, self.rank3 = config, causal, q.ndim == 3
        self.copies = any(t.stride(-1) != 1 for t in (q, k, v, dout, out))
        contiguous_q = (heads * n_q * head_dim, n_q * head_dim, head_dim)
        contiguous_k = (heads * n_k * head_dim, n_k * head_dim, head_dim)
        self.shape = BwdShape(batch, heads, n_q, n_k, head_dim, _strides(q4), _strides(k4), _strides(v4),
                              _strides(do4), contiguous_q, contiguous_k, contiguous_k, _strides(o4))
        self.atomic = config.dq_mode != "pass"
        self.units = self._units(config, batch * heads, sm_count(q.device)) if batch * heads else []
        # The interpreter has no streams; without keys there is no dK/dV kernel to overlap.
        self.overlap = config.overlap and q.is_cuda and not interpreting() and len(self.units) == 3
        if self.overlap:     # this plan's own side stream and fork/join events, made once
            self.side = _side_stream(q.device)
            self.fork, self.join = torch.cuda.Event(), torch.cuda.Event()
        self.apart = None           # an OverlapCheck of the given gradients (bwd_plan_for)

    def _units(self, config: BwdConfig, bh: int, sms: int) -> list[_Unit]:
        shape = self.shape
        rows = (triton.cdiv(shape.n_q, PREPROCESS_BLOCK), bh)
        tiles_n = triton.cdiv(shape.n_k, config.block_n) * bh
        grids = {"preprocess": rows, "dq_finish": rows, "q": (triton.cdiv(shape.n_q, config.block_m_q), bh),
                 "kv": (min(config.persistent * sms, tiles_n), 1) if config.persistent else (
                     triton.cdiv(shape.n_k, config.block_n), bh)}
        units = []
        for name, fn, constexprs, options in config.units():
            if shape.n_q and (shape.n_k or name != "kv"):       # no query: nothing runs; no key: no dK/dV kernel
                arguments, tensors = UNIT_ARGUMENTS[name]
                units.append(_Unit(fn, grids[name], arguments(tensors, shape),
                                   unit_constexprs(fn, shape.head_dim, self.causal, constexprs), options))
        return units

    def __call__(self, dout, q, k, v, out, lse, dq=None, dk=None, dv=None):
        if self.apart is not None and (dq is not None or dk is not None or dv is not None):
            self.apart(dq, dk, dv, dout, q, k, v, out, lse)
        if self.copies:
            q, k, v, dout, out = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, dout, out))
        shape = self.shape
        dq = torch.empty(q.shape, dtype=q.dtype, device=q.device) if dq is None else dq
        dk = torch.empty(k.shape, dtype=k.dtype, device=k.device) if dk is None else dk
        dv = torch.empty(v.shape, dtype=v.dtype, device=v.device) if dv is None else dv
        if shape.n_k == 0:
            dq.zero_()            # no key: no gradient (the kernels leave these rows alone)
        if shape.n_q == 0:
            dk.zero_()
            dv.zero_()
        if not self.units:
            return dq, dk, dv
        bh = shape.batch * shape.heads
        tensors = dict(q=q, k=k, v=v, dout=dout, out=out, lse=lse if lse.is_contiguous() else lse.contiguous(),
                       dq=dq, dk=dk, dv=dv, delta=torch.empty(bh * shape.n_q, dtype=torch.float32, device=q.device))
        # The "pass" kernels never touch dq_acc: any fp32 pointer will do (the same type keeps one binary).
        tensors["dq_acc"] = (torch.empty(bh * shape.n_q * shape.head_dim, dtype=torch.float32, device=q.device)
                             if self.atomic else tensors["delta"])
        if self.overlap:
            self._overlapped(tensors, q.device)
        else:
            for unit in self.units:
                unit(tensors)
        return dq, dk, dv

    def _overlapped(self, tensors: dict, device: torch.device) -> None:
        """The preprocess, then the dK/dV kernel on the caller's stream and the dQ pass on the side
        stream, joined before returning: every tensor the side stream reads or writes was made on
        the caller's stream, which waits for it before anything can free them. Works inside a
        CUDA-graph capture too (the side stream forks from and joins the capturing one)."""
        preprocess, kv, q_pass = self.units
        main = torch.cuda.current_stream(device)
        preprocess(tensors)
        self.fork.record(main)
        self.side.wait_event(self.fork)
        with kept_scratch():    # the two kernels' TMA scratch apart until the join (kernel.triton.launch)
            kv(tensors)         # first: its programs take the SMs, the dQ pass's fill in behind them
            q_pass(tensors, self.side)
            self.join.record(self.side)
            main.wait_event(self.join)


_SIDE_STREAMS: dict[int, torch.cuda.Stream] = {}


def _side_stream(device: torch.device) -> torch.cuda.Stream:
    """One side stream per device for every overlapped plan (the kernels on it are joined each call)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SIDE_STREAMS:
        _SIDE_STREAMS[index] = torch.cuda.Stream(index)
    return _SIDE_STREAMS[index]


def _plan_key(config, causal, tensors) -> tuple:
    # Pointer alignment is in the key: the JIT compiles 16-byte aligned pointers differently.
    return (config, causal) + tuple(None if t is None else (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16)
                                    for t in tensors)


def _check_grads(grads, q, k, v) -> None:
    """Gradients a caller gives: like q, k and v, and contiguous (their memory apart from the inputs':
    :class:`kernel.checks.OverlapCheck`, per call)."""
    for name, given, like in zip(("dq", "dk", "dv"), grads, (q, k, v)):
        if given is None:
            continue
        if not isinstance(given, torch.Tensor) or given.shape != like.shape or given.dtype != like.dtype or \
                given.device != like.device or not given.is_contiguous():
            raise ValueError(f"{name} must be a contiguous tensor like {'qkv'[('dq', 'dk', 'dv').index(name)]} "
                             f"({tuple(like.shape)}, {like.dtype}, {like.device}); got "
                             f"{tuple(given.shape) if isinstance(given, torch.Tensor) else type(given).__name__}")


def make_bwd_plan(config: BwdConfig, dout, q, k, v, out, lse, causal: bool, grads=(None, None, None),
                  route=None) -> BwdPlan:
    """A plan for this call, every input checked. ``route``: asked after the checks as
    ``route(dout, q, k, v, out, lse, causal, grads)``, and a plan it returns is the plan instead
    (a default call's: :func:`kernel.backward.gluon_bwd_plan`)."""
    checked = check_bwd_inputs(dout, q, k, v, out, lse, causal, config)
    _check_grads(grads, q, k, v)
    routed = None if route is None else route(dout, q, k, v, out, lse, causal, grads)
    if routed is not None:
        return routed
    if checked.tma or checked.dq_mode == "tma":
        use_tma_allocator()
    plan = BwdPlan(checked, q, k, v, dout, out, causal)
    # Given gradients may share memory with no input and no other gradient (checked per call: the
    # key holds no pointers). Even dq = q: with overlap=True the dQ pass writes dq beside the dK/dV kernel,
    # which still reads every q tile.
    plan.apart = OverlapCheck(zip(("dq", "dk", "dv"), grads),
                              (("dout", dout), ("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse)))
    return plan


def cached_bwd_plan(slot, causal: bool, tensors: tuple, make) -> BwdPlan:
    """The plan cached under ``slot`` (a config, or a default call's mark) for these tensors' layout,
    ``make()`` on first sight; never cached where they are not all tensors (the checks say what is wrong)."""
    try:
        key = _plan_key(slot, causal, tensors)
    except (AttributeError, TypeError):
        key = None
    return cached_plan(key, make)


def bwd_plan_for(config: BwdConfig, dout, q, k, v, out, lse, causal: bool, grads=(None, None, None)) -> BwdPlan:
    """The cached plan for this call, made (and every input checked) on first sight."""
    return cached_bwd_plan(config, causal, (dout, q, k, v, out, lse, *grads),
                           lambda: make_bwd_plan(config, dout, q, k, v, out, lse, causal, grads))

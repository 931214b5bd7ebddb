"""The kernels under an autotuner, over a config list the tuner emitted: the forward under
``@triton.autotune``, the backward under :class:`AutotunedBackward`, which does the same for a whole
backward call (several kernels, so ``@triton.autotune``, one kernel, cannot choose its config).

``kernel/triton/configs_h200.py`` and ``kernel/triton/configs_h200_knobs.py`` are the lists
``python -m tuner.emit`` wrote after the H200 sweeps of the article's study (D=64, N=512
to 4096, plain kernel) and of ``hopper_knobs`` (D=64 and 128 at N=4096, with TMA, warp
specialization, register caps and a persistent grid); the entry point uses both. Paste
your own GPU's list in their place. Triton times
every config of the list on the first call for each new key (lengths, head dim,
causal, dtype) and keeps the fastest. Later calls with the same input layout skip the
autotuner and the JIT and launch the chosen binary directly (the launch plans of
:mod:`kernel.triton.launch`).

    from kernel.triton.autotune import flash_attn_fwd_autotuned
    out, lse = flash_attn_fwd_autotuned(q, k, v, causal=True)

:class:`AutotunedBackward`, on the first call for each key (lengths, head dim, causal, dtype),
times every config of its list with ``triton.testing.do_bench`` (median), keeps the fastest, and
launches it from then on; a config the compiler or the launcher refuses is timed as infinitely
slow, as ``@triton.autotune`` scores it. Paste ``python -m tuner.emit --pass bwd``'s ``CONFIGS``:

    from kernel import flash_attention
    from kernel.triton.autotune import AutotunedBackward
    from my_configs import CONFIGS
    out = flash_attention(q, k, v, causal=True, bwd_config=AutotunedBackward(CONFIGS))
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import triton

from kernel.arch import interpreting
from kernel.triton import configs_h200, configs_h200_knobs
from kernel.triton.bwd import BwdConfig
from kernel.triton.bwd_launch import bwd_plan_for
from kernel.triton.fwd import JIT_KERNEL, KNOB_CONSTEXPRS, plan_for
from kernel.triton.launch import use_tma_allocator

__all__ = ["AutotunedBackward", "AutotunedFlashAttention", "flash_attn_fwd_autotuned"]


def _without_tma_at_length_one(configs, named_args, **_):
    """A length of 1 is a constant to the JIT, and Triton 3.6's Hopper pipeliner fails on TMA
    descriptors then: such calls choose among the list's configs without TMA (all of them if none)."""
    if 1 not in (named_args.get("N_Q"), named_args.get("N_K")):
        return configs
    return [c for c in configs if not c.kwargs.get("TMA")] or configs


def _timed(kernel_call, quantiles):
    """``@triton.autotune``'s timer: Triton's own (the driver's benchmarker) on a GPU. Under the interpreter, with
    no driver to time with (Triton raises "0 active drivers") nor a clock worth timing, every config scores the
    same, so the list's first is chosen, as :class:`AutotunedBackward` does there."""
    if interpreting():
        return [0.0] * len(quantiles)
    return triton.runtime.driver.active.get_benchmarker()(kernel_call, quantiles=quantiles)


class AutotunedFlashAttention:
    """``flash_attn_fwd`` whose tiles, warps and stages come from ``@triton.autotune``.

    Args:
        configs: ``triton.Config`` objects with BLOCK_M and BLOCK_N as kwargs, and optionally
            the knobs TMA, WARP_SPEC and PERSISTENT (and ``maxnreg``), as ``tuner.emit`` writes them.
        key: kernel argument names whose change triggers re-tuning.
    """

    def __init__(self, configs: Sequence[triton.Config], key: Sequence[str]):
        knobs = {name for name, _ in KNOB_CONSTEXPRS}
        for config in configs:
            if not {"BLOCK_M", "BLOCK_N"} <= set(config.kwargs) <= {"BLOCK_M", "BLOCK_N"} | knobs:
                raise ValueError(f"each config must set BLOCK_M and BLOCK_N, and may set {sorted(knobs)}; "
                                 f"got {config.kwargs}")
        if any(config.kwargs.get("TMA") for config in configs):
            use_tma_allocator()                     # device-side descriptors need global scratch
        self.kernel = triton.autotune(configs=list(configs), key=list(key), do_bench=_timed,
                                      prune_configs_by={"early_config_prune": _without_tma_at_length_one})(JIT_KERNEL)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, *,
                 out: torch.Tensor | None = None, lse: torch.Tensor | None = None):
        """Same arguments and returns as :func:`kernel.flash_attn_fwd`, without the config."""
        return plan_for(self.kernel, None, q, k, v, causal, out, lse)(q, k, v, out, lse)


flash_attn_fwd_autotuned = AutotunedFlashAttention(configs_h200.CONFIGS + configs_h200_knobs.CONFIGS,
                                                   configs_h200.KEY)


class AutotunedBackward:
    """:func:`kernel.flash_attn_bwd` with its config chosen per key from ``configs``.

    Args:
        configs: :class:`~kernel.triton.bwd.BwdConfig` s, as ``tuner.emit --pass bwd`` writes them.
        warmup_ms, rep_ms: ``do_bench``'s windows for each config on the first call of a key.
    """

    def __init__(self, configs: Sequence[BwdConfig], warmup_ms: int = 10, rep_ms: int = 40):
        configs = list(configs)
        if not configs or not all(isinstance(c, BwdConfig) for c in configs):
            raise ValueError(f"configs must be a non-empty list of kernel.BwdConfig; got {configs!r:.200}")
        self.configs, self.warmup_ms, self.rep_ms = configs, warmup_ms, rep_ms
        self.best: dict[tuple, BwdConfig] = {}
        self.timings: dict[tuple, dict[BwdConfig, float]] = {}

    @staticmethod
    def key(q: torch.Tensor, k: torch.Tensor, causal: bool) -> tuple:
        """What a choice depends on: the lengths, the head dim, causal and the dtype."""
        return q.shape[-2], k.shape[-2], q.shape[-1], bool(causal), q.dtype

    def chosen(self, q: torch.Tensor, k: torch.Tensor, causal: bool) -> BwdConfig:
        """The config chosen for this key (after the first call with it)."""
        return self.best[self.key(q, k, causal)]

    def _time(self, config: BwdConfig, arguments: tuple) -> float:
        import triton.testing

        try:
            _backward(config, *arguments)
            return float(triton.testing.do_bench(lambda: _backward(config, *arguments),
                                                 warmup=self.warmup_ms, rep=self.rep_ms, return_mode="median"))
        except (RuntimeError, ValueError, TypeError) as exc:    # refused by the compiler, the launcher or a check
            if "CUDA" in str(exc) and "out of resource" not in str(exc):
                raise
            return math.inf

    def __call__(self, dout, q, k, v, out, lse, causal: bool = False, **grads):
        """Same arguments and returns as :func:`kernel.flash_attn_bwd`, without the config."""
        key = self.key(q, k, causal)
        if key not in self.best:
            arguments = (dout, q, k, v, out, lse, causal)
            if interpreting() or not q.is_cuda:
                self.best[key] = self.configs[0]             # no clock worth timing with: the list's first
            else:
                times = {config: self._time(config, arguments) for config in self.configs}
                self.timings[key] = times
                self.best[key] = min(times, key=times.get)   # the winner: the best median, as @triton.autotune's
        return _backward(self.best[key], dout, q, k, v, out, lse, causal, **grads)


def _backward(config: BwdConfig, dout, q, k, v, out, lse, causal, dq=None, dk=None, dv=None):
    """:func:`kernel.flash_attn_bwd` at ``config``: a call that names a config, which never routes."""
    return bwd_plan_for(config, dout, q, k, v, out, lse, causal, (dq, dk, dv))(dout, q, k, v, out, lse, dq, dk, dv)

"""The kernel under ``@triton.autotune``, over a config list the tuner emitted.

``kernel/configs_h200.py`` and ``kernel/configs_h200_knobs.py`` are the lists
``python -m tuner.emit`` wrote after the H200 sweeps of the article's study (D=64, N=512
to 4096, plain kernel) and of ``hopper_knobs`` (D=64 and 128 at N=4096, with TMA, warp
specialization, register caps and a persistent grid); the entry point uses both. Paste
your own GPU's list in their place. Triton times
every config of the list on the first call for each new key (lengths, head dim,
causal, dtype) and keeps the fastest. Later calls with the same input layout skip the
autotuner and the JIT and launch the chosen binary directly (the launch plans of
:mod:`kernel.launch`).

    from kernel.autotuned import flash_attn_fwd_autotuned
    out, lse = flash_attn_fwd_autotuned(q, k, v, causal=True)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton

from kernel import configs_h200, configs_h200_knobs
from kernel.flash_fwd import JIT_KERNEL, KNOB_CONSTEXPRS, plan_for
from kernel.launch import use_tma_allocator


def _without_tma_at_length_one(configs, named_args, **_):
    """A length of 1 is a constant to the JIT, and Triton 3.6's Hopper pipeliner fails on TMA
    descriptors then: such calls choose among the list's configs without TMA (all of them if none)."""
    if 1 not in (named_args.get("N_Q"), named_args.get("N_K")):
        return configs
    return [c for c in configs if not c.kwargs.get("TMA")] or configs


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
        self.kernel = triton.autotune(configs=list(configs), key=list(key),
                                      prune_configs_by={"early_config_prune": _without_tma_at_length_one})(JIT_KERNEL)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, *,
                 out: torch.Tensor | None = None, lse: torch.Tensor | None = None):
        """Same arguments and returns as :func:`kernel.flash_attn_fwd`, without the config."""
        return plan_for(self.kernel, None, q, k, v, causal, out, lse)(q, k, v, out, lse)


flash_attn_fwd_autotuned = AutotunedFlashAttention(configs_h200.CONFIGS + configs_h200_knobs.CONFIGS,
                                                   configs_h200.KEY)

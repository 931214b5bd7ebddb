"""The backward under an autotuner, over a config list the tuner emitted.

The backward runs several kernels per call, so ``@triton.autotune`` (one kernel) cannot
choose its config; :class:`AutotunedBackward` does what it does, for the whole call: on the
first call for each key (lengths, head dim, causal, dtype) it times every config of the
list with ``triton.testing.do_bench`` (median), keeps the fastest, and launches it from
then on. A config the compiler or the launcher refuses is timed as infinitely slow, as
``@triton.autotune`` scores it. Paste ``python -m tuner.emit --pass bwd``'s ``CONFIGS``:

    from kernel import flash_attention
    from kernel.bwd_autotune import AutotunedBackward
    from my_configs import CONFIGS
    out = flash_attention(q, k, v, causal=True, bwd_config=AutotunedBackward(CONFIGS))
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from kernel.backward import flash_attn_bwd
from kernel.flash_bwd import BwdConfig
from kernel.launch import interpreting

__all__ = ["AutotunedBackward"]


class AutotunedBackward:
    """:func:`kernel.flash_attn_bwd` with its config chosen per key from ``configs``.

    Args:
        configs: :class:`~kernel.flash_bwd.BwdConfig` s, as ``tuner.emit --pass bwd`` writes them.
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
            flash_attn_bwd(*arguments, config=config)
            return float(triton.testing.do_bench(lambda: flash_attn_bwd(*arguments, config=config),
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
        return flash_attn_bwd(dout, q, k, v, out, lse, causal, config=self.best[key], **grads)

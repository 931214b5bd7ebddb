"""The Gluon forward under an autotuner, over a config list the tuner emitted.

``@triton.autotune`` tunes a Triton kernel's constexprs; the Gluon forward's configs are launcher
choices (the partitions, the grid, the register split), so :class:`AutotunedGluonForward` does what
it does for the whole call: on the first call for each key (lengths, head dim, causal, dtype) it
times every config of the list with ``triton.testing.do_bench`` (median), keeps the fastest, and
launches it from then on. A config the compiler or the launcher refuses is timed as infinitely
slow, as ``@triton.autotune`` scores it. Paste ``python -m tuner.emit --study hopper_gluon``'s
``CONFIGS``:

    from kernel.gluon.fwd.autotune import AutotunedGluonForward
    from my_configs import CONFIGS
    forward = AutotunedGluonForward(CONFIGS)
    out, lse = forward(q, k, v, causal=True)
    out = kernel.flash_attention(q, k, v, True, fwd=forward)       # in training
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict

import torch

from kernel.gluon.fwd.config import GluonConfig

__all__ = ["AutotunedGluonForward"]


class AutotunedGluonForward:
    """:func:`kernel.gluon.fwd.launch.flash_attn_fwd_gluon` with its config chosen per key from ``configs``.

    Args:
        configs: :class:`~kernel.gluon.fwd.config.GluonConfig` s, as ``tuner.emit`` writes them.
        warmup_ms, rep_ms: ``do_bench``'s windows for each config on the first call of a key.
    """

    def __init__(self, configs: Sequence[GluonConfig], warmup_ms: int = 10, rep_ms: int = 40):
        configs = list(configs)
        if not configs or not all(isinstance(c, GluonConfig) for c in configs):
            raise ValueError("configs must be a non-empty list of kernel.gluon.fwd.config.GluonConfig; "
                             f"got {configs!r:.9}")
        self.configs, self.warmup_ms, self.rep_ms = configs, warmup_ms, rep_ms
        self.best: dict[tuple, GluonConfig] = {}
        self.timings: dict[tuple, dict[GluonConfig, float]] = {}

    @staticmethod
    def key(q: torch.Tensor, k: torch.Tensor, causal: bool) -> tuple:
        """What a choice depends on: the lengths, the head dim, causal and the dtype."""
        return q.shape[-2], k.shape[-2], q.shape[-1], bool(causal), q.dtype

    def chosen(self, q: torch.Tensor, k: torch.Tensor, causal: bool) -> GluonConfig:
        """The config chosen for this key (after the first call with it)."""
        return self.best[self.key(q, k, causal)]

    @staticmethod
    def _launch(config: GluonConfig, q, k, v, causal, out=None, lse=None):
        from kernel.gluon.fwd.launch import flash_attn_fwd_gluon

        return flash_attn_fwd_gluon(q, k, v, causal, **asdict(config), out=out, lse=lse)

    def _time(self, config: GluonConfig, q, k, v, causal) -> float:
        import triton.testing

        try:
            self._launch(config, q, k, v, causal)
            return float(triton.testing.do_bench(lambda: self._launch(config, q, k, v, causal),
                                                 warmup=self.warmup_ms, rep=self.rep_ms, return_mode="median"))
        except (RuntimeError, ValueError, TypeError) as exc:    # refused by the compiler, the launcher or a check
            if "CUDA" in str(exc) and "out of resource" not in str(exc):
                raise
            return math.inf

    def __call__(self, q, k, v, causal: bool = False, *, out=None, lse=None):
        """Same arguments and returns as :func:`kernel.flash_attn_fwd` without a config: ``(out, lse)``."""
        key = self.key(q, k, causal)
        if key not in self.best:
            times = {config: self._time(config, q, k, v, causal) for config in self.configs}
            self.timings[key] = times
            self.best[key] = min(times, key=times.get)       # the winner: the best median, as @triton.autotune's
        return self._launch(self.best[key], q, k, v, causal, out, lse)

"""The attention problem a config is compiled, checked and timed for: one shape of a study."""

from __future__ import annotations

from dataclasses import dataclass

from kernel import DTYPES, HEAD_DIMS

__all__ = ["DTYPE_BYTES", "HEAD_DIMS", "Problem"]

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


@dataclass(frozen=True)
class Problem:
    """Batch, heads, lengths, head dim, dtype and causality (the JIT specialises on them)."""

    batch: int = 4
    heads: int = 8
    n_q: int = 4096
    n_k: int = 4096
    head_dim: int = 64
    dtype: str = "bf16"
    causal: bool = False

    @property
    def torch_dtype(self):
        """The torch dtype named by ``dtype`` (the inverse of ``kernel.DTYPES``)."""
        return {name: dtype for dtype, name in DTYPES.items()}[self.dtype]

    @property
    def element_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def label(self) -> str:
        return (f"B{self.batch} H{self.heads} Nq{self.n_q} Nk{self.n_k} D{self.head_dim} "
                f"{self.dtype}{' causal' if self.causal else ''}")

"""The attention problem a config is compiled, checked and timed for: one shape of a study."""

from __future__ import annotations

import re
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
    def label(self) -> str:
        return (f"B{self.batch} H{self.heads} Nq{self.n_q} Nk{self.n_k} D{self.head_dim} "
                f"{self.dtype}{' causal' if self.causal else ''}")

    @classmethod
    def from_label(cls, label: str) -> Problem:
        """The inverse of :attr:`label`.

        Raises:
            ValueError: not a label that :attr:`label` writes.
        """
        found = re.fullmatch(r"B(\d+) H(\d+) Nq(\d+) Nk(\d+) D(\d+) (fp32|fp16|bf16)( causal)?", label.strip())
        if not found:
            raise ValueError(f"{label!r} is not a shape label such as 'B4 H8 Nq4096 Nk4096 D64 bf16 causal'")
        b, h, n_q, n_k, d = (int(found.group(i)) for i in range(1, 6))
        return cls(b, h, n_q, n_k, d, found.group(6), bool(found.group(7)))

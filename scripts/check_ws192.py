"""Issue 25: the 192-row ws forward (three consumers) against the flash-attention rule at D=64, on
ragged, non-square and causal shapes, a last query tile with one valid row, one key, and [B, N, D].
``python scripts/check_ws192.py`` on a Hopper GPU; one line per case, exit 1 if any was wrong."""

import sys

import torch

from kernel.gluon.fwd.launch import flash_attn_fwd_gluon
from kernel.reference import accuracy

CASES = [(1, 2, 256, 256), (2, 4, 193, 257), (2, 3, 385, 129), (1, 2, 1, 1), (1, 1, 16, 16), (3, 2, 577, 1000),
         (2, 0, 449, 300)]      # (B, H or 0 for [B, N, D], N_q, N_k); 193 = 192 + 1, 385 = 2 * 192 + 1


def main() -> int:
    failed = 0
    for persistent in (0, 1):
        for b, h, n_q, n_k in CASES:
            for causal in (False, True):
                shape_q, shape_k = ((b, n_q, 64), (b, n_k, 64)) if h == 0 else ((b, h, n_q, 64), (b, h, n_k, 64))
                torch.manual_seed(n_q * 7 + n_k)
                q = torch.randn(shape_q, device="cuda", dtype=torch.bfloat16)
                k, v = (torch.randn(shape_k, device="cuda", dtype=torch.bfloat16) for _ in range(2))
                out = torch.full_like(q, float("nan"))
                lse = torch.full(q.shape[:-1], float("nan"), device="cuda")
                flash_attn_fwd_gluon(q, k, v, causal, variant="ws", block_m=192, pingpong=False, overlap=False,
                                     consumer_regs=152, persistent=persistent, out=out, lse=lse)
                torch.cuda.synchronize()
                result = accuracy(out, lse, q, k, v, causal)
                failed += not result.ok
                print(f"persistent={persistent} B{b} H{h} {n_q}x{n_k} causal={causal}: "
                      f"{'ok' if result.ok else 'WRONG ' + result.reason}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

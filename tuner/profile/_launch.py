"""The program Nsight Compute runs: one attention call of one target, profiled alone.

``python -m tuner.profile._launch '{"target": "ours", "shape": {...}, "config": {...}}'``

It launches the target once to compile and warm it, then once more between
``cudaProfilerStart`` and ``cudaProfilerStop``: ncu, started with
``--profile-from-start off``, profiles only the kernels of that second call. Inputs are
random with a fixed seed, so every target of a shape sees the same Q, K and V. The
outputs are preallocated before the profiled range, so no allocation or fill kernel
lands in it. Prints one JSON line: what ran, for the parent to check.
"""

from __future__ import annotations

import json
import sys

TARGETS = ("ours", "flash", "cudnn")


def _call(target: str, q, k, v, causal: bool, config: dict, out, lse):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if target == "ours":
        from kernel import flash_attn_fwd

        return lambda: flash_attn_fwd(q, k, v, causal, **config, out=out, lse=lse)
    from kernel.timing import SDPA_BACKENDS

    backend = getattr(SDPBackend, SDPA_BACKENDS[target])

    def sdpa():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return sdpa


def main(argv=None) -> int:
    import torch

    from tuner.problem import Problem

    request = json.loads((argv if argv is not None else sys.argv[1:])[0])
    target, shape = request["target"], Problem(**request["shape"])
    if target not in TARGETS:
        print(f"unknown target {target!r}; one of {', '.join(TARGETS)}", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    dtype = shape.torch_dtype
    q = torch.randn(shape.batch, shape.heads, shape.n_q, shape.head_dim, device="cuda", dtype=dtype)
    k, v = (torch.randn(shape.batch, shape.heads, shape.n_k, shape.head_dim, device="cuda", dtype=dtype)
            for _ in range(2))
    out, lse = torch.empty_like(q), torch.empty(q.shape[:-1], device="cuda", dtype=torch.float32)
    call = _call(target, q, k, v, shape.causal, request.get("config") or {}, out, lse)
    call()                                   # compile, pick the backend's kernel, warm the caches
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(json.dumps({"launched": target, "shape": shape.label, "device": torch.cuda.get_device_name()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Cross-compiling the Gluon backward for sm_90 without a GPU (the tests' and the benchmark's).

As ``kernel.gluon.fwd.compile`` does for the forward: the JIT's own binder and ``_pack_args`` run
on CPU stand-ins of a launch's tensors, so the compile is specialised as a real launch would be
(16-byte aligned pointers and integers divisible by 16 get ``tt.divisibility``, integers equal
to 1 become constants). :func:`compile_report` adds what the checks read: PTX markers, ptxas
warnings, registers and stack (spills) of the cubin.

    python -m kernel.gluon.bwd.compile < cases.json     # a JSON list of compile_report()s
"""

from __future__ import annotations

import torch

from kernel.gluon.bwd.config import GluonBwdConfig, smem_bytes
from kernel.gluon.fwd.compile import TARGET_ARCH, CompileInputs, bound_inputs, ptxas_warnings, resource_usage

PTX_MARKERS = {"wgmma": "wgmma.mma_async", "tma": "cp.async.bulk.tensor", "reduce": "cp.reduce.async.bulk",
               "mbarrier": "mbarrier.try_wait", "setmaxnreg": "setmaxnreg"}


def stand_in_launch(config: GluonBwdConfig, head_dim: int, causal: bool, n_q: int, n_k: int, batch: int = 2,
                    heads: int = 3, dtype: torch.dtype = torch.bfloat16):
    """(kernel, arguments, constexprs, options) of a launch on CPU stand-ins of contiguous tensors."""
    from kernel.gluon.bwd.launch import launch_arguments

    q, do = (torch.empty(batch, heads, n_q, head_dim, dtype=dtype) for _ in range(2))
    k, v, dk, dv = (torch.empty(batch, heads, n_k, head_dim, dtype=dtype) for _ in range(4))
    dq_acc = torch.empty(batch, heads, n_q, head_dim, dtype=torch.float32)
    lse = torch.empty(batch, heads, n_q, dtype=torch.float32)
    delta = torch.empty(batch * heads * n_q, dtype=torch.float32)
    return launch_arguments(q, k, v, do, dq_acc, dk, dv, lse, delta, config, causal)


def compile_inputs(config: GluonBwdConfig, head_dim: int, causal: bool, n_q: int, n_k: int, **shape) -> CompileInputs:
    """The compile inputs of a launch on contiguous [B, H, N, D] stand-ins, as the JIT makes them."""
    return bound_inputs(*stand_in_launch(config, head_dim, causal, n_q, n_k, **shape))


def cross_compile(config: GluonBwdConfig, head_dim: int, causal: bool, n_q: int = 1024, n_k: int = 1024, **shape):
    """Compile for sm_90 on any machine; the CompiledKernel. RuntimeError where Gluon cannot."""
    import triton
    from triton.backends.compiler import GPUTarget

    from kernel.gluon.api import gluon_api_support

    reason = gluon_api_support()
    if reason is not None:
        raise RuntimeError(reason)
    inputs = compile_inputs(config, head_dim, causal, n_q, n_k, **shape)
    return triton.compile(inputs.source(), target=GPUTarget("cuda", TARGET_ARCH, 32), options=inputs.options)


def compile_report(case: dict) -> dict:
    """Cross-compile ``{"config": {...}, "head_dim", "causal", "n_q", "n_k"}``: shared memory
    (compiled and modelled), PTX markers, setmaxnreg lines, cubin resources, or the error."""
    import re
    from dataclasses import asdict

    config = GluonBwdConfig(**case["config"])
    constants = (case["n_q"] == 1) + (case["n_k"] == 1)          # lengths the JIT makes constants
    report = dict(case, config=asdict(config), model=smem_bytes(config, case["head_dim"], constant_lengths=constants))
    try:
        compiled = cross_compile(config, case["head_dim"], case["causal"], case["n_q"], case["n_k"])
    except Exception as exc:  # reported, not raised: one bad case must not hide the others
        return dict(report, error=f"{type(exc).__name__}: {str(exc).strip()[-2000:]}")
    ptx = compiled.asm["ptx"]
    return dict(report, error=None, shared=compiled.metadata.shared,
                markers={name: marker in ptx for name, marker in PTX_MARKERS.items()},
                regs=sorted(set(re.findall(r"(setmaxnreg\.\w+)\.sync\.aligned\.u32\s+(\d+);", ptx))),
                maxnreg=re.findall(r"\.maxnreg (\d+)", ptx), resources=resource_usage(compiled.asm["cubin"]),
                ptxas_warnings=ptxas_warnings(ptx))


def main(argv=None) -> int:
    """Reads a JSON list of cases on stdin, writes the list of reports (outside TRITON_INTERPRET)."""
    import json
    import sys

    cases = json.load(sys.stdin)
    json.dump([compile_report(case) for case in cases], sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

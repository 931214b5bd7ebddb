"""A/B on the GPU: the forward's binary with its lengths unspecialised against the one that
specialises them (``do_not_specialize=["BH"]``, what the kernel ships), same configs, same rounds.

To run the A/B, set ``kernel.triton.fwd.UNSPECIALISED`` to ``("BH", "N_Q", "N_K")`` first: "new"
is the kernel as it is imported. On 2026-12-01 (H200) the lengths-unspecialised binary was
1.0156 / 1.0104 of the shipped one at N4096 D64 (128x64_w8_s3_tma / causal 128x64_w8_s4_tma),
1.0054 / 1.0037 at D128 (128x128_w8_s2_tma_p1) and 0.9406 with 64x64_w4_s3.

    python scripts/ab_specialise.py        # GPU; prints a Markdown table

Each shape's two binaries of a config and SDPA-cuDNN are captured once and timed in rotating
rounds (:func:`kernel.measure.retime.adaptive_rounds`, 8 rounds, the configs' windows alternating with
SDPA's), and the outputs of the two are compared bit for bit.
"""

from __future__ import annotations

import statistics
import sys

import torch


def _launcher(kernel, config, sets, problem):
    """Calls of ``kernel`` (a JITFunction of the forward's source) on each input set, launched
    directly with the forward's own arguments (``kernel.triton.fwd.kernel_arguments``)."""
    import triton

    from kernel.arch import sm_count
    from kernel.triton.fwd import kernel_arguments
    from kernel.triton.launch import LaunchShape
    from tuner.kernels.triton_fwd import compile_options, knob_constexprs

    shape = LaunchShape.contiguous(problem.batch, problem.heads, problem.n_q, problem.n_k, problem.head_dim)
    tiles, heads = triton.cdiv(problem.n_q, config.block_m), problem.batch * problem.heads
    grid = (min(config.persistent * sm_count(sets[0]["q"].device), tiles * heads), 1) if config.persistent \
        else (tiles, heads)
    constexprs = dict(HEAD_DIM=problem.head_dim, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
                      CAUSAL=problem.causal, **dict(knob_constexprs(config)))
    calls = []
    for t in sets:
        args = [value for _, value in kernel_arguments((t["q"], t["k"], t["v"], t["out"], t["lse"]), shape,
                                                       problem.causal)]
        calls.append(lambda args=args: kernel[grid](*args, **constexprs, **compile_options(config)))
    return calls


def main() -> int:
    import triton

    from benchmarks.vs_sdpa import KERNEL, make_sets
    from kernel.measure.clock import sm_clock
    from kernel.measure.retime import Candidate, adaptive_rounds, all_figures
    from kernel.measure.timing import environment, environment_line, runs, warm_gpu
    from kernel.triton.fwd import JIT_KERNEL
    from kernel.triton.launch import use_tma_allocator
    from tuner.kernels.triton_fwd import FwdConfig
    from tuner.problem import Problem

    if not torch.cuda.is_available():
        print("ab_specialise: no CUDA GPU", file=sys.stderr)
        return 2
    use_tma_allocator()
    kernels = {"new": JIT_KERNEL, "old": triton.runtime.jit.JITFunction(JIT_KERNEL.fn, do_not_specialize=["BH"])}
    print(environment_line(environment()))
    print("\n| shape | config | unspecialised / specialised (paired ratio, median of 8) | spread | same bits |")
    print("|---|---|---|---|---|")
    warm_gpu()
    cases = [(64, False, "128x64_w8_s3_tma"), (64, True, "128x64_w8_s4_tma"), (128, False, "128x128_w8_s2_tma_p1"),
             (128, True, "128x128_w8_s2_tma_p1"), (64, False, "64x64_w4_s3")]
    for head_dim, causal, key in cases:
        problem = Problem(batch=4, heads=8, n_q=4096, n_k=4096, head_dim=head_dim, dtype="bf16", causal=causal)
        sets, config, clock = make_sets(problem), FwdConfig.parse(key), sm_clock()
        candidates, outs = {}, {}
        for name, kernel in kernels.items():
            calls = _launcher(kernel, config, sets, problem)
            sets[0]["out"].fill_(float("nan"))
            calls[0]()
            outs[name] = sets[0]["out"].clone()
            candidates[name] = Candidate(calls, None, clock)
        pinned = KERNEL.baselines(sets, problem)["cudnn"]
        if runs(pinned):
            candidates["sdpa"] = Candidate(pinned[1], pinned[0], clock)
        rounds = adaptive_rounds(candidates, list(kernels), ["sdpa"], (300.0, 50.0, 8, 8))
        figure, per_round = next(iter(all_figures(rounds.samples, ["sdpa"]).items()))
        ratio = [a / b for a, b in zip(per_round["new"], per_round["old"])]
        spread = (max(ratio) - min(ratio)) / statistics.median(ratio)
        print(f"| {problem.label} | {key} | {statistics.median(ratio):.4f} ({figure}) | {100 * spread:.1f}% | "
              f"{torch.equal(outs['new'], outs['old'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

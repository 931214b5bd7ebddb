"""A/B on the GPU: the forward with its lengths unspecialised (today) against the binary that
specialised them (``do_not_specialize=["BH"]`` only, as before), same configs, same rounds.

    python scripts/ab_specialise.py        # GPU; prints a Markdown table

Each shape's two binaries of a config and SDPA-cuDNN are captured once and timed in rotating
rounds (:func:`kernel.retime.adaptive_rounds`, 8 rounds, the configs' windows alternating with
SDPA's), and the outputs of the two are compared bit for bit.
"""

from __future__ import annotations

import statistics
import sys

import torch


def main() -> int:
    import triton

    import kernel.flash_fwd as fwd
    from benchmarks.vs_sdpa import KERNEL, make_sets, set_calls
    from kernel.clock import sm_clock
    from kernel.retime import Candidate, adaptive_rounds, all_figures
    from kernel.timing import environment, environment_line, runs, warm_gpu
    from tuner.kernels.triton_fwd import FwdConfig
    from tuner.problem import Problem

    if not torch.cuda.is_available():
        print("ab_specialise: no CUDA GPU", file=sys.stderr)
        return 2
    new = fwd._flash_fwd_kernel
    old = triton.runtime.jit.JITFunction(new.fn, do_not_specialize=["BH"])
    print(environment_line(environment()))
    print("\n| shape | config | unspecialised / specialised (paired ratio, median of 8) | spread | same bits |")
    print("|---|---|---|---|---|")
    warm_gpu()
    cases = [(64, False, "128x64_w8_s3_tma"), (64, True, "128x64_w8_s4_tma"), (128, False, "128x128_w8_s2_tma_p1"),
             (128, True, "128x128_w8_s2_tma_p1"), (64, False, "64x64_w4_s3")]
    for head_dim, causal, key in cases:
        problem = Problem(batch=4, heads=8, n_q=4096, n_k=4096, head_dim=head_dim, dtype="bf16", causal=causal)
        sets = make_sets(problem)
        config = FwdConfig.parse(key)
        clock = sm_clock()
        candidates, outs = {}, {}
        for name, kernel in (("new", new), ("old", old)):
            fwd._flash_fwd_kernel = kernel      # flash_attn_fwd looks it up per call: capture while patched
            calls = set_calls(sets, problem, config)
            sets[0]["out"].fill_(float("nan"))
            calls[0]()
            outs[name] = sets[0]["out"].clone()
            candidates[name] = Candidate(calls, None, clock)
        fwd._flash_fwd_kernel = new
        same = torch.equal(outs["new"], outs["old"])
        pinned = KERNEL.baselines(sets, problem)["cudnn"]
        if runs(pinned):
            candidates["sdpa"] = Candidate(pinned[1], pinned[0], clock)
        rounds = adaptive_rounds(candidates, ["new", "old"], ["sdpa"], (300.0, 50.0, 8, 8))
        figure, per_round = next(iter(all_figures(rounds.samples, ["sdpa"]).items()))
        ratio = [a / b for a, b in zip(per_round["new"], per_round["old"])]
        spread = (max(ratio) - min(ratio)) / statistics.median(ratio)
        print(f"| {problem.label} | {key} | {statistics.median(ratio):.4f} ({figure}) | {100 * spread:.1f}% | {same} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

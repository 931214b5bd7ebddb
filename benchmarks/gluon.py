"""Benchmark: each Gluon variant against the Triton kernel and SDPA (flash, cuDNN), same run.

    python -m benchmarks.gluon                       # B4 H8 N4096, D 64 and 128, causal and not
    python -m benchmarks.gluon --head-dim 128 --variant ws --markdown docs/results/x.md
    python -m benchmarks.gluon --ablation            # and each variant with one piece taken away
    python -m benchmarks.gluon --smoke --variant ws  # first contact: a few small checked calls
    python -m benchmarks.gluon --variant ws --wide   # and the issue's long shapes (WIDE_CASES)
    python -m benchmarks.gluon --variant ws --head-dim 64 --causal no --shape 4,8,4096 --shape 33,4,4096
    python -m benchmarks.gluon --host                # host µs of every launch path at N512 (gluon_host.py)

Times: each shape's candidates in 5 rounds that measure every one of them once, the order
rotating (:func:`kernel.measure.retime.paired_together`: CUDA-graph replay over input sets that do not
fit in L2, each graph captured once, every candidate's replays alternating with SDPA-cuDNN's in
each window), the median of its rounds; x SDPA-cuDNN is the median of the windows' paired ratios,
each taken cycle by cycle (:func:`kernel.measure.retime.cycle_ratio`; what the bars are judged on).
Baselines in the same run: the Triton kernel at its default config (``triton``, named
explicitly), the default call ``flash_attn_fwd(q, k, v, causal)`` (``default``: the Gluon kernel
where ``kernel.route`` routes it), SDPA's flash and cuDNN backends. Before a variant is
timed its output is checked against SDPA on the same inputs; a variant that fails to compile,
raises or is wrong is reported with the first line of its error and skipped, and the run goes
on. Exits 2 without a GPU.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

import torch

from benchmarks._report import first_line, settle, write_report
from kernel.gluon.api import gluon_support
from kernel.gluon.fwd.config import VARIANTS, default_gluon_config
from kernel.gluon.fwd.launch import flash_attn_fwd_gluon
from kernel.measure.retime import paired_together

SHAPE = dict(batch=4, heads=8, n=4096)
# The other shapes (B, H, N, D, causal), timed with --wide after the B4 H8 N4096 ones.
WIDE_CASES = [(1, 8, 16384, 64, False), (1, 8, 16384, 128, True), (2, 16, 8192, 128, True)]
# What each piece buys: the variants' defaults, then each with one piece taken away (--ablation).
CANDIDATES = {
    "pipelined": ("pipelined", {}),
    "ws": ("ws", {}),
    "pipelined-in-order": ("pipelined", dict(overlap=False)),
    "pipelined-persistent": ("pipelined", dict(persistent=1)),
    "ws-no-pingpong": ("ws", dict(pingpong=False)),
    "ws-in-order": ("ws", dict(overlap=False, pingpong=False)),
    "ws-one-consumer": ("ws", dict(block_m=64)),
    "ws-not-persistent": ("ws", dict(persistent=0)),
    # 192-row tiles over three consumers (no turns; 152 registers each fit the file): FA3's D=64 tile
    "ws-192": ("ws", dict(block_m=192, pingpong=False, consumer_regs=152)),
    "ws-192-in-order": ("ws", dict(block_m=192, pingpong=False, overlap=False, consumer_regs=152)),
    "ws-192-in-order-s3": ("ws", dict(block_m=192, pingpong=False, overlap=False, consumer_regs=152, num_stages=3)),
    "ws-192-in-order-s2": ("ws", dict(block_m=192, pingpong=False, overlap=False, consumer_regs=152, num_stages=2)),
    "ws-192-in-order-p0": ("ws", dict(block_m=192, pingpong=False, overlap=False, consumer_regs=152, persistent=0)),
    "ws-192-in-order-n64": ("ws", dict(block_m=192, block_n=64, pingpong=False, overlap=False, consumer_regs=152)),
}
# Candidates for some head dims only (the others everywhere): three consumers of 152 registers are
# FA3's D=64 tile; at D=128 their accumulators do not fit in those registers (or, at 3 stages,
# their tiles in shared memory).
ONLY_AT = {name: (64,) for name in CANDIDATES if name.startswith("ws-192")}


def runs_at(name: str, head_dim: int) -> bool:
    """Whether candidate ``name`` is timed (and smoke-tested) at ``head_dim``."""
    return head_dim in ONLY_AT.get(name, (head_dim,))


def check_against_sdpa(out, lse, reference) -> str | None:
    """None if ``(out, lse)`` agree with SDPA's output and the Triton kernel's lse, else why not.

    The bound on out is three times the distance between SDPA's flash and cuDNN outputs
    (two correct low-precision results), and at least 2e-3; lse within 1e-3 absolute.
    """
    from kernel.reference import rel_err

    sdpa_out, spread, triton_lse = reference
    if bool(torch.isnan(out).any() or torch.isnan(lse).any()):
        return "NaN in out or lse"
    err, bound = rel_err(out, sdpa_out), max(3 * spread, 2e-3)
    if err > bound:
        return f"out rel err {err:.2e} against SDPA > {bound:.2e}"
    lse_gap = (lse - triton_lse).abs().max().item()
    if lse_gap > 1e-3:
        return f"lse differs from flash_attn_fwd's by {lse_gap:.2e}"
    return None


def _reference(q, k, v, causal):
    """(SDPA-cuDNN out, its distance to SDPA-flash, flash_attn_fwd's lse) on one input set."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernel import default_config, flash_attn_fwd
    from kernel.reference import rel_err

    outs = []
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        try:
            with sdpa_kernel(backend):
                outs.append(F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        except RuntimeError:
            continue
    if not outs:
        outs.append(F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    spread = rel_err(outs[0], outs[-1]) if len(outs) > 1 else 0.0
    # The Triton kernel's lse, by an explicit config: the default call may be the Gluon kernel itself.
    return outs[0], spread, flash_attn_fwd(q, k, v, causal, **default_config(q.shape[-1], causal))[1]


# (D, causal, B, H or 0 for [B, N, D], N_q, N_k, knobs): small calls that reach every code path
# of a variant (persistent loops over several tiles, causal, ragged, [B, N, D], N = 1).
SMOKE_CASES = [
    (64, False, 1, 2, 256, 256, {}),
    (64, True, 4, 8, 2048 + 65, 2048 + 65, dict(persistent=1)),
    (128, False, 2, 0, 129, 1000, {}),
    (128, True, 1, 1, 1, 1, {}),
]


def smoke(name: str) -> int:
    """Run :data:`SMOKE_CASES` on candidate ``name``, one JSON line each as it finishes (a hang
    leaves the last case missing: run this in a subprocess with a timeout); 1 if any was wrong."""
    import json

    from kernel.reference import accuracy

    failed = 0
    for d, causal, b, h, n_q, n_k, knobs in [case for case in SMOKE_CASES if runs_at(name, case[0])]:
        shape_q, shape_k = ((b, n_q, d), (b, n_k, d)) if h == 0 else ((b, h, n_q, d), (b, h, n_k, d))
        q = torch.randn(shape_q, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(shape_k, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        out, lse = torch.full_like(q, float("nan")), torch.full(q.shape[:-1], float("nan"), device="cuda")
        variant, overrides = CANDIDATES[name]
        knobs = {**knobs, **overrides}
        case = dict(variant=name, D=d, causal=causal, shape=[b, h, n_q, n_k], knobs=knobs)
        try:
            flash_attn_fwd_gluon(q, k, v, causal, variant=variant, **knobs, out=out, lse=lse)
            torch.cuda.synchronize()
            result = accuracy(out, lse, q, k, v, causal)
            case.update(ok=result.ok, reason=result.reason)
        except Exception as exc:  # reported: the caller decides
            case.update(ok=False, reason=first_line(exc, 200))
        failed += not case["ok"]
        print(json.dumps(case), flush=True)
    return int(failed > 0)


def make_sets(batch: int, heads: int, n: int, head_dim: int, dtype) -> list[tuple]:
    """(q, k, v, out, lse) sets, as many as keep the timed loop out of L2."""
    from kernel.measure.timing import input_sets

    per_set = 4 * batch * heads * n * head_dim * torch.finfo(dtype).bits // 8
    sets = []
    for _ in range(input_sets(per_set)):
        q, k, v = (torch.randn(batch, heads, n, head_dim, device="cuda", dtype=dtype) for _ in range(3))
        sets.append((q, k, v, torch.empty_like(q), torch.empty(q.shape[:-1], device="cuda", dtype=torch.float32)))
    return sets


def set_calls(sets: list[tuple], causal: bool, config: dict) -> list:
    """One call of :func:`kernel.flash_attn_fwd` (``config``: its keywords; empty: the default call) per set."""
    from kernel import flash_attn_fwd

    return [lambda s=s: flash_attn_fwd(s[0], s[1], s[2], causal, **config, out=s[3], lse=s[4]) for s in sets]


def _baselines(row: dict, sets: list[tuple], head_dim: int, causal: bool) -> dict:
    """Calls of the Triton kernel at its default config (named, so the route cannot take it) and of
    the default call, each run once (a failure leaves its ratio n/a, not the run dead)."""
    from kernel import default_config

    calls = {}
    for name, config in (("triton", default_config(head_dim, causal)), ("default", {})):
        try:
            calls[name] = set_calls(sets, causal, config)
            calls[name][0]()
        except Exception as exc:  # noted in the table
            calls.pop(name, None)
            row["notes"][name] = first_line(exc, 200)
    return calls


HOST_N = 512        # a length at which the GPU keeps up with the host, so host µs show


def host_costs(head_dim: int, causal: bool) -> dict:
    """Host µs per call at B4 H8 N=512: the default call (routed), the Triton kernel named, SDPA-cuDNN."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernel import default_config
    from kernel.measure.timing import host_us

    q, k, v, out, lse = make_sets(SHAPE["batch"], SHAPE["heads"], HOST_N, head_dim, torch.bfloat16)[0]
    costs = {name: host_us(call) for name, call in (
        ("default", set_calls([(q, k, v, out, lse)], causal, {})[0]),
        ("triton", set_calls([(q, k, v, out, lse)], causal, default_config(head_dim, causal))[0]))}
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        costs["sdpa_cudnn"] = host_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    return costs


def bench_case(head_dim: int, causal: bool, variants, dtype=torch.bfloat16, shape: dict = SHAPE) -> dict:
    """Times of every variant, flash_attn_fwd and SDPA on one shape; failures as notes."""
    from kernel.measure.timing import attention_flops, runs, sdpa_backends

    sets = make_sets(shape["batch"], shape["heads"], shape["n"], head_dim, dtype)
    reference = _reference(*sets[0][:3], causal)
    row = dict(D=head_dim, causal=causal, ms={}, notes={}, shape=dict(shape))
    calls, pins = _baselines(row, sets, head_dim, causal), {}
    for name, pinned in sdpa_backends([s[:3] for s in sets], causal).items():
        if runs(pinned):
            pins[f"sdpa_{name}"], calls[f"sdpa_{name}"] = pinned
    row["notes"].update({name: f"not timed at D={head_dim}" for name in variants if not runs_at(name, head_dim)})
    for name in [name for name in variants if runs_at(name, head_dim)]:
        variant, overrides = CANDIDATES[name]
        config = asdict(default_gluon_config(head_dim, causal, variant)) | overrides
        knobs = {key: value for key, value in config.items() if key != "variant"}
        call = lambda s, variant=variant, knobs=knobs: flash_attn_fwd_gluon(
            s[0], s[1], s[2], causal, variant=variant, **knobs, out=s[3], lse=s[4])
        try:
            call(sets[0])
            torch.cuda.synchronize()
            wrong = check_against_sdpa(sets[0][3], sets[0][4], reference)
            if wrong:
                raise AssertionError(wrong)
            calls[name] = [lambda s=s, call=call: call(s) for s in sets]
        except Exception as exc:  # reported and skipped: the other variants still run
            settle()
            row["notes"][name] = first_line(exc, 200)
            print(f"  D={head_dim} causal={causal} {name}: skipped, {row['notes'][name]}", file=sys.stderr)
    # kernel.measure.retime: the shape's candidates in the same rounds, each paired with SDPA-cuDNN in its windows
    row["ms"], row["vs_cudnn"] = paired_together(calls, pins, "sdpa_cudnn")
    if shape == SHAPE:
        row["host_us"] = host_costs(head_dim, causal)
    flops = attention_flops(shape["batch"], shape["heads"], shape["n"], shape["n"], head_dim, causal)
    row["tflops"] = {name: flops / ms * 1e-9 for name, ms in row["ms"].items() if ms}
    return row


def _ratio(row, ours, other) -> str:
    if other == "sdpa_cudnn" and ours in row.get("vs_cudnn", {}):
        return f"{row['vs_cudnn'][ours]:.2f}"          # the paired ratio
    a, b = row["ms"].get(ours), row["ms"].get(other)
    return f"{b / a:.2f}" if a and b else "n/a"


def table(rows, variants, env_line: str) -> str:
    """Markdown: per shape and variant, TFLOP/s and the speed ratio to each baseline (> 1: faster)."""
    lines = [env_line, "", "bf16; ratio = baseline time / variant time (above 1: the variant is faster); "
             "x flash_attn_fwd: the Triton kernel at its default config; default: the default call; x SDPA-cuDNN: "
             "the median of paired windows (each candidate's replays alternating with cuDNN's, taken cycle by "
             "cycle).", "",
             "| shape | D | causal | variant | ms | TFLOP/s | x flash_attn_fwd | x SDPA-flash | x SDPA-cuDNN | note |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        shape = row.get("shape", SHAPE)
        for variant in [*variants, "default"]:
            ms = row["ms"].get(variant)
            lines.append(
                f"| B{shape['batch']} H{shape['heads']} N{shape['n']} | {row['D']} | "
                f"{'yes' if row['causal'] else 'no'} | {variant} | "
                f"{f'{ms:.4f}' if ms else 'n/a'} | {row['tflops'].get(variant, 0):.0f} | "
                f"{_ratio(row, variant, 'triton')} | {_ratio(row, variant, 'sdpa_flash')} | "
                f"{_ratio(row, variant, 'sdpa_cudnn')} | {row['notes'].get(variant, '')} |")
    lines += ["", "Baselines (ms): " + "; ".join(
        f"D{r['D']}{' causal' if r['causal'] else ''}: " + ", ".join(
            f"{name} {ms:.4f}" for name, ms in r["ms"].items() if name not in variants and ms) for r in rows)]
    lines += ["", f"Host µs per call at B4 H8 N{HOST_N}: " + "; ".join(
        f"D{r['D']}{' causal' if r['causal'] else ''}: " + ", ".join(
            f"{name} {us:.1f}" for name, us in r["host_us"].items()) for r in rows if r.get("host_us"))]
    return "\n".join(lines)


def shape_arg(text: str) -> dict:
    """``--shape B,H,N`` (e.g. 33,4,4096) as a shape dict; argparse reports a bad one and exits 2."""
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"--shape {text!r}: expected BATCH,HEADS,N, three positive integers "
                                         "(e.g. 33,4,4096)")
    return dict(zip(("batch", "heads", "n"), map(int, parts)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gluon", description=__doc__.splitlines()[0])
    parser.add_argument("--head-dim", type=int, action="append", choices=(64, 128), help="only these (repeatable)")
    parser.add_argument("--variant", action="append", choices=list(CANDIDATES),
                        help="only these variants (repeatable; default: pipelined and ws)")
    parser.add_argument("--ablation", action="store_true", help="every variant with each piece taken away too")
    parser.add_argument("--causal", choices=("yes", "no", "both"), default="both")
    parser.add_argument("--markdown", help="also write the table here")
    parser.add_argument("--smoke", action="store_true", help="only a few small checked calls per variant (JSON lines)")
    parser.add_argument("--wide", action="store_true", help="also the issue's long shapes (B1 H8 N16384, B2 H16 N8192)")
    parser.add_argument("--shape", type=shape_arg, action="append",
                        help="BATCH,HEADS,N instead of B4 H8 N4096 (repeatable), e.g. --shape 33,4,4096")
    parser.add_argument("--host", action="store_true",
                        help="only host µs per call of every launch path, and GPU ms, at short lengths (gluon_host)")
    parser.add_argument("--host-n", type=int, action="append", help="--host at these lengths (repeatable; default 512)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("python -m benchmarks.gluon needs a CUDA GPU (an sm_90 H100/H200 with Triton 3.6): it times the "
              "Gluon kernels against SDPA. Without one, run "
              "`pytest tests/kernel/gluon/fwd/test_gluon.py -m 'not gpu'`.",
              file=sys.stderr)
        return 2
    reason = gluon_support()
    if reason is not None:
        print(f"python -m benchmarks.gluon: the Gluon forward cannot run here: {reason}", file=sys.stderr)
        return 2
    variants = list(CANDIDATES) if args.ablation else args.variant or list(VARIANTS)
    if args.smoke:
        return max(smoke(name) for name in variants)
    causals = {"yes": [True], "no": [False], "both": [False, True]}[args.causal]
    if args.host:
        from benchmarks.gluon_host import run_host

        return run_host(args.head_dim, causals, args.host_n, args.markdown)
    from kernel.measure.timing import environment, environment_line, warm_gpu

    env = environment()
    warm_gpu()
    rows = []
    cases = [(d, c, shape) for shape in args.shape or [SHAPE] for d in args.head_dim or [64, 128] for c in causals]
    cases += [(d, c, dict(batch=b, heads=h, n=n)) for b, h, n, d, c in WIDE_CASES] if args.wide else []
    for head_dim, causal, shape in cases:
        rows.append(bench_case(head_dim, causal, variants, shape=shape))
        print(f"{shape} D={head_dim} causal={causal}: " + ", ".join(
            f"{k} {v:.4f} ms" for k, v in rows[-1]["ms"].items() if v), flush=True)
    text = table(rows, variants, environment_line(env))
    print(text)
    write_report(args.markdown, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

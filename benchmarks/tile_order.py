"""The causal tile order in groups of heads against the order across every head (issue 39), side by side.

The Gluon kernels take causal tiles heaviest first in groups of heads whose inputs fit in the L2
(:mod:`kernel.gluon.schedule`). This times each Gluon candidate of the pass (:mod:`kernel.candidates`)
with that order (``NAME``: the call as a user makes it; forward, at the budget a persistent grid deals out most
evenly, :func:`kernel.gluon.schedule.balanced_budget`), with one group of every head (``NAME/flat``: the order
before groups), at each ``--budget`` asked besides (``NAME/16MB``) and, forward, at the fixed 32 MB
(``NAME/32MB``), with SDPA-cuDNN paired in every window (:func:`kernel.measure.retime.paired_together`).
Each figure is cuDNN's time over the candidate's (above 1: faster than cuDNN); ``grouped/flat`` is the flat
order's time over the grouped one's (above 1: the groups are faster). Causal shapes only: non-causal tiles of a head are
consecutive in both orders.

    python -m benchmarks.tile_order                                  # both passes, the default grid
    python -m benchmarks.tile_order --pass fwd --bh 16x16 --n 1024 --d 64
    python -m benchmarks.tile_order --budget 16 --budget 64 --markdown tile_order.md --json tile_order.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

import torch

from benchmarks._report import write_report
from kernel.gluon.schedule import L2_BYTES

BATCH_HEADS = ((16, 16), (32, 16))
LENGTHS = (512, 1024, 2048, 4096)
HEAD_DIMS = (64, 128)
GLUON = {"fwd": ("ws", "ws_128", "ws_64", "ws_64x64"), "bwd": ("gluon", "gluon_1c")}
FLAT = 2 ** 31 - 1       # a budget every head fits in (one group), yet an int32 in the kernels' arithmetic
MB = 1024 * 1024


def _variants(budgets: list[int], pass_: str = "bwd") -> dict[str, int | None]:
    """suffix -> l2_bytes: the call as made (None), the flat order, each extra budget in MB, and (forward, whose
    call takes the budget a persistent grid deals out most evenly: kernel.gluon.schedule.balanced_budget) the
    fixed budget it had before (``/32MB``)."""
    fixed = {f"/{L2_BYTES // MB}MB": L2_BYTES} if pass_ == "fwd" else {}
    return {"": None, "/flat": FLAT, **fixed, **{f"/{mb}MB": mb * MB for mb in budgets}}


def forward_calls(batch, heads, n, head_dim, budgets) -> tuple[dict, dict]:
    """(name -> calls, name -> SDPA pin): each Gluon forward candidate in each order, and SDPA's backends."""
    from benchmarks.gluon import make_sets
    from benchmarks.route import gluon_set_calls, sdpa_pins, timed_candidates
    from kernel.candidates import FORWARD
    from kernel.gluon.fwd.launch import checked_plan

    sets = make_sets(batch, heads, n, head_dim, torch.bfloat16)
    calls = {}
    for name in timed_candidates("fwd", n, head_dim, True):
        if name not in GLUON["fwd"]:
            continue
        c = FORWARD[name]
        for suffix, l2_bytes in _variants(budgets, "fwd").items():
            if l2_bytes is None:
                calls[name] = gluon_set_calls(sets, True, c.kernel, c.settings)
                continue
            first = sets[0]
            plan = checked_plan(*first[:3], True, c.kernel, c.settings, *first[3:], l2_bytes=l2_bytes)
            calls[name + suffix] = [lambda s=s, plan=plan: plan(*s) for s in sets]
    return calls, sdpa_pins(calls, sets, True)


def backward_calls(batch, heads, n, head_dim, budgets) -> tuple[dict, dict]:
    """The same for the backward: each Gluon backward candidate in each order, and SDPA's backward."""
    from benchmarks.bwd import make_sets
    from benchmarks.route import timed_candidates
    from kernel.candidates import BACKWARD
    from kernel.gluon.bwd.launch import checked_plan, flash_attn_bwd_gluon
    from kernel.measure.timing import runs
    from tuner.kernels.triton_bwd import KERNEL as TUNED_BACKWARD
    from tuner.problem import Problem

    problem = Problem(batch=batch, heads=heads, n_q=n, n_k=n, head_dim=head_dim, dtype="bf16", causal=True)
    sets = make_sets(problem)
    names = ("q", "k", "v", "out", "lse", "dout")
    calls = {}
    for name in timed_candidates("bwd", n, head_dim, True):
        if name not in GLUON["bwd"]:
            continue
        knobs = BACKWARD[name].settings
        for suffix, l2_bytes in _variants(budgets).items():
            if l2_bytes is None:
                calls[name] = [lambda s=s, knobs=knobs: flash_attn_bwd_gluon(*(s[t] for t in names), True, **knobs)
                               for s in sets]
                continue
            plan = checked_plan(*(sets[0][t] for t in names), True, knobs, l2_bytes=l2_bytes)
            calls[name + suffix] = [lambda s=s, plan=plan: plan(*(s[t] for t in names)) for s in sets]
    pins = {}
    for name, pinned in TUNED_BACKWARD.baselines(sets, problem).items():
        if runs(pinned):
            pins[name], calls[name] = pinned
    return calls, pins


def measure(pass_: str, batch: int, heads: int, n: int, head_dim: int, budgets: list[int]) -> dict:
    """One shape's row: every call's ms and paired ratio to cuDNN, the failures' reasons."""
    from benchmarks.route import timed_row

    row = dict(pass_=pass_, B=batch, H=heads, N=n, D=head_dim, causal=True, ms={}, vs_cudnn={}, notes={})
    calls = forward_calls if pass_ == "fwd" else backward_calls
    return timed_row(row, lambda: calls(batch, heads, n, head_dim, budgets))


def report(rows: list[dict], env_line: str, command: str) -> str:
    """Markdown: per shape and candidate, grouped and flat against cuDNN, and the groups' gain."""
    lines = [f"# Causal tile order: groups of heads against one group\n\n{env_line}\n\n`{command}`\n",
             "| pass | shape | candidate | grouped | flat | others | grouped/flat |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        shape = f"B{row['B']} H{row['H']} N{row['N']} D{row['D']} causal"
        ratios, ms = row["vs_cudnn"], row["ms"]
        for name in [n for n in ratios if "/" not in n and n not in ("cudnn", "flash")]:
            others = ", ".join(f"{k.split('/')[1]} {v:.2f}" for k, v in ratios.items()
                               if k.startswith(name + "/") and k != name + "/flat")
            gain = ms.get(name + "/flat", 0) / ms[name] if ms.get(name) else 0
            lines.append(f"| {row['pass_']} | {shape} | {name} | {ratios[name]:.2f} | "
                         f"{ratios.get(name + '/flat', 0):.2f} | {others or '-'} | {gain:.3f} |")
        for name, why in row["notes"].items():
            lines.append(f"| {row['pass_']} | {shape} | {name} | failed: {why} | | | |")
    return "\n".join(lines) + "\n"


def parse(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tile_order", description=__doc__.split("\n\n")[0],
                                     epilog="\n".join(__doc__.split("\n")[-4:]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pass", dest="passes", action="append", choices=("fwd", "bwd"),
                        help="the pass (repeatable; default both)")
    parser.add_argument("--bh", action="append", help="batch x heads, e.g. 16x16 (repeatable; default 16x16, 32x16)")
    parser.add_argument("--n", action="append", type=int, help=f"length (repeatable; default {LENGTHS})")
    parser.add_argument("--d", action="append", type=int, choices=HEAD_DIMS, help="head dim (repeatable)")
    parser.add_argument("--budget", action="append", type=int, default=[],
                        help="another budget to time, in MB (repeatable)")
    parser.add_argument("--markdown", help="write the report here")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    raw = args.bh
    try:
        args.bh = [tuple(int(x) for x in text.lower().split("x")) for text in args.bh] if args.bh else BATCH_HEADS
        assert all(len(bh) == 2 and min(bh) >= 1 for bh in args.bh)
    except (ValueError, AssertionError):
        parser.error(f"--bh {raw!r}: each must be BxH, two positive integers such as 16x16")
    if any(n < 1 for n in args.n or ()) or any(mb < 1 for mb in args.budget):
        parser.error("--n and --budget must be positive integers")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if not torch.cuda.is_available():
        print("python -m benchmarks.tile_order needs a CUDA GPU (sm_90: the Gluon kernels); nothing was timed",
              file=sys.stderr)
        return 2
    from kernel.measure.timing import environment, environment_line, warm_gpu

    command = "python -m benchmarks.tile_order " + shlex.join(sys.argv[1:] if argv is None else argv)
    env_line = environment_line(environment())
    warm_gpu()
    rows = []
    for pass_ in args.passes or ("fwd", "bwd"):
        for batch, heads in args.bh:
            for n in args.n or LENGTHS:
                for d in args.d or HEAD_DIMS:
                    rows.append(measure(pass_, batch, heads, n, d, args.budget))
                    print(json.dumps({k: rows[-1][k] for k in ("pass_", "B", "H", "N", "D")})
                          + " " + " ".join(f"{k}:{v:.3f}" for k, v in rows[-1]["vs_cudnn"].items()), flush=True)
                    write_report(args.markdown, report(rows, env_line, command), args.json, rows)
    print(report(rows, env_line, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())

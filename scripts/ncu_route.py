"""Nsight Compute counters of the route's candidates and SDPA's backends on one shape, side by side.

Run on a GPU machine with ncu (the H200), from the repo root:

    python scripts/ncu_route.py --pass fwd --bh 32x16 --n 512 --d 64 --causal ws_64_p2 ws_128_p1 cudnn

Each target runs in its own ``ncu`` process: this script again with ``--launch``, which calls the
target once to compile and warm it, then once more between ``cudaProfilerStart`` and
``cudaProfilerStop`` (ncu starts with ``--profile-from-start off``). The calls are the ones
``python -m benchmarks.route`` times (``forward_calls``/``backward_calls``), on its first input set.
Prints tuner.profile's metric set and the largest stall reasons per target, plus the SMs'
active share of the elapsed cycles (how much of the launch the tail leaves idle).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EXTRA = {"sm_active_pct": "sm__cycles_active.avg.pct_of_peak_sustained_elapsed",
         "waves": "launch__waves_per_multiprocessor"}


def launch(args) -> int:
    import torch

    from benchmarks.route import backward_calls, forward_calls

    setup = forward_calls if args.pass_ == "fwd" else backward_calls
    calls, pins = setup(args.batch, args.heads, args.n, args.d, args.causal)
    call = calls[args.launch][0]
    if args.launch in pins:
        pin, inner = pins[args.launch], call

        def call():
            with pin():
                return inner()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


def profile(args, target: str) -> dict:
    from tuner.profile._metrics import METRICS, metrics_argument, parse_raw_csv

    ncu = os.environ.get("NCU", "ncu")
    metrics = metrics_argument() + "," + ",".join(EXTRA.values())
    cmd = [ncu, "--csv", "--page", "raw", "--print-units", "base", "--clock-control", "none",
           "--profile-from-start", "off", "--metrics", metrics, sys.executable, os.path.abspath(__file__),
           *args.argv, "--launch", target]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    try:
        kernels = parse_raw_csv(done.stdout)
    except Exception as exc:  # noqa: BLE001 (a target that fails is a row with its reason)
        return {"target": target, "error": f"{exc}: {(done.stdout + done.stderr)[-600:]}"}
    import csv
    import io

    lines = [line for line in done.stdout.splitlines() if not line.startswith("==")]
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    table = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    extra = [{k: row[table[0].index(m)] for k, m in EXTRA.items() if m in table[0]} for row in table[2:]
             if len(row) == len(table[0])]
    rows = []
    for k, more in zip(kernels, extra):
        rows.append({"target": target, "kernel": k.kernel_name[:60], **{f: round(v, 2) for f, v in k.values.items()
                     if f in METRICS}, **more, "stalls": [(s, round(v, 2)) for s, v in k.stalls[:6]]})
    return {"target": target, "kernels": rows}


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n")[1])
    parser.add_argument("--pass", dest="pass_", choices=("fwd", "bwd"), default="fwd")
    parser.add_argument("--bh", default="32x16", help="BxH")
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--launch", help=argparse.SUPPRESS)
    parser.add_argument("targets", nargs="*", help="candidate names (kernel.candidates), default, cudnn, flash")
    args = parser.parse_args(argv)
    args.batch, args.heads = (int(x) for x in args.bh.split("x"))
    args.argv = [a for a in argv if a not in args.targets]
    return args


def main(argv=None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.launch:
        return launch(args)
    for target in args.targets:
        result = profile(args, target)
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time Gluon forward configs beside SDPA-cuDNN on a few shapes (an exploration, not a benchmark).

    python scripts/fwd_explore.py --shape 32,16,512,64,1 --shape 16,16,1024,128,1 \\
        --config 'ws_64_p2' --config '{"block_m": 64, "block_n": 64, "persistent": 3}'

A ``--config`` is a candidate name of :mod:`kernel.candidates` or a JSON object of
:class:`kernel.gluon.fwd.config.GluonConfig` fields over ws's default for the shape's head dim and
mask (the route's ``ws`` candidate). Each shape is one row of ``benchmarks.route.timed_row`` (paired with
cuDNN in one run); configs that cannot run at a shape are noted. Prints one JSON line per shape.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def setup_for(batch, heads, n, head_dim, causal, configs):
    def setup():
        import torch

        from benchmarks.gluon import make_sets
        from benchmarks.route import gluon_set_calls, sdpa_pins
        from kernel.candidates import FORWARD

        sets = make_sets(batch, heads, n, head_dim, torch.bfloat16)
        calls = {}
        for label in configs:
            if label in FORWARD:
                calls[label] = gluon_set_calls(sets, causal, FORWARD[label].kernel, FORWARD[label].settings)
            else:
                calls[label] = gluon_set_calls(sets, causal, "ws", json.loads(label))
        return calls, sdpa_pins(calls, sets, causal, only=("cudnn",))
    return setup


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", action="append", required=True, help="B,H,N,D,causal(0/1)")
    parser.add_argument("--config", action="append", required=True)
    args = parser.parse_args(argv)
    from benchmarks.route import timed_row

    for text in args.shape:
        batch, heads, n, head_dim, causal = (int(x) for x in text.split(","))
        row = dict(B=batch, H=heads, N=n, D=head_dim, causal=bool(causal), ms={}, vs_cudnn={}, notes={})
        timed_row(row, setup_for(batch, heads, n, head_dim, bool(causal), args.config))
        row["ms"] = {k: round(v, 4) for k, v in row["ms"].items()}
        row["vs_cudnn"] = {k: round(v, 3) for k, v in sorted(row["vs_cudnn"].items(), key=lambda kv: -kv[1])}
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

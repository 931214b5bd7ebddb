"""How to re-time finalists so that a config's own rounds agree: an experiment on the GPU.

    python scripts/timing_experiment.py OUT_DIR

Times the five best configs at B4 H8 N4096 D64 bf16 (from the article grids) in 5
rotating rounds, twice, under several protocols, and writes every per-replay time
to OUT_DIR/timing_experiment.json with the spreads of each protocol. It also times
the host cost of each launch path in 5 interleaved rounds. nvidia-smi samples the SM
clock and power meanwhile (OUT_DIR/clocks.csv).
"""

import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from kernel import flash_attn_fwd
from kernel.bench import make_sets, set_calls
from kernel.timing import graph_replay_times, host_us, sdpa_call, warm_gpu
from tuner.finalists import round_orders
from tuner.space import Config

TOP5 = ["128x64_w8_s5", "128x64_w8_s3", "128x64_w8_s6", "128x64_w8_s4", "128x64_w4_s3"]
PROTOCOLS = {"40ms": (40, 0), "warm25+100ms": (100, 25), "warm100+200ms": (200, 100)}


def spreads(times: dict[str, list[float]]) -> dict[str, float]:
    return {k: (max(v) - min(v)) / statistics.median(v) for k, v in times.items()}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    clocks = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
                               "--format=csv", "-lms", "100"], stdout=open(out / "clocks.csv", "w"))  # noqa: SIM115
    sets = make_sets(4, 8, 4096, 64, torch.bfloat16)
    warm_gpu(3)
    raw: dict = {}
    for repeat in range(2):
        for name, (rep, warm) in PROTOCOLS.items():
            per: dict[str, list[list[float]]] = {key: [] for key in TOP5}
            for order in round_orders(TOP5, 5):
                for key in order:
                    calls = set_calls(sets, False, Config.parse(key).as_kwargs())
                    per[key].append(graph_replay_times(calls, rep, warm))
            raw[f"{name}#{repeat}"] = per
    summary = {}
    for label, per in raw.items():
        for estimator in ("median", "min", "p20"):
            def est(values):
                ordered = sorted(values)
                return {"median": statistics.median(ordered), "min": ordered[0],
                        "p20": ordered[len(ordered) // 5]}[estimator]
            rounds = {key: [est(r) for r in per[key]] for key in per}
            summary[f"{label} {estimator}"] = {k: round(100 * v, 2) for k, v in spreads(rounds).items()}
            summary[f"{label} {estimator} medians"] = {k: round(statistics.median(v), 5) for k, v in rounds.items()}
    q, k, v = (torch.randn(4, 8, 512, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    from kernel.autotuned import flash_attn_fwd_autotuned

    config = dict(block_m=128, block_n=64, num_warps=8, num_stages=3)
    paths = {"flash_attn_fwd": lambda: flash_attn_fwd(q, k, v, **config),
             "flash_attn_fwd_autotuned": lambda: flash_attn_fwd_autotuned(q, k, v),
             "sdpa (default backend)": sdpa_call(q, k, v, False),
             "empty op": lambda: q.add_(0)}
    host: dict[str, list[float]] = {name: [] for name in paths}
    for order in round_orders(list(paths), 7):
        for name in order:
            host[name].append(host_us(paths[name], 500, 1))
    summary["host_us"] = {n: {"median": round(statistics.median(v), 1), "min": round(min(v), 1), "all": v}
                          for n, v in host.items()}
    clocks.terminate()
    (out / "timing_experiment.json").write_text(json.dumps({"summary": summary, "raw": raw}))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))

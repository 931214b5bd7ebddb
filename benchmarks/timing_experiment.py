"""How to re-time finalists so that a config's own rounds agree: an experiment on the GPU.

    python -m benchmarks.timing_experiment OUT_DIR

Times the five best configs at B4 H8 N4096 D64 bf16 (from the article grids) in 5
rotating rounds, twice, under several protocols, and writes every per-replay time
to OUT_DIR/timing_experiment.json with the spreads of each protocol. It also times
the host cost of each launch path in 7 interleaved rounds. nvidia-smi samples the SM
clock and power meanwhile (OUT_DIR/clocks.csv). Every round goes through
:func:`kernel.measure.timing.interleaved_rounds`, as the finalists' do.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

TOP5 = ["128x64_w8_s5", "128x64_w8_s3", "128x64_w8_s6", "128x64_w8_s4", "128x64_w4_s3"]
PROTOCOLS = {"40ms": (40, 0), "warm25+100ms": (100, 25), "warm100+200ms": (200, 100)}


def spreads(times: dict[str, list[float]]) -> dict[str, float]:
    return {k: (max(v) - min(v)) / statistics.median(v) for k, v in times.items()}


def _estimate(values: list[float], estimator: str) -> float:
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "min": ordered[0], "p20": ordered[len(ordered) // 5]}[estimator]


def replay_rounds() -> dict:
    """Per protocol and repeat: config key -> every round's list of per-replay times."""
    from benchmarks.vs_sdpa import make_sets, set_calls
    from kernel.measure.timing import interleaved_rounds
    from tuner.kernels.triton_fwd import FwdConfig
    from tuner.problem import Problem

    problem = Problem(4, 8, 4096, 4096, 64, "bf16", False)
    sets = make_sets(problem)
    candidates = {key: set_calls(sets, problem, FwdConfig.parse(key)) for key in TOP5}
    raw: dict = {}
    for repeat in range(2):
        for name, (rep, warm) in PROTOCOLS.items():
            raw[f"{name}#{repeat}"] = interleaved_rounds(
                candidates, 5, measure=lambda calls, rep=rep, warm=warm: graph_replay_times(calls, rep, warm))
    return raw


def graph_replay_times(calls, rep_ms: float, settle_ms: float) -> list[float]:
    """GPU ms per call of each timed replay of a graph of ``calls``, ``settle_ms`` of untimed replays first."""
    from kernel.measure.timing import capture_graph

    captured = capture_graph(calls)
    captured.replay_for(settle_ms)
    return captured.timed(rep_ms)[0]


def host_rounds() -> dict:
    """Host µs per call of each launch path at N=512, 7 interleaved rounds."""
    import torch

    from kernel import flash_attn_fwd
    from kernel.measure.timing import host_us, interleaved_rounds, sdpa_call
    from kernel.triton.autotune import flash_attn_fwd_autotuned

    q, k, v = (torch.randn(4, 8, 512, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    config = dict(block_m=128, block_n=64, num_warps=8, num_stages=3)
    paths = {"flash_attn_fwd": lambda: flash_attn_fwd(q, k, v, **config),
             "flash_attn_fwd_autotuned": lambda: flash_attn_fwd_autotuned(q, k, v),
             "sdpa (default backend)": sdpa_call(q, k, v, False),
             "empty op": lambda: q.add_(0)}
    host = interleaved_rounds({name: [call] for name, call in paths.items()}, 7,
                              measure=lambda calls: host_us(calls[0], 500, 1))
    return {n: {"median": round(statistics.median(v), 1), "min": round(min(v), 1), "all": v} for n, v in host.items()}


def run(out: Path) -> None:
    from kernel.measure.timing import warm_gpu

    out.mkdir(parents=True, exist_ok=True)
    clocks = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
                               "--format=csv", "-lms", "100"], stdout=open(out / "clocks.csv", "w"))  # noqa: SIM115
    warm_gpu(3)
    raw = replay_rounds()
    summary = {}
    for label, per in raw.items():
        for estimator in ("median", "min", "p20"):
            rounds = {key: [_estimate(r, estimator) for r in per[key]] for key in per}
            summary[f"{label} {estimator}"] = {k: round(100 * v, 2) for k, v in spreads(rounds).items()}
            summary[f"{label} {estimator} medians"] = {k: round(statistics.median(v), 5) for k, v in rounds.items()}
    summary["host_us"] = host_rounds()
    clocks.terminate()
    (out / "timing_experiment.json").write_text(json.dumps({"summary": summary, "raw": raw}))
    print(json.dumps(summary, indent=1))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.timing_experiment", description=__doc__.split("\n\n")[0],
        epilog="example:\n  python -m benchmarks.timing_experiment out/timing",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder for timing_experiment.json and clocks.csv")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(f"{parser.prog}: error: no CUDA GPU is visible here, and this times on one", file=sys.stderr)
        return 2
    run(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

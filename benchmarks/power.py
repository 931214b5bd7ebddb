"""Benchmark: configs of the Triton forward run alone for seconds, with the board's power and SM clock.

    python -m benchmarks.power --config 64x64_w4_s4 --config 128x64_w8_s3 --n 4096 --causal
    python -m benchmarks.power --config 128x64_w8_s3 --seconds 5 --rounds 2
    python -m benchmarks.power --config 64x64_w4_s4 --config 128x64_w8_s3 --causal --trace --seconds 1

Why: under its power cap (about 700 W on the H200) a GPU lowers its SM clock, and a config that
spends more energy per cycle of work is clocked lower than another when each runs alone for long.
The finalists' paired windows (kernel.measure.retime) are short and shared with SDPA's replays, and they
cancel the clock; this shows what each config draws and the clock it holds when it runs alone
(issue 24: the finalists' agreement with the old protocol, which times each config alone for
200 ms, on ms). Each config's calls (two input sets) are captured as one CUDA graph and replayed
for ``--seconds``, NVML read every 50 ms; the first third of the samples (the clock settling) is
dropped. Rounds alternate the order. Needs a CUDA GPU and ``nvidia-ml-py``; exits 2 otherwise.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

from tuner.kernels.triton_fwd import FwdConfig


def config_arg(text: str) -> FwdConfig:
    """``--config 128x64_w8_s3`` as the Triton forward's config; argparse reports a bad one (exit 2)."""
    try:
        return FwdConfig.parse(text)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"--config {text!r}: {exc}") from None


def polled(run, clock, interval_s: float) -> list[tuple[float, float | None, float]]:
    """Run ``run()`` while a thread reads NVML through ``clock`` (:func:`kernel.measure.clock.sm_clock`: this
    process's GPU, by its UUID) every ``interval_s``: (ms since the start, SM MHz or None where the
    reading missed, board W) per reading."""
    samples, stop = [], threading.Event()
    start = time.perf_counter()

    def poll():
        while not stop.is_set():
            samples.append((1000 * (time.perf_counter() - start), clock.mhz(),
                            clock.nvml.nvmlDeviceGetPowerUsage(clock.handle) / 1000))
            time.sleep(interval_s)

    thread = threading.Thread(target=poll)
    thread.start()
    try:
        run()
    finally:
        stop.set()
        thread.join()
    return samples


def sustained(graph, seconds: float, clock) -> tuple[float, float, float]:
    """(median ms per replay, mean W, mean SM MHz) over ``seconds`` of replays, NVML read every 50 ms
    (:func:`polled`); the first third of the readings (the clock settling) is left out."""
    timed = []
    samples = polled(lambda: timed.append(graph.timed(seconds * 1000)[0]), clock, 0.05)
    late = samples[len(samples) // 3:] or samples
    return (statistics.median(timed[0]), statistics.fmean(w for _, _, w in late),
            statistics.fmean(m for _, m, _ in late if m is not None))        # a missed reading (None) left out


TRACE_BINS_MS = (0, 10, 25, 50, 75, 100, 150, 200, 300, 500, 1000, 2000)


def transient(graph, seconds: float, clock) -> list[tuple[int, float | None, float | None]]:
    """How the SM clock and board power move after a switch to this config: (bin start ms, mean MHz,
    mean W) over the bins of :data:`TRACE_BINS_MS` from the first replay on, NVML read every 5 ms
    (:func:`polled`; how long a config must run alone before its clock is the one it holds: issue 24)."""
    samples = polled(lambda: graph.replay_for(seconds * 1000), clock, 0.005)
    out = []
    for low, high in zip(TRACE_BINS_MS, TRACE_BINS_MS[1:]):
        inside = [(m, w) for t, m, w in samples if low <= t < high and m is not None]
        if inside:
            out.append((low, statistics.fmean(m for m, _ in inside), statistics.fmean(w for _, w in inside)))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.power", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=config_arg, action="append", required=True,
                        help="a Triton forward config key, e.g. 128x64_w8_s3 (repeatable)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--head-dim", type=int, default=64, choices=(64, 128))
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--seconds", type=float, default=3.0, help="replays per measurement (default 3 s)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trace", action="store_true",
                        help="the clock and power after each switch of config, in bins of ms (not the sustained means)")
    args = parser.parse_args(argv)
    import torch

    from kernel.measure.clock import sm_clock

    clock = sm_clock() if torch.cuda.is_available() else None
    if clock is None:
        print("python -m benchmarks.power needs a CUDA GPU and nvidia-ml-py (pip install -e '.[clocks]'): it reads "
              "the board's power and SM clock while each config runs.", file=sys.stderr)
        return 2
    from kernel import flash_attn_fwd
    from kernel.measure.timing import capture_graph, environment, environment_line
    shape = (args.batch, args.heads, args.n, args.head_dim)
    sets = [tuple(torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3)) for _ in range(2)]
    graphs = {c.key: capture_graph([lambda s=s, c=c: flash_attn_fwd(*s, args.causal, **c.as_kwargs()) for s in sets])
              for c in args.config}
    print(environment_line(environment()))
    print(f"B{args.batch} H{args.heads} N{args.n} D{args.head_dim} bf16{' causal' if args.causal else ''}; "
          + (f"mean SM MHz and board W in bins of ms from each switch of config on, {args.seconds:g} s each"
             if args.trace else f"ms per replay (two calls), mean board W and SM MHz over the last two thirds of "
             f"{args.seconds:g} s"))
    for index in range(args.rounds):
        for key in (list(graphs) if index % 2 == 0 else list(graphs)[::-1]):
            if args.trace:
                bins = transient(graphs[key], args.seconds, clock)
                print(f"round {index + 1}  {key:16s} " + "  ".join(f"{t}ms:{m:.0f}MHz/{w:.0f}W" for t, m, w in bins),
                      flush=True)
                continue
            ms, watts, mhz = sustained(graphs[key], args.seconds, clock)
            print(f"round {index + 1}  {key:16s} ms {ms:.4f}  W {watts:.0f}  MHz {mhz:.0f}  kcycles {ms * mhz:.1f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

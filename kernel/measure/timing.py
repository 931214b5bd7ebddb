"""Stopwatches for the kernel and for SDPA: GPU time without the host, and host time alone.

* :func:`gpu_time` times the GPU work of a call by replaying a CUDA graph of it, so the
  Python launcher (ours or SDPA's) is out of the number at every size. Where a call
  cannot be captured it falls back to ``triton.testing.do_bench`` and says so.
* **L2 policy: cold inputs.** The call is given several input sets (built by the
  caller, see :func:`input_sets`), enough that together they hold at least twice the
  GPU's L2 cache, and the graph cycles through them. Every launch then reads its inputs
  from HBM, as ``do_bench``'s L2 flush made it do, but without a flush in the timed loop.
* :func:`host_us` is the host time per call: the rate at which calls are enqueued,
  back to back, before a single synchronise.
* :func:`interleaved_rounds` times candidates side by side in rounds whose order rotates:
  the one protocol of the finalists, the benchmarks and the experiments.

Both are used the same way for our kernel and for SDPA, so ratios compare like with like.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION"}
GRAPH, DO_BENCH, WALL = "cuda_graph", "do_bench", "wall_clock"
# A graph timed over the first window only (:func:`gpu_time` with ``bound_ms``): slower than the bound there.
GRAPH_SHORT = "cuda_graph_short"
FIRST_WINDOW = 0.25           # the share of ``rep_ms`` a bounded timing takes first (10 replays at least)
MIN_REPLAYS = 10
DEFAULT_L2_BYTES = 50 << 20
MAX_SETS = 64
# (rep_ms, settle_ms) for re-timings that must agree run to run (finalists, stability): on the
# H200 at N=4096, 5 rounds of 40 ms windows spread 2.6-5.6%; 100 ms settled + 200 ms, 0.5-1.6%
# (docs/results/2026-11-30-h200-timing.md).
RETIME = (200.0, 100.0)


def attention_flops(batch: int, heads: int, n_q: int, n_k: int, head_dim: int, causal: bool) -> float:
    """Two matmuls of N_q x N_k x D multiply-adds; causal counts the lower triangle only."""
    flops = 4.0 * batch * heads * n_q * n_k * head_dim
    if causal and n_q * n_k:
        # Kept keys per query i are min(i + 1, N_k), top-left aligned: the sum of 1..min(N_q, N_k), then
        # N_k for each query past N_k (summed in closed form: the dashboards ask it for every row).
        m = min(n_q, n_k)
        kept = m * (m + 1) // 2 + (n_q - m) * n_k
        flops *= kept / (n_q * n_k)
    return flops


def environment() -> dict[str, str]:
    """GPU, versions and date, for every recorded result."""
    import triton

    info = {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "gpu": "none", "driver": "n/a", "cuda": str(torch.version.cuda)}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = f"{props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs)"
        try:
            info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=20).stdout.strip() or "unknown"
        except (OSError, subprocess.SubprocessError):
            info["driver"] = "unknown"
    return info


def environment_line(env: dict[str, str]) -> str:
    """``GPU: ...; driver ...; torch ...; triton ...; date``, the header of every results file."""
    return f"GPU: {env['gpu']}; driver {env['driver']}; torch {env['torch']}; triton {env['triton']}; {env['date']}"


@dataclass(frozen=True)
class Timing:
    """Median GPU time of one call, and how it was taken."""

    ms: float
    method: str
    mhz: float | None = None     # mean SM clock while it was timed (kernel.measure.clock; None without NVML)


def l2_bytes() -> int:
    if not torch.cuda.is_available():
        return DEFAULT_L2_BYTES
    return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or DEFAULT_L2_BYTES)


def input_sets(bytes_per_set: int) -> int:
    """How many input sets make the timed loop read from HBM (at least 2x L2 in all)."""
    return max(1, min(MAX_SETS, math.ceil(2 * l2_bytes() / max(bytes_per_set, 1))))


def do_bench_median(fn: Callable[[], object], warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """Median ms of ``fn`` by ``triton.testing.do_bench``: warm-up, L2 flush, CUDA events."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def _one_pass_ms(calls: Sequence[Callable[[], object]]) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for call in calls:
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


class OnStream(list):
    """Calls that a CUDA graph must capture on one stream: autograd runs each backward op on the
    stream its forward ran on, so a baseline's forwards are made on ``stream`` and its backward
    calls are captured there (:func:`gpu_time` reads ``stream`` off the calls)."""

    def __init__(self, calls: Sequence[Callable[[], object]], stream):
        super().__init__(calls)
        self.stream = stream


@dataclass
class CapturedGraph:
    """A CUDA graph of whole passes over some calls, built once and replayed as often as needed."""

    graph: object
    calls_per_replay: int
    replay_ms: float          # GPU ms of one replay, estimated before the capture

    def replay_for(self, ms: float) -> None:
        """Untimed replays for about ``ms`` (the clock settles), then a synchronise."""
        for _ in range(1 + int(ms / self.replay_ms)):
            self.graph.replay()
        torch.cuda.synchronize()

    def replays_for(self, ms: float) -> int:
        """How many timed replays ``ms`` of them are (:data:`MIN_REPLAYS` to 5000)."""
        return max(MIN_REPLAYS, min(5000, int(ms / self.replay_ms)))

    def timed(self, rep_ms: float, clock=None, replays: int | None = None) -> tuple[list[float], float | None]:
        """(GPU ms per call of each replay, mean SM MHz while they ran): about ``rep_ms`` of replays
        (or ``replays`` of them) timed one by one with CUDA events; the clock
        (:mod:`kernel.measure.clock`) is read while the GPU works through them (None without one)."""
        from kernel.measure.clock import sample_while

        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(replays or self.replays_for(rep_ms))]
        for start, end in events:
            start.record()
            self.graph.replay()
            end.record()
        mhz = sample_while(lambda: not events[-1][1].query(), clock)
        torch.cuda.synchronize()
        return [start.elapsed_time(end) / self.calls_per_replay for start, end in events], mhz

    def timed_pair(self, partner: CapturedGraph, rep_ms: float, clock=None, share: int = 4) -> tuple[
            list[float], list[float], float | None]:
        """(this graph's GPU ms per call of each replay, ``partner``'s, mean SM MHz): about ``rep_ms``
        of replays in all, ``share`` of this graph's then one of the partner's, again and again, each
        timed with CUDA events. The partner runs under the same clock, temperature and power draw
        within milliseconds, and takes a small share of the window, so that the power state the
        clock follows is mostly this graph's own, as when it is timed alone."""
        from kernel.measure.clock import sample_while

        cycle_ms = share * self.replay_ms + partner.replay_ms
        cycles = max(4, min(2000, int(rep_ms / cycle_ms)))
        own, theirs = [], []
        for _ in range(cycles):
            for _ in range(share):
                own.append(self._timed_replay(self.graph))
            theirs.append(self._timed_replay(partner.graph))
        mhz = sample_while(lambda: not theirs[-1][1].query(), clock)
        torch.cuda.synchronize()
        return ([start.elapsed_time(end) / self.calls_per_replay for start, end in own],
                [start.elapsed_time(end) / partner.calls_per_replay for start, end in theirs], mhz)

    @staticmethod
    def _timed_replay(graph) -> tuple:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        return start, end


def capture_graph(calls: Sequence[Callable[[], object]]) -> CapturedGraph:
    """A CUDA graph that cycles through ``calls``: one replay holds whole passes over them worth
    about a millisecond of GPU time, so the gaps between replays are a small share. It captures
    on a new stream, or on ``calls.stream`` where the calls say they must (:class:`OnStream`).

    Raises:
        RuntimeError: the calls cannot be captured (the caller falls back to do_bench).
    """
    side = getattr(calls, "stream", None) or torch.cuda.Stream()   # warm up where the graph captures
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:                   # compile and load outside the capture
            call()
    torch.cuda.synchronize()
    pass_ms = max(min(_one_pass_ms(calls) for _ in range(3)), 1e-4)
    passes = max(1, min(200, round(1.0 / pass_ms)))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        for _ in range(passes):
            for call in calls:
                call()
    return CapturedGraph(graph, passes * len(calls), pass_ms * passes)


def gpu_time(calls: Sequence[Callable[[], object]], rep_ms: float = 40.0, warmup_ms: int = 10,
             settle_ms: float = 0.0, clock=None, bound_ms: float | None = None) -> Timing:
    """GPU time per call by graph replay, or ``do_bench`` where capture fails (see module doc).

    ``clock`` (:func:`kernel.measure.clock.sm_clock`) is read while the timed replays run (``mhz``).
    ``settle_ms`` of untimed replays first: under sustained load an H200 draws its ~700 W
    cap and lowers its clock from 1980 MHz to 1740-1905 MHz within tens of milliseconds,
    so short windows catch it in different states. Re-timings that must agree with
    each other (:data:`RETIME`) settle first and time longer.

    ``bound_ms``: the time past which the figure's precision decides nothing (a sweep's: the
    contenders' margin over the best so far, :mod:`tuner.contenders`). The first
    :data:`FIRST_WINDOW` of the replays are timed; a median past the bound ends there
    (:data:`GRAPH_SHORT`), else the rest are timed and the median is over all of them.
    """
    try:
        return _graph_timing(calls, rep_ms, settle_ms, clock, bound_ms)
    except RuntimeError:
        torch.cuda.synchronize()
        before = clock.mhz() if clock else None
        ms = do_bench_median(calls[0], warmup_ms, int(rep_ms))
        after = clock.mhz() if clock else None
        return Timing(ms, DO_BENCH, statistics.fmean([before, after]) if before and after else None)


def _graph_timing(calls, rep_ms: float, settle_ms: float, clock, bound_ms: float | None) -> Timing:
    """:func:`gpu_time` by graph replay (raises RuntimeError where the calls cannot be captured)."""
    captured = capture_graph(calls)
    captured.replay_for(settle_ms)
    replays = captured.replays_for(rep_ms)
    first = replays if bound_ms is None else min(replays, max(MIN_REPLAYS, int(replays * FIRST_WINDOW)))
    per_call, mhz = captured.timed(rep_ms, clock, first)
    if first < replays and statistics.median(per_call) <= bound_ms:     # a contender there: the rest of the window
        rest, rest_mhz = captured.timed(rep_ms, clock, replays - first)
        mhz = (mhz * first + rest_mhz * (replays - first)) / replays if mhz and rest_mhz else mhz
        per_call, first = per_call + rest, replays
    return Timing(statistics.median(per_call), GRAPH if first == replays else GRAPH_SHORT, mhz)


def host_us(call: Callable[[], object], calls: int = 100, batches: int = 5) -> float:
    """Host microseconds per call: ``calls`` enqueued back to back, timed before one sync.

    The median of ``batches`` such runs; the GPU's own time does not enter as long as
    its queue does not fill (a few hundred launches).
    """
    return host_us_together({"call": call}, per_batch=calls, batches=batches)["call"]


def host_us_together(calls: dict[str, Callable[[], object]], pins: dict | None = None, per_batch: int = 100,
                     batches: int = 15) -> dict[str, float]:
    """:func:`host_us` of every path, their batches interleaved (the order rotating each batch), so a
    slow spell of the host hits them alike: name -> the median of its batches. ``pins``: name -> a
    context (SDPA's backend) entered around each of its batches. Timed one after another, the
    Triton backward's default path came out at 56 to 115 µs on four like shapes of one run (H200 host)."""
    names, samples, pins = list(calls), {name: [] for name in calls}, pins or {}
    for name in names:
        with pins.get(name, contextlib.nullcontext)():
            calls[name]()
    torch.cuda.synchronize()
    for index in range(batches):
        for name in names[index % len(names):] + names[:index % len(names)]:
            with pins.get(name, contextlib.nullcontext)():
                start = time.perf_counter()
                for _ in range(per_batch):
                    calls[name]()
                samples[name].append((time.perf_counter() - start) / per_batch * 1e6)
            torch.cuda.synchronize()
    return {name: statistics.median(values) for name, values in samples.items()}


def sdpa_call(q, k, v, causal: bool) -> Callable[[], object]:
    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def sdpa_pin(backend: str) -> Callable[[], AbstractContextManager]:
    """A context that pins SDPA to ``backend`` (a key of :data:`SDPA_BACKENDS`), around a measurement."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return lambda: sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[backend]))


Pinned = tuple[Callable[[], AbstractContextManager], Sequence[Callable[[], object]]]   # (pin, calls)


def runs(pinned: Pinned) -> bool:
    """Whether the first call runs under its pin (a backend that refuses the shape raises RuntimeError)."""
    pin, calls = pinned
    with pin():
        try:
            calls[0]()
            torch.cuda.synchronize()
        except RuntimeError:
            return False
    return True


def time_backends(backends: Mapping[str, Pinned], rep_ms: float = 40.0, warmup_ms: int = 10,
                  settle_ms: float = 0.0, host: bool = True) -> dict[str, dict[str, float | str | None]]:
    """Each baseline ``name -> (pin, calls)``: GPU ms, host µs, method, with the pin held around its
    measurements, not inside the timed call. One that refuses the shape gets None. ``settle_ms``
    as in :func:`gpu_time`; ``host`` False skips the host timing."""
    results: dict[str, dict[str, float | str | None]] = {}
    for name, (pin, calls) in backends.items():
        if not runs((pin, calls)):
            results[name] = {"ms": None, "host_us": None, "method": None}
            continue
        with pin():
            timing = gpu_time(calls, rep_ms, warmup_ms, settle_ms)
            results[name] = {"ms": timing.ms, "host_us": host_us(calls[0]) if host else None,
                             "method": timing.method}
    return results


def sdpa_backends(sets: Sequence[tuple], causal: bool) -> dict[str, Pinned]:
    """SDPA's flash and cuDNN backends on the input sets ``[(q, k, v), ...]``, each with its pin."""
    return {backend: (sdpa_pin(backend), [sdpa_call(q, k, v, causal) for q, k, v in sets])
            for backend in SDPA_BACKENDS}


def time_sdpa(sets: Sequence[tuple], causal: bool, rep_ms: float = 40.0, warmup_ms: int = 10, settle_ms: float = 0.0,
              host: bool = True) -> dict[str, dict[str, float | str | None]]:
    """Each SDPA backend on the input sets ``[(q, k, v), ...]``: GPU ms, host µs, method
    (:func:`time_backends`)."""
    return time_backends(sdpa_backends(sets, causal), rep_ms, warmup_ms, settle_ms, host)


def round_orders(keys: Sequence[str], rounds: int) -> list[list[str]]:
    """The order of each round: rotated by one each time, so no candidate always goes first or last."""
    keys = list(keys)
    return [keys[r % len(keys):] + keys[:r % len(keys)] for r in range(rounds)] if keys else []


def interleaved_rounds(candidates: Mapping[str, Sequence[Callable[[], object]]], rounds: int,
                       rep_ms: float = RETIME[0], settle_ms: float = RETIME[1], warmup_ms: int = 10,
                       pins: Mapping[str, Callable[[], AbstractContextManager]] | None = None,
                       measure: Callable[[Sequence[Callable[[], object]]], object] | None = None,
                       ) -> dict[str, list]:
    """Candidates timed side by side: each once per round, the order rotating (:func:`round_orders`).

    The one protocol of every re-timing (the finalists, the benchmarks, the experiments): a
    machine whose clock wanders shifts every candidate's rounds alike, so their medians compare.

    Args:
        candidates: name -> the calls one measurement cycles through (input sets, see :func:`gpu_time`).
        rounds: how many times each is measured.
        rep_ms, settle_ms, warmup_ms: each measurement's window (:func:`gpu_time`); default
            :data:`RETIME`, the finalists' settled, longer windows.
        pins: name -> a context held around that candidate's measurement (an SDPA backend's pin).
        measure: what to take of each candidate instead of :func:`gpu_time`'s ms (a wall clock in
            the interpreter, host µs per call for host-time rounds, every replay's time).

    Returns:
        name -> its time in each round, in round order.
    """
    pins = pins or {}
    times: dict[str, list] = {name: [] for name in candidates}
    for order in round_orders(list(candidates), rounds):
        for name in order:
            with pins.get(name, contextlib.nullcontext)():
                calls = candidates[name]
                times[name].append(measure(calls) if measure else gpu_time(calls, rep_ms, warmup_ms, settle_ms).ms)
    return times


def warm_gpu(seconds: float = 1.5) -> None:
    """Keep the GPU busy for a moment so its clocks are up before anything is timed
    (an idle H200 sits at a few hundred MHz and takes a while to ramp)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()

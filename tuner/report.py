"""What the sweep prints: progress while it runs, and the summary at the end."""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from tuner.finalists import ShapeVerdict
from tuner.formatting import fmt
from tuner.records import RunContext, by_config, scores
from tuner.status import Status
from tuner.store import Result
from tuner.winners import winner_rows


@dataclass
class Clock:
    """Wall time of the run, split by stage (seconds)."""

    start_s: float = 0.0           # the workers' start and SDPA baselines
    idle_s: float = 0.0            # devices free, waiting for a trial (its compiles, Optuna, the store)
    check_s: float = 0.0
    time_s: float = 0.0
    retime_s: float = 0.0
    drift: float | None = None     # largest change of an SDPA baseline from the run's start to its end
    workers: int = 1               # start, idle, check and time are summed over the workers
    started: float = field(default_factory=time.perf_counter)

    def line(self) -> str:
        total = time.perf_counter() - self.started
        per_device = (self.start_s + self.idle_s + self.check_s + self.time_s) / max(1, self.workers)
        other = max(0.0, total - per_device - self.retime_s)
        text = (f"wall time {total:.0f} s: worker start and SDPA baselines {self.start_s:.0f} s, devices idle "
                f"{self.idle_s:.0f} s (waiting for compiles, Optuna and the store), check {self.check_s:.0f} s, "
                f"time {self.time_s:.0f} s, finalists {self.retime_s:.0f} s, other {other:.0f} s (each check's "
                "and timing's launch, the run's start and end)")
        if self.workers > 1:
            text += f" (start, idle, check and time summed over {self.workers} workers, each on its own device)"
        if self.drift is not None:
            text += (f"\nSDPA baselines moved by at most {100 * self.drift:.1f}% between the start and the end "
                     "of the run")
        return text


def process_line(run_started: float, run_ended: float, ended: float | None = None) -> str:
    """The whole process's wall time in three parts that add up to it: start-up (the imports, the checks of
    the inputs, the store, the environment) before the run's clock, the run (the summary's wall time),
    and the outputs after it (the summary, profiles, dashboards and config list)."""
    from tuner import STARTED

    ended = time.perf_counter() if ended is None else ended
    parts = (run_started - STARTED, run_ended - run_started, ended - run_ended)
    return (f"process wall time {sum(parts):.1f} s: start-up {parts[0]:.1f} s (imports, input checks, the store, "
            f"the environment), the run {parts[1]:.1f} s, outputs {parts[2]:.1f} s (summary, profiles, dashboards, "
            "config list)")


class Progress:
    """A progress bar (tqdm on a terminal, a line every few trials in a log) with the best so far."""

    def __init__(self, total: int | None, done: int = 0):
        self.total, self.done = total, done
        self.best: tuple[float, str] | None = None
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, file=sys.stderr, unit="config", dynamic_ncols=True)

    def update(self, config, value: float, status: Status, metric: str) -> None:
        self.done += 1
        if value > 0 and (self.best is None or value > self.best[0]):
            self.best = (value, config.key)
        unit = " TFLOP/s" if metric == "tflops" else "x"
        best = f"best {self.best[1]} {self.best[0]:.3g}{unit}" if self.best else "best: none timed yet"
        if self.bar is not None:
            self.bar.set_postfix_str(f"{best} | last {config.key} {status}", refresh=False)
            self.bar.update(1)
        elif self.done % 20 == 0 or self.done == self.total:
            print(f"[{self.done}/{self.total or '?'}] {best}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def summary(ctx: RunContext, rows: list[Result], counts: Counter, clock: Clock | None,
            verdicts: dict[str, ShapeVerdict] | None = None, top: int = 5) -> str:
    """The end-of-run table: best per shape, finalists, top configs, rejections by reason, wall time."""
    verdicts = verdicts or {}
    grouped = by_config(rows)
    status_all = Counter(rs[0].status for rs in grouped.values())
    where = "no GPU (budget stage only)" if ctx.gpu_label == "none" else ctx.gpu_label
    env = ctx.env
    lines = [f"study {ctx.study.name} for target {ctx.target.name} ({ctx.target.card}), run on {where}; "
             f"torch {env['torch']}, triton {env['triton']}, driver {env['driver']}, {env['date']}",
             f"configs in store: {len(grouped)}; " + ", ".join(f"{k} {v}" for k, v in status_all.most_common())]
    if counts:
        lines.append("this run: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    winners = winner_rows(rows, verdicts)
    if winners:
        lines += ["", "best config per shape (GPU time by CUDA-graph replay; % of SDPA = SDPA time / ours x 100, "
                      "above 100 is faster; host µs = one call's CPU time):",
                  f"{'shape':<40} {'config':<16} {'ms':>8} {'TFLOP/s':>8} {'% flash':>8} {'% cuDNN':>8} "
                  f"{'host µs':>8}"]
        for shape, best in winners.items():
            verdict = verdicts.get(shape)
            ms = verdict.winner.median if verdict else best.ms
            flash, cudnn = verdict.sdpa_ms(best) if verdict else (best.flash_ms, best.cudnn_ms)
            lines.append(f"{shape:<40} {best.config:<16} {ms:>8.4f} {best.tflops * best.ms / ms:>8.0f} "
                         f"{fmt(flash and 100 * flash / ms, '.0f'):>8} "
                         f"{fmt(cudnn and 100 * cudnn / ms, '.0f'):>8} "
                         f"{fmt(best.host_us, '.1f'):>8}")
    if verdicts:
        lines += ["", "finalists re-timed together (median of rounds; noise = the larger spread of the two):"]
        lines += [f"  {shape}: {verdict.sentence()}" for shape, verdict in verdicts.items()]
    ranked = sorted(scores(rows).items(), key=lambda item: (-item[1], item[0]))
    if ranked:
        lines += ["", f"top {top} configs across shapes (geometric mean over shapes of best time / its time; "
                      "1.000 = the best on every shape):"]
        for key, value in ranked[:top]:
            lines.append(f"  {key:<16} {value:.3f}")
    if clock is not None:
        lines += ["", clock.line()]
    return "\n".join(lines)


def baselines_ready(index: int, device: dict | None, baselines: dict[str, dict], seconds: float) -> None:
    """A device's worker is ready: its SDPA baselines (naming the device where there are several)."""
    where = f" on device {index} ({device.get('device_name')})" if device else ""
    for label, times in baselines.items():
        print(f"SDPA {label}{where}: flash {fmt(times.get('flash_ms'), '.4f')} ms, "
              f"cuDNN {fmt(times.get('cudnn_ms'), '.4f')} ms ({times.get('timer')})", file=sys.stderr)
    print(f"worker {index} ready: inputs, references and SDPA baselines in {seconds:.0f} s", file=sys.stderr)


def resuming(orphans: list, foreign: int) -> None:
    """What a sweep finds of earlier and other sweeps of its study as it starts."""
    if orphans:
        print(f"resuming: {len(orphans)} trial(s) left in flight by a stopped sweep will be finished "
              f"first ({', '.join(o.config.key for o in orphans)})", file=sys.stderr)
    if foreign:
        print(f"note: {foreign} trial(s) are running in another live sweep of it", file=sys.stderr)

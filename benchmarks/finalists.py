"""``python -m benchmarks.finalists agree``: do the adaptive finalists pick the winners the fixed protocol picks?

    python -m benchmarks.finalists agree --storage URL --study article --gpu sm_89 [--markdown PATH]   # GPU

A sweep stores each shape's finalists and the verdict of its re-timing (by default the
adaptive protocol, :mod:`kernel.measure.retime`). Here the same finalists are re-timed together
with the protocol before it (5 rounds, each measurement 100 ms settled and 200 ms timed,
:data:`kernel.measure.timing.RETIME`), and the stored winner is compared with that protocol's
winner in those same rounds: the bar is that the stored winner is within 1% of it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from tuner.formatting import usage_error

AGREE_BAR = 0.01


def retime_rounds(shape, keys: list[str], rounds: int, protocol: str = "adaptive", sets: list | None = None,
                  sdpa: bool = True, settle_ms: float | None = None, rep_ms: float | None = None,
                  power: tuple | None = None):
    """The configs ``keys`` (and SDPA's backends, if ``sdpa``) timed together on ``shape`` in this
    process for exactly ``rounds`` rotating rounds, the SM clock read with each measurement:
    ``"adaptive"``, each graph captured once and the clock settled once (:data:`kernel.measure.retime.ADAPTIVE`
    windows unless given; ``power``: its power check, :data:`kernel.measure.retime.POWER`), or ``"fixed"``,
    every measurement settled and timed as the finalists were before (:data:`kernel.measure.timing.RETIME`).
    Returns :class:`kernel.measure.retime.Rounds`."""
    from benchmarks.vs_sdpa import KERNEL, make_sets, set_calls
    from kernel.measure.clock import sm_clock
    from kernel.measure.retime import ADAPTIVE, Candidate, adaptive_rounds, fixed_rounds
    from kernel.measure.timing import runs
    from tuner.kernels.triton_fwd import FwdConfig
    from tuner.outcome import SDPA_KEYS

    sets = sets or make_sets(shape)
    calls = {key: set_calls(sets, shape, FwdConfig.parse(key)) for key in dict.fromkeys(keys)}
    pins = {}
    for backend, pinned in (KERNEL.baselines(sets, shape).items() if sdpa else ()):
        if runs(pinned):
            pins[SDPA_KEYS[backend]], calls[SDPA_KEYS[backend]] = pinned
    clock = sm_clock()
    if protocol == "fixed":
        return fixed_rounds(calls, rounds, pins, clock)
    settle = ADAPTIVE[0] if settle_ms is None else settle_ms
    window = ADAPTIVE[1] if rep_ms is None else rep_ms
    candidates = {key: Candidate(c, pins.get(key), clock) for key, c in calls.items()}
    return adaptive_rounds(candidates, list(dict.fromkeys(keys)), list(SDPA_KEYS.values()),
                           (settle, window, rounds, rounds), power)


def agree(url: str, study_name: str, target: str, rounds: int, markdown: Path | None) -> int:
    """Each shape's stored finalists re-timed with the fixed protocol; the stored winner against its winner."""
    from kernel.measure.timing import environment, environment_line, warm_gpu
    from tuner.store import Store
    from tuner.study import load
    from tuner.winners import measured_on, verdicts_of

    study = load(study_name)
    if (study.kernel_name, study.pass_) != ("triton", "fwd"):
        print(f"agree times the Triton forward; study {study.name} is kernel {study.kernel_name}", file=sys.stderr)
        return 2
    db = Store(url, create=False)
    gpu, _ = measured_on(db.results(study.name, target))
    stored = verdicts_of(db, study.name, target, gpu) if gpu else {}
    if not stored:
        print(f"no re-timed finalists for study {study.name} on {target} in {url}", file=sys.stderr)
        return 1
    env = environment()
    warm_gpu()
    lines = [environment_line(env),
             f"Command: python -m benchmarks.finalists agree --study {study_name} --gpu {target} --rounds {rounds}",
             "", f"Each shape's stored finalists re-timed together with today's protocol ({rounds} rounds, each "
             "measurement 100 ms settled + 200 ms timed, SDPA in the same rounds, the SM clock read): its winner "
             "by median ms as before, and on the clock-normalised figure; the stored winner against both.", "",
             "| shape | stored winner (figure, rounds, stop) | today's winner (ms) | stored / today's, ms | "
             "winner on the figure | stored / it, on the figure | noise, ms / figure | SM MHz, stored / today's |",
             "|---|---|---|---|---|---|---|---|"]
    worst = 0.0
    for shape in study.shapes:
        if shape.label in stored:
            line, behind = _agree_line(shape, stored[shape.label], rounds)
            lines.append(line)
            worst = max(worst, behind)
    lines += ["", f"Worst shape: the stored winner {100 * worst:.2f}% slower than today's protocol's winner, both "
                  f"re-timed together in its rounds (bar: within {100 * AGREE_BAR:.0f}%)."]
    text = "\n".join(lines)
    print(text)
    if markdown:
        markdown.write_text(text + "\n")
    return 0 if worst <= AGREE_BAR else 1


def _agree_line(shape, verdict, rounds: int) -> tuple[str, float]:
    """One shape's stored finalists re-timed with today's protocol: (its table row, how far the stored
    winner is behind today's winner on median ms, 0.01 = 1%)."""
    from tuner.finalists import judge, judge_rounds
    from tuner.outcome import SDPA_KEYS

    measured = retime_rounds(shape, [t.config for t in verdict.ranked], rounds, "fixed")
    configs = {key: [s.ms for s in runs] for key, runs in measured.samples.items() if key not in SDPA_KEYS.values()}
    today, normalised = judge(shape.label, configs), judge_rounds(shape.label, measured)   # on ms as before; and now
    mine = verdict.winner.config
    ms_ratio = _of(today, mine).median / today.winner.median
    figure_ratio = _of(normalised, mine).score / normalised.winner.score
    # each one's median clock over its own measurements: a config clocked lower when it runs alone
    # (more energy per cycle under the power cap) is slower on ms though not on cycles
    clocks = [statistics.median(s.mhz for s in measured.samples[key]) if all(s.mhz for s in measured.samples[key])
              else None for key in (mine, today.winner.config)]
    mhz = " / ".join(f"{c:.0f}" for c in clocks) if all(clocks) else "n/a"
    return (f"| {shape.label} | {mine} ({verdict.figure}, {len(verdict.winner.times)}, {verdict.stopped}) | "
            f"{today.winner.config} | {ms_ratio:.4f} | {normalised.winner.config} ({normalised.figure}) | "
            f"{figure_ratio:.4f} | {100 * today.noise:.1f}% / {100 * normalised.noise:.1f}% | {mhz} |"), ms_ratio - 1


def _of(verdict, config: str):
    return next(t for t in verdict.ranked if t.config == config)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.finalists", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_agree = sub.add_parser("agree", help="the stored winners against the fixed protocol's, re-timed together")
    p_agree.add_argument("--storage", required=True)
    p_agree.add_argument("--study", default="article")
    p_agree.add_argument("--gpu", default="sm_89", help="the sweep's --gpu (default sm_89)")
    p_agree.add_argument("--rounds", type=int, default=5)
    p_agree.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    from tuner.gpus import GpuSpec
    from tuner.store import Store, StoreError
    from tuner.study import StudyError, load

    try:
        load(args.study)
        GpuSpec.from_name(args.gpu)
        Store(args.storage, create=False)
    except (StudyError, StoreError, ValueError, RuntimeError) as exc:
        return usage_error(parser, str(exc))
    if args.rounds < 2:
        return usage_error(parser, f"--rounds {args.rounds} must be at least 2")
    import torch

    if not torch.cuda.is_available():
        print(f"{parser.prog} {args.command}: error: no CUDA GPU is visible here, and it re-times configs on one",
              file=sys.stderr)
        return 2
    return agree(args.storage, args.study, args.gpu, args.rounds, args.markdown)


if __name__ == "__main__":
    sys.exit(main())

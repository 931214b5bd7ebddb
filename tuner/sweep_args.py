"""The sweep's flags, checked before anything is made or written: numbers in range, paths that can be
written, a database URL that keeps its results, the interpreter where ``--device cpu`` asks for it, the
target and the GPUs present, the workers they allow. Each check returns the message of the first
problem (None: none), which :func:`tuner.sweep.main` prints with exit 2.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tuner.budget import MAX_JOBS
from tuner.formatting import usage_error
from tuner.gpus import GpuSpec, valid_names
from tuner.paths import unwritable
from tuner.store import DEFAULT_OUT, StoreError, in_memory, parse_url, storage_problem

__all__ = ["MAX_SECONDS", "check_interpreter", "check_numbers", "check_paths", "resolve_gpus",
           "storage_url", "workers_for"]

MAX_SECONDS = 7 * 24 * 3600       # a limit beyond a week is a typo (inf, 1e300 overflow the clocks)


def check_numbers(args) -> str | None:
    """The first bad number among the flags, as an error message; None if all are good."""
    for name, low in (("trials", 1), ("jobs", 1), ("batch", 1), ("finalists", 0), ("rounds", 2), ("profile", 1),
                      ("workers", 1)):
        value = getattr(args, name)
        if value is not None and value < low:
            return f"--{name} {value} must be at least {low}"
    if args.jobs is not None and args.jobs > MAX_JOBS:
        return f"--jobs {args.jobs} must be at most {MAX_JOBS} (compile processes; the default is every core but two)"
    for name in ("timeout", "trial_timeout"):
        value = getattr(args, name)
        if value is not None and not 0 < value <= MAX_SECONDS:
            return f"--{name.replace('_', '-')} {value} must be a positive number of seconds, at most {MAX_SECONDS}"
    if args.seed is not None and not 0 <= args.seed < 2**32:
        return f"--seed {args.seed} must be from 0 to {2**32 - 1} (what the samplers' generators take)"
    return None


def check_paths(args) -> str | None:
    """--out a folder that can be written (or made), where the run writes there; --trace a new file in an
    existing folder that can be written. Nothing is made here."""
    problem = unwritable(args.out, "folder") if (not args.no_outputs or not args.storage) else None
    if problem:
        return f"--out {args.out!r} {problem}"
    if args.trace is not None and not args.trace.strip():
        return f"--trace {args.trace!r} is empty; give a file name"
    problem = unwritable(args.trace, "file") if args.trace is not None else None     # first: a name too long
    if problem:
        return f"--trace {args.trace!r} {problem}"
    if args.trace is not None and Path(args.trace).exists():
        return f"--trace {args.trace!r} exists; give a new file (nothing is overwritten)"
    if args.trace is not None and not Path(args.trace).absolute().parent.is_dir():
        return f"--trace {args.trace!r}: its folder does not exist"
    return None


def storage_url(args) -> tuple[str | None, str | None]:
    """(url, error): the database URL, checked without touching it (:func:`tuner.store.parse_url`): one that
    keeps its results, and an existing SQLite file the sweep can write (:func:`tuner.store.storage_problem`)."""
    url = args.storage or f"sqlite:///{Path(args.out) / 'tuning.db'}"
    try:
        parsed = parse_url(url)
    except StoreError as exc:
        return None, f"--storage {exc}"
    if in_memory(parsed):
        return None, (f"--storage {url!r} is an in-memory database: every result would be lost when the sweep "
                      f"ends; give a file, e.g. sqlite:///{DEFAULT_OUT}/tuning.db")
    problem = storage_problem(url)          # read-only: refused now, not by SQLite at the run's first write
    return (None, f"--storage: {problem}") if problem else (url, None)


def check_interpreter(args, study) -> str | None:
    """--device cpu runs the kernels in Triton's interpreter, which must be on from the start (the kernels are
    made interpreted where they are defined) and cannot multiply bf16."""
    if args.device != "cpu":
        return None
    from kernel.arch import interpreting

    if not interpreting():
        return ("--device cpu runs the kernels in Triton's interpreter, which is off here: run it as "
                "TRITON_INTERPRET=1 python -m tuner.sweep ...")
    bf16 = sorted({s.label for s in study.shapes if s.dtype == "bf16"})
    if bf16:
        return (f"--device cpu: the interpreter's bf16 dot is wrong, so {study.path} cannot be checked there "
                f"({bf16[0]}{' and more' if len(bf16) > 1 else ''}); use dtype = 'fp16' or 'fp32' in [problem]")
    return None


def resolve_gpus(args, parser):
    """(target, present, gpu label) or an exit code."""
    import torch

    has_cuda = torch.cuda.is_available() and args.device == "cuda"
    if args.gpu.strip().lower() == "auto" and not has_cuda:
        return usage_error(parser, "--gpu auto needs a CUDA device and none is visible; name a target, "
                                   f"one of: {', '.join(valid_names())}")
    try:
        target = GpuSpec.from_name(args.gpu)
    except (ValueError, RuntimeError) as exc:
        return usage_error(parser, f"--gpu: {exc}")
    from tuner.gpus import detect

    present = detect() if has_cuda else None
    if present is not None:
        label = present.label
        if present.name != target.name:
            print(f"warning: --gpu {target.name} ({target.card}) is not the GPU present, {label}. Configs are "
                  f"held to {target.name}'s budget but timed on {present.name}; both are recorded, and outputs "
                  f"are labelled '{target.name} timed on {present.name}'.", file=sys.stderr)
    elif args.device == "cpu":
        label = "cpu (Triton interpreter; times are meaningless)"
    else:
        label = "none"
    return target, present, label


def workers_for(args, present) -> tuple[int, str | None]:
    """(workers, error): --workers checked against the GPUs this process can see."""
    if present is None:
        if args.device == "cuda" and args.workers and args.workers > 1:
            return 0, (f"--workers {args.workers}: no CUDA GPU is visible here, so the sweep runs the budget stage "
                       f"only, on no GPU worker; leave --workers out (--jobs sets the compile processes)")
        return args.workers or 1, None
    import torch

    visible = torch.cuda.device_count()
    if args.workers and args.workers > visible:
        return 0, (f"--workers {args.workers}: only {visible} GPU(s) are visible here "
                   f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); give at most {visible}")
    return args.workers or visible, None

"""``python -m tuner.profile``: Nsight Compute counters for a study's best configs and SDPA."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from tuner.formatting import nonempty, usage_error
from tuner.gpus import GpuSpec, valid_names
from tuner.paths import unwritable
from tuner.profile._metrics import ProfileError
from tuner.profile._ncu import CountersNotPermitted, NcuMissing, find_ncu
from tuner.profile._report import markdown
from tuner.profile._run import profile_study, verdict_lines
from tuner.store import DEFAULT_OUT, DEFAULT_URL, Store, StoreError, storage_problem
from tuner.study import StudyError, load

EXAMPLES = f"""examples:
  python -m tuner.profile --study article --gpu sm_90
  python -m tuner.profile --study article --gpu sm_90 --n 4096 --top 3
  python -m tuner.profile --study head_dim_128 --gpu sm_90 --shape "B4 H8 Nq4096 Nk4096 D128 bf16 causal"

It profiles each shape's best configs (the re-timed finalists, else the fastest timed ones)
and SDPA's flash and cuDNN backends on the same inputs, one launch each after a warm-up
launch, with Nsight Compute (ncu --clock-control none). Rows go to the fa2_profiles table of
--storage (default {DEFAULT_URL}); the dashboards get a profile page per shape and the
roofline the measured DRAM bytes (rebuilt in OUT/dashboards unless --no-outputs).
Needs the GPU that timed the configs, and ncu (PATH, $CUDA_HOME/bin or --ncu).
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tuner.profile", epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Profile each shape's best configs and SDPA with Nsight Compute, and store the counters.")
    parser.add_argument("--study", required=True, help="a study file, or the name of a shipped study")
    parser.add_argument("--gpu", required=True, help=f"the target the sweep ran for: {', '.join(valid_names())}")
    parser.add_argument("--top", type=int, default=3, help="configs per shape (default 3)")
    parser.add_argument("--shape", action="append", help="only this shape label (repeatable; default every shape)")
    parser.add_argument("--n", type=int, action="append", help="only shapes with this query length (repeatable)")
    parser.add_argument("--storage", default=DEFAULT_URL, type=nonempty, help=f"database URL (default {DEFAULT_URL})")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output folder for the dashboards (default {DEFAULT_OUT})")
    parser.add_argument("--ncu", help="the ncu binary (default: $FA2_TUNER_NCU, PATH, $CUDA_HOME/bin)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per kernel (default 300)")
    parser.add_argument("--markdown", type=nonempty, help="also write the counters and verdicts to this Markdown file")
    parser.add_argument("--no-outputs", action="store_true", help="do not rebuild the dashboards")
    return parser


def _shapes(args, study) -> tuple[list[str] | None, str | None]:
    """(labels to profile or None for all, error)."""
    labels = [s.label for s in study.shapes]
    unknown = [s for s in args.shape or [] if s not in labels]
    if unknown:
        return None, f"--shape {unknown[0]!r} is not a shape of {study.name}; it has: {'; '.join(labels)}"
    chosen = [s.label for s in study.shapes if (not args.shape or s.label in args.shape)
              and (not args.n or s.n_q in args.n)]
    if not chosen:
        lengths = sorted({s.n_q for s in study.shapes})
        return None, f"--n {args.n} matches no shape of {study.name}; its lengths are {lengths}"
    return (chosen if args.shape or args.n else None), None


def _unwritable_outputs(args) -> str | None:
    """Why --out (where the dashboards go) or --markdown cannot be written, before anything is run or opened."""
    problem = unwritable(args.out, "folder") if not args.no_outputs else None
    if problem:
        return f"--out {args.out!r} {problem}"
    problem = unwritable(args.markdown, "file") if args.markdown is not None else None
    return f"--markdown {args.markdown!r} {problem}" if problem else None


def _unusable_storage(url: str) -> str | None:
    """Why --storage cannot be profiled into (not a URL, no such file, a file this command cannot write: it stores
    the counters there), asked before anything is opened: the store is opened only once the GPU is there."""
    try:
        problem = storage_problem(url, create=False)
    except StoreError as exc:
        problem = str(exc)
    return f"--storage: {problem}" if problem else None


def _present_gpu(parser) -> str | int:
    """The label of the GPU here, as results name it, or an exit code."""
    import torch

    if not torch.cuda.is_available():
        return usage_error(parser, "profiling needs the CUDA GPU that timed the configs, and none is visible here")
    from tuner.gpus import detect

    return detect().label


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        study = load(args.study).for_pass(getattr(args, "pass_", None))
        target = GpuSpec.from_name(args.gpu)
    except (StudyError, ValueError, RuntimeError) as exc:
        return usage_error(parser, f"--{'study' if isinstance(exc, StudyError) else 'gpu'}: {exc}")
    if args.top < 1:
        return usage_error(parser, f"--top {args.top} must be at least 1")
    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        return usage_error(parser, f"--timeout {args.timeout} must be a positive, finite number of seconds")
    shapes, problem = _shapes(args, study)
    problem = problem or _unwritable_outputs(args) or _unusable_storage(args.storage)
    if problem:
        return usage_error(parser, problem)
    # Every argument checked, no GPU is the first thing to say (ncu would not help without one), and said before
    # the store is opened: a command refused leaves the database as it was.
    gpu = _present_gpu(parser)
    if isinstance(gpu, int):
        return gpu
    try:
        db = Store(args.storage, create=False)
    except StoreError as exc:
        return usage_error(parser, f"--storage: {exc}")
    try:
        ncu = find_ncu(args.ncu)
    except NcuMissing as exc:
        return usage_error(parser, str(exc))
    stored = sorted({r.gpu for r in db.results(study.name, target.name)})
    if gpu not in stored:
        return usage_error(parser, f"{args.storage} has no results of {study.name} for {target.name} measured on "
                                   f"{gpu} (it has: {', '.join(stored) or 'none'}); profile on the GPU that timed them")
    try:
        rows = profile_study(db, study, target.name, gpu, args.top, shapes, ncu, args.timeout,
                             say=lambda line: print(line, file=sys.stderr))
    except CountersNotPermitted as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ProfileError as exc:
        return usage_error(parser, str(exc))
    print("\n".join(verdict_lines(rows)))
    if args.markdown:
        Path(args.markdown).write_text(f"{len(rows)} kernels of {study.name} for {target.name} on {gpu}, "
                                       f"ncu {rows[0].ncu_version}\n\n{markdown(rows)}")
    if not args.no_outputs:
        from tuner import dashboard

        folder = Path(args.out) / "dashboards"
        pages = dashboard.build_all(db, folder)
        print(f"dashboards: {len(pages)} pages in {folder}/ (open {folder / 'index.html'})")
    return 0 if all(r.status == "ok" for r in rows) else 1


if __name__ == "__main__":
    from tuner.console import run

    run(main)

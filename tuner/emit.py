"""``python -m tuner.emit``: the sweep's results as a ``@triton.autotune`` config list.

The file it writes (and prints) holds ``CONFIGS``, a list of ``triton.Config`` to paste
into the kernel, and ``KEY``, the autotune key (both in the study's kernel's own form,
:meth:`tuner.kernels.TunableKernel.triton_config`). The list has every shape's winner
(:mod:`tuner.winners`: the finalists' winner where they were re-timed, with the runner-up
too when the two are within the noise), then the best configs across shapes (``--top``),
deduplicated and ranked. Each entry carries its measured ms, TFLOP/s, % of SDPA and shared memory on
the target as comments. Only configs timed on every shape are eligible, and every
entry is checked against the target's budget before anything is written.

With ``--verify`` (on a GPU) it also checks the list where it matters: for each shape
of the study, the config the autotuner picks from the list against the shape's best.

With ``--route-table`` it writes beside the list the route table the default call reads on
this machine (which of our kernels runs each bucket of head dim, mask, length and batch x
heads: the file ``FA2_TUNER_ROUTE_TABLE`` names, else the committed ``kernel/route_table.py``;
``python -m benchmarks.route --table FILE`` measures one for the GPU present), so that the two
travel together; the table is checked before anything is written.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tuner import budget, records, winners
from tuner.finalists import ShapeVerdict
from tuner.formatting import nonempty, pct, sweep_command, usage_error
from tuner.gate import edges_checked
from tuner.gpus import GpuSpec
from tuner.paths import unwritable
from tuner.problem import Problem
from tuner.status import Status
from tuner.store import DEFAULT_OUT, DEFAULT_URL, Result, Store, StoreError, parse_url, sqlite_file
from tuner.study import PASSES, Study, StudyError, load


class EmitError(ValueError):
    """No list can be emitted; the message says why."""


@dataclass
class Entry:
    config: object
    score: float
    rows: list[Result]                                   # all its rows
    notes: list[str] = field(default_factory=list)       # why it is in the list, one comment line each
    wins: int = 0


@dataclass
class Emitted:
    text: str
    entries: list[Entry]
    gpu: str = ""                                        # whose measurements


def select(rows: list[Result], verdicts: dict[str, ShapeVerdict], top: int, config_type) -> list[Entry]:
    """Each shape's winner (and runner-up within the noise) among the configs timed on every
    shape, then the ``top`` best across shapes."""
    timed = records.fully_timed(rows)
    scores = records.scores(rows)
    entries: dict[str, Entry] = {}

    def entry(key: str) -> Entry:
        return entries.setdefault(key, Entry(config_type.parse(key), scores[key], timed[key]))

    for shape in dict.fromkeys(r.shape for r in rows):
        chosen = winners.choice(rows, shape, verdicts.get(shape), eligible=timed)
        if chosen is None:
            continue
        verdict = chosen.verdict
        if verdict:
            for index, key in enumerate(chosen.keys):
                row = next(r for r in timed[key] if r.shape == shape)
                timing = verdict.ranked[index]
                flash, cudnn = verdict.sdpa_ms(row)
                entry(key).notes.append(
                    f"{'best' if index == 0 else 'kept'} for {shape}: {timing.median:.4f} ms (median of "
                    f"{len(timing.times)} rounds), {row.tflops * row.ms / timing.median:.0f} TFLOP/s, "
                    f"{pct(flash and 100 * flash / timing.median)} of SDPA-flash, "
                    f"{pct(cudnn and 100 * cudnn / timing.median)} of SDPA-cuDNN"
                    f"{' (SDPA re-timed in the same rounds)' * bool(verdict.cudnn_ms)}; {verdict.sentence()}")
                entries[key].wins += index == 0
            continue
        best = next(r for r in timed[chosen.winner] if r.shape == shape)
        entry(best.config).notes.append(
            f"best for {shape}: {best.ms:.4f} ms, {best.tflops:.0f} TFLOP/s, {pct(best.pct_flash)} of "
            f"SDPA-flash, {pct(best.pct_cudnn)} of SDPA-cuDNN (not re-timed)")
        entries[best.config].wins += 1
    for key in sorted(scores, key=lambda k: (-scores[k], k))[:top]:
        if key not in entries:
            entry(key).notes.append(f"not a shape's best; {scores[key]:.3f} of the best time, geometric mean "
                                    f"over shapes")
    return sorted(entries.values(), key=lambda e: (-e.wins, -e.score, e.config.key))


def check_budget(entries: list[Entry], target: GpuSpec) -> None:
    """Every config must fit the target on every stored shape, by the model and by the compiler.

    Raises:
        EmitError: naming the config, the shape and the reason.
    """
    for entry in entries:
        for row in entry.rows:
            problem = Problem(row.batch, row.heads, row.n_q, row.n_k, row.head_dim, row.dtype, row.causal)
            model = budget.verdict(entry.config, problem, target, None)
            if row.status != Status.TIMED:
                raise EmitError(f"{entry.config.key} was not timed on {row.shape} ({row.status})")
            if not edges_checked(row):
                raise EmitError(f"{entry.config.key} was not checked on the gate's edge shapes ({row.reason})")
            if not model.launchable:
                raise EmitError(f"{entry.config.key} does not fit {target.name} on {row.shape}: {model.reason}")
            if row.smem_bytes is not None and row.smem_bytes > (row.smem_limit_bytes or 0):
                raise EmitError(f"{entry.config.key} does not fit {target.name} on {row.shape}: compiled "
                                f"{row.smem_bytes} B > {row.smem_limit_bytes} B")


def render(entries: list[Entry], study: Study, target: GpuSpec, gpu: str, rows: list[Result], command: str) -> str:
    """The Python file: a docstring with provenance, KEY, and CONFIGS with measured comments."""
    first, kernel = rows[0], study.kernel
    dates = sorted(r.created_at for r in rows)
    lines = [
        f'"""{kernel.emitted_what} for the {kernel.description}, from fa2-tuner study {study.name!r}.',
        "",
        f"Target {target.name} ({target.card}); measured on {gpu}; torch {first.torch_version}, "
        f"triton {first.triton_version}, driver {first.driver}; {dates[0]:%Y-%m-%d} to {dates[-1]:%Y-%m-%d}.",
        f"Generated by: {command}",
        "Every shape's fastest config is here (its finalists re-timed together: the runner-up is kept too when",
        "the two are within the noise), then the best across shapes; ranked by shapes won. Times are GPU time",
        "per call (CUDA-graph replay); % of SDPA = SDPA time / this config's time x 100, in the same run.",
        '"""',
        "",
        kernel.emitted_imports,
        "",
        f"KEY = {list(kernel.autotune_key)!r}",
        "",
        "CONFIGS = [",
    ]
    for entry in entries:
        c = entry.config
        limit = next((r.smem_limit_bytes for r in entry.rows if r.smem_limit_bytes), target.smem_per_block_optin)
        lines += [f"    # {note}" for note in entry.notes]
        lines.append(f"    {kernel.triton_config(c)},  # smem {smem_note(entry.rows)} of {limit} B on {target.name}")
    lines += ["]", ""]
    return "\n".join(lines)


def smem_note(rows: list[Result]) -> str:
    """A config's compiled shared memory: one figure, or one per head dim where they differ
    (``98596 B at D=64, 180516 B at D=128``); ``None B`` where none was compiled."""
    by_dim = {r.head_dim: r.smem_bytes for r in sorted(rows, key=lambda r: r.head_dim) if r.smem_bytes}
    if len(set(by_dim.values())) <= 1:
        return f"{next(iter(by_dim.values()), None)} B"
    return ", ".join(f"{smem} B at D={dim}" for dim, smem in by_dim.items())


def emit(db: Store, study: Study, target: GpuSpec, gpu_used: str | None = None, top: int = 3,
         command: str = "python -m tuner.emit") -> Emitted:
    """The config list for a study on a target, from the store.

    Args:
        gpu_used: whose measurements, when the store has several GPUs (default: the one
            with the most timed configs).

    Raises:
        EmitError: the store's study of that name is another (its fingerprint differs), nothing
            timed, an unknown ``gpu_used``, or a config over the budget.
    """
    stored = db.stored_study(study.name)
    if stored is not None and stored.fingerprint != study.fingerprint:      # as the sweep refuses it
        raise EmitError(f"{study.path} is named {study.name!r}, but {db.url} holds a different study under that "
                        f"name (swept from {stored.path}); give --study the file that sweep was given, or the "
                        f"--storage this study was swept into")
    try:
        gpu, rows = winners.measured_on(db.results(study.name, target.name), gpu_used)
    except ValueError as exc:
        raise EmitError(str(exc)) from None
    if not records.fully_timed(rows):
        raise EmitError(f"no config of study {study.name!r} was timed on every shape on {target.name} in {db.url}; "
                        f"run {sweep_command(study, target.name, db.url)} on a GPU first")
    entries = select(rows, winners.verdicts_of(db, study.name, target.name, gpu), top, study.kernel.config_type)
    check_budget(entries, target)
    return Emitted(render(entries, study, target, gpu, rows, command), entries, gpu)


def write(emitted: Emitted, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(emitted.text)


ROUTE_TABLE_NAME = "route_table.py"      # --route-table's file beside the list, where no path is given


def route_table_source() -> Path:
    """The route table a default call reads here: the file ``FA2_TUNER_ROUTE_TABLE`` names, else the committed one.

    Raises:
        ValueError: that file is missing or is not a route table (the message names the variable).
    """
    from kernel import route

    route.measured_tables()             # loads and checks the user's file, as the default call would
    return Path(route.measured_table_file()).resolve()


def write_route_table(source: Path, path: Path) -> str:
    """Copy the route table ``source`` to ``path`` (nothing where they are one file); the line that says so."""
    from kernel.route import ROUTE_TABLE_ENV

    if path.resolve() != source:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source.read_text())
    return (f"# route table {source} written to {path}; a default call reads it after: "
            f"export {ROUTE_TABLE_ENV}={shlex.quote(str(path.resolve()))}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tuner.emit",
        description="Write the sweep's best configs as a @triton.autotune config list (and print it).",
        epilog="examples:\n  python -m tuner.emit --study article --gpu sm_90\n"
               "  python -m tuner.emit --study article --gpu sm_90 --top 4 --out kernel/triton/configs_h200.py\n"
               "  python -m tuner.emit --study article --gpu sm_90 --verify out.md   # on the GPU: autotune vs best\n"
               "  python -m tuner.emit --study article --gpu sm_90 --route-table   # and the route table beside it",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", required=True, help="study name or file, as given to the sweep")
    parser.add_argument("--gpu", required=True, help="the sweep's target (sm_89, sm_90, h200, ...)")
    parser.add_argument("--pass", dest="pass_", choices=PASSES, default=None,
                        help="the pass whose results to list, as given to the sweep's --pass: fwd, bwd or fwd+bwd; "
                             "default the study's own. Another pass than the study file's lists the results stored "
                             "as study <name>-<pass>, as a @triton.autotune list of that pass's kernel")
    parser.add_argument("--storage", default=DEFAULT_URL, type=nonempty, help=f"database URL (default {DEFAULT_URL})")
    parser.add_argument("--gpu-used", help="which GPU's measurements, when the store has several (default: the one "
                                           "with most timed configs)")
    parser.add_argument("--top", type=int, default=3,
                        help="best configs overall to add to the shape winners (default 3)")
    parser.add_argument("--out", help=f"file to write (default {DEFAULT_OUT}/configs/<study>_<target>_configs.py)")
    parser.add_argument("--verify", help="on a GPU: time the autotuned kernel with this file's list against each "
                                         "shape's best config, and write a markdown table to this path")
    parser.add_argument("--route-table", nargs="?", const="", metavar="PATH",
                        help="also write the route table the default call reads here (the file "
                             "$FA2_TUNER_ROUTE_TABLE names, else the committed kernel/route_table.py) to PATH "
                             f"(default: {ROUTE_TABLE_NAME} beside the list); measure your GPU's with "
                             "python -m benchmarks.route --table FILE")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        study = load(args.study).for_pass(getattr(args, "pass_", None))
        target = GpuSpec.from_name(args.gpu)
    except (StudyError, ValueError, RuntimeError) as exc:
        return usage_error(parser, str(exc))
    if args.top < 0:
        return usage_error(parser, f"--top {args.top} must be 0 or more")
    default = Path(DEFAULT_OUT) / "configs" / f"{study.name}_{target.name}_configs.py"
    out = Path(args.out) if args.out is not None else default
    try:
        store_file = sqlite_file(parse_url(args.storage))
    except StoreError:                  # a URL that is not one: the store says so below
        store_file = None
    table = None if args.route_table is None else Path(args.route_table or out.parent / ROUTE_TABLE_NAME)
    for flag, given in (("--out", out if args.out is None else args.out), ("--verify", args.verify),
                        ("--route-table", table)):
        problem = unwritable(given, "file") if given is not None else None
        if problem:
            return usage_error(parser, f"{flag} {str(given)!r} {problem}")
        if given is not None and store_file is not None and Path(given).resolve() == store_file:
            return usage_error(parser, f"{flag} {str(given)!r} is the database --storage {args.storage!r} reads: "
                                       "writing there would replace it; give another file")
    written = [out] + ([Path(args.verify)] if args.verify else [])
    if table is not None and table.resolve() in {path.resolve() for path in written}:
        return usage_error(parser, f"--route-table {str(table)!r} is the file --out or --verify writes; give another")
    try:
        source = route_table_source() if table is not None else None
    except ValueError as exc:
        return usage_error(parser, f"--route-table: {exc}")
    if args.verify:
        import torch

        if not torch.cuda.is_available():
            return usage_error(parser, f"--verify {args.verify!r} times the emitted list on a CUDA GPU, and none is "
                                       "visible here; leave it out to write the list alone")
    command = " ".join(["python -m tuner.emit", *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    try:
        db = Store(args.storage, create=False, reads_only=True)      # a read-only mount will do
        emitted = emit(db, study, target, args.gpu_used, args.top, command)
    except (StoreError, EmitError) as exc:
        return usage_error(parser, str(exc))
    write(emitted, out)
    print(emitted.text)
    print(f"# written to {out}", file=sys.stderr)
    if table is not None:
        print(write_route_table(source, table), file=sys.stderr)
    if args.verify:
        from tuner.verify import verify

        rows = db.results(study.name, target.name, emitted.gpu)
        return verify(out, study, rows, Path(args.verify), winners.verdicts_of(db, study.name, target.name,
                                                                              emitted.gpu))
    return 0


if __name__ == "__main__":
    from tuner.console import run

    run(main)

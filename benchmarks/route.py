"""The measured route: our candidates against each other and SDPA over a grid of shapes, and the table the
default call reads (issue 39).

For every (pass, head dim, causal, length N, batch x heads) of the grid, the candidates of a default
call (:mod:`kernel.candidates`: each of our kernels at its default config, and at short lengths the
tiles that waste less past the end; the default call as it routes today) and SDPA's flash and cuDNN
backends are timed together in rotating rounds, each paired with cuDNN in its windows
(:func:`kernel.measure.retime.paired_together`). The fastest candidate (by the paired ratio) is the
bucket's entry of the route table; ``--table`` writes the table as a Python module
(``kernel/route_table.py`` is the one the default call reads), its docstring naming this command, the
GPU, the versions and the date, and ``--markdown`` the report (every ratio, and the route each shape took).

    python -m benchmarks.route                                   # the whole grid, both passes
    python -m benchmarks.route --pass fwd --n 512 --n 1024 --bh 4x8
    python -m benchmarks.route --table kernel/route_table.py --markdown docs/results/route.md
    python -m benchmarks.route --n 256 --n 512 --table kernel/route_table.py --update   # those lengths only
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys

import torch

from benchmarks._report import first_line, settle, write_report

LENGTHS = (256, 512, 1024, 2048, 4096, 8192, 16384)
BATCH_HEADS = ((4, 8), (16, 16), (32, 16))       # B x H: 32, 256 and 512 heads' worth of programs
# The 512-head bucket is measured up to this length only: it is there for the short, wide calls of training
# (B32 H16 N512 took the 256-head bucket's kernel and ran its backward at 0.87x the faster one,
# docs/results/2026-12-03-h200-route.md); longer calls take the 256-head bucket (nearest length first),
# and each of those shapes would take minutes to time.
WIDE_UP_TO = {(32, 16): 4096}
HEAD_DIMS = (64, 128)
# The candidates timed (kernel.candidates), Triton's first: each kernel at its default config everywhere, the
# short-length tiles (fewer rows wasted past the end, more programs) only up to SHORT_UP_TO, where a default
# tuned at N=4096 loses most (docs/results/2026-12-03-h200-route.md). The pipelined Gluon forward is left out:
# ws ran ahead of it at every length measured (docs/results/2026-12-01-h200-gluon.md).
OURS = {"fwd": ("triton", "triton_64x64", "ws", "ws_128", "ws_64", "ws_64x64", "ws_64_p2", "ws_64x64_p2", "ws_128_p1",
                "ws_64x64_r144", "ws_64x64_p3", "ws_64x64_p4", "ws_p0"),
        "bwd": ("triton", "gluon", "gluon_1c", "gluon_2c", "gluon_128")}
SHORT_ONLY = frozenset({"triton_64x64", "ws_128", "ws_64", "ws_64x64", "ws_64_p2", "ws_64x64_p2", "ws_128_p1",
                        "ws_64x64_p3", "ws_p0", "gluon_1c"})
SHORT_UP_TO = 2048
ROUND_OFF = 0.01          # a candidate within 1% of the Triton kernel is a tie: the table keeps the Triton kernel


def timed_candidates(pass_: str, n: int, head_dim: int, causal: bool) -> dict[str, dict]:
    """name -> the config it runs, of the candidates timed at this shape: :data:`SHORT_ONLY` ones only up to
    :data:`SHORT_UP_TO`, each at its head dims only, and none that runs the same config as one before it
    (``ws_128`` is D=128's ``ws``)."""
    from kernel.candidates import candidates

    chosen, seen = {}, []
    for name in OURS[pass_]:
        if (name in SHORT_ONLY and n > SHORT_UP_TO) or head_dim not in candidates(pass_)[name].head_dims:
            continue
        config = resolved(pass_, name, head_dim, causal)
        if (candidates(pass_)[name].kernel, config) not in seen:
            seen.append((candidates(pass_)[name].kernel, config))
            chosen[name] = config
    return chosen


def resolved(pass_: str, name: str, head_dim: int, causal: bool) -> dict:
    """The whole config candidate ``name`` runs at this head dim and mask on sm_90 (its knobs over the default)."""
    from dataclasses import asdict, replace

    from kernel.candidates import candidates
    from kernel.triton.defaults import default_bwd_config, default_config

    candidate = candidates(pass_)[name]
    if pass_ == "fwd" and not candidate.gluon:
        return default_config(head_dim, causal, 90) | candidate.settings
    if pass_ == "fwd":
        from kernel.gluon.fwd.launch import config_from

        return asdict(config_from(candidate.kernel, head_dim, causal, candidate.settings))
    if not candidate.gluon:
        return asdict(default_bwd_config(head_dim, causal, 90))
    from kernel.route import GLUON_BWD_ROUTES

    return asdict(replace(GLUON_BWD_ROUTES[(head_dim, causal)], **candidate.settings))


def gluon_set_calls(sets: list[tuple], causal: bool, variant: str, knobs: dict) -> list:
    """One call of the Gluon forward ``variant`` at ``knobs`` per (q, k, v, out, lse) set."""
    from kernel.gluon.fwd.launch import flash_attn_fwd_gluon

    return [lambda s=s: flash_attn_fwd_gluon(s[0], s[1], s[2], causal, variant=variant, **knobs, out=s[3], lse=s[4])
            for s in sets]


def sdpa_pins(calls: dict, sets: list[tuple], causal: bool, only: tuple[str, ...] | None = None) -> dict:
    """SDPA's forward backends that run here (``only`` those named) added to ``calls``: name -> their pin."""
    from kernel.measure.timing import runs, sdpa_backends

    pins = {}
    for name, pinned in sdpa_backends([s[:3] for s in sets], causal).items():
        if runs(pinned) and (only is None or name in only):
            pins[name], calls[name] = pinned
    return pins


def forward_calls(batch: int, heads: int, n: int, head_dim: int, causal: bool) -> tuple[dict, dict]:
    """(name -> calls over the input sets, name -> SDPA pin) of the forward's candidates on one shape
    (:func:`timed_candidates`), the default call and SDPA's backends."""
    from benchmarks.gluon import make_sets, set_calls
    from kernel.candidates import FORWARD
    from kernel.triton.defaults import default_config

    sets = make_sets(batch, heads, n, head_dim, torch.bfloat16)
    calls = {}
    for name in timed_candidates("fwd", n, head_dim, causal):
        candidate = FORWARD[name]
        if candidate.gluon:
            calls[name] = gluon_set_calls(sets, causal, candidate.kernel, candidate.settings)
        else:
            calls[name] = set_calls(sets, causal, default_config(head_dim, causal) | candidate.settings)
    calls["default"] = set_calls(sets, causal, {})
    return calls, sdpa_pins(calls, sets, causal)


def backward_calls(batch: int, heads: int, n: int, head_dim: int, causal: bool) -> tuple[dict, dict]:
    """The same for the backward: the candidates (the Triton backward at its default config, the Gluon
    backward at its defaults and knobs), the default call, and SDPA's backward by backend."""
    from benchmarks.bwd import make_sets
    from benchmarks.bwd_gluon import _gluon_calls, _triton_calls
    from kernel import flash_attn_bwd
    from kernel.candidates import BACKWARD
    from kernel.measure.timing import runs
    from tuner.kernels.triton_bwd import KERNEL as TUNED_BACKWARD
    from tuner.problem import Problem

    problem = Problem(batch=batch, heads=heads, n_q=n, n_k=n, head_dim=head_dim, dtype="bf16", causal=causal)
    sets = make_sets(problem)
    calls = {name: _gluon_calls(sets, causal, BACKWARD[name].settings) if BACKWARD[name].gluon
             else _triton_calls(sets, causal) for name in timed_candidates("bwd", n, head_dim, causal)}
    calls["default"] = [lambda s=s: flash_attn_bwd(s["dout"], s["q"], s["k"], s["v"], s["out"], s["lse"], causal)
                        for s in sets]
    pins = {}
    for name, pinned in TUNED_BACKWARD.baselines(sets, problem).items():
        if runs(pinned):
            pins[name], calls[name] = pinned
    return calls, pins


def timed_row(row: dict, setup) -> dict:
    """``row`` with each call's ms and paired ratio to cuDNN (``row["ms"]``, ``row["vs_cudnn"]``): ``setup()``
    gives (name -> calls, name -> SDPA pin); a shape that cannot be set up, or a call that fails its first
    run, is a note with its reason (``row["notes"]``), the others timed. ``benchmarks.tile_order`` times so too."""
    from kernel.measure.retime import paired_together

    try:
        calls, pins = setup()
    except Exception as exc:  # noqa: BLE001 (a shape that cannot be set up is a row with its reason)
        row["notes"]["setup"] = first_line(exc)
        settle()
        return row
    for name in [name for name in calls if name not in pins]:
        try:
            calls[name][0]()
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 (a candidate that fails is noted, the others timed)
            calls.pop(name)
            row["notes"][name] = first_line(exc)
            settle()
    row["ms"], row["vs_cudnn"] = paired_together(calls, pins, "cudnn")
    return row


def measure(pass_: str, batch: int, heads: int, n: int, head_dim: int, causal: bool) -> dict:
    """One shape's row: each candidate's ms and paired ratio to cuDNN, the winner of ours, notes."""
    row = dict(pass_=pass_, B=batch, H=heads, N=n, D=head_dim, causal=causal, ms={}, vs_cudnn={}, notes={})
    calls = forward_calls if pass_ == "fwd" else backward_calls
    timed_row(row, lambda: calls(batch, heads, n, head_dim, causal))
    if "setup" in row["notes"]:                # nothing was timed: no winner
        return row
    timed = {name: row["vs_cudnn"][name] for name in OURS[pass_] if row["vs_cudnn"].get(name)}
    row["winner"] = winner(timed)
    return row


def winner(ratios: dict[str, float]) -> str | None:
    """The fastest of our candidates by the paired ratio (higher is faster); within :data:`ROUND_OFF` of the
    Triton kernel at its default the Triton kernel, so that noise never flips a bucket to another candidate."""
    if not ratios:
        return None
    best = max(sorted(ratios), key=ratios.get)
    if "triton" in ratios and ratios[best] < ratios["triton"] * (1 + ROUND_OFF):
        return "triton"
    return best


ENTRY = re.compile(r"^    \((\d+), (True|False), (\d+), (\d+)\): '(\w+)',", re.M)


def kept_entries(path: str) -> tuple[str | None, dict[str, dict[tuple, str]]]:
    """(when its entries were measured, table name -> bucket -> line) of the route table at ``path``, for
    ``--update``: the lines as written, comments and all; (None, {}) where there is no such file. The when is
    its date, or "EARLIEST to DATE" where it kept entries of an earlier table itself (an update of an update)."""
    if not os.path.isfile(path):
        return None, {}
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    date = re.search(r'"date": \'([^\']*)\'', source)
    earliest = re.search(r"did not measure keep the entries of the table it updated\s+\(measured (.+?)(?: to .+?)?\)\.",
                         source)
    kept = {}
    for name in ("FORWARD", "BACKWARD"):
        block = source.split(f"{name} = {{", 1)[1].split("\n}", 1)[0] if f"{name} = {{" in source else ""
        kept[name] = {(int(d), c == "True", int(n), int(bh)): line for line in block.splitlines()
                      for d, c, n, bh, _ in ENTRY.findall(line)}
    when = date.group(1) if date else None
    if when and earliest and earliest.group(1) not in (when, "earlier"):
        when = f"{earliest.group(1)} to {when}"
    return when, kept


def table_source(rows: list[dict], env: dict, command: str, kept: dict | None = None,
                 kept_date: str | None = None) -> str:
    """The route table as a Python module: MEASURED (command, GPU, versions, date), FORWARD, BACKWARD; with
    ``kept`` (:func:`kept_entries`), its lines stay at every bucket the rows did not measure."""
    kept = kept or {}
    lines = ['"""The measured route: which kernel a default call runs, by pass, head dim, causal, length and',
             "batch x heads (read by kernel/route.py; regenerate it for your GPU with the command below).", "",
             f"Measured by ``{command}``", f"on {env['gpu']}, torch {env['torch']}, Triton {env['triton']}, "
             f"{env['date']}.", "Each entry is the fastest of our candidates there (kernel/candidates.py), timed "
             "side by side", "with SDPA-cuDNN (paired rounds); the comment gives each one's speed as a ratio to "
             "cuDNN's."]
    if any(kept.values()):
        lines += [f"The buckets this command did not measure keep the entries of the table it updated "
                  f"(measured {kept_date or 'earlier'})."]
    lines += ['"""', "", "MEASURED = {", f"    \"command\": {command!r},", f"    \"gpu\": {env['gpu']!r},",
              f"    \"torch\": {env['torch']!r},", f"    \"triton\": {env['triton']!r},",
              f"    \"date\": {env['date']!r},", "}", ""]
    for pass_, name in (("fwd", "FORWARD"), ("bwd", "BACKWARD")):
        entries = dict(kept.get(name, {}))
        for r in (r for r in rows if r["pass_"] == pass_ and r.get("winner")):
            ratios = ", ".join(f"{k} {r['vs_cudnn'][k]:.2f}" for k in OURS[pass_] if r["vs_cudnn"].get(k))
            key = (r["D"], r["causal"], r["N"], r["B"] * r["H"])
            entries[key] = f"    {key!r}: {r['winner']!r},   # {ratios}"
        lines.append(f"{name} = {{   # (head dim, causal, length, batch x heads) -> candidate")
        lines += [entries[key] for key in sorted(entries)]
        lines += ["}", ""]
    return "\n".join(lines)


def write_table(path: str, source: str) -> None:
    """The table written whole or not at all (a run killed while writing leaves the previous one)."""
    partial = f"{path}.partial"
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(source)
    os.replace(partial, path)


def _fmt(value) -> str:
    return f"{value:.2f}" if isinstance(value, float) else "n/a"


def report(rows: list[dict], env_line: str, command: str) -> str:
    """The Markdown report: every shape's ratios to SDPA-cuDNN, the winner of ours and the default's route."""
    out = [f"{env_line}", "", f"Command: `{command}`", "",
           "Ratios are SDPA-cuDNN's time over the candidate's, paired in the same windows (above 1 is faster "
           "than cuDNN); `flash` is SDPA-flash's. `default` is the default call as routed in this run.", "",
           "| pass | shape | ours | default | flash | winner | default / best of ours | notes |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ours = {name: r["vs_cudnn"][name] for name in OURS[r["pass_"]] if r["vs_cudnn"].get(name)}
        best = max(ours.values(), default=None)
        default = r["vs_cudnn"].get("default")
        shape = f"B{r['B']} H{r['H']} N{r['N']} D{r['D']}{' causal' if r['causal'] else ''}"
        notes = "; ".join(f"{k}: {v}" for k, v in r["notes"].items())
        cell = ", ".join(f"{name} {_fmt(ratio)}" for name, ratio in ours.items()) or "n/a"
        out.append(f"| {r['pass_']} | {shape} | {cell} | {_fmt(default)} | "
                   f"{_fmt(r['vs_cudnn'].get('flash'))} | {r.get('winner') or 'n/a'} | "
                   f"{_fmt(default / best) if default and best else 'n/a'} | {notes} |")
    return "\n".join(out) + "\n"


def _bh(text: str) -> tuple[int, int]:
    try:
        batch, heads = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--bh {text!r} must be BATCHxHEADS, e.g. 4x8") from None
    if batch < 1 or heads < 1:
        raise argparse.ArgumentTypeError(f"--bh {text!r}: batch and heads must be at least 1")
    return batch, heads


def parse(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.route", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="examples:\n" + "\n".join(__doc__.split("\n\n")[-1].splitlines()))
    parser.add_argument("--pass", dest="passes", action="append", choices=("fwd", "bwd"),
                        help="the pass to measure (repeat for both; default both)")
    parser.add_argument("--head-dim", type=int, action="append", choices=HEAD_DIMS)
    parser.add_argument("--n", type=int, action="append", help=f"a length (default {', '.join(map(str, LENGTHS))})")
    parser.add_argument("--bh", type=_bh, action="append",
                        help="BATCHxHEADS (default 4x8, 16x16, and 32x16 up to N=4096)")
    parser.add_argument("--causal", choices=("yes", "no", "both"), default="both")
    parser.add_argument("--table", help="write the route table (a Python module) to this file, again after each shape")
    parser.add_argument("--update", action="store_true",
                        help="with --table: keep the entries the file already holds at buckets this run does not "
                             "measure (a grid measured in parts, or a run cut short, resumed)")
    parser.add_argument("--markdown", help="write the report to this file")
    parser.add_argument("--json", help="write the raw rows to this file")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.n or ()):
        parser.error(f"--n must be at least 1; got {min(args.n)}")
    for flag in ("table", "markdown", "json"):        # refused now, not after the minutes of timing
        problem = _unwritable(getattr(args, flag))
        if problem:
            parser.error(f"--{flag} {getattr(args, flag)}: {problem}")
    return args


def _unwritable(path: str | None) -> str | None:
    """Why ``path`` cannot be written (None: it can, or no path)."""
    if not path:
        return None
    if os.path.isdir(path):
        return "is a directory; name a file"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"its folder {folder} does not exist"
    if not os.access(path if os.path.exists(path) else folder, os.W_OK):
        return "is not writable here"
    return None


def grid(args) -> list[tuple[int, int, int]]:
    """(batch, heads, length) of each shape: every asked length at every asked BATCHxHEADS; by default
    the 512-head bucket only up to :data:`WIDE_UP_TO`."""
    return [(batch, heads, n) for batch, heads in args.bh or BATCH_HEADS for n in args.n or LENGTHS
            if args.bh or args.n or n <= WIDE_UP_TO.get((batch, heads), n)]


def main(argv=None) -> int:
    from kernel.measure.timing import environment, environment_line, warm_gpu

    args = parse(argv)
    if not torch.cuda.is_available():
        print("benchmarks.route times kernels on a CUDA GPU; this machine has none", file=sys.stderr)
        return 2
    causals = {"yes": (True,), "no": (False,), "both": (False, True)}[args.causal]
    command = "python -m benchmarks.route " + shlex.join(sys.argv[1:] if argv is None else argv)
    env = environment()
    warm_gpu()
    kept_date, kept = kept_entries(args.table) if args.update else (None, {})
    rows = []
    for pass_ in args.passes or ("fwd", "bwd"):
        for head_dim in args.head_dim or HEAD_DIMS:
            for causal in causals:
                for batch, heads, n in grid(args):
                    row = measure(pass_, batch, heads, n, head_dim, causal)
                    rows.append(row)
                    print(report([row], "", "").splitlines()[-1], flush=True)
                    # Written after every shape: a run cut short keeps what it measured (--update resumes it).
                    write_report(args.markdown, report(rows, environment_line(env), command), args.json, rows)
                    if args.table:
                        write_table(args.table, table_source(rows, env, command, kept, kept_date))
    print(report(rows, environment_line(env), command))
    return 0 if all(r.get("winner") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

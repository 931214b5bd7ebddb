"""The Gluon kernels' instruction mix under the installed Triton, cross-compiled for sm_90 (no GPU).

    cd <repo>; unset TRITON_INTERPRET
    PYTHONPATH=$PWD <venv>/bin/python scripts/gluon_mix.py [--markdown FILE] [--json FILE]
    PYTHONPATH=$PWD python scripts/gluon_mix.py --combine A.json B.json ... [--markdown FILE]

Measures, per kernel case, through the repo's own ``compile_report`` (kernel.gluon.fwd.compile,
kernel.gluon.bwd.compile): shared memory compiled and modelled, the cubin's REG and STACK (spills),
and counts of PTX instructions: wgmma, TMA loads / stores / reduces, bulk wait_group.read, mbarrier
waits, CTA barriers, async-proxy fences, setmaxnreg and local-memory accesses. Cases: the forward's
default configs (pipelined and ws, D=64 and 128, causal and not, N=1000), the ws binaries that split
the last wave (D=64 and 128), the backward's defaults (D=64 and 128, causal and not). The table
heads with the Triton, ptxas and torch versions; ``--combine`` puts several runs' JSON (one per
Triton release) side by side, a cell "a / b / c" where the releases differ.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import asdict

N = 1000
MIX = {"wgmma": r"wgmma\.mma_async", "tma.load": r"cp\.async\.bulk\.tensor\.\dd\.shared::\w+\.global",
       "tma.store": r"cp\.async\.bulk\.tensor\.\dd\.global\.shared", "tma.reduce": r"cp\.reduce\.async\.bulk",
       "wait_group.read": r"cp\.async\.bulk\.wait_group\.read", "mbar.try_wait": r"mbarrier\.try_wait",
       "bar.sync": r"\bbar\.sync|\bbarrier\.sync", "fence.proxy.async": r"fence\.proxy\.async",
       "setmaxnreg": r"setmaxnreg", "st/ld.local": r"\b(?:st|ld)\.local"}
COLUMNS = ["shared", "model", "REG", "STACK", *MIX]


def forward_cases() -> dict[str, tuple]:
    """name -> (config, head_dim, causal, split) of the forward's cases."""
    from kernel.gluon.fwd.config import GluonConfig, default_gluon_config

    cases = {f"fwd D{d} {'causal' if c else 'full'} {v}": (default_gluon_config(d, c, v), d, c, False)
             for v in ("pipelined", "ws") for d in (64, 128) for c in (False, True)}
    # The split-last-wave binaries, as tests/kernel/gluon/fwd/test_gluon.py's TAIL_SPLITS: the D=64 ws default and an
    # in-order persistent two-consumer tile at D=128 (the D=128 default overlaps, so never splits).
    cases["fwd D64 full ws split"] = (default_gluon_config(64, False, "ws"), 64, False, True)
    cases["fwd D128 full ws split"] = (GluonConfig("ws", 128, 128, num_stages=2, overlap=False, pingpong=False,
                                                   persistent=1), 128, False, True)
    return cases


def backward_cases() -> dict[str, tuple]:
    from kernel.gluon.bwd.config import GLUON_BWD_DEFAULTS

    return {f"bwd D{d} {'causal' if c else 'full'}": (GLUON_BWD_DEFAULTS[(d, c)], d, c, False)
            for d in (64, 128) for c in (False, True)}


def versions() -> dict[str, str]:
    import torch
    import triton
    from triton.backends.nvidia.compiler import get_ptxas

    from kernel.gluon.fwd.compile import TARGET_ARCH

    tool = get_ptxas(TARGET_ARCH)
    return {"triton": triton.__version__, "ptxas": tool.version, "ptxas_path": tool.path,
            "torch": torch.__version__, "python": sys.executable}


def measure(name: str, config, head_dim: int, causal: bool, split: bool) -> dict:
    """One case's row: compile_report's numbers and the PTX counts (the PTX by a second cross_compile,
    which Triton's cache answers with the binary compile_report made)."""
    if name.startswith("fwd"):
        from kernel.gluon.fwd import compile as module
        extra = {"split": True} if split else {}
    else:
        from kernel.gluon.bwd import compile as module
        extra = {}
    case = dict(config=asdict(config), head_dim=head_dim, causal=causal, n_q=N, n_k=N, **extra)
    report = module.compile_report(case)
    row = {"case": name, "config": case["config"], "split": split, "error": report.get("error"),
           "model": report["model"]}
    if row["error"]:
        return row
    ptx = module.cross_compile(config, head_dim, causal, N, N, **extra).asm["ptx"]
    resources = report["resources"]
    row.update(shared=report["shared"], REG=resources.get("REG"), STACK=resources.get("STACK"),
               setmaxnreg_values=[" ".join(pair) for pair in report["regs"]], ptxas_warnings=report["ptxas_warnings"],
               **{key: len(re.findall(pattern, ptx)) for key, pattern in MIX.items()})
    return row


def table(runs: list[dict]) -> str:
    """A markdown table of one or more runs (same cases), a cell's values joined by " / " where they differ."""
    releases = " / ".join(run["versions"]["triton"] for run in runs)
    if len({len(run["rows"]) for run in runs}) != 1:
        raise SystemExit(f"error: the runs have different numbers of cases: {[len(run['rows']) for run in runs]}")
    lines = [f"| kernel case ({releases}) | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for index, row in enumerate(runs[0]["rows"]):
        rows = [run["rows"][index] for run in runs]
        if any(other["case"] != row["case"] for other in rows):
            raise SystemExit(f"error: the runs' cases differ at row {index}: {[r['case'] for r in rows]}")
        cells = []
        for column in COLUMNS:
            values = [str(r.get(column, "ERROR")) for r in rows]
            cells.append(values[0] if len(set(values)) == 1 else "**" + " / ".join(values) + "**")
        lines.append(f"| {row['case']} | " + " | ".join(cells) + " |")
    errors = [f"- {run['versions']['triton']} {r['case']}: {r['error']}" for run in runs for r in run["rows"]
              if r["error"]]
    return "\n".join(lines + errors) + "\n"


def header(runs: list[dict]) -> str:
    return "".join(f"- Triton {v['triton']}, ptxas {v['ptxas']} ({v['ptxas_path']}), torch {v['torch']}\n"
                   for v in (run["versions"] for run in runs))


def parse(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", metavar="FILE", help="also write the table here")
    parser.add_argument("--json", metavar="FILE", help="write this run's versions and rows here")
    parser.add_argument("--combine", nargs="+", metavar="JSON", help="tabulate these runs side by side instead")
    parser.add_argument("--only", metavar="TEXT", help="only the cases whose name contains TEXT")
    args = parser.parse_args(argv)
    if args.combine and args.json:
        parser.error("--json: a combined table is written with --markdown only")
    missing = [path for path in args.combine or [] if not os.path.isfile(path)]
    if missing:
        parser.error(f"--combine: no such file: {', '.join(missing)}")
    if not args.combine and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        parser.error("TRITON_INTERPRET is set: Gluon cannot compile under the interpreter; unset it")
    return args


def run(only: str | None) -> dict:
    from kernel.gluon.api import gluon_api_support

    reason = gluon_api_support()
    if reason is not None:
        raise SystemExit(f"error: {reason}")
    cases = {**forward_cases(), **backward_cases()}
    rows = []
    for name, case in cases.items():
        if only is None or only in name:
            rows.append(measure(name, *case))
            print(f"{name}: {json.dumps({k: rows[-1].get(k) for k in COLUMNS})}", file=sys.stderr, flush=True)
    return {"versions": versions(), "n": N, "rows": rows}


def main(argv=None) -> int:
    args = parse(argv)
    if args.combine:
        runs = []
        for path in args.combine:
            with open(path) as handle:
                runs.append(json.load(handle))
    else:
        runs = [run(args.only)]
    text = header(runs) + "\n" + table(runs)
    print(text, end="")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(runs[0], handle, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as handle:
            handle.write(text)
    return 1 if any(r["error"] for one in runs for r in one["rows"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m scripts.battery [--family NAME ...] [--only SUBSTRING ...] [--markdown FILE] [--json FILE] [--jobs N]``

Builds the fixtures (two tiny sweeps), runs the chosen families' cases on ``--jobs`` threads (each case a
subprocess in its own folder under a temporary root), prints one line per bad case as it ends, the summary
table at the end, and writes the report and the records where asked. Exit 0 when every case was ok or
skipped, 1 otherwise.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import datetime, timezone
from pathlib import Path

from scripts.battery import FAMILIES, report as rep
from scripts.battery.fixtures import build
from scripts.battery.runner import log, run_case


def collect(families) -> list:
    from scripts.battery import (
        advice_cases,
        args_studies,
        args_sweep,
        args_tools,
        env_cases,
        help_cases,
        kernel_cases,
    )

    modules = {"help": [help_cases], "args": [args_sweep, args_studies, args_tools], "env": [env_cases],
               "kernel": [kernel_cases], "advice": [advice_cases]}
    found = [case for family in families for module in modules[family] for case in module.cases()]
    names = [c.name for c in found]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SystemExit(f"battery: case names used twice: {', '.join(duplicates)}")
    return found


def parse(argv):
    parser = argparse.ArgumentParser(prog="python -m scripts.battery", description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", action="append", choices=FAMILIES, help="only this family (repeatable)")
    parser.add_argument("--only", action="append", help="only cases whose name contains this (repeatable)")
    parser.add_argument("--markdown", help="write the report to this file")
    parser.add_argument("--json", help="write every record to this file")
    parser.add_argument("--jobs", type=int, default=2, help="cases at a time (default 2)")
    parser.add_argument("--list", action="store_true", help="list the cases and their commands, run nothing")
    parser.add_argument("--keep", action="store_true", help="keep each case's folder (printed at the end)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs} must be at least 1")
    return args


def run_all(cases, jobs: int, root: Path, fixtures: Path, keep: bool) -> list[dict]:
    records, done = [], 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_case, case, root, fixtures, keep): case for case in cases}
        for future in as_completed(futures):
            record = future.result()
            records.append(record)
            done += 1
            if record["verdict"] not in ("ok", "skipped"):
                log(f"[{done}/{len(cases)}] {record['verdict']}: {record['name']}: {record.get('why', '')}")
            elif done % 25 == 0:
                log(f"[{done}/{len(cases)}] ...")
    order = {case.name: i for i, case in enumerate(cases)}
    return sorted(records, key=lambda r: order[r["name"]])


def main(argv=None) -> int:
    args = parse(argv)
    # A battery started in the background (`cmd &` in a script) inherits SIGINT ignored, and so would every case:
    # a command that leaves Ctrl-C to Python (tuner.budget) could then not be interrupted (2026-12-05: the two
    # budget-space Ctrl-C cases ran past their limits). A handler here is reset to the default in each case.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    families = args.family or list(FAMILIES)
    cases = [c for c in collect(families) if not args.only or any(s in c.name for s in args.only)]
    if args.list:
        for case in cases:
            print(f"{case.family}\t{case.name}\t{'/'.join(map(str, case.expect))}\t{case.command}")
        return 0
    head, status = rep.git_state()
    started, clock = datetime.now(timezone.utc), time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="fa2-battery-"))
    log(f"battery: {len(cases)} cases of {', '.join(families)} in {root}, {args.jobs} at a time")
    try:
        records = run_all(cases, args.jobs, root, build(root), args.keep)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    meta = {"command": " ".join(["python -m scripts.battery", *map(shlex.quote, sys.argv[1:] if argv is None
                                                                   else argv)]),
            "started": started.strftime("%Y-%m-%d %H:%M UTC"),
            "finished": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "seconds": time.monotonic() - clock, "head": head, "status": status, "machine": rep.machine(),
            **dict(zip(("head_after", "status_after"), rep.git_state())),
            "versions": rep.versions(), "root": str(root)}
    rep.write(records, meta, args.markdown, args.json)
    print(rep.table(rep.summary(records)))
    return 0 if all(r["verdict"] in ("ok", "skipped") for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())

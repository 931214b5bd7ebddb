"""The battery's outputs: a Markdown report (machine, versions, the command, a table per family, every bad case
with its command, exit code and first stderr line) and the JSON of every record."""

from __future__ import annotations

import json
import platform
import re
import subprocess
from collections import Counter
from pathlib import Path

from scripts.battery import FAMILIES, ROOT
from scripts.battery.case import BAD
from scripts.battery.runner import PYTHON


def versions() -> dict:
    code = ("import sys, torch, triton, optuna, sqlalchemy; print(sys.version.split()[0], torch.__version__, "
            "triton.__version__, optuna.__version__, sqlalchemy.__version__)")
    done = subprocess.run([str(PYTHON), "-c", code], capture_output=True, text=True, timeout=120)
    names = ("python", "torch", "triton", "optuna", "sqlalchemy")
    return dict(zip(names, done.stdout.split())) if done.returncode == 0 else {"error": done.stderr[-300:]}


def machine() -> str:
    cpus = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return f"{platform.system()} {platform.release()}, {cpus} cores ({model}), no GPU"


def git_state() -> tuple[str, str]:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    status = subprocess.run(["git", "-C", str(ROOT), "status", "--short"], capture_output=True, text=True).stdout
    return head, status


def summary(records: list[dict]) -> list[dict]:
    rows = []
    for family in [f for f in FAMILIES if any(r["family"] == f for r in records)] + ["all"]:
        mine = [r for r in records if family == "all" or r["family"] == family]
        counts = Counter(r["verdict"] for r in mine)
        rows.append({"family": family, "cases": len(mine), **{v: counts.get(v, 0) for v in ("ok",) + BAD},
                     "skipped": counts.get("skipped", 0), "battery-error": counts.get("battery-error", 0),
                     "advice-skipped": sum(1 for r in mine for s in r.get("advice", []) if "skipped" in s)})
    return rows


def table(rows: list[dict]) -> str:
    columns = ["family", "cases", "ok", *BAD, "skipped", "battery-error"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [f"**{row[c]}**" if row["family"] == "all" else str(row[c]) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _tree(meta: dict) -> str:
    """The tree the cases ran on: one commit, clean, or what changed under the run."""
    after = meta.get("head_after", meta["head"])
    if meta["status"].strip() or after != meta["head"] or meta.get("status_after", "").strip():
        return (f"The tree changed under the run (at the start: {meta['head']}, `git status --short` "
                f"{meta['status'].strip() or 'clean'}; at the end: {after}, "
                f"{meta.get('status_after', '').strip() or 'clean'}): a case ran on the code of its moment.")
    return f"The tree was {meta['head']}, clean, from the first case to the last."


def _cell(text: str, limit: int = 240) -> str:
    text = re.sub(r"(.)\1{19,}", lambda m: f"{m.group(1) * 3}…({len(m.group(0))} × {m.group(1)})", text or "")
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def shown(record: dict) -> str:
    """The command as a reader would type it: the case's environment in front, the probe by its path."""
    env = " ".join(f"{k}={v}" if v is not None else f"-u {k}" for k, v in record.get("env", {}).items())
    command = record["command"].replace("@REPO@/", "")
    prefix = (f"env {env} " if "-u " in env else f"{env} ") if env else ""
    where = f" (read-only: {', '.join(record['readonly'])})" if record.get("readonly") else ""
    return f"{prefix}{command}{where}"


def bad_cases(records: list[dict]) -> str:
    bad = [r for r in records if r["verdict"] not in ("ok", "skipped")]
    if not bad:
        return "None.\n"
    lines = []
    for family in FAMILIES:
        mine = [r for r in bad if r["family"] == family]
        if not mine:
            continue
        lines += [f"### {family} ({len(mine)})", "", "| case | verdict | command | exit | first stderr line | why |",
                  "|---|---|---|---|---|---|"]
        for r in mine:
            step = next((s for s in r.get("advice", []) if s.get("verdict", "ok") != "ok"), None)
            command = shown(r) if step is None else f"{shown(r)} → advice: {step['command']}"
            source = step or r
            first = source.get("stderr_first", "")
            if source.get("stderr_key") and source["stderr_key"] != first:
                first = f"{first} … {source['stderr_key']}"
            lines.append(f"| `{r['name']}` | {r['verdict']} | `{_cell(command, 400)}` | {source.get('rc')} | "
                         f"{_cell(first)} | {_cell(source.get('why', r.get('why', '')))} {_cell(r.get('note', ''))} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def skipped(records: list[dict]) -> str:
    lines = [f"- `{r['name']}`: {r['why']}" for r in records if r["verdict"] == "skipped"]
    lines += [f"- `{r['name']}` advice `{s['command']}`: {s['skipped']}" for r in records
              for s in r.get("advice", []) if "skipped" in s]
    return "\n".join(lines) + "\n" if lines else "None.\n"


def markdown(records: list[dict], meta: dict) -> str:
    info = meta["versions"]
    parts = [
        f"# {meta['started'][:10]}: the new-user battery (`scripts/battery`)", "",
        f"Machine: {meta['machine']}. Python {info.get('python')}, torch {info.get('torch')}, Triton "
        f"{info.get('triton')}, Optuna {info.get('optuna')}, SQLAlchemy {info.get('sqlalchemy')}; kernels under "
        "`TRITON_INTERPRET=1` (fp32, fp16).", "",
        f"Run {meta['started']} to {meta['finished']} ({meta['seconds'] / 60:.1f} min), at {meta['head']}: "
        f"`{meta['command']}`", "",
        _tree(meta), "",
        "Verdicts: ok; timeout; traceback (a Python traceback on stderr or stdout); wrong-answer (the kernel "
        "differs from float64); wrong-exit (an exit code the case does not expect); unclear (the expected non-zero "
        "exit without a line matching the case's regex); changed-files (a refused call changed the folder).", "",
        table(summary(records)), "", "## Bad cases", "", bad_cases(records), "## Skipped", "", skipped(records),
    ]
    return "\n".join(parts)


def write(records: list[dict], meta: dict, markdown_path: str | None, json_path: str | None) -> None:
    if markdown_path:
        Path(markdown_path).write_text(markdown(records, meta))
    if json_path:
        Path(json_path).write_text(json.dumps({"meta": meta, "summary": summary(records), "records": records},
                                              indent=1, default=str))

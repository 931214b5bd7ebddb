"""Running one case: a fresh folder, its files hashed before and after, the command under a timeout (signals
sent where the case asks), its advice run after it, and the verdict.

The folder: ``<root>/<case>-XXXX/`` holds ``work/`` (the working folder) and ``home/`` (``HOME``); stdout and
stderr go to files beside the folders the hash covers. Read-only paths are bind mounts in a private mount
namespace (``unshare -m``), gone when the case ends.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from scripts.battery import ROOT
from scripts.battery.case import Case, FollowUp, Outcome, classify, first_line, key_line

VENV_BIN = ROOT / ".venv" / "bin"
PYTHON = VENV_BIN / "python"
SHARED_CACHE = ROOT / ".cache" / "fa2-tuner"
# variables of the battery's own environment that would steer the commands: a case sets them itself
DROPPED = ("TRITON_", "FA2_TUNER_", "PYTHONPATH", "PYTHONIOENCODING", "PYTHONUTF8", "LC_", "CUDA_", "VIRTUAL_ENV",
           "COLUMNS", "LINES")


@dataclass
class Context:
    dir: Path
    cwd: Path
    home: Path
    fixtures: Path
    log: Path

    def expand(self, text: str) -> str:
        for token, value in (("@DIR@", self.dir), ("@CWD@", self.cwd), ("@HOME@", self.home), ("@REPO@", ROOT),
                             ("@FIX@", self.fixtures), ("@PY@", PYTHON)):
            text = text.replace(token, str(value))
        return text


def base_env(ctx: Context, overrides: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(DROPPED)}
    env.update(PATH=f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}", HOME=str(ctx.home), LANG="C.UTF-8",
               FA2_TUNER_CACHE=str(SHARED_CACHE), PYTHONDONTWRITEBYTECODE="1")
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = ctx.expand(value)
    return env


def snapshot(folder: Path) -> dict[str, str]:
    """relative path -> digest (files), 'dir', or 'link:target'; __pycache__ left out."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        base = Path(dirpath)
        for name in dirnames + filenames:
            path = base / name
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                found[rel] = f"link:{os.readlink(path)}"
            elif path.is_dir():
                found[rel] = "dir"
            else:
                try:
                    found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
                except OSError as exc:
                    found[rel] = f"unreadable:{exc.errno}"
    return found


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    added = [f"+{p}" for p in sorted(set(after) - set(before))]
    removed = [f"-{p}" for p in sorted(set(before) - set(after))]
    changed = [f"~{p}" for p in sorted(set(before) & set(after)) if before[p] != after[p]]
    return changed + added + removed


def wrapped(ctx: Context, command: str, readonly: tuple[str, ...]) -> list[str]:
    """argv that runs ``command`` in the working folder, with ``readonly`` paths mounted read-only."""
    inner = f"cd {shlex.quote(str(ctx.cwd))} && exec bash -o pipefail -c {shlex.quote(command)}"
    if not readonly:
        return ["bash", "-c", inner]
    mounts = " && ".join(f"mount --bind {q} {q} && mount -o remount,ro,bind {q} {q}"
                         for q in (shlex.quote(ctx.expand(p)) for p in readonly))
    return ["unshare", "-m", "--propagation", "private", "bash", "-c", f"{mounts} && {inner}"]


def _signal_when_ready(proc, err_path: Path, sig, started: float, timeout: float) -> None:
    pattern = re.compile(sig.after)
    while proc.poll() is None and time.monotonic() - started < timeout:
        if pattern.search(err_path.read_text(errors="replace")):
            time.sleep(sig.delay)
            os.killpg(proc.pid, getattr(signal, sig.name))
            if sig.again is not None:
                time.sleep(sig.again)
                if proc.poll() is None:
                    os.killpg(proc.pid, getattr(signal, sig.name))
            return
        time.sleep(0.1)


def execute(ctx: Context, command: str, env: dict, timeout: float, readonly=(), sig=None, tag="main") -> Outcome:
    out_path, err_path = ctx.log / f"{tag}.out", ctx.log / f"{tag}.err"
    started = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(wrapped(ctx, command, readonly), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env=env, start_new_session=True)
        if sig is not None:
            _signal_when_ready(proc, err_path, sig, started, timeout)
        try:
            rc, timed_out = proc.wait(timeout=max(1.0, timeout - (time.monotonic() - started))), False
        except subprocess.TimeoutExpired:
            rc, timed_out = None, True
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)      # what the case left running (a pool, a worker)
            proc.wait()
    return Outcome(command, rc, out_path.read_text(errors="replace"), err_path.read_text(errors="replace"),
                   time.monotonic() - started, timed_out)


def _follow(ctx: Context, follow: FollowUp, found: str, env: dict, timeout: float, index: int) -> dict:
    if follow.source == "output":
        text = found
    else:
        text = "\n".join(p.read_text(errors="replace") for p in sorted(ctx.cwd.glob(follow.source)))
    commands = list(dict.fromkeys(m.group(1).strip() for m in re.finditer(follow.pattern, text, re.M)))
    steps = []
    if not commands:
        return {"verdict": "unclear", "why": f"no advice matching {follow.pattern!r} was printed", "steps": steps}
    for n, printed in enumerate(commands):
        reason = follow.skip(printed) if follow.skip else None
        if reason:
            steps.append({"command": printed, "skipped": reason})
            continue
        command = follow.rewrite(printed) if follow.rewrite else printed
        before = snapshot(ctx.dir)
        outcome = execute(ctx, command, env, timeout, tag=f"advice{index}-{n}")
        outcome.changed = changes(before, snapshot(ctx.dir))
        verdict, why = classify(follow.expect, outcome, follow.stderr_re)
        steps.append(step_record(outcome, verdict, why, printed=printed))
    bad = [s for s in steps if s.get("verdict", "ok") != "ok"]
    return {"verdict": bad[0]["verdict"] if bad else "ok", "why": bad[0]["why"] if bad else "", "steps": steps}


def step_record(outcome: Outcome, verdict: str, why: str, printed: str | None = None) -> dict:
    record = {"command": outcome.command, "rc": outcome.rc, "verdict": verdict, "why": why,
              "seconds": round(outcome.seconds, 1), "stderr_first": first_line(outcome.stderr)[:300],
              "stderr_key": key_line(outcome.stderr)[:300], "stdout_first": first_line(outcome.stdout)[:300],
              "changed": outcome.changed[:20]}
    if printed is not None and printed != outcome.command:
        record["printed"] = printed
    if verdict != "ok":
        record["stderr_tail"] = outcome.stderr.splitlines()[-40:]
        record["stdout_tail"] = outcome.stdout.splitlines()[-10:]
    return record


def needs_root(case: Case) -> str | None:
    if (case.readonly or "mount" in case.command) and (os.geteuid() != 0 or not shutil.which("unshare")):
        return "needs root and unshare for a read-only bind mount"
    return None


def run_case(case: Case, root: Path, fixtures: Path, keep: bool = False) -> dict:
    record = {"family": case.family, "name": case.name, "command": case.command, "expect": list(case.expect),
              "note": case.note, "env": dict(case.env), "readonly": list(case.readonly)}
    skip = case.skip or needs_root(case)
    if skip:
        return {**record, "verdict": "skipped", "why": skip}
    folder = Path(tempfile.mkdtemp(prefix=f"{case.name[:40]}-", dir=root))
    ctx = Context(folder / "case", folder / "case" / "work", folder / "case" / "home", fixtures, folder / "log")
    for path in (ctx.cwd, ctx.home, ctx.log):
        path.mkdir(parents=True)
    try:
        for step in case.setup:
            step(ctx)
        env = base_env(ctx, case.env)
        before = snapshot(ctx.dir)
        outcome = execute(ctx, ctx.expand(case.command), env, case.timeout, case.readonly, case.signal)
        outcome.changed = changes(before, snapshot(ctx.dir))
        verdict, why = classify(case.expect, outcome, case.stderr_re, case.stdout_re)
        record.update(step_record(outcome, verdict, why))
        record["command"] = case.command
        for index, follow in enumerate(case.then if verdict == "ok" else ()):
            advice = _follow(ctx, follow, outcome.stdout + "\n" + outcome.stderr, env, case.timeout, index)
            record.setdefault("advice", []).extend(advice["steps"])
            if advice["verdict"] != "ok" and record["verdict"] == "ok":
                record.update(verdict=advice["verdict"], why=f"advice: {advice['why']}")
    except Exception as exc:         # the battery's own failure, reported as such, never hidden
        record.update(verdict="battery-error", why=f"{type(exc).__name__}: {exc}")
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    return record


def python_cmd(args: str) -> str:
    """``python ARGS`` as a user types it (the venv's python first on PATH)."""
    return f"python {args}"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)

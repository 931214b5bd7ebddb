"""args (sweep): a bad value for every flag of ``python -m tuner.sweep``, one at a time, on the tiny study (so a
value that is wrongly taken costs a budget stage of two cached compiles, not the article's 522).

Refused: exit 2 with one line naming the flag, nothing written. Values a sweep may take (``huge`` counts for
flags without a documented limit) expect 0 or 2: a clear refusal or a clean run are both fine; a traceback
or a hang is not.
"""

from __future__ import annotations

import shlex

from scripts.battery import fixtures as fx
from scripts.battery.case import Case, refusal

BASE = {"--gpu": "sm_89", "--study": "tiny.toml", "--trials": "2"}
HUGE = str(10**20)
NOT_INT = {"empty": "", "word": "abc"}     # argparse's int() refuses each; --trials gets more below
NOT_FLOAT = {"empty": "", "word": "abc"}


def command(overrides: dict | None = None, extra: str = "", prefix: str = "python -m tuner.sweep") -> str:
    args = dict(BASE, **(overrides or {}))
    flags = " ".join(f"{k} {shlex.quote(v) if not v.startswith('@') else v}" if v is not None else k
                     for k, v in args.items())
    return f"{prefix} {flags} {extra}".strip()


def case(name: str, overrides: dict | None, expect=(2,), regex: str | None = None, setup=(), extra: str = "",
         **kw) -> Case:
    return Case("args", f"sweep-{name}", command(overrides, extra), expect, stderr_re=regex,
                setup=(fx.study(),) + tuple(setup), timeout=kw.pop("timeout", 240), **kw)


def _ints() -> list[Case]:
    # flag -> (lowest accepted, values below it refused, has an upper limit)
    flags = {"--trials": (1, False), "--jobs": (1, True), "--batch": (1, False), "--workers": (1, True),
             "--finalists": (0, False), "--rounds": (2, False), "--profile": (1, False), "--seed": (0, True)}
    cases = []
    for flag, (low, limited) in flags.items():
        name = flag[2:]
        for label, value in NOT_INT.items():
            if label == "word" or flag in ("--trials", "--jobs", "--seed"):
                cases.append(case(f"{name}-{label}", {flag: value}, regex=refusal(flag)))
        if low < 1 or flag == "--trials":
            cases.append(case(f"{name}-negative", {flag: "-1"}, regex=refusal(flag)))
        if low < 1:
            cases.append(case(f"{name}-zero", {flag: "0"}, (0,), note="0 is allowed"))
        elif flag not in ("--batch", "--profile"):       # the same check as --trials 0
            cases.append(case(f"{name}-zero", {flag: "0"}, regex=refusal(flag)))
        if low == 2:
            cases.append(case(f"{name}-one", {flag: "1"}, regex=refusal(flag)))
        if limited or flag == "--trials":
            cases.append(case(f"{name}-huge", {flag: HUGE}, (2,) if limited else (0, 2),
                              regex=refusal(flag) if limited else None,
                              note="" if limited else "no documented limit: a clean run or a clear refusal"))
    cases += [case(f"trials-{label}", {"--trials": value}, regex=refusal("--trials"))
              for label, value in {"inf": "inf", "float": "1.5"}.items()]
    cases.append(case("workers-one", {"--workers": "1"}, (0,), note="one worker without a GPU: allowed"))
    cases.append(case("workers-two", {"--workers": "2"}, regex=refusal("--workers")))
    cases.append(case("seed-2**32", {"--seed": str(2**32)}, regex=refusal("--seed")))
    cases.append(case("profile-bare", {}, (0,), extra="--profile", note="no ncu here: skipped, saying why"))
    return cases


def _floats() -> list[Case]:
    cases = []
    for flag in ("--timeout", "--trial-timeout"):
        name = flag[2:]
        for label, value in NOT_FLOAT.items() if flag == "--timeout" else (("empty", ""), ("word", "abc")):
            cases.append(case(f"{name}-{label}", {flag: value}, regex=refusal(flag)))
        for label, value in {"negative": "-1", "zero": "0", "huge": "1e20", "inf": "inf",
                             "nan": "nan", "week-and-a-second": str(7 * 24 * 3600 + 1)}.items():
            if flag == "--timeout" or label in ("zero", "inf", "nan"):
                cases.append(case(f"{name}-{label}", {flag: value}, regex=refusal(flag)))
        cases.append(case(f"{name}-tiny", {flag: "1e-300"}, (0, 1, 2),
                          note="a positive but tiny limit: a run that stops at once, or a clear refusal"))
    return cases


def _choices() -> list[Case]:
    table = {"--pass": ("", "abc", "FWD"), "--sampler": ("", "foo", "TPE"),
             "--retime": ("x",), "--edge-gate": ("none",), "--device": ("gpu",)}
    cases = [case(f"{flag[2:]}-{value.strip() or 'empty'}{'-space' if value.endswith(' ') else ''}", {flag: value},
                  regex=refusal(flag)) for flag, values in table.items() for value in values]
    cases.append(case("device-cpu-no-interpreter", {"--device": "cpu"}, regex=r"TRITON_INTERPRET=1"))
    cases.append(case("sampler-grid", {"--sampler": "grid"}, (0,), note="a valid value, as a control"))
    return cases


def _gpus() -> list[Case]:
    values = {"empty": "", "foo": "foo", "sm_8": "sm_8", "auto": "auto", "sm_70": "sm_70"}
    cases = [case(f"gpu-{label}", {"--gpu": value}, regex=refusal("--gpu")) for label, value in values.items()]
    cases.append(case("gpu-upper", {"--gpu": "SM_89"}, (0, 2), regex=None, note="either spelling taken, or refused"))
    cases.append(case("gpu-space", {"--gpu": "rtx 4090"}, (0, 2), note="'rtx 4090' for rtx4090: taken, or refused"))
    cases.append(case("gpu-card-name", {"--gpu": "h200"}, (0,), note="a card name: allowed"))
    return cases


def _studies() -> list[Case]:
    flag = "--study"
    return [
        case("study-empty", {flag: ""}, regex=refusal(flag)),
        case("study-unknown-name", {flag: "nosuch"}, regex=refusal(flag)),
        case("study-missing-file", {flag: "nosuch.toml"}, regex=refusal(flag)),
        case("study-folder", {flag: "adir"}, regex=refusal(flag), setup=(fx.folder("adir"),)),
        case("study-empty-file", {flag: "empty.toml"}, regex=refusal(flag), setup=(fx.text_file("empty.toml", ""),)),
        case("study-not-toml", {flag: "bad.toml"}, regex=refusal(flag), setup=(fx.text_file("bad.toml", "[[[ x"),)),
        case("study-latin1", {flag: "latin.toml"}, regex=refusal(flag),
             setup=(fx.raw_file("latin.toml", fx.TINY.replace("battery", "caf\xe9").encode("latin-1")),)),
        case("study-bom", {flag: "bom.toml"}, (0, 2), regex=None,
             setup=(fx.raw_file("bom.toml", b"\xef\xbb\xbf" + fx.TINY.encode()),),
             note="a UTF-8 BOM (left open on 2026-12-03): taken, or refused clearly"),
    ]


def _paths() -> list[Case]:
    out, trace = "--out", "--trace"
    long_name = "x" * 300
    cases = [
        case("out-empty", {out: ""}, regex=refusal(out)),
        case("out-file", {out: "afile"}, regex=refusal(out), setup=(fx.text_file("afile"),)),
        case("out-under-file", {out: "afile/sub"}, regex=refusal(out), setup=(fx.text_file("afile"),)),
        case("out-readonly", {out: "ro"}, regex=refusal(out), setup=(fx.folder("ro"),), readonly=("@CWD@/ro",)),
        case("out-proc", {out: "/proc/fa2-out"}, regex=refusal(out)),
        case("out-long-name", {out: long_name}, (0, 2), regex=None, note="300 characters: ENAMETOOLONG"),
        case("out-space", {out: "my out"}, (0,), note="a path with a space: allowed"),
        case("trace-empty", {}, regex=refusal(trace), extra="--trace ''"),
        case("trace-exists", {}, regex=refusal(trace), extra="--trace t.json", setup=(fx.text_file("t.json", "{}"),)),
        case("trace-folder", {}, regex=refusal(trace), extra="--trace adir", setup=(fx.folder("adir"),)),
        case("trace-missing-folder", {}, regex=refusal(trace), extra="--trace nodir/t.json"),
        case("trace-readonly", {}, regex=refusal(trace), extra="--trace ro/t.json", setup=(fx.folder("ro"),),
             readonly=("@CWD@/ro",)),
        case("trace-long-name", {}, (0, 2), extra=f"--trace {long_name}.json"),
        case("storage-init-value", {}, regex=refusal("--storage-init"), extra="--storage-init=yes"),
        case("flag-twice", {}, regex=refusal("--trials"), extra="--trials 0", note="the last --trials wins"),
    ]
    return cases


def _storages() -> list[Case]:
    flag = "--storage"
    values = {"empty": "", "word": "foo", "sqlite-memory": "sqlite:///:memory:",
              "sqlite-uri-memory": "sqlite:///file:x?mode=memory&uri=true", "tilde": "sqlite:///~/t.db"}
    cases = [case(f"storage-{label}", {flag: value}, regex=refusal(flag)) for label, value in values.items()]
    cases += [
        case("storage-folder", {flag: "sqlite:///adir"}, regex=refusal(flag), setup=(fx.folder("adir"),)),
        case("storage-readonly-new", {flag: "sqlite:///@CWD@/ro/x.db"}, regex=refusal(flag), setup=(fx.folder("ro"),),
             readonly=("@CWD@/ro",)),
        case("storage-readonly-existing", {flag: "sqlite:///@CWD@/ro/tuning.db"}, (2,), regex=refusal(flag),
             setup=(fx.store("budget", "ro/tuning.db"),), readonly=("@CWD@/ro",),
             note="left open on 2026-12-04: an existing store on a read-only mount"),
        case("storage-missing-folders", {flag: "sqlite:///a/b/c/x.db"}, (0, 2)),
        case("storage-foreign", {flag: "sqlite:///foreign.db"}, regex=r"--storage-init",
             setup=(fx.store("foreign", "foreign.db"),)),
        case("storage-foreign-init", {flag: "sqlite:///foreign.db"}, (0,), extra="--storage-init",
             setup=(fx.store("foreign", "foreign.db"),)),
        case("storage-corrupt", {flag: "sqlite:///c.db"}, regex=refusal(flag), setup=(fx.store("corrupt", "c.db"),)),
        case("storage-empty-file", {flag: "sqlite:///e.db"}, (0, 2), setup=(fx.store("empty", "e.db"),),
             note="a 0-byte file is an empty SQLite database"),
        case("storage-postgres-unreachable", {flag: "postgresql+psycopg://u@127.0.0.1:1/db"}, (1, 2),
             regex=r"(?i)(storage|connect|refused)", timeout=240),
        case("storage-other-study-same-name", {flag: "sqlite:///fa2-out/tuning.db"}, regex=refusal("--study"),
             setup=(fx.store("budget"), fx.study(text=fx.SMALL.replace('"small"', '"tiny"'))),
             note="another definition under a stored name"),
    ]
    return cases


def cases() -> list[Case]:
    return _ints() + _floats() + _choices() + _gpus() + _studies() + _paths() + _storages()

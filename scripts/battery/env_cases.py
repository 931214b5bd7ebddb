"""env: the cheap commands (kernels, one budget config, the tiny sweep, emit, dashboard, a refused sweep) under odd
environments: HOME, FA2_TUNER_CACHE, TRITON_CACHE_DIR, TMPDIR, locales, closed and full streams, pipes, a
read-only working folder, and SIGINT/SIGTERM in the middle of a sweep (``signals`` below)."""

from __future__ import annotations

from scripts.battery import fixtures as fx
from scripts.battery.case import Case, Signal

COMMANDS = {
    "kernels": "python -m tuner.kernels",
    "budget": "python -m tuner.budget --gpu sm_89 --config 64,64,4,2",
    "sweep": "python -m tuner.sweep --gpu sm_89 --study tiny.toml --trials 2",
    "emit": "python -m tuner.emit --study tiny.toml --gpu sm_89",
    "dashboard": "python -m tuner.dashboard",
    "refused": "python -m tuner.sweep --gpu sm_89 --study tiny.toml --trials 0",
}
COMPILING = ("budget", "sweep")
ALL = tuple(COMMANDS)
OK = {name: ((2,), r"--trials 0") if name == "refused" else ((0,), None) for name in COMMANDS}
SETUP = (fx.store("timed"), fx.text_file("afile"), fx.folder("ro"))


def _variant(label: str, names=ALL, env=None, readonly=(), suffix: str = "", expect=None, note: str = "",
             setup=(), prefix: str = "") -> list[Case]:
    """One environment over several commands; ``expect``: {command: (exit codes, regex)} where not OK's."""
    cases = []
    for name in names:
        codes, regex = (expect or {}).get(name, OK[name])
        cases.append(Case("env", f"{label}-{name}", f"{prefix}{COMMANDS[name]}{suffix}", codes, stderr_re=regex,
                          setup=SETUP + tuple(setup), env=dict(env or {}), readonly=tuple(readonly), timeout=240,
                          note=note))
    return cases


def _refuse(names, regex) -> dict:
    return dict.fromkeys(names, ((2,), regex))


def _homes_and_caches() -> list[Case]:
    cache_refused = _refuse(COMPILING, r"FA2_TUNER_CACHE")
    triton_refused = _refuse(COMPILING, r"TRITON_CACHE_DIR")
    no_cache = {"FA2_TUNER_CACHE": None}
    return (
        _variant("home-unset", ("kernels", "budget", "sweep", "refused"), env={"HOME": None})
        + _variant("home-unset-no-cache-var", ("budget", "kernels"), env={"HOME": None, **no_cache})
        + _variant("home-readonly", COMPILING + ("refused",), env=no_cache, readonly=("@HOME@",),
                   note="the default caches cannot be written: a folder under the temporary folder, said in one line")
        + _variant("home-missing", ("budget",), env={"HOME": "@DIR@/nohome", **no_cache})
        + _variant("home-is-file", COMPILING, env={"HOME": "@CWD@/afile", **no_cache},
                   expect=dict.fromkeys(COMPILING, ((0, 2), None)))
        + _variant("home-empty", ("budget",), env={"HOME": "", **no_cache})
        + _variant("cache-is-file", COMPILING + ("kernels",), env={"FA2_TUNER_CACHE": "@CWD@/afile"},
                   expect=cache_refused)
        + _variant("cache-readonly", COMPILING + ("refused",), env={"FA2_TUNER_CACHE": "@CWD@/ro"},
                   readonly=("@CWD@/ro",), expect=cache_refused)
        + _variant("cache-under-file", COMPILING, env={"FA2_TUNER_CACHE": "@CWD@/afile/cache"}, expect=cache_refused)
        + _variant("cache-dev-null", COMPILING, env={"FA2_TUNER_CACHE": "/dev/null"}, expect=cache_refused)
        + _variant("cache-empty", ("budget",), env={"FA2_TUNER_CACHE": ""}, expect={"budget": ((0, 2), None)},
                   note="empty: the default, or refused clearly")
        + _variant("cache-relative", ("budget",), env={"FA2_TUNER_CACHE": "relcache"})
        + _variant("triton-cache-is-file", COMPILING, env={"TRITON_CACHE_DIR": "@CWD@/afile"}, expect=triton_refused)
        + _variant("triton-cache-readonly", COMPILING, env={"TRITON_CACHE_DIR": "@CWD@/ro"}, readonly=("@CWD@/ro",),
                   expect=triton_refused)
        + _variant("triton-cache-empty", ("budget",), env={"TRITON_CACHE_DIR": ""}, expect={"budget": ((0, 2), None)})
        + _variant("triton-cache-relative", ("budget",), env={"TRITON_CACHE_DIR": "reltriton"})
        + _variant("triton-cache-deep-missing", ("budget",), env={"TRITON_CACHE_DIR": "@DIR@/a/b/c"})
        + _variant("tmpdir-missing", ("sweep", "budget"), env={"TMPDIR": "@DIR@/notmp"})
        + _variant("tmpdir-is-file", ("budget",), env={"TMPDIR": "@CWD@/afile"})
        + _variant("tmpdir-readonly", ("sweep", "budget"), env={"TMPDIR": "@CWD@/ro"}, readonly=("@CWD@/ro",))
    )


def _locales() -> list[Case]:
    names = ("sweep", "budget")
    locales = {"lang-c": {"LANG": "C"}, "lc-all-c": {"LC_ALL": "C"},
               "lc-all-bogus": {"LC_ALL": "xx_YY.bogus"},
               "pythonioencoding-ascii": {"PYTHONIOENCODING": "ascii"},
               "c-locale-no-utf8-mode": {"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}}
    return [c for label, env in locales.items() for c in _variant(label, names, env=env)]


def _streams() -> list[Case]:
    pipe_ok = {n: ((0, 141), None) for n in ALL if n != "refused"}
    full = {n: ((1,), r"(?i)(no space|errno 28|cannot write|stdout)") for n in ALL if n not in ("refused",)}
    return (
        _variant("stdout-closed", ("sweep", "budget", "kernels", "refused"), suffix=" >&-")
        + _variant("stderr-closed", ("sweep", "budget", "refused"), suffix=" 2>&-", expect={"refused": ((2,), None)})
        + _variant("both-closed", ("sweep", "refused"), suffix=" >&- 2>&-", expect={"refused": ((2,), None)})
        + _variant("stdin-closed", ("sweep",), suffix=" <&-")
        + _variant("stdout-dev-full", ("sweep", "budget", "kernels"), suffix=" >/dev/full",
                   expect=full, note="output lost: one line and a non-zero exit")
        + _variant("stderr-dev-full", ("sweep", "budget", "refused"), suffix=" 2>/dev/full",
                   expect={"refused": ((2,), None)})
        + _variant("pipe-head", ("sweep", "budget", "emit", "kernels", "dashboard"), suffix=" | head -1",
                   expect=pipe_ok)
        + _variant("pipe-2>&1-head", ("sweep", "budget", "emit", "kernels", "refused"), suffix=" 2>&1 | head -1",
                   expect={**pipe_ok, "refused": ((2, 141), None)})
        + _variant("pipe-true", ("sweep", "emit"), suffix=" | true", expect=pipe_ok)
    )


def _places() -> list[Case]:
    out_refused = dict.fromkeys(("sweep", "emit", "dashboard"), ((2,), r"--out"))
    unicode_dir = (fx.folder("my dir/ünï"),)
    sub = "cd 'my dir/ünï' && cp ../../tiny.toml . && "
    return (
        _variant("cwd-readonly", readonly=("@CWD@",), expect={**out_refused, "refused": ((2,), r"--trials 0")})
        + [Case("env", "cwd-readonly-sweep-out-elsewhere",
                "python -m tuner.sweep --gpu sm_89 --study tiny.toml --trials 2 --out @DIR@/elsewhere",
                setup=SETUP, readonly=("@CWD@",), timeout=240),
           Case("env", "cwd-unicode-space-sweep", sub + COMMANDS["sweep"], setup=SETUP + unicode_dir, timeout=240),
           Case("env", "cwd-unicode-space-emit",
                sub + "python -m tuner.emit --study tiny.toml --gpu sm_89 --storage sqlite:///../../fa2-out/tuning.db",
                setup=SETUP + unicode_dir, timeout=240),
           Case("env", "cwd-symlink-sweep", "ln -s . link && cd link && " + COMMANDS["sweep"], setup=SETUP,
                timeout=240)]
    )


def _misc() -> list[Case]:
    interp = "python -m tuner.sweep --gpu sm_89 --study tiny.toml --trials 2 --device cpu"
    lock = ("python -c \"import sqlite3,time; c=sqlite3.connect('fa2-out/tuning.db', isolation_level=None); "
            "c.execute('BEGIN EXCLUSIVE'); time.sleep(120)\" & sleep 2; ")
    return (
        _variant("triton-interpret-on", ("sweep", "budget"), env={"TRITON_INTERPRET": "1"})
        + _variant("cuda-visible-empty", ("sweep", "kernels"), env={"CUDA_VISIBLE_DEVICES": ""})
        + _variant("python-optimize-2", ("kernels", "refused"), env={"PYTHONOPTIMIZE": "2"},
                   note="asserts and docstrings stripped")
        + _variant("umask-077", ("sweep", "dashboard"), prefix="umask 077 && ")
        + [Case("env", "device-cpu-interpret-false", interp, (2,), stderr_re=r"TRITON_INTERPRET=1", setup=SETUP,
                env={"TRITON_INTERPRET": "false"}),
           Case("env", "device-cpu-interpret-2", interp, (2,), stderr_re=r"TRITON_INTERPRET=1", setup=SETUP,
                env={"TRITON_INTERPRET": "2"}, note="Triton reads only 1, true, on, yes"),
           Case("env", "device-cpu-interpret-true", interp, (0,), setup=SETUP, env={"TRITON_INTERPRET": "true"},
                timeout=300),
           Case("env", "profile-ncu-env-missing", "python -m tuner.profile --study tiny.toml --gpu sm_89", (2,),
                stderr_re="needs the CUDA GPU", setup=SETUP, env={"FA2_TUNER_NCU": "/nonexistent/ncu"}),
           Case("env", "store-locked-sweep", lock + COMMANDS["sweep"], (1,), stderr_re=r"(?i)locked", setup=SETUP,
                timeout=300, note="another process holds a write lock past SQLite's 60 s timeout")]
    )


def _signals() -> list[Case]:
    compile_env = {"FA2_TUNER_CACHE": "@DIR@/cache"}      # cold: the compiles take seconds
    small = "python -m tuner.sweep --gpu sm_89 --study small.toml --trials 8"
    tiny = "python -m tuner.sweep --gpu sm_89 --study tiny.toml --trials 2"
    timing = "python -m tuner.sweep --gpu sm_89 --study tiny.toml --trials 2 --device cpu"
    setup = (fx.study("small.toml", fx.SMALL), fx.study())
    interrupted = r"(?i)interrupted|Ctrl-C"
    return [
        Case("env", "sigint-sweep-compiling", tiny, (130,), stderr_re=interrupted, setup=setup, env=compile_env,
             signal=Signal("SIGINT", r"compiling for sm_89: 0/", 1.0), timeout=240),
        Case("env", "sigterm-sweep-compiling", tiny, (143,), stderr_re=r"(?i)terminated|SIGTERM", setup=setup,
             env=compile_env, signal=Signal("SIGTERM", r"compiling for sm_89: 0/", 1.0), timeout=240),
        Case("env", "sigint-twice-sweep-compiling", small, (130,), stderr_re=interrupted, setup=setup,
             env=compile_env, signal=Signal("SIGINT", r"compiling for sm_89: 0/", 1.0, again=0.3), timeout=240),
        Case("env", "sigint-sweep-starting", tiny, (130,), stderr_re=interrupted, setup=setup, env=compile_env,
             signal=Signal("SIGINT", r"study tiny", 0.0), timeout=240, note="Ctrl-C as the run starts"),
        Case("env", "sigint-sweep-timing", timing, (130,), stderr_re=interrupted, setup=setup,
             env={"TRITON_INTERPRET": "1"}, signal=Signal("SIGINT", r"worker 0 ready", 0.3), timeout=300),
        Case("env", "sigterm-sweep-timing", timing, (143,), stderr_re=r"(?i)terminated|SIGTERM", setup=setup,
             env={"TRITON_INTERPRET": "1"}, signal=Signal("SIGTERM", r"worker 0 ready", 0.3), timeout=300),
        Case("env", "sigint-fa2-tuner-sweep", "fa2-tuner " + tiny[len("python -m tuner."):], (130,),
             stderr_re=interrupted, setup=setup, env=compile_env,
             signal=Signal("SIGINT", r"compiling for sm_89: 0/", 1.0), timeout=240),
        Case("env", "sigint-budget-space", "python -m tuner.budget --gpu sm_89", (130,), stderr_re=interrupted,
             env=compile_env, signal=Signal("SIGINT", r"warning: compiling", 2.0), timeout=240),
        Case("env", "sigterm-budget-space", "python -m tuner.budget --gpu sm_89", (143,),
             stderr_re=r"(?i)terminated|SIGTERM", env=compile_env,
             signal=Signal("SIGTERM", r"warning: compiling", 2.0), timeout=240),
    ]


def cases() -> list[Case]:
    return _homes_and_caches() + _locales() + _streams() + _places() + _misc() + _signals()

"""args (budget, emit, dashboard, profile, kernels): a bad value for every flag, one at a time.

budget runs ``--model-only`` or one ``--config`` (never the whole space); emit, dashboard and profile run on a
copy of the fixture store with timed results (an interpreted sweep of the tiny study). Profile needs the GPU
that timed the configs and says so first, by design, before opening the store or looking for ncu: for its
``--storage`` and ``--ncu`` that line is the expected refusal too.
"""

from __future__ import annotations

import shlex

from scripts.battery import fixtures as fx
from scripts.battery.case import Case, refusal

HUGE = str(10**20)
NO_GPU = "needs the CUDA GPU"
BAD_STORES = {"empty": "", "missing-file": "sqlite:///nope.db", "folder": "sqlite:///adir",
              "memory": "sqlite:///:memory:", "tilde": "sqlite:///~/t.db", "word": "foo",
              "corrupt": "sqlite:///corrupt.db", "foreign": "sqlite:///foreign.db", "budget-only": "sqlite:///budget.db"}
STORE_SETUP = (fx.folder("adir"), fx.store("text", "text.db"), fx.store("corrupt", "corrupt.db"),
               fx.store("foreign", "foreign.db"), fx.store("empty", "empty.db"), fx.store("budget", "budget.db"))


def _q(value: str) -> str:
    return shlex.quote(value)


def _mk(tool: str, label: str, command: str, expect=(2,), regex=None, setup=(), **kw) -> Case:
    return Case("args", f"{tool}-{label}", command, expect, stderr_re=regex, setup=tuple(setup),
                timeout=kw.pop("timeout", 240), **kw)


def _budget() -> list[Case]:
    base = "python -m tuner.budget"
    cases = []
    values = {
        "--gpu": {"empty": "", "foo": "foo", "auto": "auto"},
        "--head-dim": {"zero": "0", "48": "48", "huge": HUGE, "word": "abc"},
        "--dtype": {"empty": "", "int8": "int8"},
        "--kernel": {"empty": "", "unknown": "nope", "dot": ".foo", "no-KERNEL": "json"},
        "--pass": {"unknown": "abc"},
        "--jobs": {"zero": "0", "huge": HUGE, "word": "abc"},
    }
    for flag, table in values.items():
        gpu = "" if flag == "--gpu" else "--gpu sm_89 "
        tail = "--config 64,64,4,2" if flag == "--jobs" else "--model-only"
        for label, value in table.items():
            cases.append(_mk("budget", f"{flag[2:]}-{label}", f"{base} {gpu}{flag} {_q(value)} {tail}",
                             regex=refusal(flag, value), setup=(fx.folder("adir"),)))
    configs = {"empty": "", "two-fields": "128,64", "warps-3": "128,64,3,2", "negative": "-64,64,4,2",
               "huge": f"{HUGE},64,4,2", "bad-key-suffix": "128x64_w8_s3_zz", "block-8": "8,8,4,2"}
    for label, value in configs.items():
        cases.append(_mk("budget", f"config-{label}", f"{base} --gpu sm_89 --config {_q(value)}",
                         regex=refusal("--config", value)))
    cases += [
        _mk("budget", "gpu-missing-value", f"{base} --gpu", regex=refusal("--gpu")),
        _mk("budget", "config-valid-key", f"{base} --gpu sm_89 --config 128x64_w8_s3", (0,)),
        _mk("budget", "config-valid-csv", f"{base} --gpu sm_89 --config 64,64,4,2 --json", (0,)),
        _mk("budget", "pass-bwd-model-only", f"{base} --gpu sm_89 --pass bwd --model-only", (0,)),
        _mk("budget", "gluon-on-sm89", f"{base} --gpu sm_89 --kernel gluon_fwd --config 128x128_w4_s2", (0, 2),
            note="a Gluon (Hopper) kernel for sm_89: unsupported, said clearly"),
        _mk("budget", "model-only-value", f"{base} --gpu sm_89 --model-only=1", regex=refusal("--model-only")),
        _mk("budget", "json-value", f"{base} --gpu sm_89 --json=yes --model-only", regex=refusal("--json")),
        _mk("budget", "causal-value", f"{base} --gpu sm_89 --causal=no --model-only", regex=refusal("--causal")),
    ]
    return cases


def _reader(tool: str, base: str, flag_values: dict, extra_ok: list[tuple[str, str, tuple]]) -> list[Case]:
    cases = []
    setup = (fx.store("timed"),) + STORE_SETUP + (fx.text_file("afile"), fx.folder("ro"))
    for flag, table in flag_values.items():
        for label, value in table.items():
            regex = refusal(flag, value) if not isinstance(value, tuple) else value[1]
            value = value[0] if isinstance(value, tuple) else value
            cases.append(_mk(tool, f"{flag[2:]}-{label}", f"{base} {flag} {_q(value)}", regex=regex, setup=setup,
                             readonly=("@CWD@/ro",) if value.startswith("ro") else ()))
    for label, command, expect in extra_ok:
        cases.append(_mk(tool, label, command, expect, setup=setup))
    return cases


def _emit() -> list[Case]:
    base = "python -m tuner.emit --study tiny.toml --gpu sm_89"
    flags = {
        "--storage": {label: value for label, value in BAD_STORES.items() if label != "word"},
        "--top": {"negative": "-1", "word": "abc"},
        "--out": {"empty": "", "folder": "adir", "under-file": "afile/x.py", "readonly": "ro/x.py",
                  "the-store": "fa2-out/tuning.db"},
        "--verify": {"empty": "", "no-gpu": "v.md"},
        "--gpu-used": {"unknown": "nope"},
        "--pass": {"unknown": "abc", "not-stored": ("bwd", r"error: .*(bwd|--pass)")},
    }
    cases = _reader("emit", base, flags, [
        ("top-huge", f"{base} --top {HUGE}", (0, 2)),
        ("top-zero", f"{base} --top 0", (0,)),
        ("out-dev-null", f"{base} --out /dev/null", (0, 2)),
        ("valid", base, (0,)),
    ])
    study_gpu = {"study-unknown": "--study nosuch --gpu sm_89",
                 "study-missing-file": "--study nosuch.toml --gpu sm_89",
                 "study-not-stored": "--study article --gpu sm_89",
                 "gpu-empty": "--study tiny.toml --gpu ''", "gpu-unknown": "--study tiny.toml --gpu foo",
                 "gpu-not-stored": "--study tiny.toml --gpu sm_90"}
    for label, args in study_gpu.items():
        flag = "--study" if label.startswith("study") else "--gpu"
        value = args.split()[1 if flag == "--study" else 3].strip("'")
        regex = r"error: .*(article|sm_90|--gpu)" if "not-stored" in label else refusal(flag, value)
        regex = r"error: .*(--gpu|unknown GPU '')" if label == "gpu-empty" else regex
        cases.append(_mk("emit", label, f"python -m tuner.emit {args}", regex=regex, setup=(fx.store("timed"),)))
    cases.append(_mk("emit", "store-readonly-mount", f"{base} --out x.py", (0,), setup=(fx.store("timed"),),
                     readonly=("@CWD@/fa2-out",), note="a reader on a read-only mount (fixed 2026-12-04)"))
    return cases


def _dashboard() -> list[Case]:
    base = "python -m tuner.dashboard"
    flags = {
        "--storage": {label: value for label, value in BAD_STORES.items() if label not in ("budget-only", "word")},
        "--out": {"empty": "", "file": "afile", "under-file": "afile/pages", "readonly": "ro"},
        "--study": {"empty": "", "unknown": "nope"},
        "--shape": {"unknown": "B1 H1 Nq1 Nk1 D64 fp16", "lowercase": "b1 h1 nq128 nk128 d64 fp16"},
        "--plotlyjs": {"unknown": "inline"},
    }
    cases = _reader("dashboard", base, flags, [
        ("shape-valid", f"{base} --shape 'B1 H1 Nq128 Nk128 D64 fp16'", (0,)),
        ("plotlyjs-cdn", f"{base} --plotlyjs cdn --out pages", (0,)),
        ("storage-budget-only", f"{base} --storage sqlite:///budget.db --out pages", (0,)),
        ("out-long-name", f"{base} --out {'p' * 300}", (0, 2)),
    ])
    cases.append(_mk("dashboard", "store-readonly-mount", f"{base} --out pages", (0,), setup=(fx.store("timed"),),
                     readonly=("@CWD@/fa2-out",), note="a reader on a read-only mount (fixed 2026-12-04)"))
    return cases


def _profile() -> list[Case]:
    base = "python -m tuner.profile --study tiny.toml --gpu sm_89"
    either = {"--storage": rf"error: .*(--storage|{NO_GPU})", "--ncu": rf"error: .*(--ncu|ncu|{NO_GPU})"}
    flags = {
        "--top": {"empty": "", "zero": "0"},
        "--n": {"empty": "", "zero": "0", "no-shape": "64"},
        "--shape": {"unknown": "B9 H9 Nq9 Nk9 D64 fp16"},
        "--timeout": {"empty": "", "zero": "0", "nan": "nan",
                      "inf": ("inf", rf"error: .*(--timeout|{NO_GPU})")},
        "--out": {"file": "afile", "readonly": "ro"},
        "--markdown": {"folder": "adir", "readonly": "ro/p.md"},
        "--storage": {label: (BAD_STORES[label], either["--storage"]) for label in ("empty", "missing-file", "memory")},
        "--ncu": {"missing": ("/nonexistent/ncu", either["--ncu"]), "folder": ("adir", either["--ncu"])},
    }
    cases = _reader("profile", base, flags, [("valid-no-gpu", base, (2,))])
    cases[-1] = Case("args", "profile-valid-no-gpu", base, (2,), stderr_re=NO_GPU, setup=(fx.store("timed"),))
    for label, args, flag in (("study-unknown", "--study nosuch --gpu sm_89", "--study"),
                              ("gpu-unknown", "--study tiny.toml --gpu foo", "--gpu"),
                              ("top-huge", f"--study tiny.toml --gpu sm_89 --top {HUGE}", "--top"),
                              ("no-outputs-value", "--study tiny.toml --gpu sm_89 --no-outputs=1", "--no-outputs")):
        regex = rf"error: .*({flag}|{NO_GPU})" if label == "top-huge" else refusal(flag)
        cases.append(_mk("profile", label, f"python -m tuner.profile {args}", regex=regex, setup=(fx.store("timed"),)))
    return cases


def _kernels() -> list[Case]:
    base = "python -m tuner.kernels"
    return [
        _mk("kernels", "unknown-flag-json", f"{base} --json", regex=refusal("--json")),
        _mk("kernels", "positional", f"{base} triton", regex=r"error: .*unrecognized arguments: triton"),
        _mk("kernels", "kernel-flag", f"{base} --kernel triton", regex=refusal("--kernel")),
        _mk("kernels", "empty-arg", f"{base} ''", regex=r"error: .*unrecognized arguments"),
        _mk("kernels", "help-abbrev", f"{base} --he", (0,)),
        _mk("kernels", "cli-positional", "fa2-tuner kernels triton", regex=r"error: .*unrecognized arguments: triton"),
    ]


def cases() -> list[Case]:
    return _budget() + _emit() + _dashboard() + _profile() + _kernels()

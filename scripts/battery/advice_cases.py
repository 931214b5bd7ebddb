"""advice: what the tool tells a user to run, run as printed, in the folder it was printed in.

Each case brings a command to the point where it prints advice (a resume line, a sweep to run first, a fix),
then runs every command the advice names (:class:`~scripts.battery.case.FollowUp`). Sweeps of a shipped study
(hundreds of compiles on 2 cores), commands that need a GPU or ncu, and ``pip install`` are skipped with
that reason; where the advice holds a placeholder (``...``, a value to choose), the case's note says what
was put in its place.
"""

from __future__ import annotations

import re

from scripts.battery import fixtures as fx
from scripts.battery.case import Case, FollowUp, Signal

TINY_SWEEP = "python -m tuner.sweep --gpu sm_89 --study tiny.toml --trials 2"
SMALL_SWEEP = "python -m tuner.sweep --gpu sm_89 --study small.toml --trials 8"
RESUME = r"Resume with the same command[^\n]*:\n\s+(python -m tuner\.sweep[^\n]*)"
COLD = {"FA2_TUNER_CACHE": "@DIR@/cache"}
EXAMPLE = r"^\s+((?:python -m tuner|fa2-tuner|python -m benchmarks)[^#\n]*?)\s*(?:#.*)?$"


def expensive(command: str) -> str | None:
    """Why a printed command is not run here, or None."""
    if "pip install" in command:
        return "installs from PyPI and starts a web server (optuna-dashboard)"
    if "--verify" in command:
        return "--verify times the list on a CUDA GPU"
    if "tuner.profile" in command or " profile " in command or "--profile" in command:
        return "needs a CUDA GPU and Nsight Compute"
    if "--gpu auto" in command:
        return "--gpu auto needs a CUDA GPU"
    if "postgresql" in command:
        return "needs a PostgreSQL server"
    if "--workers" in command:
        return "several GPU workers need several GPUs"
    sweep = "tuner.sweep" in command or command.startswith("fa2-tuner sweep") or command.startswith("fa2-tuner --")
    own = re.search(r"--study (\S+\.toml)", command)
    if sweep and own and not re.search(r"(tiny|small|bf16)\.toml", own.group(1)):
        return f"names a study file of its own ({own.group(1)}) that this folder does not have"
    if sweep and not own:
        return "a shipped study's sweep: its budget stage compiles hundreds of configs on 2 cores (minutes each)"
    budget = "tuner.budget" in command or command.startswith("fa2-tuner budget")
    if budget and "--config" not in command and "--model-only" not in command:
        return "judges the whole default space: hundreds of compiles on 2 cores"
    if ("tuner.emit" in command or "fa2-tuner emit" in command) and "tiny" not in command:
        return "needs that study timed on a GPU in the store"
    if "sqlite:///h200.db" in command or "sqlite:///my.db" in command:
        return "names a store of its own that this folder does not have"
    if "benchmarks." in command and "--help" not in command:
        return "a benchmark: times a GPU"
    return None


def _resumes() -> list[Case]:
    setup = (fx.study("small.toml", fx.SMALL), fx.study())
    resume = (FollowUp(RESUME),)
    return [
        Case("advice", "resume-after-sigint-compiling", TINY_SWEEP, (130,), setup=setup, env=COLD, then=resume,
             signal=Signal("SIGINT", r"compiling for sm_89: 0/", 1.0), timeout=300),
        Case("advice", "resume-after-sigterm-compiling", TINY_SWEEP, (143,), setup=setup, env=COLD, then=resume,
             signal=Signal("SIGTERM", r"compiling for sm_89: 0/", 1.0), timeout=300),
        Case("advice", "resume-after-two-sigints", TINY_SWEEP, (130,), setup=setup, env=COLD, then=resume,
             signal=Signal("SIGINT", r"compiling for sm_89: 0/", 1.0, again=0.3), timeout=300),
        Case("advice", "resume-after-sigint-timing", TINY_SWEEP + " --device cpu", (130,), setup=setup,
             env={"TRITON_INTERPRET": "1"}, then=resume, signal=Signal("SIGINT", r"worker 0 ready", 0.3), timeout=300),
        Case("advice", "resume-after-kill-9", f"{SMALL_SWEEP} & sleep 9; kill -9 $!; wait; {SMALL_SWEEP}", (0,),
             setup=setup, env=COLD, timeout=400,
             note="--help: 'Interrupted (Ctrl-C, kill -9, a crash)? Run the same command again to resume'"),
    ]


def _sweep_first() -> list[Case]:
    run_first = r"run (python -m tuner\.sweep .*?) on a GPU first"
    dashboards = r"stores them there: (python -m tuner\.sweep .*?) \(--gpu: your target\)"
    return [
        Case("advice", "emit-budget-only-store", "python -m tuner.emit --study tiny.toml --gpu sm_89", (2,),
             stderr_re=run_first, setup=(fx.store("budget"),), then=(FollowUp(run_first, skip=expensive),)),
        Case("advice", "emit-budget-only-store-article", "python -m tuner.emit --study article --gpu sm_90", (2,),
             stderr_re=run_first, setup=(fx.store("budget"),), then=(FollowUp(run_first, skip=expensive),)),
        Case("advice", "dashboard-store-without-results", "python -m tuner.dashboard", (2,), stderr_re=dashboards,
             setup=(fx.store("noresults"),), then=(FollowUp(dashboards, skip=expensive),),
             note="a store with the tables and no result (made by tuner.store.Store)"),
        Case("advice", "budget-heatmap-title-command", "python -m tuner.dashboard --out pages", (0,),
             setup=(fx.store("budget"),),
             then=(FollowUp(r"(python -m tuner\.sweep [^)\\<\"]*)", skip=expensive, source="pages/*.html"),)),
        Case("advice", "sweep-no-gpu-optuna-dashboard", TINY_SWEEP, (0,), setup=(fx.study(),),
             then=(FollowUp(r"\((pip install optuna-dashboard && optuna-dashboard [^)]*)\)", skip=expensive),)),
    ]


def _fixes() -> list[Case]:
    interp = TINY_SWEEP + " --device cpu"
    bf16 = fx.TINY.replace('"fp16"', '"bf16"')
    return [
        Case("advice", "device-cpu-without-interpreter", interp, (2,), setup=(fx.study(),),
             then=(FollowUp(r"run it as (TRITON_INTERPRET=1 python -m tuner\.sweep \.\.\.)",
                            rewrite=lambda c: c.replace("...", interp.split("tuner.sweep ", 1)[1])),),
             note="the advice ends in '...': the command's own flags put there"),
        Case("advice", "device-cpu-bf16-study", "python -m tuner.sweep --gpu sm_89 --study bf16.toml --trials 2 "
             "--device cpu", (2,), setup=(fx.study("bf16.toml", bf16),), env={"TRITON_INTERPRET": "1"},
             then=(FollowUp(r"use dtype = '(fp16)'", rewrite=lambda d: f"sed -i 's/\"bf16\"/\"{d}\"/' bf16.toml && "
                            "python -m tuner.sweep --gpu sm_89 --study bf16.toml --trials 2 --device cpu"),),
             note="the advice is an edit: dtype = 'fp16' made in the file, then the same command"),
        Case("advice", "workers-without-gpu", TINY_SWEEP + " --workers 2", (2,), setup=(fx.study(),),
             then=(FollowUp(r"(leave --workers out)", rewrite=lambda _: TINY_SWEEP),),
             note="'leave --workers out': the same command without it"),
        Case("advice", "gpu-auto-without-gpu", "python -m tuner.sweep --gpu auto --study tiny.toml --trials 2", (2,),
             setup=(fx.study(),), then=(FollowUp(r"name a target, one of: (\w+)", rewrite=lambda t: TINY_SWEEP.replace(
                 "sm_89", t)),), note="the first target the advice lists, in place of auto"),
        Case("advice", "storage-tilde", TINY_SWEEP + " --storage 'sqlite:///~/t.db'", (2,), setup=(fx.study(),),
             then=(FollowUp(r"write the path in full, e\.g\. (sqlite:///\S+)",
                            rewrite=lambda url: f"{TINY_SWEEP} --storage {url}"),), note="the URL it prints, used"),
        Case("advice", "storage-foreign-init", TINY_SWEEP + " --storage sqlite:///foreign.db", (2,),
             setup=(fx.study(), fx.store("foreign", "foreign.db")),
             then=(FollowUp(r"(--storage-init)", rewrite=lambda flag: f"{TINY_SWEEP} --storage sqlite:///foreign.db "
                                                                        f"{flag}"),),
             note="the flag the refusal names, added"),
        Case("advice", "study-renamed-other-storage", TINY_SWEEP, (2,),
             setup=(fx.store("budget"), fx.study(text=fx.SMALL.replace('"small"', '"tiny"'))),
             then=(FollowUp(r"(use another --storage)", rewrite=lambda _: f"{TINY_SWEEP} --storage sqlite:///other.db"),),
             note="'use another --storage': sqlite:///other.db"),
        Case("advice", "emit-verify-without-gpu", "python -m tuner.emit --study tiny.toml --gpu sm_89 --verify v.md",
             (2,), setup=(fx.store("timed"),),
             then=(FollowUp(r"(leave it out) to write the list alone",
                            rewrite=lambda _: "python -m tuner.emit --study tiny.toml --gpu sm_89"),)),
        Case("advice", "budget-space-warning", "python -m tuner.budget --gpu sm_89", (130,), env=COLD,
             signal=Signal("SIGINT", r"warning: compiling", 1.0),
             then=(FollowUp(r"(--model-only) compiles nothing",
                            rewrite=lambda f: f"python -m tuner.budget --gpu sm_89 {f}"),
                   FollowUp(r"(--config BM,BN,WARPS,STAGES) judges one config",
                            rewrite=lambda _: "python -m tuner.budget --gpu sm_89 --config 64,64,4,2")),
             note="the warning's two ways out, each with the command's own --gpu (64,64,4,2 for BM,BN,WARPS,STAGES)"),
    ]


def _paths_printed() -> list[Case]:
    def exists(path: str) -> str:
        return f"test -s {path}"
    opened = FollowUp(r"\(open (\S+)\)", rewrite=exists)
    return [
        Case("advice", "dashboard-open-page", "python -m tuner.dashboard", (0,), setup=(fx.store("timed"),),
             then=(opened,), note="each printed path checked to exist and be non-empty"),
        Case("advice", "sweep-printed-paths", TINY_SWEEP + " --device cpu", (0,), setup=(fx.study(),),
             env={"TRITON_INTERPRET": "1"}, timeout=300,
             then=(opened, FollowUp(r"config list: (\S+)", rewrite=exists))),
        Case("advice", "emitted-list-pasted", "cp fa2-out/configs/tiny_sm_89_configs.py my_configs.py && "
             "python paste.py", (0,), setup=(fx.outputs("timed"), fx.text_file("paste.py", PASTE)),
             env={"TRITON_INTERPRET": "1"}, stdout_re=r"^pasted list agrees",
             note="README 'Paste the list', on CPU tensors (fp16) under the interpreter"),
    ]


PASTE = """import torch
from kernel.reference import attention_reference
from kernel.triton.autotune import AutotunedFlashAttention
from my_configs import CONFIGS, KEY

q, k, v = (torch.randn(1, 1, 128, 64).half() for _ in range(3))
attention = AutotunedFlashAttention(CONFIGS, KEY)
out, lse = attention(q, k, v, causal=True)
ref, _ = attention_reference(q, k, v, causal=True, dtype=torch.float64)
err = (out.double() - ref).abs().max().item()
assert err < 2e-2, err
print(f"pasted list agrees with float64 (max abs error {err:.2e})")
"""


def _examples() -> list[Case]:
    cases = []
    for command in ("sweep", "budget", "emit", "dashboard", "profile", "kernels"):
        cases.append(Case("advice", f"help-examples-{command}", f"python -m tuner.{command} --help", (0,),
                          setup=(fx.store("timed"),), then=(FollowUp(EXAMPLE, skip=expensive),), timeout=300))
    cases.append(Case("advice", "help-examples-fa2-tuner", "fa2-tuner --help", (0,), setup=(fx.store("timed"),),
                      then=(FollowUp(EXAMPLE, skip=expensive),), timeout=300))
    cases.append(Case("advice", "readme-commands", "cp @REPO@/README.md .", (0,), setup=(fx.store("timed"),),
                      then=(FollowUp(r"^(python -m tuner\.[^#\n]*?)\s*(?:#.*)?$", skip=expensive,
                                     source="README.md"),), timeout=300,
                      note="the README's python -m tuner.* lines, as written"))
    for name in ("race", "gluon_host", "bwd_gluon_host"):
        cases.append(Case("advice", f"benchmarks-{name}-redirect", f"python -m benchmarks.{name} --help", (2,),
                          stderr_re=r"is run by", then=(FollowUp(r"`(python -m benchmarks\.[^`]*)`",
                                                                 rewrite=lambda c: f"{c} --help"),),
                          note="'(see its --help)': the named command's --help"))
    return cases


def cases() -> list[Case]:
    return _resumes() + _sweep_first() + _fixes() + _paths_printed() + _examples()

"""args (study files): the tiny study with one field made bad, run by ``python -m tuner.sweep --study bad.toml``.
A bad file is refused with exit 2 and one line naming the file and the field; nothing is written."""

from __future__ import annotations

import re

from scripts.battery import fixtures as fx
from scripts.battery.case import Case

TINY = fx.TINY
HUGE = str(10**20)


def _swap(old: str, new: str) -> str:
    assert old in TINY, old
    return TINY.replace(old, new)


def _case(label: str, text: str, field: str | None, expect=(2,), note: str = "") -> Case:
    changed = [line for line in text.splitlines() if line not in TINY.splitlines()]
    what = "bad.toml: the tiny study with " + ("; ".join(changed)[:160] if changed else "a table left out")
    note = f"{what}. {note}" if note else what
    regex = rf"error: .*bad\.toml.*{re.escape(field)}|error: .*{re.escape(field)}.*bad\.toml" if field else None
    return Case("args", f"study-file-{label}", "python -m tuner.sweep --gpu sm_89 --study bad.toml --trials 2",
                expect, stderr_re=regex, setup=(fx.study("bad.toml", text),), timeout=240, note=note)


def _problem() -> list[Case]:
    swaps = {
        "n-zero": ("n = 128", "n = 0", "n"),
        "n-huge": ("n = 128", f"n = {HUGE}", "n"),
        "head-dim-48": ("head_dim = 64", "head_dim = 48", "head_dim"),
        "dtype-int8": ('dtype = "fp16"', 'dtype = "int8"', "dtype"),
        "causal-string": ("causal = false", 'causal = "yes"', "causal"),
        "batch-zero": ("batch = 1", "batch = 0", "batch"),
        "unknown-problem-key": ("causal = false", "causal = false\nlength = 5", "length"),
    }
    cases = [_case(label, _swap(old, new), field) for label, (old, new, field) in swaps.items()]
    cases.append(_case("n-q-without-n-k", _swap("n = 128", "n_q = 128"), None, (0,),
                       note="n_k takes its default (4096), as the study format says"))
    cases.append(_case("batch-huge", _swap("batch = 1", f"batch = {HUGE}"), None, (0, 2),
                       note="a huge batch costs the budget stage nothing: taken, or refused clearly"))
    cases.append(_case("problem-list-empty", TINY.split("[problem]")[0] + "problem = []\n", "problem"))
    cases.append(_case("no-problem", TINY.split("[problem]")[0], "problem"))
    return cases


def _top() -> list[Case]:
    swaps = {
        "name-empty": ('name = "tiny"', 'name = ""', "name"),
        "unknown-top-key": ('name = "tiny"', 'name = "tiny"\ncolour = "red"', "colour"),
        "kernel-dot": ('name = "tiny"', 'name = "tiny"\nkernel = ".foo"', "kernel"),
        "kernel-missing-module": ('name = "tiny"', 'name = "tiny"\nkernel = "no_such_pkg.kern"', "kernel"),
        "kernel-no-KERNEL": ('name = "tiny"', 'name = "tiny"\nkernel = "json"', "kernel"),
        "pass-unknown": ('name = "tiny"', 'name = "tiny"\npass = "sideways"', "pass"),
        "metric-unknown": ("causal = false", 'causal = false\n\n[objective]\nmetric = "speed"', "metric"),
    }
    return [_case(label, _swap(old, new), field) for label, (old, new, field) in swaps.items()]


def _space() -> list[Case]:
    swaps = {
        "block-m-zero": ("block_m = [64]", "block_m = [0]", "block_m"),
        "block-m-three": ("block_m = [64]", "block_m = [3]", "block_m"),
        "block-m-empty": ("block_m = [64]", "block_m = []", "block_m"),
        "block-m-float": ("block_m = [64]", "block_m = [64.0]", "block_m"),
        "block-m-string": ("block_m = [64]", 'block_m = ["64"]', "block_m"),
        "block-m-scalar": ("block_m = [64]", "block_m = 64", "block_m"),
        "warps-float": ("num_warps = [4]", "num_warps = [4.0]", "num_warps"),
        "unknown-axis": ("num_stages = [2]", "num_stages = [2]\nfoo = [1]", "foo"),
        "restriction-syntax": ("num_stages = [2]", 'num_stages = [2]\nrestrictions = ["block_m >="]', "restriction"),
        "restriction-unknown-name": ("num_stages = [2]", 'num_stages = [2]\nrestrictions = ["foo > 1"]', "foo"),
        "restriction-deep": ("num_stages = [2]", 'num_stages = [2]\nrestrictions = ["' + "(" * 20000 + "1"
                             + ")" * 20000 + ' == 1"]', "restriction"),
    }
    cases = [_case(label, _swap(old, new), field) for label, (old, new, field) in swaps.items()]
    cases.append(_case("restriction-raises", _swap("num_stages = [2]", 'num_stages = [2]\nrestrictions = '
                                                   '["block_m // (num_stages - 2) > 0"]'), None, (0, 2),
                       note="raises for every config: each rejected as restricted; a clean run or a clear refusal"))
    cases.append(_case("dtype-bf16", _swap('dtype = "fp16"', 'dtype = "bf16"'), None, (0,),
                       note="bf16 is fine for the budget stage (a control)"))
    return cases


def cases() -> list[Case]:
    return _problem() + _top() + _space()

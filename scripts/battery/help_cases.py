"""help: every --help and -h of every command (both spellings of each command), ``fa2-tuner`` alone, unknown
flags and commands, help piped to ``head -1``, the benchmarks' own --help."""

from __future__ import annotations

from scripts.battery.case import Case

COMMANDS = ("sweep", "budget", "emit", "dashboard", "profile", "kernels")
BENCHMARKS = ("bwd", "bwd_gluon", "finalists", "gluon", "knobs", "power", "route", "search", "store", "tile_order",
              "timing", "timing_experiment", "vs_sdpa")
# run by another command's flag, by design: their --help names that command and exits 2
REDIRECTED = ("bwd_gluon_host", "gluon_host", "race")
USAGE = r"^usage: "


def _case(name: str, command: str, expect=(0,), stdout_re=USAGE, stderr_re=None, **kw) -> Case:
    return Case("help", name, command, expect, stderr_re=stderr_re, stdout_re=stdout_re, timeout=90, **kw)


def _module(command: str) -> str:
    return f"python -m tuner.{command}"


def _per_command(command: str) -> list[Case]:
    forms = {"m": _module(command), "cli": f"fa2-tuner {command}"}
    cases = []
    for form, prefix in forms.items():
        for flag in ("--help", "-h") if form == "m" else ("--help",):
            cases.append(_case(f"{command}-{form}{flag}", f"{prefix} {flag}", stdout_re=r"^(usage|options):|example"))
        cases.append(_case(f"{command}-{form}-unknown-flag", f"{prefix} --no-such-flag", (2,), None,
                           r"error: .*(unrecognized arguments: --no-such-flag|the following arguments are required)"))
    cases.append(_case(f"{command}-m-help-head", f"{_module(command)} --help | head -1", (0, 141), USAGE))
    cases.append(_case(f"{command}-m-help-abbrev", f"{_module(command)} --hel", stdout_re=USAGE,
                       note="argparse takes an unambiguous prefix of --help"))
    if command in ("sweep", "budget"):
        cases.append(_case(f"{command}-m-help-2>&1-head", f"{_module(command)} --help 2>&1 | head -1", (0, 141),
                           USAGE))
        cases.append(_case(f"{command}-m-help-narrow", f"COLUMNS=20 {_module(command)} --help", stdout_re=USAGE))
        cases.append(_case(f"{command}-m-help-columns-junk", f"COLUMNS=abc LINES=-5 {_module(command)} --help",
                           stdout_re=USAGE))
    if command in ("sweep", "budget"):
        cases.append(_case(f"{command}-m-help-after-bad-value", f"{_module(command)} --gpu nonsense --help",
                           stdout_re=USAGE, note="--help wins over the values before it"))
    cases.append(_case(f"{command}-m-positional", f"{_module(command)} stray", (2,), None,
                       r"error: .*(unrecognized arguments: stray|required)"))
    return cases


def _entry_point() -> list[Case]:
    unknown = r"unknown command '{}'"
    return [
        _case("fa2-tuner-alone", "fa2-tuner", (2,), None, r"^usage: fa2-tuner <command>"),
        _case("fa2-tuner--help", "fa2-tuner --help", stdout_re=r"^usage: fa2-tuner <command>"),
        _case("fa2-tuner-help-word", "fa2-tuner help", stdout_re=r"^usage: fa2-tuner <command>"),
        _case("fa2-tuner-help-head", "fa2-tuner --help | head -1", (0, 141), r"^usage: fa2-tuner"),
        _case("fa2-tuner-alone-2>&1-head", "fa2-tuner 2>&1 | head -1", (2, 141), r"^usage: fa2-tuner"),
        _case("fa2-tuner-typo", "fa2-tuner swep", (2,), None, unknown.format("swep")),
        _case("fa2-tuner-empty-command", "fa2-tuner ''", (2,), None, unknown.format("")),
        _case("fa2-tuner-space-command", "fa2-tuner ' sweep'", (2,), None, unknown.format(" sweep")),
        _case("fa2-tuner-module-name", "fa2-tuner tuner.sweep", (2,), None, unknown.format("tuner.sweep")),
        _case("fa2-tuner-unknown-flag", "fa2-tuner --no-such-flag", (2,), None,
              r"error: .*unrecognized arguments: --no-such-flag", note="flags without a command are the sweep's"),
        _case("fa2-tuner-version", "fa2-tuner --version", (2,), None, r"error: .*--version"),
        _case("fa2-tuner-help-then-command", "fa2-tuner --help sweep", stdout_re=r"^usage: fa2-tuner"),
        _case("python-m-tuner--help", "python -m tuner --help", stdout_re=r"^usage: python -m tuner"),
        _case("python-m-tuner-unknown", "python -m tuner --no-such-flag", (2,), None,
              r"error: .*unrecognized arguments: --no-such-flag"),
        _case("python-m-tuner-nonmodule", "python -m tuner.nosuchcommand", (1,), None,
              r"No module named tuner\.nosuchcommand", note="Python's own refusal"),
        _case("kernels-m-pipe-head", "python -m tuner.kernels | head -1", (0, 141), r"\(pass "),
        _case("kernels-cli-pipe-head", "fa2-tuner kernels | head -1", (0, 141), r"\(pass "),
        _case("budget-m-required-missing", "python -m tuner.budget", (2,), None,
              r"error: the following arguments are required: --gpu"),
        _case("emit-m-required-missing", "python -m tuner.emit", (2,), None,
              r"error: the following arguments are required: --study, --gpu"),
        _case("profile-m-required-missing", "python -m tuner.profile", (2,), None,
              r"error: the following arguments are required: --study, --gpu"),
        _case("kernels-m-flag-value", "python -m tuner.kernels --help=yes", (2,), None,
              r"error: .*--help"),
    ]


def _benchmarks() -> list[Case]:
    cases = [_case(f"benchmarks.{name}--help", f"python -m benchmarks.{name} --help", stdout_re=USAGE)
             for name in BENCHMARKS]
    cases += [_case(f"benchmarks.{name}--help", f"python -m benchmarks.{name} --help", (2,), None,
                    r"is run by `python -m benchmarks\.", note="by design: names the command that runs it")
              for name in REDIRECTED]
    cases.append(_case("benchmarks.route--help-head", "python -m benchmarks.route --help | head -1", (0, 141), USAGE))
    return cases


def cases() -> list[Case]:
    found = [c for command in COMMANDS for c in _per_command(command)]
    return found + _entry_point() + _benchmarks()

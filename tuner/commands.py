"""``fa2-tuner <command> [args]``: one console entry point for every command, beside the
``python -m tuner.<command>`` forms (as ``optuna`` has), each of which it runs unchanged.

Every command parses its own arguments (``fa2-tuner <command> --help``) and returns its exit
code: 0 done, 1 failed, 2 bad input (nothing written). ``fa2-tuner --gpu ...`` (flags, no command)
is the sweep, as the entry point was before it had commands.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "console_main", "main"]

# command -> (module whose main() runs it, what it does, an example)
COMMANDS = {
    "sweep": ("tuner.sweep", "tune a kernel's configs for a GPU: budget, compile, check, time, finalists",
              "fa2-tuner sweep --gpu sm_90 --study article --sampler grid"),
    "budget": ("tuner.budget.__main__", "which configs fit a target's shared memory and registers (no GPU needed)",
               "fa2-tuner budget --gpu sm_89 --head-dim 128 --causal"),
    "emit": ("tuner.emit", "the sweep's best configs as a @triton.autotune list",
             "fa2-tuner emit --study article --gpu sm_90 --top 3"),
    "dashboard": ("tuner.dashboard._cli", "heatmaps, rooflines and profile pages from the store",
                  "fa2-tuner dashboard --storage sqlite:///fa2-out/tuning.db --out pages"),
    "profile": ("tuner.profile.__main__", "Nsight Compute counters of each shape's best configs and SDPA",
                "fa2-tuner profile --study article --gpu sm_90 --n 4096"),
    "kernels": ("tuner.kernels.__main__", "the kernels a study may name, with their passes and axes",
                "fa2-tuner kernels"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: fa2-tuner <command> [args]  (fa2-tuner <command> --help for its arguments)", "",
             "Autotuning and sweeps for FlashAttention kernels in Triton.", "", "commands:"]
    lines += [f"  {name:<{width}}  {what}" for name, (_, what, _) in COMMANDS.items()]
    lines += ["", "examples:"] + [f"  {example}" for _, _, example in COMMANDS.values()]
    lines += ["", "Each is also python -m tuner.<command> (python -m tuner.budget, ...); fa2-tuner with flags and no "
                  "command (fa2-tuner --gpu sm_89) is the sweep; benchmarks are python -m benchmarks.<name> --help."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fa2-tuner <command> [args]``; its exit code (2 for an unknown or missing command)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command.startswith("-"):                 # the entry point's form before it had commands: the sweep
        command, rest = "sweep", argv
    if command not in COMMANDS:
        print(f"{usage()}\n\nfa2-tuner: error: unknown command {command!r}; use one of {', '.join(COMMANDS)}",
              file=sys.stderr)
        return 2
    if command == "sweep":          # the GPU worker's imports begin beside the sweep's (tuner.spawn)
        from tuner.spawn import start_early_for_sweep

        start_early_for_sweep(rest)
    return int(importlib.import_module(COMMANDS[command][0]).main(rest) or 0)


def console_main() -> int:
    """The ``fa2-tuner`` console script: :func:`main` with the streams settled (:mod:`tuner.console`)."""
    from tuner.console import call

    return call(main)


if __name__ == "__main__":
    sys.exit(console_main())

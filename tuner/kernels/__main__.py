"""``python -m tuner.kernels`` (``fa2-tuner kernels``): the kernels a study may name, with their passes and axes."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from tuner import kernels


def build_parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="python -m tuner.kernels",
        description="Every registered kernel: its name and pass (a study's kernel = \"...\" and --pass), what it\n"
                    "is, and its config's axes (a study's [space]). A kernel of your own is a module exposing\n"
                    "KERNEL, named by a study as kernel = \"mypkg.mykernel\".",
        epilog="example:\n  python -m tuner.kernels", formatter_class=argparse.RawDescriptionHelpFormatter)


def main(argv: Sequence[str] | None = None) -> int:
    build_parser().parse_args(argv)      # --help; anything else is refused (exit 2)
    for name, pass_, kernel in kernels.known():
        axes = ", ".join(a.name for a in kernel.config_type.axes())
        print(f"{name} (pass {pass_}): {kernel.description}; axes {axes}")
    return 0


if __name__ == "__main__":
    from tuner.console import run

    run(main)

"""``python -m tuner``: the main job until the Optuna sweep lands.

With a CUDA GPU: the budget check for the GPU present, then the benchmark against SDPA.
Without one: the budget check for ``--gpu`` (compiled for that target on the CPU), and a
plain word on why timing stops there.
"""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tuner",
        description="Budget check for a target GPU, then (with a GPU) the kernel-vs-SDPA benchmark.",
        epilog="examples:\n  python -m tuner --gpu sm_89\n  python -m tuner --gpu auto --head-dim 128",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", default="sm_89", help="target GPU (default sm_89); see python -m tuner.budget -h")
    parser.add_argument("--head-dim", default="64", help="head dim for the budget check (default 64)")
    args = parser.parse_args(argv)
    import torch

    from kernel import bench
    from tuner import budget

    code = budget.main(["--gpu", args.gpu, "--head-dim", args.head_dim])
    if code != 0:
        return code
    if not torch.cuda.is_available():
        print("\nNo CUDA GPU here: the budget stage above is complete (it compiles for the target on the CPU). "
              "Correctness on real hardware and timing against SDPA need a GPU; run the same command there.")
        return 0
    return bench.main(["--pick"])


if __name__ == "__main__":
    sys.exit(main())

"""How evenly a persistent grid's fixed stride deals the causal forward's tiles out (a model, no GPU).

    python scripts/schedule_balance.py --bh 16x16 --n 1024 --d 128 --block-m 128 --block-n 128 --programs 132

Walks the Gluon forward's causal order (kernel.gluon.schedule: heaviest row first in groups of heads
whose keys fit a budget; forward_tile_costs, which the tests hold to the kernel's own order), gives
program p the tiles p, p + P, p + 2P, ..., and costs a tile as its key tiles plus ``--overhead`` (its
prologue and epilogue, in key tiles): stride_imbalance, what balanced_budget minimises. Prints,
per L2 budget, the busiest program's load over the mean (1.00: perfectly even; the launch lasts as long
as its busiest program), beside a greedy dealing of the same order (each tile to the least loaded
program, as a dynamic scheduler would): what a balanced schedule could give back.
"""

from __future__ import annotations

import argparse
import heapq
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kernel.gluon.schedule import FWD_BYTES, forward_tile_costs, group_for, stride_imbalance  # noqa: E402

MB = 1024 * 1024


def greedy_imbalance(costs: list[int], programs: int, overhead: float) -> float:
    heap = [(0.0, p) for p in range(programs)]
    for cost in costs:
        load, p = heapq.heappop(heap)
        heapq.heappush(heap, (load + cost + overhead, p))
    loads = [load for load, _ in heap]
    return max(loads) / (sum(loads) / programs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bh", default="16x16", help="BATCHxHEADS")
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--block-m", type=int, default=128)
    parser.add_argument("--block-n", type=int, default=128)
    parser.add_argument("--programs", type=int, default=132)
    parser.add_argument("--overhead", type=float, default=1.0, help="a tile's fixed cost, in key tiles")
    parser.add_argument("--budget", type=int, action="append", help="L2 budgets in MB (default 4 8 16 32 and all)")
    args = parser.parse_args(argv)
    batch, heads = (int(x) for x in args.bh.split("x"))
    print(f"B{batch} H{heads} N{args.n} D{args.d}, {args.block_m}x{args.block_n} tiles, {args.programs} programs")
    print("budget   stride   greedy")
    for mb in args.budget or [4, 8, 16, 32, 2 ** 31 // MB]:
        group = group_for(args.n, batch * heads, mb * MB, args.d * FWD_BYTES)
        costs = forward_tile_costs(args.n, args.n, batch * heads, args.block_m, args.block_n, group)
        print(f"{mb:>6} MB  {stride_imbalance(costs, args.programs, args.overhead):.3f}   "
              f"{greedy_imbalance(costs, args.programs, args.overhead):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

# ruff: noqa: E501 -- the mutants quote source lines as they are
"""The 2026-12-04 mutants: one-line bugs in the Gluon kernels' tile order (kernel/gluon/schedule.py) and in
the battery's leftovers fixed that day (empty flags, budget's exit on an invalid --config), and in the
evening's route candidates (kernel/candidates.py, benchmarks/route.py) and balanced budget (kernel/gluon/schedule.py,
kernel/gluon/fwd/launch.py, benchmarks/tile_order.py), for ``scripts/mutants.py --group order``. Each is (name, file, text before, text after, tests).
"""

SCHEDULE = ["tests/kernel/gluon/test_schedule.py", "tests/kernel/gluon/test_gluon_schedule.py"]
BALANCE = ["tests/benchmarks/test_route_cli.py"]
CANDIDATES = ["tests/kernel/test_candidates.py", "tests/benchmarks/test_route_cli.py", "tests/kernel/test_route_table.py"]

ORDER = [
    # ---------------------------------------------------------------- kernel/gluon/schedule.py
    ("schedule: the last group as large as the others", "kernel/gluon/schedule.py",
     "        size = BH - first\n        if size > GROUP:\n            size = GROUP\n        rest = tile - first * tiles",
     "        size = GROUP\n        rest = tile - first * tiles", SCHEDULE),
    ("schedule: the lightest query tiles first", "kernel/gluon/schedule.py",
     "        tile_m = tiles_m - 1 - tile_m", "        tile_m = tile_m", SCHEDULE),
    ("schedule: the grouped order reversed", "kernel/gluon/schedule.py",
     "        step = rest // size", "        step = tiles - 1 - rest // size", SCHEDULE),
    ("schedule: a group never smaller than every head", "kernel/gluon/schedule.py",
     "    if group > BH:\n        group = BH", "    if group < BH:\n        group = BH", SCHEDULE),
    ("schedule: a group of zero heads", "kernel/gluon/schedule.py",
     "    if group < 1:\n        group = group * 0 + 1", "    if group < 0:\n        group = group * 0 + 1", SCHEDULE),
    ("schedule: the backward's inputs counted as the forward's", "kernel/gluon/schedule.py",
     "BWD_BYTES_PER_ELEMENT = gl.constexpr(8) if gl is not None else 8",
     "BWD_BYTES_PER_ELEMENT = gl.constexpr(4) if gl is not None else 4", SCHEDULE),
    # ---------------------------------------------------------------- empty flags, budget's bad --config
    ("formatting: an empty flag of spaces taken", "tuner/formatting.py", "    if not text.strip():\n        raise",
     "    if not text:\n        raise", ["tests/tuner/test_bad_inputs.py"]),
    ("budget: an invalid --config ends with 0", "tuner/budget/__main__.py", "    if invalid:\n        return usage_error",
     "    if not invalid:\n        return usage_error", ["tests/tuner/test_bad_inputs.py", "tests/tuner/budget/test_budget.py"]),
    # ---------------------------------------------------------------- the many-program candidates, what is timed
    ("candidates: four programs an SM at 112 registers", "kernel/candidates.py",
     '("persistent", 4), ("consumer_regs", 104))', '("persistent", 4), ("consumer_regs", 112))', CANDIDATES),
    ("candidates: the persistent 3/SM tile at two programs", "kernel/candidates.py",
     '("persistent", 3), ("consumer_regs", 144)),', '("persistent", 2), ("consumer_regs", 144)),', CANDIDATES),
    ("candidates: r144 persistent (p3's config twice)", "kernel/candidates.py",
     '"ws_64x64_r144": Candidate("ws", (("block_m", 64), ("block_n", 64), ("persistent", 0),',
     '"ws_64x64_r144": Candidate("ws", (("block_m", 64), ("block_n", 64), ("persistent", 3),', CANDIDATES),
    ("candidates: p4 overlapped", "kernel/candidates.py", '("num_stages", 2), ("overlap", False),',
     '("num_stages", 2), ("overlap", True),', CANDIDATES),
    ("route benchmark: p3 timed at long lengths", "benchmarks/route.py", '"ws_64x64_p3", "ws_p0", "gluon_1c"})',
     '"ws_p0", "gluon_1c"})', CANDIDATES),
    ("route benchmark: p4 not timed", "benchmarks/route.py", '"ws_64x64_r144", "ws_64x64_p3", "ws_64x64_p4", "ws_p0"),',
     '"ws_64x64_r144", "ws_64x64_p3", "ws_p0"),', CANDIDATES),
    # ---------------------------------------------------------------- the balanced budget (kernel.gluon.schedule)
    ("balance: a launch with no keys divided by", "kernel/gluon/schedule.py",
     '    return int(getattr(heads_per_group, "fn", heads_per_group)(max(n_k, 1), bh, budget, row_bytes))',
     '    return int(getattr(heads_per_group, "fn", heads_per_group)(n_k, bh, budget, row_bytes))', SCHEDULE + BALANCE),
    ("balance: the lightest row costed first", "kernel/gluon/schedule.py",
     "        for tile_m in reversed(range(tiles_m)):", "        for tile_m in range(tiles_m):", SCHEDULE + BALANCE),
    ("balance: keys past N_k costed", "kernel/gluon/schedule.py",
     "costs += [-(-min(tile_m * block_m + block_m, n_k) // block_n)] * size",
     "costs += [-(-(tile_m * block_m + block_m) // block_n)] * size", SCHEDULE + BALANCE),
    ("balance: tiles dealt in blocks, not a stride", "kernel/gluon/schedule.py",
     "        loads[index % programs] += cost + overhead", "        loads[index * programs // len(costs)] += cost + overhead",
     SCHEDULE + BALANCE),
    ("balance: no prologue in a tile's cost", "kernel/gluon/schedule.py",
     "        loads[index % programs] += cost + overhead", "        loads[index % programs] += cost", SCHEDULE + BALANCE),
    ("balance: no tolerance toward the larger group", "kernel/gluon/schedule.py",
     "if spread[budget] <= best * 1.005)", "if spread[budget] <= best)", SCHEDULE + BALANCE),
    ("balance: the least even budget", "kernel/gluon/schedule.py", "    best = min(spread.values())",
     "    best = max(spread.values())", SCHEDULE + BALANCE),
    # (balancing a program-per-tile launch would be equivalent: a program per tile is as even in any order)
    ("balance: a non-causal launch balanced", "kernel/gluon/fwd/launch.py",
     "    if not (causal and config.persistent):", "    if not config.persistent:", SCHEDULE + BALANCE),
    ("balance: every tile a program", "kernel/gluon/fwd/launch.py",
     "    programs = grid_for(config, bh, n_q, q.device)[0]", "    programs = bh * -(-n_q // config.block_m)",
     SCHEDULE + BALANCE),
    # (the balanced order became the forward's call on 2026-12-05: the benchmark now times the fixed budget beside it)
    ("balance: the benchmark's fixed-budget variant dropped", "benchmarks/tile_order.py",
     '    fixed = {f"/{L2_BYTES // MB}MB": L2_BYTES} if pass_ == "fwd" else {}', "    fixed = {}", SCHEDULE + BALANCE),
]

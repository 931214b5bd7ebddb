# ruff: noqa: E501 -- the mutants quote source lines as they are
"""The 2026-12-04 mutants: one-line bugs in the Gluon kernels' tile order (kernel/gluon/schedule.py) and in
the battery's leftovers fixed that day (empty flags, budget's exit on an invalid --config), and in the
evening's route candidates (kernel/candidates.py, benchmarks/route.py), for ``scripts/mutants.py --group order``. Each is (name, file, text before, text after, tests).
"""

SCHEDULE = ["tests/kernel/gluon/test_schedule.py", "tests/kernel/gluon/test_gluon_schedule.py"]
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
]

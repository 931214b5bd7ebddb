"""Mutation testing as a habit: realistic bugs put into the code one at a time, against the CPU suite.

    python scripts/mutants.py [--group suite|newer|hunt|order|battery|all] [--only NAME ...]
                              [--markdown docs/results/DATE-mutants.md]

Each mutant is a one-place edit that a person could make by mistake (and that changes
behaviour: a mutant no input can tell apart from the code is replaced, not counted); its text
must occur exactly once in its file. It is applied to a copy of the repository, the tests that
cover its module run there (``-x``, stop at the first failure), and the mutant counts as killed
when they fail. Every test set first runs on the unmutated copy and must pass. The repository
itself is never modified. ``--group suite`` is the suite's own list, ``newer`` issue 23's bugs
in the newer code (the backward, knobs and defaults, the kernel interface, the store's writes,
the timing helpers, emit), ``hunt`` the 2026-12-03 hunt's in the code changed since 2026-12-01
(scripts/mutants_hunt.py), ``order`` the 2026-12-04 tile order's (scripts/mutants_order.py), ``battery``
the 2026-12-05 battery's fixes (scripts/mutants_battery.py). Outside CI: a full run of ``suite`` takes about
20 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ["tests/kernel/triton/test_kernel.py"]
GATE = ["tests/kernel/test_reference.py", "tests/tuner/test_gate.py", "tests/tuner/test_runner.py",
        "tests/kernel/triton/test_kernel.py"]
BUDGET = ["tests/tuner/budget/test_budget.py"]
SWEEP = ["tests/tuner/test_records.py", "tests/tuner/test_finalists.py", "tests/tuner/store/test_store.py",
         "tests/tuner/test_sweep.py"]
EMIT = ["tests/tuner/test_emit.py", "tests/tuner/test_records.py"]
DASH = ["tests/tuner/dashboard/test_dashboard.py"]

# (name, file, text before, text after, tests)
MUTANTS = [
    ("kernel: key mask off by one", "kernel/triton/fwd.py", "in_bounds = offs_key[:, None] < N_K",
     "in_bounds = offs_key[:, None] <= N_K", KERNEL),
    ("kernel: score mask off by one", "kernel/triton/fwd.py", "keep = offs_key[None, :] < N_K",
     "keep = offs_key[None, :] <= N_K", KERNEL),
    ("kernel: causal diagonal excluded", "kernel/triton/fwd.py", "offs_key[None, :] <= offs_m[:, None]",
     "offs_key[None, :] < offs_m[:, None]", KERNEL),
    ("kernel: V read with K's stride", "kernel/triton/fwd.py", "v = tl.load(v_src + start_n * stride_vn)",
     "v = tl.load(v_src + start_n * stride_kn)", KERNEL),
    ("kernel: accumulator not rescaled", "kernel/triton/fwd.py", "acc = acc * alpha[:, None]", "acc = acc", KERNEL),
    ("kernel: lse in log2 units", "kernel/triton/fwd.py", "m_i * LN2 + tl.log(l_i)", "m_i + tl.log(l_i)", KERNEL),
    ("kernel: last query row not loaded", "kernel/triton/fwd.py", "q = tl.load(q_ptrs, mask=offs_m[:, None] < N_Q",
     "q = tl.load(q_ptrs, mask=offs_m[:, None] < N_Q - 1", KERNEL),
    ("kernel: causal key stop too early", "kernel/triton/fwd.py", "key_stop = tl.minimum(N_K, start_m + BLOCK_M)",
     "key_stop = tl.minimum(N_K, start_m + 1)", KERNEL),
    ("kernel: no-key rows get lse 0", "kernel/triton/fwd.py", 'lse = tl.where(no_key, float("-inf"),',
     "lse = tl.where(no_key, 0.0,", KERNEL),
    ("kernel: scale 1/D instead of 1/sqrt(D)", "kernel/triton/fwd.py", "scale = 1.0 / math.sqrt(shape.head_dim)",
     "scale = 1.0 / shape.head_dim", KERNEL),
    ("launcher: plan key ignores alignment", "kernel/triton/launch.py",
     "q.device, k.device, v.device, q.data_ptr() % 16, k.data_ptr() % 16, v.data_ptr() % 16, causal, config,",
     "q.device, k.device, v.device, causal, config,", KERNEL),
    ("launcher: plan key ignores v's strides", "kernel/triton/launch.py",
     "q.stride(), k.stride(), v.stride(), q.dtype", "q.stride(), k.stride(), q.dtype", KERNEL),
    ("gate: 25x looser multiple", "kernel/reference.py", "TORCH_ERROR_MULTIPLE = 3.0", "TORCH_ERROR_MULTIPLE = 75.0",
     GATE),
    ("gate: fp32 floor 25x looser", "kernel/reference.py", "OUT_FLOOR = {torch.float32: 2e-6,",
     "OUT_FLOOR = {torch.float32: 5e-5,", GATE),
    ("gate: lse ignored", "kernel/reference.py",
     "return not self.nan and self.err_out <= self.bound_out and self.err_lse <= self.bound_lse",
     "return not self.nan and self.err_out <= self.bound_out", GATE),
    ("gate: gate shapes ignored", "tuner/runner.py", "if failure is None and not gated.ok:",
     "if False and not gated.ok:", GATE),
    ("gate: no one-key edge shape", "tuner/gate.py", "n_k=2 * config.block_n + 1", "n_k=2 * config.block_n", GATE),
    ("gate: V shares K's layout", "tuner/gate.py", 'GateShape("short-keys", short, strided_v=True, edge=True)',
     'GateShape("short-keys", short, strided_v=False, edge=True)', GATE),
    ("budget: 1 KB over the limit accepted", "tuner/budget/_verdict.py", "if unit.shared_bytes > limit:",
     "if unit.shared_bytes > limit + 1024:", BUDGET),
    ("budget: register verdict ignored", "tuner/budget/_verdict.py",
     "if unit.registers * threads > gpu.regs_per_sm:", "if False:", BUDGET),
    ("budget: spills ignored", "tuner/budget/_verdict.py", "if unit.spill_bytes:", "if False:", BUDGET),
    ("budget: static shared memory ignored", "tuner/budget/_verdict.py",
     "static = info.static_shared_bytes if info else 0", "static = 0", BUDGET),
    ("budget: wgmma model one stage short", "tuner/kernels/triton_fwd.py",
     "return config.num_stages * 2 * kv_bytes + q_bytes", "return (config.num_stages - 1) * 2 * kv_bytes + q_bytes",
     BUDGET),
    ("budget: threads per block unchecked", "tuner/kernels/triton_fwd.py", "if threads > THREADS_PER_BLOCK:",
     "if False:", BUDGET),
    ("sweep: compile errors stored as crashes", "tuner/driver.py",
     "if status == Status.CRASHED and outcome.error_type in COMPILE_ERRORS:", "if False:", SWEEP),
    ("sweep: any failure stored as crashed", "tuner/driver.py", "        status = outcome.status\n",
     "        status = outcome.status if outcome.status == Status.TIMED else Status.CRASHED\n", SWEEP),
    ("sweep: objective's percent not scaled", "tuner/records.py",
     'scale = 100.0 if column.startswith("pct") else 1.0', "scale = 1.0", SWEEP),
    ("sweep: rejected configs told as feasible", "tuner/samplers.py",
     "return (1.0 if refused else 0.0,)", "return (0.0,)", [*SWEEP, "tests/tuner/test_target_space.py"]),
    ("sweep: study restrictions ignored", "tuner/pre_gpu_stages.py",
     "why = study.restricted_by(config, shape.head_dim)", "why = None", SWEEP),
    ("finalists: winner by the first round", "tuner/finalists.py", "key=lambda t: (t.score, t.config)",
     "key=lambda t: (t.decided_by[0], t.config)", SWEEP),
    ("finalists: noise never keeps both", "tuner/finalists.py",
     "return self.runner_up is None or self.gap > self.noise", "return True", SWEEP),
    ("store: rows added, not replaced", "tuner/store/_store.py", "                    session.execute(delete(Result)",
     "                    0 and session.execute(delete(Result)", SWEEP),
    ("emit: budget guard skipped", "tuner/emit.py", "    check_budget(entries, target)\n", "", EMIT),
    ("emit: configs timed on some shapes accepted", "tuner/records.py",
     "if {r.shape for r in rs} == shapes\n"
     "            and all(r.status == Status.TIMED and r.ms and edges_checked(r) for r in rs)}",
     "if any(r.status == Status.TIMED and r.ms for r in rs)}", EMIT),
    ("dashboard: heatmap transposed", "tuner/dashboard/_heatmap.py",
     "grid = [[rows_by_cell.get((bm, bn, warps, stages)) for bn in block_n] for bm in block_m]",
     "grid = [[rows_by_cell.get((bn, bm, warps, stages)) for bn in block_n] for bm in block_m]", DASH),
    ("dashboard: roofline 1000x too low", "tuner/dashboard/_roofline.py",
     "intensity * spec.mem_bandwidth_gbs * 1e9 / 1e12", "intensity * spec.mem_bandwidth_gbs * 1e9 / 1e15", DASH),
    ("dashboard: smem label in thousands", "tuner/dashboard/_heatmap.py", 'return f"smem<br>{needed // 1024}K"',
     'return f"smem<br>{needed // 1000}K"', DASH),
    ("dashboard: host µs button dropped", "tuner/dashboard/_heatmap.py",
     '    "host_us": ("host µs", "host µs per call (lower is better)"),\n', "", DASH),
]


from mutants_battery import BATTERY  # noqa: E402 (beside this file)
from mutants_hunt import HUNTED  # noqa: E402 (beside this file)
from mutants_newer import NEWER  # noqa: E402 (beside this file)
from mutants_order import ORDER  # noqa: E402 (beside this file)

GROUPS = {"suite": MUTANTS, "newer": NEWER, "hunt": HUNTED, "order": ORDER, "battery": BATTERY,
          "all": MUTANTS + NEWER + HUNTED + ORDER + BATTERY}


def _apply(mutant: tuple, copy: Path) -> None:
    """Write the mutant into the copy; its text must be there exactly once (else it is not the bug named)."""
    name, file, before, after = mutant[:4]
    target = copy / file
    text = target.read_text()
    if text.count(before) != 1:
        raise SystemExit(f"mutant {name!r}: {before!r} is in {file} {text.count(before)} times, not once")
    target.write_text(text.replace(before, after))


def _pytest(copy: Path, tests: list[str]) -> tuple[bool, float, str]:
    """(failed, seconds, pytest's last line) of the tests in a copy of the repository."""
    env = {**os.environ, "PYTHONPATH": str(copy), "TRITON_INTERPRET": "1"}
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-m", "not slow and not gpu",
                             "-p", "no:cacheprovider", *tests], cwd=copy, env=env, capture_output=True, text=True)
    lines = result.stdout.strip().splitlines()
    return result.returncode != 0, time.perf_counter() - started, lines[-1] if lines else result.stderr[-200:]


def _fresh_copy(scratch: Path) -> Path:
    copy = scratch / "repo"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", ".venv", ".cache", "fa2-out", "*.db", ".whl"))
    return copy


def run_one(mutant: tuple, scratch: Path) -> tuple[bool, float, str]:
    """(killed, seconds, pytest's last line) of one mutant, applied to a fresh copy of the repository."""
    copy = _fresh_copy(scratch)
    _apply(mutant, copy)
    return _pytest(copy, mutant[4])


def check_baseline(chosen: list[tuple], scratch: Path) -> None:
    """Every test set the mutants use passes on the unmutated code (else a failure kills nothing)."""
    copy = _fresh_copy(scratch)
    for tests in dict.fromkeys(tuple(m[4]) for m in chosen):
        failed, seconds, last = _pytest(copy, list(tests))
        print(f"baseline {seconds:5.0f} s  {', '.join(tests)}  ({last})", flush=True)
        if failed:
            raise SystemExit(f"the unmutated code fails {', '.join(tests)}: {last}")


def _header(argv: list[str]) -> list[str]:
    import platform

    import torch
    import triton

    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return [f"Command: `python scripts/mutants.py {shlex.join(argv)}`", "",
            f"{date}; Python {platform.python_version()}, torch {torch.__version__}, triton {triton.__version__}; "
            f"{os.cpu_count()} CPU cores; each mutant's tests with `-x -m 'not slow and not gpu'`, "
            f"kernels in Triton's interpreter.", ""]


def report(rows: list[tuple], argv: list[str]) -> list[str]:
    """The markdown: command, date and versions, the score, every mutant, and each survivor with its note."""
    killed = sum(r[2] for r in rows)
    lines = _header(argv) + [f"{killed} of {len(rows)} mutants killed ({100 * killed / len(rows):.0f}%).", "",
                             "| mutant | file | result | seconds | tests |", "|---|---|---|---|---|"]
    lines += [f"| {m[0]} | {m[1]} | {'killed' if k else '**survived**'} | {s:.0f} | "
              f"{', '.join(t.removeprefix('tests/') for t in m[4])} |" for m, _, k, s, _ in rows]
    survivors = [(m, last) for m, _, k, _, last in rows if not k]
    if survivors:
        lines += ["", "Survivors:", ""]
        lines += [f"- {m[0]} ({m[1]}): {m[5] if len(m) > 5 else 'no test fails'}; pytest: `{last}`"
                  for m, last in survivors]
    return lines


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", choices=sorted(GROUPS), default="all",
                        help="the suite's own mutants, issue 23's of the newer code, the 2026-12-03 hunt's, the "
                             "2026-12-04 tile order's, the 2026-12-05 battery's, or all (default)")
    parser.add_argument("--only", nargs="*", help="names (substrings) of the mutants to run")
    parser.add_argument("--check", action="store_true", help="only check that every mutant's text is there once")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    chosen = [m for m in GROUPS[args.group] if not args.only or any(o in m[0] for o in args.only)]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        if args.check:
            shutil.copytree(ROOT, Path(scratch) / "repo", ignore=shutil.ignore_patterns(".git", ".venv", ".cache"))
            for mutant in chosen:
                _apply(mutant, Path(scratch) / "repo")
                shutil.copy(ROOT / mutant[1], Path(scratch) / "repo" / mutant[1])
            print(f"{len(chosen)} mutants, each text found once")
            return 0
        check_baseline(chosen, Path(scratch))
        for mutant in chosen:
            killed, seconds, last = run_one(mutant, Path(scratch))
            rows.append((mutant, mutant[1], killed, seconds, last))
            print(f"{'killed  ' if killed else 'SURVIVED'} {seconds:5.0f} s  {mutant[0]}  ({last})", flush=True)
    lines = report(rows, argv)
    print("\n".join(lines))
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n")
    return 0 if all(r[2] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

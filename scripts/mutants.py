"""Mutation testing as a habit: realistic bugs put into the code one at a time, against the CPU suite.

    python scripts/mutants.py [--group suite|newer|all] [--only NAME ...] [--markdown docs/results/DATE-mutants.md]

Each mutant is a one-place edit that a person could make by mistake (and that changes
behaviour: a mutant no input can tell apart from the code is replaced, not counted); its text
must occur exactly once in its file. It is applied to a copy of the repository, the tests that
cover its module run there (``-x``, stop at the first failure), and the mutant counts as killed
when they fail. Every test set first runs on the unmutated copy and must pass. The repository
itself is never modified. ``--group suite`` is the suite's own list, ``newer`` issue 23's bugs
in the newer code (the backward, knobs and defaults, the kernel interface, the store's writes,
the timing helpers, emit). Outside CI: a full run of ``suite`` takes about 20 minutes on 2 cores.
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
KERNEL = ["tests/test_kernel.py"]
GATE = ["tests/test_reference.py", "tests/test_gate.py", "tests/test_runner.py", "tests/test_kernel.py"]
BUDGET = ["tests/test_budget.py"]
SWEEP = ["tests/test_records.py", "tests/test_finalists.py", "tests/test_store.py", "tests/test_sweep.py"]
EMIT = ["tests/test_emit.py", "tests/test_records.py"]
DASH = ["tests/test_dashboard.py"]

# (name, file, text before, text after, tests)
MUTANTS = [
    ("kernel: key mask off by one", "kernel/flash_fwd.py", "in_bounds = offs_key[:, None] < N_K",
     "in_bounds = offs_key[:, None] <= N_K", KERNEL),
    ("kernel: score mask off by one", "kernel/flash_fwd.py", "keep = offs_key[None, :] < N_K",
     "keep = offs_key[None, :] <= N_K", KERNEL),
    ("kernel: causal diagonal excluded", "kernel/flash_fwd.py", "offs_key[None, :] <= offs_m[:, None]",
     "offs_key[None, :] < offs_m[:, None]", KERNEL),
    ("kernel: V read with K's stride", "kernel/flash_fwd.py", "v = tl.load(v_src + start_n * stride_vn)",
     "v = tl.load(v_src + start_n * stride_kn)", KERNEL),
    ("kernel: accumulator not rescaled", "kernel/flash_fwd.py", "acc = acc * alpha[:, None]", "acc = acc", KERNEL),
    ("kernel: lse in log2 units", "kernel/flash_fwd.py", "m_i * LN2 + tl.log(l_i)", "m_i + tl.log(l_i)", KERNEL),
    ("kernel: last query row not loaded", "kernel/flash_fwd.py", "q = tl.load(q_ptrs, mask=offs_m[:, None] < N_Q",
     "q = tl.load(q_ptrs, mask=offs_m[:, None] < N_Q - 1", KERNEL),
    ("kernel: causal key stop too early", "kernel/flash_fwd.py", "key_stop = tl.minimum(N_K, start_m + BLOCK_M)",
     "key_stop = tl.minimum(N_K, start_m + 1)", KERNEL),
    ("kernel: no-key rows get lse 0", "kernel/flash_fwd.py", 'lse = tl.where(no_key, float("-inf"),',
     "lse = tl.where(no_key, 0.0,", KERNEL),
    ("kernel: scale 1/D instead of 1/sqrt(D)", "kernel/flash_fwd.py", "scale = 1.0 / math.sqrt(shape.head_dim)",
     "scale = 1.0 / shape.head_dim", KERNEL),
    ("launcher: plan key ignores alignment", "kernel/launch.py",
     "q.device, k.device, v.device, q.data_ptr() % 16, k.data_ptr() % 16, v.data_ptr() % 16, causal, config,",
     "q.device, k.device, v.device, causal, config,", KERNEL),
    ("launcher: plan key ignores v's strides", "kernel/launch.py",
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
    ("gate: V shares K's layout", "tuner/gate.py", 'GateShape("short-keys", short, strided_v=True)',
     'GateShape("short-keys", short, strided_v=False)', GATE),
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
    ("sweep: rejected configs told as feasible", "tuner/search.py",
     "trial.set_constraint(REJECTED_CONSTRAINT, 0.0 if value > 0 else 1.0)",
     "trial.set_constraint(REJECTED_CONSTRAINT, 0.0)", SWEEP),
    ("sweep: study restrictions ignored", "tuner/pre_gpu_stages.py", "if not study.allowed(config, shape.head_dim):",
     "if False:", SWEEP),
    ("finalists: winner by the first round", "tuner/finalists.py", "key=lambda t: (t.median, t.config)",
     "key=lambda t: (t.times[0], t.config)", SWEEP),
    ("finalists: noise never keeps both", "tuner/finalists.py",
     "return self.runner_up is None or self.gap > self.noise", "return True", SWEEP),
    ("store: rows added, not replaced", "tuner/store/_store.py", "                    session.execute(delete(Result)",
     "                    0 and session.execute(delete(Result)", SWEEP),
    ("emit: budget guard skipped", "tuner/emit.py", "    check_budget(entries, target)\n", "", EMIT),
    ("emit: configs timed on some shapes accepted", "tuner/records.py",
     "if {r.shape for r in rs} == shapes and all(r.status == Status.TIMED and r.ms for r in rs)}",
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


# Issue 23: realistic bugs in the newer code (the backward, the knobs and defaults, the kernel
# interface, the store's concurrency, the timing helpers, emit). A sixth field says why a survivor
# may be expected (GPU-only) and is printed with it.
BWD = ["tests/test_backward_layouts.py", "tests/test_tma_layouts.py"]
BWD_RAGGED = [*BWD, "tests/test_backward.py::test_gradients_match_the_reference_on_ragged_and_causal_shapes"]
BWD_TUNER = ["tests/test_knob_rules.py", "tests/test_backward_layouts.py",
             "tests/test_backward_tuner.py::test_keys_parse_back_and_the_kernel_config_round_trips",
             "tests/test_backward_tuner.py::test_the_dq_pass_fields_do_not_count_where_dq_is_accumulated"]
DEFAULTS = ["tests/test_defaults.py", "tests/test_kernel.py::test_the_hopper_defaults_drop_tma_at_a_length_of_one"]
KNOB_RULES = ["tests/test_knob_rules.py", "tests/test_budget.py::test_warp_specialization_at_four_warps_is_refused_"
              "before_the_compiler_fails"]
INTERFACE = ["tests/test_kernel_interface.py",
             "tests/test_emit.py::test_an_emitted_triton_config_stands_for_its_config",
             "tests/test_kernels.py::test_the_registry_names_the_triton_forward_by_default_and_refuses_what_it_lacks"]
STORE = ["tests/test_store_writes.py", "tests/test_store.py"]
OWNERS = ["tests/test_owners.py", "tests/test_search.py::test_orphans_are_found_only_for_dead_processes"]
TIMING = ["tests/test_timing_cpu.py", "tests/test_timing.py"]
OBJECTIVE = ["tests/test_objective.py", "tests/test_records.py"]
EMIT_TOP = ["tests/test_emit_top.py", "tests/test_emit.py"]
NEWER = [
    ("bwd: preprocess reads dout with out's strides", "kernel/flash_bwd.py",
     '*zip(("stride_dob", "stride_doh", "stride_dom"), shape.do), ("H", shape.heads)',
     '*zip(("stride_dob", "stride_doh", "stride_dom"), shape.o), ("H", shape.heads)', BWD),
    ("bwd: dQ pass reads dout with q's row stride", "kernel/flash_bwd.py",
     "rows[:, None] * stride_dom + offs_d[None, :],\n                 mask=row_ok",
     "rows[:, None] * stride_qm + offs_d[None, :],\n                 mask=row_ok", BWD),
    ("bwd: dK/dV kernel walks dout with q's row stride", "kernel/flash_bwd.py",
     "do_src = _rows_source(DO + batch * stride_dob + head * stride_doh, stride_dom,",
     "do_src = _rows_source(DO + batch * stride_dob + head * stride_doh, stride_qm,", BWD),
    ("bwd: dQ pass walks V with K's row stride", "kernel/flash_bwd.py",
     "v_src = _rows_source(V + batch * stride_vb + head * stride_vh, stride_vn,",
     "v_src = _rows_source(V + batch * stride_vb + head * stride_vh, stride_kn,", BWD),
    ("bwd: dK/dV kernel loads V with K's row stride", "kernel/flash_bwd.py",
     "offs_n[:, None] * stride_vn + offs_d[None, :],", "offs_n[:, None] * stride_kn + offs_d[None, :],", BWD),
    ("bwd: dK/dV causal diagonal excluded", "kernel/flash_bwd.py", "p_t = tl.where(offs_n[:, None] <= rows[None, :]",
     "p_t = tl.where(offs_n[:, None] < rows[None, :]", BWD),
    ("bwd: dQ pass causal diagonal excluded", "kernel/flash_bwd.py", "(start_n + offs_n)[None, :] <= rows[:, None]",
     "(start_n + offs_n)[None, :] < rows[:, None]", BWD),
    ("bwd: dK not scaled", "kernel/flash_bwd.py", "(dk * sm_scale).to(DK.dtype.element_ty)",
     "dk.to(DK.dtype.element_ty)", BWD),
    ("bwd: delta not subtracted in the dQ pass", "kernel/flash_bwd.py",
     "ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])", "ds = p * tl.dot(do, tl.trans(v))", BWD),
    ("bwd: masked diagonal run rounded down", "kernel/flash_bwd.py",
     "mid = tl.minimum(tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M,",
     "mid = tl.minimum((start_n + BLOCK_N) // BLOCK_M * BLOCK_M,", BWD_RAGGED),
    ("bwd: persistent grid splits the tile index wrong", "kernel/flash_bwd.py",
     "tile % BH if CAUSAL else tile // tiles_n", "tile % BH if CAUSAL else tile % tiles_n", BWD),
    ("bwd launcher: dQ grid from the dK/dV tiles", "kernel/bwd_launch.py",
     '"q": (triton.cdiv(shape.n_q, config.block_m_q), bh)', '"q": (triton.cdiv(shape.n_q, config.block_m), bh)', BWD),
    ("bwd launcher: no-key dQ left unwritten", "kernel/bwd_launch.py", "            dq.zero_()            # no key",
     "            dq            # no key", BWD),
    ("bwd launcher: dQ pass key tile from block_m", "kernel/bwd_launch.py",
     'fields["block_n_q"] = fields["block_n"]', 'fields["block_n_q"] = fields["block_m"]', BWD),
    ("bwd launcher: plan key ignores strides", "kernel/bwd_launch.py",
     "(t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16)", "(t.shape, t.dtype, t.device, t.data_ptr() % 16)",
     BWD),
    ("bwd defaults: Hopper winners keyed without causal", "kernel/bwd_launch.py",
     "HOPPER_BWD.get((head_dim, bool(causal)))", "HOPPER_BWD.get((head_dim, False))", DEFAULTS),
    ("bwd defaults: a length of one on the keys keeps TMA", "kernel/bwd_launch.py",
     "if lengths is not None and 1 in lengths and", "if lengths is not None and lengths[0] == 1 and", DEFAULTS),
    ("bwd defaults: portable D=128 on 4 warps", "kernel/bwd_launch.py", "warps = 8 if head_dim == 128 else 4",
     "warps = 8 if head_dim > 128 else 4", DEFAULTS),
    ("bwd tuner: gate edges from the smaller tiles", "tuner/kernels/triton_bwd.py",
     "EdgeTiles(max(config.block_m, config.block_m_q),", "EdgeTiles(min(config.block_m, config.block_m_q),", BWD_TUNER),
    ("bwd tuner: dQ pass counted with two accumulators", "tuner/kernels/triton_bwd.py",
     "config.block_n_q, head_dim, 1, config.num_warps_q", "config.block_n_q, head_dim, 2, config.num_warps_q",
     BWD_TUNER),
    ("bwd tuner: dQ pass rules where dQ is accumulated", "tuner/kernels/triton_bwd.py",
     'if why is None and DQ_MODES[config.dq_mode] == "pass":', "if why is None:", BWD_TUNER),
    ("bwd tuner: dq_mode tma allowed below sm_90", "tuner/kernels/triton_bwd.py",
     '(mode == "tma", "dq_mode tma (TMA reduce-add)")', '(config.tma, "dq_mode tma (TMA reduce-add)")', BWD_TUNER),
    ("bwd tuner: emitted list drops the knobs", "tuner/kernels/triton_bwd.py",
     "if k not in plain or getattr(config, k) != plain[k]}", "if k not in plain}", BWD_TUNER),
    ("bwd tuner: strided gate's dout contiguous", "tuner/kernels/_attention_bwd.py",
     "        if gate.strided_v:          # dO in another layout", "        if False:          # dO in another layout",
     BWD_TUNER),
    ("knobs: warp specialization allowed at 4 warps, 2 stages", "tuner/kernels/triton_fwd.py",
     "config.num_warps < WS_MIN_WARPS and config.num_stages > 1",
     "config.num_warps < WS_MIN_WARPS and config.num_stages > 2", KNOB_RULES),
    ("knobs: warp specialization refused at 8 warps", "tuner/kernels/triton_fwd.py",
     "config.num_warps < WS_MIN_WARPS and", "config.num_warps <= WS_MIN_WARPS and", KNOB_RULES),
    ("knobs: Hopper knobs from sm_89", "tuner/kernels/triton_fwd.py", "HOPPER = 90\n", "HOPPER = 89\n", KNOB_RULES),
    ("knobs: wgmma at 2 warps", "tuner/kernels/triton_fwd.py", "config.num_warps % 4 == 0 and config.block_m >= 64",
     "config.num_warps % 2 == 0 and config.block_m >= 64", KNOB_RULES),
    ("knobs: TMA reads V with K's row stride", "kernel/flash_fwd.py", "strides=[stride_vn, 1], block_shape",
     "strides=[stride_kn, 1], block_shape", ["tests/test_tma_layouts.py"]),
    ("defaults: Hopper D=64 causal with 64-key tiles", "kernel/flash_fwd.py",
     "return dict(block_m=64, block_n=128, num_warps=4, num_stages=2, tma=True)",
     "return dict(block_m=64, block_n=64, num_warps=4, num_stages=2, tma=True)", DEFAULTS),
    ("defaults: portable D=128 with 3 stages", "kernel/flash_fwd.py",
     "return dict(block_m=128, block_n=64, num_warps=8, num_stages=2)",
     "return dict(block_m=128, block_n=64, num_warps=8, num_stages=3)", DEFAULTS),
    ("defaults: Blackwell takes Hopper's", "kernel/flash_fwd.py", "hopper = 90 <= capability < 100",
     "hopper = capability >= 90", DEFAULTS),
    ("defaults: length one only on the queries", "kernel/flash_fwd.py", "1 in (q.shape[-2], k.shape[-2])",
     "q.shape[-2] == 1", DEFAULTS),
    ("interface: default space is every allowed value", "tuner/kernels/_base.py",
     "tuple(values.get(a.name, a.default))", "tuple(values.get(a.name, a.allowed))", INTERFACE),
    ("interface: a knob fixed on is not asked", "tuner/space.py", "or tuple(values) != (self.plain,)",
     "or len(values) > 1", INTERFACE),
    ("interface: a tile of 0 parses", "tuner/space.py", "if len(values) != len(tiles) or min(values) < 1:",
     "if len(values) != len(tiles) or min(values) < 0:", INTERFACE),
    ("interface: a one-pass module needs its pass named", "tuner/kernels/_registry.py",
     "chosen = pass_ or (passes[0] if len(passes) == 1 else DEFAULT_PASS)", "chosen = pass_ or DEFAULT_PASS",
     INTERFACE),
    ("interface: a verdict's ineligible runner-up kept", "tuner/winners.py",
     "if verdict is not None and all(eligible is None or key in eligible for key in verdict.kept):",
     "if verdict is not None:", INTERFACE),
    ("interface: the GPU with the fewest timed rows", "tuner/winners.py", "key=lambda g: -sum(", "key=lambda g: sum(",
     STORE),
    ("interface: another GPU's rows kept", "tuner/winners.py", "(gpus[0], [r for r in rows if r.gpu == gpus[0]])",
     "(gpus[0], rows)", STORE),
    ("store: a replace deletes the other GPU's rows", "tuner/store/_store.py",
     "Result.study == row.study, Result.target == row.target, Result.gpu == row.gpu,",
     "Result.study == row.study, Result.target == row.target,", STORE),
    ("store: a clash redone with the flushed rows", "tuner/store/_store.py",
     "batch = rows if attempt == 0 else [", "batch = rows if True else [", STORE),
    ("store: finalists of every GPU", "tuner/store/_store.py", "query = query.where(Finalist.gpu == gpu)",
     "query = query", STORE),
    ("store: one config per study and shape, whatever the GPU", "tuner/store/_tables.py",
     '"fa2_results"\n    __table_args__ = (UniqueConstraint("study", "target", "gpu", "shape", "config"),)',
     '"fa2_results"\n    __table_args__ = (UniqueConstraint("study", "target", "shape", "config"),)', STORE),
    ("owners: another host's pid taken as ours", "tuner/search.py",
     "return owner_host == socket.gethostname() and pid.isdigit()", "return pid.isdigit()", OWNERS),
    ("owners: a longer host name taken as ours", "tuner/search.py", "owner_host == socket.gethostname() and",
     "owner_host.startswith(socket.gethostname()) and", OWNERS),
    ("timing: input sets rounded down", "kernel/timing.py", "math.ceil(2 * l2_bytes() / max(bytes_per_set, 1))",
     "int(2 * l2_bytes() / max(bytes_per_set, 1))", TIMING),
    ("timing: host µs is the fastest batch", "kernel/timing.py", "return statistics.median(samples)",
     "return min(samples)", TIMING),
    ("timing: host time in ns", "kernel/timing.py", "(time.perf_counter() - start) / calls * 1e6",
     "(time.perf_counter() - start) / calls * 1e9", TIMING),
    ("timing: no warm-up before the host time", "kernel/timing.py", "    call()\n    torch.cuda.synchronize()\n"
     "    samples = []", "    samples = []", TIMING),
    ("timing: a backend's host time of its last set", "kernel/timing.py", '"host_us": host_us(calls[0]) if host',
     '"host_us": host_us(calls[-1]) if host', TIMING),
    ("timing: causal flops past the last key", "kernel/timing.py", "kept = sum(min(i + 1, n_k) for i in range(n_q))",
     "kept = sum(i + 1 for i in range(n_q))", TIMING),
    ("timing: host time of the preallocated call", "tuner/runner.py", "self._sets(problem)[0], problem, allocate=True)",
     "self._sets(problem)[0], problem, allocate=False)", TIMING),
    ("timing: timed over the first set only", "tuner/runner.py", "for tensors in self._sets(problem)]",
     "for tensors in self._sets(problem)[:1]]", TIMING),
    ("timing: window and warm-up swapped", "tuner/runner.py", "gpu_time(calls, self.rep_ms, self.warmup_ms)",
     "gpu_time(calls, self.warmup_ms, self.rep_ms)", TIMING),
    ("timing: backward sets sized as the forward's", "tuner/kernels/_attention_bwd.py",
     'per_set = 9 * first["q"].numel()', 'per_set = 4 * first["q"].numel()', TIMING),
    ("timing: one forward set too many", "tuner/kernels/_attention.py", "for _ in range(input_sets(per_set) - 1):",
     "for _ in range(input_sets(per_set)):", TIMING),
    ("objective: cuDNN's percent from flash's time", "tuner/records.py", "pct_cudnn=100 * cudnn / ms if ms and cudnn",
     "pct_cudnn=100 * flash / ms if ms and cudnn", OBJECTIVE),
    ("objective: the cuDNN metric reads flash's column", "tuner/records.py", '"speedup_vs_cudnn": "pct_cudnn"',
     '"speedup_vs_cudnn": "pct_flash"', OBJECTIVE),
    ("objective: TFLOP/s 1000x low", "tuner/records.py", "tflops=flops / ms * 1e-9 if ms", "tflops=flops / ms * 1e-12 "
     "if ms", OBJECTIVE),
    ("emit: --top keeps one more", "tuner/emit.py", "key=lambda k: (-scores[k], k))[:top]:",
     "key=lambda k: (-scores[k], k))[:top + 1]:", EMIT_TOP),
    ("emit: --top takes the worst", "tuner/emit.py", "key=lambda k: (-scores[k], k))[:top]:",
     "key=lambda k: (scores[k], k))[:top]:", EMIT_TOP),
]
GROUPS = {"suite": MUTANTS, "newer": NEWER, "all": MUTANTS + NEWER}


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
                        help="the suite's own mutants, issue 23's of the newer code, or all (default)")
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

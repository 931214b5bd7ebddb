"""Where a config's compile time goes, on the CPU, from cold caches.

    PYTHONPATH=$PWD python scripts/compile_costs.py [CONFIG_KEY] [--study article] [--target sm_89] [--present sm_90]

Each task of :func:`tuner.pre_gpu_stages.compile_plan` (the target's cross-compiles, the GPU
present's compiles of the study's specialisations and of the gate's) is compiled in this process
and timed; without a GPU the present's compiles are made by ``triton.compile`` for its
capability instead of ``JITFunction.warmup`` (the same compiler work). Then the compile pool's
start: workers spawned and importing Triton (:meth:`tuner.budget.CompilePool.start`), one and two
at once. Identical binaries among the tasks would be compiled once by the sweep: it says how many.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import replace


def _task_times(key: str, study_name: str, target_name: str, present_name: str) -> list[tuple[str, str, float, str]]:
    from tuner.budget import compile_config
    from tuner.gpus import GpuSpec
    from tuner.pre_gpu_stages import compile_plan
    from tuner.study import load

    study = load(study_name)
    config = study.kernel.config_type.parse(key)
    target, present = GpuSpec.from_name(target_name), GpuSpec.from_name(present_name)
    measured = []
    for task in compile_plan(config, study, target, present):
        started = time.perf_counter()
        info = compile_config(replace(task, via_jit=False))
        kind = (f"target {target.name}" if task.capability == target.capability and not task.via_jit
                else f"present {present.name}" + ("" if task.problem in study.variants() else " (gate)"))
        measured.append((kind, task.problem.label, time.perf_counter() - started, info.binary or info.error))
    return measured


def _pool_start(jobs: int) -> float:
    from tuner.budget import CompilePool
    from tuner.budget._compile import import_compiler

    started = time.perf_counter()
    with CompilePool(jobs) as pool:
        pool.start()
        for future in [pool._ensure_executor().submit(import_compiler) for _ in range(jobs)]:
            future.result()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default="128x64_w8_s3")
    parser.add_argument("--study", default="article")
    parser.add_argument("--target", default="sm_89")
    parser.add_argument("--present", default="sm_90")
    args = parser.parse_args()
    os.environ.pop("TRITON_INTERPRET", None)
    scratch = tempfile.mkdtemp()
    os.environ["FA2_TUNER_CACHE"], os.environ["TRITON_CACHE_DIR"] = f"{scratch}/fa2", f"{scratch}/triton"
    measured = _task_times(args.config, args.study, args.target, args.present)
    print(f"| {args.config}: compile task | specialisation | s |\n|---|---|---|")
    totals: dict[str, float] = {}
    for kind, label, seconds, _ in measured:
        print(f"| {kind} | {label} | {seconds:.2f} |")
        totals[kind] = totals.get(kind, 0.0) + seconds
    print("\n" + "; ".join(f"{kind}: {total:.2f} s" for kind, total in totals.items())
          + f"; all {sum(totals.values()):.2f} s for {len(measured)} tasks, "
            f"{len({b for *_, b in measured})} distinct binaries")
    for jobs in (1, 2):
        print(f"compile pool of {jobs}: spawned and Triton imported in {_pool_start(jobs):.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

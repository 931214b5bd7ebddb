"""``python -m benchmarks.store``: the database round trips of a sweep's trials, without a GPU.

Besides compiling, checking and timing, a sweep spends time per trial in the database:
Optuna's ask and tell (with their attributes and heartbeat), the look for another sweep
that stores or times the same config, and the commit of the config's rows. On the
H200 pair this "other" time was 130 s of a 414 s grid sweep, and it does not shrink
with more GPUs. This replays exactly those calls (:class:`tuner.search.SearchSession`,
:class:`tuner.store.Store`) for a grid study's first N trials, in batches, with one or
more threads telling, and prints ms per trial.

    python -m benchmarks.store calls --trials 300 --threads 1 --threads 2
    python -m benchmarks.store calls --storage postgresql+psycopg://postgres@127.0.0.1:54329/postgres

``driver`` runs the real sweep (:class:`tuner.driver.Sweep`: Optuna, the store, the budget
and compile stages from the cache, the threads) over the article grid, with the GPU
workers replaced by stand-ins that sleep as long as a trial takes on the GPU, so what
remains is the sweep's own overhead, and how well N workers overlap:

    python -m benchmarks.store driver --trial-ms 450 --workers 1 --workers 2
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tuner.kernels.triton_fwd import KERNEL
from tuner.search import SearchSession
from tuner.store import Result, Store

STUDIES = Path(__file__).resolve().parent.parent / "studies"

SHAPES = 8      # rows per config, as the article study


def _rows(key: str, run_id: int) -> list[Result]:
    return [Result(run_id=run_id, study="bench", target="sm_90", gpu="g", torch_version="", triton_version="",
                   driver="", shape=f"shape {i}", batch=1, heads=1, n_q=16, n_k=16, head_dim=16, dtype="bf16",
                   causal=False, config=key, block_m=16, block_n=16, num_warps=1, num_stages=1, status="timed",
                   stage="time", ms=1.0) for i in range(SHAPES)]


def per_trial_ms(url: str, trials: int, threads: int, batch: int = 30) -> float:
    """Wall ms per trial of the sweep's database calls for ``trials`` grid trials."""
    from tuner.store import Run

    store = Store(url)
    run = Run(study="bench", target="sm_90", gpu="g", sampler="grid", command="", torch_version="",
              triton_version="", driver="")
    store.add(run)
    session = SearchSession(url, f"bench-{threads}-{time.time_ns()}", "grid", KERNEL.space(), 0, None, {})

    def process(number, config) -> None:
        if not store.config_rows("bench", "sm_90", "g", config.key) and session.leader(number, config) is None:
            store.insert_results(_rows(config.key, run.id))
        session.tell(number, 1.0, {"status": "timed", "reason": "", "config": config.key, "reused": False})

    def ask_batch(count: int) -> list:
        return [session.ask() for _ in range(count)]

    started, done = time.perf_counter(), 0
    # as the sweep does: the next batch is asked while this one is processed
    with ThreadPoolExecutor(threads) as pool, ThreadPoolExecutor(1) as asker:
        current = ask_batch(min(batch, trials))
        while current:
            done += len(current)
            upcoming = asker.submit(ask_batch, min(batch, trials - done))
            list(pool.map(lambda a: process(*a), current))
            current = upcoming.result()
    session.close()
    return 1000 * (time.perf_counter() - started) / trials


class _StandInWorker:
    """Answers like :class:`tuner.runner.GpuWorker`, sleeping instead of using a GPU."""

    trial_s = 0.27
    retime_s = 1.1      # one config, all its rounds (53 s for the article grid's 48 finalists on the H200)

    def __init__(self, shapes, timing, timeout_s, device, device_index=None, kernel=None):
        self.shapes, self.index, self.restarts = shapes, device_index or 0, 0

    def device_info(self) -> dict:
        return {"device_index": self.index, "device_name": "stand-in", "device_uuid": None}

    def baselines(self) -> dict:
        return {s.label: {"flash_ms": 1.0, "cudnn_ms": 0.8, "flash_host_us": 10.0, "cudnn_host_us": 10.0,
                          "timer": "stand-in"} for s in self.shapes}

    def trial(self, config, edges: bool = True):
        from tuner.outcome import ShapeOutcome, TrialOutcome
        from tuner.status import Status

        time.sleep(self.trial_s)
        ms = 1.0 / (config.block_m * config.block_n) ** 0.1 + 0.001 * config.num_stages
        return TrialOutcome(Status.TIMED, "", {s.label: ShapeOutcome(s.label, True, ms=ms, timer="stand-in")
                                               for s in self.shapes}, check_s=0.0, time_s=self.trial_s)

    def retime(self, finalists, rounds: int) -> dict:
        keys = {label: sorted({c.key for c in configs}) for label, configs in finalists.items()}
        time.sleep(self.retime_s * sum(len(k) for k in keys.values()))
        return {label: {key: [1.0 + i * 0.01] * rounds for i, key in enumerate(ks)} for label, ks in keys.items()}

    def close(self) -> None:
        pass


def driver_wall_s(workers: int, trial_ms: float, gpu: str = "sm_89") -> float:
    """Wall seconds of a grid sweep of the article study with stand-in workers."""
    from tuner import driver, sweep

    _StandInWorker.trial_s = trial_ms / 1000
    real = driver.GpuWorker
    driver.GpuWorker = _StandInWorker
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"       # --device cpu asks for the interpreter; no kernel runs here
    try:
        with tempfile.TemporaryDirectory() as folder:
            study = Path(folder) / "article.toml"      # in fp16: the sweep refuses bf16 on the interpreter
            study.write_text((STUDIES / "article.toml").read_text().replace('"bf16"', '"fp16"'))
            started = time.perf_counter()
            code = sweep.main(["--gpu", gpu, "--study", str(study), "--sampler", "grid", "--device", "cpu",
                               "--workers", str(workers), "--no-outputs", "--out", folder])
            wall = time.perf_counter() - started
    finally:
        driver.GpuWorker = real
        if saved is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved
    if code != 0:
        raise RuntimeError(f"the sweep exited {code}")
    return wall


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.store", description=__doc__.splitlines()[0],
                                     epilog="examples:\n  python -m benchmarks.store calls --trials 300 --threads 2\n"
                                            "  python -m benchmarks.store driver --workers 1 --workers 2",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    calls = sub.add_parser("calls", help="the database calls of N trials, ms per trial")
    calls.add_argument("--storage", help="database URL (default: a fresh SQLite file in a temporary folder)")
    calls.add_argument("--trials", type=int, default=300, help="grid trials (default 300; the grid has 750)")
    calls.add_argument("--threads", type=int, action="append", help="threads telling (repeatable; default 1)")
    drive = sub.add_parser("driver", help="the whole sweep with stand-in GPU workers, wall seconds")
    drive.add_argument("--workers", type=int, action="append", help="stand-in devices (repeatable; default 1 and 2)")
    drive.add_argument("--trial-ms", type=float, default=450.0,
                       help="how long a timed trial holds a device (default 450: the H200 article grid's average)")
    args = parser.parse_args(argv)
    if args.command == "driver":
        walls = {n: driver_wall_s(n, args.trial_ms) for n in args.workers or [1, 2]}
        for n, wall in walls.items():
            print(f"{n} stand-in worker(s), {args.trial_ms:.0f} ms per timed trial: {wall:.1f} s wall, "
                  f"{wall / walls[min(walls)]:.2f}x of {min(walls)} worker(s)")
        return 0
    if not 1 <= args.trials <= 750 or any(t < 1 for t in args.threads or []):
        parser.error(f"--trials {args.trials} must be 1..750 and --threads at least 1")
    for threads in args.threads or [1]:
        with tempfile.TemporaryDirectory() as folder:
            url = args.storage or f"sqlite:///{Path(folder) / 'bench.db'}"
            ms = per_trial_ms(url, args.trials, threads)
        print(f"{threads} thread(s): {ms:.1f} ms of database work per trial ({args.trials} trials, "
              f"{url.split(':')[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

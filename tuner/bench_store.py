"""``python -m tuner.bench_store``: the database round trips of a sweep's trials, without a GPU.

Besides compiling, checking and timing, a sweep spends time per trial in the database:
Optuna's ask and tell (with their attributes and heartbeat), the look for another sweep
that stores or times the same config, and the commit of the config's rows. On the
H200 pair this "other" time was 130 s of a 414 s grid sweep, and it does not shrink
with more GPUs. This replays exactly those calls (:class:`tuner.search.SearchSession`,
:class:`tuner.store.Store`) for a grid study's first N trials, in batches, with one or
more threads telling, and prints ms per trial.

    python -m tuner.bench_store --trials 300 --threads 1 --threads 2
    python -m tuner.bench_store --storage postgresql+psycopg://postgres@127.0.0.1:54329/postgres
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tuner.search import SearchSession
from tuner.space import SearchSpace
from tuner.store import Result, Store

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
    session = SearchSession(url, f"bench-{threads}-{time.time_ns()}", "grid", SearchSpace(), 0, None, {})

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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tuner.bench_store", description=__doc__.splitlines()[0],
                                     epilog="examples:\n  python -m tuner.bench_store --trials 300 --threads 1 "
                                            "--threads 2", formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--storage", help="database URL (default: a fresh SQLite file in a temporary folder)")
    parser.add_argument("--trials", type=int, default=300, help="grid trials (default 300; the grid has 750)")
    parser.add_argument("--threads", type=int, action="append", help="threads telling (repeatable; default 1)")
    args = parser.parse_args(argv)
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

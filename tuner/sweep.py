"""``python -m tuner.sweep``: tune the kernel's configs for a GPU with an Optuna study.

Each trial is one config, taken through four stages; each stage's outcome is stored
with its reason, and a config stops at the first stage that rejects it:

1. budget: the space's restrictions, the study's, and the shared-memory model for the
   target (pure, instant; a config rejected here is never compiled);
2. compile: for the target (the exact budget) and for the GPU present, on all cores,
   a batch at a time, while the previous batch is being timed;
3. check: correctness on every shape of the study and a ragged gate shape;
4. time: ``do_bench`` median, next to SDPA flash and cuDNN measured in the same run.

Stages 3 and 4 run in an isolated worker (:mod:`tuner.runner`) with a timeout. Every
finished trial is committed before the next starts; a rerun of the same command
finishes what a killed run left (:mod:`tuner.search`). Without a CUDA device, the
sweep runs stages 1 and 2 for the target, stores them, and stops there.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass, field

from tuner import _budget as budget
from tuner import search, store as storage
from tuner.gpus import GpuSpec, valid_names
from tuner.runner import GpuWorker, TrialOutcome, WorkerFailed
from tuner.space import Config
from tuner.study import Study, StudyError, load

RESTRICTED = "restricted"          # the study's own [space] restrictions
DEFAULT_STUDY = "article"
EXAMPLES = """examples:
  python -m tuner.sweep --gpu sm_90 --study article --sampler grid
  python -m tuner.sweep --gpu sm_89 --study studies/head_dim_128.toml --sampler tpe --trials 120
  python -m tuner.sweep --gpu auto --study long_context --timeout 1800 --storage sqlite:///my.db

Interrupted (Ctrl-C, kill -9, a crash)? Run the same command again to resume: finished trials are
kept, the one in flight is redone, nothing is timed twice. Without a CUDA GPU the sweep
runs the budget stage for --gpu (compiling for it on the CPU), stores it, and stops.
"""


@dataclass
class Clock:
    """Wall time of the run, split by stage (seconds)."""

    compile_s: float = 0.0
    check_s: float = 0.0
    time_s: float = 0.0
    drift: float | None = None     # largest change of an SDPA baseline from the run's start to its end
    started: float = field(default_factory=time.perf_counter)

    def line(self) -> str:
        total = time.perf_counter() - self.started
        other = max(0.0, total - self.compile_s - self.check_s - self.time_s)
        return (f"wall time {total:.0f} s: compile {self.compile_s:.0f} s (waiting on the compile pool), "
                f"check {self.check_s:.0f} s, time {self.time_s:.0f} s, other {other:.0f} s "
                f"(worker start, SDPA baselines, references, database)"
                + (f"\nSDPA baselines moved by at most {100 * self.drift:.1f}% between the start and the end "
                   f"of the run" if self.drift is not None else ""))


@dataclass
class Context:
    """Everything a trial needs to be judged and recorded."""

    study: Study
    target: GpuSpec
    present: GpuSpec | None        # None: no GPU (budget only), or the interpreter
    gpu_label: str
    env: dict
    run_id: int
    store: storage.Store
    baselines: dict[str, dict[str, float | None]] = field(default_factory=dict)


# ------------------------------------------------------------------------------ stages


def budget_stage(config: Config, ctx: Context) -> tuple[str, str, dict] | None:
    """(verdict, reason, fields for the rows) if the config is rejected before compiling, else None."""
    space = ctx.study.space
    outside = [name for name in search.PARAMS if getattr(config, name) not in getattr(space, name)]
    if outside:   # an ordinal sampler can step between the study's values
        return RESTRICTED, f"{', '.join(outside)} outside the study's space", {"budget_verdict": RESTRICTED}
    for shape in ctx.study.variants():
        # Without compile info, budget.verdict applies the space's restrictions, then the model.
        result = budget.verdict(config, shape, ctx.target, None)
        if result.verdict in (budget.OVER_REGISTERS, budget.INVALID):
            return result.verdict, result.reason, {"budget_verdict": result.verdict}
        if not ctx.study.allowed(config, shape.head_dim):
            return RESTRICTED, f"excluded by the study's restrictions {list(ctx.study.restrictions)}", {
                "budget_verdict": RESTRICTED}
        if not result.launchable:
            return result.verdict, result.reason, {"budget_verdict": result.verdict,
                                                   "model_smem_bytes": result.model_bytes,
                                                   "smem_limit_bytes": result.limit_bytes}
    return None


def compile_tasks(config: Config, ctx: Context) -> list[tuple]:
    """What to compile: each specialisation of the study, for the target's budget and for
    the GPU used. On the target itself one JIT compile serves both: it is exact for the
    budget and puts the binary where the launch finds it."""
    variants = ctx.study.variants()
    present = ctx.present
    if present is not None and present.capability == ctx.target.capability:
        return [(config, shape, present.capability, True) for shape in variants]
    tasks = [(config, shape, ctx.target.capability) for shape in variants]
    if present is not None:
        tasks += [(config, shape, present.capability, True) for shape in variants]
    return tasks


def compile_verdict(config: Config, ctx: Context,
                    infos: list[budget.CompileInfo]) -> tuple[dict, tuple[str, str] | None]:
    """Judge the compiled binaries. Returns (fields for the rows, (verdict, reason) or None)."""
    variants = ctx.study.variants()
    target_infos = infos[:len(variants)]
    present_infos = infos[len(variants):] or target_infos
    fields: dict = {}
    for shape, info in zip(variants, target_infos):
        result = budget.verdict(config, shape, ctx.target, info)
        fields = dict(budget_verdict=result.verdict, model_smem_bytes=result.model_bytes,
                      smem_bytes=result.compiled_bytes, smem_limit_bytes=result.limit_bytes,
                      registers=result.registers, spill_bytes=result.spill_bytes)
        if not result.launchable:
            return fields, (result.verdict, result.reason)
    if ctx.present is not None and present_infos is not target_infos:
        for shape, info in zip(variants, present_infos):
            result = budget.verdict(config, shape, ctx.present, info)
            if not result.launchable:
                return fields, (result.verdict, f"on the GPU used ({ctx.present.name}): {result.reason}")
    binaries = [info.binary for info in present_infos]
    fields["binary"] = "+".join(binaries) if all(binaries) else None
    return fields, None


# ------------------------------------------------------------------------------ records


def _rows(config: Config, ctx: Context, status: str, stage: str, reason: str, fields: dict,
          outcome: TrialOutcome | None = None, trial_number: int | None = None) -> list[storage.Result]:
    from kernel.bench import attention_flops

    rows = []
    for shape in ctx.study.shapes:
        measured = outcome.shapes.get(shape.label) if outcome else None
        base = ctx.baselines.get(shape.label, {})
        ms = measured.ms if measured else None
        flash, cudnn = base.get("flash"), base.get("cudnn")
        flops = attention_flops(shape.batch, shape.heads, shape.n_q, shape.n_k, shape.head_dim, shape.causal)
        rows.append(storage.Result(
            run_id=ctx.run_id, optuna_trial=trial_number, study=ctx.study.name, target=ctx.target.name,
            gpu=ctx.gpu_label, torch_version=ctx.env["torch"], triton_version=ctx.env["triton"],
            driver=ctx.env["driver"], shape=shape.label, batch=shape.batch, heads=shape.heads, n_q=shape.n_q,
            n_k=shape.n_k, head_dim=shape.head_dim, dtype=shape.dtype, causal=shape.causal, config=config.key,
            block_m=config.block_m, block_n=config.block_n, num_warps=config.num_warps,
            num_stages=config.num_stages, status=status, stage=stage, reason=reason,
            err_out=measured.err_out if measured else None, err_lse=measured.err_lse if measured else None,
            err_bound=measured.err_bound if measured else None,
            ragged_err_out=measured.ragged_err_out if measured else None,
            ms=ms, tflops=flops / ms * 1e-9 if ms else None, flash_ms=flash, cudnn_ms=cudnn,
            pct_flash=100 * flash / ms if ms and flash else None, pct_cudnn=100 * cudnn / ms if ms and cudnn else None,
            check_s=outcome.check_s if outcome else None, time_s=outcome.time_s if outcome else None,
            **fields))
    return rows


def objective(rows: list[storage.Result], metric: str) -> float:
    """The study's objective from a config's rows: a geometric mean over shapes, 0 if not timed."""
    if not rows or any(r.status != storage.TIMED for r in rows):
        return 0.0
    column = {"speedup_vs_flash": "pct_flash", "speedup_vs_cudnn": "pct_cudnn", "tflops": "tflops"}[metric]
    values = [getattr(r, column) for r in rows]
    if any(v is None or v <= 0 for v in values):
        return 0.0
    scale = 100.0 if column.startswith("pct") else 1.0
    return math.exp(sum(math.log(v / scale) for v in values) / len(values))


def _copy_rows(rows: list[storage.Result], config: Config, ctx: Context, reason: str,
               trial_number: int | None, fields: dict) -> list[storage.Result]:
    """Rows for a config whose binary was already timed under another config."""
    copies = []
    for row in rows:
        values = {c.name: getattr(row, c.name) for c in storage.Result.__table__.columns if c.name != "id"}
        values.update(fields)
        values.update(config=config.key, block_m=config.block_m, block_n=config.block_n,
                      num_warps=config.num_warps, num_stages=config.num_stages, run_id=ctx.run_id,
                      optuna_trial=trial_number, reason=reason, created_at=storage.now(), check_s=0.0,
                      time_s=0.0)
        copies.append(storage.Result(**values))
    return copies


# ------------------------------------------------------------------------------- sweeps


class Progress:
    """A progress bar (tqdm on a terminal, a line every few trials in a log) with the best so far."""

    def __init__(self, total: int | None, done: int = 0):
        self.total, self.done = total, done
        self.best: tuple[float, str] | None = None
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, file=sys.stderr, unit="config", dynamic_ncols=True)

    def update(self, config: Config, value: float, status: str, metric: str) -> None:
        self.done += 1
        if value > 0 and (self.best is None or value > self.best[0]):
            self.best = (value, config.key)
        best = f"best {self.best[1]} {self.best[0]:.3g}{'x' if metric != 'tflops' else ' TFLOP/s'}" \
            if self.best else "best: none timed yet"
        if self.bar is not None:
            self.bar.set_postfix_str(f"{best} | last {config.key} {status}", refresh=False)
            self.bar.update(1)
        elif self.done % 20 == 0 or self.done == self.total:
            print(f"[{self.done}/{self.total or '?'}] {best}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_budget_only(ctx: Context, jobs: int | None) -> Counter:
    """No GPU: stages 1 and 2 for the target over the study's whole space, stored."""
    configs = ctx.study.space.all_configs()
    verdicts: dict[Config, tuple[str, str, dict]] = {}
    to_compile = []
    for config in configs:
        rejected = budget_stage(config, ctx)
        if rejected:
            verdicts[config] = rejected
        else:
            to_compile.append(config)
    tasks = [task for config in to_compile for task in compile_tasks(config, ctx)]
    print(f"budget stage for {ctx.target.name}: {len(configs) - len(to_compile)} configs rejected by the model and "
          f"restrictions; compiling {len(to_compile)} for {ctx.target.name} ({len(tasks)} compiles, cached after)",
          file=sys.stderr)

    def progress(done: int, total: int) -> None:
        if sys.stderr.isatty():
            print(f"\rcompiling for {ctx.target.name}: {done}/{total}", end="" if done < total else "\n",
                  file=sys.stderr, flush=True)
        elif done % 50 == 0 or done == total:     # a log gets a line now and then
            print(f"compiling for {ctx.target.name}: {done}/{total}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    infos = budget.compile_many(tasks, jobs=jobs, progress=progress)
    per_config = len(ctx.study.variants())
    for index, config in enumerate(to_compile):
        fields, rejected = compile_verdict(config, ctx, infos[index * per_config:(index + 1) * per_config])
        if rejected:
            verdicts[config] = (*rejected, fields)
        else:
            verdicts[config] = (storage.PENDING, f"fits {ctx.target.name}; timing needs a CUDA GPU", fields)
    rows = []
    for config in configs:
        status, reason, fields = verdicts[config]
        stage = "compile" if "smem_bytes" in fields else "budget"
        rows += _rows(config, ctx, status, stage, reason, fields)
    ctx.store.replace_results(rows)
    print(f"budget stage: {len(configs)} configs, {len(tasks)} compiles in {time.perf_counter() - started:.0f} s")
    return Counter(status for status, _, _ in verdicts.values())


def run_sweep(ctx: Context, sampler_name: str, trials: int | None, timeout_s: float | None, seed: int | None,
              jobs: int | None, batch: int | None, trial_timeout_s: float, device: str) -> tuple[Counter, Clock]:
    """Stages 1 to 4 over Optuna trials until the grid, --trials or --timeout runs out."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study_spec = ctx.study
    space = study_spec.space
    sampler = search.make_sampler(sampler_name, space, seed)
    optuna_name = f"{study_spec.name}@{ctx.target.name}"
    if ctx.present is not None and ctx.present.name != ctx.target.name:
        optuna_name += f"-on-{ctx.present.name}"
    if device == "cpu":
        optuna_name += "-interpreter"
    rdb = optuna.storages.RDBStorage(ctx.store.url)
    study = optuna.create_study(study_name=optuna_name, storage=rdb, sampler=sampler, direction="maximize",
                                load_if_exists=True)
    study_id = rdb.get_study_id_from_name(optuna_name)

    def trial_of(number: int) -> optuna.trial.Trial:
        """A handle on a trial asked earlier (perhaps by a sweep that died)."""
        return optuna.trial.Trial(study, rdb.get_trial_id_from_study_id_trial_number(study_id, number))

    study.set_user_attr("metric", study_spec.metric)
    study.set_user_attr("target", ctx.target.name)
    study.set_user_attr("gpu", ctx.gpu_label)
    distributions = search.distributions(space, sampler_name)
    orphans, foreign = search.orphaned_trials(study)
    if orphans:
        print(f"resuming: {len(orphans)} trial(s) left in flight by a stopped sweep will be finished first "
              f"({', '.join(o.config.key for o in orphans)})", file=sys.stderr)
    if foreign:
        print(f"note: {foreign} trial(s) are running in another live sweep of this study", file=sys.stderr)

    known = {}        # config key -> its rows, from earlier runs and this one
    by_binary = {}    # binary hash -> config key already timed
    for row in ctx.store.results(study_spec.name, ctx.target.name, ctx.gpu_label):
        known.setdefault(row.config, []).append(row)
        if row.binary and row.status == storage.TIMED:
            by_binary.setdefault(row.binary, row.config)
    finished = sum(t.state.is_finished() for t in study.get_trials(deepcopy=False))
    grid = sampler_name == "grid"
    if grid:
        total = search.grid_size(space)
    else:
        total = trials or 100
    cores = os.cpu_count() or 1
    batch = batch or (max(2, cores - 2) if sampler_name != "tpe" else 4)
    jobs = jobs or (max(1, cores - 2) if cores > 4 else cores)
    counts: Counter = Counter()
    clock = Clock()
    deadline = time.perf_counter() + timeout_s if timeout_s else None
    progress = Progress(total, min(finished, total))
    worker = GpuWorker(study_spec.shapes, (study_spec.timing.warmup_ms, study_spec.timing.rep_ms),
                       trial_timeout_s, device)
    pool = budget.CompilePool(jobs)
    me = search.owner()

    def ask_batch() -> list[tuple[int, Config, list[Future] | None, tuple | None]]:
        """Ask up to ``batch`` trials; submit the compiles of those that pass the budget."""
        nonlocal orphans
        asked = []
        while len(asked) < batch:
            if deadline and time.perf_counter() > deadline:
                break
            if orphans:
                orphan, orphans = orphans[0], orphans[1:]
                trial_of(orphan.number).set_user_attr(search.OWNER_ATTR, me)
                number, config = orphan.number, orphan.config
            else:
                if grid:
                    if search.grid_left(study, space) <= 0:
                        break
                elif sum(t.state.is_finished() or t.state == optuna.trial.TrialState.RUNNING
                         for t in study.get_trials(deepcopy=False)) >= total:
                    break
                trial = study.ask(distributions)
                trial.set_user_attr(search.OWNER_ATTR, me)
                number, config = trial.number, search.config_of(trial.params)
            rejected = budget_stage(config, ctx)
            if rejected or config.key in known:
                asked.append((number, config, None, rejected))
            else:
                asked.append((number, config, [pool.submit(t) for t in compile_tasks(config, ctx)], None))
        return asked

    def finish(number: int, config: Config, rows: list[storage.Result], reused: bool) -> None:
        """Commit the rows, then tell Optuna (a crash between the two is redone by the next run)."""
        if not reused:
            ctx.store.replace_results(rows)
            known[config.key] = rows
        value = objective(rows, study_spec.metric)
        status = rows[0].status
        trial = trial_of(number)
        for key, val in {"status": status, "reason": rows[0].reason[:300], "config": config.key,
                         "reused": reused}.items():
            trial.set_user_attr(key, val)
        trial.set_constraint(search.REJECTED_CONSTRAINT, 0.0 if value > 0 else 1.0)
        study.tell(number, value)
        counts[status] += 1
        progress.update(config, value, status, study_spec.metric)

    def store_baselines(baselines: dict, phase: str) -> None:
        with ctx.store.session() as session:
            for label, times in baselines.items():
                session.add(storage.Baseline(run_id=ctx.run_id, shape=label, phase=phase,
                                             flash_ms=times.get("flash"), cudnn_ms=times.get("cudnn")))

    def ensure_baselines() -> None:
        """SDPA per shape, once per run, before the first config is timed."""
        if ctx.baselines:
            return
        started = time.perf_counter()
        ctx.baselines = worker.baselines()
        store_baselines(ctx.baselines, "start")
        for label, times in ctx.baselines.items():
            print(f"SDPA {label}: flash {_ms(times.get('flash'))}, cuDNN {_ms(times.get('cudnn'))}", file=sys.stderr)
        print(f"worker ready: inputs, float32 references and SDPA baselines in {time.perf_counter() - started:.0f} s",
              file=sys.stderr)

    try:
        current = ask_batch()
        while current:
            # Compiles of the next batch run while this one is checked and timed.
            waited = time.perf_counter()
            for _, _, futures, _ in current:
                for future in futures or []:
                    future.result()
            clock.compile_s += time.perf_counter() - waited
            upcoming = ask_batch()
            for number, config, futures, rejected in current:
                if config.key in known:
                    finish(number, config, known[config.key], reused=True)
                    continue
                if rejected:
                    verdict, reason, fields = rejected
                    finish(number, config, _rows(config, ctx, verdict, "budget", reason, fields, trial_number=number),
                           False)
                    continue
                fields, rejected = compile_verdict(config, ctx, [f.result() for f in futures])
                if rejected:
                    verdict, reason = rejected
                    finish(number, config, _rows(config, ctx, verdict, "compile", reason, fields, trial_number=number),
                           False)
                    continue
                twin = by_binary.get(fields.get("binary"))
                if twin and twin in known:
                    finish(number, config, _copy_rows(known[twin], config, ctx,
                                                      f"same binary as {twin}: its results, not re-timed", number,
                                                      fields), False)
                    continue
                ensure_baselines()
                outcome = worker.trial(config)
                clock.check_s += outcome.check_s
                clock.time_s += outcome.time_s
                stage = "time" if outcome.status == storage.TIMED else "check"
                status = outcome.status
                if status == "crashed" and any(word in outcome.reason for word in ("OutOfResources",
                                                                                   "CompilationError")):
                    status = budget.COMPILE_ERROR
                rows = _rows(config, ctx, status, stage, outcome.reason, fields, outcome, number)
                if status == storage.TIMED and fields.get("binary"):
                    by_binary.setdefault(fields["binary"], config.key)
                finish(number, config, rows, False)
            current = upcoming
        if ctx.baselines:
            # SDPA again at the end: how far the machine drifted while the configs were timed.
            try:
                end = worker.baselines()
            except WorkerFailed:
                end = {}
            store_baselines(end, "end")
            drifts = [abs(end[label][b] / ctx.baselines[label][b] - 1) for label in end for b in ("flash", "cudnn")
                      if end[label].get(b) and ctx.baselines.get(label, {}).get(b)]
            if drifts:
                clock.drift = max(drifts)
    finally:
        progress.close()
        worker.close()
        pool.close()
    if worker.restarts:
        print(f"the worker was restarted {worker.restarts} time(s) after a crash or timeout", file=sys.stderr)
    return counts, clock


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f} ms"


# ----------------------------------------------------------------------------- summary


def summary(ctx: Context, counts: Counter, clock: Clock | None, top: int = 5) -> str:
    """The end-of-run table: best per shape, top configs, rejections by reason, wall time."""
    rows = ctx.store.results(ctx.study.name, ctx.target.name, ctx.gpu_label)
    by_config: dict[str, list[storage.Result]] = {}
    for row in rows:
        by_config.setdefault(row.config, []).append(row)
    status_all = Counter(r[0].status for r in by_config.values())
    where = "no GPU (budget stage only)" if ctx.gpu_label == "none" else ctx.gpu_label
    lines = [f"study {ctx.study.name} for target {ctx.target.name} ({ctx.target.card}), run on {where}; "
             f"torch {ctx.env['torch']}, triton {ctx.env['triton']}, driver {ctx.env['driver']}, {ctx.env['date']}",
             f"configs in store: {len(by_config)}; " + ", ".join(f"{k} {v}" for k, v in status_all.most_common())]
    if counts:
        lines.append("this run: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    timed = [r for r in rows if r.status == storage.TIMED]
    if timed:
        lines += ["", "best config per shape (% of SDPA = SDPA time / ours x 100; above 100 is faster):",
                  f"{'shape':<40} {'config':<16} {'ms':>8} {'TFLOP/s':>8} {'% flash':>8} {'% cuDNN':>8}"]
        for shape in ctx.study.shapes:
            candidates = [r for r in timed if r.shape == shape.label]
            if candidates:
                best = min(candidates, key=lambda r: r.ms)
                lines.append(f"{shape.label:<40} {best.config:<16} {best.ms:>8.3f} {best.tflops:>8.0f} "
                             f"{_pct(best.pct_flash):>8} {_pct(best.pct_cudnn):>8}")
        ranked = sorted(((objective(rs, ctx.study.metric), key) for key, rs in by_config.items()), reverse=True)
        lines += ["", f"top {top} configs by the study's objective ({ctx.study.metric}, geometric mean over shapes):"]
        for value, key in ranked[:top]:
            if value > 0:
                pct = [r.pct_flash for r in by_config[key] if r.pct_flash]
                lines.append(f"  {key:<16} {value:.3f}   % flash per shape: {', '.join(f'{p:.0f}' for p in pct)}")
    if clock is not None:
        lines += ["", clock.line()]
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


# --------------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tuner.sweep",
        description="Tune the FA2 kernel's tiles, warps and stages for a GPU: budget check, compile, "
                    "correctness gate and timing against SDPA, stored in a database an Optuna study shares.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", default="auto",
                        help="target whose shared-memory and register budget configs must fit: sm_80, sm_89, "
                             "sm_90, a card name (rtx4090, h200, ...) or auto, the GPU present (default auto)")
    parser.add_argument("--study", default=DEFAULT_STUDY,
                        help=f"a study file, or the name of one in studies/ (default {DEFAULT_STUDY})")
    parser.add_argument("--sampler", default="tpe", help=f"one of {', '.join(search.SAMPLERS)} (default tpe; "
                                                          "grid times every config of the space once)")
    parser.add_argument("--trials", type=int, help="total trials for the study, counting earlier runs "
                                                   "(default 100; ignored by grid, which stops when the space is done)")
    parser.add_argument("--timeout", type=float, help="stop asking for new trials after this many seconds")
    parser.add_argument("--storage", default=storage.DEFAULT_URL,
                        help=f"SQLAlchemy database URL for results and the Optuna study (default {storage.DEFAULT_URL})")
    parser.add_argument("--seed", type=int, help="sampler seed, for a reproducible search")
    parser.add_argument("--jobs", type=int, help="compile processes (default: all cores but two)")
    parser.add_argument("--batch", type=int, help="trials asked at once and compiled together "
                                                  "(default: cores - 2; 4 for tpe)")
    parser.add_argument("--trial-timeout", type=float, default=180.0,
                        help="seconds before a trial's worker is killed and the config recorded as a timeout "
                             "(default 180)")
    parser.add_argument("--no-outputs", action="store_true", help="skip the dashboards and the emitted config list")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help=argparse.SUPPRESS)
    return parser


def _usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Every input is checked before anything is created or written.
    try:
        study_spec = load(args.study)
    except StudyError as exc:
        return _usage_error(parser, f"--study: {exc}")
    if args.sampler not in search.SAMPLERS:
        return _usage_error(parser, f"--sampler {args.sampler!r} is not one of {', '.join(search.SAMPLERS)}")
    for name in ("trials", "jobs", "batch"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return _usage_error(parser, f"--{name} {value} must be at least 1")
    for name in ("timeout", "trial_timeout"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            return _usage_error(parser, f"--{name.replace('_', '-')} {value} must be positive (seconds)")
    try:
        from sqlalchemy.engine import make_url

        make_url(args.storage)
    except Exception:
        return _usage_error(parser, f"--storage {args.storage!r} is not a database URL; e.g. sqlite:///studies/tuning.db")
    import torch

    has_cuda = torch.cuda.is_available() and args.device == "cuda"
    gpu_name = args.gpu
    if gpu_name.strip().lower() == "auto" and not has_cuda:
        return _usage_error(parser, "--gpu auto needs a CUDA device and none is visible; name a target, "
                                    f"one of: {', '.join(valid_names())}")
    try:
        target = GpuSpec.from_name(gpu_name)
    except (ValueError, RuntimeError) as exc:
        return _usage_error(parser, f"--gpu: {exc}")

    from kernel.bench import environment
    from tuner.gpus import detect

    env = environment()
    present = detect() if has_cuda else None
    if present is not None:
        gpu_label = f"{present.card} ({present.name})"
        if present.name != target.name:
            print(f"warning: --gpu {target.name} ({target.card}) is not the GPU present, {gpu_label}. Configs are "
                  f"held to {target.name}'s budget but timed on {present.name}; both are recorded, and outputs "
                  f"are labelled '{target.name} timed on {present.name}'.", file=sys.stderr)
    elif args.device == "cpu":
        gpu_label = "cpu (Triton interpreter; times are meaningless)"
    else:
        gpu_label = "none"
    try:
        db = storage.Store(args.storage)
    except Exception as exc:
        return _usage_error(parser, f"--storage {args.storage!r}: cannot open: {type(exc).__name__}: {exc}")
    run = storage.Run(study=study_spec.name, target=target.name, gpu=gpu_label, sampler=args.sampler,
                      command=" ".join(["python -m tuner.sweep"] + list(argv if argv is not None else sys.argv[1:])),
                      torch_version=env["torch"], triton_version=env["triton"], driver=env["driver"])
    db.add(run)
    ctx = Context(study=study_spec, target=target, present=present, gpu_label=gpu_label, env=env, run_id=run.id,
                  store=db)
    print(f"study {study_spec.name} ({study_spec.path}): {len(study_spec.shapes)} shape(s), "
          f"{len(study_spec.space.all_configs())} configs; target {target.name}; GPU used: {gpu_label}; "
          f"storage {args.storage}", file=sys.stderr)

    if present is None and args.device != "cpu":
        counts = run_budget_only(ctx, args.jobs)
        db.finish_run(run.id, "budget-only")
        print(summary(ctx, counts, None))
        print(f"\nNo CUDA GPU here, so the sweep stopped after the budget stage: "
              f"{counts.get(storage.PENDING, 0)} configs fit {target.name} and wait to be checked and timed, which "
              f"needs the GPU itself. Results are in {args.storage}. Run the same command on a machine with the GPU.")
        _outputs(args, ctx)
        return 0
    try:
        counts, clock = run_sweep(ctx, args.sampler, args.trials, args.timeout, args.seed, args.jobs, args.batch,
                                  args.trial_timeout, args.device)
    except KeyboardInterrupt:
        db.finish_run(run.id, "interrupted")
        print("\ninterrupted: every finished trial is stored; run the same command to resume.", file=sys.stderr)
        return 130
    except (WorkerFailed, RuntimeError) as exc:
        db.finish_run(run.id, "failed")
        print(f"error: the GPU worker could not measure the SDPA baselines: {exc}. Finished trials are stored; "
              f"fix the cause and run the same command to resume.", file=sys.stderr)
        return 1
    db.finish_run(run.id, "finished")
    print(summary(ctx, counts, clock))
    _outputs(args, ctx)
    return 0


def _outputs(args, ctx: Context) -> None:
    """Dashboards and the emitted config list, from the store (skipped with --no-outputs)."""
    if args.no_outputs:
        return
    try:
        from tuner import dashboard, emit
    except ImportError:
        return
    pages = dashboard.build_all(ctx.store)
    print(f"dashboards: {len(pages)} pages in dashboards/ (open dashboards/index.html)")
    if any(r.status == storage.TIMED for r in ctx.store.results(ctx.study.name, ctx.target.name, ctx.gpu_label)):
        emit.main(["--study", ctx.study.name, "--gpu", ctx.target.name, "--storage", args.storage])


if __name__ == "__main__":
    sys.exit(main())

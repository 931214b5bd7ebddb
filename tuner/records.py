"""Rows for the store, and the scores read back from them.

* :func:`result_rows` turns one config's outcome (a rejection, or the worker's
  :class:`~tuner.outcome.TrialOutcome`) into one :class:`~tuner.store.Result` per shape:
  the config's key, its kernel and pass, every field in ``params`` (JSON; the fields that
  have their own columns fill them too), every named error in ``errors`` (JSON; the
  forward's ``out`` and ``lse`` also fill their own columns, as before ``errors`` existed).
* :func:`objective` is the value told to Optuna: the geometric mean over shapes of the
  study's metric (speedup over SDPA-flash or cuDNN, or TFLOP/s). It depends on the
  config's own rows and the run's SDPA baselines only, so it never changes once told.
* :func:`scores` ranks configs across shapes the way the outputs show them: the
  geometric mean over shapes of (best time for that shape / this config's time), 1.0
  for a config that is the fastest on every shape. Each shape counts against its own
  best. Since a geometric mean is blind to a constant factor per shape, this ranks
  configs exactly as the objective does, whatever the metric; it only reads better.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from kernel.measure.clock import cycles
from tuner.gate import edges_checked
from tuner.gpus import GpuSpec
from tuner.outcome import ShapeOutcome, TrialOutcome
from tuner.status import Stage, Status
from tuner.store import Baseline, Result, now
from tuner.study import Study

METRIC_COLUMNS = {"speedup_vs_flash": "pct_flash", "speedup_vs_cudnn": "pct_cudnn", "tflops": "tflops"}


@dataclass
class RunContext:
    """What every row of a run shares."""

    study: Study
    target: GpuSpec
    gpu_label: str
    env: dict
    run_id: int
    baselines: dict[str, dict] = field(default_factory=dict)    # shape label -> SDPA times (Baseline columns)
    device: dict = field(default_factory=dict)     # device_index, device_name, device_uuid, host of the worker


# Config fields with a column of their own (every kernel's config has the first four: the
# heatmap's axes); any other field is in ``params`` only, so a new knob needs no new column.
CONFIG_COLUMNS = ("block_m", "block_n", "num_warps", "num_stages", "tma", "warp_specialize", "maxnreg", "persistent")
# Named errors with columns of their own (the forward's): name -> (error, bound, worst of the gate shapes).
ERROR_COLUMNS = {"out": ("err_out", "err_bound", "ragged_err_out"), "lse": ("err_lse", "lse_bound", "ragged_err_lse")}


def config_columns(config) -> dict:
    """The result table's config columns: its key, every field as JSON, and the fields with columns."""
    params = config.params()
    return {"config": config.key, "params": json.dumps(params, sort_keys=True),
            **{name: value for name, value in params.items() if name in CONFIG_COLUMNS}}


def error_columns(measured: ShapeOutcome | None) -> dict:
    """The named errors of a shape's outcome as JSON (``errors``), and the forward's in their columns."""
    if measured is None or not measured.errors:
        return {}
    gate = {e.name: e.error for e in measured.gate_errors}
    columns: dict = {"errors": json.dumps({e.name: {"error": e.error, "bound": e.bound, "gate": gate.get(e.name)}
                                           for e in measured.errors})}
    for e in measured.errors:
        if e.name in ERROR_COLUMNS:
            error, bound, gated = ERROR_COLUMNS[e.name]
            columns |= {error: e.error, bound: e.bound, gated: gate.get(e.name)}
    return columns


def result_rows(config, ctx: RunContext, status: Status, stage: Stage, reason: str, fields: dict,
                outcome: TrialOutcome | None = None, trial_number: int | None = None) -> list[Result]:
    """One row per study shape for a config, with every stage's fields."""
    rows = []
    for shape in ctx.study.shapes:
        measured = outcome.shapes.get(shape.label) if outcome else None
        base = ctx.baselines.get(shape.label, {})
        ms = measured.ms if measured else None
        flash, cudnn = base.get("flash_ms"), base.get("cudnn_ms")
        flops = ctx.study.kernel.flops(shape)
        rows.append(Result(
            run_id=ctx.run_id, optuna_trial=trial_number, study=ctx.study.name, target=ctx.target.name,
            gpu=ctx.gpu_label, torch_version=ctx.env["torch"], triton_version=ctx.env["triton"],
            driver=ctx.env["driver"], shape=shape.label, batch=shape.batch, heads=shape.heads, n_q=shape.n_q,
            n_k=shape.n_k, head_dim=shape.head_dim, dtype=shape.dtype, causal=shape.causal,
            **config_columns(config), kernel=ctx.study.kernel_name, pass_=ctx.study.pass_, status=str(status),
            stage=str(stage), reason=reason, **error_columns(measured), ms=ms,
            host_us=measured.host_us if measured else None, timer=measured.timer if measured else None,
            clock_mhz=measured.mhz if measured else None, cycles=cycles(ms, measured.mhz) if measured else None,
            tflops=flops / ms * 1e-9 if ms else None, flash_ms=flash, cudnn_ms=cudnn,
            pct_flash=100 * flash / ms if ms and flash else None, pct_cudnn=100 * cudnn / ms if ms and cudnn else None,
            check_s=outcome.check_s if outcome else None, time_s=outcome.time_s if outcome else None,
            **(ctx.device if outcome else {}), **fields))
    return rows


def copied_rows(rows: list[Result], config, run_id: int, reason: str, trial_number: int | None,
                fields: dict) -> list[Result]:
    """Rows for a config whose binary was already timed under another config (whose edge shapes,
    left unchecked there, stay so: the reason says it)."""
    copies = []
    for row in rows:
        values = {c.name: getattr(row, c.name) for c in Result.__table__.columns if c.name != "id"}
        values.update(fields)
        values.update(**config_columns(config), run_id=run_id, optuna_trial=trial_number,
                      reason=reason if edges_checked(row) else f"{row.reason}; {reason}",
                      created_at=now(), check_s=0.0, time_s=0.0)
        copies.append(Result(**values))
    return copies


def baseline_rows(run_id: int, baselines: dict[str, dict], phase: str, device: dict | None = None) -> list[Baseline]:
    where = {k: v for k, v in (device or {}).items() if k in ("device_index", "device_uuid")}
    return [Baseline(run_id=run_id, shape=label, phase=phase, **times, **where) for label, times in baselines.items()]


def objective(rows: list[Result], metric: str) -> float:
    """The value told to Optuna: a geometric mean over shapes of the metric, 0 if not timed."""
    if not rows or any(r.status != Status.TIMED for r in rows):
        return 0.0
    column = METRIC_COLUMNS[metric]
    values = [getattr(r, column) for r in rows]
    if any(v is None or v <= 0 for v in values):
        return 0.0
    scale = 100.0 if column.startswith("pct") else 1.0
    return math.exp(sum(math.log(v / scale) for v in values) / len(values))


def by_config(rows: list[Result]) -> dict[str, list[Result]]:
    grouped: dict[str, list[Result]] = {}
    for row in rows:
        grouped.setdefault(row.config, []).append(row)
    return grouped


def fully_timed(rows: list[Result]) -> dict[str, list[Result]]:
    """Configs timed on every shape present in ``rows`` that passed the whole gate (a config timed on
    some shapes only, or whose edge shapes were left unchecked, is left out)."""
    shapes = {r.shape for r in rows}
    return {key: rs for key, rs in by_config(rows).items() if {r.shape for r in rs} == shapes
            and all(r.status == Status.TIMED and r.ms and edges_checked(r) for r in rs)}


def best_times(rows: list[Result]) -> dict[str, float]:
    """Shape label -> the best time any config reached on it."""
    best: dict[str, float] = {}
    for row in rows:
        if row.status == Status.TIMED and row.ms:
            best[row.shape] = min(best.get(row.shape, math.inf), row.ms)
    return best


def scores(rows: list[Result]) -> dict[str, float]:
    """Config key -> geometric mean over shapes of (best time for the shape / its time), for
    configs timed on every shape; 1.0 would be the best on every shape."""
    best = best_times(rows)
    return {key: math.exp(sum(math.log(best[r.shape] / r.ms) for r in rs) / len(rs))
            for key, rs in fully_timed(rows).items()}


def timed_on(rows: list[Result], shape: str, eligible=None) -> list[Result]:
    """A shape's timed rows that passed the whole gate (:func:`tuner.gate.edges_checked`): what a
    winner or a finalist is chosen from; ``eligible``, if given, the config keys allowed."""
    return [r for r in rows if r.shape == shape and r.status == Status.TIMED and r.ms and edges_checked(r)
            and (eligible is None or r.config in eligible)]


def fastest_first(timed: list[Result]) -> list[Result]:
    """Timed rows best first: by cycles where every one of them has its clock (:mod:`kernel.measure.clock`),
    so a row timed while the clock was high does not beat one timed while it was low; else by ms."""
    if timed and all(r.cycles for r in timed):       # ties keep the rows' order (a binary's twins tie)
        return sorted(timed, key=lambda r: r.cycles)
    return sorted(timed, key=lambda r: r.ms)


WARM_PER_GROUP, WARM_MOST = 3, 8


def pick_warm(rows: list[Result], study: Study, target: GpuSpec, per_group: int = WARM_PER_GROUP,
              most: int = WARM_MOST) -> list:
    """From timed rows of related studies, the configs to try first: each (study, target, GPU, shape)'s
    ``per_group`` best (more where there are fewer than ``most / per_group`` groups; by
    :func:`fastest_first`), their firsts first, then their seconds, and so on;
    only those the study's space holds and the budget lets launch on ``target``; at most ``most``."""
    from tuner.pre_gpu_stages import budget_stage

    groups: dict[tuple, list[Result]] = {}
    for row in rows:
        groups.setdefault((row.study, row.target, row.gpu, row.shape), []).append(row)
    per_group = max(per_group, most // max(1, len(groups)))      # few related groups: deeper into each
    ranked = [fastest_first(group)[:per_group] for _, group in sorted(groups.items())]
    chosen: dict[str, object] = {}
    for rank in range(per_group):
        for best in ranked:
            if rank < len(best) and best[rank].config not in chosen and len(chosen) < most:
                config = study.kernel.config_type.parse(best[rank].config)
                if budget_stage(config, study, target) is None:
                    chosen[best[rank].config] = config
    return list(chosen.values())


def warm_configs(store, study: Study, target: GpuSpec, gpu: str) -> tuple:
    """The best configs the store holds for studies related to this one (the same kernel, pass and head
    dims; another study, N, target or GPU), for a new Optuna study to try first (:func:`pick_warm`)."""
    rows = store.timed_results(study.kernel_name, study.pass_, sorted({s.head_dim for s in study.shapes}))
    return tuple(pick_warm([r for r in rows if (r.study, r.target, r.gpu) != (study.name, target.name, gpu)],
                           study, target))


def best_across_shapes(rows: list[Result]) -> str | None:
    """The config with the best :func:`scores` (None when no config was timed on every shape)."""
    overall = scores(rows)
    return max(overall, key=overall.get) if overall else None

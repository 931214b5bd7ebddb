"""The tables: SQLAlchemy 2.0 typed ORM models, all prefixed ``fa2_`` so that Optuna's own
tables (its RDB storage is pointed at the same URL) sit beside them."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Boolean, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

TABLES = ("fa2_runs", "fa2_results")     # a store has these; Optuna's tables alone are not one
CONFIG_KEY_LENGTH = 128                  # config keys: a kernel with many knobs writes long ones


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class StudyRecord(Base):
    """A study name, and the fingerprint of the definition stored under it."""

    __tablename__ = "fa2_studies"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=now)


class Run(Base):
    """One invocation of ``python -m tuner.sweep``."""

    __tablename__ = "fa2_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    study: Mapped[str] = mapped_column(String(128), index=True)
    target: Mapped[str] = mapped_column(String(16))
    gpu: Mapped[str] = mapped_column(String(128))              # the device used, or "none"
    sampler: Mapped[str] = mapped_column(String(16))
    command: Mapped[str] = mapped_column(Text)
    kernel: Mapped[str | None] = mapped_column(String(128))     # the study's kernel and pass (NULL: the Triton forward)
    pass_: Mapped[str | None] = mapped_column(String(16))
    torch_version: Mapped[str] = mapped_column(String(64))
    triton_version: Mapped[str] = mapped_column(String(64))
    driver: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[dt.datetime] = mapped_column(DateTime, default=now)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    # running, finished, budget-only, failed, interrupted (Ctrl-C, or its process found gone: tuner.store._runs)
    status: Mapped[str] = mapped_column(String(32), default="running")
    # who runs it, and when it last said so (NULL in rows of an fa2-tuner before these columns)
    host: Mapped[str | None] = mapped_column(String(255))
    pid: Mapped[int | None] = mapped_column(Integer)
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column(DateTime)


class Baseline(Base):
    """PyTorch SDPA on one shape, measured in one run (the denominator of every ratio)."""

    __tablename__ = "fa2_baselines"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("fa2_runs.id"), index=True)
    shape: Mapped[str] = mapped_column(String(96))
    phase: Mapped[str | None] = mapped_column(String(8), default="start")   # start, or end (drift check)
    flash_ms: Mapped[float | None] = mapped_column(Float)
    cudnn_ms: Mapped[float | None] = mapped_column(Float)
    flash_host_us: Mapped[float | None] = mapped_column(Float)
    cudnn_host_us: Mapped[float | None] = mapped_column(Float)
    timer: Mapped[str | None] = mapped_column(String(16))       # cuda_graph, do_bench or wall_clock
    device_index: Mapped[int | None] = mapped_column(Integer)   # which of the host's GPUs measured it
    device_uuid: Mapped[str | None] = mapped_column(String(64))
    measured_at: Mapped[dt.datetime] = mapped_column(DateTime, default=now)


class Result(Base):
    """One config on one shape of one study, for one target on one GPU."""

    __tablename__ = "fa2_results"
    __table_args__ = (UniqueConstraint("study", "target", "gpu", "shape", "config"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("fa2_runs.id"), index=True)
    optuna_trial: Mapped[int | None] = mapped_column(Integer)
    # where: the study, the target budget, the GPU that ran it, and its software
    study: Mapped[str] = mapped_column(String(128), index=True)
    target: Mapped[str] = mapped_column(String(16))
    gpu: Mapped[str] = mapped_column(String(128))
    torch_version: Mapped[str] = mapped_column(String(64))
    triton_version: Mapped[str] = mapped_column(String(64))
    driver: Mapped[str] = mapped_column(String(64))
    # the shape
    shape: Mapped[str] = mapped_column(String(96))
    batch: Mapped[int] = mapped_column(Integer)
    heads: Mapped[int] = mapped_column(Integer)
    n_q: Mapped[int] = mapped_column(Integer)
    n_k: Mapped[int] = mapped_column(Integer)
    head_dim: Mapped[int] = mapped_column(Integer)
    dtype: Mapped[str] = mapped_column(String(8))
    causal: Mapped[bool] = mapped_column(Boolean)
    # the config
    config: Mapped[str] = mapped_column(String(CONFIG_KEY_LENGTH))
    # the kernel and its pass (tuner.kernels; NULL in rows stored before kernels had names: the Triton forward)
    kernel: Mapped[str | None] = mapped_column(String(128))
    pass_: Mapped[str | None] = mapped_column(String(16))
    # every field of the config, JSON (NULL in older rows: parse the key); the fields below have columns too
    params: Mapped[str | None] = mapped_column(Text)
    block_m: Mapped[int] = mapped_column(Integer)
    block_n: Mapped[int] = mapped_column(Integer)
    num_warps: Mapped[int] = mapped_column(Integer)
    num_stages: Mapped[int] = mapped_column(Integer)
    # the kernel's knobs (NULL in rows stored before they existed: all off)
    tma: Mapped[bool | None] = mapped_column(Boolean)
    warp_specialize: Mapped[bool | None] = mapped_column(Boolean)
    maxnreg: Mapped[int | None] = mapped_column(Integer)
    persistent: Mapped[int | None] = mapped_column(Integer)
    # outcome: a tuner.status.Status (TIMED, or the stage's rejection) and the tuner.status.Stage
    status: Mapped[str] = mapped_column(String(24), index=True)
    stage: Mapped[str] = mapped_column(String(16))             # the last stage reached
    reason: Mapped[str] = mapped_column(Text, default="")
    # budget (on the target) and compile (for the GPU used)
    budget_verdict: Mapped[str | None] = mapped_column(String(24))
    model_smem_bytes: Mapped[int | None] = mapped_column(Integer)
    smem_bytes: Mapped[int | None] = mapped_column(Integer)     # compiled for the target
    smem_limit_bytes: Mapped[int | None] = mapped_column(Integer)
    registers: Mapped[int | None] = mapped_column(Integer)
    spill_bytes: Mapped[int | None] = mapped_column(Integer)
    binary: Mapped[str | None] = mapped_column(String(64))     # hash of what the GPU ran
    # correctness on this shape and on the ragged gate shape
    err_out: Mapped[float | None] = mapped_column(Float)
    err_lse: Mapped[float | None] = mapped_column(Float)
    err_bound: Mapped[float | None] = mapped_column(Float)
    lse_bound: Mapped[float | None] = mapped_column(Float)
    ragged_err_out: Mapped[float | None] = mapped_column(Float)    # the worst of the gate shapes
    ragged_err_lse: Mapped[float | None] = mapped_column(Float)
    # every named error of the kernel's gate, JSON {name: {error, bound, gate}} (the columns above are the forward's)
    errors: Mapped[str | None] = mapped_column(Text)
    # timing, with SDPA measured in the same run: GPU time, and the host time of a call
    ms: Mapped[float | None] = mapped_column(Float)
    host_us: Mapped[float | None] = mapped_column(Float)
    timer: Mapped[str | None] = mapped_column(String(16))       # cuda_graph, do_bench or wall_clock
    tflops: Mapped[float | None] = mapped_column(Float)
    # the mean SM clock (NVML) while ``ms`` was timed, and cycles per call (ms x MHz x 1000); NULL without NVML
    clock_mhz: Mapped[float | None] = mapped_column(Float)
    cycles: Mapped[float | None] = mapped_column(Float)
    flash_ms: Mapped[float | None] = mapped_column(Float)
    cudnn_ms: Mapped[float | None] = mapped_column(Float)
    pct_flash: Mapped[float | None] = mapped_column(Float)
    pct_cudnn: Mapped[float | None] = mapped_column(Float)
    # the device that checked and timed it (one of several with --workers), and its host
    device_index: Mapped[int | None] = mapped_column(Integer)
    device_name: Mapped[str | None] = mapped_column(String(128))
    device_uuid: Mapped[str | None] = mapped_column(String(64))
    host: Mapped[str | None] = mapped_column(String(128))
    # where the trial's time went, seconds (for all its shapes together)
    check_s: Mapped[float | None] = mapped_column(Float)
    time_s: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=now)


class Finalist(Base):
    """One of a shape's best configs, re-timed with the others in interleaved rounds."""

    __tablename__ = "fa2_finalists"
    __table_args__ = (UniqueConstraint("study", "target", "gpu", "shape", "config"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("fa2_runs.id"), index=True)
    study: Mapped[str] = mapped_column(String(128), index=True)
    target: Mapped[str] = mapped_column(String(16))
    gpu: Mapped[str] = mapped_column(String(128))
    shape: Mapped[str] = mapped_column(String(96))
    config: Mapped[str] = mapped_column(String(CONFIG_KEY_LENGTH))
    rank: Mapped[int] = mapped_column(Integer)                  # 1: the winner (best median)
    rounds: Mapped[int] = mapped_column(Integer)
    median_ms: Mapped[float] = mapped_column(Float)
    min_ms: Mapped[float] = mapped_column(Float)
    max_ms: Mapped[float] = mapped_column(Float)
    spread: Mapped[float] = mapped_column(Float)                # (max - min) / median
    times: Mapped[str] = mapped_column(Text)                    # ms per round, JSON
    timer: Mapped[str | None] = mapped_column(String(16))
    # SDPA's backends timed in the same rounds, medians (the shape's, on each of its rows)
    flash_ms: Mapped[float | None] = mapped_column(Float)
    cudnn_ms: Mapped[float | None] = mapped_column(Float)
    # what decided (NULL in older rows: ms): one of kernel.measure.retime.PREFERENCE ("sustained",
    # "paired_cycles", "paired", "cycles", "sdpa_ratio", "ms"; at most 16 characters), and that figure per round, JSON;
    # the SM clock per round (JSON), its median and the median cycles; why the rounds stopped
    figure: Mapped[str | None] = mapped_column(String(16))
    figures: Mapped[str | None] = mapped_column(Text)
    clocks: Mapped[str | None] = mapped_column(Text)
    clock_mhz: Mapped[float | None] = mapped_column(Float)
    cycles: Mapped[float | None] = mapped_column(Float)
    stopped: Mapped[str | None] = mapped_column(String(16))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=now)


class Profile(Base):
    """Nsight Compute's counters for one launch of one kernel on one shape: one of our
    finalists (``kind`` "ours", with its ``config``) or an SDPA backend ("sdpa_flash",
    "sdpa_cudnn", ``config`` ""), profiled on the GPU that timed it.

    A row is written whole or not at all: ``status`` "ok" with every counter, or
    "failed" with the ``reason`` and no counters.
    """

    __tablename__ = "fa2_profiles"
    __table_args__ = (UniqueConstraint("study", "target", "gpu", "shape", "kind", "config"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study: Mapped[str] = mapped_column(String(128), index=True)
    target: Mapped[str] = mapped_column(String(16))
    gpu: Mapped[str] = mapped_column(String(128))
    shape: Mapped[str] = mapped_column(String(96))
    kind: Mapped[str] = mapped_column(String(16))               # ours, sdpa_flash or sdpa_cudnn
    kernel: Mapped[str | None] = mapped_column(String(128))     # the study's kernel and pass (NULL: the Triton forward)
    pass_: Mapped[str | None] = mapped_column(String(16))
    config: Mapped[str] = mapped_column(String(CONFIG_KEY_LENGTH), default="")
    rank: Mapped[int | None] = mapped_column(Integer)           # the config's place among the shape's best
    status: Mapped[str] = mapped_column(String(16))             # ok or failed
    reason: Mapped[str] = mapped_column(Text, default="")
    kernel_name: Mapped[str | None] = mapped_column(Text)
    # the counters (ncu --clock-control none, one launch after a warm-up one)
    duration_us: Mapped[float | None] = mapped_column(Float)
    tensor_pct: Mapped[float | None] = mapped_column(Float)     # tensor pipe active, % of peak
    sm_pct: Mapped[float | None] = mapped_column(Float)         # SM throughput, % of peak
    dram_pct: Mapped[float | None] = mapped_column(Float)       # DRAM throughput, % of peak
    dram_read_bytes: Mapped[float | None] = mapped_column(Float)
    dram_write_bytes: Mapped[float | None] = mapped_column(Float)
    l2_hit_pct: Mapped[float | None] = mapped_column(Float)
    warps_active_pct: Mapped[float | None] = mapped_column(Float)  # achieved occupancy
    registers: Mapped[int | None] = mapped_column(Integer)
    smem_bytes: Mapped[int | None] = mapped_column(Integer)     # per block, dynamic + static
    grid_size: Mapped[int | None] = mapped_column(Integer)
    block_size: Mapped[int | None] = mapped_column(Integer)
    sm_clock_mhz: Mapped[float | None] = mapped_column(Float)
    stalls: Mapped[str | None] = mapped_column(Text)            # top three [reason, warps per issue], JSON
    # where and with what
    ncu_version: Mapped[str | None] = mapped_column(String(64))
    torch_version: Mapped[str | None] = mapped_column(String(64))
    triton_version: Mapped[str | None] = mapped_column(String(64))
    driver: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=now)

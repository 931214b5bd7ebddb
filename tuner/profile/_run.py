"""Which kernels a profile takes (each shape's best configs, and SDPA beside them), taking
them one by one, and storing each as it finishes."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from tuner.counters import KIND_LABELS, display_order, verdict
from tuner.formatting import sweep_command
from tuner.profile._metrics import KernelCounters, ProfileError
from tuner.profile._ncu import CountersNotPermitted, Target, find_ncu, ncu_version, profile
from tuner.store import Profile, Store
from tuner.study import Study
from tuner.winners import ranked, verdicts_of

SDPA_KINDS = ("sdpa_flash", "sdpa_cudnn")


@dataclass(frozen=True)
class ProfileContext:
    """What every row of one profile run shares: where it is stored and with what it ran."""

    study: Study
    target: str                 # the budget target, sm_90 ...
    gpu_label: str              # the GPU that timed the configs and now profiles them
    versions: dict[str, str]    # ncu, torch, triton, driver


def best_configs(db: Store, ctx: ProfileContext, shape_label: str, top: int) -> list[str]:
    """The shape's ``top`` configs (:func:`tuner.winners.ranked`): its re-timed finalists by their
    verdict where there are any, else its timed configs by GPU time."""
    verdict = verdicts_of(db, ctx.study.name, ctx.target, ctx.gpu_label).get(shape_label)
    return ranked(db.results(ctx.study.name, ctx.target, ctx.gpu_label), shape_label, verdict, top)


def select_targets(db: Store, ctx: ProfileContext, top: int, shapes: list[str] | None = None) -> list[Target]:
    """Per shape (all of the study's, or those labelled in ``shapes``): its best ``top``
    configs, then SDPA's flash and cuDNN backends on the same inputs.

    Raises:
        ProfileError: no shape has a timed config (the sweep has not run on this GPU).
    """
    targets = []
    for shape in ctx.study.shapes:
        if shapes and shape.label not in shapes:
            continue
        keys = best_configs(db, ctx, shape.label, top)
        kernel = dict(kernel=ctx.study.kernel_name, pass_=ctx.study.pass_)
        targets += [Target("ours", shape, ctx.study.kernel.config_type.parse(key), rank, **kernel)
                    for rank, key in enumerate(keys, start=1)]
        if keys:
            targets += [Target(kind, shape, **kernel) for kind in SDPA_KINDS]
    if not targets:
        raise ProfileError(f"{ctx.study.name} has no timed config for target {ctx.target} on {ctx.gpu_label}; "
                           f"run {sweep_command(ctx.study, ctx.target, db.url)} on this GPU first")
    return targets


def profile_row(ctx: ProfileContext, target: Target, counters: KernelCounters | None, reason: str = "") -> Profile:
    """The whole row of one target: every counter, or none and the reason."""
    row = Profile(study=ctx.study.name, target=ctx.target, gpu=ctx.gpu_label, shape=target.shape.label,
                  kernel=target.kernel, pass_=target.pass_,
                  kind=target.kind, config=target.config.key if target.config else "", rank=target.rank,
                  status="ok" if counters else "failed", reason=reason, ncu_version=ctx.versions.get("ncu"),
                  torch_version=ctx.versions.get("torch"), triton_version=ctx.versions.get("triton"),
                  driver=ctx.versions.get("driver"))
    if counters is None:
        return row
    values = counters.values
    for field in ("duration_us", "tensor_pct", "sm_pct", "dram_pct", "dram_read_bytes", "dram_write_bytes",
                  "l2_hit_pct", "warps_active_pct", "sm_clock_mhz"):
        setattr(row, field, values[field])
    for field in ("registers", "grid_size", "block_size"):
        setattr(row, field, int(values[field]))
    row.smem_bytes = int(values["smem_dynamic_bytes"] + values["smem_static_bytes"])
    row.kernel_name = counters.kernel_name
    row.stalls = json.dumps([[name, round(value, 3)] for name, value in counters.top_stalls(3)])
    return row


def profile_targets(db: Store, ctx: ProfileContext, targets: list[Target], ncu: str, timeout_s: float = 300.0,
                    say: Callable[[str], None] = print) -> list[Profile]:
    """Profile each target and commit its row before the next starts.

    A target that fails is stored as a "failed" row with the reason, and the run goes on.

    Raises:
        CountersNotPermitted: ncu may not read the counters; nothing further is tried.
    """
    rows = []
    for number, target in enumerate(targets, start=1):
        try:
            row = profile_row(ctx, target, profile(ncu, target, timeout_s))
        except CountersNotPermitted:
            raise
        except ProfileError as exc:
            row = profile_row(ctx, target, None, str(exc))
        db.replace_profile(row)
        rows.append(row)
        detail = (f"{row.duration_us:.1f} µs, tensor pipe {row.tensor_pct:.0f}%, warps active "
                  f"{row.warps_active_pct:.0f}%" if row.status == "ok" else f"failed: {row.reason}")
        say(f"[{number}/{len(targets)}] {target.label}: {detail}")
    return rows


def verdict_lines(rows: list[Profile]) -> list[str]:
    """Per shape, one line per profiled kernel, each against the shape's cuDNN profile."""
    lines = []
    for shape in dict.fromkeys(r.shape for r in rows):
        of_shape = sorted((r for r in rows if r.shape == shape), key=display_order)
        cudnn = next((r for r in of_shape if r.kind == "sdpa_cudnn" and r.status == "ok"), None)
        lines.append(shape)
        for row in of_shape:
            name = row.config if row.kind == "ours" else KIND_LABELS[row.kind]
            lines.append(f"  {name:>14}: {verdict(row, cudnn if row.kind != 'sdpa_cudnn' else None)}")
    return lines


def profile_study(db: Store, study: Study, target: str, gpu_label: str, top: int = 3,
                  shapes: list[str] | None = None, ncu: str | None = None, timeout_s: float = 300.0,
                  say: Callable[[str], None] = print) -> list[Profile]:
    """Profile each shape's best ``top`` configs and SDPA beside them, storing each row.

    Raises:
        NcuMissing: no ncu (checked first, before anything is selected or run).
        CountersNotPermitted, ProfileError: as :func:`profile_targets` and :func:`select_targets`.
    """
    from kernel.measure.timing import environment

    binary = find_ncu(ncu)
    env = environment()
    versions = {"ncu": ncu_version(binary), "torch": env["torch"], "triton": env["triton"], "driver": env["driver"]}
    ctx = ProfileContext(study, target, gpu_label, versions)
    targets = select_targets(db, ctx, top, shapes)
    say(f"profiling {len(targets)} kernels with ncu {versions['ncu']} ({binary}) on {gpu_label}")
    return profile_targets(db, ctx, targets, binary, timeout_s, say)

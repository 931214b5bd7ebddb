"""``python -m tuner.emit --verify``: does ``@triton.autotune`` pick well from an emitted list?

For each shape of the study the kernel under ``@triton.autotune`` (its own entry point,
:meth:`tuner.kernels.TunableKernel.autotuned`) tunes on its first call; the config it
picked and the shape's winner (:mod:`tuner.winners`) are then timed side by side the same
way (GPU time by graph replay), so the ratio compares configs, not call paths.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tuner.finalists import ShapeVerdict
from tuner.store import Result
from tuner.study import Study
from tuner.winners import winner

BAR = 1.03      # the picked config may be at most 3% slower than the sweep's best


def _load(path: Path):
    spec = importlib.util.spec_from_file_location("emitted_configs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verify(path: Path, study: Study, rows: list[Result], markdown: Path,
           verdicts: dict[str, ShapeVerdict] | None = None) -> int:
    """Time autotune's pick from the list at ``path`` against each shape's winner among ``rows``
    (one GPU's) and ``verdicts`` (the shapes' finalists); write a markdown table; 0 if within :data:`BAR`."""
    import torch

    from kernel.measure.timing import environment, environment_line, gpu_time, warm_gpu

    if not torch.cuda.is_available():
        print("--verify needs a CUDA GPU", file=sys.stderr)
        return 1
    kernel, module = study.kernel, _load(path)
    tune = kernel.triton.autotune(module.CONFIGS, module.KEY)
    env = environment()
    warm_gpu()
    lines = [environment_line(env), f"List: {path} ({len(module.CONFIGS)} configs)", "",
             "| shape | sweep's best | its ms | autotune picked | its ms | picked / best |",
             "|---|---|---|---|---|---|"]
    worst = 0.0
    for shape in study.shapes:
        best = kernel.config_type.parse(winner(rows, shape.label, (verdicts or {}).get(shape.label)))
        tensors = kernel.inputs(shape, "cuda")
        picked = tune(tensors, shape)                      # the first call tunes
        times = {c: gpu_time([kernel.call(c, tensors, shape)]).ms for c in {best, picked}}
        ratio = times[picked] / times[best]
        worst = max(worst, ratio)
        lines.append(f"| {shape.label} | {best.key} | {times[best]:.4f} | {picked.key} | {times[picked]:.4f} | "
                     f"{ratio:.3f} |")
    lines += ["", f"Worst picked / best: {worst:.3f} (bar: at most {BAR})."]
    text = "\n".join(lines)
    print(text)
    markdown.parent.mkdir(parents=True, exist_ok=True)
    markdown.write_text(text + "\n")
    return 0 if worst <= BAR else 1

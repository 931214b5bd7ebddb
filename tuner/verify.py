"""``python -m tuner.emit --verify``: does ``@triton.autotune`` pick well from an emitted list?

For each shape of the study the autotuned entry point tunes on its first call; the
config it picked and the sweep's best for the shape are then timed side by side the
same way (GPU time by graph replay), so the ratio compares configs, not call paths.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tuner.space import Config
from tuner.status import Status
from tuner.store import Result
from tuner.study import Study

BAR = 1.03      # the picked config may be at most 3% slower than the sweep's best


def verify(path: Path, study: Study, rows: list[Result], markdown: Path, winners: dict[str, str] | None = None) -> int:
    """``winners``: shape label -> the finalists' winner, where they were re-timed (else the fastest row)."""
    import torch

    from kernel import flash_attn_fwd
    from kernel.autotuned import AutotunedFlashAttention
    from kernel.timing import environment, environment_line, gpu_time, warm_gpu

    if not torch.cuda.is_available():
        print("--verify needs a CUDA GPU", file=sys.stderr)
        return 1
    spec = importlib.util.spec_from_file_location("emitted_configs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    autotuned = AutotunedFlashAttention(module.CONFIGS, module.KEY)
    env = environment()
    warm_gpu()
    lines = [environment_line(env), f"List: {path} ({len(module.CONFIGS)} configs)", "",
             "| shape | sweep's best | its ms | autotune picked | its ms | picked / best |",
             "|---|---|---|---|---|---|"]
    worst = 0.0
    for shape in study.shapes:
        shape_rows = [r for r in rows if r.shape == shape.label and r.status == Status.TIMED]
        best = Config.parse((winners or {}).get(shape.label) or min(shape_rows, key=lambda r: r.ms).config)
        q, k, v = (torch.randn(shape.batch, shape.heads, n, shape.head_dim, device="cuda", dtype=shape.torch_dtype)
                   for n in (shape.n_q, shape.n_k, shape.n_k))
        out, lse = torch.empty_like(q), torch.empty(q.shape[:-1], device="cuda", dtype=torch.float32)
        autotuned(q, k, v, shape.causal, out=out, lse=lse)        # the first call tunes
        chosen = autotuned.kernel.best_config
        picked = Config.from_triton(chosen)
        times = {c: gpu_time([lambda c=c: flash_attn_fwd(q, k, v, shape.causal, **c.as_kwargs(), out=out,
                                                         lse=lse)]).ms for c in {best, picked}}
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

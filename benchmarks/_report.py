"""Where a benchmark's results go besides stdout: its Markdown table, and its raw rows as JSON."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable


def first_line(exc: BaseException, width: int = 160) -> str:
    """A failure as a table note: its type and its last non-empty line (where Python and Triton put
    the message), at most ``width`` characters."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:width]


def settle() -> None:
    """Let a failed call's work finish; after a device fault the context is gone and every later
    call fails too, each reported the same way, but the run still ends with its table."""
    import torch

    with contextlib.suppress(Exception):   # the fault was reported with the call that caused it
        torch.cuda.synchronize()


def write_report(markdown: str | None, text: str, json_path: str | None = None, payload: object = None,
                 default: Callable[[object], object] | None = None) -> None:
    """``text`` to ``markdown`` and ``payload`` to ``json_path`` (``default`` as ``json.dump``'s),
    each only where a path is given."""
    if markdown:
        with open(markdown, "w") as handle:
            handle.write(text)
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(payload, handle, indent=1, default=default)


def host_report(host_row: Callable[[int, int, bool], dict], host_table: Callable[[list, str], str], lengths,
                head_dims, causals, markdown: str | None) -> list[dict]:
    """The host-µs benchmarks' run (``gluon_host``, ``bwd_gluon_host``): ``host_row(n, head_dim, causal)``
    for every case asked, a line each as it is measured, then ``host_table(rows, environment line)``
    printed and written to ``markdown``. Returns the rows (each benchmark judges its own)."""
    from kernel.measure.timing import environment, environment_line, warm_gpu

    env = environment()
    warm_gpu()
    rows = []
    for n in lengths:
        for head_dim in head_dims:
            for causal in causals:
                rows.append(host_row(n, head_dim, causal))
                print(f"N={n} D={head_dim} causal={causal}: " + ", ".join(
                    f"{name} {us:.1f} µs" for name, us in rows[-1]["host_us"].items()), flush=True)
    text = host_table(rows, environment_line(env))
    print(text)
    write_report(markdown, text + "\n")
    return rows

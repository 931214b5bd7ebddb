"""Host µs per call of each launch path of the forward at short lengths, and the GPU ms: what the
route's bound (``kernel.route.ROUTE_MIN_FLOPS``) is to be set from.

    python -m benchmarks.gluon --host                     # B4 H8 N512, D 64 and 128, causal and not
    python -m benchmarks.gluon --host --host-n 256 --host-n 1024 --markdown docs/results/x.md

Every path is called with preallocated ``out`` and ``lse`` (as a loop over layers would call it);
host µs by :func:`kernel.measure.timing.host_us` (100 calls enqueued back to back before one synchronise,
the median of 5 such batches):

* ``triton``: ``flash_attn_fwd`` with the Triton kernel's default config named (its launch plan);
* ``default``: the default call ``flash_attn_fwd(q, k, v, causal)``, routed as now;
* ``routed``: the default call with the route's bound at 0, where :data:`~kernel.route.GLUON_ROUTES`
  routes this (D, causal): the Triton plan's key, then the Gluon launch plan (what a lower bound gives);
* ``gluon_jit``: ``flash_attn_fwd_gluon_jit``: checks, descriptors and the Gluon JIT on every call
  (the launcher before plans);
* ``gluon_plan``: ``flash_attn_fwd_gluon``: its plan's key, then the compiled kernel launched directly,
  each descriptor's CUtensorMap kept per pointer (the plan's mode is shown: ``maps``);
* ``gluon_rebuilt``: that plan with descriptors rebuilt on every call (``cache_maps=False``), called
  without a key: what keeping the maps saves.

The Gluon rows run the variant ``GLUON_ROUTES`` names for (D, causal), else ``ws``. Before a path is
timed its output is compared with the JIT path's, bit for bit. GPU ms by :func:`kernel.measure.timing.gpu_time`
(CUDA-graph replay over input sets past the L2) for the Triton kernel at its default config and for
the Gluon variant. Imports nothing from ``benchmarks.gluon`` (which runs this for ``--host``).
"""

from __future__ import annotations

import contextlib
import sys

import torch

from benchmarks._report import first_line

SHAPE = dict(batch=4, heads=8)
LENGTHS = (512,)
PATHS = ("triton", "default", "routed", "gluon_jit", "gluon_plan", "gluon_rebuilt")


def _input_set(n: int, head_dim: int) -> tuple:
    q, k, v = (torch.randn(SHAPE["batch"], SHAPE["heads"], n, head_dim, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    return q, k, v, torch.empty_like(q), torch.empty(q.shape[:-1], device="cuda", dtype=torch.float32)


@contextlib.contextmanager
def forced_route():
    """The default call routed at any size (the bound at 0), with no plan made before or kept after."""
    import kernel.route as route
    from kernel.triton.launch import PLANS

    bound = route.ROUTE_MIN_FLOPS
    route.ROUTE_MIN_FLOPS = 0
    PLANS.clear()
    try:
        yield
    finally:
        route.ROUTE_MIN_FLOPS = bound
        PLANS.clear()


def path_calls(s: tuple, head_dim: int, causal: bool, variant: str) -> dict:
    """name -> a call of that path on input set ``s`` (``routed`` must run inside :func:`forced_route`)."""
    from kernel import default_config, flash_attn_fwd
    from kernel.gluon.fwd.launch import checked_plan, flash_attn_fwd_gluon, flash_attn_fwd_gluon_jit

    q, k, v, out, lse = s
    rebuilt = checked_plan(q, k, v, causal, variant, None, out, lse, cache_maps=False)
    triton_config = default_config(head_dim, causal)
    return {
        "triton": lambda: flash_attn_fwd(q, k, v, causal, **triton_config, out=out, lse=lse),
        "default": lambda: flash_attn_fwd(q, k, v, causal, out=out, lse=lse),
        "routed": lambda: flash_attn_fwd(q, k, v, causal, out=out, lse=lse),
        "gluon_jit": lambda: flash_attn_fwd_gluon_jit(q, k, v, causal, variant=variant, out=out, lse=lse),
        "gluon_plan": lambda: flash_attn_fwd_gluon(q, k, v, causal, variant=variant, out=out, lse=lse),
        "gluon_rebuilt": lambda: rebuilt(q, k, v, out, lse),
    }


def _output_of(call, s: tuple) -> tuple:
    s[3].fill_(float("nan"))
    s[4].fill_(float("nan"))
    call()
    torch.cuda.synchronize()
    return s[3].clone(), s[4].clone()


def _host(row: dict, name: str, call, s: tuple, reference) -> None:
    """Host µs of one path into ``row``, after its output is checked against the JIT path's."""
    from kernel.measure.timing import host_us

    try:
        if reference is not None and name in ("routed", "gluon_plan", "gluon_rebuilt"):
            out, lse = _output_of(call, s)
            row["bit_equal"][name] = bool(torch.equal(out, reference[0]) and torch.equal(lse, reference[1]))
        row["host_us"][name] = host_us(call)
    except Exception as exc:  # reported: one path failing leaves the others
        row["notes"][name] = first_line(exc)


def _gpu_ms(row: dict, n: int, head_dim: int, causal: bool, variant: str) -> None:
    """GPU ms of the Triton kernel (its default config) and of the Gluon variant, over sets past the L2."""
    from kernel import default_config, flash_attn_fwd
    from kernel.gluon.fwd.launch import flash_attn_fwd_gluon
    from kernel.measure.timing import gpu_time, input_sets

    per_set = 4 * SHAPE["batch"] * SHAPE["heads"] * n * head_dim * 2          # q, k, v, out in bf16
    sets = [_input_set(n, head_dim) for _ in range(input_sets(per_set))]
    config = default_config(head_dim, causal)
    for name, call in (("triton", lambda s: flash_attn_fwd(*s[:3], causal, **config, out=s[3], lse=s[4])),
                       ("gluon", lambda s: flash_attn_fwd_gluon(*s[:3], causal, variant=variant, out=s[3], lse=s[4]))):
        try:
            row["gpu_ms"][name] = gpu_time([lambda s=s, call=call: call(s) for s in sets]).ms
        except Exception as exc:  # reported, as above
            row["notes"][f"gpu {name}"] = first_line(exc)


def host_row(n: int, head_dim: int, causal: bool) -> dict:
    """Every path's host µs, the GPU ms and the checks at B4 H8 N ``n``."""
    import kernel.route as route
    from kernel.gluon.fwd.launch import KNOB_NAMES, plan_for

    routes = route.default_variant(head_dim, causal) is not None
    variant = route.GLUON_ROUTES.get((head_dim, causal), "ws")
    s = _input_set(n, head_dim)
    row = dict(n=n, D=head_dim, causal=causal, variant=variant, host_us={}, gpu_ms={}, bit_equal={}, notes={},
               work=route.attention_work(s[0], s[1], causal))       # in the units of ROUTE_MIN_FLOPS
    calls = path_calls(s, head_dim, causal, variant)
    reference = None
    try:
        reference = _output_of(calls["gluon_jit"], s)
    except Exception as exc:  # the JIT path failing: the Gluon rows are reported unchecked
        row["notes"]["gluon_jit"] = first_line(exc)
    for name in PATHS:
        if name == "routed":
            if not routes:
                row["notes"]["routed"] = f"GLUON_ROUTES does not route D={head_dim}{' causal' if causal else ''}"
                continue
            with forced_route():
                _host(row, name, calls[name], s, reference)
        else:
            _host(row, name, calls[name], s, reference)
    with contextlib.suppress(Exception):       # the plan's mode: how its calls launched
        row["plan_mode"] = plan_for(*s[:3], causal, variant, dict.fromkeys(KNOB_NAMES), s[3], s[4]).mode
    _gpu_ms(row, n, head_dim, causal, variant)
    return row


def host_table(rows: list, env_line: str) -> str:
    """Markdown: per shape, every path's host µs, the plan's mode, the bit checks and the GPU ms."""
    from kernel.route import ROUTE_MIN_FLOPS

    header = (f"bf16, B{SHAPE['batch']} H{SHAPE['heads']}; host µs per call (benchmarks/gluon_host.py says what each "
              f"path is); work: 4·B·H·N²·D, halved when causal; the route's bound now: ROUTE_MIN_FLOPS = "
              f"{ROUTE_MIN_FLOPS:.3g}.")
    columns = ["N", "D", "causal", "work (FLOPs)", *PATHS, "plan mode", "bit-equal to the JIT", "GPU ms triton",
               "GPU ms gluon", "notes"]
    lines = [env_line, "", header, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        us = [f"{r['host_us'][name]:.1f}" if name in r["host_us"] else "n/a" for name in PATHS]
        ms = [f"{r['gpu_ms'][name]:.4f}" if name in r["gpu_ms"] else "n/a" for name in ("triton", "gluon")]
        equal = ", ".join(f"{name} {'yes' if ok else 'NO'}" for name, ok in r["bit_equal"].items()) or "n/a"
        notes = "; ".join(f"{name}: {note}" for name, note in r["notes"].items())
        lines.append(f"| {r['n']} | {r['D']} | {'yes' if r['causal'] else 'no'} | {r['work']:.3g} | "
                     + " | ".join(us) + f" | {r.get('plan_mode')} | {equal} | {ms[0]} | {ms[1]} | {notes} |")
    return "\n".join(lines)


def run_host(head_dims=None, causals=(False, True), lengths=None, markdown: str | None = None) -> int:
    """The table for every (N, D, causal) asked; 1 if a Gluon path's output was not the JIT path's."""
    from benchmarks._report import host_report

    rows = host_report(host_row, host_table, lengths or LENGTHS, head_dims or (64, 128), causals, markdown)
    return int(any(not ok for r in rows for ok in r["bit_equal"].values()))


if __name__ == "__main__":
    print("benchmarks.gluon_host is run by `python -m benchmarks.gluon --host` (see its --help), on a CUDA GPU",
          file=sys.stderr)
    sys.exit(2)

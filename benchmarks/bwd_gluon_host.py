"""Host µs per backward call at a short length: the Gluon backward's launch plan against its JIT path,
the Triton backward and SDPA's backward, same run (``python -m benchmarks.bwd_gluon --host``).

    python -m benchmarks.bwd_gluon --host                       # B4 H8 N512 bf16, D 64 and 128, causal and not
    python -m benchmarks.bwd_gluon --host --host-n 1024 --head-dim 128 --markdown docs/results/x.md

Paths, each allocating its gradients as a user's call does (``gluon_plan_given``: into preallocated
ones); host µs by :func:`kernel.measure.timing.host_us_together` (batches of 100 calls enqueued back to back
before one synchronise, the paths' batches interleaved, the median of 15 each; SDPA's under its
backend's pin):

* ``triton``: the Triton backward at its default config, named (``config=kernel.default_bwd_config(...)``);
* ``default``: the default call ``kernel.flash_attn_bwd(dout, q, k, v, out, lse, causal)`` (on Hopper with
  Triton 3.6 the Gluon route: the Triton plan's key, then the Gluon plan);
* ``gluon_jit``: ``flash_attn_bwd_gluon_jit``: every check, seven descriptors and three JIT launches per call;
* ``gluon_plan``: ``flash_attn_bwd_gluon``: its plan's key, then the three kernels launched directly;
* ``gluon_plan_given``: the same into preallocated dq, dk, dv (the overlap check runs, no allocation);
* ``flash``, ``cudnn``: SDPA's backward pinned to that backend (``torch.autograd.grad`` of its forward).

Before timing, the plan's gradients are compared with the JIT path's: dK and dV bit for bit, dQ
within one bf16 ulp (its fp32 TMA reduce-adds run in no fixed order); a mismatch exits 1.
"""

from __future__ import annotations

import contextlib
import sys

import torch

from benchmarks._report import first_line

SHAPE = dict(batch=4, heads=8)
PATHS = ("triton", "default", "gluon_jit", "gluon_plan", "gluon_plan_given", "flash", "cudnn")


def _calls(s: dict, causal: bool) -> dict:
    from kernel import default_bwd_config, flash_attn_bwd
    from kernel.gluon.bwd.launch import flash_attn_bwd_gluon, flash_attn_bwd_gluon_jit

    args = (s["q"], s["k"], s["v"], s["out"], s["lse"], s["dout"], causal)
    given = dict(zip(("dq", "dk", "dv"), (torch.empty_like(s[name]) for name in ("q", "k", "v"))))
    config = default_bwd_config(s["q"].shape[-1], causal)
    user = (s["dout"], s["q"], s["k"], s["v"], s["out"], s["lse"], causal)
    return {"triton": lambda: flash_attn_bwd(*user, config=config), "default": lambda: flash_attn_bwd(*user),
            "gluon_jit": lambda: flash_attn_bwd_gluon_jit(*args),
            "gluon_plan": lambda: flash_attn_bwd_gluon(*args),
            "gluon_plan_given": lambda: flash_attn_bwd_gluon(*args, **given)}


def _agree(ours, ref) -> bool:
    """dK and dV bit for bit, dQ within one bf16 ulp of the JIT path's (and nothing left NaN)."""
    dq, ref_dq = ours[0].float(), ref[0].float()
    close = bool(((dq - ref_dq).abs() <= ref_dq.abs() * 2 ** -7 + 1e-4 * float(ref_dq.abs().max())).all())
    return close and all(torch.equal(g, r) for g, r in zip(ours[1:], ref[1:])) and not any(
        g.isnan().any() for g in ours)


def host_row(n: int, head_dim: int, causal: bool) -> dict:
    """Every path's host µs at B4 H8 N ``n``, after the plan's check against the JIT path."""
    from benchmarks.bwd import make_sets
    from kernel.gluon.bwd.launch import KNOB_NAMES, plan_for
    from kernel.measure.timing import host_us_together, runs
    from tuner.kernels.triton_bwd import KERNEL as BACKWARD
    from tuner.problem import Problem

    problem = Problem(batch=SHAPE["batch"], heads=SHAPE["heads"], n_q=n, n_k=n, head_dim=head_dim, dtype="bf16",
                      causal=causal)
    s = make_sets(problem)[0]
    row = dict(n=n, D=head_dim, causal=causal, host_us={}, notes={}, agrees=None)
    calls = _calls(s, causal)
    try:
        ref = calls["gluon_jit"]()
        row["agrees"] = _agree(calls["gluon_plan"](), ref) and _agree(calls["gluon_plan"](), ref)
        torch.cuda.synchronize()
    except Exception as exc:  # reported: the Triton and SDPA rows still run
        row["notes"]["gluon"] = first_line(exc)
    pins = {}
    for name, call in list(calls.items()):
        try:
            call()
        except Exception as exc:  # one path failing leaves the others
            row["notes"][name] = first_line(exc)
            del calls[name]
    for backend, (pin, sdpa_calls) in BACKWARD.baselines([s], problem).items():
        if runs((pin, sdpa_calls)):
            calls[backend], pins[backend] = sdpa_calls[0], pin
        else:
            row["notes"][backend] = "refuses this shape"
    row["host_us"] = host_us_together(calls, pins)
    with contextlib.suppress(Exception):       # how the plan's calls launched
        row["plan_mode"] = plan_for(s["q"], s["k"], s["v"], s["out"], s["lse"], s["dout"], causal,
                                    dict.fromkeys(KNOB_NAMES)).mode
    return row


def host_table(rows: list, env_line: str) -> str:
    columns = ["N", "D", "causal", *PATHS, "plan mode", "plan = JIT path", "plan / cuDNN", "default / cuDNN", "notes"]
    lines = [env_line, "", f"bf16, B{SHAPE['batch']} H{SHAPE['heads']}; host µs per backward call "
             "(benchmarks/bwd_gluon_host.py says what each path is).", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        us = r["host_us"]
        cells = [f"{us[name]:.1f}" if name in us else "n/a" for name in PATHS]
        ratio, default = (f"{us[name] / us['cudnn']:.2f}" if name in us and us.get("cudnn") else "n/a"
                          for name in ("gluon_plan", "default"))
        agrees = {True: "yes", False: "NO", None: "n/a"}[r["agrees"]]
        notes = "; ".join(f"{name}: {note}" for name, note in r["notes"].items())
        lines.append(f"| {r['n']} | {r['D']} | {'yes' if r['causal'] else 'no'} | " + " | ".join(cells)
                     + f" | {r.get('plan_mode')} | {agrees} | {ratio} | {default} | {notes} |")
    return "\n".join(lines)


def run_host(head_dims=None, causals=(False, True), lengths=(512,), markdown: str | None = None) -> int:
    """The table for every (N, D, causal) asked; 1 if the plan's gradients were not the JIT path's."""
    from benchmarks._report import host_report

    rows = host_report(host_row, host_table, lengths, head_dims or (64, 128), causals, markdown)
    return int(any(r["agrees"] is False for r in rows))


if __name__ == "__main__":
    print("benchmarks.bwd_gluon_host is run by `python -m benchmarks.bwd_gluon --host` (see its --help)",
          file=sys.stderr)
    sys.exit(2)

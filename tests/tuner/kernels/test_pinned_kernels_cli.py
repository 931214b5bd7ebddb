"""Pins ``python -m tuner.kernels``: each kernel's line lists every axis of its config, knobs included (a
study's [space] may name any of them)."""

from __future__ import annotations

from tuner.kernels import known
from tuner.kernels.__main__ import main


def test_the_listing_names_every_axis_knobs_included(capsys):
    assert main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name, pass_, kernel in known():
        line = next(ln for ln in lines if ln.startswith(f"{name} (pass {pass_}):"))
        listed = line.rpartition("; axes ")[2].split(", ")
        assert listed == [a.name for a in kernel.config_type.axes()]
    forward = next(ln for ln in lines if ln.startswith("triton (pass fwd):"))
    assert forward.endswith("axes block_m, block_n, num_warps, num_stages, tma, warp_specialize, maxnreg, persistent")

"""The program ncu runs (tuner/profile/_launch.py) launches the call the tuner times, for every kernel
and pass: a backward's target is the backward (its dQ, dK and dV written), not a forward. A profile
of the Gluon backward on the H200 had found only the forward's kernel in the profiled range."""

from __future__ import annotations

import json

import torch

from tuner import kernels
from tuner.problem import Problem
from tuner.profile import Target, launch_call

PROBLEM = Problem(1, 2, 40, 24, 16, "fp32", True)


def _nan_filled(kernel, names):
    tensors = kernel.inputs(PROBLEM, "cpu", torch.Generator().manual_seed(0))
    for name in names:
        tensors[name].fill_(float("nan"))
    return tensors


def test_ours_on_a_backward_kernel_runs_the_backward():
    kernel = kernels.get("triton", "bwd")
    config = kernel.config_type.parse("16x16_w1_s1_q16x16_w1_s1")
    tensors = _nan_filled(kernel, ("dq", "dk", "dv"))
    out_before = tensors["out"].clone()
    launch_call(kernel, "ours", tensors, PROBLEM, config.as_kwargs())()
    assert not any(tensors[name].isnan().any() for name in ("dq", "dk", "dv")), "the backward did not run"
    assert torch.equal(tensors["out"], out_before), "the profiled call ran a forward"


def test_ours_on_a_forward_kernel_runs_the_forward_into_the_given_outputs():
    kernel = kernels.get("triton", "fwd")
    config = kernel.config_type.parse("16x16_w1_s1")
    tensors = _nan_filled(kernel, ("out", "lse"))
    launch_call(kernel, "ours", tensors, PROBLEM, config.as_kwargs())()
    assert not tensors["out"].isnan().any() and not tensors["lse"].isnan().any()


def test_the_request_names_the_kernel_and_pass_it_launches():
    kernel = kernels.get("gluon_bwd", "bwd")
    config = kernel.config_type.parse("64x128_w4_s2_dq1")
    request = json.loads(Target("ours", PROBLEM, config, kernel="gluon_bwd", pass_="bwd").request())
    assert (request["kernel"], request["pass"]) == ("gluon_bwd", "bwd")
    assert kernel.config_type(**request["config"]) == config, "the config does not survive the request"

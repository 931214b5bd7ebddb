"""Triton 3.6's real JITs and launcher wrapper on a CPU, with tests/gluon_fake_driver.py's recording
driver: what a Gluon backward plan's direct launches (the preprocess, the Gluon kernel, the dQ
conversion) pass against what the JITs pass. Run by tests/kernel/gluon/bwd/test_gluon_bwd_plan.py in a subprocess
(the JIT cannot compile under TRITON_INTERPRET=1, which the CPU tests set). Prints one JSON object:
per case, each step's three recorded launches (tensors as their data_ptr), the pointers each step
encoded a CUtensorMap for, and the pointers of the two input sets.

    PYTHONPATH=. python tests/gluon_bwd_fake_driver.py
"""

from __future__ import annotations

import json
import sys

import torch
from gluon_fake_driver import ENCODED, LAUNCHES, Driver, _plain
from triton.runtime.driver import driver as active_driver

import kernel.gluon.bwd.plan as gluon_bwd_launch
import kernel.triton.bwd_launch as bwd_launch
from kernel.gluon.bwd.launch import config_from, launch_arguments

# (D, causal, B, H, N_q, N_k, knobs): ragged lengths at both head dims, two consumers, and N = 1
# (which the JIT turns into constants) on a persistent grid; each a compile of three kernels.
CASES = [(64, False, 2, 3, 385, 129, {}), (128, True, 2, 3, 385, 129, dict(consumers=2)),
         (128, True, 1, 2, 1, 1, dict(persistent=1))]


def _inputs(b, h, n_q, n_k, d):
    q, out, dout = (torch.randn(b, h, n_q, d, dtype=torch.bfloat16) for _ in range(3))
    k, v = (torch.randn(b, h, n_k, d, dtype=torch.bfloat16) for _ in range(2))
    lse = torch.randn(b, h, n_q)
    grads = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    return (q, k, v, out, lse, dout), grads


def run_case(d, causal, b, h, n_q, n_k, knobs) -> dict:
    """Steps, in order: the plan's first call (the JITs) on set 1, its second (direct) on set 2, the JITs
    on set 2 (a plan with direct=False), the plan on set 1 again and once more."""
    config = config_from(d, causal, knobs)
    first, second = _inputs(b, h, n_q, n_k, d), _inputs(b, h, n_q, n_k, d)
    plan = gluon_bwd_launch.GluonBwdPlan(*first[0], causal, config, first[1], launch_arguments)
    jit_only = gluon_bwd_launch.GluonBwdPlan(*first[0], causal, config, first[1], launch_arguments, direct=False)
    steps = [(plan, first), (plan, second), (jit_only, second), (plan, first), (plan, first)]
    launches, encoded = [], []
    for which, (tensors, grads) in steps:
        before, launched = len(ENCODED), len(LAUNCHES)
        which(*tensors, *grads)
        encoded.append(ENCODED[before:])
        launches.append([_plain(list(args)) for args in LAUNCHES[launched:]])
    return dict(case=[d, causal, b, h, n_q, n_k, knobs], mode=plan.mode, encoded=encoded, launches=launches,
                pointers=[[t.data_ptr() for t in (*tensors, *grads)] for tensors, grads in (first, second)])


def main() -> int:
    active_driver.set_active(Driver())
    for module in (bwd_launch, gluon_bwd_launch):       # CPU tensors: device index None
        module.current_device = lambda: None
        module.current_stream = lambda index: 0x5EA
    gluon_bwd_launch.sm_count = lambda device: 132
    json.dump([run_case(*case) for case in CASES], sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

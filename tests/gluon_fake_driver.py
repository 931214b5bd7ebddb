"""Triton 3.6's real Gluon JIT and launcher wrapper on a CPU, with a recording driver: what a plan's
direct launch passes against what the JIT passes (run by tests/kernel/gluon/fwd/test_gluon_plan.py in a subprocess:
the JIT cannot compile under TRITON_INTERPRET=1, which the CPU tests set).

The driver is fake only where a GPU would be needed: the current device and stream, loading the
binary, encoding a CUtensorMap (``fill_tma_descriptor`` returns its own arguments) and the C entry
point (it records its arguments). The JIT (binder, specialisation, a real cross-compile for sm_90,
``CompiledKernel``), the ``CudaLauncher``'s ``__call__`` and its ``wrap_handle_tensordesc`` wrapper
with ``make_tensordesc_arg`` are Triton 3.6's own. Prints one JSON object: per case, the recorded
launches (tensors as their data_ptr) and the pointers of the two input sets.

    PYTHONPATH=. python tests/gluon_fake_driver.py
"""

from __future__ import annotations

import json
import sys

import torch
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia import driver as nvidia
from triton.runtime.driver import driver as active_driver

import kernel.gluon.fwd.plan as gluon_launch
from kernel.gluon.fwd.config import default_gluon_config
from kernel.gluon.fwd.launch import launch_arguments

# (variant, D, causal, B, H or None for [B, N, D], N_q, N_k): ragged, 3-D, and N = 1 (which the JIT
# turns into constants), each a compile.
CASES = [("ws", 128, True, 2, 3, 385, 129), ("pipelined", 64, False, 2, None, 385, 129),
         ("pipelined", 128, True, 1, 2, 1, 1)]
LAUNCHES, ENCODED = [], []


class Utils:
    def fill_tma_descriptor(self, ptr, swizzle, elem_size, elem_type, block, shape, strides, padding):
        ENCODED.append(ptr)
        return ["map", ptr, swizzle, elem_size, elem_type, list(block), list(shape), list(strides), padding]

    def get_device_properties(self, device):
        return {"max_shared_mem": 232448, "multiprocessor_count": 132}

    def load_binary(self, name, binary, shared, device):
        return "MODULE", 0xF00D, 128, 0, 1024


class Launcher(nvidia.CudaLauncher):
    """Triton 3.6's CudaLauncher but for the C module it would build: its ``launch`` is 3.6's
    descriptor wrapper around a recorder."""

    def __init__(self, src, metadata):
        self.launch = nvidia.wrap_handle_tensordesc(lambda *args: LAUNCHES.append(args), dict(src.signature),
                                                    getattr(metadata, "tensordesc_meta", None))
        self.num_ctas = 1
        for name in ("global_scratch_size", "global_scratch_align", "profile_scratch_size", "profile_scratch_align",
                     "launch_cooperative_grid", "launch_pdl"):
            setattr(self, name, getattr(metadata, name))


class Driver:
    utils, launcher_cls = Utils(), Launcher

    def get_current_device(self):
        return 0

    def get_current_stream(self, device):
        return 0x5EA

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)


def _plain(value):
    """A recorded argument as JSON: tensors by data_ptr, the JIT's launch metadata and hook chains by kind."""
    if isinstance(value, torch.Tensor):
        return ["tensor", value.data_ptr()]
    if type(value).__name__ == "LazyDict":
        return "launch-metadata"
    if type(value).__name__ == "HookChain":
        return ["hook-chain", len(value.calls)]
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _inputs(b, h, n_q, n_k, d):
    shape_q, shape_k = ((b, n_q, d), (b, n_k, d)) if h is None else ((b, h, n_q, d), (b, h, n_k, d))
    q = torch.randn(shape_q, dtype=torch.bfloat16)
    k, v = (torch.randn(shape_k, dtype=torch.bfloat16) for _ in range(2))
    return q, k, v, torch.empty_like(q), torch.empty(q.shape[:-1])


def run_case(variant, d, causal, b, h, n_q, n_k) -> dict:
    """Launches, in order: the plan's first call (the JIT) on set 1, its second (direct) on set 2, the JIT
    on set 2 (a plan with direct=False), the plan on set 1 again and once more; and the maps encoded by each."""
    config = default_gluon_config(d, causal, variant)
    first, second = _inputs(b, h, n_q, n_k, d), _inputs(b, h, n_q, n_k, d)
    plan = gluon_launch.GluonLaunchPlan(*first[:3], causal, config, *first[3:], launch_arguments)
    jit_only = gluon_launch.GluonLaunchPlan(*first[:3], causal, config, *first[3:], launch_arguments, direct=False)
    steps = [(plan, first), (plan, second), (jit_only, second), (plan, first), (plan, first)]
    encoded = []
    for which, tensors in steps:
        before = len(ENCODED)
        which(*tensors)
        encoded.append(len(ENCODED) - before)
    return dict(case=[variant, d, causal, b, h, n_q, n_k], mode=plan.mode, encoded=encoded,
                launches=[_plain(list(args)) for args in LAUNCHES[-len(steps):]],
                pointers=[[t.data_ptr() for t in tensors] for tensors in (first, second)])


def main() -> int:
    active_driver.set_active(Driver())
    gluon_launch.current_device = lambda: None          # CPU tensors: device index None
    gluon_launch.current_stream = lambda index: 0x5EA
    gluon_launch.sm_count = lambda device: 132
    json.dump([run_case(*case) for case in CASES], sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

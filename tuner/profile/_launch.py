"""The program Nsight Compute runs: one call of one target, profiled alone.

``python -m tuner.profile._launch '{"target": "ours", "kernel": "triton", "pass": "fwd", "shape": {...},
"config": {...}}'``

The call is the one the tuner times, asked of the kernel (:mod:`tuner.kernels`): ``ours`` is
``kernel.call(config, ...)`` (a forward, or a backward's dQ, dK and dV), ``flash`` and ``cudnn``
are its baselines (SDPA's forward, or SDPA's backward by autograd) under their backend's pin.
It launches the target once to compile and warm it, then once more between
``cudaProfilerStart`` and ``cudaProfilerStop``: ncu, started with ``--profile-from-start off``,
profiles only the kernels of that second call. Inputs are random with a fixed seed, so every
target of a shape sees the same tensors; outputs (and a backward's forward) are made before the
profiled range, so no allocation, fill or forward kernel lands in it. Prints one JSON line:
what ran, for the parent to check.
"""

from __future__ import annotations

import json
import sys

TARGETS = ("ours", "flash", "cudnn")


def launch_call(kernel, target: str, tensors: dict, problem, config: dict):
    """The target's one call on ``tensors``, as the tuner times it."""
    if target == "ours":
        return kernel.call(kernel.config_type(**config), tensors, problem)
    pin, calls = kernel.baselines([tensors], problem)[target]

    def baseline():
        with pin():
            return calls[0]()
    return baseline


def main(argv=None) -> int:
    import torch

    from tuner import kernels
    from tuner.problem import Problem

    request = json.loads((argv if argv is not None else sys.argv[1:])[0])
    target, shape = request["target"], Problem(**request["shape"])
    if target not in TARGETS:
        print(f"unknown target {target!r}; one of {', '.join(TARGETS)}", file=sys.stderr)
        return 2
    kernel = kernels.get(request.get("kernel", kernels.DEFAULT_KERNEL), request.get("pass", kernels.DEFAULT_PASS))
    tensors = kernel.inputs(shape, "cuda", torch.Generator(device="cuda").manual_seed(0))
    call = launch_call(kernel, target, tensors, shape, request.get("config") or {})
    call()                                   # compile, pick the backend's kernel, warm the caches
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(json.dumps({"launched": target, "kernel": kernel.name, "pass": kernel.pass_, "shape": shape.label,
                      "device": torch.cuda.get_device_name()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

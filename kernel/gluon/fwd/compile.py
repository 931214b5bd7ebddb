"""Cross-compiling the Gluon forward for sm_90 without a GPU, for the tests and the tuner.

:func:`compile_inputs` builds what ``triton.compile`` takes for a config and a problem shape,
specialised as the JIT specialises a real launch: it runs the JIT's own argument binder and
``_pack_args`` (Triton 3.6's internals, so the specialisation is the JIT's by construction) on
stand-in tensors of the same shapes and strides, so 16-byte aligned pointers get
``tt.divisibility`` 16, integers divisible by 16 get it too, and integers equal to 1 become
constants (N_q = N_k = 1 is such a launch). Pointers are assumed 16-byte aligned, as the
launcher requires; ``debug`` and the instrumentation mode are the defaults, as a plain launch's.
:func:`compile_report` adds what the checks read: PTX markers, ptxas warnings, cubin resources.

``kernel.gluon.fwd.config.smem_bytes`` predicts ``metadata.shared`` from the config alone; the
compile tests check that the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernel.gluon.api import gluon_api_support
from kernel.gluon.fwd.config import GluonConfig, smem_bytes
from kernel.gluon.fwd.launch import launch_arguments

TARGET_ARCH = 90


@dataclass(frozen=True)
class CompileInputs:
    """What ``triton.compile(GluonASTSource(fn, signature, constexprs, attrs), target, options)`` takes."""

    fn: object
    signature: dict
    constexprs: dict
    attrs: dict
    options: dict

    def source(self):
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource(self.fn, self.signature, self.constexprs, self.attrs)


def _views(batch, heads, n_q, n_k, head_dim, dtype):
    """CPU stand-ins of contiguous q, k, v, out ([B, H, N, D]) and lse, as a launch gets them
    (uninitialised: the binder reads shapes, strides, dtypes and the alignment of data_ptr())."""
    q, o = (torch.empty(batch, heads, n_q, head_dim, dtype=dtype) for _ in range(2))
    k, v = (torch.empty(batch, heads, n_k, head_dim, dtype=dtype) for _ in range(2))
    return q, k, v, o, torch.empty(batch, heads, n_q, dtype=torch.float32)


def stand_in_launch(config: GluonConfig, head_dim: int, causal: bool, n_q: int, n_k: int, batch: int = 2,
                    heads: int = 3, dtype: torch.dtype = torch.bfloat16, split: bool = False):
    """(kernel, arguments, constexprs, options) of a launch on stand-ins of contiguous [B, H, N, D]
    tensors (``kernel.gluon.fwd.launch.launch_arguments``): what the JIT binds, and ``warmup`` takes.
    ``split``: the ws binary that splits its last wave (``kernel.gluon.fwd.split``; its counts are not
    specialised, so any stand-in compiles the same binary)."""
    views = _views(batch, heads, n_q, n_k, head_dim, dtype)
    return launch_arguments(*views, config, causal, **(dict(split=(0, 2, views[4], views[4])) if split else {}))


def compile_inputs(config: GluonConfig, head_dim: int, causal: bool, n_q: int, n_k: int, batch: int = 2,
                   heads: int = 3, dtype: torch.dtype = torch.bfloat16, split: bool = False) -> CompileInputs:
    """The compile inputs of a launch on contiguous [B, H, N, D] tensors, as the JIT makes them."""
    return bound_inputs(*stand_in_launch(config, head_dim, causal, n_q, n_k, batch, heads, dtype, split))


def bound_inputs(fn, args, constexprs: dict, options: dict) -> CompileInputs:
    """The compile inputs of a launch of ``fn`` for sm_90, by the JIT's own binder and ``_pack_args``
    (every Gluon kernel's cross-compile goes through it)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(GPUTarget("cuda", TARGET_ARCH, 32))
    # The JIT passes the instrumentation mode (ConSan) as an option from Triton 3.8 on (3.6's backend
    # read it itself): a cross-compile does as the JIT does, where the options have the field.
    from triton import knobs

    if "instrumentation_mode" in backend.parse_options({}).__dict__ and "instrumentation_mode" not in options:
        options = {**options, "instrumentation_mode": knobs.compilation.instrumentation_mode}
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, parsed = binder(*args, **constexprs, **options)
    options_, signature, constexprs_, attrs = fn._pack_args(backend, {**constexprs, **options}, bound,
                                                            specialization, parsed)
    return CompileInputs(fn, signature, constexprs_, attrs, options_.__dict__)


def cross_compile(config: GluonConfig, head_dim: int, causal: bool, n_q: int = 1024, n_k: int = 1024, **shape):
    """Compile for sm_90 on any machine; returns the CompiledKernel (``metadata.shared``, ``asm["ptx"]``).

    Raises:
        RuntimeError: this Triton has no Gluon API of the kernel's generation (the reason).
    """
    import triton
    from triton.backends.compiler import GPUTarget

    reason = gluon_api_support()
    if reason is not None:
        raise RuntimeError(reason)
    inputs = compile_inputs(config, head_dim, causal, n_q, n_k, **shape)
    return triton.compile(inputs.source(), target=GPUTarget("cuda", TARGET_ARCH, 32), options=inputs.options)


# ---------------------------------------------------------- many compiles, in a process

PTX_MARKERS = {"wgmma": "wgmma.mma_async", "tma": "cp.async.bulk.tensor", "mbarrier": "mbarrier.try_wait",
               "setmaxnreg": "setmaxnreg", "consan": "__assertfail"}      # consan: ConSan's checks are in


def _nvidia_tool(name: str) -> str | None:
    import os

    import triton

    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
    return path if os.path.exists(path) else None


def _ptxas() -> str | None:
    """The ptxas Triton itself compiles sm_90 with (3.9 ships a newer one for its newer PTX, which the
    older binary beside it refuses), else the one in its bin folder."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        return get_ptxas(TARGET_ARCH).path
    except (ImportError, RuntimeError, TypeError, AttributeError):
        return _nvidia_tool("ptxas")


def ptxas_warnings(ptx: str) -> list[str] | None:
    """ptxas's warnings on ``ptx`` for sm_90a (e.g. "wgmma.mma_async instructions are serialized",
    a silent loss of the overlap), by the ptxas Triton uses; None where it is missing. A ptxas that
    refuses the PTX outright is an error, not an empty list of warnings."""
    import subprocess
    import tempfile

    tool = _ptxas()
    if tool is None:
        return None
    with tempfile.TemporaryDirectory() as folder:
        source = f"{folder}/kernel.ptx"
        with open(source, "w") as handle:
            handle.write(ptx)
        result = subprocess.run([tool, "--gpu-name", "sm_90a", "-v", source, "-o", f"{folder}/kernel.cubin"],
                                capture_output=True, text=True, timeout=300)
    output = (result.stdout + result.stderr).splitlines()
    if result.returncode != 0:
        raise RuntimeError(f"{tool} refused the PTX: {' '.join(line.strip() for line in output)[:300]}")
    return [line.strip() for line in output if "warning" in line.lower()]


def resource_usage(cubin: bytes) -> dict[str, int]:
    """Registers, stack (spills) and static shared memory of a cubin, by the cuobjdump that
    ships with Triton's NVIDIA backend (``{}`` where it is missing)."""
    import re
    import subprocess
    import tempfile

    tool = _nvidia_tool("cuobjdump")
    if tool is None:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        text = subprocess.run([tool, "--dump-resource-usage", handle.name], capture_output=True, text=True,
                              timeout=60).stdout
    return {key: int(value) for key, value in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", text)}


def compile_report(case: dict) -> dict:
    """Cross-compile one case ``{"config": {...}, "head_dim", "causal", "n_q", "n_k"}``; what the
    checks need: shared memory (compiled and modelled), which PTX markers occur, the
    ``setmaxnreg`` and ``.maxnreg`` lines, the constant and divisible arguments, or the error."""
    import re
    from dataclasses import asdict

    config = GluonConfig(**case["config"])
    args = (config, case["head_dim"], case["causal"], case["n_q"], case["n_k"])
    split = bool(case.get("split"))
    report = dict(case, config=asdict(config), model=smem_bytes(config, case["head_dim"], split=split))
    try:
        inputs = compile_inputs(*args, split=split)
        compiled = cross_compile(*args, split=split)
    except Exception as exc:  # reported, not raised: one bad case must not hide the others
        return dict(report, error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1:]}")
    names = list(inputs.fn.arg_names)
    ptx = compiled.asm["ptx"]
    return dict(report, error=None, shared=compiled.metadata.shared,
                markers={name: marker in ptx for name, marker in PTX_MARKERS.items()},
                regs=sorted(set(re.findall(r"(setmaxnreg\.\w+)\.sync\.aligned\.u32\s+(\d+);", ptx))),
                maxnreg=re.findall(r"\.maxnreg (\d+)", ptx), resources=resource_usage(compiled.asm["cubin"]),
                ptxas_warnings=ptxas_warnings(ptx),
                constants={names[path[0]]: value for path, value in inputs.constexprs.items()
                           if not inputs.fn.params[path[0]].is_constexpr},
                divisible=sorted(names[path[0]] for path, attr in inputs.attrs.items() if attr))


def main(argv=None) -> int:
    """``python -m kernel.gluon.fwd.compile < cases.json``: a JSON list of :func:`compile_report`s.

    The cross-compile must run outside Triton's interpreter (``TRITON_INTERPRET=1``, which
    the CPU tests set, replaces the language's functions); a fresh process without it is the
    way to compile from there.
    """
    import json
    import sys

    cases = json.load(sys.stdin)
    json.dump([compile_report(case) for case in cases], sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

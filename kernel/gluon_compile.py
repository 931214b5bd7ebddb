"""Cross-compiling the Gluon forward for sm_90 without a GPU, and its shared-memory model.

:func:`compile_inputs` builds what ``triton.compile`` takes for a config and a problem shape,
specialised as the JIT specialises a real launch: it runs the JIT's own argument binder on
stand-in tensors of the same shapes and strides, so 16-byte aligned pointers get
``tt.divisibility`` 16, integers divisible by 16 get it too, and integers equal to 1 become
constants (the JIT does that at run time; N_q = N_k = 1 is such a launch). Pointers are
assumed 16-byte aligned, as the launcher requires.

:func:`smem_bytes` predicts ``metadata.shared`` from the config alone; the compile tests
check the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernel.flash_fwd_gluon import GluonConfig, gluon_api_support, launch_arguments

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


def compile_inputs(config: GluonConfig, head_dim: int, causal: bool, n_q: int, n_k: int, batch: int = 2,
                   heads: int = 3, dtype: torch.dtype = torch.bfloat16) -> CompileInputs:
    """The compile inputs of a launch on contiguous [B, H, N, D] tensors, as the JIT makes them."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    q, k, v, o, lse = _views(batch, heads, n_q, n_k, head_dim, dtype)
    fn, args, constexprs, options = launch_arguments(q, k, v, o, lse, config, causal)
    backend = make_backend(GPUTarget("cuda", TARGET_ARCH, 32))
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


# ------------------------------------------------------------------ shared-memory model

# The warp-specialized kernel hands its worker partitions' arguments through shared memory
# (Triton 3.6 lays them end to end and rounds the block to 16 bytes): a tensor descriptor or
# a global pointer is 8 bytes, an int or float 4, a shared buffer 8 + 4 per dimension. The
# producer takes q, k, v, Q buffers, the ring and its barriers, H, BH, N_q, N_k; a second
# consumer adds the output descriptor and buffers, lse, the scale and, when it takes turns,
# the turnstile. (A length the JIT made a constant 1 is not passed: 4 bytes the rounding absorbs.)
WS_WORD_BYTES = 4          # and a word per worker partition, placed last


def _ws_capture_bytes(consumers: int, pingpong: bool) -> int:
    rank5, rank2 = 8 + 4 * 5, 8 + 4 * 2
    size = 3 * 8 + 3 * rank5 + 6 * rank2 + 4 * 4          # producer
    if consumers == 2:
        size += 8 + rank5 + 8 + 4 + (rank2 if pingpong else 0)
    return -(-size // 16) * 16


def _place(sizes_and_alignments) -> int:
    """The end of buffers placed one after another, each at the next multiple of its alignment."""
    end = 0
    for size, alignment in sizes_and_alignments:
        end = -(-end // alignment) * alignment + size
    return end


def smem_bytes(config: GluonConfig, head_dim: int, element_bytes: int = 2) -> int:
    """Shared memory of a config, as Triton 3.6 allocates it (bytes, = ``metadata.shared``).

    Tiles first (multiples of 1 KB): the K and V ring, then Q (pipelined: Q's buffer also
    stages the output; ws: a Q and an output buffer per consumer). Then the small buffers,
    largest first, each 16-byte aligned: mbarrier arrays of 8 bytes a barrier (ready per
    stage for K and V; ws also empty per stage, Q ready and empty per consumer, and the two
    turnstile barriers when two consumers take turns), and for ws the captured arguments and
    a word per worker partition last. With one consumer the turnstile is never used, and its
    barriers share the capture block's place (they are dead after their initialisation).
    """
    stages = config.num_stages
    kv_tile = config.block_n * head_dim * element_bytes
    ring = 2 * stages * kv_tile
    if config.variant == "pipelined":
        tiles = ring + config.block_m * head_dim * element_bytes
        small = [8 * stages, 8 * stages, 8]
        return tiles + _place(sorted(((size, 16) for size in small), reverse=True))
    consumers = config.consumers
    tiles = ring + 2 * consumers * 64 * head_dim * element_bytes
    small = ([_ws_capture_bytes(consumers, config.pingpong)] + [8 * stages] * 4 + [8 * consumers] * 2
             + ([16] if config.pingpong else []))
    placed = sorted(((size, 16) for size in small), reverse=True) + [(WS_WORD_BYTES * consumers, 4)]
    return tiles + _place(placed)


# ---------------------------------------------------------- many compiles, in a process

PTX_MARKERS = {"wgmma": "wgmma.mma_async", "tma": "cp.async.bulk.tensor", "mbarrier": "mbarrier.try_wait",
               "setmaxnreg": "setmaxnreg"}


def resource_usage(cubin: bytes) -> dict[str, int]:
    """Registers, stack (spills) and static shared memory of a cubin, by the cuobjdump that
    ships with Triton's NVIDIA backend (``{}`` where it is missing)."""
    import os
    import re
    import subprocess
    import tempfile

    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(tool):
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
    report = dict(case, config=asdict(config), model=smem_bytes(config, case["head_dim"]))
    try:
        inputs = compile_inputs(*args)
        compiled = cross_compile(*args)
    except Exception as exc:  # reported, not raised: one bad case must not hide the others
        return dict(report, error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1:]}")
    names = list(inputs.fn.arg_names)
    ptx = compiled.asm["ptx"]
    return dict(report, error=None, shared=compiled.metadata.shared,
                markers={name: marker in ptx for name, marker in PTX_MARKERS.items()},
                regs=sorted(set(re.findall(r"(setmaxnreg\.\w+)\.sync\.aligned\.u32\s+(\d+);", ptx))),
                maxnreg=re.findall(r"\.maxnreg (\d+)", ptx), resources=resource_usage(compiled.asm["cubin"]),
                constants={names[path[0]]: value for path, value in inputs.constexprs.items()
                           if not inputs.fn.params[path[0]].is_constexpr},
                divisible=sorted(names[path[0]] for path, attr in inputs.attrs.items() if attr))


def main(argv=None) -> int:
    """``python -m kernel.gluon_compile < cases.json``: a JSON list of :func:`compile_report`s.

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

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

# The warp-specialized kernel hands its partitions' arguments (descriptors, buffers, scalars)
# through shared memory: Triton 3.6 lays them out in this many bytes, by consumer count.
WS_CAPTURE_BYTES = {1: 224, 2: 288}
WS_WORD_BYTES = 4          # and a word per worker partition


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
    barriers share the capture block's place.
    """
    config = config.effective()
    stages = config.num_stages
    kv_tile = config.block_n * head_dim * element_bytes
    ring = 2 * stages * kv_tile
    if config.variant == "pipelined":
        tiles = ring + config.block_m * head_dim * element_bytes
        small = [8 * stages, 8 * stages, 8]
        return tiles + _place(sorted(((size, 16) for size in small), reverse=True))
    consumers = config.consumers
    tiles = ring + 2 * consumers * 64 * head_dim * element_bytes
    small = [WS_CAPTURE_BYTES[consumers]] + [8 * stages] * 4 + [8 * consumers] * 2 + ([16] if consumers == 2 else [])
    placed = sorted(((size, 16) for size in small), reverse=True) + [(WS_WORD_BYTES * consumers, 4)]
    return tiles + _place(placed)

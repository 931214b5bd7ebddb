"""The Triton kernels' configs for a call that names none: tiles, warps, stages and knobs decided here.

* :func:`default_config`: the forward's, by head dim, mask and GPU;
* :data:`HOPPER_BWD` and :func:`default_bwd_config`: the backward's, for every default call the
  route (:mod:`kernel.route`) leaves on Triton, and for a call that asks for Triton's default by name.

Plain Python: the launchers and the tuner read them. Which kernel a default call runs at all
(Triton, or a Gluon kernel) is :mod:`kernel.route`'s decision, not this file's.
"""

from __future__ import annotations

from dataclasses import replace

from kernel.arch import device_capability, is_hopper
from kernel.triton.bwd import BwdConfig

__all__ = ["HOPPER_BWD", "default_bwd_config", "default_config"]

# The H200 winners of ``python -m benchmarks.bwd --explore`` (bf16, B4 H8 N4096; each dK/dV
# config with the dQ pass held fixed, then the dQ pass on the best of them; docs/results/
# 2026-12-01-h200-backward.md), by (head dim, causal); the dQ pass overlapped with the dK/dV
# kernel where ``benchmarks.bwd --knobs`` found it faster (D=128 causal, the same file).
HOPPER_BWD = {
    (64, False): BwdConfig(block_m=32, block_n=64, num_warps=4, num_stages=3, block_m_q=128, block_n_q=64,
                           num_warps_q=8, num_stages_q=3, dq_mode="pass", tma=True),
    (64, True): BwdConfig(block_m=64, block_n=64, num_warps=4, num_stages=3, block_m_q=128, block_n_q=32,
                          num_warps_q=8, num_stages_q=1, dq_mode="tma", tma=True),
    (128, False): BwdConfig(block_m=64, block_n=64, num_warps=4, num_stages=2, block_m_q=128, block_n_q=64,
                            num_warps_q=8, num_stages_q=3, dq_mode="pass", tma=True),
    (128, True): BwdConfig(block_m=64, block_n=64, num_warps=4, num_stages=1, block_m_q=128, block_n_q=64,
                           num_warps_q=8, num_stages_q=3, dq_mode="pass", tma=True, overlap=True),
}

def default_bwd_config(head_dim: int, causal: bool = False, capability: int | None = None,
                       lengths: tuple[int, int] | None = None) -> BwdConfig:
    """A good Triton backward config for a call that names none; the tuner finds better ones for your GPU.

    Hopper takes the H200's winners (:data:`HOPPER_BWD`) at D=64 and D=128. Elsewhere the
    tiles fit Ada's 99 KB of shared memory per block and compile without spills for sm_89.
    ``lengths`` (n_q, n_k): a length of 1 is a constant to the JIT, whose Hopper pipeliner
    cannot predicate TMA descriptors then (seen in the forward), so such calls take plain loads.
    """
    if capability is None:
        capability = device_capability()
    config = HOPPER_BWD.get((head_dim, bool(causal))) if is_hopper(capability) else None
    if config is None:
        warps = 8 if head_dim == 128 else 4
        config = (BwdConfig(block_m=64, block_n=64, num_warps=warps, num_stages=2, block_m_q=64, block_n_q=64,
                            num_warps_q=warps, num_stages_q=2) if head_dim <= 128 else
                  BwdConfig(block_m=32, block_n=32, num_warps=4, num_stages=1, block_m_q=32, block_n_q=32,
                            num_warps_q=4, num_stages_q=1))
    if lengths is not None and 1 in lengths and (config.tma or config.dq_mode == "tma"):
        config = replace(config, tma=False, dq_mode="pass")
    return config


def default_config(head_dim: int, causal: bool = False, capability: int | None = None) -> dict:
    """A good config for a call that names none; the tuner finds better ones for your GPU and shape.

    Hopper values are the winners of the ``hopper_knobs`` grid sweep on an H200 at N=4096, bf16,
    with TMA loads (and a persistent grid at D=128); where warp specialization or a register cap
    won, it was within the noise of the config without it, which is taken
    (docs/results/2026-11-30-h200-knobs.md). Elsewhere they fit Ada's 99 KB per block, knobs off.

    Args:
        head_dim: D.
        causal: whether the launch is causal.
        capability: compute capability as an int (90 for sm_90); default the current
            CUDA device, or a non-Hopper choice without one.
    """
    if capability is None:
        capability = device_capability()
    hopper = is_hopper(capability)
    if head_dim == 64 and hopper:
        if causal:
            return dict(block_m=64, block_n=128, num_warps=4, num_stages=2, tma=True)
        return dict(block_m=128, block_n=64, num_warps=8, num_stages=3, tma=True)
    if head_dim == 128 and hopper:
        return dict(block_m=128, block_n=128, num_warps=8, num_stages=3, tma=True, persistent=2)
    if head_dim <= 64:
        return dict(block_m=128, block_n=64, num_warps=8, num_stages=3)
    if head_dim == 128:
        return dict(block_m=128, block_n=64, num_warps=8, num_stages=2)
    return dict(block_m=64, block_n=32, num_warps=4, num_stages=1)

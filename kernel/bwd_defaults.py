"""What a backward call that names no config runs: the Gluon backward where it wins, else Triton's defaults.

Two tables, one decision each (plain Python: the launchers and the tuner read them):

* :data:`GLUON_BWD_ROUTES`: on sm_90 with Triton 3.6 (both detected on the call's device and the
  installed Triton, never assumed), a default call at these (head dim, causal) runs the Gluon
  backward (:mod:`kernel.flash_bwd_gluon`) at that config, through its launch plan, for inputs the
  Gluon launcher takes as they are (its own checks are asked, device aside; [B, N, D] inputs are
  viewed as [B, 1, N, D]). Inputs it would refuse (fp32, a head dim it lacks, a layout TMA
  cannot read) stay on the Triton kernels rather than erroring.
* :data:`HOPPER_BWD` and :func:`default_bwd_config`: the Triton backward's config for every
  other default call, and for a call that asks for Triton's default by name.

:mod:`kernel.backward` (the entry point) routes by the first table; a call that passes a
config or a field never routes.
"""

from __future__ import annotations

from dataclasses import replace

from kernel.flash_bwd import BwdConfig
from kernel.gluon_bwd_config import GLUON_BWD_DEFAULTS, GluonBwdConfig
from kernel.launch import device_capability

__all__ = ["GLUON_BWD_ROUTES", "HOPPER_BWD", "default_bwd_config"]

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

# (head dim, causal) -> the Gluon backward's config of a default call on sm_90 with Triton 3.6: its
# defaults (kernel.gluon_bwd_config.GLUON_BWD_DEFAULTS). On the H200 (bf16, B4 H8 N4096, paired with
# SDPA-cuDNN; docs/results/2026-12-01-h200-backward-default.md) they ran at 1.05x / 1.19x (D=64) and
# 1.40x / 1.39x (D=128) the Triton backward's default, non-causal / causal: every pair the Gluon
# backward has takes the route.
GLUON_BWD_ROUTES: dict[tuple[int, bool], GluonBwdConfig] = {
    key: GLUON_BWD_DEFAULTS[key] for key in ((64, False), (64, True), (128, False), (128, True))}


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
    config = HOPPER_BWD.get((head_dim, bool(causal))) if 90 <= capability < 100 else None
    if config is None:
        warps = 8 if head_dim == 128 else 4
        config = (BwdConfig(block_m=64, block_n=64, num_warps=warps, num_stages=2, block_m_q=64, block_n_q=64,
                            num_warps_q=warps, num_stages_q=2) if head_dim <= 128 else
                  BwdConfig(block_m=32, block_n=32, num_warps=4, num_stages=1, block_m_q=32, block_n_q=32,
                            num_warps_q=4, num_stages_q=1))
    if lengths is not None and 1 in lengths and (config.tma or config.dq_mode == "tma"):
        config = replace(config, tma=False, dq_mode="pass")
    return config

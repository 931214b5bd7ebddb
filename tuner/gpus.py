"""Target GPUs: a table of sourced hardware numbers and the ``--gpu`` name lookup.

Sources:
    [cccl]   NVIDIA CCCL ``libcudacxx/include/cuda/__device/arch_traits.h``: shared memory
             per SM and max opt-in per block (per-SM figure minus 1 KB reserved per block),
             registers per SM / per thread, threads per SM.
    [cutlass] CUTLASS ``include/cutlass/arch/arch.h``: the same shared-memory limits.
    [ds]     The card's NVIDIA datasheet: SM count, dense bf16 tensor TFLOP/s with fp32
             accumulate (no sparsity), memory bandwidth.
    [h200]   Measured on this project's H200 with torch 2.11: 232,448 B opt-in,
             233,472 B per SM, 132 SMs, 65,536 registers per SM.
    [calc]   Computed, not a datasheet figure: SMs x boost clock x 512 bf16 FLOP/clk/SM
             (fp32 accumulate, GeForce Ada).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kernel.arch import smem_optin, smem_per_sm


@dataclass(frozen=True)
class GpuSpec:
    """One target: an architecture (``sm_XX``) with a representative card.

    Attributes:
        name: target name, ``sm_89`` etc.
        capability: CUDA compute capability as an int, 89 for sm_89.
        smem_per_block_optin: largest shared memory one block may opt in to, bytes.
        smem_per_sm: shared memory per SM, bytes.
        regs_per_sm: 32-bit registers per SM (also the per-block limit).
        card: the card whose remaining numbers these are.
        sm_count: SMs on that card.
        peak_bf16_tflops: dense bf16 tensor-core TFLOP/s, fp32 accumulate.
        mem_bandwidth_gbs: DRAM bandwidth, GB/s.
        source: where the card numbers come from (keys in the module docstring).
    """

    name: str
    capability: int
    smem_per_block_optin: int
    smem_per_sm: int
    regs_per_sm: int
    card: str
    sm_count: int
    peak_bf16_tflops: float | None
    mem_bandwidth_gbs: float | None
    source: str

    @property
    def label(self) -> str:
        """How results name the GPU that measured them: ``NVIDIA H200 (sm_90)``."""
        return f"{self.card} ({self.name})"

    @classmethod
    def from_name(cls, name: str) -> GpuSpec:
        """Look up a target by ``sm_XX``, card name (``rtx4090``, ``h200``, ...) or ``auto``.

        Raises:
            ValueError: unknown name; the message lists the valid ones.
            RuntimeError: ``auto`` without a CUDA device.
        """
        key = name.strip().lower().replace("-", "").replace("_", "").replace(" ", "")
        if key == "auto":
            return detect()
        for spec in _TARGETS.values():
            if key == spec.name.replace("_", ""):
                return spec
        if key in _CARDS:
            return _CARDS[key]
        raise ValueError(f"unknown GPU {name!r}; valid: {', '.join(valid_names())}")


def _spec(name, card, sms, tflops, bandwidth, source):
    capability = int(name[3:])            # the architecture's shared memory: kernel.arch's table
    return GpuSpec(name=name, capability=capability, smem_per_block_optin=smem_optin(capability),
                   smem_per_sm=smem_per_sm(capability),
                   regs_per_sm=65536, card=card, sm_count=sms, peak_bf16_tflops=tflops, mem_bandwidth_gbs=bandwidth,
                   source=source)


# Per-architecture limits [cccl][cutlass]; the card on each row is the default for that target.
_TARGETS = {
    "sm_80": _spec("sm_80", "a100", 108, 312.0, 2039.0, "[cccl] [ds] A100 SXM 80GB"),
    "sm_86": _spec("sm_86", "a10", 72, 125.0, 600.0, "[cccl] [ds] A10"),
    "sm_89": _spec("sm_89", "rtx4070super", 56, 71.0, 504.0, "[cccl] [calc] RTX 4070 Super"),
    "sm_90": _spec("sm_90", "h100", 132, 989.0, 3350.0, "[cccl] [ds] H100 SXM"),
    "sm_100": _spec("sm_100", "b200", 148, 2250.0, 8000.0, "[cccl] [ds] B200"),
    "sm_120": _spec("sm_120", "rtx5090", 170, 209.5, 1792.0, "[cccl] [ds] RTX 5090 (Blackwell whitepaper)"),
}
# Other cards: the same limits as their target, their own SM count, rate and bandwidth [ds].
_CARDS = {spec.card: spec for spec in _TARGETS.values()}
for _card, _target, _sms, _tflops, _bw, _src in [
    ("rtx3090", "sm_86", 82, 71.0, 936.0, "[ds] RTX 3090 (fp32 accumulate)"),
    ("rtx4090", "sm_89", 128, 165.0, 1008.0, "[ds] RTX 4090"),
    ("l4", "sm_89", 58, 121.0, 300.0, "[ds] L4"),
    ("l40s", "sm_89", 142, 362.0, 864.0, "[ds] L40S"),
    ("h200", "sm_90", 132, 989.0, 4800.0, "[ds] H200 SXM; limits also [h200]"),
]:
    _CARDS[_card] = replace(_TARGETS[_target], card=_card, sm_count=_sms, peak_bf16_tflops=_tflops,
                            mem_bandwidth_gbs=_bw, source=f"[cccl] {_src}")


def valid_names() -> list[str]:
    """Every name ``--gpu`` accepts."""
    return list(_TARGETS) + sorted(set(_CARDS) - set(_TARGETS)) + ["auto"]


def targets() -> list[GpuSpec]:
    """One spec per architecture target."""
    return list(_TARGETS.values())


def detect() -> GpuSpec:
    """The spec of the CUDA device present, its limits read from the device.

    Raises:
        RuntimeError: no CUDA device.
    """
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("--gpu auto needs a CUDA device and none is visible; name a target such as sm_89")
    props = torch.cuda.get_device_properties(0)
    capability = props.major * 10 + props.minor
    base = _TARGETS.get(f"sm_{capability}")
    card_key = props.name.lower().replace("nvidia", "").replace(" ", "").replace("-", "")
    known = next((spec for key, spec in _CARDS.items() if key in card_key), None)
    template = known if known and known.capability == capability else base
    optin = getattr(props, "shared_memory_per_block_optin", None)
    per_sm = getattr(props, "shared_memory_per_multiprocessor", None)
    return GpuSpec(
        name=f"sm_{capability}", capability=capability,
        smem_per_block_optin=optin or (template.smem_per_block_optin if template else 49152),
        smem_per_sm=per_sm or (template.smem_per_sm if template else 49152),
        regs_per_sm=getattr(props, "regs_per_multiprocessor", 65536),
        card=props.name, sm_count=props.multi_processor_count,
        peak_bf16_tflops=template.peak_bf16_tflops if template else None,
        mem_bandwidth_gbs=template.mem_bandwidth_gbs if template else None,
        source="read from the device" + (f"; rates {template.source}" if template else ""),
    )

"""The budget's rules at their boundaries: every stage count on both sides of warp
specialization's warp limit, each capability on both sides of Hopper, register limits
exactly at the cap and one step over, for the forward and the backward."""

from __future__ import annotations

import pytest

from tuner.gpus import GpuSpec
from tuner.kernels import TritonFeatures, triton_bwd, triton_fwd
from tuner.kernels.triton_bwd import TritonBwdConfig
from tuner.kernels.triton_fwd import WS_MIN_WARPS, FwdConfig

ALL = TritonFeatures(version="9.9", tensor_descriptors=True, warp_specialize=True, maxnreg=True)
NONE = TritonFeatures(version="1.0", tensor_descriptors=False, warp_specialize=False, maxnreg=False)
SM89, SM90 = GpuSpec.from_name("sm_89"), GpuSpec.from_name("sm_90")


@pytest.mark.parametrize("warps", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("stages", range(1, 9))
def test_warp_specialization_needs_eight_warps_once_the_loop_is_pipelined(warps, stages):
    config = FwdConfig(128, 128, warps, stages, tma=True, warp_specialize=True)
    why = triton_fwd.knob_restriction(config, SM90, ALL)
    if warps < 8 and stages > 1:
        assert why == (f"unsupported: warp specialization of a pipelined loop needs 8 or more warps; with {warps}, "
                       f"Triton's warp-specialization pass fails (3.6 and 3.9)")
    else:
        assert why is None
    assert WS_MIN_WARPS == 8
    assert triton_fwd.knob_restriction(FwdConfig(128, 128, warps, stages, tma=True), SM90, ALL) is None


@pytest.mark.parametrize("knobs, what", [(dict(tma=True), "TMA needs"),
                                         (dict(warp_specialize=True, num_stages=1), "warp specialization needs")])
def test_hopper_knobs_start_at_sm_90(knobs, what):
    config = FwdConfig(**{**dict(block_m=128, block_n=64, num_warps=8, num_stages=2), **knobs})
    for capability in (80, 86, 89):
        why = triton_fwd.knob_restriction(config, GpuSpec.from_name(f"sm_{capability}"), ALL)
        assert why is not None and why.startswith(f"unsupported: {what} sm_90 or later; sm_{capability}"), why
    for target in ("sm_90", "sm_100"):
        assert triton_fwd.knob_restriction(config, GpuSpec.from_name(target), ALL) is None
    assert "Triton 1.0" in triton_fwd.knob_restriction(config, SM90, NONE)


def test_a_register_cap_needs_a_triton_that_has_it_on_any_target():
    config = FwdConfig(128, 64, 8, 2, maxnreg=128)
    assert triton_fwd.knob_restriction(config, SM89, ALL) is None
    assert triton_fwd.knob_restriction(config, SM89, NONE) == "unsupported: Triton 1.0 has no maxnreg option"


@pytest.mark.parametrize("capability, warps, block_m, wgmma", [
    (89, 4, 64, False), (90, 4, 64, True), (100, 8, 128, True), (119, 4, 64, True), (120, 4, 64, False),
    (90, 2, 64, False), (90, 8, 64, True), (90, 16, 64, True), (90, 4, 32, False), (90, 1, 128, False)])
def test_wgmma_is_hoppers_path_for_warp_groups_and_tiles_of_64_rows(capability, warps, block_m, wgmma):
    gpu = GpuSpec.from_name("sm_90")
    gpu = type(gpu)(**{**gpu.__dict__, "capability": capability}) if capability != 90 else gpu
    assert triton_fwd.uses_wgmma(FwdConfig(block_m, 64, warps, 2), gpu) is wgmma


def test_forward_registers_at_the_cap_pass_and_one_step_under_it_fail():
    # S [128, 64] and O [128, 64] in fp32 over 128 threads: exactly 128 registers each
    assert triton_fwd.restriction(FwdConfig(128, 64, 4, 2, maxnreg=128), 64) is None
    assert "maxnreg 120" in triton_fwd.restriction(FwdConfig(128, 64, 4, 2, maxnreg=120), 64)
    # 256 x 128 and 256 x 64 over 64 threads: 768 > 255 with no cap at all
    assert triton_fwd.restriction(FwdConfig(256, 128, 2, 1), 64).startswith("registers: S and O accumulators alone "
                                                                           "need 768 per thread > 255")
    assert triton_fwd.restriction(FwdConfig(128, 64, 32, 1), 64) is None           # 1024 threads: the most
    assert triton_fwd.restriction(FwdConfig(16, 16, 2, 1), 16) is None              # 2 mma tiles, 2 warps
    assert triton_fwd.restriction(FwdConfig(16, 16, 4, 1), 16).startswith("warps: 4 warps for 2 mma tiles")


def _bwd(key: str) -> TritonBwdConfig:
    return TritonBwdConfig.parse(key)


def test_backward_registers_count_two_accumulators_in_the_dk_dv_kernel_and_one_in_the_dq_pass():
    # dK/dV: (2 * 64 * 64 + 2 * 64 * 64) / 128 threads = 128 registers; dQ pass: (64 * 64 + 2 * 64 * 64) / 128 = 96
    assert triton_bwd.restriction(_bwd("64x64_w4_s1_q64x64_w4_s1_r128"), 64) is None
    assert "dK/dV kernel's accumulators" in triton_bwd.restriction(_bwd("64x64_w4_s1_q64x64_w4_s1_r120"), 64)
    assert triton_bwd.restriction(_bwd("16x16_w2_s1_q64x64_w4_s1_r96"), 64) is None
    assert "dQ pass's accumulators" in triton_bwd.restriction(_bwd("16x16_w2_s1_q64x64_w4_s1_r88"), 64)
    # the dK/dV kernel holds keys down (block_n rows of dK, dV): (2 * 128 * 128 + 2 * 128 * 16) / 128 = 288
    assert "dK/dV kernel's accumulators" in triton_bwd.restriction(_bwd("16x128_w4_s1_q32x32_w4_s1"), 128)
    assert triton_bwd.restriction(_bwd("128x16_w4_s1_q32x32_w4_s1"), 128) is None
    assert triton_bwd.restriction(_bwd("32x16_w4_s1_q32x32_w4_s1"), 64) is None         # 1 x 4 mma tiles
    assert "4 mma tiles" in triton_bwd.restriction(_bwd("32x16_w8_s1_q32x32_w4_s1"), 64)
    # with the dQ accumulated (dq_mode 1, 2) the dQ pass's tiles never count
    assert triton_bwd.restriction(_bwd("16x16_w2_s1_q64x64_w4_s1_dq1_r88"), 64) is None


@pytest.mark.parametrize("key, reason", [
    ("64x64_w4_s2_q64x64_w4_s2_tma", "unsupported: TMA loads need sm_90 or later; sm_89 has none"),
    ("64x64_w4_s2_q64x64_w4_s2_dq2", "unsupported: dq_mode tma (TMA reduce-add) need sm_90 or later; sm_89 has none"),
    ("64x64_w4_s2_q64x64_w4_s2_r128", None), ("64x64_w4_s2_q64x64_w4_s2_dq1_p2", None)])
def test_backward_knobs_on_ada(key, reason):
    assert triton_bwd.knob_restriction(_bwd(key), SM89, ALL) == reason
    if reason is None:
        assert triton_bwd.knob_restriction(_bwd(key), SM90, ALL) is None


def test_backward_knobs_a_triton_lacks_name_its_version():
    assert "Triton 1.0 lacks" in triton_bwd.knob_restriction(_bwd("64x64_w4_s2_q64x64_w4_s2_tma"), SM90, NONE)
    assert "Triton 1.0 lacks" in triton_bwd.knob_restriction(_bwd("64x64_w4_s2_q64x64_w4_s2_dq2"), SM90, NONE)
    assert "no maxnreg" in triton_bwd.knob_restriction(_bwd("64x64_w4_s2_q64x64_w4_s2_r128"), SM90, NONE)
    assert triton_bwd.knob_restriction(_bwd("64x64_w4_s2_q64x64_w4_s2_dq2_tma_r128_p1"), SM90, ALL) is None

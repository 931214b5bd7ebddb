"""The budget check: GPU specs, the shared-memory model against the compiler, verdicts."""

import json

import pytest
import torch

from tuner import budget
from tuner.budget import CompileInfo
from tuner.budget.__main__ import main as budget_main
from tuner.gpus import GpuSpec, valid_names
from tuner.kernels import TritonFeatures
from tuner.kernels.triton_fwd import KERNEL, TMA_BARRIERS, FwdConfig as Config, knob_restriction, restriction
from tuner.problem import Problem
from tuner.status import Status

SM89, SM90 = GpuSpec.from_name("sm_89"), GpuSpec.from_name("sm_90")


def test_gpu_lookup_by_target_card_and_alias():
    assert GpuSpec.from_name("sm_89").smem_per_block_optin == 101376
    assert GpuSpec.from_name("SM_90").smem_per_block_optin == 232448
    assert GpuSpec.from_name("rtx4070super").name == "sm_89"
    assert GpuSpec.from_name("RTX-4090").sm_count == 128
    assert GpuSpec.from_name("h200").mem_bandwidth_gbs == 4800.0
    assert GpuSpec.from_name("a100").name == "sm_80"
    # the opt-in limits CCCL gives per architecture (design notes), byte for byte
    assert {s.name: s.smem_per_block_optin for s in __import__("tuner.gpus").gpus.targets()} == {
        "sm_80": 166912, "sm_86": 101376, "sm_89": 101376, "sm_90": 232448, "sm_100": 232448, "sm_120": 101376}


def test_unknown_gpu_lists_valid_names():
    with pytest.raises(ValueError) as excinfo:
        GpuSpec.from_name("rtx9999")
    assert "rtx9999" in str(excinfo.value)
    for name in ("sm_89", "rtx4090", "auto"):
        assert name in str(excinfo.value) and name in valid_names()


def test_restrictions_are_pure_and_explain():
    assert restriction(Config(128, 64, 8, 3), 64) is None
    assert restriction(Config(256, 256, 1, 1), 64).startswith("registers")
    assert restriction(Config(16, 16, 16, 1), 64).startswith("warps")
    assert restriction(Config(256, 256, 64, 1), 64).startswith("threads: 64 warps are 2048 threads")
    assert restriction(Config(256, 256, 32, 1), 64) is None          # 1024 threads: the most a block holds


# ----------------------------------------------------------- verdicts at their boundaries

LIMIT = 101376          # sm_89's opt-in shared memory per block


@pytest.mark.parametrize("config, info, expected, fragment", [
    (Config(64, 64, 4, 2), CompileInfo(shared_bytes=LIMIT - 1, registers=128), Status.FITS, "101375 B <= 101376"),
    (Config(64, 64, 4, 2), CompileInfo(shared_bytes=LIMIT, registers=128), Status.FITS, "101376 B <= 101376"),
    (Config(64, 64, 4, 2), CompileInfo(shared_bytes=LIMIT + 1, registers=128), Status.OVER_SMEM,
     "needs 101377 B > 101376 B"),
    (Config(64, 64, 4, 2), CompileInfo(shared_bytes=LIMIT - 1024, static_shared_bytes=1024, registers=128),
     Status.FITS, "100352 B <= 100352"),
    (Config(64, 64, 4, 2), CompileInfo(shared_bytes=LIMIT - 1023, static_shared_bytes=1024, registers=128),
     Status.OVER_SMEM, "needs 100353 B > 100352 B"),
    (Config(128, 64, 16, 2), CompileInfo(shared_bytes=1024, registers=128), Status.FITS, "128 registers"),
    (Config(128, 64, 16, 2), CompileInfo(shared_bytes=1024, registers=129), Status.OVER_REGISTERS,
     "129 registers x 512 threads = 66048 > 65536"),
    (Config(64, 64, 4, 2), CompileInfo(shared_bytes=1024, registers=255, spill_bytes=8), Status.SPILLS,
     "spills 8 B"),
    (Config(64, 64, 4, 2), CompileInfo(error="PTXASError: Insufficient registers"), Status.COMPILE_ERROR,
     "Insufficient registers"),
    (Config(256, 256, 64, 1), None, Status.INVALID, "num_warps=64 is not allowed (powers of two only); use one of"),
    (Config(256, 256, 1, 1), None, Status.OVER_REGISTERS, "registers: S and O"),
    (Config(16, 16, 16, 1), None, Status.INVALID, "warps"),
])
def test_verdict_boundaries(config, info, expected, fragment):
    result = budget.verdict(config, Problem(head_dim=64), SM89, info)
    assert result.verdict == expected and fragment in result.reason, result
    assert result.launchable is (expected in (Status.FITS, Status.SPILLS))


def test_the_model_alone_rejects_one_byte_over():
    """A config whose model bytes are exactly the limit fits; the model is tested at the limit too."""
    problem = Problem(head_dim=128)
    fits = budget.verdict(Config(128, 64, 8, 3), problem, SM89, None)       # 98304 B
    over = budget.verdict(Config(128, 64, 8, 4), problem, SM89, None)       # 131072 B
    assert fits.verdict == Status.FITS and fits.model_bytes == 98304
    assert over.verdict == Status.OVER_SMEM and "model needs 131072 B > 101376 B" in over.reason


def test_config_parse():
    assert Config.parse("128,64,8,3") == Config(128, 64, 8, 3)
    assert Config.parse("128x64_w8_s3") == Config(128, 64, 8, 3)
    with pytest.raises(ValueError, match="BM,BN,WARPS,STAGES"):
        Config.parse("128,64")


def test_over_budget_on_sm89_with_the_right_numbers():
    """128x64 tiles at D=128 with 4 stages: 3 x (K+V) + Q = 131072 B > 101376 B."""
    problem = Problem(head_dim=128)
    result = budget.check(Config(128, 64, 8, 4), problem, SM89)
    assert result.verdict == Status.OVER_SMEM
    assert result.compiled_bytes == 131072 == result.model_bytes
    assert result.limit_bytes == 101376 - 0
    assert "needs 131072 B > 101376 B on sm_89" in result.reason


def test_fits_sm90_but_not_sm89():
    problem = Problem(head_dim=128)
    config = Config(128, 128, 8, 3)
    on_89 = budget.check(config, problem, SM89)
    on_90 = budget.check(config, problem, SM90)
    assert on_89.verdict == Status.OVER_SMEM and on_89.compiled_bytes > SM89.smem_per_block_optin
    assert on_90.launchable, on_90.reason
    assert on_90.compiled_bytes <= on_90.limit_bytes < SM90.smem_per_block_optin + 1
    assert on_90.registers and on_90.registers <= 255


def test_compile_results_are_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("FA2_TUNER_CACHE", str(tmp_path))
    problem = Problem(head_dim=32, n_q=512, n_k=512)
    first = budget.check(Config(32, 32, 2, 2), problem, SM89)
    files = list((tmp_path / "budget").glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["shared_bytes"] == first.compiled_bytes
    assert budget.check(Config(32, 32, 2, 2), problem, SM89) == first


MODEL_SAMPLE = [Config(bm, bn, w, s) for bm in (16, 64, 128) for bn in (32, 64, 128)
                for w in (1, 4, 8) for s in (1, 2, 3, 5)]


# TMA and the persistent grid, on Hopper (TMA needs sm_90)
KNOB_SAMPLE = [Config(bm, bn, w, s, tma=tma, persistent=p) for bm in (64, 128) for bn in (32, 64, 128)
               for w in (4, 8) for s in (1, 2, 3) for tma, p in ((True, 0), (False, 2), (True, 2))]


@pytest.mark.parametrize("target", ["sm_80", "sm_89", "sm_90"])
def test_model_matches_compiler_sample(target):
    _assert_model_matches(GpuSpec.from_name(target), [c for c in MODEL_SAMPLE if restriction(c, 64) is None], 64)


def test_model_bounds_the_compiler_with_knobs_on_hopper():
    _assert_model_matches(GpuSpec.from_name("sm_90"), KNOB_SAMPLE, 128)


@pytest.mark.slow
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("target", ["sm_80", "sm_89", "sm_90"])
def test_model_matches_compiler_whole_space(target, head_dim):
    _assert_model_matches(GpuSpec.from_name(target), KERNEL.space().configs(head_dim), head_dim)


# What ptxas says where a config's instructions need more registers than a thread may have (Triton
# 3.9 on sm_90: e.g. 256x256_w16_s3): the compiler's refusal, a recorded compile error, not the model's.
PTXAS_REGISTERS = "Insufficient registers"


def _assert_model_matches(gpu, configs, head_dim):
    """Exact agreement, byte for byte, between the model and the compiler; with TMA on
    Hopper, the model over the compiler by the barriers' placement only (at most 1 KB). Every
    config the rules let through compiles, or ptxas refuses it for registers (nothing else)."""
    results = budget.check_many(configs, Problem(head_dim=head_dim), gpu)

    def off(r):
        if r.config.tma and gpu.capability >= 90:
            # Triton 3.9 places no barrier block at all for some one-stage TMA configs: the whole 1 KB
            return not 0 <= r.model_bytes - r.compiled_bytes <= TMA_BARRIERS
        return r.model_bytes != r.compiled_bytes
    wrong = [(r.config.key, r.model_bytes, r.compiled_bytes) for r in results
             if r.compiled_bytes is not None and off(r)]
    compiled = sum(r.compiled_bytes is not None for r in results)
    judged = [r for r in results if restriction(r.config, head_dim) is None and knob_restriction(r.config, gpu) is None]
    refused = [r for r in judged if r.compiled_bytes is None]
    assert all(r.verdict == Status.COMPILE_ERROR and PTXAS_REGISTERS in r.reason for r in refused), [
        (r.config.key, r.verdict, r.reason[:200]) for r in refused if PTXAS_REGISTERS not in r.reason][:5]
    assert compiled + len(refused) == len(judged)
    assert len(refused) <= len(judged) // 20, f"ptxas refused {len(refused)} of {len(judged)} configs"
    assert not wrong, f"{len(wrong)} of {compiled} disagree on {gpu.name} D={head_dim}: {wrong[:10]}"


def test_cli_bad_gpu_exits_2(capsys):
    assert budget_main(["--gpu", "gtx480"]) == 2
    err = capsys.readouterr().err
    assert "--gpu" in err and "sm_89" in err


def test_cli_single_config_json(capsys):
    assert budget_main(["--gpu", "sm_89", "--head-dim", "128", "--config", "128,64,8,4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] == 0 and out["results"][0]["verdict"] == "over_smem"


def test_cli_names_too_many_threads_not_registers(capsys):
    assert budget_main(["--gpu", "sm_89", "--config", "256,256,64,1", "--model-only"]) == 2     # a bad input
    captured = capsys.readouterr()
    assert "error: --config 256,256,64,1: num_warps=64 is not allowed" in captured.err, captured.err
    line = [ln for ln in captured.out.splitlines() if "256x256_w64_s1" in ln][0]
    # 64 warps are outside the kernel's values, which the verdict names first (its thread rule: restriction())
    assert "invalid: num_warps=64 is not allowed (powers of two only); use one of 1, 2, 4, 8, 16" in line
    assert "registers" not in line


# ------------------------------------------------------------------------------- GPU only


@pytest.mark.gpu
def test_launcher_and_cross_compiler_specialise_alike():
    """The JIT's binary for a launch equals the budget's cross-compile for that problem."""
    import kernel

    gpu = GpuSpec.from_name("auto")
    for config in (Config(128, 64, 8, 3), Config(64, 32, 4, 2), Config(16, 16, 1, 1),
                   Config(128, 128, 8, 3, tma=True, persistent=2), Config(128, 64, 8, 3, maxnreg=168),
                   Config(128, 128, 8, 3, tma=True, warp_specialize=True)):
        problem = Problem(batch=2, heads=8, n_q=1024, n_k=1024, head_dim=64)
        q, k, v = (torch.randn(2, 8, 1024, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        kernel.flash_attn_fwd(q, k, v, **config.as_kwargs())
        launch = (config.block_m, config.block_n, config.num_warps, config.num_stages, config.tma,
                  config.warp_specialize, config.maxnreg or None, config.persistent)
        compiled = kernel.plan_for(kernel.JIT_KERNEL, launch, q, k, v).compiled
        info = budget.compile_config(budget.CompileTask(config, problem, gpu.capability))
        assert compiled.metadata.shared == info.shared_bytes
        assert compiled.n_regs == info.registers


NEAREST = 24      # configs on each side of the shared-memory limit whose verdicts are put to the device


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 128])
def test_verdicts_nearest_the_limit_hold_on_the_device(head_dim):
    """The configs the model puts nearest the shared-memory limit, on both sides: every one judged launchable
    launches (no NaN), every one judged over shared memory fails to. A model a few bytes off moves a verdict
    there first; configs far from the limit would add minutes of JIT compiles and test nothing more (the whole
    space, 924 launches, held a worker past 420 s on 2026-12-04)."""
    from triton.runtime.errors import OutOfResources

    import kernel

    gpu = GpuSpec.from_name("auto")
    problem = Problem(batch=1, heads=2, n_q=512, n_k=512, head_dim=head_dim)
    limit = budget.smem_limit(None, gpu)
    judged = [budget.verdict(c, problem, gpu, None) for c in KERNEL.space().all_configs()]   # the model alone
    by_model = sorted((r for r in judged if r.launchable or r.verdict == Status.OVER_SMEM), key=lambda r: r.model_bytes)
    below = [r.config for r in by_model if r.model_bytes <= limit][-NEAREST:]
    above = [r.config for r in by_model if r.model_bytes > limit][:NEAREST]
    results = budget.check_many(below + above, problem, gpu)
    q, k, v = (torch.randn(1, 2, 512, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    counts = {"launched": 0, "over_smem_failed": 0}
    for r in results:
        if r.launchable:
            out, _ = kernel.flash_attn_fwd(q, k, v, **r.config.as_kwargs())
            torch.cuda.synchronize()
            assert not torch.isnan(out).any(), r.config.key
            counts["launched"] += 1
        elif r.verdict == Status.OVER_SMEM:
            with pytest.raises((OutOfResources, RuntimeError)):
                kernel.flash_attn_fwd(q, k, v, **r.config.as_kwargs())
                torch.cuda.synchronize()
            counts["over_smem_failed"] += 1
    by_verdict = {}
    for r in results:
        by_verdict[str(r.verdict)] = by_verdict.get(str(r.verdict), 0) + 1
    print(f"\n{gpu.name} D={head_dim}: {by_verdict}; {counts}")
    assert counts["launched"] >= NEAREST // 2 and counts["over_smem_failed"] >= NEAREST // 2, by_verdict


# ------------------------------------------------------------------------- knob rules


@pytest.mark.parametrize("knobs, reason", [
    (dict(tma=True), "unsupported: TMA needs sm_90 or later; sm_89 has none"),
    (dict(warp_specialize=True), "unsupported: warp specialization needs sm_90 or later; sm_89 has none"),
])
def test_hopper_knobs_are_unsupported_on_ada_before_any_compile(knobs, reason, monkeypatch):
    from tuner.budget import _compile

    monkeypatch.setattr(_compile, "_compile_unit", lambda unit, *_: pytest.fail(f"compiled {unit.name}"))
    result = budget.check(Config(64, 64, 4, 2, **knobs), Problem(), GpuSpec.from_name("sm_89"))
    assert result.verdict == "unsupported" and result.reason == reason and result.compiled_bytes is None


def test_warp_specialization_at_four_warps_is_refused_before_the_compiler_fails():
    gpu = GpuSpec.from_name("sm_90")
    assert "8 or more warps" in knob_restriction(Config(64, 64, 4, 3, tma=True, warp_specialize=True), gpu)
    assert knob_restriction(Config(64, 64, 4, 1, tma=True, warp_specialize=True), gpu) is None
    assert knob_restriction(Config(128, 64, 8, 3, tma=True, warp_specialize=True), gpu) is None


def test_the_plain_kernel_and_a_persistent_grid_stay_supported_on_ada():
    gpu = GpuSpec.from_name("sm_89")
    assert knob_restriction(Config(64, 64, 4, 2, persistent=2), gpu) is None
    assert knob_restriction(Config(64, 64, 4, 2, maxnreg=168), gpu) is None


def test_knobs_a_triton_version_lacks_drop_out_naming_the_version():
    old = TritonFeatures(version="3.2.0", tensor_descriptors=False, warp_specialize=False, maxnreg=False)
    gpu = GpuSpec.from_name("sm_90")
    assert "Triton 3.2.0 lacks" in knob_restriction(Config(64, 64, 4, 2, tma=True), gpu, old)
    assert "Triton 3.2.0 lacks" in knob_restriction(Config(64, 64, 4, 2, warp_specialize=True), gpu, old)
    assert "no maxnreg option" in knob_restriction(Config(64, 64, 4, 2, maxnreg=128), gpu, old)
    assert knob_restriction(Config(128, 64, 8, 2, tma=True, warp_specialize=True, maxnreg=128), gpu) is None


def test_a_register_cap_below_the_accumulators_is_restricted():
    # S [128, 128] and O [128, 128] fp32 over 128 threads: 256 registers each, over any cap
    assert "maxnreg 128" in restriction(Config(128, 64, 4, 2, maxnreg=128), 128)
    assert restriction(Config(128, 64, 8, 2, maxnreg=168), 128) is None


def test_the_compile_sees_the_knobs(tmp_path, monkeypatch):
    """TMA, a persistent grid and a register cap each compile to another binary than the
    plain config's (a cache key or a compile that dropped a knob would make them equal)."""
    monkeypatch.setenv("FA2_TUNER_CACHE", str(tmp_path))
    gpu, problem = GpuSpec.from_name("sm_90"), Problem(head_dim=128)
    configs = [Config(128, 128, 8, 2), Config(128, 128, 8, 2, tma=True), Config(128, 128, 8, 2, persistent=2),
               Config(128, 128, 8, 2, maxnreg=168), Config(128, 128, 8, 2, persistent=1)]
    results = budget.check_many(configs, problem, gpu, jobs=1)
    binaries = [budget.compile_config(budget.CompileTask(c, problem, 90)).binary for c in configs]
    # persistent 1 and 2 compile to one cubin, but launch different grids: never "the same binary"
    assert len(set(binaries)) == 5
    assert results[3].registers <= 168 < results[0].registers


@pytest.mark.parametrize("config, fragment", [
    ("64x64_w4_s2_r7", "maxnreg=7 is not allowed; use one of 0, 24, 32, ..., 248"),
    ("99999999999999999999,64,4,2", "block_m=99999999999999999999 is not allowed (powers of two only); use one of "
                                    "16, 32, 64, 128, 256"),
])
def test_a_config_outside_the_kernels_values_is_invalid_naming_the_field(config, fragment, capsys):
    """As the kernel API refuses it (ValueError naming the field), not a register verdict its rules reach first."""
    result = budget.verdict(Config.parse(config), Problem(head_dim=16, dtype="fp32"), SM89, None)
    assert result.verdict == Status.INVALID and result.reason.startswith(fragment), result
    assert budget_main(["--gpu", "sm_89", "--head-dim", "16", "--dtype", "fp32", "--model-only",
                        "--config", config]) == 2
    out = capsys.readouterr().out
    assert f"invalid: {fragment}" in out and "over_registers" not in out, out

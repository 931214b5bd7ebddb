"""The budget check: GPU specs, the shared-memory model against the compiler, verdicts."""

import json

import pytest
import torch

from tuner import budget
from tuner.budget import Problem
from tuner.gpus import GpuSpec, valid_names
from tuner.space import Config, SearchSpace, restriction

SM89, SM90 = GpuSpec.from_name("sm_89"), GpuSpec.from_name("sm_90")


def test_gpu_lookup_by_target_card_and_alias():
    assert GpuSpec.from_name("sm_89").smem_per_block_optin == 101376
    assert GpuSpec.from_name("SM_90").smem_per_block_optin == 232448
    assert GpuSpec.from_name("rtx4070super").name == "sm_89"
    assert GpuSpec.from_name("RTX-4090").sm_count == 128
    assert GpuSpec.from_name("h200").mem_bandwidth_gbs == 4800.0
    assert GpuSpec.from_name("a100").name == "sm_80"
    for spec in budget_targets():
        assert spec.regs_per_sm == 65536 and spec.smem_per_sm - spec.smem_per_block_optin == 1024


def budget_targets():
    from tuner.gpus import targets
    return targets()


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


def test_config_parse():
    assert Config.parse("128,64,8,3") == Config(128, 64, 8, 3)
    assert Config.parse("128x64_w8_s3") == Config(128, 64, 8, 3)
    with pytest.raises(ValueError, match="BM,BN,WARPS,STAGES"):
        Config.parse("128,64")


def test_over_budget_on_sm89_with_the_right_numbers():
    """128x64 tiles at D=128 with 4 stages: 3 x (K+V) + Q = 131072 B > 101376 B."""
    problem = Problem(head_dim=128)
    result = budget.check(Config(128, 64, 8, 4), problem, SM89)
    assert result.verdict == budget.OVER_SMEM
    assert result.compiled_bytes == 131072 == result.model_bytes
    assert result.limit_bytes == 101376 - 0
    assert "needs 131072 B > 101376 B on sm_89" in result.reason


def test_fits_sm90_but_not_sm89():
    problem = Problem(head_dim=128)
    config = Config(128, 128, 8, 3)
    on_89 = budget.check(config, problem, SM89)
    on_90 = budget.check(config, problem, SM90)
    assert on_89.verdict == budget.OVER_SMEM and on_89.compiled_bytes > SM89.smem_per_block_optin
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


@pytest.mark.parametrize("target", ["sm_80", "sm_89", "sm_90"])
def test_model_matches_compiler_sample(target):
    _assert_model_matches(GpuSpec.from_name(target), [c for c in MODEL_SAMPLE if restriction(c, 64) is None], 64)


@pytest.mark.slow
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("target", ["sm_80", "sm_89", "sm_90"])
def test_model_matches_compiler_whole_space(target, head_dim):
    _assert_model_matches(GpuSpec.from_name(target), SearchSpace().configs(head_dim), head_dim)


def _assert_model_matches(gpu, configs, head_dim):
    """Exact agreement, byte for byte, between the model and the compiler."""
    results = budget.check_many(configs, Problem(head_dim=head_dim), gpu)
    wrong = [(r.config.key, r.model_bytes, r.compiled_bytes) for r in results
             if r.compiled_bytes is not None and r.model_bytes != r.compiled_bytes]
    compiled = sum(r.compiled_bytes is not None for r in results)
    assert compiled == len(configs)
    assert not wrong, f"{len(wrong)} of {compiled} disagree on {gpu.name} D={head_dim}: {wrong[:10]}"


def test_cli_bad_gpu_exits_2(capsys):
    assert budget.main(["--gpu", "gtx480"]) == 2
    err = capsys.readouterr().err
    assert "--gpu" in err and "sm_89" in err


def test_cli_single_config_json(capsys):
    assert budget.main(["--gpu", "sm_89", "--head-dim", "128", "--config", "128,64,8,4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] == 0 and out["results"][0]["verdict"] == "over_smem"


# ------------------------------------------------------------------------------- GPU only


@pytest.mark.gpu
def test_launcher_and_cross_compiler_specialise_alike():
    """The JIT's binary for a launch equals the budget's cross-compile for that problem."""
    import kernel

    gpu = GpuSpec.from_name("auto")
    for config in (Config(128, 64, 8, 3), Config(64, 32, 4, 2), Config(16, 16, 1, 1)):
        problem = Problem(batch=2, heads=8, n_q=1024, n_k=1024, head_dim=64)
        q, k, v = (torch.randn(2, 8, 1024, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        _, _, compiled = kernel.flash_attn_fwd(q, k, v, **config.as_kwargs(), _return_compiled=True)
        info = budget.compile_config(config, problem, gpu.capability)
        assert compiled.metadata.shared == info.shared_bytes
        assert compiled.n_regs == info.registers


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 128])
def test_verdicts_hold_on_the_device(head_dim):
    """Every config judged launchable launches; every one judged over shared memory fails."""
    import kernel
    from triton.runtime.errors import OutOfResources

    gpu = GpuSpec.from_name("auto")
    problem = Problem(batch=1, heads=2, n_q=512, n_k=512, head_dim=head_dim)
    results = budget.check_many(SearchSpace().all_configs(), problem, gpu,
                                progress=lambda done, total: done % 50 == 0 and print(f"compiled {done}/{total}", flush=True))
    q, k, v = (torch.randn(1, 2, 512, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    counts = {"launched": 0, "over_smem_failed": 0}
    for r in results:
        if r.launchable:
            out, _ = kernel.flash_attn_fwd(q, k, v, **r.config.as_kwargs())
            torch.cuda.synchronize()
            assert not torch.isnan(out).any(), r.config.key
            counts["launched"] += 1
        elif r.verdict == budget.OVER_SMEM:
            with pytest.raises((OutOfResources, RuntimeError)):
                kernel.flash_attn_fwd(q, k, v, **r.config.as_kwargs())
                torch.cuda.synchronize()
            counts["over_smem_failed"] += 1
    by_verdict = {}
    for r in results:
        by_verdict[r.verdict] = by_verdict.get(r.verdict, 0) + 1
    print(f"\n{gpu.name} D={head_dim}: {by_verdict}; {counts}")
    assert counts["launched"] == sum(r.launchable for r in results)

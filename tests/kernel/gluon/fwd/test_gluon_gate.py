"""The Gluon forward's gates, on any Triton and any machine: the version and device gate, the
config checks, the TMA stride rules, the shared-memory model's arithmetic, and the benchmark's
own check and table (``kernel/gluon/fwd/launch.py``, ``gluon_config.py``, ``benchmarks/gluon.py``).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import ROOT

from kernel.gluon.api import GluonUnavailable, gluon_api_support, gluon_support
from kernel.gluon.fwd.config import GLUON_DEFAULTS, VARIANTS, GluonConfig, default_gluon_config, gluon_configs
from kernel.gluon.fwd.launch import flash_attn_fwd_gluon, supported

API_REASON = gluon_api_support()
RUN_REASON = gluon_support() if torch.cuda.is_available() else "needs a CUDA GPU"


def test_the_smem_model_counts_tiles_and_barriers():
    from kernel.gluon.fwd.config import smem_bytes

    # 128x64 Q + 2 stages of 128x64 K and V, bf16; then 2 + 2 + 1 barriers of 8 bytes, 16-aligned.
    assert smem_bytes(GluonConfig("pipelined", 128, 128, 2), 64) == 16384 + 65536 + 16 + 16 + 8
    # Each consumer's 64x128 Q and output; 2 stages; captures, 14 barriers, a word per worker.
    assert smem_bytes(GluonConfig("ws", 128, 128, 2), 128) == 131072 + 65536 + 288 + 7 * 16 + 8


def test_every_listed_config_fits_and_the_defaults_are_listed():
    for d in (64, 128):
        configs = gluon_configs(d)
        assert configs and all(not c.problems(d) for c in configs)
        for variant in VARIANTS:
            assert GLUON_DEFAULTS[variant][(d, False)] in configs
    over = GluonConfig("pipelined", 128, 128, num_stages=4)
    assert "shared memory" in " ".join(over.problems(128))


@pytest.mark.parametrize("config, message", [
    (GluonConfig(variant="tma"), "variant"),
    (GluonConfig(block_m=32), "block_m"),
    (GluonConfig(num_stages=0), "num_stages"),
    (GluonConfig("ws", overlap=False, pingpong=True), "pingpong"),
    (GluonConfig("ws", consumer_regs=250), "consumer_regs"),
    (GluonConfig(persistent=-1), "persistent"),
])
def test_bad_configs_name_the_knob(config, message):
    assert message in " ".join(config.problems(64))


def test_a_call_that_sets_another_query_tile_gets_that_tile_s_schedule():
    """Three consumers (192 rows) run in order at 152 registers, two overlapped in turns at 240: a
    call that asks for the other tile than the default's gets that tile's knobs, unless it sets them."""
    from kernel.gluon.fwd.launch import config_from

    knobs = dict.fromkeys(("block_m", "block_n", "num_stages", "overlap", "pingpong", "persistent"))
    for d, causal in GLUON_DEFAULTS["ws"]:
        default = GLUON_DEFAULTS["ws"][(d, causal)]
        assert config_from("ws", d, causal, knobs) == default
        assert config_from("ws", d, causal, knobs | dict(block_n=64)).block_m == default.block_m
        three = config_from("ws", d, causal, knobs | dict(block_m=192))
        assert (three.overlap, three.pingpong, three.consumer_regs) == (False, False, 152), (d, causal)
        two = config_from("ws", d, causal, knobs | dict(block_m=128))
        assert (two.overlap, two.pingpong, two.consumer_regs) == (True, True, 240), (d, causal)
        assert three.num_stages == two.num_stages == default.num_stages        # the rest stays the default's
    assert config_from("ws", 64, True, knobs | dict(block_m=192, overlap=True)).overlap is True
    assert not config_from("ws", 64, True, knobs | dict(block_m=192)).problems(64)


def test_only_head_dims_64_and_128():
    assert "head dim 96" in " ".join(GluonConfig().problems(96))


def test_the_gate_names_what_is_missing():
    reason = gluon_support(capability=89)
    assert reason is not None and ("sm_89" in reason or "Triton" in reason)
    if API_REASON is not None:
        assert "Triton" in API_REASON and "lacks" in API_REASON or "has no Gluon" in API_REASON
        assert gluon_support(capability=90) == API_REASON
    assert supported()["unsupported_here"] == gluon_support()


def test_without_gluon_the_module_imports_and_says_what_is_missing():
    script = textwrap.dedent("""
        import sys
        sys.modules["triton.experimental.gluon"] = None          # a Triton without Gluon
        import torch
        import benchmarks.gluon, kernel.gluon.fwd.compile, kernel.gluon.fwd.kernel_ws
        from kernel.gluon.api import GluonUnavailable, gluon_support
        from kernel.gluon.fwd.launch import flash_attn_fwd_gluon
        assert "has no Gluon" in gluon_support(90), gluon_support(90)
        q = torch.zeros(1, 1, 16, 64, dtype=torch.bfloat16)
        try:
            flash_attn_fwd_gluon(q, q, q)
        except GluonUnavailable as exc:
            print("refused:", exc)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "refused: Triton" in result.stdout and "has no Gluon" in result.stdout


def testtma_strides_take_any_aligned_layout_and_refuse_the_rest():
    from kernel.gluon.fwd.launch import tma_strides

    bf16 = dict(dtype=torch.bfloat16)
    assert tma_strides("q", torch.empty(2, 3, 5, 64, **bf16)) == [960, 320, 64, 1]
    # [B, N, H, D] seen as [B, H, N, D] (a transposed view) needs no copy.
    assert tma_strides("q", torch.empty(2, 5, 3, 64, **bf16).transpose(1, 2)) == [960, 64, 192, 1]
    # Dimensions of size 1 are never stepped over: their strides are replaced by legal ones.
    odd = torch.empty(1, 1, 1, 64, **bf16).as_strided((1, 1, 1, 64), (7, 3, 5, 1))
    assert tma_strides("q", odd) == [64, 64, 64, 1]
    with pytest.raises(ValueError, match=r"k.contiguous\(\)"):
        tma_strides("k", torch.empty(2, 1, 5, 64, **bf16).expand(2, 3, 5, 64))       # a stride of 0
    with pytest.raises(ValueError, match="address % 16 = 2"):
        tma_strides("v", torch.empty(2 * 3 * 5 * 64 + 1, **bf16)[1:].view(2, 3, 5, 64))


def test_the_benchmark_checks_and_tabulates():
    from benchmarks.gluon import check_against_sdpa, table

    sdpa = torch.randn(2, 4, 64, 64)
    lse = torch.randn(2, 4, 64)
    assert check_against_sdpa(sdpa.clone(), lse.clone(), (sdpa, 1e-3, lse)) is None
    assert "out rel err" in check_against_sdpa(sdpa * 1.1, lse, (sdpa, 1e-3, lse))
    assert "lse differs" in check_against_sdpa(sdpa, lse + 0.01, (sdpa, 1e-3, lse))
    assert "NaN" in check_against_sdpa(sdpa * float("nan"), lse, (sdpa, 1e-3, lse))
    row = dict(D=64, causal=True, ms=dict(triton=2.0, default=2.5, sdpa_flash=3.0, sdpa_cudnn=1.0, ws=1.0), notes=dict(
        pipelined="CompilationError: boom"), tflops=dict(ws=400.0, default=160.0))
    wide = dict(row, D=128, shape=dict(batch=1, heads=8, n=16384))
    text = table([row, wide], ["pipelined", "ws"], "GPU: test")
    assert "| B4 H8 N4096 | 64 | yes | ws | 1.0000 | 400 | 2.00 | 3.00 | 1.00 |  |" in text
    assert "| B4 H8 N4096 | 64 | yes | pipelined | n/a | 0 | n/a | n/a | n/a | CompilationError: boom |" in text
    assert "| B4 H8 N4096 | 64 | yes | default | 2.5000 | 160 | 0.80 | 1.20 | 0.40 |  |" in text
    assert "| B1 H8 N16384 | 128 | yes | ws | 1.0000 |" in text


def test_the_host_benchmark_tabulates_every_path(monkeypatch):
    from benchmarks import gluon as bench_gluon
    from benchmarks.gluon_host import PATHS, host_table

    row = dict(n=512, D=128, causal=True, variant="ws", work=2.15e9, plan_mode="maps",
               host_us={name: 10.0 + i for i, name in enumerate(PATHS) if name != "routed"}, gpu_ms=dict(gluon=0.0123),
               bit_equal=dict(gluon_plan=True, gluon_rebuilt=False), notes=dict(routed="not routed"))
    text = host_table([row], "GPU: test")
    assert ("| 512 | 128 | yes | 2.15e+09 | 10.0 | 11.0 | n/a | 13.0 | 14.0 | 15.0 | maps | gluon_plan yes, "
            "gluon_rebuilt NO | n/a | 0.0123 | routed: not routed |") in text
    from kernel.route import ROUTE_MIN_FLOPS

    assert f"ROUTE_MIN_FLOPS = {ROUTE_MIN_FLOPS:.3g}" in text
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_gluon.main(["--host"]) == 2


def test_every_benchmark_candidate_is_a_valid_config():
    from dataclasses import replace

    from benchmarks.gluon import CANDIDATES, runs_at

    for name, (variant, overrides) in CANDIDATES.items():
        for d in (64, 128):
            for causal in (False, True):
                config = replace(default_gluon_config(d, causal, variant), **overrides)
                if runs_at(name, d):
                    assert config.problems(d) == [], (name, d)
    assert not runs_at("ws-192", 128) and runs_at("ws-192", 64) and runs_at("ws", 128)


def test_the_benchmark_wants_a_gpu(monkeypatch):
    from benchmarks import gluon as bench_gluon

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_gluon.main([]) == 2


def test_the_benchmark_takes_shapes_and_refuses_a_bad_one_naming_the_flag(capsys):
    from benchmarks import gluon as bench_gluon

    assert bench_gluon.shape_arg("33,4,4096") == dict(batch=33, heads=4, n=4096)
    for bad in ("4,8", "4,8,0", "4,x,4096"):
        with pytest.raises(SystemExit) as stop:
            bench_gluon.main(["--shape", bad])
        assert stop.value.code == 2 and f"--shape {bad!r}: expected BATCH,HEADS,N" in capsys.readouterr().err


@pytest.mark.skipif(RUN_REASON is None, reason="this machine can run the Gluon forward")
def test_calls_without_a_hopper_and_triton_36_raise_gluon_unavailable():
    q = torch.zeros(1, 1, 16, 64, dtype=torch.bfloat16)
    with pytest.raises(GluonUnavailable, match="Triton|CUDA|sm_"):
        flash_attn_fwd_gluon(q, q, q)


def test_benchmarks_time_a_shapes_candidates_together_in_rotating_rounds(monkeypatch):
    """Every candidate measured once per round, ROUNDS rounds, the median kept; the SDPA pins reach
    their candidates (each captured once)."""
    from kernel.measure import retime
    from kernel.measure.retime import TOGETHER_ROUNDS as ROUNDS, time_together

    order, made = [], {}

    class RoundCandidate:
        def __init__(self, calls, pin=None, clock=None):
            self.name, self.pin, self.count = calls[0], pin, 0
            made[self.name] = self

        def settle(self, ms):
            pass

        def measure(self, rep_ms, partner=None):
            self.count += 1
            order.append(self.name)
            return retime.Sample({"a": 1.0, "b": 2.0, "s": 3.0}[self.name] + (0.5 if self.count == 1 else 0.0))

    monkeypatch.setattr(retime, "Candidate", RoundCandidate)
    pin = object()
    ms = time_together({"a": ["a"], "b": ["b"], "s": ["s"]}, {"s": pin})
    assert ms == {"a": 1.0, "b": 2.0, "s": 3.0}                      # the first round's outlier is not the median
    assert len(order) == 3 * ROUNDS and all(order.count(n) == ROUNDS for n in "abs")
    assert order[:3] != order[3:6] and made["s"].pin is pin and made["a"].pin is None


def test_paired_rounds_give_each_candidate_its_ratio_to_the_reference_in_the_same_windows(monkeypatch):
    """Every candidate but the reference measured against it in each window (its ms and the
    reference's), the reference measured alone too; the ratio is the median of the windows' ratios,
    not a ratio of medians (a window where both ran slow leaves it alone)."""
    from kernel.measure import retime
    from kernel.measure.retime import TOGETHER_ROUNDS as ROUNDS, paired_together

    partners = []
    slow = {"a": [1.0, 2.0, 1.0, 1.0, 1.0], "b": [2.0] * ROUNDS, "s": [4.0] * ROUNDS}

    class PairedCandidate:
        pairs = True

        def __init__(self, calls, pin=None, clock=None):
            self.name, self.count = calls[0], 0

        def settle(self, ms):
            pass

        def measure(self, rep_ms, partner=None):
            factor = slow["a"][self.count] if self.name == "a" else 1.0    # a's second window: all ran 2x slow
            ms = slow[self.name][self.count] * (1.0 if self.name == "a" else factor)
            self.count += 1
            partners.append((self.name, None if partner is None else partner.name))
            return retime.Sample(ms, None, None if partner is None else 4.0 * factor)

    monkeypatch.setattr(retime, "Candidate", PairedCandidate)
    ms, versus = paired_together({"a": ["a"], "b": ["b"], "s": ["s"]}, reference="s")
    assert versus == {"a": 4.0, "b": 2.0}
    assert ms["s"] == 4.0 and "s" not in versus
    assert sorted(set(partners)) == [("a", "s"), ("b", "s"), ("s", None)]
    assert len(partners) == 3 * ROUNDS


@pytest.mark.parametrize("missing, named", [("tma_load", "a TMA load"), ("tma_store", "a TMA store"),
                                            ("cta_barrier", "a CTA barrier")])
def test_a_gluon_that_lacks_a_name_the_kernels_use_is_refused_naming_it(monkeypatch, missing, named):
    """The gate is what the modules hold (kernel.gluon.api), never the version: a missing name is
    named, and any version string with every name present passes."""
    import triton

    import kernel.gluon.api as gluon_api

    if gluon_api.GLUON_IMPORT_ERROR is not None:
        pytest.skip(gluon_api.GLUON_IMPORT_ERROR)
    gluon_api.gluon_api_support.cache_clear()
    try:
        monkeypatch.setattr(triton, "__version__", "3.5.0")
        assert gluon_api.gluon_api_support() is None, "the version string decided"
        gluon_api.gluon_api_support.cache_clear()
        monkeypatch.setattr(gluon_api, missing, None)
        reason = gluon_api.gluon_api_support()
    finally:
        gluon_api.gluon_api_support.cache_clear()
    assert reason is not None and named in reason and "Triton 3.5.0" in reason


def test_the_names_that_differ_between_releases_resolve_to_this_gluons():
    """3.8 and 3.9 name the TMA copies async_load / async_store and the barrier gl.barrier (3.9 keeps 3.6's
    names as stubs that raise): the newer name is taken wherever the module holds it."""
    import kernel.gluon.api as gluon_api

    if gluon_api.GLUON_IMPORT_ERROR is not None:
        pytest.skip(gluon_api.GLUON_IMPORT_ERROR)
    tma, gl = gluon_api.tma, gluon_api.gl
    assert gluon_api.tma_load is getattr(tma, "async_load", getattr(tma, "async_copy_global_to_shared", None))
    assert gluon_api.tma_store is getattr(tma, "async_store", getattr(tma, "async_copy_shared_to_global", None))
    assert gluon_api.cta_barrier is getattr(gl, "barrier", getattr(gl, "thread_barrier", None))

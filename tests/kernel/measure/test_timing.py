"""The stopwatches: how many input sets keep the timed loop out of L2, and GPU time by graph replay."""

from __future__ import annotations

import pytest
import torch

from kernel.measure import timing


def test_enough_input_sets_to_hold_twice_the_l2(monkeypatch):
    monkeypatch.setattr(timing, "l2_bytes", lambda: 60 << 20)
    assert timing.input_sets(8 << 20) == 15               # 15 x 8 MiB >= 120 MiB
    assert timing.input_sets(200 << 20) == 1               # one set is already twice the L2
    assert timing.input_sets(1) == timing.MAX_SETS         # capped for tiny shapes


def test_attention_flops_count_the_causal_triangle():
    assert timing.attention_flops(1, 1, 4, 4, 8, False) == 4 * 16 * 8
    assert timing.attention_flops(1, 1, 4, 4, 8, True) == 4 * 16 * 8 * (1 + 2 + 3 + 4) / 16
    assert timing.attention_flops(1, 1, 2, 5, 8, True) == 4 * 10 * 8 * (1 + 2) / 10     # top-left aligned


@pytest.mark.parametrize("n_q, n_k", [(1, 1), (1, 9), (9, 1), (7, 7), (7, 20), (20, 7), (129, 64), (100000, 3)])
def test_the_causal_count_is_the_sum_of_each_querys_kept_keys(n_q, n_k):
    """The closed form against the per-query sum it replaces, wide and tall (and past the old loop's 65,536)."""
    kept = sum(min(i + 1, n_k) for i in range(n_q))
    assert timing.attention_flops(2, 3, n_q, n_k, 16, True) == pytest.approx(4.0 * 2 * 3 * 16 * kept, rel=1e-12)
    assert timing.attention_flops(2, 3, 0, n_k, 16, True) == 0.0 == timing.attention_flops(2, 3, n_q, 0, 16, True)


def test_the_environment_line_names_gpu_driver_versions_and_date():
    line = timing.environment_line({"gpu": "G", "driver": "D", "torch": "T", "triton": "R", "date": "2026"})
    assert line == "GPU: G; driver D; torch T; triton R; 2026"


@pytest.mark.gpu
@pytest.mark.timing
def test_graph_timer_agrees_with_do_bench_at_n_4096():
    """At N=4096 the launcher is a small share of a 0.3 ms kernel, so the two must agree within 3%."""
    from benchmarks.vs_sdpa import make_sets, set_calls

    timing.warm_gpu()
    from tuner.kernels.triton_fwd import FwdConfig
    from tuner.problem import Problem

    problem = Problem(4, 8, 4096, 4096, 64, "bf16", False)
    sets = make_sets(problem)
    calls = set_calls(sets, problem, FwdConfig(128, 64, 8, 3))
    graph = timing.gpu_time(calls, rep_ms=100)
    bench = timing.do_bench_median(calls[0], 25, 200)
    print(f"\ngraph {graph.ms:.4f} ms ({graph.method}, {len(sets)} sets), do_bench {bench:.4f} ms")
    assert graph.method == timing.GRAPH
    assert abs(graph.ms / bench - 1) <= 0.03


@pytest.mark.gpu
@pytest.mark.timing
def test_a_bounded_timing_stops_short_only_past_its_bound_on_a_real_graph():
    """A bound under the call's time ends after the first quarter (cuda_graph_short), one over it
    times the whole window; both figures are the call's time (within the noise of short windows)."""
    from benchmarks.vs_sdpa import make_sets, set_calls
    from tuner.kernels.triton_fwd import FwdConfig
    from tuner.problem import Problem

    problem = Problem(4, 8, 1024, 1024, 64, "bf16", False)
    calls = set_calls(make_sets(problem), problem, FwdConfig(128, 64, 8, 3))
    whole = timing.gpu_time(calls, rep_ms=40)
    short = timing.gpu_time(calls, rep_ms=40, bound_ms=whole.ms / 2)
    full = timing.gpu_time(calls, rep_ms=40, bound_ms=whole.ms * 2)
    print(f"\nwhole {whole.ms:.4f} ms, short {short.ms:.4f} ({short.method}), bounded {full.ms:.4f} ({full.method})")
    assert (whole.method, short.method, full.method) == (timing.GRAPH, timing.GRAPH_SHORT, timing.GRAPH)
    assert abs(short.ms / whole.ms - 1) <= 0.1 and abs(full.ms / whole.ms - 1) <= 0.1


@pytest.mark.gpu
@pytest.mark.timing
def test_a_planned_call_costs_the_host_far_less_than_the_jit_launch():
    """From the second call the plan launches the binary directly: interleaved rounds against
    the JIT path of the same plan (binding every argument again), on the same host at the same time."""
    import statistics

    from kernel import flash_attn_fwd
    from kernel.triton.fwd import JIT_KERNEL, plan_for

    q, k, v = (torch.randn(4, 8, 512, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    config = dict(block_m=128, block_n=64, num_warps=8, num_stages=3)
    out, lse = flash_attn_fwd(q, k, v, **config)
    plan = plan_for(JIT_KERNEL, tuple(config.values()), q, k, v, False, out, lse)
    paths = {"planned": lambda: flash_attn_fwd(q, k, v, **config, out=out, lse=lse),
             "jit": lambda: plan._launch_jit(q, k, v, out, lse)}
    rounds = {name: [] for name in paths}
    for _ in range(5):
        for name, call in paths.items():
            rounds[name].append(timing.host_us(call, 300, 1))
    planned, jit = (statistics.median(rounds[name]) for name in paths)
    print(f"\nhost µs per call at N=512: planned {planned:.1f}, through the JIT {jit:.1f}")
    assert plan.compiled is not None and planned < 0.7 * jit

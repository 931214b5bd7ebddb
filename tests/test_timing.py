"""The stopwatches: how many input sets keep the timed loop out of L2, and GPU time by graph replay."""

from __future__ import annotations

import pytest
import torch

from kernel import timing


def test_enough_input_sets_to_hold_twice_the_l2(monkeypatch):
    monkeypatch.setattr(timing, "l2_bytes", lambda: 60 << 20)
    assert timing.input_sets(8 << 20) == 15               # 15 x 8 MiB >= 120 MiB
    assert timing.input_sets(200 << 20) == 1               # one set is already twice the L2
    assert timing.input_sets(1) == timing.MAX_SETS         # capped for tiny shapes


def test_attention_flops_count_the_causal_triangle():
    assert timing.attention_flops(1, 1, 4, 4, 8, False) == 4 * 16 * 8
    assert timing.attention_flops(1, 1, 4, 4, 8, True) == 4 * 16 * 8 * (1 + 2 + 3 + 4) / 16
    assert timing.attention_flops(1, 1, 2, 5, 8, True) == 4 * 10 * 8 * (1 + 2) / 10     # top-left aligned


def test_the_environment_line_names_gpu_driver_versions_and_date():
    line = timing.environment_line({"gpu": "G", "driver": "D", "torch": "T", "triton": "R", "date": "2026"})
    assert line == "GPU: G; driver D; torch T; triton R; 2026"


@pytest.mark.gpu
def test_graph_timer_agrees_with_do_bench_at_n_4096():
    """At N=4096 the launcher is a small share of a 0.3 ms kernel, so the two must agree within 3%."""
    from kernel import flash_attn_fwd
    from kernel.bench import make_sets

    timing.warm_gpu()
    sets = make_sets(4, 8, 4096, 64, torch.bfloat16)
    config = dict(block_m=128, block_n=64, num_warps=8, num_stages=3)
    calls = [lambda s=s: flash_attn_fwd(s[0], s[1], s[2], False, **config, out=s[3], lse=s[4]) for s in sets]
    graph = timing.gpu_time(calls, rep_ms=100)
    bench = timing.do_bench_median(calls[0], 25, 200)
    print(f"\ngraph {graph.ms:.4f} ms ({graph.method}, {len(sets)} sets), do_bench {bench:.4f} ms")
    assert graph.method == timing.GRAPH
    assert abs(graph.ms / bench - 1) <= 0.03


@pytest.mark.gpu
def test_host_time_of_a_planned_call_is_near_the_launch_floor():
    from kernel import flash_attn_fwd

    q, k, v = (torch.randn(4, 8, 512, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ours = timing.host_us(lambda: flash_attn_fwd(q, k, v, False, block_m=128, block_n=64, num_warps=8,
                                                 num_stages=3), 500)
    sdpa = timing.host_us(timing.sdpa_call(q, k, v, False), 500)
    print(f"\nhost µs per call at N=512: ours {ours:.1f}, SDPA {sdpa:.1f}")
    assert ours < sdpa

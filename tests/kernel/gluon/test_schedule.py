"""kernel.gluon.schedule: the order the Gluon kernels' programs take their tiles, walked on the CPU.

The device functions use integer arithmetic only, so their bodies (``fn.fn``) run on Python ints:
these tests walk the very code the kernels compile. A slip here (a tile taken twice or never, a
group that mixes heads, the heaviest tiles no longer first, a group that no longer fits the L2)
fails a test; the GPU tests then check the kernels' outputs over shapes whose heads fall in several
groups (tests/kernel/gluon/fwd/test_gluon.py, tests/kernel/gluon/bwd/test_gluon_bwd.py).
"""

from __future__ import annotations

import pytest

from kernel.gluon import schedule


def _body(fn):
    return getattr(fn, "fn", fn)          # the @jit function's Python body (itself where Gluon is missing)


query_coords, key_coords, heads_per_group = (_body(schedule.query_tile_coords), _body(schedule.key_tile_coords),
                                             _body(schedule.heads_per_group))


@pytest.fixture(autouse=True)
def bodies(monkeypatch):
    """The device functions call each other (query_tile_coords, tile_coords): on ints, the bodies call bodies."""
    monkeypatch.setattr(schedule, "tile_coords", _body(schedule.tile_coords))

SHAPES = [(1, 1, 1), (4, 3, 2), (4, 7, 3), (5, 16, 16), (3, 10, 4), (2, 5, 1), (6, 9, 100)]   # tiles, BH, group


@pytest.mark.parametrize("coords", [query_coords, key_coords], ids=["fwd", "bwd"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tiles, bh_count, group", SHAPES)
def test_every_tile_is_taken_once(coords, causal, tiles, bh_count, group):
    order = [coords(t, tiles, bh_count, min(group, bh_count), causal) for t in range(tiles * bh_count)]
    assert sorted(order) == [(m, b) for m in range(tiles) for b in range(bh_count)]


@pytest.mark.parametrize("tiles, bh_count, group", SHAPES)
def test_causal_tiles_come_in_groups_of_heads_heaviest_first(tiles, bh_count, group):
    group = min(group, bh_count)
    fwd = [query_coords(t, tiles, bh_count, group, True) for t in range(tiles * bh_count)]
    bwd = [key_coords(t, tiles, bh_count, group, True) for t in range(tiles * bh_count)]
    for order, heaviest_last in ((fwd, True), (bwd, False)):
        for start in range(0, bh_count, group):           # a group's tiles are consecutive and hold its heads only
            heads = range(start, min(start + group, bh_count))
            span = order[start * tiles:(start + len(heads)) * tiles]
            assert {bh for _, bh in span} == set(heads)
            # the heaviest tile row first (the forward's last query tile, the backward's first key tile), each
            # row of tiles over the group's heads in turn, heads fastest
            rows = [m for m, _ in span]
            assert rows == sorted(rows, reverse=heaviest_last)
            assert [bh for _, bh in span[:len(heads)]] == list(heads)


def test_one_group_of_every_head_is_the_order_across_all_heads():
    tiles, bh_count = 4, 6
    assert [query_coords(t, tiles, bh_count, bh_count, True) for t in range(24)] == [
        (tiles - 1 - t // bh_count, t % bh_count) for t in range(24)]
    assert [key_coords(t, tiles, bh_count, bh_count, True) for t in range(24)] == [
        (t // bh_count, t % bh_count) for t in range(24)]


def test_non_causal_takes_a_heads_tiles_together_whatever_the_group():
    for group in (1, 2, 6):
        assert [query_coords(t, 4, 6, group, False) for t in range(24)] == [(t % 4, t // 4) for t in range(24)]
        assert [key_coords(t, 4, 6, group, False) for t in range(24)] == [(t % 4, t // 4) for t in range(24)]


def test_a_group_holds_the_heads_whose_inputs_fit_in_the_budget():
    row = 64 * getattr(schedule.FWD_BYTES_PER_ELEMENT, "value", schedule.FWD_BYTES_PER_ELEMENT)
    # D=64 forward: K and V are 256 bytes a row. 32 MiB hold 128 heads of 1024 rows, 32 of 4096.
    assert heads_per_group(1024, 512, schedule.L2_BYTES, row) == 128
    assert heads_per_group(4096, 512, schedule.L2_BYTES, row) == 32
    assert heads_per_group(1025, 512, schedule.L2_BYTES, row) == 127        # rounded down: the group fits
    assert heads_per_group(1024, 16, schedule.L2_BYTES, row) == 16          # never more than there are heads
    assert heads_per_group(10 ** 7, 16, schedule.L2_BYTES, row) == 1        # a head over the budget: one at a time
    assert heads_per_group(1, 7, schedule.L2_BYTES, row) == 7


def test_the_budget_constants():
    value = (lambda c: getattr(c, "value", c))
    assert schedule.L2_BYTES == 32 * 1024 * 1024
    assert value(schedule.FWD_BYTES_PER_ELEMENT) == 4       # K and V in 16 bits
    assert value(schedule.BWD_BYTES_PER_ELEMENT) == 8       # Q and dO in 16 bits, dQ's fp32 accumulator


# ------------------------------------------------------------------ the budget a persistent grid balances best


@pytest.mark.parametrize("n_q, n_k, bh_count, block_m, block_n, group",
                         [(1024, 1024, 6, 128, 128, 4), (333, 777, 5, 64, 64, 2), (777, 333, 3, 128, 64, 3)])
def test_the_host_costs_follow_the_kernels_own_order_and_key_tiles(n_q, n_k, bh_count, block_m, block_n, group):
    """The model walks the forward's causal order as the kernel does: the same tiles, each costed as the key
    tiles the kernel visits for it (kernel.gluon.attention.key_tiles' total)."""
    tiles_m = -(-n_q // block_m)
    costs = schedule.forward_tile_costs(n_q, n_k, bh_count, block_m, block_n, group)
    walked = [query_coords(t, tiles_m, bh_count, group, True) for t in range(tiles_m * bh_count)]
    assert costs == [-(-min(m * block_m + block_m, n_k) // block_n) for m, _ in walked]


def test_a_stride_that_keeps_dealing_heavy_tiles_to_the_same_programs_is_imbalanced():
    # programs 0 and 1 of 2 take every other tile: all the 3s to one, all the 1s to the other
    assert schedule.stride_imbalance([3, 1, 3, 1], 2, overhead=0) == 1.5
    assert schedule.stride_imbalance([3, 1, 1, 3], 2, overhead=0) == 1.0
    assert schedule.stride_imbalance([5], 4, overhead=1) == 1.0          # idle programs are not counted
    # by default a tile costs one key tile more than its keys (its prologue and epilogue): loads 8 and 4
    assert schedule.stride_imbalance([3, 1, 3, 1], 2) == pytest.approx(8 / 6)


def test_the_balanced_budget_is_the_one_the_h200_timed_fastest_and_else_the_order_as_it_was():
    """B16 H16 N1024 D128 causal, 128 x 128 tiles, 132 programs: 32 MB leaves the busiest program 12.5% over the
    mean and ran at 0.92x cuDNN, 4 MB 3.1% and 0.99x (docs/results/2026-12-04-h200-many-programs.md). Where
    every budget balances alike (B32 H16 N1024), the order stays the default's."""
    mb = 1024 * 1024
    assert schedule.balanced_budget(1024, 1024, 256, 128, 128, 128, 132) == 4 * mb
    assert schedule.balanced_budget(1024, 1024, 512, 128, 128, 128, 132) == schedule.L2_BYTES
    assert schedule.balanced_budget(512, 512, 256, 128, 128, 128, 132) == schedule.L2_BYTES
    assert schedule.group_for(1024, 256, 4 * mb, 128 * 4) == 8 and schedule.group_for(10 ** 9, 4, mb, 512) == 1


def test_a_budget_within_half_a_percent_of_the_most_even_keeps_the_larger_group():
    """B128 N4096 D128, 64 x 64 tiles on 396 programs: 16 MB leaves 7.65% over the mean, 4 MB 7.50%: within
    0.5%, so the larger group (16 MB) is kept; B64 N4096 D64: 32 MB's 15.44% against 16 MB's 15.15%, 32 MB."""
    mb = 1024 * 1024
    assert schedule.balanced_budget(4096, 4096, 128, 128, 64, 64, 396) == 16 * mb
    assert schedule.balanced_budget(4096, 4096, 64, 64, 64, 64, 396) == 32 * mb


def test_a_group_never_holds_more_heads_than_there_are():
    assert schedule.group_for(16, 4, 32 * 1024 * 1024, 512) == 4
    assert schedule.group_for(0, 4, 32 * 1024 * 1024, 512) == 4      # no keys: counted as one, no division by 0


def test_a_plan_balances_only_a_persistent_causal_launch(monkeypatch):
    """kernel.gluon.fwd.launch.balanced_l2_bytes: the model for a persistent causal launch over its grid's
    programs (tiles, or persistent x SMs), the default budget for a program per tile or a non-causal one."""
    import torch

    import kernel.gluon.fwd.plan as plan
    from kernel.gluon.fwd.config import GluonConfig
    from kernel.gluon.fwd.launch import balanced_l2_bytes

    monkeypatch.setattr(plan, "sm_count", lambda device: 132)
    q = torch.empty(16, 16, 1024, 128)
    persistent = GluonConfig("ws", 128, 128, persistent=1)
    assert balanced_l2_bytes(q, q, True, persistent) == 4 * 1024 * 1024
    assert balanced_l2_bytes(q, q, False, persistent) == schedule.L2_BYTES
    assert balanced_l2_bytes(q, q, True, GluonConfig("ws", 128, 128, persistent=0)) == schedule.L2_BYTES
    three_dims = torch.empty(256, 1024, 128)        # [batch x heads, N, D]: the same heads
    assert balanced_l2_bytes(three_dims, three_dims, True, persistent) == 4 * 1024 * 1024


def test_the_tile_order_benchmark_times_the_forward_call_beside_the_fixed_budget_it_had_before():
    from benchmarks.tile_order import _variants

    forward = _variants([8], "fwd")
    assert forward[""] is None and forward["/32MB"] == schedule.L2_BYTES and forward["/8MB"] == 8 * 1024 * 1024
    assert "/32MB" not in _variants([8])            # the backward's call keeps the fixed budget: nothing to compare

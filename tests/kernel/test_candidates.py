"""The candidates a route table names (kernel/candidates.py): each one a config its kernel takes at every head
dim and mask, and the default call runs the one its bucket names, knobs and tiles included."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import kernel
import kernel.gluon.bwd.launch as gluon_bwd
import kernel.gluon.fwd.launch as gluon_fwd
import kernel.route as route
import kernel.route_table as route_table
from kernel.candidates import BACKWARD, FORWARD, candidates
from kernel.reference import accuracy
from kernel.triton.fwd import TILE_NAMES, check_config
from kernel.triton.launch import PLANS

MASKS = [(d, c) for d in (64, 128) for c in (False, True)]
# The Gluon forward candidates other than the defaults (timed at short lengths only).
SHORT_GLUON = ("ws_128", "ws_64", "ws_64x64", "ws_64_p2", "ws_64x64_p2", "ws_128_p1", "ws_64x64_r144",
               "ws_64x64_p3", "ws_64x64_p4", "ws_p0")


@pytest.mark.parametrize("head_dim, causal", MASKS)
def test_every_candidate_is_a_config_its_kernel_takes(head_dim, causal):
    from kernel.triton.defaults import default_config

    for candidate in (c for c in FORWARD.values() if head_dim in c.head_dims):
        if candidate.gluon:                        # raises, naming the problem, where the Gluon launcher would
            gluon_fwd.config_from(candidate.kernel, head_dim, causal, candidate.settings)
        else:
            config = default_config(head_dim, causal, 90) | candidate.settings
            tiles = [config[n] for n in TILE_NAMES]
            check_config(*tiles, config.get("tma", False), False, None, config.get("persistent", 0))
    for name, candidate in BACKWARD.items():
        if candidate.gluon and head_dim in candidate.head_dims:
            config = replace(route.GLUON_BWD_ROUTES[(head_dim, causal)], **candidate.settings)
            assert not config.problems(head_dim), (name, config.problems(head_dim))


def test_names_are_identifiers_and_each_pass_has_the_triton_kernel_at_its_default():
    """The table's comments are parsed back by name (\\w+), and a tie keeps "triton" (benchmarks.route.winner)."""
    for pass_ in ("fwd", "bwd"):
        assert candidates(pass_)["triton"].kernel == "triton" and not candidates(pass_)["triton"].knobs
        assert all(name.isidentifier() for name in candidates(pass_))
    with pytest.raises(ValueError, match="'fwd' or 'bwd'"):
        candidates("forward")


def test_the_short_tiles_are_other_configs_than_the_defaults_where_they_are_timed():
    from kernel.gluon.fwd.config import default_gluon_config

    for head_dim, causal in MASKS:
        default = default_gluon_config(head_dim, causal, "ws")
        for name in (n for n in SHORT_GLUON if head_dim in FORWARD[n].head_dims):
            config = gluon_fwd.config_from("ws", head_dim, causal, FORWARD[name].settings)
            if "block_m" not in FORWARD[name].settings:        # the default tile, launched otherwise
                assert config != default and config.block_m == default.block_m, name
                continue
            assert config.block_m == FORWARD[name].settings["block_m"]
            assert (config == default) == (config.block_m == default.block_m), name
    one = replace(route.GLUON_BWD_ROUTES[(128, False)], **BACKWARD["gluon_1c"].settings)
    assert one.block_n == 64 and route.GLUON_BWD_ROUTES[(128, False)].block_n == 128


@pytest.fixture
def routed(monkeypatch):
    """Every device routes; a Gluon plan records (pass, variant, knobs) and returns zeros. Plans cleared."""
    calls = []
    PLANS.clear()

    def fwd_plan(q, k, v, causal, variant, knobs, out=None, lse=None):
        calls.append(("fwd", variant, knobs))
        return lambda q, k, v, out=None, lse=None: (torch.zeros_like(q), torch.zeros(q.shape[:-1]))

    def bwd_plan(q, k, v, out, lse, dout, causal, knobs, grads):
        calls.append(("bwd", "gluon", knobs))
        return lambda q, k, v, out, lse, dout, *grads: tuple(torch.zeros_like(t) for t in (q, k, v))

    monkeypatch.setattr(route, "route_reason", lambda device: None)
    monkeypatch.setattr(route, "backward_route_reason", lambda device: None)
    monkeypatch.setattr(gluon_fwd, "checked_plan", fwd_plan)
    monkeypatch.setattr(gluon_bwd, "checked_plan", bwd_plan)
    yield calls
    PLANS.clear()


@pytest.mark.parametrize("name", [name for name, c in FORWARD.items() if c.gluon])
def test_a_default_forward_runs_the_gluon_candidate_its_bucket_names_with_its_knobs(routed, monkeypatch, name):
    monkeypatch.setattr(route_table, "FORWARD", {(64, True, 256, 2): name, (64, True, 4096, 2): "triton"})
    q = torch.randn(1, 2, 200, 64, dtype=torch.float16)
    kernel.flash_attn_fwd(q, q, q, True)
    assert routed == [("fwd", FORWARD[name].kernel, FORWARD[name].settings or None)]


def test_a_default_forward_runs_the_triton_candidates_tiles_over_the_default_knobs(routed, monkeypatch):
    """triton_64x64 at its bucket: the Triton plan launches 64 x 64 tiles on 4 warps, 3 stages, and is right."""
    monkeypatch.setattr(route_table, "FORWARD", {(64, True, 256, 2): "triton_64x64"})
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 130, 64, generator=gen, dtype=torch.float16) for _ in range(3))
    out, lse = (torch.full_like(q, float("nan")), torch.full(q.shape[:-1], float("nan")))
    kernel.flash_attn_fwd(q, k, v, True, out=out, lse=lse)     # NaN-filled: an element never written shows
    assert routed == []
    (plan,) = PLANS.values()
    assert {key: plan.launch[key] for key in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")} == dict(
        BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3)
    verdict = accuracy(out, lse, q, k, v, True)              # against float64, bounded by PyTorch's own error
    assert verdict.ok, verdict


def test_the_triton_candidate_at_its_default_runs_the_default_config(routed, monkeypatch):
    monkeypatch.setattr(route_table, "FORWARD", {(64, True, 256, 2): "triton"})
    q = torch.randn(1, 2, 200, 64, dtype=torch.float16)
    kernel.flash_attn_fwd(q, q, q, True)
    (plan,) = PLANS.values()
    unrouted = kernel.triton.fwd.plan_for(kernel.triton.fwd.JIT_KERNEL, kernel.triton.fwd.KNOB_DEFAULTS, q, q, q, True)
    assert routed == [] and plan.launch == unrouted.launch


@pytest.mark.parametrize("name, consumers", [("gluon", 2), ("gluon_1c", 1)])
def test_a_default_backward_runs_the_gluon_candidate_its_bucket_names(routed, monkeypatch, name, consumers):
    monkeypatch.setattr(route_table, "BACKWARD", {(128, False, 256, 2): name})
    q, k, v = (torch.randn(1, 2, 200, 128, dtype=torch.float16) for _ in range(3))
    out, lse = kernel.flash_attn_fwd(q, k, v, False)
    routed.clear()
    kernel.flash_attn_bwd(torch.randn_like(q), q, k, v, out, lse, False)
    assert [(p, kernel_name) for p, kernel_name, _ in routed] == [("bwd", "gluon")]
    assert routed[0][2]["consumers"] == consumers


# ------------------------------------------------------------------------------ GPU tests

ON_HOPPER = torch.cuda.is_available() and route.default_variant(128, False) == "ws"
needs_route = pytest.mark.skipif(not ON_HOPPER, reason="needs an sm_90 GPU with Triton 3.6 (the route's machine)")
# Lengths of 1 (the JIT's constants), 16, a last tile with one valid row, ragged N_q != N_k, [B, N, D].
GPU_SHAPES = [(2, 3, 1, 1), (1, 2, 16, 16), (1, 4, 129, 129), (2, 3, 200, 900), (2, None, 300, 70)]


SHORT_TILES = [(name, d, c) for name in ("triton_64x64", *SHORT_GLUON) for d, c in MASKS
               if d in FORWARD[name].head_dims]


@pytest.mark.gpu
@needs_route
@pytest.mark.parametrize("name, head_dim, causal", SHORT_TILES)
def test_a_default_call_routed_to_a_short_tile_candidate_is_right(name, head_dim, causal, monkeypatch, fresh_inputs,
                                                                  nan_outputs, assert_matches_reference):
    """What benchmarks.route may write into a bucket, run by the default call itself (the route, then the plan)."""
    PLANS.clear()
    monkeypatch.setattr(route, "ROUTE_MIN_FLOPS", 0)
    monkeypatch.setattr(route_table, "FORWARD", {(head_dim, causal, 256, 1): name})
    try:
        for b, h, n_q, n_k in GPU_SHAPES:
            shape_q, shape_kv = ((b, n_q, head_dim), (b, n_k, head_dim)) if h is None else (
                (b, h, n_q, head_dim), (b, h, n_k, head_dim))
            q, k, v, seed = fresh_inputs(shape_q, shape_kv, torch.bfloat16, "cuda")
            out, lse = nan_outputs(q)
            routed = route.gluon_plan(q, k, v, causal, out, lse)
            settings = FORWARD[name].settings
            assert (routed == settings) if name.startswith("triton") else (routed.knobs == settings), routed
            kernel.flash_attn_fwd(q, k, v, causal, out=out, lse=lse)
            assert_matches_reference(out, lse, q, k, v, causal, seed, label=f"{name} D={head_dim} {(b, h, n_q, n_k)}")
    finally:
        PLANS.clear()


def test_a_triton_candidate_keeps_the_knobs_of_the_default_for_the_device(monkeypatch):
    """On Hopper the default forward loads through TMA (and D=128 runs persistent): a routed Triton candidate
    sets only its tiles, so it keeps them. The plan is made, not run (TMA needs the GPU)."""
    import kernel.triton.fwd as fwd
    from kernel.triton.defaults import default_config

    monkeypatch.setattr(fwd, "default_config", lambda d, causal, capability=None: default_config(d, causal, 90))
    q = torch.randn(1, 2, 200, 128, dtype=torch.float16)
    plan = fwd._checked_plan(fwd.JIT_KERNEL, fwd.KNOB_DEFAULTS, q, q, q, False, None, None,
                             lambda *args: dict(FORWARD["triton_64x64"].settings))
    hopper = default_config(128, False, 90)
    assert plan.launch["TMA"] is True and plan.launch["PERSISTENT"] == hopper["persistent"] > 0
    assert (plan.launch["BLOCK_M"], plan.launch["BLOCK_N"], plan.launch["num_warps"]) == (64, 64, 4)


def test_the_one_consumer_tiles_leave_room_for_two_programs_per_sm():
    """What ws_64 and ws_64x64 are for: 128 registers a thread at launch and at most half an SM's shared memory;
    their persistent forms launch two programs per SM, which therefore fit together."""
    from kernel.gluon.fwd.config import smem_bytes
    from kernel.gluon.smem import STATIC_SMEM

    for name, persistent in (("ws_64", 0), ("ws_64x64", 0), ("ws_64_p2", 2), ("ws_64x64_p2", 2)):
        for head_dim in FORWARD[name].head_dims:
            for causal in (False, True):
                config = gluon_fwd.config_from("ws", head_dim, causal, FORWARD[name].settings)
                assert config.consumers == 1 and config.persistent == persistent
                assert config.maxnreg * 4 * 32 * 2 * 2 <= 65536, (name, head_dim, config.maxnreg)
                assert 2 * (smem_bytes(config, head_dim) + STATIC_SMEM) <= 233472, (name, head_dim, causal)


@pytest.mark.parametrize("name, programs, overlap", [("ws_64x64_r144", 3, True), ("ws_64x64_p3", 3, True),
                                                     ("ws_64x64_p4", 4, False)])
def test_the_many_program_tiles_fit_as_many_programs_per_sm_as_they_are_for(name, programs, overlap):
    """ws_64x64_r144 and _p3 are for three programs an SM, _p4 for four: the registers a thread at launch (per
    warpgroup of the producer and the consumer) and the shared memory of that many programs fit an SM's. At
    _p4's 104 registers a consumer runs in order (one live score tile; overlapped it ran 1-6% slower on the
    H200, docs/results/2026-12-04-h200-many-programs.md)."""
    from kernel.gluon.fwd.config import smem_bytes
    from kernel.gluon.smem import STATIC_SMEM

    for causal in (False, True):
        config = gluon_fwd.config_from("ws", 64, causal, FORWARD[name].settings)
        assert config.consumers == 1 and (config.block_m, config.block_n) == (64, 64)
        assert config.persistent in (0, programs) and config.overlap == overlap, (name, config)
        assert programs * config.maxnreg * 32 * 4 * 2 <= 65536, (name, config.maxnreg)
        # after setmaxnreg the file holds every program's producer and consumer warpgroups at their own counts
        assert programs * (config.producer_regs + config.consumer_regs) * 128 <= 65536, name
        smem = smem_bytes(config, 64, split=config.may_split) + STATIC_SMEM + 1024     # 1 KB reserved a block
        assert programs * smem <= 233472, (name, causal)

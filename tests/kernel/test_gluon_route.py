"""The default forward call's route (kernel/route.py): the Gluon kernel exactly where the table
says, on sm_90 with Triton 3.6, for inputs the Gluon launcher takes; the Triton kernel everywhere else.

* CPU: the detection (the interpreter, the device, the capability, the Triton version) with the
  machine's answers replaced; the table and the fallbacks by the plan a call gets (no kernel runs
  on the Gluon side: its entry point is replaced by a recorder).
* GPU (``gpu`` mark, an sm_90 GPU with Triton 3.6): the default call at D=128 is the Gluon kernel
  and is right, on ragged, causal and short shapes; ``flash_attention``'s backward after it.
"""

from __future__ import annotations

import pytest
import torch

import kernel
import kernel.gluon.api as gluon_api
import kernel.gluon.fwd.launch as gluon_module
import kernel.route as route
import kernel.route_table as route_table
from kernel.triton.fwd import JIT_KERNEL, KNOB_DEFAULTS, plan_for
from kernel.triton.launch import PLANS, LaunchPlan


@pytest.fixture(autouse=True)
def fresh_plans():
    """Plans remember their route: every test starts and ends with none."""
    PLANS.clear()
    yield
    PLANS.clear()


def _default_plan(q, k, v, causal=False, out=None, lse=None):
    return plan_for(JIT_KERNEL, KNOB_DEFAULTS, q, k, v, causal, out, lse, route.gluon_plan)


# ---------------------------------------------------------------------------------- detection


def test_the_interpreter_never_routes(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert "TRITON_INTERPRET" in route.route_reason(torch.device("cuda", 0))
    assert route.default_variant(128, False, "cpu") is None
    q = torch.randn(1, 2, 16, 128, dtype=torch.float16)
    assert isinstance(_default_plan(q, q, q), LaunchPlan)


def _hopper_with_gluon(monkeypatch, capability=90):
    monkeypatch.setattr(route, "interpreting", lambda: False)
    monkeypatch.setattr(route, "capability_of", lambda device: capability)
    monkeypatch.setattr(gluon_api, "gluon_api_support", lambda: None)


def test_only_a_cuda_sm90_device_with_gluon_routes(monkeypatch):
    _hopper_with_gluon(monkeypatch)
    assert route.route_reason(torch.device("cuda", 0)) is None
    assert route.default_variant(128, True, torch.device("cuda", 0)) == "ws"
    assert "not a CUDA GPU" in route.route_reason(torch.device("cpu"))
    _hopper_with_gluon(monkeypatch, capability=89)
    assert "sm_89" in route.route_reason(torch.device("cuda", 0))
    _hopper_with_gluon(monkeypatch, capability=100)
    assert "sm_100" in route.route_reason(torch.device("cuda", 0))


def test_a_gluon_lacking_what_the_kernels_use_is_named_and_never_routes(monkeypatch):
    monkeypatch.setattr(route, "interpreting", lambda: False)
    monkeypatch.setattr(route, "capability_of", lambda device: 90)
    monkeypatch.setattr(gluon_api, "tma_load", None)
    gluon_api.gluon_api_support.cache_clear()
    try:
        reason = route.route_reason(torch.device("cuda", 0))
        variant = route.default_variant(128, False, torch.device("cuda", 0))
    finally:
        gluon_api.gluon_api_support.cache_clear()       # the next caller reads the real Triton
    assert reason is not None and "lacks a TMA load" in reason
    assert variant is None


# ------------------------------------------------------------------------ the table, on the CPU


@pytest.fixture
def routed(monkeypatch) -> list:
    """Every device routes (the detection is tested above), and the Gluon launch plan a routed call
    makes records its calls instead of launching: returns the list of (shape, causal, variant) calls."""
    calls = []

    def plan(q, k, v, causal, variant, knobs, out=None, lse=None):
        assert not knobs, "a routed call runs the variant's default config"

        def record(q, k, v, out=None, lse=None):
            calls.append((tuple(q.shape), causal, variant))
            return (torch.zeros_like(q) if out is None else out,
                    torch.zeros(q.shape[:-1]) if lse is None else lse)
        return record

    monkeypatch.setattr(route, "route_reason", lambda device: None)
    monkeypatch.setattr(route, "ROUTE_MIN_FLOPS", 0)
    monkeypatch.setattr(gluon_module, "checked_plan", plan)
    monkeypatch.setattr(route_table, "FORWARD", {})      # the typed tables alone (kernel.route_table: its tests)
    monkeypatch.setattr(route_table, "BACKWARD", {})
    return calls


def test_a_call_with_less_work_than_the_host_costs_keeps_triton(routed, monkeypatch):
    """Below ROUTE_MIN_FLOPS the Triton kernel runs; at it, Gluon (the bound is 0 today: every call)."""
    q, k, v = (torch.randn(1, 2, 64, 128, dtype=torch.float16) for _ in range(3))
    assert route.attention_work(q, k, False) == 4 * 2 * 64 * 64 * 128
    assert route.attention_work(q, k, True) == 2 * 2 * 64 * 64 * 128
    monkeypatch.setattr(route, "ROUTE_MIN_FLOPS", route.attention_work(q, k, False))
    kernel.flash_attn_fwd(q, k, v, True)           # half the work: below the bound
    assert routed == []
    kernel.flash_attn_fwd(q, k, v, False)
    assert routed == [((1, 2, 64, 128), False, "ws")]


@pytest.mark.parametrize("head_dim", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_the_route_is_taken_exactly_where_the_table_says(routed, head_dim, causal):
    q = torch.randn(1, 2, 16, head_dim, dtype=torch.float16)
    plan = _default_plan(q, q, q, causal)
    wanted = route.GLUON_ROUTES.get((head_dim, causal))
    if wanted is None:
        assert isinstance(plan, LaunchPlan)
    else:
        assert isinstance(plan, route.GluonPlan) and plan.variant == wanted and plan.causal is causal
        plan(q, q, q)
        assert routed == [(tuple(q.shape), causal, wanted)]


def test_d128_and_d64_go_to_ws():
    """The measured rule (docs/results/2026-12-01-h200-gluon.md): a change here is a decision."""
    assert route.GLUON_ROUTES == {(128, False): "ws", (128, True): "ws", (64, False): "ws", (64, True): "ws"}


def test_the_default_call_and_the_autograd_op_take_the_route(routed):
    q = torch.randn(2, 3, 17, 128, dtype=torch.float16)       # (the interpreter refuses bf16 before any route)
    kernel.flash_attn_fwd(q, q, q, True)
    assert routed == [((2, 3, 17, 128), True, "ws")]
    kernel.flash_attention(q, q, q, False)
    assert routed[-1] == ((2, 3, 17, 128), False, "ws")
    three_d = torch.randn(2, 17, 128, dtype=torch.float16)     # [B, N, D]: one head, read in place
    assert isinstance(_default_plan(three_d, three_d, three_d), route.GluonPlan)


@pytest.mark.parametrize("knob", [dict(block_m=64), dict(block_n=32), dict(num_warps=4), dict(num_stages=2),
                                  dict(tma=True), dict(persistent=1), dict(maxnreg=168)])
def test_an_explicit_config_or_knob_keeps_the_triton_kernel(routed, knob):
    q = torch.randn(1, 2, 16, 128, dtype=torch.float16)
    names = ("block_m", "block_n", "num_warps", "num_stages", "tma", "warp_specialize", "maxnreg", "persistent")
    config = tuple(knob.get(name, default) for name, default in zip(names, KNOB_DEFAULTS))
    assert isinstance(plan_for(JIT_KERNEL, config, q, q, q, False), LaunchPlan)
    assert routed == []


def _misaligned(shape, dtype=torch.float16):
    return torch.randn(torch.Size(shape).numel() + 1, dtype=dtype)[1:].view(shape)


FALLBACKS = {
    "fp32": lambda: [torch.randn(1, 2, 16, 128)] * 3,
    "misaligned q": lambda: [_misaligned((1, 2, 16, 128)), *[torch.randn(1, 2, 16, 128, dtype=torch.float16)] * 2],
    "non-unit last stride": lambda: [torch.randn(1, 2, 128, 16, dtype=torch.float16).transpose(2, 3)] * 3,
    "stride-0 heads": lambda: [torch.randn(1, 1, 16, 128, dtype=torch.float16).expand(1, 2, 16, 128)] * 3,
    "v rows 264 bytes apart": lambda: [*[torch.randn(1, 2, 16, 128, dtype=torch.float16)] * 2,
                                       torch.randn(1, 2, 16, 132, dtype=torch.float16)[..., :128]],
}


@pytest.mark.parametrize("name", list(FALLBACKS))
def test_inputs_the_gluon_launcher_refuses_run_on_triton(routed, name, assert_matches_reference):
    q, k, v = FALLBACKS[name]()
    assert route.refusal(q, k, v, False) is not None
    assert isinstance(_default_plan(q, k, v), LaunchPlan)
    if name == "fp32":           # and the call runs there, right (the interpreter: fp32 and fp16 only)
        out, lse = kernel.flash_attn_fwd(q, k, v, True)
        assert_matches_reference(out, lse, q, k, v, True, 0, label=name)
    assert routed == []


def test_an_output_the_gluon_kernel_cannot_store_to_keeps_triton(routed):
    q = torch.randn(1, 2, 16, 128, dtype=torch.float16)
    assert isinstance(_default_plan(q, q, q, out=_misaligned(q.shape)), LaunchPlan)
    strided_lse = torch.zeros(1, 16, 2).transpose(1, 2)
    assert route.refusal(q, q, q, False, lse=strided_lse) is not None
    assert isinstance(_default_plan(q, q, q, out=torch.empty_like(q)), route.GluonPlan)


def test_a_strided_head_view_is_taken_in_place(routed):
    """[B, N, H, D] seen as [B, H, N, D] is what the Gluon descriptors read without a copy."""
    q = torch.randn(2, 16, 3, 128, dtype=torch.float16).transpose(1, 2)
    assert route.refusal(q, q, q, True) is None
    assert isinstance(_default_plan(q, q, q, True), route.GluonPlan)


# ------------------------------------------------------------------------------ GPU tests

ON_HOPPER = torch.cuda.is_available() and route.default_variant(128, False) == "ws"
needs_route = pytest.mark.skipif(not ON_HOPPER, reason="needs an sm_90 GPU with Triton 3.6 (the route's machine)")
SHAPES = [(2, 3, 1552, 1040), (1, 2, 129, 1000), (2, None, 200, 900), (1, 4, 1000, 129)]
LENGTHS = [1, 16, 17, 63, 64, 65, 127, 128, 129]


@pytest.fixture
def spied(monkeypatch) -> list:
    """The real Gluon launch plans, recording the variant of each call."""
    from kernel.gluon.fwd.plan import GluonLaunchPlan

    calls, real = [], GluonLaunchPlan.__call__

    def spy(plan, *args, **kwargs):
        calls.append(plan.config.variant)
        return real(plan, *args, **kwargs)

    monkeypatch.setattr(GluonLaunchPlan, "__call__", spy)
    monkeypatch.setattr(route, "ROUTE_MIN_FLOPS", 0)       # the small shapes here take the route too
    # The Gluon path at every shape here; which shapes a default call sends there is the measured
    # table's (kernel/route_table.py, tests/kernel/test_route_table.py).
    monkeypatch.setattr(route_table, "FORWARD", {})
    return calls


def _shaped(fresh_inputs, b, h, n_q, n_k, dtype=torch.bfloat16, head_dim=128):
    d = head_dim
    shape_q, shape_kv = ((b, n_q, d), (b, n_k, d)) if h is None else ((b, h, n_q, d), (b, h, n_k, d))
    return fresh_inputs(shape_q, shape_kv, dtype, "cuda")


@pytest.mark.gpu
@needs_route
@pytest.mark.parametrize("head_dim, causal", sorted(route.GLUON_ROUTES))
def test_every_routed_default_call_is_the_gluon_kernel_and_right(head_dim, causal, spied, fresh_inputs, nan_outputs,
                                                                 assert_matches_reference):
    cases = SHAPES + [(2, 2, n, n) for n in LENGTHS] + [(1, 2, 1, 17), (1, 2, 17, 1), (1, 2, 65, 127)]
    for b, h, n_q, n_k in cases:
        q, k, v, seed = _shaped(fresh_inputs, b, h, n_q, n_k, head_dim=head_dim)
        out, lse = nan_outputs(q)
        before = len(spied)
        kernel.flash_attn_fwd(q, k, v, causal, out=out, lse=lse)
        assert spied[before:] == ["ws"], f"{(b, h, n_q, n_k)} did not run the Gluon kernel"
        assert_matches_reference(out, lse, q, k, v, causal, seed, label=f"default D={head_dim} {(b, h, n_q, n_k)}")
        returned, returned_lse = kernel.flash_attn_fwd(q, k, v, causal)        # outputs it allocates
        assert torch.equal(returned, out) and torch.equal(returned_lse, lse)


@pytest.mark.gpu
@needs_route
def test_float16_and_d64_take_their_routes(spied, fresh_inputs, nan_outputs, assert_matches_reference):
    q, k, v, seed = _shaped(fresh_inputs, 2, 3, 333, 517, torch.float16)
    out, lse = nan_outputs(q)
    kernel.flash_attn_fwd(q, k, v, True, out=out, lse=lse)
    assert spied == ["ws"]
    assert_matches_reference(out, lse, q, k, v, True, seed, label="fp16")
    q64, k64, v64, seed = fresh_inputs((2, 3, 333, 64), (2, 3, 517, 64), torch.bfloat16, "cuda")
    out, lse = nan_outputs(q64)
    kernel.flash_attn_fwd(q64, k64, v64, False, out=out, lse=lse)
    wanted = ["ws"] + ([route.GLUON_ROUTES[(64, False)]] if (64, False) in route.GLUON_ROUTES else [])
    assert spied == wanted, f"D=64 non-causal ran {spied[1:] or 'the Triton kernel'}; the table says {wanted[1:]}"
    assert_matches_reference(out, lse, q64, k64, v64, False, seed, label="D=64")


@pytest.mark.gpu
@needs_route
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_backward_works_after_the_gluon_forward(causal, spied):
    from grad_reference import reference_grads, torch_grads

    from kernel.reference import grad_accuracy

    torch.manual_seed(25 + causal)
    q, k, v = (torch.randn(2, 3, n, 128, device="cuda", dtype=torch.bfloat16) for n in (1000, 777, 777))
    dout = torch.randn_like(q)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = kernel.flash_attention(*leaves, causal)
    assert spied == ["ws"]
    ours = torch.autograd.grad(out, leaves, dout)
    verdict = grad_accuracy(ours, reference_grads(q, k, v, dout, causal), torch_grads(q, k, v, dout, causal), q.dtype)
    assert verdict.ok, verdict.reason


def test_a_routed_and_an_unrouted_call_of_one_layout_keep_plans_of_their_own(routed):
    """The default call (routed) and the Triton kernel named at the same knobs (never routed) share a layout
    and a config, not a plan: in either order, each gets its own."""
    q = torch.randn(1, 2, 16, 128, dtype=torch.float16)
    for order in ((route.gluon_plan, None), (None, route.gluon_plan)):
        PLANS.clear()
        plans = {r: plan_for(JIT_KERNEL, KNOB_DEFAULTS, q, q, q, False, None, None, r) for r in order}
        assert isinstance(plans[route.gluon_plan], route.GluonPlan) and isinstance(plans[None], LaunchPlan)

"""The default backward call's route (kernel/backward.py, kernel/route.py): the Gluon backward
exactly where GLUON_BWD_ROUTES says, on sm_90 with Triton 3.6, for inputs the Gluon launcher takes;
the Triton kernels everywhere else.

* CPU: the table, the fallbacks and the explicit configs by the plan a call gets; the Gluon side's
  launch plan is replaced by a recorder (no Gluon kernel runs), the machine's answer by "routes".
* GPU (``gpu`` mark, an sm_90 GPU with Triton 3.6): the default call is the Gluon backward and is
  right (float64 reference, NaN-filled gradients) on ragged, non-square, causal, short and
  [B, N, D] shapes; a layout TMA cannot read stays on Triton and is right; the autograd op.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import kernel
import kernel.backward as backward
import kernel.gluon.bwd.launch as gluon_bwd
import kernel.route as route
import kernel.route_table as route_table
from kernel.candidates import BACKWARD
from kernel.gluon.bwd.config import GluonBwdConfig
from kernel.route import GLUON_BWD_ROUTES
from kernel.triton.bwd_launch import BwdPlan
from kernel.triton.launch import PLANS


@pytest.fixture(autouse=True)
def fresh_plans():
    """Plans remember their route: every test starts and ends with none."""
    PLANS.clear()
    yield
    PLANS.clear()


def _args(shape_q, shape_kv, dtype=torch.float16, device="cpu"):
    q = torch.randn(shape_q, dtype=dtype, device=device)
    k, v = (torch.randn(shape_kv, dtype=dtype, device=device) for _ in range(2))
    out = torch.randn_like(q)
    lse = torch.randn(shape_q[:-1], device=device)
    return torch.randn_like(q), q, k, v, out, lse


def _plans():
    return list(PLANS.values())


# ---------------------------------------------------------------------------------- CPU


def test_the_interpreter_never_routes():
    """On this machine (the interpreter, or no sm_90 with Triton 3.6) a default call is Triton's."""
    reason = route.backward_route_reason(torch.device("cuda", 0))
    assert reason is not None
    assert route.backward_route_reason(torch.device("cpu")) is not None
    dout, q, k, v, out, lse = _args((1, 2, 16, 64), (1, 2, 16, 64))
    assert route.gluon_bwd_plan(dout, q, k, v, out, lse, False) is None


@pytest.fixture
def routed(monkeypatch) -> list:
    """Every device routes, and the Gluon launch plan a routed call makes records its calls instead
    of launching: returns the list of (q's shape, causal, knobs, gradients given) calls."""
    calls = []

    def plan(q, k, v, out, lse, dout, causal, knobs, grads):
        assert q.ndim == 4 and dout.ndim == 4 and lse.ndim == 3, "the Gluon plan is given [B, H, N, D] views"

        def record(q, k, v, out, lse, dout, dq=None, dk=None, dv=None):
            calls.append((tuple(q.shape), causal, knobs, dq is not None))
            return tuple(torch.zeros_like(t) if g is None else g for t, g in zip((q, k, v), (dq, dk, dv)))
        return record

    monkeypatch.setattr(route, "backward_route_reason", lambda device: None)
    monkeypatch.setattr(gluon_bwd, "checked_plan", plan)
    monkeypatch.setattr(route_table, "FORWARD", {})      # the typed tables alone (kernel.route_table: its tests)
    monkeypatch.setattr(route_table, "BACKWARD", {})
    return calls


@pytest.mark.parametrize("head_dim", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_the_route_is_taken_exactly_where_the_table_says(routed, head_dim, causal):
    args = _args((1, 2, 16, head_dim), (1, 2, 24, head_dim))
    grads = kernel.flash_attn_bwd(*args, causal)
    wanted = GLUON_BWD_ROUTES.get((head_dim, causal))
    (plan,) = _plans()
    if wanted is None:
        assert isinstance(plan, BwdPlan) and routed == []
    else:
        assert isinstance(plan, route.GluonBwdRoute) and plan.config == wanted
        from dataclasses import asdict

        assert routed == [((1, 2, 16, head_dim), causal, asdict(wanted), False)]
        assert [g.shape for g in grads] == [args[1].shape, args[2].shape, args[3].shape]


def test_the_routes_are_the_measured_ones():
    """The H200's winners (docs/results/2026-12-01-h200-gluon-backward.md): a change here is a decision."""
    measured = {
        (64, False): GluonBwdConfig(64, num_stages=3, dq_bufs=2, consumer_regs=232),
        (64, True): GluonBwdConfig(64, num_stages=3, dq_bufs=2, consumer_regs=232),
        (128, False): GluonBwdConfig(64, num_stages=2, dq_bufs=2, consumers=2, consumer_regs=240),
        (128, True): GluonBwdConfig(64, num_stages=2, dq_bufs=2, consumers=2, consumer_regs=240)}
    assert measured == GLUON_BWD_ROUTES
    for (head_dim, _), config in GLUON_BWD_ROUTES.items():
        assert config.problems(head_dim) == []


@pytest.mark.parametrize("named", [dict(config=kernel.default_bwd_config(128, False, 90)), dict(block_m=64),
                                   dict(num_stages=2), dict(dq_mode="atomic"), dict(persistent=1)])
def test_a_named_config_or_field_keeps_the_triton_kernels(routed, named):
    kernel.flash_attn_bwd(*_args((1, 2, 16, 128), (1, 2, 16, 128)), False, **named)
    (plan,) = _plans()
    assert isinstance(plan, BwdPlan) and routed == [], "a call naming a config or field took the route"


def test_a_default_call_works_its_config_and_route_out_once_per_layout(routed, monkeypatch):
    """Later default calls with the same layout find the plan by a key alone (no default config, no route)."""

    asked = []
    real = backward.default_bwd_config
    monkeypatch.setattr(backward, "default_bwd_config", lambda *a: asked.append(a) or real(*a))
    args = _args((1, 2, 16, 64), (1, 2, 16, 64))
    for _ in range(3):
        kernel.flash_attn_bwd(*args, True)
    assert len(asked) == 1 and len(routed) == 3 and GLUON_BWD_ROUTES[(64, True)]
    fresh = _args((1, 2, 16, 64), (1, 2, 16, 64))           # another call of the same layout: the same plan
    kernel.flash_attn_bwd(*fresh, True)
    assert len(asked) == 1 and len(routed) == 4
    kernel.flash_attn_bwd(*_args((1, 2, 17, 64), (1, 2, 16, 64)), True)       # another layout: worked out anew
    assert len(asked) == 2


def _misaligned(shape, dtype=torch.float16):
    return torch.randn(torch.Size(shape).numel() + 1, dtype=dtype)[1:].view(shape)


FALLBACKS = {
    "fp32": lambda a: (a[0].float(), a[1].float(), a[2].float(), a[3].float(), a[4].float(), a[5]),
    "misaligned k": lambda a: (a[0], a[1], _misaligned(a[2].shape), *a[3:]),
    "v rows 136 bytes apart": lambda a: (*a[:3], torch.randn(*a[3].shape[:-1], 68, dtype=a[3].dtype)[..., :64], *a[4:]),
    "broadcast dout": lambda a: (torch.ones(1, dtype=a[0].dtype).expand(a[0].shape), *a[1:]),
    "strided lse": lambda a: (*a[:5], torch.zeros(1, 16, 2).transpose(1, 2)),
}


@pytest.mark.parametrize("name", list(FALLBACKS))
def test_inputs_the_gluon_launcher_refuses_run_on_triton(routed, name):
    args = FALLBACKS[name](_args((1, 2, 16, 64), (1, 2, 16, 64)))
    assert route.bwd_refusal(*args, False) is not None
    kernel.flash_attn_bwd(*args, False)
    (plan,) = _plans()
    assert isinstance(plan, BwdPlan) and routed == []


def test_three_dim_inputs_take_the_route_as_views_and_get_three_dim_gradients(routed):
    dout, q, k, v, out, lse = _args((2, 17, 128), (2, 33, 128))
    assert route.bwd_refusal(dout, q, k, v, out, lse, True) is None
    given = [torch.full_like(t, float("nan")) for t in (q, k, v)]
    grads = kernel.flash_attn_bwd(dout, q, k, v, out, lse, True, dq=given[0], dk=given[1], dv=given[2])
    assert routed[0][:2] == ((2, 1, 17, 128), True) and routed[0][3] is True
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    assert all(g.data_ptr() == t.data_ptr() for g, t in zip(grads, given)), "the given gradients were not used"


def test_the_autograd_op_takes_the_route(routed):
    q, k, v = (torch.randn(1, 2, 16, 64, dtype=torch.float16, requires_grad=True) for _ in range(3))
    kernel.flash_attention(q, k, v, True).backward(torch.randn(1, 2, 16, 64, dtype=torch.float16))
    assert [call[:2] for call in routed] == [((1, 2, 16, 64), True)]
    q.grad = None
    kernel.flash_attention(q, k, v, True, bwd_config=kernel.default_bwd_config(64, True, 0)).backward(
        torch.randn(1, 2, 16, 64, dtype=torch.float16))
    assert len(routed) == 1 and q.grad is not None, "a named Triton config took the route"


# ------------------------------------------------------------------------------ GPU tests

ON_HOPPER = torch.cuda.is_available() and route.backward_route_reason(torch.device("cuda")) is None
needs_route = pytest.mark.skipif(not ON_HOPPER, reason="needs an sm_90 GPU with Triton 3.6 (the route's machine)")
LENGTHS = [1, 16, 17, 63, 64, 65, 127, 128, 129]


@pytest.fixture
def spied(monkeypatch) -> list:
    """The real Gluon backward plans, recording the config of each call."""
    from kernel.gluon.bwd.plan import GluonBwdPlan

    calls, real = [], GluonBwdPlan.__call__

    def spy(plan, *args, **kwargs):
        calls.append(plan.config)
        return real(plan, *args, **kwargs)

    monkeypatch.setattr(GluonBwdPlan, "__call__", spy)
    # The Gluon path at every shape here; which shapes take it is the measured table's (test_route_table.py).
    monkeypatch.setattr(route_table, "BACKWARD", {})
    return calls


def _right(q, k, v, dout, causal, grads, label):
    from grad_reference import reference_grads, torch_grads

    from kernel.reference import grad_accuracy

    verdict = grad_accuracy(grads, reference_grads(q, k, v, dout, causal), torch_grads(q, k, v, dout, causal), q.dtype)
    assert verdict.ok, f"{label}: {verdict.reason}"


def _default_call(shape_q, shape_kv, causal, dtype=torch.bfloat16):
    torch.manual_seed(sum(shape_q) * 7 + sum(shape_kv) + causal)
    q = torch.randn(shape_q, device="cuda", dtype=dtype)
    k, v = (torch.randn(shape_kv, device="cuda", dtype=dtype) for _ in range(2))
    dout = torch.randn_like(q)
    out, lse = kernel.flash_attn_fwd(q, k, v, causal)
    grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
    kernel.flash_attn_bwd(dout, q, k, v, out, lse, causal, dq=grads[0], dk=grads[1], dv=grads[2])
    allocated = kernel.flash_attn_bwd(dout, q, k, v, out, lse, causal)
    return q, k, v, dout, grads, allocated


def _cases(head_dim: int) -> list[tuple[tuple, tuple]]:
    """(q's shape, k's and v's): ragged both ways, a last tile of one valid row, lengths 1 (the JIT's
    constant) and 16."""
    cases = [((2, 3, 1031, head_dim), (2, 3, 777, head_dim)), ((1, 2, 129, head_dim), (1, 2, 1000, head_dim)),
             ((1, 2, 65, head_dim), (1, 2, 127, head_dim)), ((1, 2, 1, head_dim), (1, 2, 17, head_dim)),
             ((1, 2, 17, head_dim), (1, 2, 1, head_dim))]
    return cases + [((2, 2, n, head_dim), (2, 2, n, head_dim)) for n in LENGTHS]


@pytest.mark.gpu
@needs_route
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_the_default_call_is_the_gluon_backward_and_right(head_dim, causal, spied):
    for shape_q, shape_kv in _cases(head_dim):
        before = len(spied)
        q, k, v, dout, grads, allocated = _default_call(shape_q, shape_kv, causal)
        assert spied[before:] == [GLUON_BWD_ROUTES[(head_dim, causal)]] * 2, f"{shape_q} {shape_kv} ran Triton"
        _right(q, k, v, dout, causal, grads, f"default D={head_dim} {shape_q} {shape_kv}")
        assert all(torch.equal(a, b) for a, b in zip(grads[1:], allocated[1:]))


# The Gluon candidates a backward bucket may name (kernel/candidates.py) whose knobs change the config routed
# there: the others (gluon, and gluon_1c at D=64, whose default has one consumer) run in the test above.
OTHER_CONFIGS = [(name, d, c) for name, candidate in BACKWARD.items() if candidate.gluon
                 for d in candidate.head_dims for c in (False, True)
                 if replace(GLUON_BWD_ROUTES[(d, c)], **candidate.settings) != GLUON_BWD_ROUTES[(d, c)]]


def test_the_candidates_routed_on_the_gpu_are_those_with_other_knobs():
    """The GPU test below is parametrized over OTHER_CONFIGS: a filter that kept none would run nothing."""
    assert sorted({(name, d) for name, d, _ in OTHER_CONFIGS}) == [("gluon_128", 64), ("gluon_1c", 128),
                                                                   ("gluon_2c", 64)]


@pytest.mark.gpu
@needs_route
@pytest.mark.parametrize("name, head_dim, causal", OTHER_CONFIGS)
def test_a_default_call_routed_to_a_gluon_candidate_runs_its_knobs_and_is_right(name, head_dim, causal, spied,
                                                                                monkeypatch, fresh_inputs):
    """What benchmarks.route may write into a backward bucket, run by the default call: fresh inputs, NaN-filled
    gradients against the float64 reference, [B, N, D] too."""
    monkeypatch.setattr(route_table, "BACKWARD", {(head_dim, causal, 256, 1): name})
    wanted = replace(GLUON_BWD_ROUTES[(head_dim, causal)], **BACKWARD[name].settings)
    for shape_q, shape_kv in [*_cases(head_dim), ((2, 300, head_dim), (2, 70, head_dim))]:
        q, k, v, seed = fresh_inputs(shape_q, shape_kv, torch.bfloat16, "cuda")
        dout = torch.randn_like(q)
        out, lse = kernel.flash_attn_fwd(q, k, v, causal)
        grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
        before = len(spied)
        kernel.flash_attn_bwd(dout, q, k, v, out, lse, causal, dq=grads[0], dk=grads[1], dv=grads[2])
        assert spied[before:] == [wanted], f"{name} D={head_dim} {shape_q} {shape_kv} ran {spied[before:]}"
        _right(q, k, v, dout, causal, grads, f"{name} D={head_dim} causal={causal} {shape_q} {shape_kv} seed {seed}")


@pytest.mark.gpu
@needs_route
def test_float16_and_three_dim_inputs_take_the_route(spied):
    q, k, v, dout, grads, _ = _default_call((2, 3, 333, 128), (2, 3, 517, 128), True, torch.float16)
    _right(q, k, v, dout, True, grads, "fp16")
    q, k, v, dout, grads, _ = _default_call((2, 333, 64), (2, 517, 64), False)
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    _right(q, k, v, dout, False, grads, "[B, N, D]")
    assert len(spied) == 4


@pytest.mark.gpu
@needs_route
def test_a_layout_tma_cannot_read_stays_on_triton_and_is_right(spied):
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 2, 200, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out, lse = kernel.flash_attn_fwd(q, k, v, True)
    dout = torch.randn(1, 2, 64, 200, device="cuda", dtype=torch.bfloat16).transpose(2, 3)  # non-unit last stride
    grads = kernel.flash_attn_bwd(dout, q, k, v, out, lse, True)
    assert spied == []
    _right(q, k, v, dout.contiguous(), True, grads, "transposed dout")


@pytest.mark.gpu
@needs_route
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_trains_through_both_gluon_passes(causal, spied):
    torch.manual_seed(41 + causal)
    q, k, v = (torch.randn(2, 3, n, 128, device="cuda", dtype=torch.bfloat16) for n in (1000, 777, 777))
    dout = torch.randn_like(q)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    grads = torch.autograd.grad(kernel.flash_attention(*leaves, causal), leaves, dout)
    assert spied == [GLUON_BWD_ROUTES[(128, causal)]]
    _right(q, k, v, dout, causal, grads, "flash_attention")

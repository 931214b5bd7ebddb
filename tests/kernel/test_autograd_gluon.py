"""The autograd op with a GluonBwdConfig: the Gluon backward, asked for by its config.

On the CPU the Gluon launcher is a fake that records what the op hands it (the forward runs in
Triton's interpreter); on an H200 with Triton 3.6 the real one, against float32 autograd.
"""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch

import kernel
import kernel.gluon.bwd.launch as gluon_bwd
from kernel.gluon.api import gluon_bwd_support
from kernel.gluon.bwd.config import GluonBwdConfig
from kernel.gluon.bwd.launch import GluonUnavailable


@pytest.fixture
def recorded(monkeypatch):
    """The Gluon launcher replaced: each call's arguments kept, gradients of ones like q, k, v returned."""
    calls = []

    def fake(q, k, v, out, lse, dout, causal=False, **knobs):
        calls.append(dict(shapes=[tuple(t.shape) for t in (q, k, v, out, lse, dout)], causal=causal, knobs=knobs,
                          dout=dout.clone(), dout_contiguous=dout.is_contiguous()))
        return torch.ones_like(q), 2 * torch.ones_like(k), 3 * torch.ones_like(v)

    monkeypatch.setattr(gluon_bwd, "flash_attn_bwd_gluon", fake)
    return calls


@pytest.mark.parametrize("rank", [3, 4])
def test_a_gluon_config_takes_the_gluon_backward_with_its_knobs(recorded, rank):
    shape = (1, 40, 16) if rank == 3 else (1, 2, 40, 16)
    q, k, v = (torch.randn(shape, dtype=torch.float32, requires_grad=True) for _ in range(3))
    config = GluonBwdConfig(num_stages=3, consumers=1)
    kernel.flash_attention(q, k, v, True, bwd_config=config).sum().backward()     # a broadcast gradient
    (call,) = recorded
    assert call["knobs"] == asdict(config) and call["causal"] is True
    assert all(len(s) == 4 for s in call["shapes"][:4]) and len(call["shapes"][4]) == 3      # a head axis
    assert call["dout_contiguous"] and bool((call["dout"] == 1).all())                      # made readable
    assert q.grad.shape == q.shape and bool((q.grad == 1).all()) and bool((k.grad == 2).all())
    assert bool((v.grad == 3).all())


def test_other_configs_keep_the_triton_backward(recorded):
    q, k, v = (torch.randn(1, 2, 24, 16, dtype=torch.float32, requires_grad=True) for _ in range(3))
    kernel.flash_attention(q, k, v, False).sum().backward()
    kernel.flash_attention(q, k, v, False, bwd_config=kernel.default_bwd_config(16, False)).sum().backward()
    assert recorded == [] and q.grad is not None and bool(torch.isfinite(q.grad).all())


def test_off_hopper_the_backward_says_why():
    if gluon_bwd_support() is None and torch.cuda.is_available():
        pytest.skip("this machine runs the Gluon backward")
    q, k, v = (torch.randn(1, 2, 24, 64, dtype=torch.float32, requires_grad=True) for _ in range(3))
    out = kernel.flash_attention(q, k, v, False, bwd_config=GluonBwdConfig())
    with pytest.raises(GluonUnavailable):
        out.sum().backward()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or gluon_bwd_support() is not None,
                    reason="needs an sm_90 GPU with Triton 3.6 (the Gluon backward's machine)")
@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("head_dim, config", [(64, GluonBwdConfig(num_stages=3)), (128, GluonBwdConfig(consumers=2))])
@pytest.mark.parametrize("causal", [False, True])
def test_the_gluon_backward_through_autograd_matches_the_reference(rank, head_dim, config, causal):
    from kernel.gluon.bwd.check import references
    from kernel.reference import grad_accuracy

    shape = (2, 385, head_dim) if rank == 3 else (2, 3, 385, head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    kernel.flash_attention(q, k, v, causal, bwd_config=config).backward(dout)
    four = [t.detach() if rank == 4 else t.detach().unsqueeze(1) for t in (q, k, v, dout)]
    reference, pytorchs = references(*four, causal)
    grads = [g if rank == 4 else g.unsqueeze(1) for g in (q.grad, k.grad, v.grad)]
    verdict = grad_accuracy(grads, reference, pytorchs, torch.bfloat16)
    assert verdict.ok, verdict.reason

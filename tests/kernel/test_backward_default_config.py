"""The backward's default config for one call (kernel.backward._default_config): where the tensors do not suit
TMA, every TMA use of the default is dropped, its TMA loads and its TMA dQ, so a default call never refuses."""

from __future__ import annotations

import pytest
import torch

import kernel.backward as backward
from kernel.triton.bwd import BwdConfig


def _tensors(misaligned: bool):
    q, k, v, dout = (torch.randn(1, 2, 16, 64, dtype=torch.float16) for _ in range(4))
    if misaligned:      # a view one element in: its start is not 16-byte aligned, which TMA needs
        k = torch.randn(k.numel() + 1, dtype=torch.float16)[1:].view(k.shape)
    return dout, q, k, v


@pytest.mark.parametrize("tma, dq_mode", [(True, "pass"), (False, "tma"), (True, "tma")])
def test_a_misfit_layout_drops_every_tma_use_of_the_default(monkeypatch, tma, dq_mode):
    monkeypatch.setattr(backward, "default_bwd_config", lambda *a: BwdConfig(tma=tma, dq_mode=dq_mode))
    config = backward._default_config(*_tensors(misaligned=True), False)
    assert config.tma is False and config.dq_mode == "pass"


@pytest.mark.parametrize("tma, dq_mode", [(True, "pass"), (False, "tma"), (False, "atomic")])
def test_a_layout_that_suits_tma_keeps_the_default(monkeypatch, tma, dq_mode):
    monkeypatch.setattr(backward, "default_bwd_config", lambda *a: BwdConfig(tma=tma, dq_mode=dq_mode))
    config = backward._default_config(*_tensors(misaligned=False), False)
    assert (config.tma, config.dq_mode) == (tma, dq_mode)

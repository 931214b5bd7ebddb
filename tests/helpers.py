"""Shared test helpers: fresh random inputs and the correctness bound."""

from __future__ import annotations

import os

import torch

from kernel.reference import accuracy, rel_err  # noqa: F401  (rel_err: tests import it from here)


def fresh_inputs(shape_q, shape_kv, dtype, device):
    """New random q, k, v for every call (never a fixed seed); returns the seed too."""
    seed = int.from_bytes(os.urandom(4), "little")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q, k, v = (torch.randn(s, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
               for s in (shape_q, shape_kv, shape_kv))
    return q, k, v, seed


def nan_outputs(q):
    """Outputs filled with NaN, so an element the kernel does not write fails the check."""
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:-1], float("nan"), device=q.device, dtype=torch.float32)
    return out, lse


def assert_matches_reference(out, lse, q, k, v, causal, seed, label=""):
    """The flash-attention test rule (``kernel.reference.accuracy``), with the seed on failure."""
    result = accuracy(out, lse, q, k, v, causal)
    assert result.ok, f"{label} {result.reason}, seed {seed}"
    return result.err_out, result.err_lse

"""kernel.gluon.api, the one module that finds what this Triton's Gluon has: each answer pinned with fakes."""

from __future__ import annotations

import types

import pytest

import kernel.gluon.api as api

needs_gluon = pytest.mark.skipif(api.GLUON_IMPORT_ERROR is not None, reason="this Triton has no Gluon")


@pytest.mark.parametrize("names", [api.TMA_LOAD, api.TMA_STORE, api.CTA_BARRIER])
def test_the_newest_spelling_is_taken_where_a_triton_has_both_and_the_old_one_alone(names):
    newest, old = names
    both = types.SimpleNamespace(**{newest: "new", old: "old"})
    assert api._first(both, *names) == "new"
    assert api._first(types.SimpleNamespace(**{old: "old"}), *names) == "old"
    assert api._first(types.SimpleNamespace(), *names) is None and api._first(None, *names) is None


def test_the_newest_spellings_are_the_current_names():
    """gl.barrier replaced gl.thread_barrier (3.8); tma.async_load/async_store replaced the copy names."""
    assert (api.TMA_LOAD[0], api.TMA_STORE[0], api.CTA_BARRIER[0]) == ("async_load", "async_store", "barrier")


@needs_gluon
@pytest.mark.parametrize("missing", ["DESCRIPTOR_REDUCE_KIND", "create_async_tma_reduce"])
def test_no_tma_reduce_where_either_half_of_it_is_missing(monkeypatch, missing):
    from triton._C.libtriton import gluon_ir, ir

    owner = ir if missing == "DESCRIPTOR_REDUCE_KIND" else gluon_ir.GluonOpBuilder
    if not hasattr(owner, missing):
        pytest.skip(f"this Triton lacks {missing} already")
    kept = [n for n in dir(owner) if not n.startswith("__") and n != missing]
    fake = types.SimpleNamespace(**{n: getattr(owner, n) for n in kept})
    if owner is ir:
        monkeypatch.setattr("triton._C.libtriton.ir", fake)
    else:
        monkeypatch.setattr(gluon_ir, "GluonOpBuilder", fake)
    assert api._tma_reduce_add() is None


@needs_gluon
@pytest.mark.parametrize("signature, found", [
    ("functions_and_args, worker_num_warps, worker_num_regs", True),
    ("functions_and_args, worker_num_warps, worker_num_regs, extra=None", True),
    ("functions_and_args, worker_num_regs, worker_num_warps", False),     # the same names, another order
    ("functions_and_args, worker_num_warps", False),
    ("default_partition, default_args, worker_partitions", False),        # an older API
])
def test_warp_specialize_is_taken_only_with_the_arguments_the_kernels_pass(monkeypatch, signature, found):
    namespace = {}
    exec(f"def warp_specialize({signature}): pass", namespace)
    monkeypatch.setattr(api, "gl", types.SimpleNamespace(warp_specialize=namespace["warp_specialize"]))
    reason = api.gluon_api_support.__wrapped__()
    assert (reason is None) is found, reason
    if not found:
        assert "gl.warp_specialize(functions_and_args, worker_num_warps, worker_num_regs" in reason


@needs_gluon
def test_no_cuda_device_is_named_so_not_as_an_architecture(monkeypatch):
    monkeypatch.setattr(api, "device_capability", lambda: 0)
    assert api.gluon_support() == "no CUDA device: the Gluon forward needs an sm_90 GPU (H100, H200)"
    assert api.gluon_bwd_support() == "no CUDA device: the Gluon backward needs an sm_90 GPU (H100, H200)"


@needs_gluon
def test_the_backwards_reason_names_the_backward_and_the_first_thing_missing(monkeypatch):
    assert api.gluon_bwd_support(89) == "sm_89 has no wgmma: the Gluon backward is for sm_90 (Hopper) only"
    monkeypatch.setattr(api, "tma_reduce_add", None)
    assert api.gluon_bwd_support(89).startswith("sm_89 has no wgmma")       # the device's reason first
    assert "no TMA reduce" in api.gluon_bwd_support(90) and api.gluon_support(90) is None

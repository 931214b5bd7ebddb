"""kernel.arch, the one place that says what the GPU is and can do: each answer pinned on its own."""

from __future__ import annotations

import pytest
import torch

from kernel import arch


@pytest.mark.parametrize("value, on", [
    ("1", True), ("true", True), ("True", True), ("ON", True), ("yes", True), ("y", True),
    ("0", False), ("", False), ("false", False), ("off", False), ("no", False), ("2", False), ("garbage", False),
])
def test_the_interpreter_is_on_exactly_where_triton_reads_the_variable_as_on(monkeypatch, value, on):
    """A "false" or "2" that Triton reads as off must not make the kernels think they run on the CPU."""
    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert arch.interpreting() is on
    knobs = pytest.importorskip("triton.knobs")
    assert bool(knobs.runtime.interpret) is on


def test_the_interpreter_is_off_where_the_variable_is_unset(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert arch.interpreting() is False


@pytest.mark.parametrize("capability, optin", [
    (80, 166_912), (86, 101_376), (87, 166_912), (89, 101_376), (90, 232_448), (100, 232_448), (120, 101_376),
])
def test_the_shared_memory_one_block_may_opt_in_to(capability, optin):
    """The per-SM figure less 1 KB reserved per block: Ada's 99 KB, Hopper's 227 KB (the CUDA guide's table)."""
    assert arch.smem_optin(capability) == optin
    assert arch.smem_per_sm(capability) == optin + 1024


def test_an_architecture_the_table_lacks_is_a_key_error():
    with pytest.raises(KeyError):
        arch.smem_optin(75)


@pytest.mark.parametrize("major, minor, capability", [(8, 9, 89), (9, 0, 90), (8, 6, 86), (12, 0, 120)])
def test_a_device_capability_keeps_its_minor_version(monkeypatch, major, minor, capability):
    arch._capability.cache_clear()
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: (major, minor))
    try:
        assert arch.capability_of(torch.device("cuda", 0)) == capability
    finally:
        arch._capability.cache_clear()


def test_a_cpu_tensor_or_a_non_device_has_no_capability():
    assert arch.capability_of(torch.empty(1)) is None
    assert arch.capability_of("cuda") is None and arch.capability_of(torch.device("cpu")) is None


@pytest.mark.parametrize("capability, hopper, tma, ws, wgmma", [
    (None, False, False, False, False), (80, False, False, False, False), (89, False, False, False, False),
    (90, True, True, True, True), (100, False, True, True, True), (120, False, True, True, False),
])
def test_what_each_architecture_can_do(capability, hopper, tma, ws, wgmma):
    assert arch.is_hopper(capability) is hopper and arch.has_tma(capability) is tma
    assert arch.has_warp_specialization(capability) is ws and arch.has_wgmma(capability) is wgmma

"""kernel.triton.launch: which launcher the direct path may call flat, when a profiler's hooks send launches
through the JIT, and which inputs a plan copies (fakes stand for Triton's launchers and hooks)."""

from __future__ import annotations

import types

import pytest
import torch

import kernel.triton.launch as launch


def _launcher(**attributes):
    fields = dict(launch=lambda *a: "flat", launch_cooperative_grid=False, launch_pdl=False,
                  global_scratch_size=0, profile_scratch_size=0)
    fields.update(attributes)
    return types.SimpleNamespace(**{k: v for k, v in fields.items() if v is not ...})


@pytest.mark.parametrize("attributes, flat", [
    ({}, True),                                              # Triton 3.6: the kernel's arguments flat
    ({"arg_annotations": ()}, False),                        # 3.8 and later: one shared entry point, a tuple
    ({"kernel_signature": ()}, False),
    ({"arg_annotations": (), "kernel_signature": ()}, False),
    ({"gsan_enabled": True}, False),                         # the sanitizer's launcher checks each launch
    ({"gsan_enabled": False}, True),
    ({"launch": ...}, False),                                # no C entry point at all
])
def test_a_launcher_is_called_flat_only_with_the_flat_abi(attributes, flat):
    assert launch.flat_entry_point(_launcher(**attributes)) is flat


@pytest.mark.parametrize("scratch, direct", [
    ({}, True),
    ({"global_scratch_size": 128}, False),
    ({"profile_scratch_size": 64}, False),
    ({"global_scratch_size": ...}, False),                   # a launcher that does not say: its wrapper
    ({"profile_scratch_size": ...}, False),
])
def test_a_kernel_that_needs_scratch_or_does_not_say_goes_through_the_wrapper(scratch, direct):
    launcher = _launcher(**scratch)
    compiled = types.SimpleNamespace(run=launcher, function="fn", packed_metadata="meta")
    run, head = launch.direct_runner(compiled)
    assert (run is launcher.launch) is direct and (run is launcher) is not direct
    assert head[0] == "fn" and "meta" in head and len(head) == (9 if direct else 5)


def test_any_installed_launch_hook_sends_launches_through_the_jit(monkeypatch):
    runtime = types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    monkeypatch.setattr(launch, "_RUNTIME", runtime)
    assert not launch.hooks_busy()
    runtime.launch_enter_hook = lambda *a: None              # a plain callable (older Triton): installed
    assert launch.hooks_busy()
    runtime.launch_enter_hook = types.SimpleNamespace(calls=[])        # an empty HookChain: none
    assert not launch.hooks_busy()
    runtime.launch_exit_hook = types.SimpleNamespace(calls=[print])    # the exit hook alone is enough
    assert launch.hooks_busy()


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_an_input_with_a_non_unit_last_stride_is_copied_and_the_others_are_not(which):
    tensors = {name: torch.randn(1, 2, 8, 16) for name in "qkv"}
    tensors[which] = torch.randn(1, 2, 16, 8).transpose(2, 3)
    plan = launch.PlanTensors(*tensors.values(), None, None, out_may_be_q=False)
    assert plan.copy_inputs
    q, k, v, out, lse = plan._tensors(*tensors.values(), None, None)
    taken = dict(q=q, k=k, v=v)
    assert taken[which].stride(-1) == 1 and torch.equal(taken[which], tensors[which])
    assert all(taken[n] is tensors[n] for n in "qkv" if n != which)
    assert out.shape == (1, 2, 8, 16) and lse.shape == (1, 2, 8)

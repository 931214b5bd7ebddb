"""The gate's shapes: which lengths and layouts every config is checked on."""

from __future__ import annotations

import pytest

from tuner.gate import edge_gates, gate_compile_problems, gate_shapes, ragged_gate
from tuner.kernels.triton_fwd import KERNEL, FwdConfig as Config
from tuner.problem import Problem

STUDY_SHAPE = Problem(batch=4, heads=8, n_q=4096, n_k=4096, head_dim=64, dtype="bf16", causal=True)


@pytest.mark.parametrize("block_m, block_n", [(16, 16), (64, 32), (128, 64), (256, 256)])
def test_edge_shapes_leave_one_valid_row_and_key_and_fewer_keys_than_a_tile(block_m, block_n):
    one, short = edge_gates(STUDY_SHAPE, Config(block_m, block_n, 4, 2))
    assert one.problem.n_q % block_m == 1 and one.problem.n_q > block_m     # last query tile: one valid row
    assert one.problem.n_k % block_n == 1 and one.problem.n_k > block_n     # last key tile: one valid key
    assert short.problem.n_k < block_n and short.strided_v
    for gate in (one, short):
        assert gate.problem.causal == STUDY_SHAPE.causal and gate.problem.dtype == "bf16"
        assert gate.problem.n_q != gate.problem.n_k                          # non-square


@pytest.mark.parametrize("heads", [1, 8, 16, 32])
def test_the_edge_shapes_share_one_specialisation_which_the_sweep_compiles_ahead(heads):
    config, shape = Config(128, 64, 8, 3), Problem(batch=4, heads=heads, n_q=4096, n_k=4096, causal=True)
    keys = {KERNEL.specialisation(g.problem) for g in edge_gates(shape, config)}
    assert len(keys) == 1 and keys != {KERNEL.specialisation(shape)}
    assert {KERNEL.specialisation(p) for p in KERNEL.gate_compile_problems(shape, config)} == keys


def test_edge_shapes_in_the_study_specialisation_are_not_compiled_again(monkeypatch):
    """A kernel that does not specialise on lengths runs its edge shapes in the timed binary."""
    from tuner.kernels.triton_fwd import TritonForward

    config, shape = Config(128, 64, 8, 3), Problem(batch=4, heads=8, n_q=4096, n_k=4096, causal=True)
    monkeypatch.setattr(TritonForward, "specialisation", lambda self, problem: (problem.dtype, problem.causal))
    assert KERNEL.gate_compile_problems(shape, config) == [] and gate_compile_problems(shape, config)


def test_the_backward_compiles_its_edge_shapes_ahead():
    from tuner.kernels import get

    backward = get("triton", "bwd")
    config = backward.config_type(64, 64, 4, 1, 64, 64, 4, 1)
    shape = Problem(batch=4, heads=8, n_q=4096, n_k=4096, causal=True)
    extra = backward.gate_compile_problems(shape, config)
    keys = {backward.specialisation(g.problem) for g in edge_gates(shape, backward.edge_tiles(config))}
    assert len(keys) == 1 and {backward.specialisation(p) for p in extra} == keys
    assert keys != {backward.specialisation(shape)}
    assert gate_compile_problems(shape, config)                        # the edge problem, before the filter


def test_the_ragged_gate_runs_the_timed_binary():
    for heads in (1, 8, 16, 32):
        shape = Problem(heads=heads)
        gate = ragged_gate(shape)
        assert KERNEL.specialisation(gate.problem) == KERNEL.specialisation(shape)
        assert gate.problem.n_q % 64 and gate.problem.n_k % 64 and gate.problem.n_q != gate.problem.n_k


def test_gate_cases_have_v_in_another_layout_than_k():
    short = gate_shapes(Problem(head_dim=16, dtype="fp32"), Config(16, 32, 1, 1), small=True)[2]
    case = KERNEL.make_case(short, "cpu")
    k, v = case.tensors["k"], case.tensors["v"]
    assert k.stride() != v.stride() and k.shape == v.shape
    assert case.reference[0].dtype.is_floating_point and case.torch_error.out >= 0

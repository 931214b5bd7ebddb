"""The correctness rule: bounds tied to PyTorch's own error, floors no higher than needed."""

import pytest
import torch

from kernel.reference import (
    LSE_FLOOR,
    OUT_FLOOR,
    TORCH_ERROR_MULTIPLE,
    TorchError,
    accuracy,
    attention_reference,
    bounds,
    rel_err,
    torch_low_precision_error,
)


def _case(dtype, causal=False, n_q=40, n_k=56):
    q, k, v = (torch.randn(1, 2, n, 32).to(dtype) for n in (n_q, n_k, n_k))
    reference = attention_reference(q, k, v, causal, dtype=torch.float64)
    return q, k, v, reference, torch_low_precision_error(q, k, v, causal, reference)


def _perturbed(tensor, relative: float):
    """``tensor`` moved by exactly ``relative`` in relative Frobenius norm (float64 math)."""
    direction = torch.randn_like(tensor, dtype=torch.float64)
    direction *= relative * tensor.double().norm() / direction.norm()
    return tensor.double() + direction


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("which", ["out", "lse"])
def test_half_the_bound_passes_and_twice_the_bound_fails(dtype, which):
    q, k, v, reference, torch_error = _case(dtype)
    bound_out, bound_lse = bounds(dtype, torch_error)
    bound = bound_out if which == "out" else bound_lse
    for factor, passes in ((0.5, True), (2.0, False)):
        out, lse = reference
        if which == "out":
            out = _perturbed(out, factor * bound)
        else:
            lse = _perturbed(lse, factor * bound)
        result = accuracy(out, lse, q, k, v, False, reference=reference, torch_error=torch_error)
        assert result.ok is passes, (factor, result.reason)


def test_bounds_are_three_times_pytorchs_error_or_the_floor():
    big = TorchError(out=1e-2, lse=1e-3)
    assert TORCH_ERROR_MULTIPLE == 3.0
    assert bounds(torch.float16, big) == pytest.approx((3e-2, 3e-3))
    exact = TorchError(out=0.0, lse=0.0)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        assert bounds(dtype, exact) == (OUT_FLOOR[dtype], LSE_FLOOR[dtype])


def test_floors_sit_far_below_a_one_key_bug():
    """An extra key in a row of 17 moves out by percents; every floor is under 1e-2 of that."""
    assert max(OUT_FLOOR.values()) <= 2e-3 and max(LSE_FLOOR.values()) <= 1e-5
    assert OUT_FLOOR[torch.float32] <= 1e-5 and LSE_FLOOR[torch.float32] <= 1e-6


def test_pytorchs_own_error_is_measured_on_the_inputs():
    _, _, _, _, fp32 = _case(torch.float32)
    _, _, _, _, fp16 = _case(torch.float16)
    assert fp32.out < 1e-5 and fp32.lse < 1e-5
    assert 1e-5 < fp16.out < 1e-2 and 1e-7 < fp16.lse < 1e-3
    assert fp16.out > 10 * fp32.out


def test_nan_anywhere_fails():
    q, k, v, reference, torch_error = _case(torch.float32)
    out, lse = (t.clone() for t in reference)
    lse[0, 1, 7] = float("nan")
    result = accuracy(out, lse, q, k, v, False, reference=reference, torch_error=torch_error)
    assert not result.ok and "NaN" in result.reason


def test_rel_err_matches_infinite_entries_exactly():
    expected = torch.tensor([1.0, 2.0, float("-inf")])
    assert rel_err(torch.tensor([1.0, 2.0, float("-inf")]), expected) == 0.0
    assert rel_err(torch.tensor([1.0, 2.0, 0.0]), expected) == float("inf")
    assert rel_err(torch.tensor([1.0, 2.2, float("-inf")]), expected) == pytest.approx(0.2 / 5 ** 0.5)


def test_causal_reference_masks_the_upper_triangle():
    q, k, v, reference, _ = _case(torch.float64, causal=True, n_q=5, n_k=5)
    out, _ = attention_reference(q, k, v, True, dtype=torch.float64)
    assert torch.allclose(out[..., 0, :], v[..., 0, :])          # row 0 sees key 0 only


def test_four_times_pytorchs_own_error_fails_and_twice_passes():
    """The rule of the flash-attention tests: no worse than a small multiple (3) of PyTorch's error."""
    q, k, v, reference, _ = _case(torch.float16)
    pytorch = TorchError(out=1e-3, lse=1e-4)              # well above the floors: the multiple decides
    for factor, passes in ((2.0, True), (4.0, False)):
        out = _perturbed(reference[0], factor * pytorch.out)
        result = accuracy(out, reference[1], q, k, v, False, reference=reference, torch_error=pytorch)
        assert result.ok is passes, (factor, result.reason)


def test_lse_error_is_absolute_near_zero_and_relative_elsewhere():
    from kernel.reference import lse_err

    f64 = torch.float64
    near_zero, off = torch.tensor([1e-3], dtype=f64), torch.tensor([1e-3 + 1e-8], dtype=f64)
    assert lse_err(off, near_zero) == pytest.approx(1e-8) and rel_err(off, near_zero) == pytest.approx(1e-5)
    assert lse_err(torch.tensor([10.1], dtype=f64), torch.tensor([10.0], dtype=f64)) == pytest.approx(0.01)
    assert lse_err(torch.tensor([0.0]), torch.tensor([float("-inf")])) == float("inf")

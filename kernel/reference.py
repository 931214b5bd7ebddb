"""Reference attention forwards: slow and obviously right.

* :func:`attention_reference` is the yardstick for every correctness check: float32
  (or float64) math on upcast inputs, through PyTorch SDPA for the output and an
  explicit logsumexp for ``lse``.
* :func:`flash_attn_tiled_reference` is the article's tiled FA2 in plain PyTorch, a
  Python double loop over tiles with the online softmax, now with causal masking and
  ragged tiles. It is a readable model of what the Triton kernel does, not fast.

Shapes: ``q`` [..., N_q, D], ``k`` and ``v`` [..., N_k, D] with the same leading dims.
Returns ``(out, lse)``: ``out`` [..., N_q, D], ``lse`` [..., N_q], natural log.
Causal masks key j for query i unless j <= i (top-left aligned).

:func:`accuracy` is the correctness rule shared by the tests and the tuner's gate: the
kernel's error against the reference may be at most a small multiple of PyTorch's own
error on the same inputs, for ``out`` and for ``lse`` separately, with floors only as
high as a correct kernel needs where PyTorch's error is near zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def causal_keep(n_q: int, n_k: int, device=None) -> torch.Tensor:
    """[N_q, N_k] bool, True where query i may attend to key j (j <= i)."""
    return torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril()


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention in ``dtype`` (float32 or float64) on upcast inputs.

    Args:
        q: [..., N_q, D]. k, v: [..., N_k, D].
        causal: top-left aligned causal mask.
        dtype: compute precision.

    Returns:
        ``(out [..., N_q, D] in dtype, lse [..., N_q] in dtype)``.
    """
    q, k, v = (t.to(dtype) for t in (q, k, v))
    n_q, n_k = q.shape[-2], k.shape[-2]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])          # [..., N_q, N_k]
    if causal:
        scores = scores.masked_fill(~causal_keep(n_q, n_k, q.device), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)                                 # [..., N_q]
    mask = causal_keep(n_q, n_k, q.device) if causal else None
    # The math backend is exact at this precision and accepts float64 and any device.
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)   # [..., N_q, D]
    return out, lse


def flash_attn_tiled_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                               tile_q: int = 16, tile_k: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """The article's FA2 forward in PyTorch: tiles, online softmax, fp32 state.

    Args:
        q: [..., N_q, D]. k, v: [..., N_k, D]. Any N (the last tiles may be ragged).
        causal: top-left aligned causal mask; tiles above the diagonal are skipped.
        tile_q, tile_k: tile sizes.

    Returns:
        ``(out [..., N_q, D] in q.dtype, lse [..., N_q] float32)``.
    """
    n_q, n_k, head_dim = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(head_dim)
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1], device=q.device, dtype=torch.float32)
    for q_start in range(0, n_q, tile_q):
        q_tile = q[..., q_start:q_start + tile_q, :].float()                  # [..., Bq, D]
        rows = q_tile.shape[-2]
        acc = torch.zeros_like(q_tile)                                        # [..., Bq, D]
        row_sum = torch.zeros(q_tile.shape[:-1] + (1,), device=q.device)      # [..., Bq, 1]
        row_max = torch.full_like(row_sum, float("-inf"))                     # [..., Bq, 1]
        key_stop = min(n_k, q_start + rows) if causal else n_k
        for k_start in range(0, key_stop, tile_k):
            k_tile = k[..., k_start:k_start + tile_k, :].float()              # [..., Bk, D]
            v_tile = v[..., k_start:k_start + tile_k, :].float()              # [..., Bk, D]
            scores = q_tile @ k_tile.transpose(-1, -2) * scale                # [..., Bq, Bk]
            if causal:
                q_pos = torch.arange(q_start, q_start + rows, device=q.device)[:, None]
                k_pos = torch.arange(k_start, k_start + k_tile.shape[-2], device=q.device)[None, :]
                scores = scores.masked_fill(k_pos > q_pos, float("-inf"))
            new_max = torch.maximum(row_max, scores.amax(dim=-1, keepdim=True))
            # A row that has seen only masked keys keeps -inf; shifting by 0 keeps exp at 0.
            shift = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
            probs = torch.exp(scores - shift)                                 # [..., Bq, Bk]
            alpha = torch.exp(row_max - shift)                                # [..., Bq, 1]
            row_sum = alpha * row_sum + probs.sum(dim=-1, keepdim=True)
            acc = alpha * acc + probs @ v_tile
            row_max = new_max
        has_key = row_sum > 0
        out[..., q_start:q_start + rows, :] = (acc / torch.where(has_key, row_sum, 1.0)).to(q.dtype)
        lse[..., q_start:q_start + rows] = torch.where(
            has_key, row_max + torch.log(row_sum), torch.full_like(row_max, float("-inf"))).squeeze(-1)
    return out, lse


def flash_attn_tiled_backward_reference(dout, q, k, v, out, lse, causal: bool = False, tile_q: int = 16,
                                        tile_k: int = 16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The FA2 backward in PyTorch, tile by tile, as the Triton kernels do it.

    The forward kept only ``lse``, so each tile's probabilities are recomputed:
    ``P = exp(S - lse)``. With ``delta = rowsum(dO * O)``: ``dV += P^T dO``,
    ``dS = P * (dO V^T - delta)``, ``dK += scale dS^T Q`` (a key tile gathers from every
    query tile that sees it) and ``dQ += scale dS K`` (a query tile from its key tiles).

    Returns:
        ``(dq, dk, dv)`` in the inputs' dtypes, computed in float32.
    """
    n_q, n_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    dq, dk, dv = (torch.zeros_like(t, dtype=torch.float32) for t in (q, k, v))
    delta = (dout.float() * out.float()).sum(-1, keepdim=True)               # [..., N_q, 1]
    for k_start in range(0, n_k, tile_k):
        k_tile, v_tile = k[..., k_start:k_start + tile_k, :].float(), v[..., k_start:k_start + tile_k, :].float()
        for q_start in range(0, n_q, tile_q):
            rows = slice(q_start, q_start + tile_q)
            if causal and q_start + q[..., rows, :].shape[-2] <= k_start:    # the whole tile is above the diagonal
                continue
            q_tile, do_tile = q[..., rows, :].float(), dout[..., rows, :].float()
            scores = q_tile @ k_tile.transpose(-1, -2) * scale                # [..., Bq, Bk]
            if causal:
                q_pos = torch.arange(q_start, q_start + q_tile.shape[-2], device=q.device)[:, None]
                k_pos = torch.arange(k_start, k_start + k_tile.shape[-2], device=q.device)[None, :]
                scores = scores.masked_fill(k_pos > q_pos, float("-inf"))
            row_lse = lse[..., rows].unsqueeze(-1)                            # [..., Bq, 1]
            # a row with no key (lse = -inf) has no probability anywhere, hence no gradient
            probs = torch.where(torch.isinf(row_lse), 0.0, torch.exp(scores - row_lse))
            dv[..., k_start:k_start + tile_k, :] += probs.transpose(-1, -2) @ do_tile
            d_scores = probs * (do_tile @ v_tile.transpose(-1, -2) - delta[..., rows, :])
            dk[..., k_start:k_start + tile_k, :] += scale * d_scores.transpose(-1, -2) @ q_tile
            dq[..., rows, :] += scale * d_scores @ k_tile
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


# --------------------------------------------------------------------------- accuracy

# A kernel's error may be at most this multiple of PyTorch's own error on the same inputs.
TORCH_ERROR_MULTIPLE = 3.0
# Floors of the relative error bounds, for where PyTorch's own error is near zero. They
# sit a few times above what the correct kernel measures (docs/results: the fp32
# interpreter gives 2-4e-7 for out and 2-4e-8 for lse), and far below what a one-key
# or one-row bug costs on the gate shapes (1e-3 and up). lse errors are measured by
# :func:`lse_err`.
OUT_FLOOR = {torch.float32: 2e-6, torch.float16: 2e-4, torch.bfloat16: 2e-3}
LSE_FLOOR = {torch.float32: 1e-6, torch.float16: 5e-6, torch.bfloat16: 5e-6}


def rel_err(actual: torch.Tensor, expected: torch.Tensor, scale_floor: float = 0.0) -> float:
    """Relative Frobenius error ``|actual - expected| / |max(|expected|, scale_floor)|`` in float64.

    Infinite reference entries (``lse = -inf`` for a row with no key) must be matched
    exactly and are left out of the norms; any mismatch there is an infinite error.
    ``scale_floor`` keeps entries near zero from dividing by almost nothing (see :func:`lse_err`).
    """
    actual, expected = actual.double(), expected.double()
    infinite = torch.isinf(expected)
    if bool(infinite.any()):
        if not torch.equal(actual[infinite], expected[infinite]):
            return float("inf")
        actual, expected = actual[~infinite], expected[~infinite]
    if expected.numel() == 0:
        return 0.0
    scale = expected.abs().clamp_min(scale_floor).norm() if scale_floor else expected.norm()
    return ((actual - expected).norm() / scale.clamp_min(1e-30)).item()


def lse_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """The error of an ``lse``: relative where ``|lse| >= 1``, absolute below. Rounding bounds
    an lse's absolute error (a few ulps of its scores), so a row whose lse sits near zero
    (one query, one key: lse is a single score) has an ill-conditioned relative error.
    A CI run measured 1.65e-6 relative against PyTorch's own 5.2e-7 there, while both
    were a few 1e-9 absolute."""
    return rel_err(actual, expected, scale_floor=1.0)


@dataclass(frozen=True)
class TorchError:
    """PyTorch's own relative error on the inputs, against the same reference."""

    out: float
    lse: float


def torch_low_precision_error(q, k, v, causal: bool, reference) -> TorchError:
    """PyTorch's error at q's precision (tf32 for float32 on a GPU, as our kernel's dots)
    against ``reference = (out, lse)``: SDPA for ``out``, a logsumexp of ``q @ k^T``
    computed in q's dtype for ``lse``."""
    ref_out, ref_lse = reference
    n_q, n_k = q.shape[-2], k.shape[-2]
    mask = causal_keep(n_q, n_k, q.device) if causal else None
    tf32 = q.dtype == torch.float32 and q.is_cuda
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32 or previous
    try:
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    if causal:
        scores = scores.masked_fill(~mask, float("-inf"))
    return TorchError(out=rel_err(out, ref_out), lse=lse_err(torch.logsumexp(scores, dim=-1), ref_lse))


@dataclass(frozen=True)
class Accuracy:
    """A kernel's (out, lse) against the reference, and whether it passes."""

    err_out: float
    err_lse: float
    bound_out: float
    bound_lse: float
    nan: bool

    @property
    def ok(self) -> bool:
        return not self.nan and self.err_out <= self.bound_out and self.err_lse <= self.bound_lse

    @property
    def reason(self) -> str:
        if self.nan:
            return "NaN in out or lse (an element left unwritten, or bad math)"
        verdicts = [f"out rel err {self.err_out:.2e} (bound {self.bound_out:.2e})",
                    f"lse rel err {self.err_lse:.2e} (bound {self.bound_lse:.2e})"]
        return ", ".join(verdicts)


def bounds(dtype: torch.dtype, torch_error: TorchError) -> tuple[float, float]:
    """(out bound, lse bound) for a kernel at ``dtype`` whose inputs gave PyTorch ``torch_error``."""
    return (max(OUT_FLOOR[dtype], TORCH_ERROR_MULTIPLE * torch_error.out),
            max(LSE_FLOOR[dtype], TORCH_ERROR_MULTIPLE * torch_error.lse))


def accuracy(out, lse, q, k, v, causal: bool, reference=None, torch_error: TorchError | None = None) -> Accuracy:
    """The flash-attention test rule: ``out`` and ``lse`` each within a small multiple of
    PyTorch's own error on the same inputs (or a floor), against a float64 (CPU) or
    float32 (GPU) reference.

    Args:
        out: [..., N_q, D] the kernel's output. lse: [..., N_q] its logsumexp.
        q, k, v: the inputs it was given.
        reference: ``(out, lse)`` of :func:`attention_reference` if already computed.
        torch_error: :func:`torch_low_precision_error` if already computed.
    """
    if reference is None:
        reference = attention_reference(q, k, v, causal, dtype=torch.float32 if q.is_cuda else torch.float64)
    if torch_error is None:
        torch_error = torch_low_precision_error(q, k, v, causal, reference)
    nan = bool(torch.isnan(out).any() or torch.isnan(lse).any())
    bound_out, bound_lse = bounds(q.dtype, torch_error)
    return Accuracy(err_out=float("nan") if nan else rel_err(out, reference[0]),
                    err_lse=float("nan") if nan else lse_err(lse, reference[1]),
                    bound_out=bound_out, bound_lse=bound_lse, nan=nan)


# ------------------------------------------------------------------------ gradients

GRAD_FLOOR = {torch.float32: 2e-6, torch.float16: 5e-4, torch.bfloat16: 5e-3}
# A gradient's entries are measured against at least this multiple of the RMS of the reference dV
# (= P^T dO, on the scale of dO). Where a gradient is exactly 0 (dQ and dK of a row with a single
# key, whose softmax is constant), a correct kernel leaves rounding noise on the scale of its
# terms, a few 1e-7 of dV's in fp32, which a relative error would divide by 0. On random inputs
# dQ, dK and dV have the same order of magnitude at every length, and PyTorch's own error is
# measured against the same scale, so the "3x PyTorch's error" rule is unchanged by it.
GRAD_SCALE_FLOOR = 1.0
GRADIENTS = ("dq", "dk", "dv")


@dataclass(frozen=True)
class GradAccuracy:
    """A backward's (dq, dk, dv) against the reference: each error, its bound, and the verdict."""

    errors: tuple[float, float, float]
    bounds: tuple[float, float, float]
    nan: bool

    @property
    def ok(self) -> bool:
        return not self.nan and all(e <= b for e, b in zip(self.errors, self.bounds))

    @property
    def reason(self) -> str:
        if self.nan:
            return "NaN in dq, dk or dv (an element left unwritten, or bad math)"
        return ", ".join(f"{name} rel err {e:.2e} (bound {b:.2e})"
                         for name, e, b in zip(GRADIENTS, self.errors, self.bounds))


def grad_accuracy(ours, reference, pytorchs, dtype: torch.dtype, lse: torch.Tensor | None = None) -> GradAccuracy:
    """The flash-attention test rule for gradients: each of dq, dk, dv within
    :data:`TORCH_ERROR_MULTIPLE` x PyTorch's own error (``pytorchs``, its gradients at the
    inputs' precision) against ``reference`` (float64 or float32 autograd), or a floor; with the
    reference ``lse``, a floor no lower than :func:`lse_rounding` of it."""
    floor = GRAD_SCALE_FLOOR * float(reference[2].double().pow(2).mean().sqrt()) if reference[2].numel() else 0.0
    nan = any(bool(torch.isnan(g).any()) for g in ours)
    errors = tuple(float("nan") if nan else rel_err(g, r, floor) for g, r in zip(ours, reference))
    least = max(GRAD_FLOOR[dtype], lse_rounding(lse) if lse is not None else 0.0)
    bounds = tuple(max(least, TORCH_ERROR_MULTIPLE * rel_err(t, r, floor)) for t, r in zip(pytorchs, reference))
    return GradAccuracy(errors, bounds, nan)


def lse_rounding(lse: torch.Tensor) -> float:
    """The relative error that one fp32 rounding of the largest finite |lse| puts on every probability a
    FlashAttention backward recomputes as ``exp2(s - lse)``: half an ulp of |lse| in log2 units (2^-24 of it),
    times ln 2, is 2^-24 x |lse| in natural units. The forward's contract returns lse in fp32, so no backward that
    reads it does better; PyTorch's own, which keeps the probabilities, does (the battery of 2026-12-05: |lse| of
    ~200 gave dV 4e-6 against the 2e-6 floor; fp32 scores and lse alone give 5e-6). Under the fp32 floor
    (2e-6) wherever |lse| < 33, as on the gates' random inputs."""
    finite = lse[torch.isfinite(lse)]
    return float(finite.abs().max()) * 2.0**-24 if finite.numel() else 0.0

"""One kernel call against a float64 reference, as a subprocess of the battery:

    TRITON_INTERPRET=1 python scripts/battery/kernel_probe.py '{"fn": "fwd", "nq": 37, "nk": 37, "d": 32, ...}'

Exit 0: the result agrees with float64 (out and lse; dq, dk, dv) by the project's own rule
(``kernel.reference.accuracy`` / ``grad_accuracy``: within 3x PyTorch's own error, or a floor); where the inputs
hold NaN or inf, the non-finite entries must sit where float64 puts them and the rest agree (gradients: at
least where float64 puts them, since a row whose lse is NaN rather than +inf, as decided for +inf scores,
spreads NaN to every key it sees). Exit 3 with
``BATTERY WRONG ANSWER: ...``: they differ. Exit 2 with one line ``ExcType: message``: the call was refused by
the kernel's own code (or by Python at the call). An exception raised from inside Triton or torch is printed
as its traceback (exit 1): the kernel's checks let the input through.

Spec keys: fn (fwd, bwd, autograd), b, h, nq, nk, d, dtype, causal, three_d, layout (contiguous, transposed,
sliced, strided_d, offset, expanded), dtypes / shapes / devices (per tensor q, k, v), poison ([tensor, value,
index]), scale, kw (keywords; {"$np": n} is numpy.int64(n), {"$cfg": {...}} a BwdConfig), out (fwd: nan,
alias_q, wrong_shape, lse_wrong_dtype, overlap_k; bwd: dq_nan, dq_alias_dk, dq_wrong_shape), bwd_in
(lse_wrong_shape, out_wrong_dtype, dout_fp16, dout_strided).
"""

from __future__ import annotations

import json
import math
import sys
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent.parent
WRONG_ANSWER = "BATTERY WRONG ANSWER"
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "fp64": torch.float64,
          "int32": torch.int32, "bool": torch.bool, "complex64": torch.complex64}
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (2e-2, 2e-2)}     # (atol, rtol) where inputs are non-finite


def decode(value):
    if isinstance(value, dict) and "$np" in value:
        import numpy as np

        return np.int64(value["$np"])
    if isinstance(value, dict) and "$cfg" in value:
        from kernel import BwdConfig

        return BwdConfig(**value["$cfg"])
    return value


def tensor(name: str, spec: dict, gen: torch.Generator) -> torch.Tensor:
    b, h, d = spec.get("b", 1), spec.get("h", 2), spec.get("d", 32)
    n = spec.get("nq", 16) if name in ("q", "dout") else spec.get("nk", 16)
    shape = spec.get("shapes", {}).get(name) or ([b, n, d] if spec.get("three_d") else [b, h, n, d])
    dtype = DTYPES[spec.get("dtypes", {}).get(name, spec.get("dtype", "fp32"))]
    device = spec.get("devices", {}).get(name, "cpu")
    if device != "cpu":
        return torch.empty(shape, dtype=dtype, device=device)
    layout = spec.get("layout", "contiguous") if name != "dout" else "contiguous"
    make = lambda s: (torch.randn(s, generator=gen) * spec.get("scale", 1.0)).to(dtype)  # noqa: E731
    if layout == "transposed" and len(shape) == 4:
        return make([shape[0], shape[2], shape[1], shape[3]]).transpose(1, 2)
    if layout == "sliced":
        return make(shape[:-2] + [2 * shape[-2], shape[-1] + 8])[..., ::2, 3:3 + shape[-1]]
    if layout == "strided_d":
        return make(shape[:-1] + [2 * shape[-1]])[..., ::2]
    if layout == "offset":
        return make([math.prod(shape) + 7])[7:].view(shape)
    if layout == "expanded":
        return make([1] + shape[1:]).expand(shape)
    return make(shape)


def attend(q, k, v, causal: bool):
    """Attention with rows that see no key giving out 0 and lse -inf (the kernels' contract)."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(~torch.ones(n_q, n_k, dtype=torch.bool).tril(), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse.unsqueeze(-1))
    probs = torch.where(torch.isneginf(lse).unsqueeze(-1), torch.zeros_like(probs), probs)
    return probs @ v, lse


def torch_attention(q, k, v, causal: bool):
    """PyTorch's own attention at the inputs' precision (SDPA's math backend), as tests/grad_reference.py
    measures PyTorch's error; without keys or queries, the same math as :func:`attend`."""
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        return attend(q, k, v, causal)[0]
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril() if causal else None
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def poison(spec: dict, tensors: dict) -> bool:
    for name, value, index in spec.get("poison", []):
        tensors[name][tuple(index)] = float(value)
    return bool(spec.get("poison"))


def mask_check(label: str, ours: torch.Tensor, ref: torch.Tensor, dtype, spread: bool = False) -> str | None:
    """Non-finite entries where float64 has them (``spread``: at least there), finite ones close: None, or what
    differs."""
    if ours.shape != ref.shape:
        return f"{label}: shape {tuple(ours.shape)} where float64 gives {tuple(ref.shape)}"
    ours, ref = ours.double(), ref.double()
    if spread:
        missing = torch.isfinite(ours) & ~torch.isfinite(ref)
        if missing.any():
            where = missing.nonzero()[0].tolist()
            return f"{label}: finite where float64 is not, first at {where} ({ours[tuple(where)]})"
        both = torch.isfinite(ours)
        ours, ref = torch.where(both, ours, 0.0), torch.where(both, ref, 0.0)
    elif not torch.equal(torch.isfinite(ours), torch.isfinite(ref)):
        where = (torch.isfinite(ours) != torch.isfinite(ref)).nonzero()[0].tolist()
        return f"{label}: finite where float64 is not, or the reverse, first at {where} ({ours[tuple(where)]} vs " \
               f"{ref[tuple(where)]})"
    atol, rtol = TOL[dtype]
    finite = torch.isfinite(ref)
    if not torch.allclose(ours[finite], ref[finite], atol=atol * max(1.0, ref[finite].abs().max().item()
                                                                     if finite.any() else 1.0), rtol=rtol):
        return f"{label}: finite entries differ by up to {(ours[finite] - ref[finite]).abs().max().item():.3g}"
    return None


def outputs_for(spec: dict, q, k, v):
    kind = spec.get("out")
    lse_shape = q.shape[:-1]
    if kind == "nan":
        return {"out": torch.full(q.shape, float("nan"), dtype=q.dtype), "lse": torch.full(lse_shape, float("nan"))}
    if kind == "alias_q":
        return {"out": q}
    if kind == "wrong_shape":
        return {"out": torch.empty(q.shape[:-1] + (q.shape[-1] + 16,), dtype=q.dtype)}
    if kind == "lse_wrong_dtype":
        return {"lse": torch.empty(lse_shape, dtype=torch.float16)}
    if kind == "overlap_k":
        return {"out": k}
    return {}


def run_forward(spec, q, k, v, causal, kw):
    from kernel import flash_attn_fwd

    given = outputs_for(spec, q, k, v)
    q64, k64, v64 = (t.detach().double() for t in (q, k, v))     # before the call: out=q overwrites q
    out, lse = call(flash_attn_fwd, q, k, v, causal, **given, **kw)
    return (out, lse), (q64, k64, v64)


def check_forward(spec, result, inputs, low) -> str:
    from kernel.reference import TorchError, accuracy, torch_low_precision_error

    (out, lse), (q64, k64, v64) = result, inputs
    ref = attend(q64, k64, v64, bool(spec.get("causal")))
    if spec["nonfinite"]:
        return mask_check("out", out, ref[0], low[0].dtype) or mask_check("lse", lse, ref[1], low[0].dtype) or ""
    if spec["nk_zero"]:
        error = TorchError(0.0, 0.0)
    else:
        error = torch_low_precision_error(*low, bool(spec.get("causal")), ref)
        error = TorchError(*(0.0 if math.isnan(e) else e for e in (error.out, error.lse)))
    verdict = accuracy(out, lse, *low, bool(spec.get("causal")), reference=ref, torch_error=error)
    return "" if verdict.ok else verdict.reason


def gradients(fn_out, inputs, dout):
    grads = torch.autograd.grad(fn_out, inputs, dout, allow_unused=True)
    return tuple(torch.zeros_like(t) if g is None else g for g, t in zip(grads, inputs))


def check_backward(spec, ours, q, k, v, dout) -> str:
    from kernel.reference import grad_accuracy

    causal = bool(spec.get("causal"))
    leaves64 = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref_out, ref_lse = attend(*leaves64, causal)
    ref = gradients(ref_out, leaves64, dout.double())
    if spec["nonfinite"]:
        return next((m for m in (mask_check(n, g, r, q.dtype, spread=True) for n, g, r in
                                 zip(["dq", "dk", "dv"], ours, ref)) if m), "")
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    pytorchs = gradients(torch_attention(*leaves, causal), leaves, dout.to(q.dtype))
    verdict = grad_accuracy(ours, ref, pytorchs, q.dtype, lse=ref_lse.detach())
    return "" if verdict.ok else verdict.reason


def bwd_inputs(spec, q, out, lse, dout):
    kind = spec.get("bwd_in")
    if kind == "lse_wrong_shape":
        lse = lse[..., :-1]
    elif kind == "out_wrong_dtype":
        out = out.double()
    elif kind == "dout_fp16":
        dout = dout.half()
    elif kind == "dout_strided":
        dout = torch.randn(dout.shape[:-1] + (2 * dout.shape[-1],))[..., ::2].to(dout.dtype)
    return out, lse, dout


def run_backward(spec, q, k, v, causal, kw, gen) -> str:
    from kernel import flash_attn_bwd, flash_attn_fwd

    out, lse = call(flash_attn_fwd, q, k, v, bool(causal))
    dout = torch.randn(out.shape, generator=gen).to(out.dtype)
    out, lse, dout = bwd_inputs(spec, q, out, lse, dout)
    kind, grads = spec.get("out"), {}
    if kind == "dq_nan":
        grads = {name: torch.full(t.shape, float("nan"), dtype=t.dtype) for name, t in zip(("dq", "dk", "dv"),
                                                                                           (q, k, v))}
    elif kind == "dq_alias_dk":
        grads = {"dq": torch.empty(q.shape, dtype=q.dtype)}
        grads["dk"] = grads["dq"] if q.shape == k.shape else torch.empty(k.shape, dtype=k.dtype)
    elif kind == "dq_wrong_shape":
        grads = {"dq": torch.empty(q.shape[:-1] + (q.shape[-1] + 16,), dtype=q.dtype)}
    ours = call(flash_attn_bwd, dout, q, k, v, out, lse, causal, **grads, **kw)
    return check_backward(spec, ours, q, k, v, dout)


def run_autograd(spec, q, k, v, causal, kw, gen) -> str:
    from kernel import flash_attention

    leaves = [t.detach().requires_grad_() for t in (q, k, v)]       # detach keeps the strides
    out = call(flash_attention, *leaves, causal, **kw)
    dout = torch.randn(out.shape, generator=gen).to(out.dtype)
    ours = call(gradients, out, leaves, dout)
    inputs64 = tuple(t.detach().double() for t in (q, k, v))
    ref_lse = attend(*inputs64, bool(causal))[1].float()       # flash_attention gives no lse: out alone is checked
    return (check_forward(spec, (out.detach(), ref_lse), inputs64, (q, k, v))
            or check_backward(spec, ours, q, k, v, dout))


def run(spec: dict) -> str:
    gen = torch.Generator().manual_seed(spec.get("seed", 0))
    tensors = {name: tensor(name, spec, gen) for name in ("q", "k", "v")}
    spec["nonfinite"] = poison(spec, tensors)
    spec["nk_zero"] = tensors["k"].shape[-2] == 0 if tensors["k"].dim() >= 2 else False
    q, k, v = tensors["q"], tensors["k"], tensors["v"]
    causal = decode(spec.get("causal", False))
    kw = {key: decode(value) for key, value in spec.get("kw", {}).items()}
    fn = spec.get("fn", "fwd")
    if fn == "fwd":
        low = tuple(t.clone() for t in (q, k, v))
        result, inputs = run_forward(spec, q, k, v, causal, kw)
        return check_forward(spec, result, inputs, low)
    if fn == "bwd":
        return run_backward(spec, q, k, v, causal, kw, gen)
    return run_autograd(spec, q, k, v, causal, kw, gen)


class Refused(Exception):
    """The kernel's own code (or Python, at the call) refused the call: one line says why."""


def call(fn, *args, **kw):
    """``fn(*args, **kw)``; an exception raised by the kernel package's code becomes :class:`Refused`."""
    try:
        return fn(*args, **kw)
    except Exception as exc:
        if refused_by_us(exc):
            text = str(exc).splitlines()[0] if str(exc) else ""
            raise Refused(f"{type(exc).__name__}: {text}") from exc
        raise


def refused_by_us(exc: BaseException) -> bool:
    """Raised by the kernel package's own code (or by Python at the probe's call): a refusal, not a crash."""
    frames = traceback.extract_tb(exc.__traceback__)
    origin = Path(frames[-1].filename).resolve() if frames else Path(__file__)
    return origin == Path(__file__).resolve() or (ROOT / "kernel") in origin.parents


def main() -> int:
    spec = json.loads(sys.argv[1])
    try:
        reason = run(spec)
    except Refused as exc:
        print(exc, file=sys.stderr)
        return 2
    except Exception:
        traceback.print_exc()      # from inside Triton or torch, or the probe's own failure (its frames say)
        return 1
    if reason:
        print(f"{WRONG_ANSWER}: {reason}")
        return 3
    print("match: agrees with float64")
    return 0


if __name__ == "__main__":
    sys.exit(main())

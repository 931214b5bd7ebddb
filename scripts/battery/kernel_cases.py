"""kernel: flash_attn_fwd, flash_attn_bwd and flash_attention under TRITON_INTERPRET=1, fp32 and fp16, each call
in its own process (:mod:`scripts.battery.kernel_probe`) against a float64 reference: lengths 0 and 1, ragged,
causal with N_q != N_k, views, NaN and inf, then bad dtypes, shapes, devices and keyword values, which must be
refused with one line naming them (exit 2 from the probe), never crash inside Triton."""

from __future__ import annotations

import json
import shlex

from scripts.battery.case import Case

FNS = ("fwd", "bwd", "autograd")
HUGE = 10**20
# (label, spec): valid inputs, run for every entry point in fp32 and fp16
SIZES = {
    "n1-d16": dict(nq=1, nk=1, d=16), "n0": dict(nq=0, nk=0, d=16), "nq0": dict(nq=0, nk=8, d=16),
    "nk0": dict(nq=8, nk=0, d=16), "ragged-37": dict(nq=37, nk=37, d=32),
    "causal-nq45-nk17": dict(nq=45, nk=17, d=16, causal=True),
    "causal-nq17-nk45": dict(nq=17, nk=45, d=16, causal=True),
    "nq33-nk70": dict(nq=33, nk=70, d=16), "d64": dict(nq=20, nk=20, d=64, causal=True),
    "d128": dict(nq=20, nk=24, d=128), "d256": dict(nq=16, nk=16, d=256),
    "three-d": dict(b=2, nq=24, nk=24, d=32, three_d=True), "b2-h3": dict(b=2, h=3, nq=19, nk=19, d=16, causal=True),
}
LAYOUTS = ("transposed", "sliced", "strided_d", "offset", "expanded")
# tiles far past the inputs: a run that agrees, or a refusal naming the tile; never an error from inside Triton
BIG_TILES = {"block_m-4096": {"block_m": 4096}, "block_n-4096": {"block_n": 4096},
             "tiles-4096x4096": {"block_m": 4096, "block_n": 4096}}
BIG_TILE = r"^(ValueError|TypeError): .*(block|tile)"
BIG_NOTE = "left open on 2026-12-04 for the backward: an InterpreterError from inside Triton"
AGAIN = {"bwd": ("q-float64", "bf16-interpreter", "head-dim-48", "q-meta", "causal-string"),
         "autograd": ("q-float64", "bf16-interpreter", "head-dim-48", "q-meta")}


def probe(name: str, spec: dict, expect=(0,), regex: str | None = None, env=None, note: str = "") -> Case:
    command = f"python @REPO@/scripts/battery/kernel_probe.py {shlex.quote(json.dumps(spec, sort_keys=True))}"
    environment = {"TRITON_INTERPRET": "1", **(env or {})}
    return Case("kernel", name, command, expect, stderr_re=regex, env=environment, timeout=300, note=note)


def refused(name: str, spec: dict, words: str, note: str = "") -> Case:
    """A call the kernel must refuse: exit 2, one line ``ValueError:`` or ``TypeError:`` naming ``words``."""
    return probe(name, spec, (2,), rf"^(ValueError|TypeError|NotImplementedError): .*({words})", note=note)


def _valid() -> list[Case]:
    cases = []
    for fn in FNS:
        for dtype in ("fp32", "fp16"):
            for label, size in SIZES.items():
                if fn != "fwd" and label in ("d128", "nq33-nk70") or fn == "autograd" and label in ("d64", "three-d"):
                    continue
                if dtype == "fp16" and label in ("d256", "three-d", "nq33-nk70", "n0", "nq0", "d64", "d128"):
                    continue
                cases.append(probe(f"{fn}-{dtype}-{label}", dict(fn=fn, dtype=dtype, **size)))
    for fn in FNS:
        for layout in {"fwd": LAYOUTS, "bwd": LAYOUTS[:3] + ("expanded",)}.get(fn, ("transposed", "expanded")):
            b = 2 if layout == "expanded" else 1
            cases.append(probe(f"{fn}-fp32-{layout}", dict(fn=fn, layout=layout, b=b, nq=21, nk=29, d=32,
                                                           causal=True), (0, 2), r"^(ValueError|TypeError): ",
                               note="a view: computed right, or refused naming the layout"))
        cases.append(probe(f"{fn}-fp16-transposed", dict(fn=fn, dtype="fp16", layout="transposed", nq=21, nk=21, d=32)))
    return cases


def _nonfinite() -> list[Case]:
    poisons = {"nan-q-row": ["q", "nan", [0, 1, 3, 0]], "nan-k-key": ["k", "nan", [0, 0, 5, 2]],
               "nan-v-key": ["v", "nan", [0, 1, 7, 1]], "inf-q": ["q", "inf", [0, 0, 4, 0]],
               "minus-inf-k": ["k", "-inf", [0, 1, 2, 3]], "inf-v": ["v", "inf", [0, 0, 9, 0]]}
    cases = []
    for label, poison in poisons.items():
        for dtype, causal in (("fp32", False), ("fp32", True), ("fp16", False)):
            if causal and label in ("nan-v-key", "inf-v", "minus-inf-k"):
                continue
            cases.append(probe(f"fwd-{dtype}-{label}{'-causal' if causal else ''}",
                               dict(fn="fwd", dtype=dtype, nq=20, nk=20, d=16, causal=causal, poison=[poison])))
        if label.endswith(("-q", "-k", "-key", "-row")):
            cases.append(probe(f"bwd-fp32-{label}", dict(fn="bwd", nq=20, nk=20, d=16, poison=[poison])))
    cases += [probe("fwd-fp32-large-scores", dict(fn="fwd", nq=33, nk=33, d=32, scale=30.0)),
              probe("fwd-fp16-large-scores", dict(fn="fwd", dtype="fp16", nq=33, nk=33, d=32, scale=12.0)),
              probe("bwd-fp32-large-scores", dict(fn="bwd", nq=33, nk=33, d=32, scale=8.0, causal=True))]
    return cases


def _outputs() -> list[Case]:
    base = dict(nq=21, nk=21, d=32)
    return [
        probe("fwd-out-nan-filled", dict(fn="fwd", out="nan", **base)),
        probe("fwd-out-alias-q-fixed-config", dict(fn="fwd", out="alias_q", kw=dict(block_m=16, block_n=16), **base),
              note="documented: out=q under a fixed config"),
        refused("fwd-out-wrong-shape", dict(fn="fwd", out="wrong_shape", **base), "out"),
        refused("fwd-lse-wrong-dtype", dict(fn="fwd", out="lse_wrong_dtype", **base), "lse"),
        refused("fwd-out-is-k", dict(fn="fwd", out="overlap_k", **base), "out|overlap|share"),
        probe("bwd-grads-nan-filled", dict(fn="bwd", out="dq_nan", **base)),
        refused("bwd-dq-is-dk", dict(fn="bwd", out="dq_alias_dk", **base), "dq|dk|overlap|share"),
        refused("bwd-dq-wrong-shape", dict(fn="bwd", out="dq_wrong_shape", **base), "dq"),
        refused("bwd-lse-wrong-shape", dict(fn="bwd", bwd_in="lse_wrong_shape", **base), "lse"),
        refused("bwd-out-fp64", dict(fn="bwd", bwd_in="out_wrong_dtype", **base), "out|dtype"),
        refused("bwd-dout-fp16-inputs-fp32", dict(fn="bwd", bwd_in="dout_fp16", **base), "dout|dtype"),
        probe("bwd-dout-strided", dict(fn="bwd", bwd_in="dout_strided", **base), (0, 2), r"^(ValueError|TypeError): "),
    ]


def _bad_inputs() -> list[Case]:
    base = dict(nq=16, nk=16, d=32)
    cases = []
    for fn in FNS:
        f = dict(fn=fn, **base)
        every = [
            refused(f"{fn}-q-float64", dict(f, dtypes={"q": "fp64", "k": "fp64", "v": "fp64"}), "dtype|float64"),
            refused(f"{fn}-int32", dict(f, dtypes={"q": "int32", "k": "int32", "v": "int32"}), "dtype|int32"),
            refused(f"{fn}-bf16-interpreter", dict(f, dtype="bf16"), "bf16|bfloat16|interpret"),
            refused(f"{fn}-mixed-dtypes", dict(f, dtypes={"k": "fp16"}), "dtype"),
            refused(f"{fn}-head-dim-48", dict(f, d=48), "D|head|48"),
            refused(f"{fn}-k-head-dim-differs", dict(f, shapes={"k": [1, 2, 16, 16]}), "D|head|shape|k"),
            refused(f"{fn}-v-length-differs", dict(f, shapes={"v": [1, 2, 15, 32]}), "v|shape|N"),
            refused(f"{fn}-batch-differs", dict(f, shapes={"k": [2, 2, 16, 32], "v": [2, 2, 16, 32]}), "batch|B|shape"),
            refused(f"{fn}-q-meta", dict(f, devices={"q": "meta"}), "meta|device"),
            refused(f"{fn}-causal-string", dict(f, causal="yes"), "causal"),
            refused(f"{fn}-causal-none", dict(f, causal=None), "causal"),
        ]
        # the backward and flash_attention check through the same code: a few of the forward's refusals again
        cases += every if fn == "fwd" else [c for c in every if c.name.split("-", 1)[1] in AGAIN[fn]]
    cases += [
        refused("fwd-bool", dict(fn="fwd", dtypes={"q": "bool", "k": "bool", "v": "bool"}, **base), "dtype|bool"),
        refused("fwd-complex", dict(fn="fwd", dtypes={"q": "complex64", "k": "complex64", "v": "complex64"}, **base),
                "dtype|complex"),
        refused("fwd-head-dim-8", dict(fn="fwd", nq=16, nk=16, d=8), "D|head|8"),
        refused("fwd-head-dim-512", dict(fn="fwd", nq=4, nk=4, d=512), "D|head|512"),
        refused("fwd-2d", dict(fn="fwd", shapes={"q": [16, 32], "k": [16, 32], "v": [16, 32]}), "dim|shape|\\[B"),
        refused("fwd-5d", dict(fn="fwd", shapes={s: [1, 1, 2, 16, 32] for s in "qkv"}), "dim|shape|\\[B"),
        refused("fwd-heads-differ", dict(fn="fwd", shapes={"k": [1, 3, 16, 32], "v": [1, 3, 16, 32]}, **base),
                "head|H|shape"),
        refused("fwd-causal-int", dict(fn="fwd", causal=1, **base), "causal"),
        probe("fwd-no-interpreter-cpu", dict(fn="fwd", **base), (2,), r"^(ValueError|TypeError|RuntimeError): .*"
              r"(TRITON_INTERPRET|CUDA|interpret)", env={"TRITON_INTERPRET": None}),
        probe("fwd-route-table-missing", dict(fn="fwd", **base), (0, 2), r"FA2_TUNER_ROUTE_TABLE|route",
              env={"FA2_TUNER_ROUTE_TABLE": "@CWD@/missing_route.py"}, note="a default call: used, or refused clearly"),
    ]
    return cases


def _fwd_keywords() -> list[Case]:
    values = {
        "block_m": {"0": 0, "24": 24, "8": 8, "huge": HUGE, "string": "64", "float": 64.0,
                    "bool": True},
        "block_n": {"0": 0, "24": 24, "huge": HUGE},
        "num_warps": {"0": 0, "3": 3, "64": 64},
        "num_stages": {"-1": -1, "1e6": 10**6, "huge": HUGE},
        "maxnreg": {"-1": -1, "7": 7, "1e9": 10**9},
        "persistent": {"-1": -1, "1e9": 10**9},
        "tma": {"string": "yes", "2": 2}, "warp_specialize": {"string": "no"}, "foo": {"1": 1},
    }
    cases = [refused(f"fwd-kw-{key}-{label}", dict(fn="fwd", nq=16, nk=16, d=32, kw={key: value}), key)
             for key, table in values.items() for label, value in table.items()]
    cases += [probe(f"fwd-kw-{label}", dict(fn="fwd", nq=16, nk=16, d=32, kw=kw), (0, 2), BIG_TILE, note=BIG_NOTE)
              for label, kw in BIG_TILES.items()]
    cases.append(probe("fwd-kw-block_m-np-int64", dict(fn="fwd", nq=20, nk=20, d=32, kw={"block_m": {"$np": 32}}),
                       note="documented: any integer kind"))
    cases.append(probe("fwd-kw-maxnreg-0", dict(fn="fwd", nq=20, nk=20, d=32, kw={"maxnreg": 0}),
                       note="documented: 0 is no cap"))
    cases.append(probe("fwd-kw-tiles-16", dict(fn="fwd", nq=37, nk=37, d=32, kw={"block_m": 16, "block_n": 16})))
    return cases


def _bwd_keywords() -> list[Case]:
    values = {
        "block_m": {"24": 24, "0": 0}, "num_warps_q": {"0": 0}, "num_stages_q": {"0": 0},
        "dq_mode": {"bogus": "bogus", "empty": ""}, "overlap": {"string": "yes"}, "persistent": {"-1": -1},
        "maxnreg": {"7": 7}, "foo": {"1": 1},
    }
    base = dict(fn="bwd", nq=16, nk=16, d=32)
    cases = [refused(f"bwd-kw-{key}-{label}", dict(base, kw={key: value}), key)
             for key, table in values.items() for label, value in table.items()]
    cases += [probe(f"bwd-kw-{label}", dict(base, kw=kw), (0, 2), BIG_TILE, note=BIG_NOTE)
              for label, kw in {**BIG_TILES, "block_m_q-4096": {"block_m_q": 4096},
                                "q-tiles-4096x4096": {"block_m_q": 4096, "block_n_q": 4096}}.items()]
    cases += [
        refused("bwd-config-dict", dict(base, kw={"config": {"block_m": 32}}), "config"),
        refused("bwd-config-string", dict(base, kw={"config": "64x64"}), "config"),
        probe("bwd-dq-mode-tma-cpu", dict(base, kw={"dq_mode": "tma"}), (0, 2), r"^(ValueError|TypeError): .*(tma|TMA)",
              note="TMA is Hopper's: refused naming it, or run as a plain store"),
        probe("bwd-dq-mode-int", dict(base, kw={"dq_mode": 1}), (0, 2), r"^(ValueError|TypeError): .*dq_mode",
              note="a study's encoding (0/1/2): taken, or refused naming the strings"),
        probe("bwd-dq-mode-atomic", dict(base, nq=37, nk=37, kw={"dq_mode": "atomic"}), (0, 2),
              r"^(ValueError|TypeError): .*atomic"),
        probe("bwd-config-object", dict(base, nq=37, nk=37, kw={"config": {"$cfg": dict(
            block_m=16, block_n=16, num_warps=4, num_stages=1)}})),
        probe("bwd-kw-tiles-16", dict(base, nq=37, nk=37, causal=True, kw={"block_m": 16, "block_n": 16})),
        refused("autograd-bwd-config-string", dict(fn="autograd", nq=16, nk=16, d=32, kw={"bwd_config": "x"}),
                "bwd_config"),
        refused("autograd-fwd-not-callable", dict(fn="autograd", nq=16, nk=16, d=32, kw={"fwd": 3}), "fwd"),
    ]
    return cases


def cases() -> list[Case]:
    return _valid() + _nonfinite() + _outputs() + _bad_inputs() + _fwd_keywords() + _bwd_keywords()

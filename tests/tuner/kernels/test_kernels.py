"""The tunable-kernel interface: the registry, a study naming a kernel, a user's own kernel
module through every stage, compile units judged one by one, and one re-timing loop."""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

import pytest

from tuner import kernels
from tuner.budget import CompileInfo, verdict
from tuner.gpus import GpuSpec
from tuner.kernels.triton_fwd import KERNEL, FwdConfig
from tuner.problem import Problem
from tuner.space import LOG2, KernelConfig, axis
from tuner.status import Status
from tuner.study import StudyError, load

# A user's kernel, in a module of its own: the Triton forward under another name, with a config
# type of its own (so its configs find their kernel), a knob of its own (left off) and a
# restriction of its own.
USER_KERNEL = '''
from dataclasses import dataclass

from tuner.kernels.triton_fwd import FwdConfig, TritonForward
from tuner.space import axis


@dataclass(frozen=True, order=True)
class MineConfig(FwdConfig):
    natural: bool = axis((False,), (False, True), plain=False, tag="nat")


class Mine(TritonForward):
    name = "mine"
    config_type = MineConfig
    description = "my forward"

    def restriction(self, config, head_dim):
        if config.block_m != config.block_n:
            return "invalid: mine takes square tiles only"
        return super().restriction(config, head_dim)


KERNEL = Mine()
'''


@pytest.fixture
def user_kernel(tmp_path, monkeypatch) -> str:
    """The import path of :data:`USER_KERNEL`, importable here and in spawned workers."""
    package = tmp_path / "userpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mykernel.py").write_text(USER_KERNEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return "userpkg.mykernel"


def _study(tmp_path, extra: str, name: str = "tiny") -> str:
    from conftest import TINY_STUDY

    path = tmp_path / f"{name}.toml"
    path.write_text(TINY_STUDY.replace('name = "tiny"', f'name = "{name}"\n{extra}'))
    return str(path)


def test_the_registry_names_the_triton_forward_by_default_and_refuses_what_it_lacks():
    assert kernels.get() is kernels.get("triton", "fwd") is kernels.get(None, None) is KERNEL
    assert KERNEL.label == "triton-fwd" and kernels.kernel_of(FwdConfig(64, 64, 4, 2)) is KERNEL
    with pytest.raises(kernels.KernelNotFound, match=r"'no_such_kernel'.*triton \(fwd\)") as info:
        kernels.get("no_such_kernel")
    assert info.value.field == "kernel"
    with pytest.raises(kernels.KernelNotFound, match="no pass 'sideways'; it has bwd, fwd, fwd\\+bwd") as info:
        kernels.get("triton", "sideways")
    assert info.value.field == "pass"
    from tuner.kernels import triton_bwd

    assert kernels.get("triton", "bwd") is triton_bwd.KERNEL and triton_bwd.KERNEL.label == "triton-bwd"
    assert kernels.get("triton", "fwd+bwd") is triton_bwd.STEP and triton_bwd.STEP.label == "triton-fwd+bwd"


def test_a_study_names_its_kernel_and_pass_and_unknown_ones_are_refused(tmp_path):
    plain = load(_study(tmp_path, ""))
    named = load(_study(tmp_path, 'kernel = "triton"\npass = "fwd"', "named"))
    assert named.kernel is plain.kernel is KERNEL and (named.kernel_name, named.pass_) == ("triton", "fwd")
    assert named.fingerprint == load(_study(tmp_path, "", "named")).fingerprint     # the defaults: as before
    with pytest.raises(StudyError, match=r"kernel = 'nope'.*registered.*triton \(fwd\)"):
        load(_study(tmp_path, 'kernel = "nope"', "bad"))
    with pytest.raises(StudyError, match=r"pass = 'sideways'.*has bwd, fwd"):
        load(_study(tmp_path, 'pass = "sideways"', "bad"))
    with pytest.raises(StudyError, match="kernel = 3 must be a non-empty string"):
        load(_study(tmp_path, "kernel = 3", "bad"))


def test_a_user_kernel_module_is_loaded_by_its_path_with_its_own_axes_and_rules(tmp_path, user_kernel):
    study = load(_study(tmp_path, f'kernel = "{user_kernel}"', "mine"))
    kernel = study.kernel
    assert kernel.name == "mine" and kernels.get(user_kernel) is kernel
    assert study.fingerprint != load(_study(tmp_path, "", "mine")).fingerprint
    config = kernel.config_type(32, 16, 1, 1)
    assert kernels.kernel_of(config) is kernel and type(config).__name__ == "MineConfig"
    assert {c.block_m == c.block_n for c in study.configs()} == {True, False}      # the study's own space...
    assert "square tiles" in verdict(config, study.shapes[0], GpuSpec.from_name("sm_89"), None).reason
    assert any(f"{user_kernel} (fwd)" == k for k in kernels.registered())
    assert kernel.config_type.parse("32x32_w1_s1_nat").natural is True


def test_a_knob_joins_the_optuna_parameters_only_where_a_space_searches_it(tmp_path, user_kernel):
    """So adding a knob to a kernel leaves the parameters of every stored Optuna study as they were."""
    from tuner import search

    kernel = kernels.get(user_kernel)
    fixed, searched = kernel.space(), kernel.space(natural=(False, True))
    for sampler in ("tpe", "grid"):
        assert "natural" not in search.distributions(fixed, sampler)
        assert "natural" in search.distributions(searched, sampler)
        assert {"tma", "warp_specialize", "maxnreg", "persistent"} <= set(search.distributions(fixed, sampler))
    params = {"log2_block_m": 5, "log2_block_n": 5, "log2_num_warps": 0, "stages": 1}
    assert search.config_of(params, kernel.config_type) == kernel.config_type(32, 32, 1, 1)
    assert search.grid_size(searched) == 2 * search.grid_size(fixed)


def test_a_user_kernel_goes_through_every_stage_of_a_sweep(tmp_path, user_kernel, sweep_args, query):
    """Budget, compile, gate, timing, finalists and the rows, all through the user's kernel."""
    from tuner import sweep

    study = _study(tmp_path, f'kernel = "{user_kernel}"', "mine")
    db = tmp_path / "mine.db"
    assert sweep.main(sweep_args(study, db, "--sampler", "grid", "--finalists", "2", "--rounds", "2")) == 0
    rows = query(db, "select config, status, kernel, pass_, params, errors, err_out from fa2_results")
    by_config = {}
    for config, status, kernel, pass_, params, errors, err_out in rows:
        assert (kernel, pass_) == (user_kernel, "fwd")
        assert json.loads(params)["block_m"] == int(config.split("x")[0])
        by_config.setdefault(config, set()).add(status)
        if status == "timed":
            named = json.loads(errors)
            assert set(named) == {"out", "lse"} and named["out"]["error"] == err_out
            assert named["out"]["error"] <= named["out"]["bound"] and named["lse"]["gate"] is not None
    assert by_config["32x16_w1_s1"] == {"invalid"}                    # the user's restriction, at the budget
    assert by_config["16x16_w1_s1"] == by_config["32x32_w1_s2"] == {"timed"}
    assert query(db, "select kernel, pass_ from fa2_runs") == [(user_kernel, "fwd")]
    assert query(db, "select count(*) from fa2_finalists")[0][0] > 0


def _unit(name: str, shared: int, registers: int, spills: int = 0, warps: int = 4, error=None) -> CompileInfo:
    return CompileInfo(shared_bytes=shared, registers=registers, spill_bytes=spills, name=name, num_warps=warps,
                       binary=None if error else f"{name}-bin", error=error)


def test_a_config_of_several_units_is_judged_by_its_worst_and_the_reason_names_the_unit():
    gpu, problem, config = GpuSpec.from_name("sm_89"), Problem(head_dim=64), FwdConfig(64, 64, 4, 2)
    limit = gpu.smem_per_block_optin
    fits = CompileInfo.worst([_unit("delta", 0, 32), _unit("dkdv", limit - 10, 200), _unit("dq", 1000, 240)])
    assert (fits.shared_bytes, fits.registers, fits.spill_bytes) == (limit - 10, 240, 0) and fits.binary
    assert verdict(config, problem, gpu, fits).verdict == Status.FITS
    over = CompileInfo.worst([_unit("delta", 0, 32), _unit("dkdv", limit + 1, 200)])
    result = verdict(config, problem, gpu, over)
    assert result.verdict == Status.OVER_SMEM and result.reason.startswith("dkdv: needs")
    many = CompileInfo.worst([_unit("dkdv", 1000, 255, warps=8), _unit("dq", 1000, 255, warps=16)])
    result = verdict(config, problem, gpu, many)
    assert result.verdict == Status.OVER_REGISTERS and result.reason.startswith("dq: 255 registers x 512 threads")
    spilled = CompileInfo.worst([_unit("dkdv", 1000, 255, spills=64), _unit("dq", 1000, 128)])
    assert verdict(config, problem, gpu, spilled).reason.startswith("dkdv: spills 64 B")
    failed = CompileInfo.worst([_unit("dkdv", 1000, 200), _unit("dq", 0, 0, error="PTXASError: too big")])
    result = verdict(config, problem, gpu, failed)
    assert result.verdict == Status.COMPILE_ERROR and result.reason == "dq: PTXASError: too big"
    alone = CompileInfo.worst([_unit("_flash_fwd_kernel", limit + 1, 128)])
    assert verdict(config, problem, gpu, alone).reason == f"needs {limit + 1} B > {limit} B on sm_89"   # as before


def test_a_cached_compile_info_reads_back_with_its_units():
    from dataclasses import asdict

    info = CompileInfo.worst([_unit("a", 10, 20), _unit("b", 30, 40)])
    assert CompileInfo.from_json(json.loads(json.dumps(asdict(info)))) == info


def test_the_forward_is_one_compile_unit_specialised_as_the_launch():
    units = KERNEL.compile_units(FwdConfig(128, 64, 8, 3, tma=True, maxnreg=168, persistent=2), Problem())
    (unit,) = units
    assert unit.name == "_flash_fwd_kernel" and unit.launch == (8, 2)
    assert unit.options["maxnreg"] == 168 and unit.options["num_stages"] == 3
    constexprs = {list(unit.signature)[i]: v for (i,), v in unit.constexprs.items()}
    assert constexprs["TMA"] is True and constexprs["PERSISTENT"] == 2 and constexprs["BLOCK_M"] == 128
    assert unit.warmup_kwargs["HEAD_DIM"] == 64 and unit.warmup_kwargs["maxnreg"] == 168


def test_the_re_timing_loop_rotates_the_order_and_holds_each_pin_around_its_candidate():
    from kernel.measure.timing import interleaved_rounds, round_orders

    seen, pinned = [], []

    @contextmanager
    def pin():
        pinned.append("in")
        yield
        pinned.append("out")

    candidates = {name: [lambda name=name: seen.append(name)] for name in "abc"}

    def measure(calls):
        calls[0]()
        return float(len(seen))

    times = interleaved_rounds(candidates, 3, pins={"b": pin}, measure=measure)
    assert seen == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert round_orders(list("abc"), 3) == [list("abc"), list("bca"), list("cab")]
    assert times == {"a": [1.0, 6.0, 8.0], "b": [2.0, 4.0, 9.0], "c": [3.0, 5.0, 7.0]}
    assert pinned == ["in", "out"] * 3


def test_every_consumer_of_a_shapes_winner_names_the_same_config(hand_store):
    """The finalists re-time 128x64 ahead of 64x64 (the fastest row): the summary, the emitted list,
    the profile's choice and the heatmap's title all say 128x64."""
    from collections import Counter
    from types import SimpleNamespace

    from conftest import HAND_GPU, HAND_SHAPES

    from tuner import dashboard, emit, winners
    from tuner.report import summary
    from tuner.store import Finalist

    db = hand_store()
    shape = HAND_SHAPES[1]
    db.replace_finalists([Finalist(run_id=db.runs()[0].id, study="hand", target="sm_90", gpu=HAND_GPU, shape=shape,
                                   config=key, rank=rank, rounds=3, median_ms=ms, min_ms=ms, max_ms=ms, spread=0.0,
                                   times=json.dumps([ms] * 3))
                          for rank, (key, ms) in enumerate((("128x64_w8_s2", 0.007), ("64x64_w4_s2", 0.0075)), 1)])
    rows = db.results("hand")
    verdicts = winners.verdicts_of(db, "hand", "sm_90", HAND_GPU)
    assert min((r for r in rows if r.shape == shape and r.ms), key=lambda r: r.ms).config == "64x64_w4_s2"
    assert winners.winner(rows, shape, verdicts[shape]) == "128x64_w8_s2"
    ctx = SimpleNamespace(study=SimpleNamespace(name="hand"), target=GpuSpec.from_name("sm_90"), gpu_label=HAND_GPU,
                          env={"torch": "t", "triton": "t", "driver": "d", "date": "today"})
    line = next(ln for ln in summary(ctx, rows, Counter(), None, verdicts).splitlines() if ln.startswith(shape + " "))
    assert line.split()[len(shape.split())] == "128x64_w8_s2"
    listed = emit.emit(db, SimpleNamespace(name="hand", kernel=KERNEL), GpuSpec.from_name("sm_90"), top=0)
    assert f"best for {shape}: 0.0070 ms (median of 3 rounds)" in listed.text
    assert next(e for e in listed.entries if any(shape in n and n.startswith("best") for n in e.notes)
                ).config.key == "128x64_w8_s2"
    title = dashboard.heatmap([r for r in rows if r.shape == shape], verdicts[shape]).layout.title.text
    assert "best 128x64_w8_s2 (finalists re-timed): 0.0070 ms" in title
    assert winners.ranked(rows, shape, verdicts[shape]) == ["128x64_w8_s2", "64x64_w4_s2"]


def test_a_new_kernel_writes_no_new_column(tmp_path):
    """Every field of a config is in ``params``; only the forward's fields have columns of their own."""
    from tuner.records import CONFIG_COLUMNS, config_columns

    columns = config_columns(FwdConfig(64, 64, 4, 2, tma=True))
    assert json.loads(columns["params"]) == FwdConfig(64, 64, 4, 2, tma=True).params()
    assert set(columns) == {"config", "params"} | set(CONFIG_COLUMNS)
    assert columns["config"] == "64x64_w4_s2_tma"


@dataclass(frozen=True, order=True)
class BackwardShaped(KernelConfig):
    """A config shaped like the backward's: dK/dV tiles, dQ tiles, warps, stages and a knob."""

    KEY_FORMAT: ClassVar[str] = "{block_m}x{block_n}_q{block_m_q}x{block_n_q}_w{num_warps}_s{num_stages}"
    KEY_HELP: ClassVar[str] = "BM,BN,BMQ,BNQ,WARPS,STAGES, e.g. 64,64,32,64,4,2"

    block_m: int = axis((32, 64), tpe=LOG2, param="log2_block_m")
    block_n: int = axis((32, 64), tpe=LOG2, param="log2_block_n")
    block_m_q: int = axis((32, 64), tpe=LOG2, param="log2_block_m_q")
    block_n_q: int = axis((32, 64), tpe=LOG2, param="log2_block_n_q")
    num_warps: int = axis((4, 8), tpe=LOG2, param="log2_num_warps")
    num_stages: int = axis((1, 2))
    atomic: bool = axis((False,), (False, True), plain=False, tag="atomic")


def test_a_config_of_more_tiles_keys_parses_and_splits_its_heatmap_variants_generically():
    from tuner import search

    config = BackwardShaped(64, 64, 32, 64, 4, 2, atomic=True)
    assert config.key == "64x64_q32x64_w4_s2_atomic" and BackwardShaped.parse(config.key) == config
    assert BackwardShaped.parse("64,64,32,64,4,2") == BackwardShaped(64, 64, 32, 64, 4, 2)
    assert config.variant == "block_m_q=32 block_n_q=64 atomic" and not config.plain
    with pytest.raises(ValueError, match="BM,BN,BMQ,BNQ,WARPS,STAGES"):
        BackwardShaped.parse("64,64,4,2")
    params = {"log2_block_m": 6, "log2_block_n": 6, "log2_block_m_q": 5, "log2_block_n_q": 6,
              "log2_num_warps": 2, "num_stages": 2}
    assert search.config_of(params, BackwardShaped) == BackwardShaped(64, 64, 32, 64, 4, 2)

"""The emitted @triton.autotune list: winners, finalists within the noise, the budget guard."""

from __future__ import annotations

import importlib.util
import json
import types

import pytest
import torch

from tuner import emit
from tuner.gpus import GpuSpec
from tuner.kernels.triton_fwd import KERNEL, FwdConfig as Config
from tuner.problem import Problem
from tuner.store import Finalist

HAND = types.SimpleNamespace(name="hand", kernel=KERNEL)
SM90 = GpuSpec.from_name("sm_90")
S1, S2 = "B1 H2 Nq128 Nk128 D64 bf16", "B1 H2 Nq128 Nk128 D64 bf16 causal"


def _keys(module) -> list[str]:
    return [f"{c.kwargs['BLOCK_M']}x{c.kwargs['BLOCK_N']}_w{c.num_warps}_s{c.num_stages}" for c in module.CONFIGS]


def _load(path):
    spec = importlib.util.spec_from_file_location("emitted", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _hand_study(tmp_path):
    study = tmp_path / "hand.toml"
    study.write_text('name = "hand"\n[problem]\nbatch = 1\nheads = 2\nn = 128\ncausal = [false, true]\n')
    return study


def test_each_shapes_winner_among_configs_timed_on_every_shape(hand_store, tmp_path):
    emitted = emit.emit(hand_store(), HAND, SM90, top=0)
    emit.write(emitted, tmp_path / "c.py")
    module = _load(tmp_path / "c.py")
    # 64x128 is fastest on S1 but crashed on S2: never in the list
    assert _keys(module) == ["64x64_w4_s2", "128x64_w8_s2"]      # one win each; then by score
    assert "best for B1 H2 Nq128 Nk128 D64 bf16: 0.0090 ms" in emitted.text
    assert "best for B1 H2 Nq128 Nk128 D64 bf16 causal: 0.0080 ms" in emitted.text
    assert module.KEY == ["N_Q", "N_K", "HEAD_DIM", "CAUSAL"]
    assert "222% of SDPA-flash" in emitted.text and "smem 24576 B of 232448 B on sm_90" in emitted.text


def test_top_adds_the_best_across_shapes(hand_store):
    keys = [e.config.key for e in emit.emit(hand_store(), HAND, SM90, top=3).entries]
    assert keys == ["64x64_w4_s2", "128x64_w8_s2", "128x128_w8_s2"]


def test_finalists_decide_the_winner_and_a_runner_up_within_the_noise_is_kept(hand_store):
    db = hand_store()
    run_id = db.runs()[0].id

    def finalist(shape, config, rank, times):
        return Finalist(run_id=run_id, study="hand", target="sm_90", gpu="NVIDIA H200 (sm_90)", shape=shape,
                        config=config, rank=rank, rounds=len(times), median_ms=sorted(times)[len(times) // 2],
                        min_ms=min(times), max_ms=max(times), spread=0, times=json.dumps(times))

    db.replace_finalists([
        finalist(S1, "64x64_w4_s2", 1, [0.0090, 0.0091, 0.0090, 0.0092, 0.0090]),      # re-timed: now first
        finalist(S1, "128x64_w8_s2", 2, [0.0091, 0.0090, 0.0093, 0.0091, 0.0091]),     # 1.1% behind, 3% noise
        finalist(S2, "64x64_w4_s2", 1, [0.0080, 0.0080, 0.0081, 0.0080, 0.0080]),
        finalist(S2, "128x128_w8_s2", 2, [0.0090, 0.0091, 0.0090, 0.0090, 0.0090]),    # 12% behind
    ])
    emitted = emit.emit(db, HAND, SM90, top=0)
    assert [e.config.key for e in emitted.entries] == ["64x64_w4_s2", "128x64_w8_s2"]
    assert "winner 64x64_w4_s2, runner-up 128x64_w8_s2, 1.1% apart, noise 3.3% (within the noise" in emitted.text
    assert "kept for B1 H2 Nq128 Nk128 D64 bf16: 0.0091 ms (median of 5 rounds)" in emitted.text
    assert '"BLOCK_M": 128, "BLOCK_N": 128' not in emitted.text                 # clearly behind: not kept


@pytest.mark.parametrize("overrides, fragment", [
    ({"128x64_w8_s2": {"smem_bytes": 232449}}, "128x64_w8_s2 does not fit sm_90"),
    ({"64x64_w4_s2": {"smem_limit_bytes": 1000}}, "64x64_w4_s2 does not fit sm_90"),
])
def test_emit_refuses_a_config_over_the_budget(hand_store, overrides, fragment):
    with pytest.raises(emit.EmitError, match=fragment):
        emit.emit(hand_store(overrides), HAND, SM90, top=0)


def test_the_budget_guard_applies_the_targets_model():
    """A config timed on an H200 but over sm_89's shared memory is refused for sm_89."""
    from tuner.store import Result

    row = Result(status="timed", batch=1, heads=1, n_q=128, n_k=128, head_dim=128, dtype="bf16", causal=False,
                 shape="s", smem_bytes=None, smem_limit_bytes=None)
    entry = emit.Entry(Config(128, 128, 8, 3), 1.0, [row])
    emit.check_budget([entry], SM90)
    with pytest.raises(emit.EmitError, match="does not fit sm_89"):
        emit.check_budget([entry], GpuSpec.from_name("sm_89"))


def test_emit_cli_writes_under_out_and_exits_2_without_timed_results(hand_store, tmp_path, capsys):
    db = hand_store()
    study = _hand_study(tmp_path)
    out = tmp_path / "configs.py"
    assert emit.main(["--study", str(study), "--gpu", "sm_90", "--storage", db.url, "--out", str(out)]) == 0
    assert out.read_text() in capsys.readouterr().out
    empty = tmp_path / "empty.toml"
    empty.write_text('name = "nothing"\n[problem]\nn = 128\n')
    assert emit.main(["--study", str(empty), "--gpu", "sm_90", "--storage", db.url]) == 2
    assert "was timed on every shape" in capsys.readouterr().err


@pytest.mark.parametrize("module, head_dims, knobbed", [("configs_h200", (64,), 0),
                                                        ("configs_h200_knobs", (64, 128), 1)])
def test_shipped_config_lists_fit_sm_90_and_run_in_the_autotuned_entry_point(module, head_dims, knobbed, device,
                                                                             fresh_inputs, assert_matches_reference):
    import importlib

    from kernel.triton.autotune import AutotunedFlashAttention
    from tuner.budget import verdict

    shipped = importlib.import_module(f"kernel.triton.{module}")
    configs = [KERNEL.from_triton(config) for config in shipped.CONFIGS]
    for c in configs:
        for d in head_dims:
            for causal in (False, True):
                assert verdict(c, Problem(head_dim=d, causal=causal), SM90, None).launchable, c.key
    assert (sum(not c.plain for c in configs) > 0) == bool(knobbed)
    # The interpreter cannot time configs; one config (with knobs, where the list has them)
    # keeps autotune from benchmarking.
    one = [shipped.CONFIGS[configs.index(min(configs, key=lambda c: c.plain))]]
    entry = AutotunedFlashAttention(shipped.CONFIGS if device == "cuda" else one, shipped.KEY)
    for causal in (False, True):
        q, k, v, seed = fresh_inputs((1, 2, 200, 64), (1, 2, 136, 64), torch.float16, device)
        out = torch.full_like(q, float("nan"))
        lse = torch.full(q.shape[:-1], float("nan"), device=device)
        entry(q, k, v, causal, out=out, lse=lse)
        assert_matches_reference(out, lse, q, k, v, causal, seed, label="autotuned")


def test_a_pasted_list_of_several_configs_runs_under_the_interpreter(fresh_inputs, assert_matches_reference):
    """A list of two or more (the battery of 2026-12-05: an emitted list pasted, as the README says): Triton's
    autotuner asked a driver to time them, and the interpreter has none ("0 active drivers"). There the list's
    first is chosen, untimed, as AutotunedBackward does; on a GPU the driver times them."""
    import triton

    from kernel.triton.autotune import AutotunedFlashAttention

    if torch.cuda.is_available():
        pytest.skip("on a GPU the driver times the configs")
    configs = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 16}, num_warps=1, num_stages=1),
               triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=1, num_stages=1)]
    entry = AutotunedFlashAttention(configs, ["N_Q", "N_K", "HEAD_DIM", "CAUSAL"])
    q, k, v, seed = fresh_inputs((1, 2, 70, 32), (1, 2, 70, 32), torch.float16, "cpu")
    out, lse = entry(q, k, v, True)
    assert_matches_reference(out, lse, q, k, v, True, seed, label="pasted")
    assert entry.kernel.best_config.kwargs["BLOCK_M"] == 32


@pytest.mark.parametrize("key", ["128x64_w8_s3", "128x128_w8_s3_tma_ws_p2", "64x128_w4_s2_tma_r168",
                                 "64x64_w4_s3_p1"])
def test_an_emitted_triton_config_stands_for_its_config(key):
    """Every knob survives the round trip through the pasted source: a knob the emitter
    dropped would autotune another kernel than the one the sweep timed."""
    import triton

    config = Config.parse(key)
    source = KERNEL.triton_config(config)
    assert KERNEL.from_triton(eval(source, {"triton": triton})) == config      # noqa: S307 (our own output)


def test_the_smem_comment_gives_each_head_dims_figure_where_they_differ():
    from types import SimpleNamespace

    from tuner.emit import smem_note

    def rows(*pairs):
        return [SimpleNamespace(head_dim=dim, smem_bytes=smem) for dim, smem in pairs]

    assert smem_note(rows((128, 180516), (64, 98596), (64, 98596))) == "98596 B at D=64, 180516 B at D=128"
    assert smem_note(rows((64, 24576), (64, 24576))) == "24576 B"
    assert smem_note(rows((64, None))) == "None B"


def test_emit_refuses_a_study_file_other_than_the_one_the_store_was_swept_with(hand_store, tmp_path, capsys):
    """As the sweep refuses it: a study of that name whose definition differs is another study, not its list."""
    study = _hand_study(tmp_path)
    db = hand_store()
    db.claim_study("hand", "0123456789abcdef", "elsewhere/hand.toml")
    assert emit.main(["--study", str(study), "--gpu", "sm_90", "--storage", db.url,
                      "--out", str(tmp_path / "c.py")]) == 2
    err = capsys.readouterr().err
    assert f"{study} is named 'hand', but {db.url} holds a different study under that name" in err, err
    assert "(swept from elsewhere/hand.toml)" in err and not (tmp_path / "c.py").exists()
    from tuner.store import StudyRecord
    from tuner.study import load

    with db.session() as session:       # the same definition, claimed from another path: the same study
        session.get(StudyRecord, "hand").fingerprint = load(str(study)).fingerprint
    assert emit.main(["--study", str(study), "--gpu", "sm_90", "--storage", db.url,
                      "--out", str(tmp_path / "c.py")]) == 0


def test_the_route_table_the_default_call_reads_is_written_beside_the_list(hand_store, tmp_path, capsys,
                                                                           monkeypatch):
    """Without a path, route_table.py beside --out: the committed table's text, and the export line that reads it;
    with FA2_TUNER_ROUTE_TABLE set, that file's (it is what the default call reads here)."""
    from pathlib import Path

    import kernel.route_table
    from kernel.route import ROUTE_TABLE_ENV

    monkeypatch.delenv(ROUTE_TABLE_ENV, raising=False)
    db, study, out = hand_store(), _hand_study(tmp_path), tmp_path / "lists" / "configs.py"
    assert emit.main(["--study", str(study), "--gpu", "sm_90", "--storage", db.url, "--out", str(out),
                      "--route-table"]) == 0
    written = out.parent / "route_table.py"
    assert written.read_text() == Path(kernel.route_table.__file__).read_text()
    assert f"export {ROUTE_TABLE_ENV}={written.resolve()}" in capsys.readouterr().err
    mine = tmp_path / "my_route.py"
    mine.write_text("FORWARD = {(64, False, 512, 32): 'ws'}\nBACKWARD = {(64, True, 512, 32): 'gluon_128'}\n")
    monkeypatch.setenv(ROUTE_TABLE_ENV, str(mine))
    named = tmp_path / "shipped" / "route.py"
    assert emit.main(["--study", str(study), "--gpu", "sm_90", "--storage", db.url, "--out", str(out),
                      "--route-table", str(named)]) == 0
    assert named.read_text() == mine.read_text()


@pytest.mark.parametrize("table, wanted", [
    ("FORWARD = {(64, False, 512, 32): 'warp_specialized'}\nBACKWARD = {}\n", "FA2_TUNER_ROUTE_TABLE="),
    (None, "no such file"),
])
def test_a_route_table_that_is_not_one_is_refused_before_anything_is_written(hand_store, tmp_path, capsys,
                                                                             monkeypatch, table, wanted):
    from kernel.route import ROUTE_TABLE_ENV

    bad = tmp_path / "bad_route.py"
    if table is not None:
        bad.write_text(table)
    monkeypatch.setenv(ROUTE_TABLE_ENV, str(bad))
    db, study, out = hand_store(), _hand_study(tmp_path), tmp_path / "configs.py"
    assert emit.main(["--study", str(study), "--gpu", "sm_90", "--storage", db.url, "--out", str(out),
                      "--route-table"]) == 2
    err = capsys.readouterr().err
    assert "--route-table" in err and wanted in err
    assert not out.exists() and not (tmp_path / "route_table.py").exists()


def test_the_route_table_may_not_be_the_config_list(hand_store, tmp_path, capsys):
    db, study, out = hand_store(), _hand_study(tmp_path), tmp_path / "configs.py"
    assert emit.main(["--study", str(study), "--gpu", "sm_90", "--storage", db.url, "--out", str(out),
                      "--route-table", str(out)]) == 2
    assert "is the file --out or --verify writes" in capsys.readouterr().err and not out.exists()

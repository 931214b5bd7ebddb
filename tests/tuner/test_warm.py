"""Warm start: a new study first tries the best configs the store holds for related studies."""

from __future__ import annotations

from tuner import records, search
from tuner.gpus import GpuSpec
from tuner.kernels.triton_fwd import FwdConfig as Config
from tuner.store import Result, Run, Store
from tuner.study import load


def _row(study: str, shape: str, config: str, ms: float, head_dim: int = 64, gpu: str = "H200", target="sm_90",
         status: str = "timed") -> Result:
    c = Config.parse(config)
    return Result(run_id=1, study=study, target=target, gpu=gpu, torch_version="t", triton_version="t", driver="d",
                  shape=shape, batch=4, heads=8, n_q=4096, n_k=4096, head_dim=head_dim, dtype="bf16", causal=False,
                  config=config, block_m=c.block_m, block_n=c.block_n, num_warps=c.num_warps,
                  num_stages=c.num_stages, status=status, stage="time", ms=ms)


def test_the_trial_parameters_decode_back_to_the_config():
    space = load("article").space
    for config in (Config(128, 64, 8, 3), Config(64, 32, 4, 2, tma=True), Config(256, 128, 16, 5)):
        for sampler in ("tpe", "random"):
            assert search.config_of(space.trial_params(config, sampler == "tpe"), Config) == config
    assert space.trial_params(Config(128, 64, 8, 3), True)["log2_block_m"] == 7


def test_warm_configs_are_the_related_studies_bests_firsts_first_within_the_budget():
    study, h200 = load("article"), GpuSpec.from_name("sm_90")
    rows = [_row("other", "s1", "128x64_w8_s3", 1.0), _row("other", "s1", "64x64_w4_s2", 1.1),
            _row("other", "s1", "64x32_w4_s2", 1.2), _row("other", "s1", "32x32_w2_s1", 1.3),
            _row("other", "s2", "128x128_w8_s2", 2.0), _row("other", "s2", "128x64_w8_s3", 2.1),
            _row("other", "s3", "256x128_w4_s5", 0.5)]          # over the budget on sm_90: never tried
    picked = [c.key for c in records.pick_warm(rows, study, h200)]
    assert picked == ["128x64_w8_s3", "128x128_w8_s2", "64x64_w4_s2", "64x32_w4_s2"]   # s1's 4th is past 3 per group
    assert len(records.pick_warm(rows, study, h200, most=2)) == 2


def test_warm_start_reads_other_studies_and_gpus_of_the_same_head_dim_only(tmp_path):
    db = Store(f"sqlite:///{tmp_path / 'w.db'}")
    db.add(Run(study="x", target="sm_90", gpu="H200", sampler="grid", command="", torch_version="t",
               triton_version="t", driver="d"))
    db.replace_results([_row("article", "own", "32x32_w4_s2", 0.1),                 # the study itself
                        _row("head_dim_128", "d128", "64x64_w4_s2", 0.1, head_dim=128),
                        _row("other", "s", "128x64_w8_s3", 1.0, gpu="H100"),
                        _row("other", "s", "64x32_w4_s2", 0.9, status="incorrect")])
    warm = records.warm_configs(db, load("article"), GpuSpec.from_name("sm_90"), "H200")
    assert [c.key for c in warm] == ["128x64_w8_s3"]


def test_a_new_study_asks_the_warm_configs_first_and_a_resumed_one_does_not_again(tmp_path):
    url = f"sqlite:///{tmp_path / 'o.db'}"
    space = load("article").space
    warm = (Config(128, 64, 8, 3), Config(64, 32, 4, 2, tma=True))
    session = search.SearchSession(url, "s", "tpe", space, 1, 20, {}, warm)
    asked = [session.ask() for _ in range(3)]
    assert [config for _, config in asked[:2]] == list(warm) and asked[2][1] not in warm
    for number, _ in asked:
        session.tell(number, 1.0, {})
    session.close()
    again = search.SearchSession(url, "s", "tpe", space, 1, 20, {}, warm)
    assert len(again.study.trials) == 3 and not any(t.state.name == "WAITING" for t in again.study.trials)
    again.close()


def test_the_same_study_on_another_gpu_or_target_is_a_source(tmp_path):
    """Only this very (study, target, GPU) is left out: the study measured on an H100, or held to sm_80's
    budget on this H200, are related measurements to start from."""
    db = Store(f"sqlite:///{tmp_path / 'w.db'}")
    db.add(Run(study="x", target="sm_90", gpu="H200", sampler="grid", command="", torch_version="t",
               triton_version="t", driver="d"))
    db.replace_results([_row("article", "own", "32x32_w4_s2", 0.1),                 # this study, here: left out
                        _row("article", "own", "128x64_w8_s3", 1.0, gpu="H100"),
                        _row("article", "own", "64x64_w4_s2", 1.0, target="sm_80")])
    warm = records.warm_configs(db, load("article"), GpuSpec.from_name("sm_90"), "H200")
    assert sorted(c.key for c in warm) == ["128x64_w8_s3", "64x64_w4_s2"]


def test_a_resumed_study_is_not_given_warm_trials_even_ones_it_never_tried(tmp_path):
    """A study that has trials resumes as it was: warm configs found since (ones it never asked) are not
    enqueued into it, which would change what a resumed run asks."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    space = load("article").space
    first = search.SearchSession(url, "s", "tpe", space, 1, 20, {}, ())
    for number, _ in [first.ask() for _ in range(2)]:
        first.tell(number, 1.0, {})
    first.close()
    asked = {t.params.get("log2_block_m") for t in first.study.trials}
    warm = tuple(c for c in (Config(256, 64, 8, 3), Config(16, 16, 1, 1), Config(128, 128, 8, 2))
                 if space.trial_params(c, True)["log2_block_m"] not in asked)[:1]
    assert warm
    again = search.SearchSession(url, "s", "tpe", space, 1, 20, {}, warm)
    assert len(again.study.trials) == 2 and not any(t.state.name == "WAITING" for t in again.study.trials)
    again.close()

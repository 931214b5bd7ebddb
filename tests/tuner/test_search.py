"""How the space is searched: Optuna encodings, and trials a dead sweep left behind."""

from __future__ import annotations

import subprocess
import sys

import optuna

from tuner import search
from tuner.kernels.triton_fwd import FwdConfig as Config
from tuner.study import load


def test_tpe_encoding_is_ordinal_and_decodes_to_configs():
    space = load("article").space
    dists = search.distributions(space, "tpe")
    tiles = ("log2_block_m", "log2_block_n", "log2_num_warps", "stages")
    assert {type(dists[name]).__name__ for name in tiles} == {"IntDistribution"}
    assert (dists["log2_block_m"].low, dists["log2_block_m"].high) == (4, 8)
    # the knobs: unordered choices, each over the study's values
    assert {name: dists[name].choices for name in ("tma", "warp_specialize", "maxnreg", "persistent")} == {
        "tma": (False, True), "warp_specialize": (False,), "maxnreg": (0,), "persistent": (0,)}
    config = search.config_of({"log2_block_m": 8, "log2_block_n": 6, "log2_num_warps": 4, "stages": 3}, Config)
    assert config == Config(256, 64, 16, 3)      # a trial stored before the knobs: all off
    assert search.config_of({"block_m": 256, "block_n": 64, "num_warps": 16, "num_stages": 3}, Config) == config
    knobbed = search.config_of({"log2_block_m": 7, "log2_block_n": 7, "log2_num_warps": 3, "stages": 3, "tma": True,
                                "warp_specialize": False, "maxnreg": 168, "persistent": 2}, Config)
    assert knobbed == Config(128, 128, 8, 3, tma=True, maxnreg=168, persistent=2)


def test_an_ordinal_axis_steps_by_its_values_common_difference():
    """TPE samples only the space's values: the Gluon forward's query tiles 128 and 192 (no 129), and
    hopper_bwd's num_stages_q 1 and 3 (no 2); a trial stored with the old log2 encoding decodes."""
    from tuner.kernels.gluon_fwd import GluonFwdConfig

    tile = search.distributions(load("hopper_gluon_d64").space, "tpe")["block_m"]
    assert (tile.low, tile.high, tile.step) == (128, 192, 64)
    stages_q = search.distributions(load("hopper_bwd").space, "tpe")["stages_q"]
    assert (stages_q.low, stages_q.high, stages_q.step) == (1, 3, 2)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=2))
    dists = search.distributions(load("hopper_gluon_d64").space, "tpe")
    for _ in range(12):
        trial = study.ask(dists)
        assert trial.params["block_m"] in (128, 192)
        study.tell(trial, float(trial.params["block_m"]))
    params = {"log2_block_m": 7, "log2_block_n": 7, "log2_num_warps": 2, "stages": 2}
    assert search.config_of(params, GluonFwdConfig) == GluonFwdConfig(128, 128, 4, 2)


def test_orphans_are_found_only_for_dead_processes(tmp_path):
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'o.db'}", direction="maximize")
    dists = search.distributions(load("article").space)
    alive = study.ask(dists)
    alive.set_user_attr(search.OWNER_ATTR, search.owner())
    dead = study.ask(dists)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead.set_user_attr(search.OWNER_ATTR, f"{search.owner().rpartition(':')[0]}:{child.pid}")
    orphans, foreign = search.orphaned_trials(study, Config)
    assert [o.number for o in orphans] == [dead.number] and foreign == 1


def test_a_session_finishes_orphans_first_and_stops_at_the_grid(tmp_path, tiny):
    space = load(str(tiny)).space
    url = f"sqlite:///{tmp_path / 's.db'}"
    first = search.SearchSession(url, "s", "grid", space, 0, None, {"metric": "tflops"})
    number, config = first.ask()
    first.trial(number).set_user_attr(search.OWNER_ATTR, "elsewhere:1")     # a sweep on another host
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    number2, config2 = first.ask()
    first.trial(number2).set_user_attr(search.OWNER_ATTR, f"{search.owner().rpartition(':')[0]}:{dead.pid}")
    second = search.SearchSession(url, "s", "grid", space, 0, None, {})
    assert second.foreign == 1 and second.ask() == (number2, config2)
    seen = {config, config2}
    while (answer := second.ask()) is not None:
        seen.add(answer[1])
        second.tell(answer[0], 1.0, {"config": answer[1].key})
    assert len(seen) == search.grid_size(space) == 8


def test_the_lowest_running_trial_of_a_config_leads_and_the_others_wait(tmp_path):
    space = load("article").space
    url = f"sqlite:///{tmp_path / 'l.db'}"
    session = search.SearchSession(url, "lead", "grid", space, 0, None, {})
    twin = {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 3, "tma": False, "warp_specialize": False,
            "maxnreg": 0, "persistent": 0}
    session.study.enqueue_trial(twin)
    session.study.enqueue_trial(twin)
    (first, config), (second, again) = session.ask(), session.ask()
    other, other_config = session.ask()
    assert config == again == Config(64, 64, 4, 3) and other_config != config
    assert session.leader(second, config) == first and session.leader(first, config) is None
    assert session.leader(other, other_config) is None and session.alive(first)
    assert session.tell(first, 1.0, {"config": config.key})
    assert session.leader(second, config) is None and not session.alive(first)
    assert not session.tell(first, 1.0, {})          # finished already: refused quietly, not raised
    session.close()


def test_a_stale_trial_of_another_host_is_failed_and_its_config_asked_again(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 's.db'}"
    space = load("article").space
    dead = search.SearchSession(url, "stale", "grid", space, 0, None, {})
    number, config = dead.ask()
    dead.close()                                   # its host "dies": no more heartbeats
    dead.trial(number).set_user_attr(search.OWNER_ATTR, "elsewhere:1")
    monkeypatch.setattr(search, "HEARTBEAT", (1, 2))
    import time

    time.sleep(3)
    alive = search.SearchSession(url, "stale", "grid", space, 0, None, {})
    alive.storage.grace_period = 2
    alive._rescan()
    assert alive.study.trials[number].state.name == "FAIL"
    asked = alive.ask()
    assert asked[1] == config and asked[0] != number     # the config comes back as a new trial
    alive.close()


def test_the_grid_s_trials_made_in_one_transaction_are_the_grid_sampler_s_own(tmp_path, tiny):
    """Half the grid asked through the one-transaction path, the rest through Optuna's study.ask:
    every point once, each trial holding what Optuna's grid sampler reads (its grid id and space)."""
    space = load(str(tiny)).space
    url = f"sqlite:///{tmp_path / 'g.db'}"
    session = search.SearchSession(url, "g", "grid", space, 0, None, {"metric": "tflops"})
    asked = []
    for _ in range(4):
        number, config = session.ask()
        asked.append(config)
        assert session.tell(number, 1.0, {"status": "timed"})
    for _ in range(4):            # Optuna's own ask (as a sweep with a waiting trial asks) takes the points left
        trial = session.study.ask(session.distributions)
        asked.append(search.config_of(trial.params, type(asked[0])))
        trial.set_user_attr("config", asked[-1].key)
        trial.set_user_attr("owner", search.owner())
        session.study.tell(trial, 1.0)
    assert len(asked) == len(set(asked)) == search.grid_size(space) == 8
    trials = optuna.load_study(study_name="g", storage=url).trials
    assert sorted(t.system_attrs["grid_id"] for t in trials) == list(range(8))
    assert all(t.state.name == "COMPLETE" and t.user_attrs["config"] == search.config_of(t.params, type(asked[0])).key
               and t.user_attrs["owner"] == search.owner() for t in trials)
    assert search.grid_left(trials, space) == 0 and session.study.sampler.is_exhausted(session.study)

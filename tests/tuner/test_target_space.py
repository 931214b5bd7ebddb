"""A target's space holds only what it can run, and configs the budget refuses cost no trial (issue 42)."""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import optuna
from optuna.distributions import CategoricalDistribution

from tuner import search
from tuner.budget.__main__ import main as budget_main
from tuner.gpus import GpuSpec
from tuner.pre_gpu_stages import budget_stage, dropped, for_target
from tuner.samplers import constraints
from tuner.status import Status
from tuner.study import load

SM89, SM90 = GpuSpec.from_name("sm_89"), GpuSpec.from_name("sm_90")


def test_the_default_sm_89_space_has_no_unsupported_config_by_the_budget_stage():
    study = for_target(load("article"), SM89)
    verdicts = Counter(str(r.status) if (r := budget_stage(c, study, SM89)) else "fits"
                       for c in study.space.all_configs())
    assert verdicts[str(Status.UNSUPPORTED)] == 0 and verdicts["fits"] > 0, verdicts
    assert study.space["tma"] == (False,) and dropped(study) == ["tma=True"]
    assert load("article").space["tma"] == (False, True)       # the file's space is the file's


def test_hopper_keeps_its_knobs_and_the_fingerprint_is_the_files_on_every_target():
    article = load("article")
    assert for_target(article, SM90) is article
    assert for_target(article, SM89).fingerprint == article.fingerprint
    bwd = for_target(article.for_pass("bwd"), SM89)
    assert bwd.space["dq_mode"] == (0,) and bwd.space["tma"] == (False,)
    assert not any(str(r.status) == Status.UNSUPPORTED for c in bwd.space.all_configs()[:2000]
                   if (r := budget_stage(c, bwd, SM89)))


def test_an_explicit_config_with_a_hopper_knob_is_still_refused_with_its_reason(capsys):
    assert budget_main(["--gpu", "sm_89", "--config", "128x64_w4_s2_tma", "--model-only", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["results"][0]
    assert result["verdict"] == "unsupported" and "TMA needs sm_90 or later" in result["reason"]


def test_the_constraint_marks_a_refused_trial_infeasible_and_a_timed_one_feasible():
    refused = SimpleNamespace(value=0.0, user_attrs={"status": "over_smem", "stage": "budget"})
    timed = SimpleNamespace(value=1.2, user_attrs={"status": "timed", "stage": "time"})
    assert constraints(refused)[0] > 0 and constraints(timed)[0] <= 0
    assert constraints(SimpleNamespace(value=0.0, user_attrs={"status": "incorrect", "stage": "check"}))[0] > 0


def _session(tmp_path, trials: int, space):
    return search.SearchSession(f"sqlite:///{tmp_path / 'o.db'}", "s@sm_89", "tpe", space, 1, trials, {})


def test_a_trial_the_budget_refuses_costs_none_and_at_most_trials_go_free(tmp_path):
    space = for_target(load("article"), SM89).space
    session = _session(tmp_path, 3, space)
    told = []
    try:
        while (answer := session.ask()) is not None:
            refused = len(told) % 2 == 0       # every other trial refused by the budget
            attrs = {"status": "over_smem" if refused else "timed", "stage": "budget" if refused else "time"}
            session.tell(answer[0], 0.0 if refused else 1.0, attrs)
            told.append(refused)
            assert len(told) < 20
    finally:
        session.close()
    assert told.count(False) == 3 and told.count(True) == 3        # 3 counted, as many free
    # a study of refusals only still ends: at most --trials go free
    (tmp_path / "x").mkdir()
    session = _session(tmp_path / "x", 2, space)
    try:
        count = 0
        while (answer := session.ask()) is not None:
            session.tell(answer[0], 0.0, {"status": "restricted", "stage": "budget"})
            count += 1
    finally:
        session.close()
    assert count == 4


def test_a_stored_study_asked_over_more_choices_resumes_after_the_target_narrowed_it(tmp_path):
    article = load("article")
    wide = _session(tmp_path, 2, article.space)
    number, _ = wide.ask()
    wide.tell(number, 1.0, {"status": "timed", "stage": "time"})
    wide.close()
    narrowed = _session(tmp_path, 4, for_target(article, SM89).space)
    try:
        assert narrowed.distributions["tma"] == CategoricalDistribution([False, True])
        number, config = narrowed.ask()            # Optuna refused a categorical's choices changing
        assert number == 1 and config is not None
    finally:
        narrowed.close()
    assert optuna.load_study(study_name="s@sm_89", storage=f"sqlite:///{tmp_path / 'o.db'}").trials

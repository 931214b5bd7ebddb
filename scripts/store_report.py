"""Integrity of a sweep's store after a kill or a resume: python scripts/store_report.py DB STUDY.

Prints configs stored per run, duplicates (a config stored twice for one shape), and the
Optuna trial states, so "no trial lost, none repeated" can be read off directly.
"""

import sqlite3
import sys

db, study = sys.argv[1], sys.argv[2]
with sqlite3.connect(db) as con:
    q = lambda sql, *a: con.execute(sql, a).fetchall()  # noqa: E731
    print("runs:", q("select id, status, started_at, finished_at from fa2_runs where study = ?", study))
    print("configs stored per run:", q("select run_id, count(distinct config) from fa2_results where study = ? "
                                       "group by run_id", study))
    print("configs stored:", q("select count(distinct config) from fa2_results where study = ?", study)[0][0],
          "| rows:", q("select count(*) from fa2_results where study = ?", study)[0][0],
          "| shapes:", q("select count(distinct shape) from fa2_results where study = ?", study)[0][0])
    print("duplicates (config, shape stored twice):",
          q("select count(*) from (select 1 from fa2_results where study = ? group by config, shape, target, gpu "
            "having count(*) > 1)", study)[0][0])
    print("status per config:", q("select status, count(distinct config) from fa2_results where study = ? "
                                  "group by status", study))
    print("optuna trials by state:", q("select s.study_name, t.state, count(*) from trials t join studies s "
                                       "on s.study_id = t.study_id where s.study_name like ? group by 1, 2",
                                       study + "@%"))
    print("configs told to optuna twice:", q(
        "select count(*) from (select a.value_json from trial_user_attributes a join trials t on t.trial_id = "
        "a.trial_id join studies s on s.study_id = t.study_id where s.study_name like ? and a.key = 'config' "
        "group by a.value_json having count(*) > 1)", study + "@%")[0][0])

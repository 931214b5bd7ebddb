"""The dashboards' index is written in UTF-8 whatever the locale (issue 43's battery, 2026-12-04: a budget-only
sweep in a C locale ended with a UnicodeEncodeError on the index's middle dot, after the run)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT

ONE_CONFIG = """name = "small"
[problem]
n = 64
head_dim = 16
dtype = "fp32"
[space]
block_m = [16]
block_n = [16]
num_warps = [1]
num_stages = [1]
tma = [false]
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="the budget-only run is the CPU's")
def test_a_budget_only_sweep_in_a_c_locale_writes_its_index(tmp_path):
    (tmp_path / "small.toml").write_text(ONE_CONFIG)
    env = os.environ | {"PYTHONPATH": str(ROOT), "LANG": "C", "LC_ALL": "C", "PYTHONCOERCECLOCALE": "0",
                        "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    done = subprocess.run([sys.executable, "-m", "tuner.sweep", "--gpu", "sm_89", "--study", "small.toml",
                           "--out", "out"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "\u00b7" in (tmp_path / "out/dashboards/index.html").read_text(encoding="utf-8")

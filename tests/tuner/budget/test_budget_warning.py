"""``tuner.budget`` says before it starts that it is about to compile hundreds of configs on the CPU."""

from __future__ import annotations

import pytest

import tuner.budget.__main__ as budget_cli


@pytest.fixture
def no_compiles(monkeypatch):
    """check_many judged by the model alone, so the test compiles nothing; the compile flags it got are kept."""
    asked, judge = [], budget_cli.check_many

    def model_only(configs, problem, gpu, compile=True, **kwargs):
        asked.append(compile)
        return judge(configs, problem, gpu, compile=False)

    monkeypatch.setattr(budget_cli, "check_many", model_only)
    return asked


def test_the_whole_space_is_announced_with_its_compile_count(no_compiles, capsys):
    """Bug caught: 522 compiles started without a word (minutes on a few cores the first time)."""
    assert budget_cli.main(["--gpu", "sm_89"]) == 0
    err = capsys.readouterr().err
    assert "warning: compiling 522 of 750 configs for sm_89 on this machine's CPU" in err
    assert "--model-only compiles nothing" in err and no_compiles == [True]


@pytest.mark.parametrize("args", [["--config", "128,64,8,3"], ["--model-only"]])
def test_one_config_or_the_model_alone_is_not_announced(no_compiles, capsys, args):
    assert budget_cli.main(["--gpu", "sm_89", *args]) == 0
    assert "warning" not in capsys.readouterr().err

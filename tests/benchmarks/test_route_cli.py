"""benchmarks.route's command line: the grid it measures, and paths refused before any timing."""

from __future__ import annotations

import pytest

from benchmarks import route


def test_the_default_grid_measures_the_wide_bucket_at_short_lengths_only():
    shapes = route.grid(route.parse([]))
    assert {(b, h) for b, h, _ in shapes} == {(4, 8), (16, 16), (32, 16)}
    assert sorted(n for b, h, n in shapes if (b, h) == (32, 16)) == [256, 512, 1024, 2048, 4096]
    assert sorted(n for b, h, n in shapes if (b, h) == (16, 16)) == list(route.LENGTHS)


def test_named_sizes_are_measured_at_every_length_asked():
    assert route.grid(route.parse(["--bh", "32x16"])) == [(32, 16, n) for n in route.LENGTHS]
    assert route.grid(route.parse(["--n", "8192", "--bh", "2x2"])) == [(2, 2, 8192)]


@pytest.mark.parametrize("flag", ["--table", "--markdown", "--json"])
def test_a_path_that_cannot_be_written_is_refused_before_the_timing(tmp_path, capsys, flag):
    for bad, fragment in ((tmp_path, "is a directory"), (tmp_path / "no" / "t.py", "does not exist")):
        with pytest.raises(SystemExit) as stop:
            route.parse([flag, str(bad)])
        assert stop.value.code == 2 and fragment in capsys.readouterr().err
    assert route.parse([flag, str(tmp_path / "t.py")])

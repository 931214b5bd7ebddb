"""``python -m benchmarks.search record``: a store's rows of a study written to a file that
``quality --recorded`` loads back, row for row (the recorded H200 grids in docs/results are
such files)."""

import gzip
import json
from pathlib import Path

from conftest import FIXTURES

from benchmarks import search

FIXTURE = FIXTURES / "h200_results.json.gz"
FIELDS = ("study", "shape", "config", "status", "ms", "cudnn_ms", "run_id", "created_at")


def _rows(path: Path, study: str) -> list[tuple]:
    with gzip.open(path, "rt") as handle:
        data = json.load(handle)
    return sorted(tuple(str(row[f]) for f in FIELDS) for row in data["results"] if row["study"] == study)


def test_a_recorded_study_reads_back_row_for_row(tmp_path):
    url = search.recorded_store(FIXTURE, str(tmp_path))
    out = tmp_path / "article.json.gz"
    written = search.save_recorded(url, "article", out)
    assert written == len(_rows(FIXTURE, "article")) == 1500      # the other study's rows stay out
    assert _rows(out, "article") == _rows(FIXTURE, "article")
    with gzip.open(out, "rt") as handle:
        runs = json.load(handle)["runs"]
    assert {run["id"] for run in runs} == {int(row[6]) for row in _rows(out, "article")}
    again = tmp_path / "again"
    again.mkdir()
    assert search.save_recorded(search.recorded_store(out, str(again)), "article", tmp_path / "b.json") == 1500


def test_record_never_overwrites_a_file(tmp_path, capsys):
    url = search.recorded_store(FIXTURE, str(tmp_path))
    out = tmp_path / "kept.json.gz"
    out.write_text("mine")
    assert search.main(["record", "--storage", url, "--study", "article", "--out", str(out)]) == 2
    assert "--out" in capsys.readouterr().err and out.read_text() == "mine"
    assert search.main(["record", "--storage", f"sqlite:///{tmp_path}/typo.db", "--study", "article",
                        "--out", str(tmp_path / "new.json")]) == 2
    assert not (tmp_path / "new.json").exists()

"""Study files: the shipped ones, every bad field named with its allowed values, fingerprints."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

from tuner.gate import ragged_gate
from tuner.study import StudyError, load, shipped


@pytest.mark.parametrize("name", ["article", "head_dim_128", "long_context", "autotune_race", "hopper_knobs"])
def test_shipped_studies_load(name):
    study = load(name)
    assert study.shapes and study.configs()
    # The ragged gate shape must run the binary that is timed (same JIT specialisation).
    spec = study.kernel.specialisation
    assert all(spec(ragged_gate(s).problem) == spec(s) for s in study.shapes)


def test_shipped_studies_are_package_data_found_from_any_folder(tmp_path):
    assert set(shipped()) >= {"article", "head_dim_128", "long_context", "autotune_race"}
    code = "from tuner.study import load; s = load('article'); print(s.name, len(s.shapes), s.path)"
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[:2] == ["article", "8"]


def test_article_study_is_the_article_table():
    study = load("article")
    assert {(s.n_q, s.causal) for s in study.shapes} == {(n, c) for n in (512, 1024, 2048, 4096)
                                                         for c in (False, True)}
    assert {(s.batch, s.heads, s.head_dim, s.dtype) for s in study.shapes} == {(4, 8, 64, "bf16")}
    # 750 tile configs of the plain kernel, each also with TMA
    assert len(study.space.all_configs()) == 1500
    assert sum(c.plain for c in study.space.all_configs()) == 750
    assert len(study.variants()) == 2     # one binary per causal flag for all four lengths


def test_restrictions_can_name_the_knobs():
    study = load("hopper_knobs")
    configs = study.configs()
    # 18 tiles (block_m 128 with 4 or 8 warps, or 64 with 4) x 18 knob sets (warp specialization with TMA only)
    assert len(study.space.all_configs()) == 576 and len(configs) == 18 * 18
    assert all(c.tma for c in configs if c.warp_specialize) and any(c.warp_specialize for c in configs)
    assert all(c.block_m == 128 or c.num_warps == 4 for c in configs)


def test_a_plain_study_keeps_its_fingerprint_from_before_the_knobs():
    """Stored studies of the plain kernel must stay usable: the knob axes left plain are not
    part of the fingerprint (this one is the article study's before the knobs existed)."""
    from dataclasses import replace


    study = load("article")
    plain = replace(study, space=study.kernel.plain_space())
    assert plain.fingerprint == "2247fdf397f796df"
    assert study.fingerprint != plain.fingerprint


@pytest.mark.parametrize("body, expected", [
    ("[problem]\ndtype = 'bf32'", ["[problem] dtype = 'bf32'", "fp32, fp16, bf16"]),
    ("[problem]\nhead_dim = 96", ["head_dim = 96", "(16, 32, 64, 128, 256)"]),
    ("[problem]\nbatchsize = 4", ["unknown field 'batchsize'", "batch, heads"]),
    ("[problem]\nn = 64\nn_q = 64", ["either n, or n_q and n_k"]),
    ("[problem]\ncausal = 'yes'", ["causal = 'yes'", "true or false"]),
    ("[problem]\nbatch = 100000000000000000000", ["batch x heads = 100000000000000000000 x 8 is over 65535"]),
    ("[problem]\nbatch = 256\nheads = [8, 256]", ["batch x heads = 256 x 256 is over 65535"]),
    ("[problem]\n[space]\nblock_m = [48]", ["[space] block_m value 48", "[16, 32, 64, 128, 256]"]),
    ("[problem]\n[space]\nrestrictions = [\"__import__('os')\"]", ["restriction", "Call"]),
    ("[problem]\n[space]\nrestrictions = ['block_k > 1']", ["names 'block_k'", "block_m"]),
    ("[problem]\n[space]\nrestrictions = ['block_m > 1000']", ["leave no config"]),
    ("[problem]\n[objective]\nmetric = 'fast'", ["metric = 'fast'", "speedup_vs_flash"]),
    ("[problem]\n[timing]\nrep_ms = 0", ["[timing] rep_ms = 0", "1 to 10000"]),
    ("name = 'x'", ["[problem] is missing"]),
    ("[problem\n", ["not valid TOML"]),
])
def test_bad_study_names_file_field_and_allowed_values(tmp_path, body, expected):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(StudyError) as info:
        load(str(path))
    message = str(info.value)
    assert str(path) in message
    for fragment in expected:
        assert fragment in message, message


@pytest.mark.parametrize("make, fragment", [
    (lambda tmp: str(tmp), "is a directory"),
    (lambda tmp: "", "--study is empty"),
    (lambda tmp: "   ", "--study is empty"),
    (lambda tmp: _binary(tmp), "not a text file"),
    (lambda tmp: "no_such_study", "available: article"),
])
def test_unusable_study_paths_are_clear_errors(tmp_path, make, fragment):
    with pytest.raises(StudyError, match=fragment):
        load(make(tmp_path))


def _binary(tmp_path):
    path = tmp_path / "study.toml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    return str(path)


def test_restrictions_are_applied(tiny):
    study = load(str(tiny))
    assert len(study.space.all_configs()) == 8 and len(study.configs()) == 6      # 16x32 at two stage counts
    assert all(c.block_m >= c.block_n for c in study.configs())


def test_fingerprint_follows_the_definition_not_the_comments(tmp_path, tiny):
    base = load(str(tiny)).fingerprint
    commented = tmp_path / "commented.toml"
    text = tiny.read_text().replace('name = "tiny"', 'name = "tiny"\ndescription = "x"')
    commented.write_text("# a comment\n" + text)
    assert load(str(commented)).fingerprint == base
    changed = tmp_path / "changed.toml"
    changed.write_text(tiny.read_text().replace("n = 64", "n = 128"))
    assert load(str(changed)).fingerprint != base


def test_a_study_file_with_a_utf8_bom_reads_as_without_it(tmp_path, tiny):
    """Windows editors (Notepad) save UTF-8 with a byte-order mark; TOML parsers stop at it."""
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf" + tiny.read_bytes())
    study = load(str(bom))
    assert (study.name, study.fingerprint) == ("tiny", load(str(tiny)).fingerprint)

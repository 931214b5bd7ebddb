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


@pytest.mark.parametrize("ratios, wanted", [
    ({"triton": 1.0, "ws": 1.05}, "ws"),            # a 5% win is a win
    ({"triton": 1.0, "ws": 1.0101}, "ws"),          # just past the 1% margin
    ({"triton": 2.0, "ws": 2.0 * (1 + route.ROUND_OFF)}, "ws"),     # exactly 1% faster is past it
    ({"triton": 1.0, "ws": 1.0099}, "triton"),      # within it: a tie keeps Triton
    ({"triton": 1.0, "gluon": 0.8}, "triton"),
    ({"ws": 0.9}, "ws"),                            # Triton failed there: the other one
    ({}, None),
])
def test_the_winner_is_the_faster_kernel_past_a_one_percent_margin(ratios, wanted):
    assert route.winner(ratios) == wanted


def test_the_table_holds_only_shapes_with_a_winner_and_names_every_version():
    rows = [dict(pass_="fwd", B=4, H=8, N=512, D=64, causal=False, vs_cudnn=dict(triton=0.9, ws=1.0), winner="ws"),
            dict(pass_="fwd", B=4, H=8, N=1024, D=64, causal=False, vs_cudnn={}, winner=None)]
    env = dict(gpu="NVIDIA H200 (sm_90, 132 SMs)", torch="2.11.0+cu130", triton="3.6.0", date="2026-12-03 12:00 UTC")
    namespace = {}
    exec(route.table_source(rows, env, "python -m benchmarks.route"), namespace)
    assert namespace["FORWARD"] == {(64, False, 512, 32): "ws"} and namespace["BACKWARD"] == {}
    for value in env.values():
        assert value in namespace["__doc__"] and value in namespace["MEASURED"].values()


def test_a_failure_note_is_the_messages_last_line():
    """Python and Triton put the message last, after the source excerpt."""
    from benchmarks._report import first_line

    exc = RuntimeError("at 12:4:\n    acc = tl.dot(a, b)\n\nout of resource: shared memory, 300000 > 232448\n")
    assert first_line(exc) == "RuntimeError: out of resource: shared memory, 300000 > 232448"
    assert first_line(ValueError("x" * 500), 40) == "ValueError: " + "x" * 28 and first_line(KeyError()) == "KeyError: "


SHORT_D64 = ["triton", "triton_64x64", "ws", "ws_128", "ws_64", "ws_64x64", "ws_64_p2", "ws_64x64_p2"]
MANY_PROGRAMS = ["ws_64x64_r144", "ws_64x64_p3", "ws_64x64_p4"]


@pytest.mark.parametrize("pass_, n, head_dim, wanted", [
    # D=64: ws_128 keeps the default's persistent grid where the default has one (non-causal), so ws_128_p1 is
    # timed only causal, where the default has a program per tile
    ("fwd", 1024, 64, {False: SHORT_D64 + MANY_PROGRAMS, True: [*SHORT_D64, "ws_128_p1", *MANY_PROGRAMS]}),
    ("fwd", 1024, 128, ["triton", "triton_64x64", "ws", "ws_64x64", "ws_64x64_p2", "ws_p0"]),  # ws: 128 rows there
    # past SHORT_UP_TO: the defaults, and the 64 x 64 tiles of three and four programs an SM
    ("fwd", 4096, 64, ["triton", "ws", "ws_64x64_r144", "ws_64x64_p4"]),
    ("bwd", 512, 128, ["triton", "gluon", "gluon_1c"]),
    ("bwd", 512, 64, ["triton", "gluon", "gluon_2c", "gluon_128"]),   # D=64's Gluon default has one consumer
    ("bwd", 8192, 128, ["triton", "gluon"]),                            # gluon_2c is D=64's only
    ("bwd", 8192, 64, ["triton", "gluon", "gluon_2c", "gluon_128"]),  # at every length (aimed at the long ones)
])
def test_short_lengths_time_the_short_tiles_and_no_config_twice(pass_, n, head_dim, wanted):
    for causal in (False, True):
        timed = route.timed_candidates(pass_, n, head_dim, causal)
        assert list(timed) == (wanted[causal] if isinstance(wanted, dict) else wanted), (pass_, n, head_dim, causal)
        configs = [repr(sorted(c.items())) for c in timed.values()]
        assert len(set(configs)) == len(configs)


def test_the_report_and_the_table_give_every_timed_candidates_ratio():
    rows = [dict(pass_="fwd", B=32, H=16, N=512, D=64, causal=True, ms={}, notes={}, winner="ws_64",
                 vs_cudnn=dict(triton=0.71, triton_64x64=0.8, ws=0.55, ws_64=0.93, default=0.71, flash=0.6))]
    text = route.report(rows, "env", "python -m benchmarks.route")
    assert "| fwd | B32 H16 N512 D64 causal | triton 0.71, triton_64x64 0.80, ws 0.55, ws_64 0.93 | 0.71 | 0.60 | " \
           "ws_64 | 0.76 |" in text
    env = dict(gpu="g (sm_90)", torch="2.11", triton="3.6.0", date="2026-12-03 12:00 UTC")
    source = route.table_source(rows, env, "python -m benchmarks.route")
    assert "(64, True, 512, 512): 'ws_64',   # triton 0.71, triton_64x64 0.80, ws 0.55, ws_64 0.93" in source
    assert route.winner({k: v for k, v in rows[0]["vs_cudnn"].items() if k in route.OURS["fwd"]}) == "ws_64"


def _row(n, winner, ratios, pass_="fwd"):
    return dict(pass_=pass_, B=4, H=8, N=n, D=64, causal=False, vs_cudnn=ratios, winner=winner, ms={}, notes={})


ENV = dict(gpu="g (sm_90)", driver="580", torch="2.11", triton="3.6.0", date="2026-12-04 10:00 UTC")


def test_an_update_keeps_the_buckets_it_did_not_measure_and_replaces_the_others(tmp_path):
    path = tmp_path / "route.py"
    old = dict(ENV, date="2026-12-03 11:36 UTC")
    route.write_table(str(path), route.table_source([_row(256, "ws", dict(triton=0.8, ws=0.9)),
                                                     _row(4096, "ws", dict(triton=0.9, ws=1.05))], old, "first"))
    date, kept = route.kept_entries(str(path))
    assert date == "2026-12-03 11:36 UTC" and set(kept["FORWARD"]) == {(64, False, 256, 32), (64, False, 4096, 32)}
    source = route.table_source([_row(256, "ws_64", dict(triton=0.8, ws=0.9, ws_64=1.0))], ENV, "second", kept, date)
    namespace = {}
    exec(source, namespace)
    assert namespace["FORWARD"] == {(64, False, 256, 32): "ws_64", (64, False, 4096, 32): "ws"}
    assert "# triton 0.90, ws 1.05" in source                       # the kept line, its comment and all
    assert "measured 2026-12-03 11:36 UTC" in namespace["__doc__"] and namespace["MEASURED"]["command"] == "second"


def test_an_update_of_an_update_says_since_when_its_kept_entries_were_measured(tmp_path):
    """Bug caught: the table updated in parts (one GPU call each) said its kept entries were measured at the
    previous part's date, though most came from the first table, measured a day before."""
    path = tmp_path / "route.py"
    route.write_table(str(path), route.table_source([_row(4096, "ws", dict(triton=0.9, ws=1.05))],
                                                    dict(ENV, date="2026-12-03 11:36 UTC"), "first"))
    for part, (n, date) in enumerate(((256, "2026-12-04 03:03 UTC"), (512, "2026-12-04 03:19 UTC"))):
        when, kept = route.kept_entries(str(path))
        route.write_table(str(path), route.table_source([_row(n, "ws", dict(triton=0.8, ws=0.9))],
                                                        dict(ENV, date=date), f"part {part}", kept, when))
    when, kept = route.kept_entries(str(path))
    assert when == "2026-12-03 11:36 UTC to 2026-12-04 03:19 UTC" and len(kept["FORWARD"]) == 3
    assert "(measured 2026-12-03 11:36 UTC to 2026-12-04 03:03 UTC)" in path.read_text()


def test_without_update_or_a_table_nothing_is_kept(tmp_path):
    assert route.kept_entries(str(tmp_path / "none.py")) == (None, {})
    source = route.table_source([_row(256, "ws", dict(triton=0.8, ws=0.9))], ENV, "only")
    assert "did not measure" not in source


def test_the_table_is_written_after_every_shape(tmp_path, monkeypatch):
    """A run cut short (a lost machine) keeps every shape it measured, in a table the route can read."""
    rows = iter([_row(256, "ws", dict(triton=0.8, ws=0.9)), _row(512, "triton", dict(triton=0.9, ws=0.8))])
    path = tmp_path / "route.py"
    seen = []

    def measure(*args):
        if seen:
            seen.append(path.read_text())
            raise KeyboardInterrupt                                 # the machine is lost after the first shape
        seen.append(None)
        return next(rows)

    monkeypatch.setattr(route, "measure", measure)
    monkeypatch.setattr(route.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr("kernel.measure.timing.environment", lambda: ENV)
    monkeypatch.setattr("kernel.measure.timing.warm_gpu", lambda: None)
    with pytest.raises(KeyboardInterrupt):
        route.main(["--pass", "fwd", "--head-dim", "64", "--causal", "no", "--bh", "4x8", "--n", "256", "--n", "512",
                    "--table", str(path)])
    namespace = {}
    exec(seen[1], namespace)
    assert namespace["FORWARD"] == {(64, False, 256, 32): "ws"} and not (tmp_path / "route.py.partial").exists()


def test_a_row_notes_a_shape_or_call_that_fails_and_times_the_others(monkeypatch):
    """benchmarks.route and benchmarks.tile_order time a row through one helper (route.timed_row)."""
    import kernel.measure.retime as retime
    from benchmarks import tile_order

    timed = []
    monkeypatch.setattr(retime, "paired_together",
                        lambda calls, pins, ref: timed.append(sorted(calls)) or (dict.fromkeys(calls, 1.0),
                                                                                dict.fromkeys(calls, 2.0)))
    monkeypatch.setattr(route.torch.cuda, "synchronize", lambda: None)

    def broken():
        raise RuntimeError("at 1:2:\n\nout of resource: shared memory")

    row = route.timed_row(dict(ms={}, vs_cudnn={}, notes={}),
                          lambda: ({"ws": [broken], "triton": [lambda: None], "cudnn": [None]}, {"cudnn": object()}))
    assert row["notes"] == {"ws": "RuntimeError: out of resource: shared memory"} and timed == [["cudnn", "triton"]]
    assert row["vs_cudnn"] == {"triton": 2.0, "cudnn": 2.0}

    def no_shape(*args):
        raise ValueError("no memory for the sets")

    monkeypatch.setattr(route, "forward_calls", no_shape)
    row = route.measure("fwd", 4, 8, 512, 64, False)
    assert row["notes"] == {"setup": "ValueError: no memory for the sets"} and "winner" not in row and not row["ms"]
    monkeypatch.setattr(tile_order, "backward_calls", no_shape)
    assert tile_order.measure("bwd", 4, 8, 512, 64, [])["notes"] == {"setup": "ValueError: no memory for the sets"}

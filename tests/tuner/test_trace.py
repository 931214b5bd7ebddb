"""The sweep's timeline (``--trace``): a Chrome trace of each trial's stages, and the idle line."""

from __future__ import annotations

import json

from tuner import sweep
from tuner.trace import Timeline, idle_line


def test_idle_line_counts_the_gaps_between_device_spans_once_where_spans_overlap():
    timeline = Timeline()
    timeline.enable()
    t0 = timeline.t0
    timeline.add("a", "device 0", t0 + 1.0, t0 + 3.0)
    timeline.add("b", "device 1", t0 + 2.0, t0 + 4.0)     # overlaps a: busy 1-4 s, not 4 s
    timeline.add("c", "device 0", t0 + 6.0, t0 + 7.0)
    timeline.add("compile", "compile 1", t0 + 0.0, t0 + 9.0)     # not a device lane
    line = idle_line(timeline)
    assert "devices busy 4.0 s" in line
    assert "idle 1.0 s before the first span, 2.0 s between spans" in line


def test_a_cpu_sweep_writes_a_trace_with_every_trial_on_a_device_lane(tiny, tmp_path, sweep_args, capsys):
    trace = tmp_path / "run.trace.json"
    assert sweep.main(sweep_args(tiny, tmp_path / "t.db", "--sampler", "grid", "--finalists", "0",
                                 "--trace", str(trace))) == 0
    body = json.loads(trace.read_text())
    lanes = {e["tid"]: e["args"]["name"] for e in body["traceEvents"] if e["ph"] == "M"}
    spans = [(lanes[e["tid"]], e["name"]) for e in body["traceEvents"] if e["ph"] == "X"]
    timed = [row for row in spans if row == ("device 0", "trial")]
    assert timed, spans
    assert ("device 0", "worker start") in spans and ("device 0", "baselines") in spans
    start = [(e["name"], e["ts"], e["dur"]) for e in body["traceEvents"]
             if e["ph"] == "X" and e["name"].startswith("start: ")]
    assert [name for name, *_ in start] == ["start: the interpreter, imports",
                                            "start: the study, the inputs, the GPU present",
                                            "start: the caches, the store", "start: the rest"]
    assert all(ts + dur <= later + 1 for (_, ts, dur), (_, later, _) in zip(start, start[1:]))   # in turn (µs rounding)
    assert sum(name == "tell" for _, name in spans) >= len(timed)
    assert "timeline: devices busy" in capsys.readouterr().err
    from tuner.trace import TIMELINE

    assert not TIMELINE.on        # a later sweep in this process collects nothing unless asked


def test_trace_refuses_an_existing_file_and_writes_nothing(tiny, tmp_path, sweep_args, capsys):
    trace = tmp_path / "old.json"
    trace.write_text("keep me")
    assert sweep.main(sweep_args(tiny, tmp_path / "t.db", "--trace", str(trace))) == 2
    assert trace.read_text() == "keep me"
    assert "--trace" in capsys.readouterr().err
    assert not (tmp_path / "t.db").exists()

"""benchmarks.gluon.set_calls: each of a benchmark's calls times its own input set (issue 43's list)."""

from __future__ import annotations


def test_each_benchmark_call_times_its_own_input_set(monkeypatch):
    """benchmarks.gluon.set_calls: one call per set, each on that set (a late-bound lambda would run the
    last set every time)."""
    import kernel
    from benchmarks.gluon import set_calls

    seen = []
    monkeypatch.setattr(kernel, "flash_attn_fwd", lambda q, k, v, causal, out=None, lse=None, **config:
                        seen.append((q, k, v, causal, out, lse, config)))
    sets = [(f"q{i}", f"k{i}", f"v{i}", f"out{i}", f"lse{i}") for i in range(3)]
    calls = set_calls(sets, True, dict(block_m=64))
    for call in calls:
        call()
    assert seen == [(f"q{i}", f"k{i}", f"v{i}", True, f"out{i}", f"lse{i}", dict(block_m=64)) for i in range(3)]
    seen.clear()
    for call in set_calls(sets, False, {}):
        call()
    assert [s[3] for s in seen] == [False] * 3

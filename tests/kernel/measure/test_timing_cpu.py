"""The stopwatches' bookkeeping on the CPU, with fake calls and a fake clock: host µs per call,
how many input sets miss the L2 (counts that do not divide evenly), which set each timed call
reads, and which call the host time is taken of. The GPU tests time real kernels; these check
the arithmetic and the wiring, which those cannot tell apart from noise."""

from __future__ import annotations

import math

import pytest
import torch

from kernel.measure import timing
from tuner.kernels.triton_bwd import KERNEL as BWD
from tuner.kernels.triton_fwd import KERNEL as FWD, FwdConfig
from tuner.problem import Problem


class FakeClock:
    """``time.perf_counter`` that moves only when a fake call runs: each call costs the next of ``costs_us``."""

    def __init__(self, costs_us):
        self.now, self.costs, self.calls = 0.0, list(costs_us), 0

    def __call__(self):
        return self.now

    def call(self):
        self.now += self.costs[min(self.calls, len(self.costs) - 1)] * 1e-6
        self.calls += 1


@pytest.fixture
def no_cuda_sync(monkeypatch):
    syncs = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: syncs.append(1))
    return syncs


def test_host_us_is_the_median_batch_of_calls_after_one_warm_up(monkeypatch, no_cuda_sync):
    # warm-up 1000 µs (never counted); then 3 batches of 4 calls at 10, 30, 20 µs each
    clock = FakeClock([1000.0] + [10.0] * 4 + [30.0] * 4 + [20.0] * 4)
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    assert timing.host_us(clock.call, calls=4, batches=3) == pytest.approx(20.0)
    assert clock.calls == 1 + 4 * 3
    assert len(no_cuda_sync) == 1 + 3            # after the warm-up and after each batch, never inside one


@pytest.mark.parametrize("per_set_mib, sets", [(7, 18), (41, 3), (40, 3), (39, 4), (119, 2), (120, 1), (121, 1),
                                               (0.5, timing.MAX_SETS)])
def test_input_sets_round_up_to_hold_at_least_twice_the_l2(monkeypatch, per_set_mib, sets):
    monkeypatch.setattr(timing, "l2_bytes", lambda: 60 << 20)
    per_set = int(per_set_mib * (1 << 20))
    assert timing.input_sets(per_set) == sets
    assert sets == timing.MAX_SETS or sets * per_set >= 2 * (60 << 20) > (sets - 1) * per_set


def test_causal_flops_count_each_querys_kept_keys_when_queries_outnumber_keys():
    # top-left aligned: query i keeps min(i + 1, N_k) keys; 5 queries over 2 keys keep 1 + 2 + 2 + 2 + 2
    assert timing.attention_flops(2, 3, 5, 2, 16, True) == 4.0 * 2 * 3 * 5 * 2 * 16 * 9 / 10


def test_each_round_starts_one_later_and_every_candidate_is_in_every_round():
    assert timing.round_orders(["a", "b", "c"], 4) == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"],
                                                       ["a", "b", "c"]]
    assert timing.round_orders([], 3) == []


def test_time_backends_times_each_backend_under_its_pin_and_gives_none_to_one_that_refuses(monkeypatch,
                                                                                            no_cuda_sync):
    pinned, measured = [], []

    def pin(name):
        class Pin:
            def __enter__(self):
                pinned.append(name)

            def __exit__(self, *exc):
                pinned.append(f"/{name}")
        return Pin

    def refuse():
        raise RuntimeError("no kernel for this shape")

    calls = {"flash": [lambda: None, lambda: None], "cudnn": [refuse]}
    monkeypatch.setattr(timing, "gpu_time", lambda c, rep, warm, settle: measured.append(
        (len(c), rep, warm, settle, list(pinned))) or timing.Timing(0.25, timing.GRAPH))
    monkeypatch.setattr(timing, "host_us", lambda call: 7.5 if call is calls["flash"][0] else pytest.fail("call"))
    result = timing.time_backends({name: (pin(name), c) for name, c in calls.items()}, rep_ms=33.0, warmup_ms=4,
                                  settle_ms=5.0)
    assert result == {"flash": {"ms": 0.25, "host_us": 7.5, "method": "cuda_graph"},
                      "cudnn": {"ms": None, "host_us": None, "method": None}}
    assert measured == [(2, 33.0, 4, 5.0, ["flash", "/flash", "flash"])]       # inside the pin, with both sets
    assert timing.time_backends({"flash": (pin("flash"), calls["flash"])}, host=False)["flash"]["host_us"] is None


def _fwd_case(problem):
    return FWD.make_case(problem, "cpu")


def test_the_forward_times_fresh_sets_enough_to_miss_the_l2(monkeypatch):
    problem = Problem(1, 2, 40, 24, 16, "fp32", False)
    case = _fwd_case(problem)
    per_set = 4 * case.tensors["q"].numel() * 4
    monkeypatch.setattr(timing, "l2_bytes", lambda: 5 * per_set // 2 + 3)        # 5.0x: a count that rounds up
    sets = FWD.timing_sets(case, "not-cpu")
    assert len(sets) == math.ceil(2 * (5 * per_set // 2 + 3) / per_set) == 6
    assert sets[0] is case.tensors
    for s in sets[1:]:
        for name in ("q", "k", "v", "out", "lse"):
            assert s[name].shape == case.tensors[name].shape and s[name].dtype == case.tensors[name].dtype
            assert s[name].data_ptr() != case.tensors[name].data_ptr()
        assert not torch.equal(s["q"], case.tensors["q"]) and not torch.equal(s["k"], s["v"])
    assert len({s["q"].data_ptr() for s in sets}) == len(sets)
    assert FWD.timing_sets(case, "cpu") == [case.tensors]


def test_the_backward_times_fresh_sets_of_all_nine_tensors(monkeypatch):
    problem = Problem(1, 2, 20, 24, 16, "fp32", True)
    case = BWD.make_case(problem, "cpu")
    per_set = 9 * case.tensors["q"].numel() * 4
    monkeypatch.setattr(timing, "l2_bytes", lambda: 3 * per_set // 2 + 1)        # 3.0x, rounding up
    sets = BWD.timing_sets(case, "cpu:0")
    assert len(sets) == 4 and sets[0] is case.tensors
    for s in sets[1:]:
        assert set(s) == {"q", "k", "v", "dout", "out", "lse", "dq", "dk", "dv"}
        assert s["q"].data_ptr() != case.tensors["q"].data_ptr()
        assert torch.isfinite(s["lse"]).all() and torch.isfinite(s["out"]).all()      # the forward's, for these q, k, v


class FakeKernel:
    """What a worker asks of a kernel for timing, recording which tensors each call reads."""

    def __init__(self, n_sets):
        self.n_sets, self.made = n_sets, []

    def make_case(self, problem, device):
        from tuner.kernels import Case

        return Case("study", problem, 0, {"id": 0}, ("out",))

    def timing_sets(self, case, device):
        return [case.tensors] + [{"id": i} for i in range(1, self.n_sets)]

    def call(self, config, tensors, problem, allocate=False):
        call = lambda: None                                # noqa: E731
        call.reads, call.allocate, call.config = tensors["id"], allocate, config
        self.made.append(call)
        return call


def test_a_worker_times_every_set_and_takes_the_host_time_of_a_users_allocating_call(monkeypatch):
    from tuner import runner

    problem = Problem(1, 2, 64, 64, 16, "fp32", False)
    fake = FakeKernel(n_sets=5)
    bench = runner.WorkerBench(fake, [problem], (3, 17), "cuda")
    seen = {}
    monkeypatch.setattr(timing, "gpu_time", lambda calls, rep, warm, clock=None, bound_ms=None: seen.update(
        gpu=[c.reads for c in calls], allocating=[c.allocate for c in calls], rep=rep, warm=warm, bound=bound_ms)
        or timing.Timing(0.125, timing.GRAPH, 1800.0))
    monkeypatch.setattr(timing, "host_us", lambda call, calls, batches: seen.update(
        host=(call.reads, call.allocate, calls, batches)) or 42.0)
    config = FwdConfig(16, 16, 1, 1)
    assert bench._time(problem, config) == (0.125, timing.GRAPH, 42.0, 1800.0)   # the clock read with it
    assert seen["gpu"] == [0, 1, 2, 3, 4] and seen["allocating"] == [False] * 5
    assert (seen["rep"], seen["warm"], seen["bound"]) == (17, 3, None)
    assert seen["host"] == (0, True, runner.HOST_CALLS, 2)
    assert all(c.config is config for c in fake.made)
    seen.clear()
    assert bench._time(problem, config, host=False) == (0.125, timing.GRAPH, None, 1800.0) and "host" not in seen
    bench._time(problem, config, bound_ms=0.5)
    assert seen["bound"] == 0.5                                 # a trial's bound reaches the stopwatch


def test_host_us_together_interleaves_the_paths_batches_and_pins_each_batch(monkeypatch):
    """Each path's batches alternate with the others' (the order rotating), every batch of a pinned
    path runs inside its pin, and each path gets the median of its own batches."""
    import contextlib

    from kernel.measure import timing

    monkeypatch.setattr(timing.torch.cuda, "synchronize", lambda: None)
    order, inside = [], []
    pinned = [False]

    @contextlib.contextmanager
    def pin():
        pinned[0] = True
        yield
        pinned[0] = False

    def path(name):
        def call():
            if not order or order[-1] != name:
                order.append(name)
            if name == "s":
                inside.append(pinned[0])
        return call

    found = timing.host_us_together({"a": path("a"), "b": path("b"), "s": path("s")}, {"s": pin}, per_batch=3,
                                    batches=4)
    assert set(found) == {"a", "b", "s"} and all(us > 0 for us in found.values())
    batches = order[3:]                  # after one warm call each
    assert batches == ["a", "b", "s", "b", "s", "a", "s", "a", "b", "a", "b", "s"]
    assert inside and all(inside), "a pinned path ran outside its pin"


def test_kept_scratch_holds_every_tma_scratch_until_the_block_ends(monkeypatch):
    """Triton drops a launch's scratch as it returns; inside kept_scratch() (a dK/dV kernel beside its
    dQ pass on another stream) each one is held until the block closes, nested blocks restoring the outer."""
    from kernel.triton import launch

    monkeypatch.setattr(launch.torch, "empty", lambda size, dtype, device: torch.zeros(size, dtype=dtype))
    assert launch._KEPT_SCRATCH is None
    with launch.kept_scratch():
        first = launch.tma_scratch(128, 64, None)
        with launch.kept_scratch():
            inner = launch.tma_scratch(64, 64, None)
            assert len(launch._KEPT_SCRATCH) == 1 and launch._KEPT_SCRATCH[0] is inner
        second = launch.tma_scratch(256, 64, None)
        assert [t.numel() for t in launch._KEPT_SCRATCH] == [128, 256] and launch._KEPT_SCRATCH[0] is first
        assert launch._KEPT_SCRATCH[1] is second
    assert launch._KEPT_SCRATCH is None
    launch.tma_scratch(32, 64, None)          # outside any block: nothing held
    assert launch._KEPT_SCRATCH is None


class FakeGraph(timing.CapturedGraph):
    """A captured graph whose replays take ``ms`` each (per call: one call per replay), counted."""

    def __init__(self, ms: float, replay_ms: float = 1.0):
        super().__init__(graph=None, calls_per_replay=1, replay_ms=replay_ms)
        self.ms, self.windows = ms, []

    def replay_for(self, ms):
        pass

    def timed(self, rep_ms, clock=None, replays=None):
        count = replays or self.replays_for(rep_ms)
        self.windows.append(count)
        return [self.ms] * count, 1800.0


@pytest.mark.parametrize("ms, bound, windows, method", [
    (2.0, None, [40], timing.GRAPH),           # no bound: the whole window at once
    (2.0, 1.5, [10], timing.GRAPH_SHORT),      # past the bound after a quarter: it stops there
    (1.0, 1.5, [10, 30], timing.GRAPH),        # within it: the rest is timed, the median over all 40
])
def test_a_bounded_timing_stops_after_its_first_quarter_only_past_the_bound(monkeypatch, ms, bound, windows, method):
    graph = FakeGraph(ms)
    monkeypatch.setattr(timing, "capture_graph", lambda calls: graph)
    got = timing.gpu_time([lambda: None], rep_ms=40.0, bound_ms=bound)
    assert (got.ms, got.method, graph.windows) == (ms, method, windows)


def test_a_window_of_the_fewest_replays_is_not_split(monkeypatch):
    """A replay as long as a quarter of the window: the first part would be the whole (10 replays at
    least), so a bound shortens nothing and the figure is the whole window's."""
    graph = FakeGraph(2.0, replay_ms=4.0)
    monkeypatch.setattr(timing, "capture_graph", lambda calls: graph)
    got = timing.gpu_time([lambda: None], rep_ms=40.0, bound_ms=1.0)
    assert (got.method, graph.windows) == (timing.GRAPH, [10])

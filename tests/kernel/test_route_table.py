"""The measured route (kernel/route_table.py, kernel.route.measured_kernel, benchmarks/route.py): the
committed table says where it was measured, the default call follows it bucket by bucket, and the
benchmark writes a table the kernel reads back."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import kernel
import kernel.gluon.bwd.launch as gluon_bwd
import kernel.gluon.fwd.launch as gluon_fwd
import kernel.route as route
import kernel.route_table as route_table
from benchmarks.route import table_source, winner
from kernel.candidates import candidates
from kernel.triton.launch import PLANS

KERNELS = {"fwd": {"triton", "triton_64x64", "ws", "ws_128", "ws_64", "ws_64x64", "ws_64_p2", "ws_64x64_p2",
                   "ws_128_p1", "ws_64x64_r144", "ws_64x64_p3", "ws_64x64_p4", "ws_p0", "pipelined"},
           "bwd": {"triton", "gluon", "gluon_1c", "gluon_2c", "gluon_128"}}


def test_the_committed_table_names_its_command_gpu_versions_and_date_and_holds_only_known_kernels():
    measured = route_table.MEASURED
    assert measured["command"].startswith("python -m benchmarks.route")
    assert re.search(r"sm_\d+", measured["gpu"]) and measured["torch"] and measured["triton"]
    assert re.match(r"\d{4}-\d{2}-\d{2}", measured["date"])
    for field in ("command", "gpu", "triton", "date"):
        assert measured[field] in route_table.__doc__, field       # the header says it too
    for pass_, table in (("fwd", route_table.FORWARD), ("bwd", route_table.BACKWARD)):
        assert table, f"the {pass_} table is empty"
        for (head_dim, causal, length, batch_heads), name in table.items():
            assert head_dim in (64, 128) and causal in (False, True) and length >= 1 and batch_heads >= 1
            assert name in KERNELS[pass_], (pass_, name)
            assert head_dim in candidates(pass_)[name].head_dims, (pass_, head_dim, name)


TABLE = {(64, False, 256, 32): "ws", (64, False, 4096, 32): "triton", (64, False, 256, 256): "triton"}


@pytest.mark.parametrize("shape, wanted", [
    ((4, 8, 300, 64), "ws"),          # nearest length 256
    ((4, 8, 3000, 64), "triton"),     # nearest 4096
    ((4, 8, 1024, 64), "ws"),         # as far from 256 as from 4096 (in log2): the smaller bucket
    ((8, 25, 256, 64), "triton"),     # 200 heads' worth: nearest 256
    ((32, 300, 64), "ws"),            # [B, N, D]: batch x heads is B
])
def test_a_call_takes_the_entry_of_the_nearest_bucket(shape, wanted):
    q = torch.empty(shape)
    assert route.measured_kernel("fwd", q, q, False, TABLE) == wanted


def test_the_bucket_is_chosen_by_the_keys_length_not_the_queries():
    """A short query against a long context (decoding, prefill with a cache) is as long as its keys."""
    q, k = torch.empty(4, 8, 300, 64), torch.empty(4, 8, 3000, 64)
    assert route.measured_kernel("fwd", q, k, False, TABLE) == "triton"
    assert route.measured_kernel("fwd", k, q, False, TABLE) == "ws"


def test_the_nearest_length_decides_before_the_nearest_batch_x_heads():
    table = {(64, False, 256, 256): "ws", (64, False, 4096, 32): "triton"}
    q = torch.empty(4, 8, 300, 64)            # 32 heads' worth, length 300: the 256-length bucket
    assert route.measured_kernel("fwd", q, q, False, table) == "ws"


def test_a_tie_goes_to_the_smaller_bucket_whatever_the_tables_order():
    q = torch.empty(4, 8, 1024, 64)           # 32 heads' worth: as far from 8 as from 128 (in log2)
    heads = {(64, False, 1024, 128): "triton", (64, False, 1024, 8): "ws"}
    assert route.measured_kernel("fwd", q, q, False, heads) == "ws"
    lengths = {(64, False, 4096, 32): "triton", (64, False, 256, 32): "ws"}      # 1024: as far from 256 as 4096
    assert route.measured_kernel("fwd", q, q, False, lengths) == "ws"


def test_each_committed_entry_is_the_winner_of_the_ratios_beside_it():
    """The committed table as the benchmark's winner rule reads its own comments (a tie keeps Triton)."""
    source = Path(route_table.__file__).read_text()
    for name, table in (("FORWARD", route_table.FORWARD), ("BACKWARD", route_table.BACKWARD)):
        block = source.split(f"{name} = {{", 1)[1].split("\n}", 1)[0]
        entries = re.findall(r"\((\d+), (True|False), (\d+), (\d+)\): '(\w+)',\s+# (.*)", block)
        assert len(entries) == len(table) > 0, name
        for d, causal, n, bh, kernel_name, comment in entries:
            ratios = {k: float(v) for k, v in re.findall(r"(\w+) ([\d.]+)", comment)}
            best = winner(ratios)      # or one level with it in the two decimals written (1.34 and 1.34)
            assert kernel_name == best or ratios[kernel_name] == ratios[best], (name, d, causal, n, bh, comment)
            assert table[(int(d), causal == "True", int(n), int(bh))] == kernel_name


def test_a_head_dim_or_mask_the_table_lacks_is_left_to_the_typed_tables():
    q = torch.empty(4, 8, 256, 128)
    assert route.measured_kernel("fwd", q, q, False, TABLE) is None
    assert route.measured_kernel("fwd", torch.empty(4, 8, 256, 64), torch.empty(4, 8, 256, 64), True, TABLE) is None


@pytest.fixture
def hopper(monkeypatch):
    """Every device routes; the Gluon plans record their calls instead of launching. The launch plans
    are cleared before and after: a plan keeps its layout's route (and a recording closure)."""
    calls = []
    PLANS.clear()

    def fwd_plan(q, k, v, causal, variant, knobs, out=None, lse=None):
        return lambda q, k, v, out=None, lse=None: calls.append(("fwd", variant)) or (torch.zeros_like(q),
                                                                                       torch.zeros(q.shape[:-1]))

    def bwd_plan(q, k, v, out, lse, dout, causal, knobs, grads):
        return lambda q, k, v, out, lse, dout, *grads: calls.append(("bwd", "gluon")) or tuple(
            torch.zeros_like(t) for t in (q, k, v))

    monkeypatch.setattr(route, "route_reason", lambda device: None)
    monkeypatch.setattr(route, "backward_route_reason", lambda device: None)
    monkeypatch.setattr(gluon_fwd, "checked_plan", fwd_plan)
    monkeypatch.setattr(gluon_bwd, "checked_plan", bwd_plan)
    yield calls
    PLANS.clear()


@pytest.mark.parametrize("n, routed", [(256, [("fwd", "ws")]), (4096, [("bwd", "gluon")])])
def test_the_default_call_follows_the_measured_table_in_both_passes(hopper, monkeypatch, n, routed):
    """Each pass reads its own table: here they disagree at both lengths."""
    monkeypatch.setattr(route_table, "FORWARD", {(64, True, 256, 2): "ws", (64, True, 4096, 2): "triton"})
    monkeypatch.setattr(route_table, "BACKWARD", {(64, True, 256, 2): "triton", (64, True, 4096, 2): "gluon"})
    q, k, v = (torch.randn(1, 2, n, 64, dtype=torch.float16) for _ in range(3))
    out, lse = kernel.flash_attn_fwd(q, k, v, True)
    kernel.flash_attn_bwd(torch.randn_like(q), q, k, v, out, lse, True)
    assert hopper == routed


def test_the_benchmark_writes_a_table_the_route_reads_back():
    rows = [dict(pass_="fwd", B=4, H=8, N=512, D=64, causal=False, vs_cudnn=dict(triton=0.70, ws=0.64),
                 winner="triton"),
            dict(pass_="bwd", B=16, H=16, N=4096, D=128, causal=True, vs_cudnn=dict(triton=0.8, gluon=1.1),
                 winner="gluon")]
    env = dict(gpu="NVIDIA H200 (sm_90, 132 SMs)", torch="2.11.0", triton="3.6.0", date="2026-12-03 12:00 UTC")
    namespace = {}
    exec(table_source(rows, env, "python -m benchmarks.route --n 512"), namespace)
    assert namespace["FORWARD"] == {(64, False, 512, 32): "triton"}
    assert namespace["BACKWARD"] == {(128, True, 4096, 256): "gluon"}
    assert namespace["MEASURED"]["gpu"] == env["gpu"] and "--n 512" in namespace["__doc__"]


def test_the_winner_is_the_faster_of_ours_and_a_tie_keeps_triton():
    assert winner(dict(triton=0.70, ws=0.80)) == "ws"
    assert winner(dict(triton=0.80, ws=0.805)) == "triton"      # within 1%: noise
    assert winner(dict(triton=0.80, gluon=0.70)) == "triton"
    assert winner(dict(gluon=0.7)) == "gluon" and winner({}) is None


def _user_table(tmp_path, forward: str, backward: str = "{}"):
    path = tmp_path / "my_route.py"
    path.write_text(f'"""mine"""\nMEASURED = {{}}\nFORWARD = {forward}\nBACKWARD = {backward}\n')
    return path


@pytest.mark.parametrize("n, gluon", [(256, True), (4096, False)])
def test_the_default_call_follows_the_users_table_where_the_variable_names_one(hopper, monkeypatch, tmp_path, n,
                                                                                gluon):
    """FA2_TUNER_ROUTE_TABLE: a table regenerated for the user's GPU, read instead of the committed one."""
    monkeypatch.setattr(route_table, "FORWARD", {(64, True, 256, 2): "triton", (64, True, 4096, 2): "ws"})
    monkeypatch.setattr(route_table, "BACKWARD", {(64, True, 256, 2): "triton", (64, True, 4096, 2): "gluon"})
    path = _user_table(tmp_path, "{(64, True, 256, 2): 'ws', (64, True, 4096, 2): 'triton'}",
                       "{(64, True, 256, 2): 'gluon', (64, True, 4096, 2): 'triton'}")
    monkeypatch.setenv(route.ROUTE_TABLE_ENV, str(path))
    q, k, v = (torch.randn(1, 2, n, 64, dtype=torch.float16) for _ in range(3))
    out, lse = kernel.flash_attn_fwd(q, k, v, True)
    kernel.flash_attn_bwd(torch.randn_like(q), q, k, v, out, lse, True)
    assert hopper == ([("fwd", "ws"), ("bwd", "gluon")] if gluon else [])


def test_a_users_table_is_read_again_when_it_changes(monkeypatch, tmp_path):
    path = _user_table(tmp_path, "{(64, False, 512, 32): 'ws'}")
    monkeypatch.setenv(route.ROUTE_TABLE_ENV, str(path))
    q = torch.empty(4, 8, 512, 64)
    assert route.measured_kernel("fwd", q, q, False) == "ws"
    path.write_text('FORWARD = {(64, False, 512, 32): "triton"}\nBACKWARD = {}\n# longer: another size\n')
    assert route.measured_kernel("fwd", q, q, False) == "triton"
    monkeypatch.delenv(route.ROUTE_TABLE_ENV)
    assert route.measured_tables() == (route_table.FORWARD, route_table.BACKWARD)


@pytest.mark.parametrize("text, fragment", [
    (None, "no such file"),
    ("FORWARD = {", "fails to load (SyntaxError"),
    ("BACKWARD = {}\n", "defines no FORWARD dict"),
    ("FORWARD = {(64, False, 512): 'ws'}\nBACKWARD = {}\n", "keys are (head dim, causal, length, batch x heads)"),
    ("FORWARD = {(64, 'no', 512, 32): 'ws'}\nBACKWARD = {}\n", "FORWARD[(64, 'no', 512, 32)]"),
    ("FORWARD = {(64, False, 512, 32): 'gluon'}\nBACKWARD = {}\n",
     "candidates one of triton, triton_64x64, ws, ws_128, ws_64, ws_64x64, ws_64_p2, ws_64x64_p2, ws_128_p1, "
     "ws_64x64_r144, ws_64x64_p3, ws_64x64_p4, ws_p0, pipelined"),
    ("FORWARD = {(128, False, 512, 32): 'ws_64'}\nBACKWARD = {}\n", "a candidate at head dim 64 only"),
    ("FORWARD = {}\nBACKWARD = {(64, False, 512, 32): 'ws'}\n",
     "candidates one of triton, gluon, gluon_1c, gluon_2c, gluon_128"),
])
def test_a_file_that_is_not_a_route_table_is_an_error_naming_it_and_the_variable(monkeypatch, tmp_path, text,
                                                                                   fragment):
    path = tmp_path / "bad_route.py"
    if text is not None:
        path.write_text(text)
    monkeypatch.setenv(route.ROUTE_TABLE_ENV, str(path))
    q = torch.empty(4, 8, 512, 64)
    with pytest.raises(ValueError) as caught:
        route.measured_kernel("fwd", q, q, False)
    assert fragment in str(caught.value) and f"FA2_TUNER_ROUTE_TABLE={path}" in str(caught.value)


def test_the_table_the_benchmark_writes_is_one_the_variable_can_name(monkeypatch, tmp_path):
    rows = [dict(pass_="fwd", B=4, H=8, N=512, D=64, causal=False, vs_cudnn=dict(triton=0.70, ws=0.90), winner="ws"),
            dict(pass_="bwd", B=4, H=8, N=512, D=64, causal=False, vs_cudnn=dict(triton=0.9, gluon=0.8),
                 winner="triton")]
    env = dict(gpu="NVIDIA H100 (sm_90, 132 SMs)", torch="2.11.0", triton="3.6.0", date="2026-12-03 12:00 UTC")
    path = tmp_path / "mine.py"
    path.write_text(table_source(rows, env, f"python -m benchmarks.route --table {path}"))
    monkeypatch.setenv(route.ROUTE_TABLE_ENV, str(path))
    assert route.measured_tables() == ({(64, False, 512, 32): "ws"}, {(64, False, 512, 32): "triton"})

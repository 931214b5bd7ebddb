"""Pins the emitted list's ranking (a runner-up kept within the noise wins nothing), its shared-memory comment
(one figure where every head dim compiled the same) and the budget guard (a config exactly at the limit fits)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from conftest import HAND_SHAPES, hand_rows

from tuner import emit
from tuner.finalists import judge
from tuner.gpus import GpuSpec
from tuner.kernels.triton_fwd import FwdConfig
from tuner.store import Result

S1, S2 = HAND_SHAPES


def test_a_runner_up_kept_within_the_noise_wins_no_shape_and_ranks_after_the_winners():
    """64x64 has the best score across shapes, but only its place as S1's runner-up within the noise;
    the two shape winners come first, by score, then it."""
    verdicts = {S1: judge(S1, {"128x128_w8_s2": [1.00, 1.04, 0.98], "64x64_w4_s2": [1.01, 1.01, 1.01]}),
                S2: judge(S2, {"128x64_w8_s2": [1.0, 1.0, 1.0], "64x64_w4_s2": [2.0, 2.0, 2.0]})}
    assert verdicts[S1].kept == ["128x128_w8_s2", "64x64_w4_s2"] and verdicts[S2].kept == ["128x64_w8_s2"]
    entries = emit.select(hand_rows(1), verdicts, 0, FwdConfig)
    assert [(e.config.key, e.wins) for e in entries] == [("128x128_w8_s2", 1), ("128x64_w8_s2", 1),
                                                         ("64x64_w4_s2", 0)]
    assert entries[2].notes[0].startswith(f"kept for {S1}:")


def test_the_smem_comment_is_one_figure_where_every_head_dim_compiled_the_same():
    rows = [SimpleNamespace(head_dim=64, smem_bytes=24576), SimpleNamespace(head_dim=128, smem_bytes=24576)]
    assert emit.smem_note(rows) == "24576 B"


def test_a_config_compiled_to_exactly_the_shared_memory_limit_fits():
    sm90 = GpuSpec.from_name("sm_90")

    def entry(smem: int) -> emit.Entry:
        row = Result(status="timed", batch=1, heads=2, n_q=128, n_k=128, head_dim=64, dtype="bf16", causal=False,
                     shape=S1, smem_bytes=smem, smem_limit_bytes=232448)
        return emit.Entry(FwdConfig(64, 64, 4, 2), 1.0, [row])

    emit.check_budget([entry(232448)], sm90)
    with pytest.raises(emit.EmitError, match="compiled 232449 B > 232448 B"):
        emit.check_budget([entry(232449)], sm90)

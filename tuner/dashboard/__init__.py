"""``python -m tuner.dashboard``: plotly heatmaps and rooflines from the store, offline HTML.

One heatmap page per (study, shape, target, GPU used): BLOCK_M down, BLOCK_N across,
one panel per (num_warps, num_stages). Colour is TFLOP/s, with buttons for % of SDPA,
GPU ms and host µs per call. Rejected configs are grey cells labelled with the reason
(over budget with the bytes, incorrect, compile error, crashed, ...). Hovering a cell
shows its stored fields through one template over ``customdata``, which keeps a page
small. One roofline page per study places each timed config's TFLOP/s against the
compute and bandwidth ceilings of the GPU that ran it (and each profiled kernel at its
measured DRAM bytes). One profile page per profiled shape (:mod:`tuner.profile`). ``index.html`` links them all.
Pages load ``plotly.min.js`` from beside them (written there from the installed plotly),
so they open without a network; until plotly has loaded a page shows a note saying it needs it. A
budget-only run's pages (no GPU timed a config) colour the configs that fit by the shared memory
they use against the target's limit, registers or spills (:mod:`tuner.dashboard._budget_map`).
A sweep keeps the pages already written where nothing they are drawn from changed (a warm re-run:
:mod:`tuner.dashboard._stamp`); ``python -m tuner.dashboard`` always draws them again.
"""

from tuner.dashboard._budget_map import BUDGET_METRICS, CELL_PX, budget_heatmap
from tuner.dashboard._build import build_all
from tuner.dashboard._cli import main
from tuner.dashboard._heatmap import MAX_VARIANTS, drawn_variants, heatmap, page_name
from tuner.dashboard._pages import store_name, with_plotly_note
from tuner.dashboard._roofline import intensity, profiled_point, roof_tflops, roofline
from tuner.dashboard._stamp import STAMP

__all__ = ["BUDGET_METRICS", "CELL_PX", "MAX_VARIANTS", "STAMP", "budget_heatmap", "build_all", "drawn_variants",
           "heatmap", "intensity", "main", "page_name", "profiled_point", "roof_tflops", "roofline", "store_name",
           "with_plotly_note"]

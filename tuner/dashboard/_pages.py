"""Writing every page of a store, and the index that links them."""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path

from tuner.dashboard._budget_map import FITS, budget_heatmap, is_budget_only
from tuner.dashboard._heatmap import _slug, heatmap, page_name
from tuner.dashboard._profile_page import profile_page, profile_page_name
from tuner.dashboard._roofline import roofline
from tuner.dashboard._stamp import STAMP, digest, kept_pages, write_stamp
from tuner.status import Status
from tuner.store import DEFAULT_OUT, Profile, Result, Store
from tuner.winners import verdicts_of

DEFAULT_DIR = Path(DEFAULT_OUT) / "dashboards"


# Shown until plotly.js has loaded (a page without it is blank, with no hint why); the script at the
# end of the body removes it once window.Plotly exists. {where}: where the page loads plotly from.
PLOTLY_NOTE = ('<div id="fa2-plotly-note" style="font:14px sans-serif;margin:12px;padding:8px 12px;'
               'background:#fff3cd;border:1px solid #e0c36b;max-width:60em">This page draws its charts with '
               'plotly.js, {where}. If this note stays, plotly did not load and the charts stay blank.</div>\n'
               '<noscript><p style="font:14px sans-serif;margin:12px">This page draws its charts with JavaScript '
               '(plotly.js); turn JavaScript on to see them.</p></noscript>\n')
PLOTLY_WHERE = {
    "cdn": "loaded from plotly's CDN (cdn.plot.ly), so it needs a network; for pages that open offline, rebuild "
           "them with python -m tuner.dashboard, which writes plotly.min.js beside them",
    "directory": "loaded from plotly.min.js in this page's folder (keep the two together)",
}
HIDE_NOTE = ("<script>if (window.Plotly) { var note = document.getElementById('fa2-plotly-note'); "
             "if (note) note.remove(); }</script>\n")


def with_plotly_note(page: str, plotlyjs: str) -> str:
    """``page`` (plotly's full HTML) with :data:`PLOTLY_NOTE` after ``<body>`` and the script that hides it
    before ``</body>``; a page that has the note already is returned as it is."""
    if 'id="fa2-plotly-note"' in page:
        return page
    note = PLOTLY_NOTE.format(where=PLOTLY_WHERE[plotlyjs])
    head, body = page.split("<body>", 1)
    body, tail = body.rsplit("</body>", 1)
    return f"{head}<body>\n{note}{body}{HIDE_NOTE}</body>{tail}"


def _write(fig, path: Path, plotlyjs: str) -> None:
    fig.write_html(path, include_plotlyjs=plotlyjs, full_html=True)      # "directory" writes plotly.min.js too
    path.write_text(with_plotly_note(path.read_text(encoding="utf-8"), plotlyjs), encoding="utf-8")


def build_all(db: Store, directory: Path = DEFAULT_DIR, studies: list[str] | None = None,
              plotlyjs: str = "directory", shapes: list[str] | None = None, reuse: bool = False) -> list[Path]:
    """Every heatmap and roofline in the store (or of ``studies``), plus ``index.html``.

    Args:
        plotlyjs: "directory" (plotly.min.js written beside the pages: offline) or "cdn".
        shapes: heatmaps of these shape labels only (rooflines keep every shape).
        reuse: keep the pages already in ``directory`` where they were drawn from the same store
            contents and options (:mod:`tuner.dashboard._stamp`); else draw every one.

    Returns:
        The pages written (or kept).
    """
    rows = [r for r in db.results() if not studies or r.study in studies]
    groups: dict[tuple, list[Result]] = defaultdict(list)
    for row in rows:
        groups[(row.study, row.target, row.gpu, row.shape)].append(row)
    commands = {run.id: run.command for run in db.runs()}
    drawn_profiles = [p for p in db.profiles() if not studies or p.study in studies]
    finalists = [f for key in sorted({k[:3] for k in groups}) for f in db.finalists(*key)]
    wanted = digest(rows, finalists, drawn_profiles, commands, (db.url, studies, plotlyjs, shapes))
    kept = kept_pages(directory, wanted, plotlyjs) if reuse else None
    if kept is not None:
        return kept
    directory.mkdir(parents=True, exist_ok=True)
    (directory / STAMP).unlink(missing_ok=True)       # a build cut short leaves no stamp to trust
    written = _draw(db, directory, rows, groups, commands, drawn_profiles, plotlyjs, shapes)
    write_stamp(directory, wanted, written)
    return written


def _draw(db: Store, directory: Path, rows: list[Result], groups: dict, commands: dict[int, str],
          drawn_profiles: list[Profile], plotlyjs: str, shapes: list[str] | None) -> list[Path]:
    """Draw and write every page of :func:`build_all`, the index last."""
    written = []
    index: dict[str, list[tuple[str, str]]] = defaultdict(list)
    verdicts: dict[tuple, dict] = {}
    for (study, target, gpu, shape), group in sorted(groups.items()):
        if shapes and shape not in shapes:
            continue
        if (study, target, gpu) not in verdicts:
            verdicts[(study, target, gpu)] = verdicts_of(db, study, target, gpu)
        name = page_name(study, shape, target, gpu)
        figure, label = _heatmap_page(group, verdicts[(study, target, gpu)].get(shape), commands)
        _write(figure, directory / name, plotlyjs)
        written.append(directory / name)
        index[study].append((name, label))
    profiles: dict[tuple, list[Profile]] = defaultdict(list)
    for profile in drawn_profiles:
        profiles[(profile.study, profile.target, profile.gpu)].append(profile)
    written += _profile_pages(directory, profiles, index, plotlyjs, shapes)
    by_study: dict[tuple, list[Result]] = defaultdict(list)
    for row in rows:
        if row.status == Status.TIMED:
            by_study[(row.study, row.target, row.gpu)].append(row)
    for (study, target, gpu), group in sorted(by_study.items()):
        name = f"{_slug(study)}__{target}__{_slug(gpu)}__roofline.html"
        _write(roofline(group, profiles.get((study, target, gpu), [])), directory / name, plotlyjs)
        written.append(directory / name)
        index[study].insert(0, (name, f"roofline · target {target} · {gpu}"))
    written.append(_index(directory, index, db.url))
    return written


def _heatmap_page(group: list[Result], verdict, commands: dict[int, str]) -> tuple:
    """(the figure, its label in the index) of one group's heatmap: a budget-only one where no GPU timed it
    (its title naming the command of the last run that stored its rows, to run on the GPU)."""
    first = group[0]
    if is_budget_only(group):
        fits = sum(1 for r in group if r.status in FITS)
        command = commands.get(max(r.run_id or 0 for r in group), "")
        label = f"{first.shape} · target {first.target} · budget only: {fits} of {len(group)} fit"
        return budget_heatmap(group, command), label
    return heatmap(group, verdict), f"{first.shape} · target {first.target} · {first.gpu}"


def _profile_pages(directory: Path, profiles: dict[tuple, list[Profile]], index: dict, plotlyjs: str,
                   shapes: list[str] | None) -> list[Path]:
    """One profile page per (study, target, GPU, shape) with profiles, listed in the index."""
    written = []
    for (study, target, gpu), group in sorted(profiles.items()):
        by_shape: dict[str, list[Profile]] = defaultdict(list)
        for profile in group:
            by_shape[profile.shape].append(profile)
        for shape, of_shape in sorted(by_shape.items()):
            if shapes and shape not in shapes:
                continue
            name = profile_page_name(_slug(study), target, _slug(gpu), _slug(shape))
            _write(profile_page(of_shape), directory / name, plotlyjs)
            written.append(directory / name)
            index[study].append((name, f"profile · {shape} · target {target} · {gpu}"))
    return written


def store_name(url: str) -> str:
    """The store as the index names it, with nothing of the machine that made it: a SQLite file by its
    name alone (not its folder), another database by its kind and name (no host, user or password)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return f"the SQLite store {Path(parsed.database or '').name}"
    return f"a {parsed.get_backend_name()} store ({parsed.database or 'default database'})"


def _index(directory: Path, index: dict[str, list[tuple[str, str]]], url: str) -> Path:
    items = "\n".join(
        f"<h2>{html.escape(study)}</h2>\n<ul>\n" + "\n".join(
            f'  <li><a href="{html.escape(name)}">{html.escape(label)}</a></li>' for name, label in pages) + "\n</ul>"
        for study, pages in sorted(index.items()))
    path = directory / "index.html"
    path.write_text(
        "<!doctype html>\n<html><head><meta charset='utf-8'><title>fa2-tuner dashboards</title></head>\n<body>\n"
        f"<h1>fa2-tuner dashboards</h1>\n<p>From {html.escape(store_name(url))}. Heatmaps: BLOCK_M down, BLOCK_N "
        "across, one panel per warps and stages; grey cells were rejected, labelled with the reason. Budget-only "
        "pages (no GPU timed the configs) colour those that fit by shared memory, registers or spills. Profile pages: "
        "Nsight Compute counters of each shape's best configs beside SDPA (python -m tuner.profile).</p>\n"
        f"{items}\n</body></html>\n", encoding="utf-8")          # its labels hold a middle dot, whatever the locale
    return path

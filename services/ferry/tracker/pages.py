"""HTML of the tracker's overview and files pages (pure functions of the JSON bodies the views
also serve). Every text that comes from a file or an event goes through :func:`esc`.

Each page is a ``<main id='live'>`` region that ``static/ferry.js`` re-fetches (``?partial=1``)
every ``data-refresh`` seconds and swaps in place, plus, on the overview, two uPlot charts fed
from ``/charts``. Figures carry ``data-stage``/``data-fig`` (overview) or ``data-col`` (files)
attributes so a test can read them back.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from ferry.core.services import STAGES
from ferry.core.timeline import CLOSED, STEPS, closed_text
from ferry.tracker.query import FileQuery
from ferry.tracker.state import Entry

NAV = (
    ("/", "Overview"),
    ("/ui/files", "Files"),
    ("/ui/files?state=stuck", "Stuck"),
    ("/ui/files?state=quarantined", "Quarantined"),
    ("/table", "Table"),
)


def esc(value: object) -> str:
    """``value`` as HTML text or attribute content (``<``, ``>``, ``&``, quotes escaped);
    ``None`` → empty."""
    return "" if value is None else html.escape(str(value), quote=True)


def fmt_ms(ms: int | None) -> str:
    """Epoch ms as ``YYYY-MM-DD HH:MM:SS`` UTC; ``None`` → empty."""
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def fmt_s(seconds: float | None) -> str:
    """A duration, ``1h 02m``, ``3m 05s`` or ``4.2s``."""
    if seconds is None:
        return ""
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m {sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m"


def layout(title: str, prefix: str, body: str, refresh_s: float, extra_head: str = "") -> str:
    """A whole page: head (local CSS/JS only), navigation, and ``body`` inside ``main#live``."""
    nav = "".join(f"<a href='{esc(h)}'>{esc(t)}</a>" for h, t in NAV)
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{esc(title)} — Ferry tracker ({esc(prefix)})</title>"
        "<link rel='stylesheet' href='/static/ferry.css'>"
        f"{extra_head}</head><body data-refresh='{refresh_s:g}'>"
        f"<header><b>Ferry tracker</b> <code>{esc(prefix)}</code><nav>{nav}</nav>"
        "<span id='updated'></span></header>"
        f"<main id='live'>{body}</main>"
        "<script src='/static/ferry.js'></script></body></html>"
    )


def _fig(stage: str, name: str, value: object, label: str, href: str | None = None) -> str:
    shown = "—" if value is None else esc(value)
    inner = f"<b class='fig' data-stage='{esc(stage)}' data-fig='{esc(name)}'>{shown}</b>"
    if href and value:
        inner = f"<a href='{esc(href)}'>{inner}</a>"
    return f"<div class='kv'>{inner}<span>{esc(label)}</span></div>"


def _files_link(**params: str | None) -> str:
    return "/ui/files?" + urlencode({k: v for k, v in params.items() if v})


def conditions_alert(held: Sequence[Any]) -> str:
    """The overview's notice of the cluster conditions holding files now (case C22: a quota
    exceeded, safe mode, no space), each with its stage, place, since when and files held
    (:class:`ferry.core.runtime.conditions.Held`); empty when none holds."""
    if not held:
        return ""
    items = "".join(
        f"<li data-condition='{esc(h.service)}:{esc(h.reason)}'><b>{esc(h.service)}</b> holds "
        f"<b>{h.files}</b> file(s): <b>{esc(h.reason)}</b> at {esc(h.place)} since "
        f"{esc(fmt_ms(int(h.since * 1000)))}</li>"
        for h in held
    )
    return (
        "<section class='alert' id='cluster-conditions'><h2>Held by a cluster condition</h2>"
        f"<ul>{items}</ul><p>Not quarantined: each stage retries on its own and goes on once "
        "the condition clears (retry.condition_window_s is the ceiling).</p></section>"
    )


def definitions_alert(
    entries: Sequence[Any], waiting: Mapping[tuple[str, str], int] | None = None
) -> str:
    """The overview's notice of the dataset definitions that are not run (invalid), each with
    its error, and of the files parked in the waiting room ((dataset, stage) → files: e.g. a
    definition transform cannot compile); empty when there is neither."""
    bad = [d for d in entries if not d.valid]
    waiting = dict(waiting or {})
    if not bad and not waiting:
        return ""
    items = "".join(
        f"<li data-dataset='{esc(d.name)}'>dataset <b>{esc(d.name)}</b> ({esc(d.path.name)}): "
        f"{esc(d.error)}</li>"
        for d in bad
    )
    items += "".join(
        f"<li data-waiting='{esc(ds)}:{esc(stage)}'><b>{n}</b> file(s) of dataset "
        f"<b>{esc(ds)}</b> wait in {esc(stage)} for a definition it can run (its log says why)"
        "</li>"
        for (ds, stage), n in sorted(waiting.items())
    )
    return (
        "<section class='alert' id='invalid-definitions'><h2>Dataset definitions not run</h2>"
        f"<ul>{items}</ul><p>Their files wait (on the NAS, or in the waiting topic) until the "
        "definition is fixed: <code>ferry datasets check</code>. Every other dataset runs.</p>"
        "</section>"
    )


def overview_body(ov: Mapping[str, Any], summary: Mapping[str, Any], dataset: str | None) -> str:
    """The overview region: dataset tabs, the pipeline (NAS → stages → Hive) with each stage's
    figures for ``dataset`` (``None``: all), and the state counts."""
    key = dataset or "*"
    names = [d for d in ov["datasets"] if d != "*"]
    tabs = "".join(
        f"<a class='tab{' on' if (d or '*') == key else ''}' href='/?{urlencode({'dataset': d})}'>"
        f"{esc(d)}</a>"
        if d
        else f"<a class='tab{' on' if key == '*' else ''}' href='/'>all</a>"
        for d in [None, *names]
    )
    stages = ov["datasets"].get(key) or {}
    nodes = ["<div class='node end'><h3>NAS</h3><span>source files</span></div>"]
    for s in STAGES:
        v = stages.get(s) or {}
        lag = ov["lag"].get(s) or {}
        if s != "extract":
            nodes.append(
                "<div class='hop'>"
                + _fig(
                    s,
                    "waiting",
                    v.get("waiting"),
                    "waiting",
                    _files_link(stage=s, dataset=dataset, state=None),
                )
                + "<span class='arrow'>→</span></div>"
            )
        else:
            nodes.append("<div class='hop'><span class='arrow'>→</span></div>")
        stuck = v.get("stuck", 0)
        quarantined = v.get("quarantined", 0)
        cls = " bad" if quarantined else (" warn" if stuck else "")
        nodes.append(
            f"<div class='node{cls}' data-node='{esc(s)}'><h3>{esc(s)}</h3>"
            + _fig(s, "files_per_min", v.get("files_per_min"), "files/min")
            + _fig(s, "mb_per_min", v.get("mb_per_min"), "MB/min")
            + _fig(s, "lag", lag.get("lag"), f"lag {lag.get('group') or ''}".strip())
            + _fig(s, "stuck", stuck, "stuck", _files_link(state="stuck", stage=s, dataset=dataset))
            + _fig(
                s,
                "quarantined",
                quarantined,
                "quarantined",
                _files_link(state="quarantined", stage=s, dataset=dataset),
            )
            + _fig(s, "done", v.get("done"), "done")
            + "</div>"
        )
    loaded = (stages.get("load") or {}).get("done", 0)
    nodes.append("<div class='hop'><span class='arrow'>→</span></div>")
    nodes.append(
        "<div class='node end'><h3>Hive</h3>" + _fig("hive", "loaded", loaded, "loaded") + "</div>"
    )
    states = "".join(
        f"<a href='{esc(_files_link(state=s))}'><b data-state='{esc(s)}'>{esc(n)}</b> {esc(s)}</a>"
        for s, n in summary["states"].items()
    )
    stuck_total = sum(summary["stuck"].values())
    return (
        f"<nav class='tabs'>{tabs}</nav>"
        f"<section class='pipeline'>{''.join(nodes)}</section>"
        f"<p class='states'><b id='files-total'>{esc(summary['files'])}</b> files: {states} "
        f"<a href='/ui/files?state=stuck'><b id='stuck-total'>{stuck_total}</b> stuck</a> "
        f"<span class='muted'>rates over the last {esc(ov['rate_window_min'])} min</span></p>"
    )


def overview_page(body: str, prefix: str, refresh_s: float, dataset: str | None) -> str:
    charts = (
        f"<section class='charts' data-dataset='{esc(dataset or '')}'>"
        "<div><h4>Files/min per stage, last hour</h4><div id='chart-rate'></div></div>"
        "<div><h4>NAS → Hive latency p50/p95 (s), last hour</h4>"
        "<div id='chart-latency'></div></div></section>"
    )
    head = (
        "<link rel='stylesheet' href='/static/uPlot.min.css'>"
        "<script src='/static/uPlot.iife.min.js'></script>"
    )
    return layout("Overview", prefix, body, refresh_s, head).replace(
        "<script src='/static/ferry.js'>", charts + "<script src='/static/ferry.js'>"
    )


def _select(name: str, value: str | None, options: Sequence[str]) -> str:
    opts = "".join(
        f"<option value='{esc(o)}'{' selected' if o == (value or '') else ''}>{esc(o or 'any')}"
        "</option>"
        for o in ["", *options]
    )
    return f"<label>{esc(name)} <select name='{esc(name)}'>{opts}</select></label>"


def files_body(
    query: FileQuery,
    raw: Mapping[str, str],
    count: int,
    page: Sequence[Entry],
    now_ms: int,
    sla_s: Mapping[str, float],
    datasets: Sequence[str],
    closures: Mapping[str, tuple[str, str | None]] | None = None,
) -> str:
    """The files region: the filter form, one row per file of ``page`` (linking to its page) and
    the pager; ``raw`` is the request's query string (kept by the pager links); ``closures``:
    file id → quarantine state and detail of the failed ones (:meth:`TrackerState.closure`)."""
    form = (
        "<form class='filters' method='get' action='/ui/files'>"
        + _select("state", raw.get("state"), [*STEPS, "stuck", "quarantined", *CLOSED])
        + _select("dataset", query.dataset, datasets)
        + _select("stage", query.stage, STAGES)
        + f"<label>reason <input name='reason' value='{esc(query.reason)}' size='12'></label>"
        + f"<label>since <input name='since' value='{esc(raw.get('since'))}' size='16' "
        "placeholder='2024-03-01T08:00'></label>"
        + f"<label>until <input name='until' value='{esc(raw.get('until'))}' size='16'></label>"
        + f"<label>search <input name='q' value='{esc(query.q)}' size='24' "
        "placeholder='file id or NAS name prefix'></label>"
        "<button>Filter</button> <a href='/ui/files'>clear</a></form>"
    )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "file id",
            "dataset",
            "NAS file",
            "state",
            "stage",
            "since",
            "waiting",
            "reason",
            "quarantine",
        )
    )
    rows = []
    for e in page:
        stuck = e.stuck(now_ms, sla_s)
        waited = fmt_s((now_ms - e.entered_ms) / 1000) if e.waiting_in else ""
        cls = "failed" if e.state == "failed" else ("stuck" if stuck else e.state)
        rows.append(
            f"<tr class='row {esc(cls)}' data-file='{esc(e.file_id)}'>"
            f"<td data-col='file_id'><a href='/ui/files/{esc(e.file_id)}'>{esc(e.file_id)}</a></td>"
            f"<td data-col='dataset'>{esc(e.dataset)}</td>"
            f"<td data-col='source_path'>{esc(e.source_path)}</td>"
            f"<td data-col='state'>{esc(e.state)}{' stuck' if stuck else ''}</td>"
            f"<td data-col='stage'>{esc(e.stage)}</td>"
            f"<td data-col='entered'>{fmt_ms(e.entered_ms)}</td>"
            f"<td data-col='waiting'>{waited}</td><td data-col='reason'>{esc(e.reason)}</td>"
            f"<td data-col='quarantine'>{esc(closed_text((closures or {}).get(e.file_id)))}</td>"
            "</tr>"
        )
    first = query.offset + 1 if page else 0
    last = query.offset + len(page)
    keep = {k: v for k, v in raw.items() if k not in ("offset", "partial") and v}
    links = []
    if query.offset > 0:
        prev = {**keep, "offset": str(max(0, query.offset - query.limit))}
        links.append(f"<a rel='prev' href='/ui/files?{esc(urlencode(prev))}'>← previous</a>")
    if last < count:
        nxt = {**keep, "offset": str(last)}
        links.append(f"<a rel='next' href='/ui/files?{esc(urlencode(nxt))}'>next →</a>")
    pager = (
        f"<p class='pager'><span id='range'>{first}–{last}</span> of <b id='count'>{count}</b> "
        f"{' '.join(links)}</p>"
    )
    return (
        form + pager + f"<table id='files'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )

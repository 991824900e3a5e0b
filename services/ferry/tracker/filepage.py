"""HTML of one file's page (timeline bars, facts, failures, replay/release commands) and of the
plain ``/table`` listing. Every text from a file or event goes through :func:`esc`.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from ferry.core.services import CONSUMING_STAGES, SERVICES
from ferry.core.timeline import STEPS, Timeline, closed_text
from ferry.lineage.naming import Names
from ferry.tracker.lineage import lineage_section
from ferry.tracker.pages import esc, fmt_ms, fmt_s
from ferry.tracker.query import summary
from ferry.tracker.record import detail

#: Stage → (step it starts from, step it produces); extract starts at the NAS time.
SPANS: tuple[tuple[str, str | None, str], ...] = tuple(
    (s.name, s.input.TOPIC if s.input else None, s.output.TOPIC)
    for s in SERVICES
    if s.output is not None
)
#: Stages ``ferry replay`` can move.
REPLAYABLE = CONSUMING_STAGES


def bars(record: Mapping[str, Any], now_ms: int) -> list[dict[str, Any]]:
    """One bar per stage the file entered: ``{"stage", "start_ms", "end_ms" (None: still in
    it), "wait_ms", "work_ms"}``. Extract's wait is NAS mtime → manifest created_at and its work
    created_at → extracted; the other stages emit no "started" event, so their whole span is work
    (it includes the time queued in Kafka)."""
    steps = record.get("steps") or {}
    x = detail(record)
    out = []
    for stage, start_step, end_step in SPANS:
        end = steps[end_step]["first_ms"] if end_step in steps else None
        if start_step is None:
            start = x["mtime_ms"] or x["created_ms"]
            split = x["created_ms"]
        else:
            start = steps[start_step]["first_ms"] if start_step in steps else None
            split = start
        if start is None or (end is None and record.get("waiting_in") != stage):
            continue
        stop = end if end is not None else now_ms
        split = min(max(split if split is not None else start, start), stop)
        out.append(
            {
                "stage": stage,
                "start_ms": start,
                "end_ms": end,
                "wait_ms": split - start,
                "work_ms": stop - split,
            }
        )
    return out


def commands(record: Mapping[str, Any]) -> list[str]:
    """The exact commands an operator runs for this file: replay the stage it failed in, waits in
    or (loaded) load again, and release it from quarantine when failed."""
    fid = record["file_id"]
    failure = record.get("failure") or {}
    state = record.get("state")
    stage = failure.get("stage") if state == "failed" else record.get("waiting_in")
    if state == "loaded":
        stage = "load"
    out = [f"ferry replay {stage} --file {fid}"] if stage in REPLAYABLE else []
    if state == "failed":
        out.append(f"ferry quarantine release {fid}")
    out.append(f"ferry status {fid}")
    return out


def _bars_svg(items: list[dict[str, Any]], failures: list[dict[str, Any]], now_ms: int) -> str:
    if not items:
        return "<p class='muted'>no stage timings yet</p>"
    t0 = min(b["start_ms"] for b in items)
    t1 = max([b["end_ms"] or now_ms for b in items] + [f["at_ms"] for f in failures] + [t0 + 1])
    span = t1 - t0

    def pct(ms: int) -> float:
        return round(100 * (ms - t0) / span, 3)

    rows = []
    for b in items:
        left, mid = pct(b["start_ms"]), pct(b["start_ms"] + b["wait_ms"])
        right = pct(b["end_ms"] or now_ms)
        open_ = " open" if b["end_ms"] is None else ""
        rows.append(
            f"<div class='bar-row' data-stage='{esc(b['stage'])}'><span class='lbl'>"
            f"{esc(b['stage'])}</span><div class='track'>"
            f"<i class='wait' style='left:{left}%;width:{mid - left}%'></i>"
            f"<i class='work{open_}' style='left:{mid}%;width:{max(right - mid, 0.3)}%'></i>"
            f"</div><span class='dur' data-wait-ms='{b['wait_ms']}' data-work-ms='{b['work_ms']}'>"
            f"{'wait ' + fmt_s(b['wait_ms'] / 1000) + ' · ' if b['wait_ms'] else ''}"
            f"{fmt_s(b['work_ms'] / 1000)}{' so far' if open_ else ''}</span></div>"
        )
    marks = "".join(
        f"<i class='fail' style='left:{pct(f['at_ms'])}%' title='{esc(f['reason'])}'></i>"
        for f in failures
    )
    return (
        f"<div class='bars'>{''.join(rows)}<div class='bar-row'><span class='lbl'>failures</span>"
        f"<div class='track'>{marks}</div><span class='dur'>{fmt_ms(t0)} → {fmt_ms(t1)}</span>"
        "</div></div>"
    )


def file_body(
    record: Mapping[str, Any],
    stuck: bool,
    now_ms: int,
    closure: tuple[str, str | None] | None = None,
    names: Names | None = None,
) -> str:
    """The file page's region: facts, timeline bars, the lineage chain (with ``names``: the
    deployment's OpenLineage names), failures and commands; ``closure`` is a failed file's
    quarantine state (:meth:`TrackerState.closure`)."""
    x = detail(record)
    rows = record.get("rows") or {}
    facts = [
        ("state", f"{record.get('state') or ''}{' stuck' if stuck else ''}"),
        ("quarantine", closed_text(closure)),
        ("dataset", record.get("dataset")),
        ("NAS file", record.get("source_path")),
        ("size (bytes)", x["size_bytes"]),
        ("sha256", x["sha256"]),
        ("NAS mtime", fmt_ms(x["mtime_ms"])),
        ("seen by extract", fmt_ms(x["created_ms"])),
        ("attempts", record.get("attempts")),
        ("rows in", rows.get("rows_in")),
        ("rows out", rows.get("rows_out")),
        ("rows rejected", rows.get("rows_rejected")),
        ("table", record.get("table")),
    ]
    facts += [(f"URI {role}", uri) for role, uri in sorted(x["uris"].items())]
    dl = "".join(
        f"<tr><th>{esc(k)}</th><td data-fact='{esc(k)}'>{esc(v)}</td></tr>" for k, v in facts
    )
    steps = record.get("steps") or {}
    step_rows = "".join(
        f"<tr><td>{esc(s)}</td><td>{fmt_ms(steps[s]['first_ms'])}</td>"
        f"<td>{fmt_ms(steps[s]['last_ms'])}</td><td>{esc(steps[s]['events'])}</td></tr>"
        for s in STEPS
        if s in steps
    )
    failures = x["failures"]
    fail_rows = "".join(
        f"<tr class='failure'><td>{fmt_ms(f['at_ms'])}</td><td>{esc(f['stage'])}</td>"
        f"<td data-col='reason'>{esc(f['reason'])}</td><td>{esc(f['attempt'])}</td>"
        f"<td data-col='error'>{esc(f['error'])}</td></tr>"
        for f in reversed(failures)
    )
    cmds = "".join(f"<pre class='cmd'>{esc(c)}</pre>" for c in commands(record))
    return (
        f"<h2 id='file-id'>{esc(record['file_id'])}</h2>"
        f"<section><h3>Timeline</h3>{_bars_svg(bars(record, now_ms), failures, now_ms)}"
        "<p class='muted'>bars: light = waiting (NAS → extract), dark = in the stage; "
        "red marks: failures</p></section>"
        f"<section class='cols'><div><h3>File</h3><table class='facts'>{dl}</table></div>"
        f"<div><h3>Events</h3><table><tr><th>step</th><th>first</th><th>last</th><th>events</th>"
        f"</tr>{step_rows}</table></div></section>"
        f"{lineage_section(record, names) if names is not None else ''}"
        f"<section><h3>Failures ({len(failures)})</h3><table id='failures'><tr><th>at</th>"
        f"<th>stage</th><th>reason</th><th>attempt</th><th>error</th></tr>{fail_rows}</table>"
        f"</section><section><h3>Commands</h3>{cmds}</section>"
    )


def render_status_page(
    timelines: list[Timeline], now_ms: int, sla_s: dict[str, float], prefix: str
) -> str:
    """The ``/table`` page: a summary line and one row per file (newest first) with each step's
    time."""
    rows = []
    for tl in sorted(timelines, key=lambda t: -(t.entered_ms() or 0)):
        cells = "".join(
            f"<td class='step'>{fmt_ms(tl.steps[s].first_ms) if s in tl.steps else ''}</td>"
            for s in STEPS
        )
        stuck = " stuck" if tl.stuck(now_ms, sla_s) else ""
        reason = tl.failure.reason if tl.failure else ""
        rows.append(
            f"<tr class='file{stuck}' id='f-{html.escape(tl.file_id)}'>"
            f"<td class='file-id'>{html.escape(tl.file_id)}</td>"
            f"<td>{html.escape(tl.dataset or '')}</td>"
            f"<td class='source'>{html.escape(tl.source_path or '')}</td>"
            f"<td class='state'>{html.escape(tl.state or '')}{stuck}</td>{cells}"
            f"<td>{html.escape(reason)}</td></tr>"
        )
    s = summary(timelines, now_ms, sla_s)
    counts = ", ".join(f"{k}: {v}" for k, v in s["states"].items())
    head = "".join(
        f"<th>{h}</th>" for h in ("file id", "dataset", "NAS file", "state", *STEPS, "failure")
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>Ferry tracker ({html.escape(prefix)})</title>"
        "<style>body{font-family:sans-serif}td,th{padding:2px 8px;border-bottom:1px solid #ddd}"
        "tr.stuck{background:#fdd}</style></head><body>"
        f"<h1>Ferry tracker — {html.escape(prefix)}</h1>"
        f"<p id='summary'>{s['files']} file(s) — {html.escape(counts)}; "
        f"stuck: {sum(s['stuck'].values())}</p>"
        f"<table id='files'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        "</body></html>"
    )

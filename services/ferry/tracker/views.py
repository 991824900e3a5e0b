"""The tracker's HTTP endpoints (faust web, aiohttp). JSON first; the HTML pages render the same
bodies (``?partial=1`` answers only the page's live region, for ``static/ferry.js``).

============================ =====================================================================
``GET /files/{file_id}``     the file's timeline (JSON; 404 when unknown; ``waiting`` when it
                             waits for its definition); ``?detail=1`` adds
                             ``detail`` (sha256, size, URIs, failures), ``bars`` and ``commands``
``GET /files?…``             timelines: ``state`` (a step, ``stuck``, ``quarantined``), ``dataset``,
                             ``stage``, ``reason``, ``since``/``until``, ``q``, ``offset``,
                             ``limit`` (default 1000), ``sort`` (``file_id`` default, ``attention``)
``GET /lookup?name=``        files by NAS name: its exact path, else a prefix of the path or of the
                             base name; newest first (``ferry status NAME``)
``GET /stuck``               files waiting in a stage longer than its SLA
``GET /summary``             files per state, stuck per stage, quarantine entries per state (open,
                             dismissed, superseded), files waiting for a definition per dataset
                             and stage, bad records (``ferry status``)
``GET /overview``            per dataset per stage figures, lag per group, and the summary
``GET /charts?dataset=``     last hour: files/min per stage, NAS → Hive latency p50/p95
``GET /metrics``             Prometheus text format
``GET /``                    overview page; ``/ui/files`` files page; ``/ui/files/{id}`` file page
``GET /table``               every retained file in one plain table (newest first)
``GET /static/{name}``       the pages' CSS/JS (uPlot vendored; no CDN)
                             (all but /static answer 503 until the tables are recovered)
============================ =====================================================================
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import faust
from faust.web import Request, Response, View
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ferry.core.services import STAGES
from ferry.core.timeline import Timeline
from ferry.lineage.naming import Names
from ferry.tracker import filepage, pages
from ferry.tracker.health import Liveness, evaluate
from ferry.tracker.query import FileQuery, QueryError, charts, overview, select
from ferry.tracker.record import detail, parked, waiting
from ferry.tracker.state import TrackerState

STATIC_TYPES = {".js": "application/javascript", ".css": "text/css", ".txt": "text/plain"}


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class TrackerContext:
    """What the views read: the table, the index, settings, metrics and the last lag snapshot
    ((group, topic) → records behind)."""

    files: Any
    pruned: Any
    state: TrackerState
    sla: dict[str, float]
    prefix: str
    groups: dict[str, str]
    refresh_s: float
    metrics: Any
    bad_records: Callable[[], int]
    lags: dict[tuple[str, str], int] = field(default_factory=dict)
    liveness: Liveness = field(default_factory=lambda: Liveness(started_ms=now_ms()))
    health_stall_s: float = 120.0
    health_broker_s: float = 60.0
    #: the deployment's OpenLineage names (the file page's lineage chain); None: no chain
    names: Names | None = None
    #: the dataset definitions (:class:`ferry.datasets.reload.Definitions`), or None
    definitions: Any = None
    #: file id → (dataset, stage) of the files parked in the waiting room
    parked: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: the cluster conditions holding files now (:class:`ferry.core.runtime.conditions.Held`)
    conditions: list[Any] = field(default_factory=list)

    def waiting_files(self) -> dict[tuple[str, str], int]:
        """(dataset, stage) → files waiting there for a valid definition."""
        out: dict[tuple[str, str], int] = {}
        for where in self.parked.values():
            out[where] = out.get(where, 0) + 1
        return out

    def definition_entries(self) -> list[Any]:
        """Every definition file now (reloaded if the directory changed)."""
        if self.definitions is None:
            return []
        self.definitions.refresh()
        return list(self.definitions.current().entries)

    def rebuild(self) -> None:
        """Index every record of the store; called once the tables are recovered (until then
        every endpoint but ``/static`` answers 503: the on-disk store is readable before its
        changelog tail is applied, and pages must not mix the two)."""
        records = list(self.files.values())
        self.state.load(records, dict(self.pruned.items()))
        self.parked = {r["file_id"]: w for r in records if r and (w := parked(r)) is not None}

    def ready(self) -> TrackerState:
        return self.state

    def record(self, file_id: str) -> dict[str, Any] | None:
        raw = self.files.get(file_id)
        return dict(raw) if raw else None

    def timeline_view(self, file_id: str, now: int) -> dict[str, Any] | None:
        """The timeline dict, ``stuck``, for a file waiting for its definition ``waiting``
        (``{"stage", "since_ms"}``), and for a failed file ``quarantine``: its state (``open``,
        ``dismissed``, ``superseded``) and detail (note, superseding file id)."""
        raw = self.record(file_id)
        if raw is None:
            return None
        tl = Timeline.from_dict(raw)
        body = {**tl.to_dict(), "stuck": tl.stuck(now, self.sla)}
        if (where := waiting(raw)) is not None:
            body["waiting"] = where
        if (closure := self.closure(file_id)) is not None:
            body["quarantine"] = {"state": closure[0], "detail": closure[1]}
        return body

    def closure(self, file_id: str) -> tuple[str, str | None] | None:
        """A failed file's quarantine state and detail (None: not failed, or not indexed)."""
        e = self.state.entries.get(file_id)
        if e is None or e.state != "failed":
            return None
        return self.state.closure(e)

    def summary(self, now: int) -> dict[str, Any]:
        """``/summary``: :meth:`TrackerState.counts`, ``bad_records``, ``topic_prefix`` and
        ``waiting``: ``[{"dataset", "stage", "files"}]`` waiting for a definition."""
        body = self.ready().counts(now, self.sla)
        body["waiting"] = [
            {"dataset": ds, "stage": stage, "files": n}
            for (ds, stage), n in sorted(self.waiting_files().items())
        ]
        body["bad_records"] = self.bad_records()
        body["topic_prefix"] = self.prefix
        return body

    def overview(self, now: int) -> dict[str, Any]:
        body = overview(self.ready(), now, self.sla, self.lags, self.groups)
        body["summary"] = self.summary(now)
        return body


def _query(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.query.items()}


def register(app: faust.App, ctx: TrackerContext) -> None:
    """Add every endpoint of the module docstring to ``app``."""

    def guard(get: Callable[..., Any]) -> Callable[..., Any]:
        async def checked(self: View, request: Request, *args: Any, **kw: Any) -> Any:
            if not ctx.state.loaded:
                return self.json({"error": "the tracker is recovering its state"}, status=503)
            return await get(self, request, *args, **kw)

        return checked

    @app.page("/files/{file_id}", name="file")
    class FileView(View):
        @guard
        async def get(self, request: Request, file_id: str) -> Response:
            now = now_ms()
            body = ctx.timeline_view(file_id, now)
            if body is None:
                return self.json({"error": f"unknown file {file_id}"}, status=404)
            if request.query.get("detail"):
                raw = ctx.record(file_id) or {}
                raw = {**raw, **body}
                body["detail"] = detail(raw)
                body["bars"] = filepage.bars(raw, now)
                body["commands"] = filepage.commands(raw)
            return self.json(body)

    @app.page("/files", name="files")
    class FilesView(View):
        @guard
        async def get(self, request: Request) -> Response:
            try:
                q = FileQuery.parse(_query(request), limit=1000, sort="file_id")
            except QueryError as exc:
                return self.json({"error": str(exc)}, status=400)
            now = now_ms()
            count, page = select(ctx.ready(), q, now, ctx.sla)
            out = [v for e in page if (v := ctx.timeline_view(e.file_id, now))]
            return self.json({"count": count, "offset": q.offset, "limit": q.limit, "files": out})

    @app.page("/lookup", name="lookup")
    class LookupView(View):
        @guard
        async def get(self, request: Request) -> Response:
            name = (request.query.get("name") or "").strip()
            if not name:
                return self.json({"error": "name is required"}, status=400)
            now = now_ms()
            hits = ctx.ready().by_name(name)
            out = [v for e in hits[:200] if (v := ctx.timeline_view(e.file_id, now))]
            return self.json({"name": name, "count": len(hits), "files": out})

    @app.page("/stuck", name="stuck")
    class StuckView(View):
        @guard
        async def get(self, request: Request) -> Response:
            now = now_ms()
            out = []
            for e in list(ctx.ready().entries.values()):
                if not e.stuck(now, ctx.sla) or (v := ctx.timeline_view(e.file_id, now)) is None:
                    continue
                stage = e.waiting_in or ""
                waiting_s = round((now - e.entered_ms) / 1000, 3)
                out.append(
                    {**v, "stuck_in": stage, "waiting_s": waiting_s, "sla_s": ctx.sla.get(stage)}
                )
            out.sort(key=lambda d: -d["waiting_s"])
            return self.json({"count": len(out), "sla_s": ctx.sla, "files": out})

    @app.page("/summary", name="summary")
    class SummaryView(View):
        @guard
        async def get(self, request: Request) -> Response:
            return self.json(ctx.summary(now_ms()))

    @app.page("/overview", name="overview")
    class OverviewView(View):
        @guard
        async def get(self, request: Request) -> Response:
            return self.json(ctx.overview(now_ms()))

    @app.page("/charts", name="charts")
    class ChartsView(View):
        @guard
        async def get(self, request: Request) -> Response:
            return self.json(charts(ctx.ready(), now_ms(), request.query.get("dataset") or None))

    @app.page("/healthz", name="healthz")
    class HealthView(View):
        async def get(self, request: Request) -> Response:
            h = evaluate(
                ctx.liveness,
                now_ms(),
                stall_s=ctx.health_stall_s,
                broker_s=ctx.health_broker_s,
            )
            body = {"status": "ok" if h.ok else "unhealthy", "reasons": list(h.reasons)}
            return self.json(body | h.detail, status=200 if h.ok else 503)

    @app.page("/metrics", name="metrics")
    class MetricsView(View):
        @guard
        async def get(self, request: Request) -> Response:
            counts = ctx.ready().counts(now_ms(), ctx.sla)
            for state, n in counts["states"].items():
                ctx.metrics.files.labels(state).set(n)
            for stage in STAGES[1:]:
                ctx.metrics.stuck.labels(stage).set(counts["stuck"].get(stage, 0))
            for state, n in counts["quarantine"].items():
                ctx.metrics.quarantine.labels(state).set(n)
            for d in ctx.definition_entries():
                ctx.metrics.definition_valid.labels(d.name).set(1 if d.valid else 0)
            return self.bytes(
                generate_latest(ctx.metrics.registry),
                content_type=CONTENT_TYPE_LATEST.split(";")[0],
            )

    def page(view: View, request: Request, title: str, body: str, full: Callable[[], str]) -> Any:
        if request.query.get("partial"):
            return view.html(body)
        return view.html(full())

    @app.page("/", name="index")
    class IndexView(View):
        @guard
        async def get(self, request: Request) -> Response:
            now = now_ms()
            dataset = request.query.get("dataset") or None
            ov = ctx.overview(now)
            alert = pages.conditions_alert(ctx.conditions) + pages.definitions_alert(
                ctx.definition_entries(), ctx.waiting_files()
            )
            body = alert + pages.overview_body(ov, ov["summary"], dataset)
            return page(
                self,
                request,
                "Overview",
                body,
                lambda: pages.overview_page(body, ctx.prefix, ctx.refresh_s, dataset),
            )

    @app.page("/ui/files", name="ui-files")
    class FilesPage(View):
        @guard
        async def get(self, request: Request) -> Response:
            raw = _query(request)
            try:
                q = FileQuery.parse(raw, limit=50, sort="attention")
            except QueryError as exc:
                return self.html(f"<p class='error'>{pages.esc(exc)}</p>", status=400)
            q = FileQuery(**{**q.__dict__, "limit": min(max(q.limit, 1), 500)})
            now = now_ms()
            count, rows = select(ctx.ready(), q, now, ctx.sla)
            closures = {e.file_id: c for e in rows if (c := ctx.closure(e.file_id))}
            body = pages.files_body(
                q, raw, count, rows, now, ctx.sla, ctx.ready().datasets(), closures
            )
            return page(
                self,
                request,
                "Files",
                body,
                lambda: pages.layout("Files", ctx.prefix, body, ctx.refresh_s),
            )

    @app.page("/ui/files/{file_id}", name="ui-file")
    class FilePage(View):
        @guard
        async def get(self, request: Request, file_id: str) -> Response:
            now = now_ms()
            raw = ctx.record(file_id)
            if raw is None:
                search = f"/ui/files?{urlencode({'q': file_id})}"
                body = (
                    f"<p class='error'>unknown file {pages.esc(file_id)}; "
                    f"<a href='{pages.esc(search)}'>search it as a NAS name</a></p>"
                )
                return self.html(pages.layout("File", ctx.prefix, body, 0), status=404)
            stuck = Timeline.from_dict(raw).stuck(now, ctx.sla)
            body = filepage.file_body(raw, stuck, now, ctx.closure(file_id), ctx.names)
            return page(
                self,
                request,
                f"File {file_id}",
                body,
                lambda: pages.layout(f"File {file_id}", ctx.prefix, body, ctx.refresh_s),
            )

    @app.page("/table", name="table")
    class TableView(View):
        @guard
        async def get(self, request: Request) -> Response:
            now = now_ms()
            tls = [
                Timeline.from_dict(r)
                for e in list(ctx.ready().entries.values())
                if (r := ctx.record(e.file_id))
            ]
            return self.html(filepage.render_status_page(tls, now, ctx.sla, ctx.prefix))

    static = resources.files("ferry.tracker") / "static"
    served: Mapping[str, bytes] = {
        p.name: p.read_bytes()
        for p in static.iterdir()
        if p.name[p.name.rfind(".") :] in STATIC_TYPES
    }

    @app.page("/static/{name}", name="static")
    class StaticView(View):
        async def get(self, request: Request, name: str) -> Response:
            data = served.get(name)
            if data is None:
                return self.text("not found", status=404)
            ctype = STATIC_TYPES[name[name.rfind(".") :]]
            return self.bytes(data, content_type=ctype, headers={"Cache-Control": "max-age=300"})

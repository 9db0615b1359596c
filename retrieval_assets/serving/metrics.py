"""What ``GET /metrics`` exposes (Prometheus text format, ``prometheus-client``).

Per request: counts by route, method and status, and latency histograms. Serving state: searches
running and waiting, overload rejections, and the same for document writes. Per search, from its
``RetrievalResult``: each stage's time (parse, expansion, each engine, fusion, graph, rerank,
multi-query, and the response's serialisation; each query encoding, ``dense_encode`` and
``splade_encode``), the encoders' CPU, candidates per strategy, the top and mean fused score,
the reranker's mean rank change, expansion terms added and retries. The process's CPU seconds
(``process_cpu_seconds_total``) and the encoders' let ``loadtest`` report both per request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from retrieval_assets.core.models import RetrievalResult

SECONDS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0)
COUNTS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
SCORES = (-2.0, -1.0, -0.5, 0.0, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)
# Timings that are not a stage of their own (the sum of the others).
_NOT_STAGES = {"total_ms"}


class PreciseProcessCollector(ProcessCollector):
    """``ProcessCollector`` whose ``process_cpu_seconds_total`` is ``time.process_time()`` (the
    kernel's nanosecond count) instead of /proc's clock ticks: one tick is 10 ms, more than a small
    document post costs, which then read as no CPU at all."""

    def collect(self) -> Iterable[Metric]:
        for family in super().collect():
            if family.name == f"{self._prefix}cpu_seconds":
                family = CounterMetricFamily(family.name, family.documentation, value=time.process_time())
            yield family


class ServingMetrics:
    """One registry per app, so that two apps in one process (tests, bench-auth) do not mix."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        PreciseProcessCollector(registry=self.registry)
        labels = ["route", "method", "status"]
        self.requests = Counter("retrieval_http_requests", "HTTP requests answered", labels, registry=self.registry)
        self.latency = Histogram(
            "retrieval_http_request_seconds", "time to answer, by route", ["route", "method"], buckets=SECONDS,
            registry=self.registry,
        )  # fmt: skip
        self.running = Gauge("retrieval_searches_running", "searches running now", registry=self.registry)
        self.waiting = Gauge("retrieval_searches_waiting", "searches queued for a slot", registry=self.registry)
        self.rejected = Counter(
            "retrieval_searches_rejected", "searches answered 503 because the queue was full", registry=self.registry
        )
        self.writes_running = Gauge(
            "retrieval_document_writes_running", "document writes running now", registry=self.registry
        )
        self.writes_waiting = Gauge(
            "retrieval_document_writes_waiting", "document writes queued for a slot", registry=self.registry
        )
        self.writes_rejected = Counter(
            "retrieval_document_writes_rejected",
            "document writes answered 503 because the queue was full",
            registry=self.registry,
        )
        self.stage = Histogram(
            "retrieval_stage_seconds", "time per search stage", ["stage"], buckets=SECONDS, registry=self.registry
        )
        self.candidates = Histogram(
            "retrieval_candidates", "first-stage candidates per strategy", ["strategy"], buckets=COUNTS,
            registry=self.registry,
        )  # fmt: skip
        self.fused_score = Histogram(
            "retrieval_fused_score", "fused score of the hits: top and mean", ["which"], buckets=SCORES,
            registry=self.registry,
        )  # fmt: skip
        self.rerank_change = Histogram(
            "retrieval_rerank_mean_abs_rank_change", "how far rerank moved the leading hits", buckets=COUNTS,
            registry=self.registry,
        )  # fmt: skip
        self.expansion_terms = Histogram(
            "retrieval_expansion_terms", "vocabulary terms added to the final BM25 query", buckets=COUNTS,
            registry=self.registry,
        )  # fmt: skip
        self.retries = Counter(
            "retrieval_expansion_retries", "searches retried with broader expansion", registry=self.registry
        )
        self.hits = Histogram("retrieval_hits", "hits returned per search", buckets=COUNTS, registry=self.registry)
        self.encoder_cpu = Counter(
            "retrieval_encoder_cpu_seconds", "query encoders' CPU (the calling thread's)", ["strategy"],
            registry=self.registry,
        )  # fmt: skip

    def observe_result(self, result: RetrievalResult) -> None:
        """The retrieval signals of one search, from its timings and diagnostics."""
        for name, milliseconds in result.timings_ms.items():
            if name not in _NOT_STAGES:
                self.stage.labels(name.removesuffix("_ms")).observe(milliseconds / 1000)
        diagnostics = result.diagnostics
        for strategy, milliseconds in (diagnostics.get("encoder_cpu_ms") or {}).items():
            self.encoder_cpu.labels(strategy).inc(milliseconds / 1000)
        for strategy, count in (diagnostics.get("candidates") or {}).items():
            self.candidates.labels(strategy).observe(count)
        scores = [hit.score for hit in result.hits]
        if scores:
            self.fused_score.labels("top").observe(scores[0])
            self.fused_score.labels("mean").observe(sum(scores) / len(scores))
        self.hits.observe(len(scores))
        rerank = diagnostics.get("rerank")
        if rerank:
            self.rerank_change.observe(rerank["mean_abs_rank_change"])
        attempts = diagnostics.get("expansion") or []
        if attempts:
            self.expansion_terms.observe(len(attempts[-1]["expansion_terms"]))
            if len(attempts) > 1:
                self.retries.inc(len(attempts) - 1)

    def observe_serialisation(self, seconds: float) -> None:
        self.stage.labels("serialisation").observe(seconds)

    def on_admission(self, running: int, waiting: int) -> None:
        self.running.set(running)
        self.waiting.set(waiting)

    def on_write_admission(self, running: int, waiting: int) -> None:
        self.writes_running.set(running)
        self.writes_waiting.set(waiting)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class RequestMetrics:
    """ASGI middleware: each answered request by its route template (not its path, which would
    name documents), method and status, and its latency. ``route_of`` names the route of a
    request answered before routing (a 401, a 503 from the queue)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: ServingMetrics,
        route_of: Callable[[Scope], str | None],
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.route_of = route_of
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = self.clock()
        status = 500  # an exception before any answer is a 500 to the client

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            route = getattr(scope.get("route"), "path", None) or self.route_of(scope) or "unmatched"
            self.metrics.requests.labels(route, scope["method"], str(status)).inc()
            self.metrics.latency.labels(route, scope["method"]).observe(self.clock() - started)

"""The HTTP API's app factory (FastAPI): the routes over the one query entry point, their middleware and error handlers.

Every query goes through ``HybridRetriever.run(SearchRequest)``, the path the core ``SearchService``
(behind the Dagster search resource), the evaluation asset and the CLI use, so an answer over
HTTP is the answer the evaluation measured.

* ``POST /search``: a ``SearchRequest`` as JSON; answers the ``RetrievalResult`` (hits with
  per-strategy provenance, fusion, strategies, rerank and refine flags, timings, diagnostics).
* ``GET /search/stream``: the same search as Server-Sent Events: a ``meta`` event (query,
  strategies, fusion, count, timings, diagnostics), one ``hit`` event per hit, then ``done``.
* ``POST /documents``: one catalog record or an array of them, each cleaned by the catalog's own
  rules and checked against the published record schema (``ToolRecord``, ``BeirRecord``: what
  cleaning keeps); if any would be quarantined or breaks the schema the answer is a 422 naming
  each such record, and nothing is written. Otherwise all are appended to the document inbox in
  one write (``$RETRIEVAL_ASSETS_HOME/inbox/``, see ``core.ingest.inbox``) and answered with 202
  and one receipt each: the next build applies them.
* ``DELETE /documents/{id}``: queues the document's removal (202 with its receipt); 404 unless the
  served index or the inbox holds the document.
* ``GET /documents/{id}``: the document's status (pending, indexed or deleted in a version,
  rejected with the reason) and the served index's copy of it (its first chunk), if any.
* ``GET /health``: each backend's readiness and count, vocabulary and graph, the index version,
  and its ``filter_fields``: the field names (and types) that ``filters`` may use.

The OpenAPI document is the contract: every answer an operation gives is in its ``responses``
(``serving.openapi`` adds what FastAPI cannot see), and ``test_openapi_contract`` runs schemathesis
over all of them. Bad input (query length, ``top_k`` range, filter shape, malformed control tags,
a natural-language filter that leaves nothing to search, a body that is not UTF-8 JSON) is a 422
whose ``detail`` says what is wrong. Filter field names are data, not schema: a well-formed
request the served version cannot answer (a field it does not have, a value the field's type
cannot hold, a strategy it does not serve) is a 409. Errors are JSON, on the stream too;
405 answers carry ``Allow``.
"""

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope as ASGIScope

from retrieval_assets.core.embed.device import usable_cores
from retrieval_assets.core.index.layout import IndexLayout
from retrieval_assets.core.ingest.catalog import CatalogFormat
from retrieval_assets.core.ingest.inbox import DocumentInbox
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.retrieval.service import UNAVAILABLE_ERRORS, SearchService
from retrieval_assets.serving.admission import Admission, AdmissionLimits
from retrieval_assets.serving.auth import (
    ApiKeys,
    AuthError,
    KeyRequired,
    authorizer,
    unauthorized,
)
from retrieval_assets.serving.errors import install_error_handlers
from retrieval_assets.serving.limits import RequestLimits
from retrieval_assets.serving.metrics import RequestMetrics, ServingMetrics
from retrieval_assets.serving.openapi import install_contract
from retrieval_assets.serving.routes.documents import document_routes
from retrieval_assets.serving.routes.operations import operation_routes
from retrieval_assets.serving.routes.search import search_routes
from retrieval_assets.serving.schemas import MAX_DOCUMENT_BYTES, MAX_SEARCH_BODY_BYTES, ErrorBody

logger = logging.getLogger(__name__)

SEARCH_PATHS = frozenset({"/search", "/search/stream"})
# Document writes clean every record and append to the inbox: one at a time, a few waiting, so
# that posts cannot take the cores searches need (bench-document-writes measures their cost).
WRITE_LIMITS = AdmissionLimits(concurrency=1, queue_depth=4)


def is_search(scope: ASGIScope) -> bool:
    return scope["path"] in SEARCH_PATHS


def is_document_write(scope: ASGIScope) -> bool:
    path = scope["path"]
    return scope["method"] in ("POST", "DELETE") and (path == "/documents" or path.startswith("/documents/"))


def default_limits() -> AdmissionLimits:
    """Searches running at once: one per core this process may use, as the embedded engines and
    the query encoders compute rather than wait (on two cores: 211 requests/s at 16 clients, P95
    87 ms, against 194 and 103 ms with two per core; docs/benchmarks/http-load.md); engines on servers wait
    on the network, so serve them with more (``--search-concurrency``). Waiting: enough for 64
    closed-loop clients before anyone is turned away."""
    return AdmissionLimits(concurrency=usable_cores(), queue_depth=64)


def create_app(
    search: SearchService | Callable[[], HybridRetriever],
    *,
    layout: IndexLayout | None = None,
    home: Path | None = None,
    catalog_format: CatalogFormat = "beir",
    default_tenant: str = "default",
    keys: ApiKeys | None = None,
    limits: AdmissionLimits | None = None,
    warm_up: bool = True,
) -> FastAPI:
    """The API over a ``SearchService`` or a factory of ``HybridRetriever`` (then ``layout`` is required).

    ``home`` holds the document inbox, ``home/inbox`` (default: the storage home, the parent of
    the versions' root, or the parent of ``layout.root``); ``catalog_format`` and
    ``default_tenant`` are how posted documents are cleaned, as the catalog is. Document statuses
    follow the service's promoted version; over a factory, which has no versions, an entry
    taken in counts as applied when the index does (or, for a delete, does not) hold the document.

    ``keys``: every route but ``/health`` then needs one (``Authorization: Bearer``); a key's
    tenants bound what it reads and writes, its scopes which routes it may call, its rate how
    often. Without keys every caller is trusted, so ``retrieval-assets serve`` binds loopback only.

    ``limits``: how many searches run at once and how many may wait (``default_limits()``);
    past that a search is a 503 with ``Retry-After``. Document writes have their own, smaller
    ``WRITE_LIMITS``. Every request meets ``RequestLimits`` (header size and count, UTF-8 bodies).
    ``GET /metrics`` (admin scope) reports it all.
    """
    if isinstance(search, SearchService):
        service = search
        versions = search.versions
        if home is None:
            if versions is None:
                raise TypeError("create_app(service) over a fixed layout needs home= (where the inbox lives)")
            home = versions.root.parent
    else:
        if layout is None:
            raise TypeError("create_app(factory) needs layout= (where the factory's indexes live)")
        service = SearchService.for_layout(search, layout)
        home = home or layout.root.parent
        versions = None
    inbox = DocumentInbox.under(home)
    caller = authorizer(keys is not None)
    metrics = ServingMetrics()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if warm_up:
            try:  # load models and open indexes before the first request, not during it
                await run_in_threadpool(service.retriever)
            except UNAVAILABLE_ERRORS as exc:
                logger.warning("indexes not available yet (see GET /health): %s", exc)
        yield
        await run_in_threadpool(service.close)

    app = FastAPI(
        title="retrieval_assets",
        summary="Hybrid search (BM25, SPLADE and dense, fused) over the indexes the Dagster assets build.",
        lifespan=lifespan,
        # The largest any route takes (POST /documents): the middlewares read bodies before the
        # route is known; the search routes set their own, smaller limit.
        max_body_size=MAX_DOCUMENT_BYTES,
        # Also a body that is not UTF-8 (serving.limits).
        responses={422: {"model": ErrorBody, "description": "invalid request; `detail` says why"}},
    )
    app.state.service = service
    app.state.inbox = inbox
    app.state.metrics = metrics
    # Outermost last: metrics see every answer, a caller without a key never reaches the limits
    # or a queue.
    app.add_middleware(
        Admission,
        limits=limits or default_limits(),
        applies=is_search,
        max_body_bytes=MAX_SEARCH_BODY_BYTES,
        on_change=metrics.on_admission,
        on_reject=metrics.rejected.inc,
    )
    app.add_middleware(
        Admission,
        limits=WRITE_LIMITS,
        applies=is_document_write,
        max_body_bytes=MAX_DOCUMENT_BYTES,
        on_change=metrics.on_write_admission,
        on_reject=metrics.writes_rejected.inc,
    )
    app.add_middleware(RequestLimits, max_body_bytes=MAX_DOCUMENT_BYTES)
    if keys is not None:
        app.add_middleware(KeyRequired, keys=keys)
    app.add_middleware(RequestMetrics, metrics=metrics, route_of=lambda scope: _route_template(routes, scope))
    install_contract(app, secured=keys is not None)
    families = [
        search_routes(service, metrics, caller),
        document_routes(service, inbox, versions, caller, catalog_format, default_tenant),
        operation_routes(service, metrics, caller, keys),
    ]
    for family in families:
        app.include_router(family)
    # Every route, flat (an included router is one opaque entry of app.router.routes): they name
    # a request's route for the metrics and a 405's allowed methods.
    routes: list[BaseRoute] = [
        *(route for route in app.router.routes if isinstance(route, Route)),
        *(route for family in families for route in family.routes),
    ]
    install_error_handlers(app, routes)
    app.exception_handler(AuthError)(unauthorized)
    return app


def _route_template(routes: Sequence[BaseRoute], scope: ASGIScope) -> str | None:
    """The path template of the route that would answer ``scope``."""
    return next(
        (route.path for route in routes if isinstance(route, Route) and route.matches(scope)[0] is Match.FULL), None
    )

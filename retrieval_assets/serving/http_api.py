"""The HTTP API (FastAPI) over the one query entry point.

Every query goes through ``HybridRetriever.run(SearchRequest)``, the path the core ``Searcher``
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
(``_contract`` adds what FastAPI cannot see), and ``test_openapi_contract`` runs schemathesis
over all of them. Bad input (query length, ``top_k`` range, filter shape, malformed control tags,
a natural-language filter that leaves nothing to search, a body that is not UTF-8 JSON) is a 422
whose ``detail`` says what is wrong. Filter field names are data, not schema: a well-formed
request the served version cannot answer (a field it does not have, a value the field's type
cannot hold, a strategy it does not serve) is a 409. Errors are JSON, on the stream too;
405 answers carry ``Allow``.
"""

import json
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Strict,
    StrictBool,
    StrictInt,
    StrictStr,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as ASGIScope

from retrieval_assets.core.embed.device import usable_cores
from retrieval_assets.core.index.layout import IndexLayout
from retrieval_assets.core.ingest.catalog import CatalogFormat, RawRow
from retrieval_assets.core.ingest.cleaning import DEFAULT_MAX_TEXT_CHARS, clean_rows
from retrieval_assets.core.ingest.inbox import (
    ArchivedEntry,
    DocumentInbox,
    DocumentStatus,
    InboxEntry,
    InboxOperation,
    InboxOutcome,
    document_status,
)
from retrieval_assets.core.models import (
    FusionMethod,
    QuarantineRecord,
    RetrievalResult,
    SearchRequest,
    StoreHit,
    Strategy,
)
from retrieval_assets.core.retrieval.retriever import HybridRetriever, tenant_scope
from retrieval_assets.core.retrieval.searcher import Searcher
from retrieval_assets.core.stores.base import FieldType, coerce_filter_values
from retrieval_assets.core.stores.filters import FilterError, parse_filters
from retrieval_assets.serving.admission import AdmissionLimits, SearchAdmission
from retrieval_assets.serving.auth import ApiKey, ApiKeys, AuthError, RateLimiter, Scope
from retrieval_assets.serving.metrics import RequestMetrics, ServingMetrics
from retrieval_assets.serving.service import UNAVAILABLE_ERRORS, Health, SearchService

logger = logging.getLogger(__name__)

MAX_QUERY_CHARS = 1_000
MAX_TOP_K = 1_000
MAX_TENANT_CHARS = 200
MAX_CONTEXT_ITEMS = 32
# A character that str.strip() keeps, spelled out so that every regex engine reads it alike.
NOT_ONLY_SPACE = r"[^\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
# Larger bodies are refused with 413 while they are read: searches are small, and cleaning caps
# a document's text at 200k characters anyway.
MAX_SEARCH_BODY_BYTES = 64_000
MAX_DOCUMENT_BYTES = 2_000_000
MAX_DOCUMENT_BATCH = 1_000  # records in one POST /documents
SEARCH_PATHS = frozenset({"/search", "/search/stream"})


def default_limits() -> AdmissionLimits:
    """Searches running at once: one per core this process may use, as the embedded engines and
    the query encoders compute rather than wait (on two cores: 211 requests/s at 16 clients, P95
    87 ms, against 194 and 103 ms with two per core; README "HTTP load"); engines on servers wait
    on the network, so serve them with more (``--search-concurrency``). Waiting: enough for 64
    closed-loop clients before anyone is turned away."""
    return AdmissionLimits(concurrency=usable_cores(), queue_depth=64)

TenantParam = Annotated[str | None, Query(min_length=1, max_length=MAX_TENANT_CHARS, description="only this tenant")]

FiniteNumber = Annotated[float, Field(strict=True, allow_inf_nan=False)]
FilterScalar = StrictStr | StrictInt | FiniteNumber | StrictBool
# An identifier every index has, with ids from the bundled catalog (data/scifact_mini).
FILTERS_EXAMPLE = {"doc_id": ["4983", "70490"]}


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)  # a bound is left out, never null


class FilterRange(BaseModel):
    """An inclusive numeric range: ``gte``, ``lte`` or both."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    gte: FiniteNumber = Field(None, json_schema_extra=_no_default)  # type: ignore[assignment]
    lte: FiniteNumber = Field(None, json_schema_extra=_no_default)  # type: ignore[assignment]

    @model_validator(mode="before")
    @classmethod
    def _bounds(cls, value: Any) -> Any:
        if isinstance(value, dict):
            unknown = set(value) - {"gte", "lte"}
            if unknown:
                raise ValueError(f"unknown range keys {sorted(unknown)}; use gte/lte")
            if not value:
                raise ValueError("a range needs gte, lte or both")
        return value


def _filter_kind(value: Any) -> str | None:
    if isinstance(value, dict | FilterRange):
        return "range"
    if isinstance(value, list):
        return "values"
    return "value" if isinstance(value, str | int | float) else None


FilterValue = Annotated[
    Annotated[FilterScalar, Tag("value")]
    | Annotated[list[FilterScalar], Field(min_length=1), Tag("values")]
    | Annotated[FilterRange, Tag("range")],
    Discriminator(
        _filter_kind,
        custom_error_type="filter_value",
        custom_error_message="a filter is a string, number or boolean, a non-empty list of them, or a {gte, lte} range",
    ),
]
Filters = Annotated[
    dict[Annotated[str, Field(min_length=1)], FilterValue],
    Field(
        max_length=MAX_CONTEXT_ITEMS,
        description=(
            "Metadata filters, applied before top-k: filter field -> a value (equal), a non-empty list "
            "(any of) or a {gte, lte} range (inclusive, numeric). The field names and their types are "
            "data of the served index version, not of this schema: `GET /health` lists them under "
            "`filter_fields` (every index has doc_id, chunk_id, tenant_id and section). A field the "
            "served version does not have, or a value its type cannot hold, is a 409."
        ),
        examples=[FILTERS_EXAMPLE],
    ),
]
ContextMetadata = Annotated[dict[str, Any], Field(max_length=MAX_CONTEXT_ITEMS)]
_FILTERS = TypeAdapter(Filters)
_CONTEXT_METADATA = TypeAdapter(ContextMetadata)


class _SearchFields(BaseModel):
    """Fields shared by the JSON body of ``POST /search`` and the query string of the stream."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, json_schema_extra={"pattern": NOT_ONLY_SPACE})
    top_k: int = Field(10, ge=1, le=MAX_TOP_K)
    tenant: str | None = Field(
        None, min_length=1, max_length=MAX_TENANT_CHARS, validation_alias=AliasChoices("tenant", "tenant_id")
    )
    strategies: list[Strategy] | None = Field(None, min_length=1, max_length=len(Strategy))
    fusion: FusionMethod | None = None
    rerank: bool | None = None
    expand: bool | None = None
    multi_query: bool | None = None
    context_files: list[Annotated[str, Field(max_length=255)]] = Field(default_factory=list, max_length=MAX_CONTEXT_ITEMS)

    @field_validator("query")
    @classmethod
    def _not_only_space(cls, value: str) -> str:
        if not value.strip():  # what NOT_ONLY_SPACE says to any regex engine
            raise ValueError("the query needs a character that is not a space")
        return value

    def to_request(self, filters: dict[str, Any] | None, context_metadata: dict[str, Any]) -> SearchRequest:
        return SearchRequest(
            query=self.query,
            top_k=self.top_k,
            filters=filters,
            tenant_id=self.tenant,
            strategies=list(self.strategies) if self.strategies else None,
            fusion=self.fusion,
            rerank=self.rerank,
            expand=self.expand,
            multi_query=self.multi_query,
            context_files=self.context_files,
            context_metadata=context_metadata,
        )


class SearchBody(_SearchFields):
    # JSON has types: "5" is no number here, nor 0 a boolean (the stream's query string is all text).
    model_config = ConfigDict(strict=True)

    top_k: int = Field(10, ge=1, le=MAX_TOP_K, strict=False)  # 5.0 is a JSON Schema integer too
    strategies: list[Annotated[Strategy, Strict(False)]] | None = Field(None, min_length=1, max_length=len(Strategy))
    fusion: Annotated[FusionMethod, Strict(False)] | None = None
    filters: Filters | None = None
    context_metadata: ContextMetadata = Field(default_factory=dict)

    @field_validator("top_k", mode="before")
    @classmethod
    def _json_number(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("top_k must be an integer")
        return value

    @field_validator("filters", "context_metadata")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        problem = _unstorable(value)
        if problem:
            raise ValueError(problem)
        return value


class StreamParams(_SearchFields):
    # JSON objects, as in POST /search (the OpenAPI document says so: see _contract).
    filters: str | None = None
    context_metadata: str | None = None

    @field_validator("strategies", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        # The stream's query string may say strategies=bm25,dense as well as strategies=bm25&strategies=dense.
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return [part.strip() for v in value for part in v.split(",") if part.strip()]
        return value


DocumentTenantParam = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_TENANT_CHARS,
        description="the document's tenant, one the API key is granted. POST and DELETE default to the key's only "
        "tenant, else to the server's default tenant; GET looks in every tenant the key may see",
    ),
]


# A character cleaning keeps (no space, control character or LaTeX markup), so that a text holding
# one is not empty once cleaned; spelled out so that every regex engine reads it alike.
KEPT_CHARACTER = r"[^\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\\{}$%&~^_#]"
# A metadata key cleaning takes: it ends with a character that is neither a space nor a dot.
METADATA_KEY = r"[^\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000.]$"
_CLOSED = {"additionalProperties": False}  # keys must match the key pattern, not merely be checked when they do
Int64 = Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1)]  # every store keeps integers as int64
FiniteFloat = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-(2**63), le=2**63 - 1)]
MetadataKey = Annotated[str, Field(pattern=METADATA_KEY)]
MetadataValue = StrictStr | Int64 | FiniteFloat | StrictBool | list[StrictStr | StrictInt | FiniteFloat | StrictBool | None] | None
DocumentId = Annotated[StrictStr, Field(pattern=NOT_ONLY_SPACE)] | StrictInt
DocumentText = Annotated[StrictStr, Field(max_length=DEFAULT_MAX_TEXT_CHARS, pattern=KEPT_CHARACTER)]


class ToolRecord(BaseModel):
    """A tool catalog record as POST /documents takes it: what cleaning keeps, with the request's
    tenant (a record may not name its own). Other fields are ignored, as in the catalog."""

    model_config = ConfigDict(extra="allow", regex_engine="python-re")

    id: DocumentId
    name: StrictStr
    description: DocumentText
    keywords: list[StrictStr] = []
    metadata: Annotated[
        dict[MetadataKey, MetadataValue | Annotated[dict[MetadataKey, MetadataValue], Field(json_schema_extra=_CLOSED)]],
        Field(json_schema_extra=_CLOSED, description="scalars, lists of them, or one level of objects of those"),
    ] = {}
    relations: dict[StrictStr, list[StrictStr | StrictInt]] = {}
    tenant_id: None = Field(None, description="not taken over HTTP: the `tenant` parameter names the tenant")

    @field_validator("tenant_id", mode="before")
    @classmethod
    def _tenant_from_the_request(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("a posted record does not name its tenant: the tenant parameter does")
        return value


class BeirRecord(BaseModel):
    """A BEIR corpus record as POST /documents takes it. Its other fields that are scalars, or
    lists of them, become metadata, so every field name follows the metadata key rule."""

    model_config = ConfigDict(
        extra="allow", regex_engine="python-re", json_schema_extra={"propertyNames": {"pattern": METADATA_KEY}}
    )
    __pydantic_extra__: dict[str, StrictStr | Int64 | FiniteFloat | StrictBool | list[Any] | dict[str, Any] | None] = Field(
        init=False
    )

    id: DocumentId = Field(alias="_id")
    title: StrictStr | None = None
    text: DocumentText
    metadata: dict[MetadataKey, MetadataValue | dict[str, Any]] = Field(
        {}, description="free-form; its scalar values are kept", json_schema_extra=_CLOSED
    )

    @model_validator(mode="after")
    def _names_are_metadata_keys(self) -> "BeirRecord":
        if any(not re.search(METADATA_KEY, name) for name in self.model_extra or {}):
            raise ValueError("a field name must end with a character that is neither a space nor a dot (it becomes a metadata key)")
        return self


_RECORD_MODELS: dict[str, type[BaseModel]] = {"tool_catalog": ToolRecord, "beir": BeirRecord}


def _documents_body_schema(model: type[BaseModel]) -> dict[str, Any]:
    record = model.model_json_schema(by_alias=True)
    batch = {"type": "array", "items": record, "minItems": 1, "maxItems": MAX_DOCUMENT_BATCH}
    return {"oneOf": [record, batch]}


class DocumentReceipt(BaseModel):
    """One accepted upsert or delete, pending until a build takes it in (see GET /documents/{id})."""

    receipt: str
    operation: InboxOperation
    doc_id: str
    tenant_id: str
    status: Literal["pending"] = "pending"
    received_at: str


class DocumentsAccepted(BaseModel):
    receipts: list[DocumentReceipt]  # one per record, in the order posted
    message: str = "accepted; the next index build applies it"


class DocumentView(DocumentStatus):
    """A document's status (``version``: the promoted version that serves it so, or for a rejected
    entry the one whose build refused it; ``candidate``: a sealed version that took it in but is
    not promoted yet), with its latest inbox entry's ``receipt``, ``operation`` and
    ``received_at``, and the served index's copy (``title``, ``text`` and ``chunk_id`` of the first
    chunk, ``metadata``) when the served index holds the document."""

    doc_id: str
    tenant_id: str
    receipt: str | None = None
    operation: InboxOperation | None = None
    received_at: str | None = None
    title: str | None = None
    text: str | None = None
    chunk_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class ErrorBody(BaseModel):
    detail: str
    error: str  # the core's exception class (ControlTagError, FilterError), else the HTTP status phrase
    reason: str | None = None  # POST /documents: the (first) quarantined record's reason
    errors: list[dict[str, Any]] | None = None  # schema violations, one per field


def create_app(
    search: Searcher | Callable[[], HybridRetriever],
    *,
    layout: IndexLayout | None = None,
    home: Path | None = None,
    catalog_format: CatalogFormat = "beir",
    default_tenant: str = "default",
    keys: ApiKeys | None = None,
    limits: AdmissionLimits | None = None,
    warm_up: bool = True,
) -> FastAPI:
    """The API over a ``Searcher`` or a factory of ``HybridRetriever`` (then ``layout`` is required).

    ``home`` holds the document inbox, ``home/inbox`` (default: the storage home, the parent of
    the versions' root, or the parent of ``layout.root``); ``catalog_format`` and
    ``default_tenant`` are how posted documents are cleaned, as the catalog is. Document statuses
    follow the ``Searcher``'s promoted version; over a factory, which has no versions, an entry
    taken in counts as applied when the index does (or, for a delete, does not) hold the document.

    ``keys``: every route but ``/health`` then needs one (``Authorization: Bearer``); a key's
    tenants bound what it reads and writes, its scopes which routes it may call, its rate how
    often. Without keys every caller is trusted, so ``retrieval-assets serve`` binds loopback only.

    ``limits``: how many searches run at once and how many may wait (``default_limits()``);
    past that a search is a 503 with ``Retry-After``. ``GET /metrics`` (admin scope) reports it all.
    """
    if isinstance(search, Searcher):
        service = SearchService.for_searcher(search)
        home = home or search.versions.root.parent
        versions = search.versions
    else:
        if layout is None:
            raise TypeError("create_app(factory) needs layout= (where the factory's indexes live)")
        service = SearchService.for_layout(search, layout)
        home = home or layout.root.parent
        versions = None
    inbox = DocumentInbox.under(home)
    caller = _authorizer(keys is not None)
    metrics = ServingMetrics()

    def status_of(entry: InboxEntry, served: bool) -> DocumentStatus:
        if versions is not None:
            return document_status(entry, versions.promoted())
        # No versions to compare with: whether the index holds the document says if the entry is applied.
        applied = isinstance(entry, ArchivedEntry) and entry.outcome is not InboxOutcome.REJECTED
        if applied and served == (entry.outcome is InboxOutcome.INDEXED):
            return DocumentStatus(status=entry.outcome.value)
        return document_status(entry, None)

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
        max_body_size=MAX_SEARCH_BODY_BYTES,
        # Also a body that is not UTF-8 JSON (FastAPI's 400, answered as 422 by http_error below).
        responses={422: {"model": ErrorBody, "description": "invalid request; `detail` says why"}},
    )
    app.state.service = service
    app.state.inbox = inbox
    app.state.metrics = metrics
    # Outermost last: metrics see every answer, a caller without a key never reaches the queue.
    app.add_middleware(
        SearchAdmission,
        limits=limits or default_limits(),
        paths=SEARCH_PATHS,
        max_body_bytes=MAX_SEARCH_BODY_BYTES,
        on_change=metrics.on_admission,
        on_reject=metrics.rejected.inc,
    )
    if keys is not None:
        app.add_middleware(_KeyRequired, keys=keys)
    app.add_middleware(RequestMetrics, metrics=metrics, route_of=lambda scope: _route_template(app, scope))

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _contract(FastAPI.openapi(app), secured=keys is not None)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(ValueError)
    async def bad_request(_: Request, exc: ValueError) -> JSONResponse:
        # The core raises ValueError subclasses (ControlTagError, FilterError) for requests it cannot answer.
        return _error(422, str(exc), type(exc).__name__)

    def _search(request: SearchRequest) -> RetrievalResult:
        try:
            served = service.retriever().available_strategies
            missing = [strategy for strategy in request.strategies or () if strategy not in served]
            conflict = _conflict(request.filters, service.filter_fields(tenant_scope(request)))
            if missing or conflict:
                raise HTTPException(409, conflict or f"strategies {missing} are not served (see GET /health: {served})")
            result = service.run(request)
        except UNAVAILABLE_ERRORS as exc:
            raise HTTPException(503, f"indexes not available: {exc}") from None
        metrics.observe_result(result)
        return result

    @app.post("/search", response_model=RetrievalResult, tags=["search"], responses=_SEARCH_ERRORS)
    def post_search(body: SearchBody, key: Annotated[ApiKey | None, Depends(caller("search"))]) -> Response:
        """Hybrid search; the result carries each hit's per-strategy scores and ranks."""
        result = _search(_granted(body.to_request(_plain_filters(body.filters), body.context_metadata), key))
        # Serialised here, once: the result is built from validated parts, and validating it
        # again on the way out (FastAPI's response_model) cost more than the search's fusion.
        started = time.perf_counter()
        content = result.model_dump_json()
        metrics.observe_serialisation(time.perf_counter() - started)
        return Response(content, media_type="application/json")

    def stream_result(
        key: Annotated[ApiKey | None, Depends(caller("search"))], params: Annotated[StreamParams, Query()]
    ) -> RetrievalResult:
        filters = _parse_param(_FILTERS, params.filters, "filters")
        context_metadata = _parse_param(_CONTEXT_METADATA, params.context_metadata, "context_metadata") or {}
        return _search(_granted(params.to_request(_plain_filters(filters), context_metadata), key))

    # Its error answers are JSON, not events: _contract documents them so.
    @app.get("/search/stream", response_class=EventSourceResponse, tags=["search"], responses=_SEARCH_ERRORS)
    def get_search_stream(result: Annotated[RetrievalResult, Depends(stream_result)]) -> Iterator[ServerSentEvent]:
        """Server-Sent Events: ``meta`` (query, strategies, fusion, count, timings), one ``hit`` per hit, ``done``."""
        # The search runs in the dependency, so a bad request is a 422 before the stream opens.
        meta = result.model_dump(exclude={"hits"}) | {"count": len(result.hits)}
        yield ServerSentEvent(event="meta", data=meta)
        for rank, hit in enumerate(result.hits, start=1):
            yield ServerSentEvent(event="hit", id=str(rank), data={"rank": rank, **hit.model_dump()})
        yield ServerSentEvent(event="done", data={"count": len(result.hits)})

    @app.post(
        "/documents",
        status_code=202,
        response_model=DocumentsAccepted,
        tags=["documents"],
        max_body_size=MAX_DOCUMENT_BYTES,
        responses={
            202: {"description": "queued: one receipt per record"},
            422: {
                "model": ErrorBody,
                "description": "a record would be quarantined (`reason`; one `errors` item per such record, "
                "`loc` [\"body\", index] in an array), breaks the record schema, or the array is empty or too "
                "long: nothing is written",
            },
        },
        openapi_extra={
            "requestBody": {
                "required": True,
                "description": f"One catalog record in the catalog's format ({catalog_format}), or an array of 1 to "
                f"{MAX_DOCUMENT_BATCH:,} of them; at most {MAX_DOCUMENT_BYTES:,} bytes in all. A later record "
                "for the same id supersedes an earlier one.",
                "content": {"application/json": {"schema": _documents_body_schema(_RECORD_MODELS[catalog_format])}},
            }
        },
    )
    async def post_documents(
        request: Request,
        key: Annotated[ApiKey | None, Depends(caller("documents:write"))],
        tenant: DocumentTenantParam = None,
    ) -> DocumentsAccepted:
        """Clean each record as the catalog is cleaned and queue them all for the next build, or none
        if any would be quarantined; one receipt per record, in order."""
        tenant_id = key.write_tenant(tenant, default_tenant) if key else tenant or default_tenant
        rows, batch = _document_rows(await request.body())
        # Each record alone: a later record for the same id supersedes an earlier one, as a later post does.
        cleaned = await run_in_threadpool(lambda: [clean_rows([row], catalog_format, tenant_id) for row in rows])
        rejected = [record for result in cleaned for record in result.quarantine]
        if rejected:
            raise _Quarantined(rejected, batch)
        records = [json.loads(row.raw) for row in rows]
        _check_records(_RECORD_MODELS[catalog_format], records, batch)
        entries = [
            InboxEntry.new(
                InboxOperation.UPSERT,
                result.documents[0].doc_id,
                tenant_id,
                format=catalog_format,
                record=record,
                sender=key.id if key else None,
            )
            for result, record in zip(cleaned, records, strict=True)
        ]
        await run_in_threadpool(inbox.append, entries)
        return DocumentsAccepted(receipts=[DocumentReceipt.model_validate(entry.model_dump()) for entry in entries])

    @app.exception_handler(AuthError)
    async def unauthorized(_: Request, exc: AuthError) -> JSONResponse:
        return _auth_error(exc)

    @app.exception_handler(_Quarantined)
    async def quarantined(_: Request, exc: _Quarantined) -> JSONResponse:
        return _error(422, exc.detail, "QuarantinedRecord", reason=exc.reason, errors=exc.errors)

    @app.delete(
        "/documents/{doc_id:path}",
        status_code=202,
        response_model=DocumentsAccepted,
        tags=["documents"],
        responses={404: {"model": ErrorBody, "description": "neither the served index nor the inbox holds the document"}},
    )
    def delete_document(
        doc_id: str,
        key: Annotated[ApiKey | None, Depends(caller("documents:write"))],
        tenant: DocumentTenantParam = None,
    ) -> DocumentsAccepted:
        """Queue the document's removal for the next build. It must be served, or live in the inbox
        (its latest entry an upsert, pending or indexed)."""
        tenant_id = key.write_tenant(tenant, default_tenant) if key else tenant or default_tenant
        latest = inbox.latest(doc_id, tenant_id)
        live = (
            latest is not None
            and latest.operation is InboxOperation.UPSERT
            and (not isinstance(latest, ArchivedEntry) or latest.outcome is InboxOutcome.INDEXED)
        )
        if not live and service.fetch_document(doc_id, tenant_id) is None:
            raise _no_document(doc_id, tenant_id)
        entry = InboxEntry.new(InboxOperation.DELETE, doc_id, tenant_id, sender=key.id if key else None)
        inbox.append([entry])
        return DocumentsAccepted(
            receipts=[DocumentReceipt.model_validate(entry.model_dump())],
            message="accepted; the next index build removes it",
        )

    @app.get(
        "/documents/{doc_id:path}",
        response_model=DocumentView,
        tags=["documents"],
        responses={404: {"model": ErrorBody, "description": "neither the served index nor the inbox holds the document"}},
    )
    def get_document(
        doc_id: str, key: Annotated[ApiKey | None, Depends(caller("search"))], tenant: DocumentTenantParam = None
    ) -> DocumentView:
        """The status of the document's latest inbox entry (pending; indexed or deleted in the
        promoted version; rejected with the quarantine reason), else ``indexed`` when only the
        served index holds it; with the served index's copy when it has one."""
        if key is not None and tenant is not None:
            key.check_tenant(tenant)
        tenants = [tenant] if tenant is not None else key.tenants if key is not None else None
        entry = inbox.latest(doc_id, tenants)
        hit = service.fetch_document(doc_id, entry.tenant_id if entry else tenants)
        served = _served_copy(hit) if hit else {}
        if entry is not None:
            status = status_of(entry, served=hit is not None)
            inbox_fields = {"receipt": entry.receipt, "operation": entry.operation, "received_at": entry.received_at}
            return DocumentView(
                **status.model_dump(), **{**served, **inbox_fields, "doc_id": entry.doc_id, "tenant_id": entry.tenant_id}
            )
        if hit is None:
            raise _no_document(doc_id, tenant)
        promoted = versions.promoted() if versions is not None else None
        return DocumentView(status="indexed", version=promoted.id if promoted else None, **served)

    @app.get(
        "/metrics",
        tags=["health"],
        response_class=PlainTextResponse,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text format"}},
    )
    def get_metrics(_: Annotated[ApiKey | None, Depends(caller("admin"))]) -> Response:
        """Requests by route and status, latency, searches running and waiting, rejections, each search
        stage's time, and retrieval signals (candidates per strategy, fused scores, rerank moves,
        expansion terms and retries); process CPU and memory. Needs the admin scope."""
        content, media_type = metrics.render()
        return Response(content, media_type=media_type)

    @app.get("/health", response_model=Health, tags=["health"], responses={503: {"model": Health}})
    def get_health(request: Request) -> JSONResponse:
        """Each backend's readiness and count, whether the vocabulary and graph are present, the
        index version and its filter fields. Open to all; with keys configured, the filter fields
        are those of the caller's key's tenants (none without a key)."""
        health = service.health()
        if keys is not None:
            key = keys.find(_bearer_token(request.headers.get("authorization", "")))
            health.filter_fields = (service.filter_fields(key.tenants) or {}) if key else {}
        return JSONResponse(health.model_dump(), status_code=200 if health.status == "ok" else 503)

    @app.exception_handler(StarletteHTTPException)  # FastAPI's, and Starlette's own (unknown route)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and isinstance(exc.__cause__, ValueError):
            # FastAPI's 400 for a body it cannot decode (not UTF-8): malformed JSON is a 422 everywhere.
            msg = f"not UTF-8 JSON: {exc.__cause__}"
            errors = [{"loc": ["body"], "msg": msg, "type": "json_invalid"}]
            return _error(422, f"body: {msg}", "RequestValidationError", errors=errors)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # the route that refused knows only its own methods
            headers["Allow"] = ", ".join(_allowed_methods(request))
        return _error(exc.status_code, str(exc.detail), HTTPStatus(exc.status_code).phrase, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        # One line per field, without echoing the (possibly huge or hostile) input back.
        errors = [
            {"loc": list(e["loc"]), "msg": str(e["msg"]).removeprefix("Value error, "), "type": e["type"]}
            for e in exc.errors()
        ]
        detail = "; ".join(f"{'.'.join(map(str, e['loc'][1:])) or 'body'}: {e['msg']}" for e in errors)
        return _error(422, detail, "RequestValidationError", errors=errors)

    return app


class _Quarantined(Exception):
    """Records of a POST /documents body that cleaning would quarantine (``batch``: the body was
    an array, so each is named by its index)."""

    def __init__(self, rejected: list[QuarantineRecord], batch: bool) -> None:
        self.reason = rejected[0].reason
        self.errors = [
            {
                "loc": ["body", record.line_number - 1] if batch and record.line_number else ["body"],
                "msg": record.detail or record.reason,
                "type": record.reason,
                **({"doc_id": record.doc_id} if record.doc_id else {}),
            }
            for record in rejected
        ]
        where = f"record {rejected[0].line_number - 1}: " if batch and rejected[0].line_number else ""
        more = f" (and {len(rejected) - 1} more; see errors)" if len(rejected) > 1 else ""
        self.detail = f"{where}{self.reason}: {rejected[0].detail or self.reason}{more}"
        super().__init__(self.detail)


_SEARCH_ERRORS: dict[int | str, dict[str, Any]] = {
    409: {
        "model": ErrorBody,
        "description": "the served index version cannot answer it: a strategy it does not serve, a filter field it "
        "does not have or a value the field's type cannot hold (GET /health lists its strategies and filter_fields)",
    },
    503: {"model": ErrorBody, "description": "no index is served yet (see GET /health)"},
}


_BEARER = HTTPBearer(auto_error=False, scheme_name="apiKey", description="an API key (`retrieval-assets api-key create`)")


# What a caller without a key may read: readiness and the contract.
OPEN_PATHS = frozenset({"/health", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})


class _KeyRequired:
    """ASGI middleware: a request without a known key is answered 401 before anything reads it,
    so that such a caller gets no other answer (no 422 about its body, no 404, no 405). The key
    goes to ``request.state.api_key`` for the routes' scope and rate checks."""

    def __init__(self, app: ASGIApp, keys: ApiKeys) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        try:
            key = self.keys.authenticate(_bearer_token(Headers(scope=scope).get("authorization", "")))
        except AuthError as exc:
            await _auth_error(exc)(scope, receive, send)
            return
        scope.setdefault("state", {})["api_key"] = key
        await self.app(scope, receive, send)


def _auth_error(exc: AuthError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
    if exc.retry_after is not None:
        headers["Retry-After"] = str(exc.retry_after)
    return _error(exc.status, exc.detail, HTTPStatus(exc.status).phrase, headers=headers)


def _bearer_token(authorization: str) -> str | None:
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def _authorizer(secured: bool) -> Callable[[Scope], Callable[..., ApiKey | None]]:
    """The dependency a route takes, per scope, to learn its caller's key (authenticated by
    ``_KeyRequired``) after checking the key's scope and rate; without keys, every caller is
    trusted (None)."""
    if not secured:

        async def trusted() -> None:
            return None

        return lambda _scope: trusted
    limiter = RateLimiter()

    def caller(scope: Scope) -> Callable[..., ApiKey]:
        # The bearer scheme is declared here, for the OpenAPI document; the middleware checked it.
        # Async (nothing here blocks), so that it costs no hop through the thread pool.
        async def authorized(
            request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)]
        ) -> ApiKey:
            key: ApiKey = request.state.api_key
            if not key.allows(scope):
                raise AuthError(403, f"key {key.id!r} lacks the {scope!r} scope")
            limiter.spend(key)
            return key

        return authorized

    return caller


def _granted(request: SearchRequest, key: ApiKey | None) -> SearchRequest:
    """The request within the key's tenants: naming another tenant is a 403, naming none searches
    all of the key's tenants (never every tenant)."""
    if key is None:
        return request
    if request.tenant_id is not None:
        key.check_tenant(request.tenant_id)
    return request.model_copy(update={"tenants": key.tenants})


def _error(status: int, detail: str, error: str, headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    body = ErrorBody(detail=detail, error=error, **extra).model_dump(exclude_none=True)
    return JSONResponse(body, status, headers=headers)


def _route_template(app: FastAPI, scope: ASGIScope) -> str | None:
    """The path template of the route that would answer ``scope``."""
    return next((route.path for route in app.router.routes if route.matches(scope)[0] is Match.FULL), None)


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route answers on the request's path."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        if route.matches(request.scope)[0] is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def _plain_filters(filters: dict[str, Any] | None) -> dict[str, Any] | None:
    """Validated filters as the core's filter spec (ranges as plain ``{gte, lte}`` mappings)."""
    if filters is None:
        return None
    return {k: v.model_dump(exclude_none=True) if isinstance(v, FilterRange) else v for k, v in filters.items()}


_INT64 = range(-(2**63), 2**63)


def _conflict(filters: dict[str, Any] | None, fields: dict[str, FieldType] | None) -> str | None:
    """Why well-formed ``filters`` cannot apply to the served version (a 409): a field it does not
    have, a value the field's type cannot hold, a range on a field that is not numeric."""
    if not filters or fields is None:
        return None
    for flt in parse_filters(filters):
        kind = fields.get(flt.field)
        if kind is None:
            return f"{flt.field!r} is not a filter field of the served index (see GET /health: {sorted(fields)})"
        if flt.any_of is None:
            if kind not in ("integer", "float"):
                return f"range filter on {flt.field!r}, a {kind} field"
            values: list[Any] = [bound for bound in (flt.gte, flt.lte) if bound is not None]
        else:
            try:
                values = coerce_filter_values(flt, kind)
            except FilterError as exc:
                return str(exc)
        if kind == "integer" and any(math.floor(v) not in _INT64 or math.ceil(v) not in _INT64 for v in values):
            return f"filter on {flt.field!r}: {values} is outside the range of an integer field"
    return None


def _parse_param(adapter: TypeAdapter[Any], text: str | None, name: str) -> Any:
    """A JSON-object query parameter, validated as its POST /search field is."""
    value = _json_object(text, name)
    if value is None:
        return None
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        raise RequestValidationError(
            [{"loc": ("query", name, *e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        ) from None


def _contract(openapi: dict[str, Any], secured: bool) -> dict[str, Any]:
    """The generated document, completed with what the server does beyond the routes' signatures."""
    json_error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for operations in openapi["paths"].values():
        for operation in operations.values():
            responses = operation["responses"]
            if secured and "security" in operation:
                responses.update(_auth_responses(json_error))
            if "requestBody" in operation:
                responses["413"] = {
                    "description": "request body too large (the body-limit middleware: plain text, JSON for a chunked body)",
                    "content": {"text/plain": {"schema": {"type": "string"}}, **json_error},
                }
            elif not operation.get("parameters"):
                responses.pop("422", None)  # nothing to validate
    stream = openapi["paths"]["/search/stream"]["get"]
    body = openapi["components"]["schemas"]["SearchBody"]["properties"]
    for parameter in stream["parameters"]:
        if parameter["name"] in ("filters", "context_metadata"):
            schema = body[parameter["name"]]
            schema = {**schema, **next(s for s in schema.get("anyOf", [schema]) if s.get("type") != "null")}
            schema.pop("anyOf", None)
            del parameter["schema"]
            parameter["description"] = f"a JSON object, as `{parameter['name']}` in POST /search"
            parameter["content"] = {"application/json": {"schema": schema}}
    for status, response in stream["responses"].items():
        if status != "200":
            response["content"] = json_error
    return openapi


def _auth_responses(json_error: dict[str, Any]) -> dict[str, Any]:
    header = {"schema": {"type": "string"}}
    return {
        "401": {
            "description": "no API key, or one the server does not know",
            "headers": {"WWW-Authenticate": header},
            "content": json_error,
        },
        "403": {"description": "the key lacks the route's scope, or names a tenant it is not granted", "content": json_error},
        "429": {
            "description": "the key is over its requests per minute; `Retry-After` says in how many seconds to retry",
            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
            "content": json_error,
        },
    }


def _json_object(text: str | None, name: str) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise HTTPException(422, f"{name} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise HTTPException(422, f"{name} must be a JSON object, got {type(value).__name__}")
    problem = _unstorable(value)
    if problem:
        raise HTTPException(422, f"{name}: {problem}")
    return value


def _unstorable(value: Any) -> str | None:
    """What Python's JSON parser accepts but JSON, Parquet and the engines do not: NaN and
    Infinity, and ``\\ud800``-style escapes that decode to lone UTF-16 surrogates."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a JSON number"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "a \\u escape encodes a lone UTF-16 surrogate, which is not text"
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        problem = (_unstorable(key) if isinstance(key, str) else None) or _unstorable(item)
        if problem:
            return problem
    return None


def _raw_row(body: bytes) -> RawRow:
    """The body as the catalog reader would see it as one line (BOM dropped, invalid UTF-8 flagged)."""
    body = body.removeprefix(b"\xef\xbb\xbf").strip()
    try:
        return RawRow(source="http", line_number=1, raw=body.decode("utf-8"))
    except UnicodeDecodeError:
        return RawRow(source="http", line_number=1, raw=body.decode("utf-8", errors="replace"), utf8_error=True)


def _reject_json_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _document_rows(body: bytes) -> tuple[list[RawRow], bool]:
    """The body's records as catalog rows, and whether the body was an array of them. Anything
    but a well-formed array is one record, which cleaning then judges (malformed_json, ...)."""
    row = _raw_row(body)
    if row.utf8_error or not row.raw.startswith("["):
        return [row], False
    try:
        records = json.loads(row.raw, parse_constant=_reject_json_constant)
    except (ValueError, RecursionError):
        return [row], False
    if not records:
        raise HTTPException(422, "the array holds no records")
    if len(records) > MAX_DOCUMENT_BATCH:
        raise HTTPException(422, f"at most {MAX_DOCUMENT_BATCH:,} records per request, got {len(records):,}")
    rows = [
        RawRow(source="http", line_number=n, raw=json.dumps(record, ensure_ascii=False))
        for n, record in enumerate(records, start=1)
    ]
    return rows, True


def _check_records(model: type[BaseModel], records: list[Any], batch: bool) -> None:
    """Refuse what cleaning takes but the published record schema does not, so that the schema
    is exactly what is accepted."""
    errors = []
    for index, record in enumerate(records):
        try:
            model.model_validate(record)
        except ValidationError as exc:
            where = ("body", index) if batch else ("body",)
            errors += [{"loc": (*where, *e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
    if errors:
        raise RequestValidationError(errors)


def _served_copy(hit: StoreHit) -> dict[str, Any]:
    """DocumentView's fields from the served index's first chunk of the document."""
    payload = dict(hit.payload)
    fields = {key: payload.pop(key) for key in ("doc_id", "tenant_id", "title", "text", "chunk_id")}
    payload.pop("section", None)
    return {**fields, "metadata": payload}


def _no_document(doc_id: str, tenant: str | None) -> HTTPException:
    # The same answer for another tenant's document as for none at all.
    return HTTPException(404, f"no document {doc_id!r}" + (f" for tenant {tenant!r}" if tenant else ""))

"""The search routes: ``POST /search`` and ``GET /search/stream`` (Server-Sent Events).

Both validate a request, bound it to the caller's tenants, refuse (409) what the served version
cannot answer (a strategy it does not serve, a filter field it does not have or a value the
field's type cannot hold), and run it through the service, as the evaluation did.
"""

import json
import math
import time
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import TypeAdapter, ValidationError

from retrieval_assets.core.models import RetrievalResult, SearchRequest
from retrieval_assets.core.retrieval.plan import tenant_scope
from retrieval_assets.core.retrieval.service import UNAVAILABLE_ERRORS, SearchService
from retrieval_assets.core.stores.base import FieldType, coerce_filter_values
from retrieval_assets.core.stores.filters import FilterError, parse_filters
from retrieval_assets.serving.auth import ApiKey, Authorizer, granted
from retrieval_assets.serving.metrics import ServingMetrics
from retrieval_assets.serving.schemas import (
    CONTEXT_METADATA_ADAPTER,
    FILTERS_ADAPTER,
    MAX_SEARCH_BODY_BYTES,
    ErrorBody,
    FilterRange,
    SearchBody,
    StreamParams,
    unstorable,
)

SEARCH_ERRORS: dict[int | str, dict[str, Any]] = {
    409: {
        "model": ErrorBody,
        "description": "the served index version cannot answer it: a strategy it does not serve, a filter field it "
        "does not have or a value the field's type cannot hold (GET /health lists its strategies and filter_fields)",
    },
    503: {"model": ErrorBody, "description": "no index is served yet (see GET /health)"},
}


def search_routes(service: SearchService, metrics: ServingMetrics, caller: Authorizer) -> APIRouter:
    """``POST /search`` and ``GET /search/stream`` over ``service``."""
    router = APIRouter()

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

    @router.post(
        "/search",
        response_model=RetrievalResult,
        tags=["search"],
        responses=SEARCH_ERRORS,
        max_body_size=MAX_SEARCH_BODY_BYTES,
    )
    def post_search(body: SearchBody, key: Annotated[ApiKey | None, Depends(caller("search"))]) -> Response:
        """Hybrid search; the result carries each hit's per-strategy scores and ranks."""
        result = _search(granted(body.to_request(_plain_filters(body.filters), body.context_metadata), key))
        # Serialised here, once: the result is built from validated parts, and validating it
        # again on the way out (FastAPI's response_model) cost more than the search's fusion.
        started = time.perf_counter()
        content = result.model_dump_json()
        metrics.observe_serialisation(time.perf_counter() - started)
        return Response(content, media_type="application/json")

    def stream_result(
        key: Annotated[ApiKey | None, Depends(caller("search"))], params: Annotated[StreamParams, Query()]
    ) -> RetrievalResult:
        filters = _parse_param(FILTERS_ADAPTER, params.filters, "filters")
        context_metadata = _parse_param(CONTEXT_METADATA_ADAPTER, params.context_metadata, "context_metadata") or {}
        return _search(granted(params.to_request(_plain_filters(filters), context_metadata), key))

    # Its error answers are JSON, not events: the OpenAPI contract documents them so.
    @router.get(
        "/search/stream",
        response_class=EventSourceResponse,
        tags=["search"],
        responses=SEARCH_ERRORS,
        max_body_size=MAX_SEARCH_BODY_BYTES,
    )
    def get_search_stream(result: Annotated[RetrievalResult, Depends(stream_result)]) -> Iterator[ServerSentEvent]:
        """Server-Sent Events: ``meta`` (query, strategies, fusion, count, timings), one ``hit`` per hit, ``done``."""
        # The search runs in the dependency, so a bad request is a 422 before the stream opens.
        meta = result.model_dump(exclude={"hits"}) | {"count": len(result.hits)}
        yield ServerSentEvent(event="meta", data=meta)
        for rank, hit in enumerate(result.hits, start=1):
            yield ServerSentEvent(event="hit", id=str(rank), data={"rank": rank, **hit.model_dump()})
        yield ServerSentEvent(event="done", data={"count": len(result.hits)})

    return router


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



def _json_object(text: str | None, name: str) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise HTTPException(422, f"{name} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise HTTPException(422, f"{name} must be a JSON object, got {type(value).__name__}")
    problem = unstorable(value)
    if problem:
        raise HTTPException(422, f"{name}: {problem}")
    return value


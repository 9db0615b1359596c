"""The operations routes: ``GET /health`` (readiness, open to all) and ``GET /metrics`` (Prometheus, admin scope)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from retrieval_assets.core.retrieval.service import Health, SearchService
from retrieval_assets.serving.auth import ApiKey, ApiKeys, Authorizer, bearer_token
from retrieval_assets.serving.metrics import ServingMetrics


def operation_routes(
    service: SearchService, metrics: ServingMetrics, caller: Authorizer, keys: ApiKeys | None
) -> APIRouter:
    """``GET /metrics`` and ``GET /health`` over ``service``; with ``keys``, health's filter
    fields are those of the caller's key's tenants."""
    router = APIRouter()

    @router.get(
        "/metrics",
        tags=["health"],
        response_class=PlainTextResponse,
        responses={
            200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text format"}
        },
    )
    def get_metrics(_: Annotated[ApiKey | None, Depends(caller("admin"))]) -> Response:
        """Requests by route and status, latency, searches running and waiting, rejections, each search
        stage's time, and retrieval signals (candidates per strategy, fused scores, rerank moves,
        expansion terms and retries); process CPU and memory. Needs the admin scope."""
        content, media_type = metrics.render()
        return Response(content, media_type=media_type)

    @router.get("/health", response_model=Health, tags=["health"], responses={503: {"model": Health}})
    def get_health(request: Request) -> JSONResponse:
        """Each backend's readiness and count, whether the vocabulary and graph are present, the
        index version and its filter fields. Open to all; with keys configured, the filter fields
        are those of the caller's key's tenants (none without a key)."""
        health = service.health()
        if keys is not None:
            key = keys.find(bearer_token(request.headers.get("authorization", "")))
            health.filter_fields = (service.filter_fields(key.tenants) or {}) if key else {}
        return JSONResponse(health.model_dump(), status_code=200 if health.status == "ok" else 503)

    return router

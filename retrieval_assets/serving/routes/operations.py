"""The operations routes: ``GET /health`` (readiness; open to all, details with a key) and
``GET /metrics`` (Prometheus, admin scope)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from retrieval_assets.core.retrieval.service import Health, SearchService
from retrieval_assets.serving.auth import ApiKey, ApiKeys, Authorizer, bearer_token
from retrieval_assets.serving.metrics import ServingMetrics


def operation_routes(
    service: SearchService, metrics: ServingMetrics, caller: Authorizer, keys: ApiKeys | None
) -> APIRouter:
    """``GET /metrics`` and ``GET /health`` over ``service``; with ``keys``, health says what
    the caller's key may know (``get_health``)."""
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
        """Whether the service is up and which index version serves; open to all. With keys
        configured, only a caller with a key is told more: each backend's readiness and model,
        vocabulary and graph, and the filter fields of its key's tenants; chunk counts, which
        are every tenant's, only with the admin scope."""
        health = service.health()
        if keys is not None:
            key = keys.find(bearer_token(request.headers.get("authorization", "")))
            if key is None:
                health = health.public()
            else:
                health.filter_fields = service.filter_fields(key.tenants) or {}
                if not key.allows("admin"):
                    health = health.without_counts()
        body = {"version": None, **health.model_dump(exclude_none=True)}  # "no version serves" is said too
        return JSONResponse(body, status_code=200 if health.status == "ok" else 503)

    return router

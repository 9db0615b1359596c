"""How the HTTP API answers what goes wrong: every error is an ``ErrorBody`` JSON answer.

The exception handlers turn the core's ``ValueError``s (bad control tags, filters) into 422s,
quarantined posted records into a 422 naming each one, FastAPI's and Starlette's HTTP errors into
JSON (405s with ``Allow``, an undecodable body as a 422), and validation errors into one line
per field without echoing the input back.
"""

from collections.abc import Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from retrieval_assets.core.models import QuarantineRecord
from retrieval_assets.serving.schemas import ErrorBody


def error_response(
    status: int, detail: str, error: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    body = ErrorBody(detail=detail, error=error, **extra).model_dump(exclude_none=True)
    return JSONResponse(body, status, headers=headers)


class Quarantined(Exception):
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


def _allowed_methods(routes: Sequence[BaseRoute], request: Request) -> list[str]:
    """Every method some route answers on the request's path."""
    methods: set[str] = set()
    for route in routes:
        if route.matches(request.scope)[0] is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def install_error_handlers(app: FastAPI, routes: Sequence[BaseRoute]) -> None:
    """The app's exception handlers; ``routes``, every route the app serves, name a 405's ``Allow``."""

    @app.exception_handler(ValueError)
    async def bad_request(_: Request, exc: ValueError) -> JSONResponse:
        # The core raises ValueError subclasses (ControlTagError, FilterError) for requests it cannot answer.
        return error_response(422, str(exc), type(exc).__name__)

    @app.exception_handler(Quarantined)
    async def quarantined(_: Request, exc: Quarantined) -> JSONResponse:
        return error_response(422, exc.detail, "QuarantinedRecord", reason=exc.reason, errors=exc.errors)

    @app.exception_handler(StarletteHTTPException)  # FastAPI's, and Starlette's own (unknown route)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # the route that refused knows only its own methods
            headers["Allow"] = ", ".join(_allowed_methods(routes, request))
        return error_response(exc.status_code, str(exc.detail), HTTPStatus(exc.status_code).phrase, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        # One line per field, without echoing the (possibly huge or hostile) input back.
        errors = [
            {"loc": list(e["loc"]), "msg": str(e["msg"]).removeprefix("Value error, "), "type": e["type"]}
            for e in exc.errors()
        ]
        detail = "; ".join(f"{'.'.join(map(str, e['loc'][1:])) or 'body'}: {e['msg']}" for e in errors)
        return error_response(422, detail, "RequestValidationError", errors=errors)

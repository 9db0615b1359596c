"""The OpenAPI document, completed with what the server does beyond the routes' signatures.

The document is the contract (``test_openapi_contract`` runs schemathesis over it): every answer
an operation gives is in its ``responses``, the key answers (401, 403, 429), the body limit's
413, the header limits' 431 and the document writes' 503 included, and the stream's JSON-object
parameters are described as JSON.
"""

from typing import Any

from fastapi import FastAPI


def install_contract(app: FastAPI, secured: bool) -> None:
    """Serve the completed document as ``app``'s OpenAPI document (built once, on first use)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _contract(FastAPI.openapi(app), secured)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _contract(openapi: dict[str, Any], secured: bool) -> dict[str, Any]:
    """The generated document, completed with what the server does beyond the routes' signatures."""
    json_error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for path, operations in openapi["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            if secured and "security" in operation:
                responses.update(_auth_responses(json_error))
            responses["431"] = {
                "description": "more than 100 header fields, or more than 16,384 bytes of them",
                "content": json_error,
            }
            if path.startswith("/documents") and method in ("post", "delete"):
                responses["503"] = {
                    "description": "document writes are at capacity; `Retry-After` says in how many seconds to retry",
                    "headers": {"Retry-After": {"schema": {"type": "integer"}}},
                    "content": json_error,
                }
            if "requestBody" in operation:
                responses["413"] = {
                    "description": "request body too large "
                    "(the body-limit middleware: plain text, JSON for a chunked body)",
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
        "403": {
            "description": "the key lacks the route's scope, or names a tenant it is not granted",
            "content": json_error,
        },
        "429": {
            "description": "the key is over its requests per minute; `Retry-After` says in how many seconds to retry",
            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
            "content": json_error,
        },
    }

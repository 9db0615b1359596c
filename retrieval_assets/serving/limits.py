"""Bounds every request meets before a route sees it: its headers, and a body that is UTF-8.

* Headers: at most ``MAX_HEADERS`` fields and ``MAX_HEADER_BYTES`` bytes of names and values
  together (16 KiB, Node's and h11's default); past either, 431.
* Bodies: JSON here is UTF-8 (RFC 8259, section 8.1). Python's ``json.loads`` also takes UTF-16
  and UTF-32 bytes, so without this check such a body would be searched; it is a 422 instead,
  with the reason a posted record that is not UTF-8 is quarantined for (``invalid_utf8``).
  A body larger than ``max_body_bytes`` is passed on unread for its route to refuse (413).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from retrieval_assets.serving.asgi import body_bytes, read_body, replaying, send_json

MAX_HEADERS = 100
MAX_HEADER_BYTES = 16_384
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class RequestLimits:
    """ASGI middleware: 431 past the header bounds, 422 for a body that is not UTF-8."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope["headers"]
        size = sum(len(name) + len(value) for name, value in headers)
        if len(headers) > MAX_HEADERS or size > MAX_HEADER_BYTES:
            detail = (
                f"{len(headers)} header fields of {size:,} bytes: at most {MAX_HEADERS} fields "
                f"and {MAX_HEADER_BYTES:,} bytes are read"
            )
            await send_json(send, 431, detail, "Request Header Fields Too Large")
            return
        if scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        messages, complete = await read_body(receive, self.max_body_bytes)
        if complete:
            try:
                body_bytes(messages).decode("utf-8")
            except UnicodeDecodeError as exc:
                detail = f"the request body is not UTF-8 (byte {exc.start}): send JSON encoded as UTF-8"
                await send_json(send, 422, detail, "Unprocessable Entity", reason="invalid_utf8")
                return
        await self.app(scope, replaying(messages, receive), send)

"""What the pure ASGI middlewares share: reading a body whole and handing it on, and answering JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence

from starlette.types import Message, Receive, Send


async def read_body(receive: Receive, limit: int) -> tuple[list[Message], bool]:
    """The request's body messages, and False once they pass ``limit`` bytes (reading stops)."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, True  # a disconnect: the app sees it and answers no one
        size += len(message.get("body", b""))
        if size > limit:
            return messages, False
        if not message.get("more_body", False):
            return messages, True


def body_bytes(messages: Sequence[Message]) -> bytes:
    return b"".join(message.get("body", b"") for message in messages if message["type"] == "http.request")


def replaying(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that hands out ``messages`` first, then what the client sends next."""
    pending = list(messages)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay


async def send_json(
    send: Send,
    status: int,
    detail: str,
    error: str,
    headers: Sequence[tuple[bytes, bytes]] = (),
    reason: str | None = None,
) -> None:
    """An error answer shaped as the app's own (``ErrorBody``: ``detail``, ``error``, ``reason``)."""
    body = json.dumps({"detail": detail, "error": error, **({"reason": reason} if reason else {})}).encode()
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})

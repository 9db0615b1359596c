"""Overload control (serving/admission.py) as ASGI: bounded running and waiting searches, 503 past
them at once, hung-up clients leave the queue, bodies reach the app unchanged."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from retrieval_assets.serving.admission import Admission, AdmissionLimits
from retrieval_assets.serving.app import WRITE_LIMITS, is_document_write, is_search

LIMIT = 1_000


class _App:
    """Records each request's body; holds every request until ``release`` is set."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.release = asyncio.Event()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


class _Client:
    """One request: its body in ``chunks``; ``hang_up`` makes its next receive a disconnect."""

    def __init__(self, gate: Admission, *chunks: bytes, path: str = "/search", method: str = "POST") -> None:
        self.scope = {"type": "http", "method": method, "path": path, "headers": []}
        self.messages = [
            {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1} for i, chunk in enumerate(chunks)
        ]
        self.hung_up = asyncio.Event()
        self.sent: list[dict] = []
        self.task = asyncio.ensure_future(gate(self.scope, self._receive, self._send))

    async def _receive(self) -> dict:
        if self.messages:
            return self.messages.pop(0)
        await self.hung_up.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int | None:
        return next((m["status"] for m in self.sent if m["type"] == "http.response.start"), None)

    def header(self, name: bytes) -> bytes | None:
        start = next(m for m in self.sent if m["type"] == "http.response.start")
        return dict(start["headers"]).get(name)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _gate(
    app: _App,
    concurrency: int,
    queue_depth: int,
    states: list[tuple[int, int]],
    rejections: list[int],
    applies: Any = is_search,
):
    return Admission(
        app,
        limits=AdmissionLimits(concurrency, queue_depth),
        applies=applies,
        max_body_bytes=LIMIT,
        on_change=lambda running, waiting: states.append((running, waiting)),
        on_reject=lambda: rejections.append(1),
    )


def test_past_the_queue_a_search_is_503_at_once_and_the_queue_drains_in_order() -> None:
    async def scenario() -> None:
        app, states, rejections = _App(), [], []
        gate = _gate(app, 1, 1, states, rejections)
        first, second = _Client(gate, b'{"query": "a"}'), _Client(gate, b'{"query": "b"}')
        await _settle()
        assert (gate.running, len(gate.waiting)) == (1, 1) and app.bodies == [b'{"query": "a"}']
        third = _Client(gate, b'{"query": "c"}')
        await third.task  # answered without waiting for anything
        assert third.status == 503 and third.header(b"retry-after") == b"1" and rejections == [1]
        app.release.set()
        await asyncio.gather(first.task, second.task)
        assert [first.status, second.status] == [200, 200] and app.bodies[1] == b'{"query": "b"}'
        assert (gate.running, len(gate.waiting)) == (0, 0) and states[-1] == (0, 0)

    asyncio.run(scenario())


def test_a_client_that_hangs_up_while_waiting_leaves_the_queue() -> None:
    async def scenario() -> None:
        app, states, rejections = _App(), [], []
        gate = _gate(app, 1, 1, states, rejections)
        running, waiting = _Client(gate, b"a"), _Client(gate, b"b")
        await _settle()
        waiting.hung_up.set()
        await waiting.task
        assert waiting.sent == [] and len(gate.waiting) == 0  # never searched, slot freed
        after = _Client(gate, b"c")  # the queue has room again: no 503
        await _settle()
        app.release.set()
        await asyncio.gather(running.task, after.task)
        assert app.bodies == [b"a", b"c"] and rejections == [] and after.status == 200

    asyncio.run(scenario())


def test_bodies_reach_the_app_whole_and_an_oversized_one_skips_the_queue() -> None:
    async def scenario() -> None:
        app, states, rejections = _App(), [], []
        app.release.set()
        gate = _gate(app, 1, 0, states, rejections)
        chunked = _Client(gate, b'{"query": ', b'"split"}')
        await chunked.task
        oversized = _Client(gate, b"x" * (LIMIT + 1), b"tail")
        other_route = _Client(gate, b"doc", path="/documents")
        await asyncio.gather(oversized.task, other_route.task)
        assert app.bodies == [b'{"query": "split"}', b"x" * (LIMIT + 1) + b"tail", b"doc"]
        assert states == [(1, 0), (0, 0)]  # only the chunked search took a slot

    asyncio.run(scenario())


@pytest.mark.parametrize(("concurrency", "queue_depth"), [(0, 1), (1, -1)])
def test_limits_are_checked(concurrency: int, queue_depth: int) -> None:
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        AdmissionLimits(concurrency, queue_depth)


def test_by_default_one_search_runs_per_core_the_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    from retrieval_assets.core.embed import device
    from retrieval_assets.serving.app import default_limits

    monkeypatch.setattr(device.os, "sched_getaffinity", lambda _pid: {0, 2, 5})
    assert default_limits() == AdmissionLimits(concurrency=3, queue_depth=64)


def test_document_writes_queue_on_their_own_and_reads_pass() -> None:
    """Posts and deletes take the write slots (one running, a few waiting, then 503 at once);
    reading a document's status and searching never wait behind them."""

    async def scenario() -> None:
        app, states, rejections = _App(), [], []
        limits = WRITE_LIMITS
        gate = _gate(app, limits.concurrency, limits.queue_depth, states, rejections, applies=is_document_write)
        writes = [_Client(gate, b"[]", path="/documents") for _ in range(limits.concurrency)]
        writes += [_Client(gate, b"", path="/documents/x", method="DELETE") for _ in range(limits.queue_depth)]
        await _settle()
        assert (gate.running, len(gate.waiting)) == (limits.concurrency, limits.queue_depth)
        refused = _Client(gate, b"[]", path="/documents")
        await refused.task
        assert refused.status == 503 and refused.header(b"retry-after") == b"1" and rejections == [1]
        reads = [_Client(gate, b"", path="/documents/x", method="GET"), _Client(gate, b"{}", path="/search")]
        await _settle()
        assert len(app.bodies) == limits.concurrency + len(reads)  # the reads ran beside the write
        app.release.set()
        await asyncio.gather(*(client.task for client in writes + reads))
        assert {client.status for client in writes + reads} == {200} and states[-1] == (0, 0)

    asyncio.run(scenario())

"""Overload control: a bounded number running, a bounded queue, 503 past it.

One ``Admission`` guards the searches and another the document writes. At most ``concurrency``
requests of its kind run at once; up to ``queue_depth`` more wait in arrival order. A request
that finds the queue full is answered 503 with ``Retry-After`` at once, rather than waiting
behind work the machine cannot finish in time. A client that hangs up while it waits leaves the
queue (its slot goes to the next one) instead of being served for nobody.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from retrieval_assets.serving.asgi import read_body, replaying, send_json

RETRY_AFTER_SECONDS = 1


@dataclass(frozen=True)
class AdmissionLimits:
    concurrency: int
    queue_depth: int

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.queue_depth < 0:
            raise ValueError("concurrency must be at least 1 and queue_depth at least 0")


class Admission:
    """ASGI middleware over the requests ``applies`` to; ``on_change(running, waiting)`` and
    ``on_reject()`` report to the metrics."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limits: AdmissionLimits,
        applies: Callable[[Scope], bool],
        max_body_bytes: int,
        on_change: Callable[[int, int], None] = lambda running, waiting: None,
        on_reject: Callable[[], None] = lambda: None,
    ) -> None:
        self.app = app
        self.limits = limits
        self.applies = applies
        self.max_body_bytes = max_body_bytes
        self.on_change = on_change
        self.on_reject = on_reject
        self.running = 0
        self.waiting: list[asyncio.Future[None]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.applies(scope):
            await self.app(scope, receive, send)
            return
        if self.running >= self.limits.concurrency and len(self.waiting) >= self.limits.queue_depth:
            self.on_reject()
            await _overloaded(send)
            return
        # The body is read before waiting, so that while the request waits, the only thing the
        # client can still send is its hang-up.
        body, complete = await read_body(receive, self.max_body_bytes)
        replay = replaying(body, receive)
        if not complete:  # too large: the app answers 413 without doing the work
            await self.app(scope, replay, send)
            return
        if not await self._admit(receive):
            return  # the client hung up while it waited
        try:
            await self.app(scope, replay, send)
        finally:
            self._release()

    async def _admit(self, receive: Receive) -> bool:
        if self.running < self.limits.concurrency and not self.waiting:
            self.running += 1
            self._report()
            return True
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(turn)
        self._report()
        hang_up = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait({turn, hang_up}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hang_up.cancel()
        if turn.done():
            return True  # _release handed its slot over: running is unchanged
        self.waiting.remove(turn)
        self._report()
        return False

    def _release(self) -> None:
        while self.waiting:
            turn = self.waiting.pop(0)
            if not turn.done():
                turn.set_result(None)  # the slot passes on
                self._report()
                return
        self.running -= 1
        self._report()

    def _report(self) -> None:
        self.on_change(self.running, len(self.waiting))


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _overloaded(send: Send) -> None:
    await send_json(
        send,
        503,
        "the server is at capacity: retry after the Retry-After seconds",
        "Service Unavailable",
        [(b"retry-after", str(RETRY_AFTER_SECONDS).encode())],
    )

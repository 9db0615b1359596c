"""Micro-batching of query encoding: concurrent requests share one model call.

``BatchingDenseEncoder`` and ``BatchingSparseEncoder`` wrap an encoder and implement the same
port. ``encode_queries`` calls from many threads are queued; the caller at the head of the queue
(the *leader*) encodes every queued text in one call of the wrapped encoder and hands each
caller its rows. There is no worker thread: a lone caller finds no leader, leads at once and
encodes its own query in its own thread, so a single-threaded caller pays a lock, not a wait.
Callers that arrive while a call runs queue up and go together in the next one, led by the
oldest of them.

``max_wait_ms`` bounds how long a request waits for company it would not otherwise have had: a
caller that leads at once while the encoder has recently been shared (another batch had company
less than a second ago) waits up to ``max_wait_ms`` from its arrival, or until ``max_batch``
texts are queued, before calling the model; no request waits for company longer than that after
it arrived. ``max_wait_ms=0`` turns batching off: the ``batching_*`` factories return the plain
encoder.

Only encoders whose vectors do not depend on their batch company are batched (an encoder says
so with ``query_batches_exact``): the default bge-small, dequantised to fp32 at load time, to
the bit; SPLADE and sentence-transformers models with masked padding to ~1e-6. An INT8 ONNX
graph run as shipped (the "-int8" names) does not: a shared run shares its dynamic activation
scales, and the factories return it as it is (docs/http-api.md "Query micro-batching"). Nor is
an encoder for which a shared call saves nothing (``query_batching_pays`` false): the exact
bge-small on CPU cost as much per query in a batch of 8 as alone, and one shared call runs on
one thread where lone queries of concurrent searches run on all cores.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from retrieval_assets.core.embed.base import DenseEncoder, ProgressCallback, SparseEncoder
from retrieval_assets.core.models import SparseVector

Row = TypeVar("Row")

# A batch with company this recently means requests are arriving concurrently: a caller that
# leads at once may then wait up to max_wait_ms for others.
_COMPANY_WINDOW_S = 1.0


class BatcherClosedError(RuntimeError):
    """A query was submitted to a closed batcher."""


class _Request(Generic[Row]):
    __slots__ = ("arrived", "error", "leads", "ready", "rows", "texts")

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.arrived = time.monotonic()
        self.ready = threading.Event()  # set once: promoted to leader, or answered
        self.leads = False
        self.rows: list[Row] | None = None
        self.error: BaseException | None = None


class QueryBatcher(Generic[Row]):
    """Runs ``encode(texts) -> rows`` (one row per text, in order) for many threads at once, one
    call per batch of queued requests; see the module docstring for when a batch starts."""

    def __init__(self, encode: Callable[[list[str]], Sequence[Row]], *, max_wait_ms: float, max_batch: int) -> None:
        if max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, not {max_wait_ms}")
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, not {max_batch}")
        self._encode = encode
        self.max_wait_s = max_wait_ms / 1000
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._arrival = threading.Condition(self._lock)  # a leader gathering company waits on it
        self._queue: deque[_Request[Row]] = deque()
        self._leading = False  # a leader is gathering or encoding; it hands over when done
        self._closed = False
        self._company_at = float("-inf")  # when a batch last held more than one request
        self.calls = 0  # model calls made, and the texts they held: what batching saved
        self.texts = 0

    def __call__(self, texts: Sequence[str]) -> list[Row]:
        request: _Request[Row] = _Request(list(texts))
        with self._lock:
            if self._closed:
                raise BatcherClosedError("the query batcher is closed")
            self._queue.append(request)
            if self._leading:
                self._arrival.notify()
            else:
                self._leading = request.leads = True
        if not request.leads:
            try:
                request.ready.wait()
            except BaseException:  # interrupted (KeyboardInterrupt in the main thread): leave no one stuck
                self._abandon(request)
                raise
        if request.leads:  # at once, or handed over by the previous leader
            self._lead(request)
        if request.error is not None:
            raise request.error
        assert request.rows is not None
        return request.rows

    def _lead(self, leader: _Request[Row]) -> None:
        with self._lock:
            # The leader is at the head of the queue: it either found no leader (and so an empty
            # queue) or was handed over to as the oldest waiting request.
            deadline = leader.arrived + self.max_wait_s
            if self.max_wait_s > 0 and time.monotonic() - self._company_at < _COMPANY_WINDOW_S:
                try:
                    while not self._closed and self._queued_texts() < self.max_batch:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        self._arrival.wait(remaining)
                except BaseException:  # interrupted while gathering: the lead passes on
                    successor = self._drop(leader)
                    if successor is not None:
                        successor.ready.set()
                    raise
            batch = [self._queue.popleft()]
            size = len(batch[0].texts)
            while self._queue and size + len(self._queue[0].texts) <= self.max_batch:
                size += len(self._queue[0].texts)
                batch.append(self._queue.popleft())
        try:
            rows = list(self._encode([text for request in batch for text in request.texts]))
            if len(rows) != size:
                raise RuntimeError(f"the encoder returned {len(rows)} rows for {size} texts")
            start = 0
            for request in batch:
                request.rows = rows[start : start + len(request.texts)]
                start += len(request.texts)
        except BaseException as exc:  # noqa: BLE001 - every caller in the batch hears of it; the next batch runs
            for request in batch:
                request.error = exc
        finally:
            with self._lock:
                self.calls += 1
                self.texts += size
                if len(batch) > 1 or self._queue:
                    self._company_at = time.monotonic()
                successor = self._queue[0] if self._queue else None
                if successor is not None:
                    successor.leads = True
                else:
                    self._leading = False
            for request in batch:
                if request is not leader:
                    request.ready.set()
            if successor is not None:
                successor.ready.set()

    def _abandon(self, request: _Request[Row]) -> None:
        """Take an interrupted caller's request out of the queue; if it had just been made leader,
        the lead passes to the next request."""
        with self._lock:
            successor = self._drop(request)
        if successor is not None:
            successor.ready.set()

    def _drop(self, request: _Request[Row]) -> _Request[Row] | None:
        """With the lock held: ``request`` leaves the queue (unless it is in a batch being encoded:
        its rows then go unread); if it led, the next request leads and is returned, to be woken."""
        if request not in self._queue:
            return None
        self._queue.remove(request)
        if not request.leads:
            return None
        if not self._queue:
            self._leading = False
            return None
        self._queue[0].leads = True
        return self._queue[0]

    def _queued_texts(self) -> int:
        return sum(len(request.texts) for request in self._queue)

    def close(self) -> None:
        """Refuse new queries. Queued ones are still answered (their callers lead in turn), and a
        leader gathering company stops waiting."""
        with self._lock:
            self._closed = True
            self._arrival.notify_all()


class BatchingDenseEncoder(DenseEncoder):
    """A dense encoder whose ``encode_queries`` calls share model runs; documents go straight through."""

    def __init__(self, inner: DenseEncoder, *, max_wait_ms: float, max_batch: int) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.dim = inner.dim

        def encode(texts: list[str]) -> list[np.ndarray]:
            return list(inner.encode_queries(texts))

        self.batcher: QueryBatcher[np.ndarray] = QueryBatcher(encode, max_wait_ms=max_wait_ms, max_batch=max_batch)

    def encode_documents(self, texts: Sequence[str], progress: ProgressCallback | None = None) -> np.ndarray:
        return self.inner.encode_documents(texts, progress)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return self.inner.encode_queries(texts)
        return np.stack(self.batcher(texts))

    def __getattr__(self, name: str) -> Any:  # max_length, device, ... of the wrapped encoder
        if name == "inner":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def close(self) -> None:
        self.batcher.close()


class BatchingSparseEncoder(SparseEncoder):
    """A sparse encoder whose ``encode_queries`` calls share model runs; documents go straight through."""

    def __init__(self, inner: SparseEncoder, *, max_wait_ms: float, max_batch: int) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.vocab_size = inner.vocab_size
        self.batcher: QueryBatcher[SparseVector] = QueryBatcher(
            inner.encode_queries, max_wait_ms=max_wait_ms, max_batch=max_batch
        )

    def encode_documents(self, texts: Sequence[str], progress: ProgressCallback | None = None) -> list[SparseVector]:
        return self.inner.encode_documents(texts, progress)

    def encode_queries(self, texts: Sequence[str]) -> list[SparseVector]:
        if not texts:
            return []
        return self.batcher(texts)

    def id_to_term(self, term_id: int) -> str:
        return self.inner.id_to_term(term_id)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def close(self) -> None:
        self.batcher.close()


def batching_dense_encoder(encoder: DenseEncoder, *, max_wait_ms: float, max_batch: int) -> DenseEncoder:
    """``encoder`` behind a micro-batcher; ``encoder`` itself when ``max_wait_ms`` is 0, its
    vectors would move with their batch company, or a shared call would not save work."""
    if (
        max_wait_ms == 0
        or not _batches_exactly(encoder)
        or not getattr(encoder, "query_batching_pays", True)
        or isinstance(encoder, BatchingDenseEncoder)
    ):
        return encoder
    return BatchingDenseEncoder(encoder, max_wait_ms=max_wait_ms, max_batch=max_batch)


def batching_sparse_encoder(encoder: SparseEncoder, *, max_wait_ms: float, max_batch: int) -> SparseEncoder:
    """``encoder`` behind a micro-batcher; ``encoder`` itself when ``max_wait_ms`` is 0 or its
    vectors would move with their batch company."""
    if max_wait_ms == 0 or not _batches_exactly(encoder) or isinstance(encoder, BatchingSparseEncoder):
        return encoder
    return BatchingSparseEncoder(encoder, max_wait_ms=max_wait_ms, max_batch=max_batch)


def _batches_exactly(encoder: object) -> bool:
    # An encoder that does not say is trusted: the port's contract is one vector per text.
    return bool(getattr(encoder, "query_batches_exact", True))

"""What the server adapters (Qdrant, OpenSearch) share: retries with backoff, build versions."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from retrieval_assets.core.models import SparseVector

logger = logging.getLogger(__name__)
T = TypeVar("T")


class ServerUnavailableError(RuntimeError):
    """A server kept failing with transient errors until the retries ran out."""


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff for transient server errors: wait ``initial_backoff_s * 2**attempt``
    (at most ``max_backoff_s``, at least what the server asked for), ``max_retries`` times."""

    max_retries: int = 5
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    sleep: Callable[[float], None] = time.sleep

    def delay(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.initial_backoff_s * 2**attempt)

    def run(self, call: Callable[[], T], retry_after: Callable[[Exception], float | None], what: str) -> T:
        """``call()``, retried while ``retry_after(error)`` gives a wait (None: not retryable)."""
        for attempt in itertools.count():
            try:
                return call()
            except Exception as exc:
                wait = retry_after(exc)
                if wait is None:
                    raise
                if attempt >= self.max_retries:
                    raise ServerUnavailableError(
                        f"{what} still failing after {self.max_retries} retries: {type(exc).__name__}: {exc}"
                    ) from exc
                delay = max(wait, self.delay(attempt))
                logger.warning(
                    "%s failed (%s: %s); retry %d of %d in %.1f s",
                    what, type(exc).__name__, exc, attempt + 1, self.max_retries, delay,
                )
                self.sleep(delay)
        raise AssertionError("unreachable")


def new_version() -> str:
    """A sortable, index-name-safe build version (UTC, microseconds)."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-%f")


def merge_sparse(vector: SparseVector) -> SparseVector:
    """``vector`` with each repeated index once, its values summed (first-occurrence order).

    Qdrant rejects a sparse vector whose indices repeat ("must be unique"); OpenSearch's
    ``rank_features`` keeps one value per feature. Both adapters merge through this function,
    so a repeated term id means the same thing (the sum of its weights) on both servers."""
    if len(set(vector.indices)) == len(vector.indices):
        return vector
    merged: dict[int, float] = {}
    for index, value in zip(vector.indices, vector.values, strict=True):
        merged[index] = merged.get(index, 0.0) + float(value)
    return SparseVector(indices=list(merged), values=list(merged.values()))


def strongest_terms(vector: SparseVector, limit: int | None) -> tuple[SparseVector, dict[str, float]]:
    """``vector`` (repeated indices merged) cut to its ``limit`` heaviest terms, and what the cut
    left out ({} when nothing was cut): an engine with a clause limit takes no more terms."""
    merged = merge_sparse(vector)
    if limit is None or len(merged.indices) <= limit:
        return merged, {}
    ranked = sorted(zip(merged.indices, merged.values, strict=True), key=lambda term: (-term[1], term[0]))
    kept, dropped = ranked[:limit], ranked[limit:]
    note = {
        "terms": len(ranked),
        "terms_sent": len(kept),
        "terms_dropped": len(dropped),
        "weight_dropped": float(sum(weight for _, weight in dropped)),
    }
    return SparseVector(indices=[i for i, _ in kept], values=[w for _, w in kept]), note

"""Whether a query's encoding runs alone, so it may use every core.

On CPU a query is encoded on one thread: beside it run the other strategies' searches and the
other callers' queries. A search that runs a single strategy while no other search is in flight
has the machine to itself; the retriever says so here, and an encoder that can use more threads
for one call (``OnnxDenseEncoder``) does. The vectors are the same either way (intra-op threads
split a product's rows, not its sums; measured equal bit for bit on bge-small).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_ALONE: ContextVar[bool] = ContextVar("query_encoding_alone", default=False)


@contextmanager
def encoding_alone(alone: bool) -> Iterator[None]:
    """Within this block (in this thread), query encodings run alone when ``alone``."""
    token = _ALONE.set(alone)
    try:
        yield
    finally:
        _ALONE.reset(token)


def query_encoding_alone() -> bool:
    return _ALONE.get()

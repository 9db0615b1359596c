"""Building many small objects at once."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collection_paused() -> Iterator[None]:
    """Cyclic garbage collection off while building many objects without cycles (payload
    dicts): a collection walks every object the process holds, and a build holds millions.
    Parsing 104k ACL payloads took 1.45 s with collections, 0.57 s without."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

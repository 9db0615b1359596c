"""Deterministic fault points: the build kills itself at a named step when told to.

``RETRIEVAL_ASSETS_FAULT_AT=<point>`` makes the process SIGKILL itself (nothing cleans up, as in
a power cut or the OOM killer) the first time it reaches that point. Crash-recovery tests use it
to kill a build at each phase without depending on timing; unset, it does nothing.
"""

from __future__ import annotations

import os
import signal

FAULT_ENV = "RETRIEVAL_ASSETS_FAULT_AT"
# Every point, in build order: the first durable embedding segment, each index half-written,
# the vocabulary and graph written, everything written but not sealed, the pointer swap.
FAULT_POINTS = ("encode", "faiss_index", "qdrant_edge_index", "tantivy_index", "vocabulary", "graph", "seal", "promote")
# After a sealed version's inbox entries are appended to the archive, before pending is rewritten.
INBOX_FAULT_POINT = "inbox_archive"


def fault_point(name: str) -> None:
    if os.environ.get(FAULT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)

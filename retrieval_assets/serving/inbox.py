"""Documents accepted over HTTP, waiting for the next build.

``$RETRIEVAL_ASSETS_HOME/inbox/documents.jsonl`` holds one JSON object per accepted document:
``received_at``, ``format`` (the catalog format it was cleaned as), ``record`` (the posted
record, which a build can clean again with the catalog's rules) and ``document`` (the cleaned
``Document``). Appends hold an exclusive ``flock`` and are fsynced, so concurrent writers (threads
or processes) never interleave and an accepted document survives a crash. A later line for the
same ``doc_id`` and tenant supersedes an earlier one. Nothing here changes the indexes: reading the
inbox is the build's job.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel

from retrieval_assets.core.ingest.catalog import CatalogFormat
from retrieval_assets.core.models import Document

INBOX_FILE = Path("inbox") / "documents.jsonl"


class InboxEntry(BaseModel):
    received_at: str
    format: CatalogFormat
    record: dict[str, Any]
    document: Document


class DocumentInbox:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()  # flock is per open file: threads of one process need their own lock

    @classmethod
    def under(cls, home: Path) -> DocumentInbox:
        return cls(home / INBOX_FILE)

    def append(self, document: Document, record: dict[str, Any], fmt: CatalogFormat) -> InboxEntry:
        entry = InboxEntry(
            received_at=datetime.now(UTC).isoformat(timespec="milliseconds"), format=fmt, record=record, document=document
        )
        line = entry.model_dump_json().encode() + b"\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked("a+b", fcntl.LOCK_EX) as handle:
            # A writer killed mid-line leaves no newline: start on a fresh line so only that line is lost.
            size = handle.seek(0, os.SEEK_END)
            if size:
                handle.seek(size - 1)
                if handle.read(1) != b"\n":
                    line = b"\n" + line
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        return entry

    def find(self, doc_id: str, tenant_id: str | None = None) -> InboxEntry | None:
        """The latest pending entry for ``doc_id`` (of ``tenant_id``, if given)."""
        found = None
        for entry in self.entries():
            document = entry.document
            if document.doc_id == doc_id and (tenant_id is None or document.tenant_id == tenant_id):
                found = entry
        return found

    def entries(self) -> Iterator[InboxEntry]:
        if not self.path.is_file():
            return
        with self._locked("rb", fcntl.LOCK_SH) as handle:
            lines = handle.read().splitlines()
        for line in lines:
            try:
                yield InboxEntry.model_validate_json(line)
            except ValueError:
                continue  # a line cut short by a crash; the rest of the inbox is intact

    @contextmanager
    def _locked(self, mode: str, operation: int) -> Iterator[IO[bytes]]:
        with self._lock, open(self.path, mode) as handle:
            fcntl.flock(handle, operation)
            try:
                yield handle
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

"""The document inbox: upserts and deletes accepted over HTTP, waiting for a build to take them in.

Under ``$RETRIEVAL_ASSETS_HOME/inbox/``::

    pending.jsonl   one ``InboxEntry`` per line, in arrival order: not yet in a sealed version
    archive.jsonl   one ``ArchivedEntry`` per line: the entry, the version that took it in and
                    its outcome (indexed, deleted, or rejected with the quarantine reason)
    .lock           what readers and writers ``flock``

A build replays ``snapshot()`` (archived entries, then pending ones) on top of the catalogs and,
once its version is sealed, calls ``take_in`` with each entry's outcome. Every read holds a shared
lock and every write an exclusive one on ``.lock``, a file of its own because ``take_in`` replaces
``pending.jsonl`` by a rename, which would drop a lock held on the data file.

Durability: ``append`` returns only after its lines are fsynced. ``take_in`` appends to the archive
and fsyncs it before rewriting ``pending.jsonl``; a crash between the two leaves an entry in both
files, and readers drop pending entries whose receipt is archived, so nothing is taken in twice
or lost. A line cut short by a crash is skipped, and the next append starts on a fresh line.
"""

from __future__ import annotations

import fcntl
import os
import threading
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from retrieval_assets.core.faults import INBOX_FAULT_POINT, fault_point
from retrieval_assets.core.index.versions import IndexVersion, VersionError
from retrieval_assets.core.ingest.catalog import CatalogFormat
from retrieval_assets.core.io.files import write_atomically

INBOX_DIR = "inbox"
PENDING_FILE = "pending.jsonl"
ARCHIVE_FILE = "archive.jsonl"
LOCK_FILE = ".lock"


class InboxOperation(StrEnum):
    UPSERT = "upsert"
    DELETE = "delete"


class InboxOutcome(StrEnum):
    INDEXED = "indexed"
    DELETED = "deleted"
    REJECTED = "rejected"


def _now(timespec: str = "milliseconds") -> str:
    return datetime.now(UTC).isoformat(timespec=timespec)


class InboxEntry(BaseModel):
    """One line of ``pending.jsonl``: an upsert (with the posted record) or a delete."""

    model_config = ConfigDict(frozen=True)

    receipt: str  # uuid4 hex, the id the client is given
    operation: InboxOperation
    doc_id: str
    tenant_id: str
    received_at: str  # ISO-8601 UTC, milliseconds
    format: CatalogFormat | None = None  # upsert only: the catalog format the record is in
    record: dict[str, Any] | None = None  # upsert only: the posted record, cleaned again by the build
    sender: str | None = None  # the id of the API key that sent it (None: no keys configured)

    @model_validator(mode="after")
    def _upsert_has_a_record(self) -> InboxEntry:
        if self.operation is InboxOperation.UPSERT and (self.record is None or self.format is None):
            raise ValueError("an upsert needs its record and the record's format")
        return self

    @classmethod
    def new(
        cls,
        operation: InboxOperation,
        doc_id: str,
        tenant_id: str,
        *,
        format: CatalogFormat | None = None,
        record: dict[str, Any] | None = None,
        sender: str | None = None,
    ) -> InboxEntry:
        """An entry received now, with a fresh receipt."""
        return cls(
            receipt=uuid.uuid4().hex,
            operation=operation,
            doc_id=doc_id,
            tenant_id=tenant_id,
            received_at=_now(),
            format=format,
            record=record,
            sender=sender,
        )


class ArchivedEntry(InboxEntry):
    """One line of ``archive.jsonl``: an entry a sealed version took in, and what became of it."""

    version: str  # the sealed version that took it in
    taken_at: str  # ISO-8601 UTC, microseconds
    outcome: InboxOutcome
    reason: str | None = None  # rejected: the quarantine reason (a ``QuarantineReason`` value)
    detail: str | None = None


# What a build says of one entry: (outcome, quarantine reason, detail).
Outcome = tuple[InboxOutcome, str | None, str | None]


class _Receipt(BaseModel):
    """Just an archive line's receipt: skips building the record of every archived entry."""

    receipt: str


_Entry = TypeVar("_Entry", bound=BaseModel)

# One lock per inbox directory for the threads of this process: where flock is emulated with
# per-process POSIX locks (NFS), the kernel would not keep two threads of one process apart.
_THREAD_LOCKS: dict[Path, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def _thread_lock(directory: Path) -> threading.Lock:
    with _THREAD_LOCKS_GUARD:
        return _THREAD_LOCKS.setdefault(directory.absolute(), threading.Lock())


class DocumentInbox:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.pending_path = self.directory / PENDING_FILE
        self.archive_path = self.directory / ARCHIVE_FILE
        self._lock_path = self.directory / LOCK_FILE
        self._thread_lock = _thread_lock(self.directory)

    @classmethod
    def under(cls, home: Path) -> DocumentInbox:
        return cls(Path(home) / INBOX_DIR)

    def append(self, entries: Sequence[InboxEntry]) -> None:
        """Add a batch: all of it, or (on an error such as a full disk) none of it."""
        if not entries:
            return
        data = b"".join(entry.model_dump_json().encode() + b"\n" for entry in entries)
        with self._locked(exclusive=True):
            _append_lines(self.pending_path, data)

    def pending(self) -> list[InboxEntry]:
        """Entries not taken in yet, in arrival order."""
        with self._locked(exclusive=False) as present:
            return self._pending() if present else []

    def archived(self) -> list[ArchivedEntry]:
        with self._locked(exclusive=False) as present:
            return _read(self.archive_path, ArchivedEntry) if present else []

    def snapshot(self) -> list[InboxEntry]:
        """What a build replays: archived entries in the order they were taken in, then pending ones."""
        with self._locked(exclusive=False) as present:
            return [*_read(self.archive_path, ArchivedEntry), *self._pending()] if present else []

    def take_in(self, version: str, outcomes: Mapping[str, Outcome]) -> int:
        """Move the pending entries whose receipt is in ``outcomes`` to the archive as taken in by
        ``version``; returns how many moved. Receipts already archived, or unknown, are skipped,
        so calling it again after a crash is safe; entries not in ``outcomes`` stay pending."""
        with self._locked(exclusive=True):
            archived = _archived_receipts(self.archive_path)
            lines = list(_lines(self.pending_path, InboxEntry))
            taken_at = _now("microseconds")  # as precise as a version's seal time, which it is compared with
            taken = []
            for _, entry in lines:
                if entry.receipt in outcomes and entry.receipt not in archived:
                    outcome, reason, detail = outcomes[entry.receipt]
                    fields = entry.model_dump()
                    taken.append(
                        ArchivedEntry(
                            **fields, version=version, taken_at=taken_at, outcome=outcome, reason=reason, detail=detail
                        )
                    )
            if taken:
                _append_lines(self.archive_path, b"".join(e.model_dump_json().encode() + b"\n" for e in taken))
                fault_point(INBOX_FAULT_POINT)
            gone = archived | {entry.receipt for entry in taken}
            kept = [line for line, entry in lines if entry.receipt not in gone]
            if len(kept) != len(lines):
                write_atomically(self.pending_path, lambda tmp: tmp.write_bytes(b"".join(kept)))
                _fsync_directory(self.directory)
            return len(taken)

    def latest(self, doc_id: str, tenant_id: str | Collection[str] | None) -> InboxEntry | None:
        """The newest entry, pending or archived, for ``doc_id`` of ``tenant_id`` (or of one of
        several tenants; of any tenant if None)."""
        tenants = None if tenant_id is None else {tenant_id} if isinstance(tenant_id, str) else set(tenant_id)
        matches = self._matching(
            _json_needle(doc_id), lambda e: e.doc_id == doc_id and (tenants is None or e.tenant_id in tenants)
        )
        return matches[-1] if matches else None

    def receipt(self, receipt: str) -> InboxEntry | None:
        matches = self._matching(_json_needle(receipt), lambda e: e.receipt == receipt)
        return matches[-1] if matches else None

    def _matching(self, needle: bytes | None, wanted: Callable[[InboxEntry], bool]) -> list[InboxEntry]:
        """Entries of ``snapshot()`` that are ``wanted``, parsing only lines that contain ``needle``
        (an archived copy of a pending entry has the same fields, so it passes the filter too)."""
        with self._locked(exclusive=False) as present:
            if not present:
                return []
            archived = [e for _, e in _lines(self.archive_path, ArchivedEntry, needle) if wanted(e)]
            receipts = {e.receipt for e in archived}
            pending = [
                e for _, e in _lines(self.pending_path, InboxEntry, needle) if wanted(e) and e.receipt not in receipts
            ]
            return [*archived, *pending]

    def _pending(self) -> list[InboxEntry]:
        archived = _archived_receipts(self.archive_path)
        return [entry for entry in _read(self.pending_path, InboxEntry) if entry.receipt not in archived]

    @contextmanager
    def _locked(self, *, exclusive: bool) -> Iterator[bool]:
        """Hold the inbox's lock; yields whether the inbox exists (reads never create it)."""
        with self._thread_lock:
            if exclusive:
                self.directory.mkdir(parents=True, exist_ok=True)
            elif not self.directory.is_dir():
                yield False
                return
            descriptor = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
                yield True
            finally:
                os.close(descriptor)  # releases the flock


def _lines(path: Path, model: type[_Entry], needle: bytes | None = None) -> Iterator[tuple[bytes, _Entry]]:
    """Each valid line (with its newline) and its entry; a line a crash cut short is skipped."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    for line in data.splitlines(keepends=True):
        if needle is not None and needle not in line:
            continue
        try:
            entry = model.model_validate_json(line)
        except ValidationError:
            continue
        yield line if line.endswith(b"\n") else line + b"\n", entry


def _read(path: Path, model: type[_Entry]) -> list[_Entry]:
    return [entry for _, entry in _lines(path, model)]


def _archived_receipts(path: Path) -> set[str]:
    return {entry.receipt for _, entry in _lines(path, _Receipt)}


def _json_needle(value: str) -> bytes | None:
    """``value`` as it appears in a JSON line, when its encoding cannot differ between writers
    (printable ASCII with nothing to escape); None means every line must be parsed."""
    if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return f'"{value}"'.encode()
    return None


def _append_lines(path: Path, data: bytes) -> None:
    """Append whole lines and fsync them; on an error the file is cut back to where it was."""
    created = not path.exists()
    descriptor = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(descriptor).st_size
        if size and os.pread(descriptor, 1, size - 1) != b"\n":
            data = b"\n" + data  # the last line was cut short by a crash: only it is lost
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
            os.fsync(descriptor)
        except BaseException:
            os.ftruncate(descriptor, size)
            raise
    finally:
        os.close(descriptor)
    if created:  # the new file's name must survive a crash as well as its bytes
        _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


# --------------------------------------------------------------------------- document status

DocumentState = Literal["pending", "indexed", "deleted", "rejected"]


class DocumentStatus(BaseModel):
    model_config = ConfigDict(frozen=True)

    status: DocumentState
    # indexed / deleted: the promoted version that serves it so; rejected: the version whose build refused it
    version: str | None = None
    candidate: str | None = None  # pending: a sealed version that took it in but is not promoted
    reason: str | None = None  # rejected: the quarantine reason
    detail: str | None = None


def document_status(entry: InboxEntry, promoted: IndexVersion | None) -> DocumentStatus:
    """What became of ``entry`` as far as search is concerned. A taken-in upsert or delete shows
    once the promoted version is the one that took it in, or one sealed after it was taken in
    (every build replays the archive); before that it is pending in its candidate version. A
    rejected entry is rejected whatever is promoted."""
    if not isinstance(entry, ArchivedEntry):
        return DocumentStatus(status="pending")
    if entry.outcome is InboxOutcome.REJECTED:
        return DocumentStatus(status="rejected", version=entry.version, reason=entry.reason, detail=entry.detail)
    if promoted is not None and (promoted.id == entry.version or _sealed_after(promoted, entry.taken_at)):
        return DocumentStatus(status=entry.outcome.value, version=promoted.id)
    return DocumentStatus(status="pending", candidate=entry.version)


def _sealed_after(version: IndexVersion, moment: str) -> bool:
    try:
        sealed_at = version.manifest()["sealed_at"]
    except VersionError:
        return False
    return datetime.fromisoformat(sealed_at) > datetime.fromisoformat(moment)

"""The document inbox on a real directory: appends, take-in, crashes between its two writes, torn
lines, a write that fails half-way, concurrent writers (threads and processes) and document
statuses against real index versions."""

from __future__ import annotations

import json
import multiprocessing
import resource
import signal
import threading
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from retrieval_assets.core.index.versions import IndexVersion, IndexVersions
from retrieval_assets.core.ingest.inbox import (
    ARCHIVE_FILE,
    INBOX_DIR,
    PENDING_FILE,
    ArchivedEntry,
    DocumentInbox,
    InboxEntry,
    InboxOperation,
    InboxOutcome,
    document_status,
)

INDEXED = (InboxOutcome.INDEXED, None, None)
SPAWN = multiprocessing.get_context("spawn")  # fresh interpreters: no inherited locks or threads


def upsert(doc_id: str, tenant_id: str = "alpha", sender: str | None = None) -> InboxEntry:
    record = {"id": doc_id, "name": f"Tool {doc_id}", "description": "Aligns reads."}
    return InboxEntry.new(InboxOperation.UPSERT, doc_id, tenant_id, format="tool_catalog", record=record, sender=sender)


def delete(doc_id: str, tenant_id: str = "alpha") -> InboxEntry:
    return InboxEntry.new(InboxOperation.DELETE, doc_id, tenant_id)


def receipts(entries: list[InboxEntry]) -> list[str]:
    return [entry.receipt for entry in entries]


@pytest.fixture()
def inbox(tmp_path: Path) -> DocumentInbox:
    return DocumentInbox.under(tmp_path)


def test_entries_are_appended_and_read_back_in_order(inbox: DocumentInbox, tmp_path: Path) -> None:
    first, second, gone = upsert("a"), upsert("b", "beta"), delete("a")
    inbox.append([first, second])
    inbox.append([gone])
    assert inbox.pending() == inbox.snapshot() == [first, second, gone] and inbox.archived() == []
    assert inbox.pending_path == tmp_path / INBOX_DIR / PENDING_FILE
    assert inbox.receipt(second.receipt) == second and inbox.receipt("0" * 32) is None
    assert inbox.latest("a", "alpha") == gone and inbox.latest("b", "beta") == second
    assert inbox.latest("b", "alpha") is None and inbox.latest("b", None) == second  # None: any tenant
    assert len({first.receipt, second.receipt, gone.receipt}) == 3 and len(first.receipt) == 32
    assert first.received_at.endswith("+00:00") and len(first.received_at.split(".")[1]) == len("123+00:00")


def test_reading_an_absent_inbox_creates_nothing(tmp_path: Path) -> None:
    inbox = DocumentInbox.under(tmp_path)
    assert inbox.pending() == inbox.archived() == inbox.snapshot() == [] and inbox.latest("a", None) is None
    assert inbox.take_in("v-1", {}) == 0 and inbox.append([]) is None
    assert not inbox.pending_path.exists() and not inbox.archive_path.exists()


def test_an_upsert_needs_its_record() -> None:
    with pytest.raises(ValidationError, match="needs its record"):
        InboxEntry(
            receipt="r", operation="upsert", doc_id="a", tenant_id="t", received_at="2025-01-01T00:00:00.000+00:00"
        )


def test_take_in_archives_entries_with_their_outcome_once(inbox: DocumentInbox) -> None:
    kept, rejected, gone, later = upsert("a"), upsert("b"), delete("c"), upsert("d")
    inbox.append([kept, rejected, gone, later])
    outcomes = {
        kept.receipt: INDEXED,
        rejected.receipt: (InboxOutcome.REJECTED, "empty_text", "description empty after cleaning"),
        gone.receipt: (InboxOutcome.DELETED, None, None),
        "f" * 32: INDEXED,  # unknown receipts are skipped
    }
    assert inbox.take_in("v-1", outcomes) == 3
    archived = inbox.archived()
    assert receipts(archived) == receipts([kept, rejected, gone]) and {a.version for a in archived} == {"v-1"}
    assert [a.outcome for a in archived] == [InboxOutcome.INDEXED, InboxOutcome.REJECTED, InboxOutcome.DELETED]
    assert archived[1].reason == "empty_text" and archived[1].detail == "description empty after cleaning"
    assert archived[0].record == kept.record and archived[0].received_at == kept.received_at
    assert inbox.pending() == [later] and receipts(inbox.snapshot()) == receipts([kept, rejected, gone, later])
    assert isinstance(inbox.latest("a", "alpha"), ArchivedEntry)
    assert isinstance(inbox.receipt(gone.receipt), ArchivedEntry)
    # Again (a retried build step): nothing moves twice.
    assert inbox.take_in("v-1", outcomes) == 0 and inbox.take_in("v-2", outcomes) == 0
    assert len(inbox.archived()) == 3 and inbox.pending() == [later]


def test_entries_appended_while_a_build_runs_stay_pending(inbox: DocumentInbox) -> None:
    before = [upsert("a"), upsert("b")]
    inbox.append(before)
    seen = inbox.snapshot()  # what the build replays
    during = [upsert("a"), delete("b")]  # newer entries for the same documents
    inbox.append(during)
    assert inbox.take_in("v-1", {entry.receipt: INDEXED for entry in seen}) == 2
    assert inbox.pending() == during and receipts(inbox.archived()) == receipts(before)
    assert inbox.latest("a", "alpha") == during[0] and inbox.latest("b", "alpha") == during[1]  # pending is newer


def test_a_crash_between_the_archive_append_and_the_pending_rewrite_takes_nothing_twice(inbox: DocumentInbox) -> None:
    taken, waiting = [upsert("a"), delete("b")], upsert("c")
    inbox.append([*taken, waiting])
    # What take_in writes first, then a crash before it rewrites pending.jsonl.
    archived = [
        ArchivedEntry(
            **entry.model_dump(),
            version="v-1",
            taken_at="2030-01-01T00:00:00.000001+00:00",
            outcome=InboxOutcome.INDEXED,
        )
        for entry in taken
    ]
    with inbox.archive_path.open("a") as handle:
        handle.write("".join(entry.model_dump_json() + "\n" for entry in archived))
    assert len(inbox.pending_path.read_text().splitlines()) == 3  # the crash left two entries in both files
    assert receipts(inbox.snapshot()) == receipts([*taken, waiting])
    assert inbox.pending() == [waiting] and inbox.archived() == archived
    assert inbox.latest("a", "alpha") == archived[0]
    # The build runs again and takes in what it saw: nothing moves twice, and pending.jsonl is tidied.
    assert inbox.take_in("v-2", {entry.receipt: INDEXED for entry in [*taken, waiting]}) == 1
    assert receipts(inbox.archived()) == receipts([*taken, waiting]) and inbox.pending() == []
    assert inbox.pending_path.read_bytes() == b""


def test_a_line_cut_short_by_a_crash_is_skipped(inbox: DocumentInbox) -> None:
    first, second = upsert("a"), upsert("b")
    inbox.append([first])
    line = second.model_dump_json()
    with inbox.pending_path.open("a") as handle:
        handle.write(line[: len(line) // 2])  # a writer killed mid-line: no newline
    assert inbox.pending() == [first]
    third = upsert("c")
    inbox.append([third])  # starts on a fresh line, so only the torn line is lost
    assert inbox.pending() == [first, third] and len(inbox.pending_path.read_text().splitlines()) == 3
    # A torn archive line does not count as archived: its entry stays pending.
    torn = ArchivedEntry(**third.model_dump(), version="v", taken_at="t", outcome="indexed").model_dump_json()[:-3]
    inbox.archive_path.write_text(torn)
    assert inbox.pending() == [first, third] and inbox.archived() == []
    assert inbox.take_in("v-1", {third.receipt: INDEXED}) == 1
    assert inbox.pending() == [first] and receipts(inbox.archived()) == [third.receipt]
    assert len(inbox.pending_path.read_text().splitlines()) == 1  # the rewrite drops the torn line


def _append_past_a_file_size_limit(directory: str, limit: int) -> str:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    try:
        DocumentInbox(Path(directory)).append([upsert(f"big-{i}") for i in range(50)])
    except OSError as exc:
        return type(exc).__name__
    return "appended"


def test_a_batch_that_cannot_be_written_whole_leaves_nothing(inbox: DocumentInbox) -> None:
    first = upsert("a")
    inbox.append([first])
    size = inbox.pending_path.stat().st_size
    with SPAWN.Pool(1) as pool:  # the limit applies to that process only
        assert pool.apply(_append_past_a_file_size_limit, (str(inbox.directory), size + 1_000)) == "OSError"
    assert inbox.pending_path.stat().st_size == size and inbox.pending() == [first]


def _append_many(directory: str, sender: str, count: int, start_at: float) -> None:
    inbox = DocumentInbox(Path(directory))
    time.sleep(max(start_at - time.time(), 0))  # every writer starts together
    for i in range(count):
        inbox.append([upsert(f"{sender}-{i}", sender=sender)])


def _writers(directory: Path, processes: int, threads: int, count: int) -> list:
    """Processes and threads appending ``count`` entries each, all started at the same moment."""
    start_at = time.time() + 3.0  # spawned interpreters need a moment to import
    workers = [
        SPAWN.Process(target=_append_many, args=(str(directory), f"p{n}", count, start_at)) for n in range(processes)
    ]
    workers += [
        threading.Thread(target=_append_many, args=(str(directory), f"t{n}", count, start_at)) for n in range(threads)
    ]
    for worker in workers:
        worker.start()
    return workers


def _join(workers: list) -> None:
    for worker in workers:
        worker.join(timeout=120)
        assert not worker.is_alive()
        assert getattr(worker, "exitcode", 0) == 0


def _expected_ids(processes: int, threads: int, count: int) -> list[str]:
    senders = [f"p{n}" for n in range(processes)] + [f"t{n}" for n in range(threads)]
    return sorted(f"{sender}-{i}" for sender in senders for i in range(count))


def test_concurrent_writers_lose_nothing(inbox: DocumentInbox) -> None:
    _join(_writers(inbox.directory, processes=8, threads=8, count=50))
    entries = inbox.pending()
    assert len(entries) == 800 and len(set(receipts(entries))) == 800
    assert sorted(entry.doc_id for entry in entries) == _expected_ids(8, 8, 50)
    for sender in ("p3", "t5"):  # each writer's entries stay in the order it wrote them
        own = [entry.doc_id for entry in entries if entry.sender == sender]
        assert own == [f"{sender}-{i}" for i in range(50)]
    assert len(inbox.pending_path.read_text().splitlines()) == 800  # whole lines, none interleaved


def test_take_in_while_writers_append_loses_nothing(inbox: DocumentInbox) -> None:
    workers = _writers(inbox.directory, processes=4, threads=2, count=50)
    rounds = 0
    while any(worker.is_alive() for worker in workers) or inbox.pending():
        seen = inbox.snapshot()  # a build: replay, then take in what it saw
        rounds += inbox.take_in(f"v-{rounds}", {entry.receipt: INDEXED for entry in seen}) > 0
    _join(workers)
    archived = inbox.archived()
    assert rounds > 1 and inbox.pending() == []
    assert len(archived) == len(set(receipts(archived))) == 300
    assert sorted(entry.doc_id for entry in archived) == _expected_ids(4, 2, 50)


def _sealed(versions: IndexVersions, name: str) -> IndexVersion:
    version = versions.candidate(name * 16)
    versions.seal(version, name * 16)
    return version


def test_document_status_follows_the_promoted_version(inbox: DocumentInbox, tmp_path: Path) -> None:
    versions = IndexVersions(tmp_path / "indexes")
    older = _sealed(versions, "a")  # sealed before the entries are taken in
    added, refused, removed = upsert("a"), upsert("b"), delete("c")
    inbox.append([added, refused, removed])
    assert document_status(inbox.latest("a", "alpha"), older).status == "pending"

    candidate = _sealed(versions, "b")
    outcomes = {
        added.receipt: INDEXED,
        refused.receipt: (InboxOutcome.REJECTED, "empty_text", "title and text empty after cleaning"),
        removed.receipt: (InboxOutcome.DELETED, None, None),
    }
    inbox.take_in(candidate.id, outcomes)
    taken = {entry.doc_id: entry for entry in inbox.archived()}
    for promoted in (None, older):  # the candidate is not served yet: still pending, in it
        status = document_status(taken["a"], promoted)
        assert (status.status, status.candidate, status.version) == ("pending", candidate.id, None)
    assert document_status(taken["a"], candidate).model_dump(exclude_none=True) == {
        "status": "indexed", "version": candidate.id
    }
    assert document_status(taken["c"], candidate).model_dump(exclude_none=True) == {
        "status": "deleted", "version": candidate.id
    }
    newer = _sealed(versions, "c")  # a later build replays the archive: it holds them too
    assert document_status(taken["a"], newer).version == newer.id
    assert document_status(taken["c"], newer).status == "deleted"
    for promoted in (None, older, candidate):
        rejected = document_status(taken["b"], promoted)
        assert (rejected.status, rejected.version, rejected.reason) == ("rejected", candidate.id, "empty_text")
        assert rejected.detail == "title and text empty after cleaning"
    assert json.loads(inbox.archive_path.read_text().splitlines()[0])["version"] == candidate.id
    assert inbox.archive_path.name == ARCHIVE_FILE

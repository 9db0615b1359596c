"""The ``files`` source kind: a folder of PDF, HTML, Markdown, DOCX and text files, one document each.

Every entry the globs select becomes exactly one row (``records.record_row``), a document or a
rejection, so ``files in == kept + quarantined`` holds however hostile the folder:

* Walk: ``os.walk(followlinks=False)`` from the root, top down: a folder's entries in name order,
  then its subfolders in name order, so rows come in the same order on every run. ``.git``,
  ``.svn`` and ``.hg`` (folders or files) are skipped silently; every other name, hidden ones
  included, is an entry.
* Globs: ``include`` and ``exclude`` match the POSIX path relative to the root, whole: ``*`` and
  ``?`` stay within one folder, ``[abc]`` is a class, ``**/`` spans zero or more folders and a
  trailing ``/**`` everything below (``drafts/**`` also matches ``drafts`` itself, so an excluded
  folder is not walked). A file is read when some include matches and no exclude does.
* Links: a symbolic link to a file, inside the root or outside it, is read as that file (its id
  is the link's path). A link to a folder is not followed, and a folder that cannot be listed is not
  read: each is one ``unreadable_file`` row unless an exclude matches it, since the files it holds
  are unknown. A broken or looping link is ``unreadable_file``.
* Checks, in order, all from ``stat`` without reading: not a regular file (fifo, socket, device)
  -> ``unreadable_file``; an extension no extractor reads -> ``unsupported_format``; over
  ``max_file_bytes`` -> ``file_too_large``; zero bytes -> ``empty_text``. Then the file is read
  (permission denied -> ``unreadable_file``) and extracted (``formats``): an extractor's failure
  keeps its reason, any other exception from a library is ``corrupt_file`` with its type and
  message, and an extraction without text is ``empty_text``.

Incremental reads: with ``cache_dir``, a memo (``files_<hash of the root>.json``, written
atomically once every row has been read) keeps per relative path the size, mtime_ns and SHA-256 of
the bytes and the extraction result, under a hash of the ``formats`` package source (a changed
extractor invalidates it all). A file with the same size and mtime_ns is not read again; one whose
bytes hash the same is not parsed again; any other is extracted. The memo is rewritten with exactly
the files seen, so deleted files drop out.

``SourceRead.stats``: ``files``, ``documents``, ``quarantined``, ``bytes_read``,
``extraction_seconds``, ``files_reused`` (memo hits), ``files_parsed`` and ``format/<format>``
(documents per format), complete once the rows are exhausted.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from retrieval_assets.core.ingest.catalog import CatalogError, CatalogSource, RawRow
from retrieval_assets.core.ingest.reasons import QuarantineReason
from retrieval_assets.core.ingest.sources import formats
from retrieval_assets.core.ingest.sources.records import (
    ExtractionFailed,
    SourceRead,
    TextBlock,
    document_record,
    record_row,
    rejected_record,
)
from retrieval_assets.core.io.files import write_atomically

VERSION_CONTROL = frozenset({".git", ".svn", ".hg"})
_FILE_KINDS = (
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def read_files(source: CatalogSource, cache_dir: Path | None = None) -> SourceRead:
    """One row per entry of the folder ``source.path`` that the globs select (see the module)."""
    root = Path(source.path)
    if not root.is_dir():
        raise CatalogError(f"files source is not a folder: {root}")
    reader = _Reader(root, source, cache_dir)
    return SourceRead(reader.rows(), reader.stats)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob over relative POSIX paths as a regex for ``fullmatch`` (the rules in the module)."""
    pattern = pattern.removeprefix("./")
    parts: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            parts.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            parts.append("(?:/.*)?")
            i += 3
        elif pattern.startswith("**", i):
            parts.append(".*")
            i += 2
        elif pattern[i] == "*":
            parts.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            parts.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 2)) != -1:
            members = pattern[i + 1 : end]
            negated = members.startswith("!")
            parts.append(f"[{'^' if negated else ''}{re.escape(members.removeprefix('!'))}]")
            i = end + 1
        else:
            parts.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(parts))


@cache
def extractor_version() -> str:
    """A hash of the ``formats`` package source: memo entries of other extractor code are stale."""
    digest = hashlib.sha256()
    for module in sorted(Path(formats.__file__).parent.glob("*.py")):
        digest.update(module.name.encode())
        digest.update(module.read_bytes())
    return digest.hexdigest()[:16]


def memo_path(cache_dir: Path, root: Path) -> Path:
    return cache_dir / f"files_{hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]}.json"


class _Reader:
    def __init__(self, root: Path, source: CatalogSource, cache_dir: Path | None) -> None:
        self.root = root
        self.max_bytes = source.max_file_bytes
        self.include = [glob_regex(pattern) for pattern in source.include]
        self.exclude = [glob_regex(pattern) for pattern in source.exclude]
        self.memo_file = memo_path(cache_dir, root) if cache_dir is not None else None
        self.old_memo: dict[str, dict[str, Any]] = self._load_memo()
        self.new_memo: dict[str, dict[str, Any]] = {}
        self.stats: dict[str, float] = {
            "files": 0,
            "documents": 0,
            "quarantined": 0,
            "bytes_read": 0,
            "extraction_seconds": 0.0,
            "files_reused": 0,
            "files_parsed": 0,
        }

    def rows(self) -> Iterator[RawRow]:
        for number, (rel, path, problem) in enumerate(self._entries(), start=1):
            if problem is not None:
                record = rejected_record(rel, QuarantineReason.UNREADABLE_FILE, problem)
            else:
                record = self._record(rel, path)
            self.stats["files"] += 1
            if "rejected" in record:
                self.stats["quarantined"] += 1
            else:
                self.stats["documents"] += 1
                key = f"format/{record['metadata']['format']}"
                self.stats[key] = self.stats.get(key, 0) + 1
            yield record_row(str(self.root), number, record)
        if self.memo_file is not None:
            memo = json.dumps({"extractor_version": extractor_version(), "files": self.new_memo}, ensure_ascii=False)
            write_atomically(self.memo_file, lambda tmp: tmp.write_text(memo, encoding="utf-8"))

    def _excluded(self, rel: str) -> bool:
        return any(pattern.fullmatch(rel) for pattern in self.exclude)

    def _entries(self) -> Iterator[tuple[str, Path, str | None]]:
        """(relative path, path, why it cannot be read or None) per selected entry, in walk order."""
        unlistable: list[OSError] = []

        def listing_errors() -> Iterator[tuple[str, Path, str | None]]:
            while unlistable:
                error = unlistable.pop(0)
                folder = Path(error.filename)
                if folder == self.root:
                    raise CatalogError(f"files source folder cannot be listed: {self.root}: {error.strerror}")
                rel = folder.relative_to(self.root).as_posix()
                if not self._excluded(rel):
                    yield rel, folder, f"folder cannot be listed: {error.strerror}"

        for directory, folders, files in os.walk(self.root, onerror=unlistable.append, followlinks=False):
            yield from listing_errors()
            base = Path(directory)
            prefix = "" if base == self.root else base.relative_to(self.root).as_posix() + "/"
            walked: list[str] = []
            entries: list[tuple[str, Path, str | None]] = []
            for name in sorted(folders):
                if name in VERSION_CONTROL or self._excluded(prefix + name):
                    continue
                if (base / name).is_symlink():
                    entries.append((prefix + name, base / name, "symbolic link to a folder, not followed"))
                else:
                    walked.append(name)
            folders[:] = walked  # os.walk descends into these, in this order
            for name in files:
                rel = prefix + name
                if name in VERSION_CONTROL or self._excluded(rel) or not any(p.fullmatch(rel) for p in self.include):
                    continue
                entries.append((rel, base / name, None))
            yield from sorted(entries, key=lambda entry: entry[0])
        yield from listing_errors()

    def _record(self, rel: str, path: Path) -> dict[str, Any]:
        try:
            info = _file_stat(path)
            file_format = formats.format_of(path)
            if info.st_size > self.max_bytes:
                raise ExtractionFailed(
                    QuarantineReason.FILE_TOO_LARGE, f"{info.st_size} bytes, over the limit of {self.max_bytes}"
                )
            if info.st_size == 0:
                raise ExtractionFailed(QuarantineReason.EMPTY_TEXT, "a zero-byte file")
            result = self._extraction(rel, path, info)
        except ExtractionFailed as exc:
            return rejected_record(rel, exc.reason, exc.detail)
        if "rejected" in result:
            return rejected_record(rel, QuarantineReason(result["rejected"]["reason"]), result["rejected"]["detail"])
        document = result["document"]
        metadata: dict[str, Any] = {
            **document["metadata"],
            "path": rel,
            "format": file_format,
            "bytes": info.st_size,
            "modified": datetime.fromtimestamp(info.st_mtime, UTC).isoformat(),
        }
        if document["pages"] is not None:
            metadata["pages"] = document["pages"]
        return document_record(
            rel,
            document["title"] or path.stem,
            blocks=[TextBlock.model_validate(block) for block in document["blocks"]],
            metadata=metadata,
        )

    def _extraction(self, rel: str, path: Path, info: os.stat_result) -> dict[str, Any]:
        """The memoised extraction result of a file: ``{"document": ...}`` or ``{"rejected": ...}``."""
        old = self.old_memo.get(rel)
        if old is not None and (old["size"], old["mtime_ns"]) == (info.st_size, info.st_mtime_ns):
            return self._reuse(rel, old, info)
        try:
            with path.open("rb") as handle:
                data = handle.read(self.max_bytes + 1)
        except OSError as exc:
            raise ExtractionFailed(QuarantineReason.UNREADABLE_FILE, f"cannot read: {exc.strerror}") from None
        if len(data) > self.max_bytes:  # it grew after the stat
            raise ExtractionFailed(QuarantineReason.FILE_TOO_LARGE, f"over the limit of {self.max_bytes} bytes")
        self.stats["bytes_read"] += len(data)
        digest = hashlib.sha256(data).hexdigest()
        if old is not None and old["sha256"] == digest:
            return self._reuse(rel, old, info)
        started = time.perf_counter()
        result = _extract(path, data)
        self.stats["extraction_seconds"] += time.perf_counter() - started
        self.stats["files_parsed"] += 1
        self.new_memo[rel] = {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "sha256": digest, "result": result}
        return result

    def _reuse(self, rel: str, old: dict[str, Any], info: os.stat_result) -> dict[str, Any]:
        self.stats["files_reused"] += 1
        self.new_memo[rel] = {**old, "size": info.st_size, "mtime_ns": info.st_mtime_ns}
        result: dict[str, Any] = old["result"]
        return result

    def _load_memo(self) -> dict[str, dict[str, Any]]:
        if self.memo_file is None or not self.memo_file.is_file():
            return {}
        try:
            memo = json.loads(self.memo_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # an unreadable memo only costs a full read
        if not isinstance(memo, dict) or memo.get("extractor_version") != extractor_version():
            return {}
        files: dict[str, dict[str, Any]] = memo.get("files", {})
        return files


def _file_stat(path: Path) -> os.stat_result:
    """The stat of a regular file, following a link; ``unreadable_file`` for anything else."""
    try:
        info = path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            detail = "symbolic link loop"
        elif path.is_symlink():
            detail = f"broken symbolic link to {os.readlink(path)}"
        else:
            detail = f"cannot stat: {exc.strerror}"
        raise ExtractionFailed(QuarantineReason.UNREADABLE_FILE, detail) from None
    if stat.S_ISDIR(info.st_mode):
        raise ExtractionFailed(QuarantineReason.UNREADABLE_FILE, "symbolic link to a folder, not followed")
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _FILE_KINDS if test(info.st_mode)), "not a regular file")
        raise ExtractionFailed(QuarantineReason.UNREADABLE_FILE, f"{kind}, not a regular file")
    return info


def _extract(path: Path, data: bytes) -> dict[str, Any]:
    try:
        extracted = formats.extract(path, data)
    except ExtractionFailed as exc:
        return {"rejected": {"reason": exc.reason.value, "detail": exc.detail}}
    except Exception as exc:  # a library's own failure on one file must not stop the folder
        return {"rejected": {"reason": QuarantineReason.CORRUPT_FILE.value, "detail": f"{type(exc).__name__}: {exc}"}}
    if not any(block.text.strip() for block in extracted.blocks):
        detail = f"no text in the {extracted.format} file"
        return {"rejected": {"reason": QuarantineReason.EMPTY_TEXT.value, "detail": detail}}
    return {
        "document": {
            "title": extracted.title,
            "blocks": [block.model_dump(exclude_none=True) for block in extracted.blocks],
            "pages": extracted.pages,
            "metadata": extracted.metadata,
        }
    }

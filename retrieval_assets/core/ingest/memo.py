"""What the previous build made of each catalog row and document, so that a re-run cleans and
chunks only what changed.

On a large catalog cleaning and chunking every row costs tens of seconds (ACL Anthology: about
25 s for 103k papers on 2 cores) while a nightly run or a posted document changes a handful. The
memo is a cache, keyed by content: a row's key is a hash of its bytes, of the cleaning rules'
source code and of the format, tenant and limit; a document's key is a hash of its cleaned
fields, of the chunker's source code and of its settings. A changed rule therefore misses the
cache instead of serving stale output. A build appends what it parsed; once a quarter of the
memo's rows are ones the build did not use, it is rewritten with exactly those it did
(``MemoTable``), so it never grows much beyond one catalog. The chunks' memo is the chunk table
itself, which keeps each chunk's document key (``DOCUMENT_KEY``, ``steps.chunk_into_table``).
"""

from __future__ import annotations

import hashlib
import inspect
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from retrieval_assets.core.ingest import chunking, cleaning
from retrieval_assets.core.ingest.cleaning import PARSE_COLUMNS, RecordFormat, parse_rows
from retrieval_assets.core.io.tables import (
    DOCUMENT_COLUMNS,
    MAX_ROW_RUNS,
    RECORD_BLOCK_ROWS,
    empty_frame,
    frame_to_raw_rows,
    rows_where,
    take_rows,
    write_parquet,
)
from retrieval_assets.core.models import Chunk, document_key
from retrieval_assets.core.settings import ChunkingSettings

PARSED_FILE = "parsed_rows.parquet"


def _source_hash(*parts: object) -> str:
    return hashlib.blake2b("\x00".join(map(str, parts)).encode(), digest_size=8).hexdigest()


def _row_keys(raw: pd.DataFrame, salt: str) -> Iterator[str]:
    """Each raw row's memo key: a hash of the salt, its UTF-8 error flag and its text. Hashed from
    the Arrow column's own bytes where it is one (977k rows: 1.25 s against 2 s through Python
    strings), else from its text a block of rows at a time."""
    salted = {error: hashlib.blake2b(f"{salt}{error}".encode(), digest_size=16) for error in (0, 1)}
    errors = raw["utf8_error"].to_numpy(dtype=bool).tolist()
    texts = raw["raw"].array
    if not isinstance(texts, pd.arrays.ArrowStringArray):
        for start in range(0, len(raw), RECORD_BLOCK_ROWS):
            block = raw["raw"].iloc[start : start + RECORD_BLOCK_ROWS].tolist()
            for text, error in zip(block, errors[start : start + RECORD_BLOCK_ROWS], strict=True):
                hasher = salted[error].copy()
                hasher.update(text.encode())
                yield hasher.hexdigest()
        return
    row = 0
    for chunk in texts.__arrow_array__().chunks:
        offsets, data = _string_buffers(chunk)
        for first, last in zip(offsets[:-1], offsets[1:], strict=True):
            hasher = salted[errors[row]].copy()
            hasher.update(data[first:last])
            yield hasher.hexdigest()
            row += 1


def _string_buffers(chunk: pa.Array) -> tuple[list[int], memoryview]:
    """A string array's value offsets (one more than its rows) and its data, not copied."""
    _, offsets, data = chunk.buffers()
    width = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
    bounds = np.frombuffer(offsets, dtype=width)[chunk.offset : chunk.offset + len(chunk) + 1].tolist()
    return bounds, memoryview(data) if data is not None else memoryview(b"")


# A memo is rewritten whole once it holds this share more rows than the last build used, or
# this many segments, or its segments' rows belong in this many places of the catalog; until then
# a build appends only the rows it made. Each place breaks the memo's rows into one more run out
# of catalog order, and past ``MAX_ROW_RUNS`` runs a build copies every row to put them in order.
MAX_STALE_FRACTION = 0.25
MAX_SEGMENTS = 16
MAX_APPENDED_PLACES = MAX_ROW_RUNS // 4


class MemoTable:
    """A memo's rows on disk: a base file, rewritten now and then, and the segments later builds
    appended with only the rows they made (a one-document delta used to rewrite a million chunks'
    memo to change one of them: 3 s). Rows no build uses any more stay until the next rewrite.
    Rows are unique by ``key``: a segment holds only rows the memo lacked when its build read it,
    and rows two concurrent builds both added are read once."""

    def __init__(self, path: Path, columns: dict[str, str], key: list[str], place: str) -> None:
        """Rows are unique by ``key``; rows with one value of ``place`` lie together in catalog
        order (a row parse, a document's chunks)."""
        self.path, self._columns, self._key, self._place = path, columns, key, place
        self._held = self._appended_places = 0

    def segments(self) -> list[Path]:
        return sorted(self.path.parent.glob(f"{self.path.stem}.segment-*.parquet"))

    def read(self) -> pd.DataFrame:
        files = ([self.path] if self.path.is_file() else []) + self.segments()
        frames = [pd.read_parquet(file) for file in files]
        appended = frames[1:] if self.path.is_file() else frames
        self._appended_places = sum(frame[self._place].nunique() for frame in appended)
        if not frames:
            frame = empty_frame(self._columns)
        elif len(frames) == 1:
            frame = frames[0]
        else:
            frame = pd.concat(frames, ignore_index=True)
            frame = rows_where(frame, ~frame.duplicated(self._key).to_numpy(dtype=bool))
        self._held = len(frame)
        return frame

    def save(self, fresh: pd.DataFrame, live_rows: int, live: Callable[[], pd.DataFrame]) -> None:
        """Append ``fresh`` (rows this build made, which ``read`` did not find), or write ``live``
        (every row this build used, ``live_rows`` of them) as the new base when the memo would
        hold too many stale rows or segments."""
        segments = self.segments()
        held = self._held + len(fresh)
        places = self._appended_places + fresh[self._place].nunique()
        if (
            self.path.is_file()
            and held <= (1 + MAX_STALE_FRACTION) * live_rows
            and len(segments) < MAX_SEGMENTS
            and places <= MAX_APPENDED_PLACES
        ):
            if len(fresh):
                write_parquet(fresh, self.path.with_name(f"{self.path.stem}.segment-{uuid.uuid4().hex}.parquet"))
            return
        # Segments go first: a crash before the new base is written loses rows (parsed or chunked
        # again next time), never leaves stale ones beside it.
        for segment in segments:
            segment.unlink(missing_ok=True)
        write_parquet(live(), self.path)


class ParsedRows:
    """Row parses (``cleaning.parse_rows`` records) of the previous build, by row key."""

    def __init__(self, directory: Path) -> None:
        self._table = MemoTable(Path(directory) / PARSED_FILE, {**PARSE_COLUMNS, "key": "string"}, ["key"], "key")
        previous = self._table.read()
        # Keys as objects: pandas' isin on Arrow strings loops in Python over the values.
        self._previous = previous.set_index(previous["key"].astype(object)).drop(columns="key")
        self._seen: list[pd.DataFrame] = []
        self._fresh: list[pd.DataFrame] = []
        self.reused = self.parsed = 0

    def parse(self, raw: pd.DataFrame, fmt: RecordFormat, tenant_id: str, max_text_chars: int) -> pd.DataFrame:
        """``parse_rows`` of a raw rows frame, taking the previous build's record of each row
        seen before (same bytes, cleaning code, format, tenant and limit)."""
        salt = _source_hash(inspect.getsource(cleaning), fmt, tenant_id, max_text_chars)
        keys = pd.Index(list(_row_keys(raw, salt)), dtype=object)
        known = keys.isin(self._previous.index)
        unknown = rows_where(raw, ~known) if known.any() else raw
        fresh = parse_rows(frame_to_raw_rows(unknown), fmt, tenant_id, max_text_chars)
        records = self._in_row_order(keys, known, fresh)
        self._seen.append(records[~records.index.duplicated()] if records.index.has_duplicates else records)
        self._fresh.append(fresh.set_axis(keys[~known]))
        self.reused += int(known.sum())
        self.parsed += len(fresh)
        return records.reset_index(drop=True)

    def _in_row_order(self, keys: pd.Index, known: np.ndarray, fresh: pd.DataFrame) -> pd.DataFrame:
        """One record per key, in row order: the previous build's where ``known``, else the next
        of ``fresh`` (one per unknown row). Records that run on in the previous build's order
        are sliced, not copied (``take_rows``; 200k ACL rows' records are 242 MB)."""
        fresh = fresh.set_axis(keys[~known])
        if not known.any():
            return fresh
        reused = self._previous.index.get_indexer(keys[known])
        if known.all():
            return take_rows(self._previous, reused)
        previous_rows = len(self._previous)
        order = np.empty(len(keys), dtype=np.int64)
        order[known] = reused
        order[~known] = previous_rows + np.arange(len(fresh))
        return take_rows(pd.concat([self._previous, fresh]), order)

    def save(self) -> None:
        """Keep the rows this build parsed (``MemoTable``: all it parsed or reused, now and then)."""
        seen = pd.concat(self._seen) if self._seen else self._previous.iloc[:0]
        fresh = pd.concat(self._fresh) if self._fresh else self._previous.iloc[:0]
        self._table.save(
            _keyed(fresh), int((~seen.index.duplicated()).sum()), lambda: _keyed(seen)
        )


def _keyed(records: pd.DataFrame) -> pd.DataFrame:
    """Records indexed by row key as a memo table: each key once, the key a column."""
    return records[~records.index.duplicated()].rename_axis("key").reset_index()


# The chunk table's column holding each chunk's document key (``document_keys``): not one
# readers of the chunks see, but the one the next build's chunking looks its documents up by.
DOCUMENT_KEY = "doc_key"


def remove_legacy_chunk_memo(directory: Path) -> None:
    """Delete the chunk memo builds kept before the chunk table held document keys (as large as
    the chunk table, and read by nothing now)."""
    for path in [Path(directory) / "chunks.parquet", *Path(directory).glob("chunks.segment-*.parquet")]:
        path.unlink(missing_ok=True)


def chunker_tag(settings: ChunkingSettings) -> str:
    """What the chunks a table holds were made under: the chunking code, the chunk id scheme and
    the settings. Chunks made under another tag are made again."""
    scheme = inspect.getsource(Chunk.make_id) + inspect.getsource(document_key)
    return _source_hash(inspect.getsource(chunking), scheme, settings.model_dump_json())[:16]


def document_keys(documents: pd.DataFrame, tag: str) -> np.ndarray:
    """One key per row of a documents frame: a hash of its cleaned fields under ``tag``."""
    hashed = pd.util.hash_pandas_object(documents[list(DOCUMENT_COLUMNS)], index=False, hash_key=tag)
    return hashed.to_numpy(dtype=np.uint64)

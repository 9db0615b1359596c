"""What the previous build made of each catalog row and document, so that a re-run cleans and
chunks only what changed.

On a large catalog cleaning and chunking every row costs tens of seconds (ACL Anthology: about
25 s for 103k papers on 2 cores) while a nightly run or a posted document changes a handful. The
memo is a cache, keyed by content: a row's key is a hash of its bytes, of the cleaning rules'
source code and of the format, tenant and limit; a document's key is a hash of its cleaned
fields, of the chunker's source code and of its settings. A changed rule therefore misses the
cache instead of serving stale output. Each build rewrites the memo with exactly the rows and
documents it saw, so it never grows beyond one catalog.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from retrieval_assets.core.ingest import chunking, cleaning
from retrieval_assets.core.ingest.cleaning import PARSE_COLUMNS, RecordFormat, parse_rows
from retrieval_assets.core.io.tables import (
    CHUNK_COLUMNS,
    DOCUMENT_COLUMNS,
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
CHUNKS_FILE = "chunks.parquet"


def _source_hash(*parts: object) -> str:
    return hashlib.blake2b("\x00".join(map(str, parts)).encode(), digest_size=8).hexdigest()


def _row_keys(raw: pd.DataFrame, salt: str) -> Iterator[str]:
    """Each raw row's memo key, its text taken into Python a block of rows at a time."""
    for start in range(0, len(raw), RECORD_BLOCK_ROWS):
        block = raw.iloc[start : start + RECORD_BLOCK_ROWS]
        for text, error in zip(block["raw"].tolist(), block["utf8_error"].tolist(), strict=True):
            yield hashlib.blake2b(f"{salt}{int(error)}{text}".encode(), digest_size=16).hexdigest()


class ParsedRows:
    """Row parses (``cleaning.parse_rows`` records) of the previous build, by row key."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / PARSED_FILE
        previous = (
            pd.read_parquet(self.path) if self.path.is_file() else empty_frame({**PARSE_COLUMNS, "key": "string"})
        )
        # Keys as objects: pandas' isin on Arrow strings loops in Python over the values.
        self._previous = previous.set_index(previous["key"].astype(object)).drop(columns="key")
        self._seen: list[pd.DataFrame] = []
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
        """Keep exactly the rows this build parsed or reused."""
        seen = pd.concat(self._seen) if self._seen else self._previous.iloc[:0]
        frame = seen[~seen.index.duplicated()].rename_axis("key").reset_index()
        write_parquet(frame, self.path)


class ChunkMemo:
    """The previous build's chunks, each row with its document's key (``doc_key``)."""

    def __init__(self, directory: Path, settings: ChunkingSettings) -> None:
        self.path = Path(directory) / CHUNKS_FILE
        # The chunk id scheme is part of the key: chunks remembered under another one are made again.
        scheme = inspect.getsource(Chunk.make_id) + inspect.getsource(document_key)
        self._salt = _source_hash(inspect.getsource(chunking), scheme, settings.model_dump_json())[:16]

    def document_keys(self, documents: pd.DataFrame) -> pd.Series:
        """One key per row of a documents frame: its cleaned fields under this chunker."""
        hashed = pd.util.hash_pandas_object(documents[list(DOCUMENT_COLUMNS)], index=False, hash_key=self._salt)
        return hashed.astype("uint64")

    def previous(self) -> pd.DataFrame:
        if self.path.is_file():
            return pd.read_parquet(self.path)
        return empty_frame({**CHUNK_COLUMNS, "doc_key": "uint64"})

    def save(self, frame: pd.DataFrame) -> None:
        write_parquet(frame, self.path)

"""What the previous build made of each catalog row and document, so that a re-run cleans and
chunks only what changed.

On a large catalog cleaning and chunking every row costs tens of seconds (ACL Anthology: about
25 s for 103k papers on 2 cores) while a nightly run or a posted document changes a handful. The
memo is a cache, keyed by content: a row's key is its content hash (``raw_table.ROW_DIGEST``)
and a hash of the cleaning rules' source code, format, tenant and limit; a document's key is a hash of its cleaned
fields, of the chunker's source code and of its settings. A changed rule therefore misses the
cache instead of serving stale output. Each memo is what the last build made and nothing older:
its records of every catalog row (``ParsedRows``), and the chunk table itself, which keeps each
chunk's document key (``DOCUMENT_KEY``, ``steps.chunk_into_table``). Both are tables a build
extends (``core.io.parted``), so a small change writes little.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from retrieval_assets.core.ingest import chunking, cleaning
from retrieval_assets.core.ingest.cleaning import PARSE_COLUMNS, RecordFormat, parse_rows
from retrieval_assets.core.ingest.raw_table import (
    DIGEST_BYTES,
    ROW_DIGEST,
    digest_matrix,
    fixed_width_keys,
    with_digests,
    with_texts,
)
from retrieval_assets.core.io.parted import PartedTable, TableWrite, extended_or_whole, open_table
from retrieval_assets.core.io.tables import (
    DOCUMENT_COLUMNS,
    empty_frame,
    frame_to_raw_rows,
    interleave,
    rows_where,
)
from retrieval_assets.core.models import Chunk, document_key
from retrieval_assets.core.settings import ChunkingSettings

PARSED_STEM = "parsed_rows"
# The records table's layout and what the cleaned documents table is made of; a table stored
# under another tag is no memo.
RECORDS_TAG = "parse-records-2"
DOCUMENTS_TAG = "documents"
KEY = "key"
KEY_BYTES = 8 + DIGEST_BYTES
# Stored as binary (pandas reads no fixed-width binary column back from Parquet), looked up at
# fixed width (``raw_table.fixed_width_keys``): 0.22 against 0.46 s for a million keys.
KEY_TYPE = pa.binary()
KEY_DTYPE = pd.ArrowDtype(KEY_TYPE)
FIXED_KEY_TYPE = pa.binary(KEY_BYTES)
# A record's position in its build's records table.
RECORD = "record"
# The record columns cleaning reads for every row; titles, texts and metadata it does not.
LIGHT_COLUMNS = ["doc_id", "tenant_id", "vectors", "reason", "detail"]


def _source_hash(*parts: object) -> str:
    return hashlib.blake2b("\x00".join(map(str, parts)).encode(), digest_size=8).hexdigest()


def _row_keys(raw: pd.DataFrame, salt: str) -> pa.FixedSizeBinaryArray:
    """Each raw row's memo key: the salt (8 bytes of hex) followed by the row's content digest
    (``raw_table.ROW_DIGEST``, computed where ``raw`` has none)."""
    digests = with_digests(raw)[ROW_DIGEST].array.__arrow_array__()
    digests = digests.combine_chunks() if isinstance(digests, pa.ChunkedArray) else digests
    salted = np.broadcast_to(np.frombuffer(bytes.fromhex(salt), dtype=np.uint8), (len(raw), KEY_BYTES - DIGEST_BYTES))
    return fixed_width_keys([salted, digest_matrix(digests)])


class ParsedRows:
    """This build's row parses (``cleaning.parse_rows`` records) as a table the next build looks
    rows up in by key: one record per catalog row, in row order, then one per document the inbox
    adds. The last build's records of rows seen again stay where they are and only the rows
    parsed now are written (``core.io.parted``): a 1 % delta of a million rows no longer copies
    every record (4.2 s in a profile). Cleaning sees each row's ``LIGHT_COLUMNS`` and its
    ``RECORD``, its position in the table; the cleaned documents table is the kept documents'
    records of the saved table, not a copy of them (``documents``)."""

    def __init__(self, directory: Path) -> None:
        self._stem = Path(directory) / PARSED_STEM
        last = open_table(self._stem)
        self._last = last if last is not None and last.tag == RECORDS_TAG else None
        self._last_keys = self._last.column(KEY) if self._last is not None else pa.chunked_array([], KEY_TYPE)
        self._sources: list[np.ndarray] = []
        self._fresh: list[pd.DataFrame] = []
        self._rows = 0
        self._saved: PartedTable | None = None
        self.reused = self.parsed = 0

    def parse(
        self,
        raw: pd.DataFrame,
        fmt: RecordFormat,
        tenant_id: str,
        max_text_chars: int,
        raw_texts: Callable[[np.ndarray], list[str]] | None = None,
    ) -> pd.DataFrame:
        """The ``LIGHT_COLUMNS`` of ``parse_rows`` records of a raw rows frame, in row order, and
        each one's ``RECORD``: the last build's record of a row seen before (same content, cleaning
        code, format, tenant and limit), else the row parsed now. ``raw`` may lack the rows' text
        where it has their digests (``raw_table.LIGHT_RAW_COLUMNS``): ``raw_texts`` then gives the
        text of the rows parsed now, by position."""
        salt = _source_hash(inspect.getsource(cleaning), fmt, tenant_id, max_text_chars)
        keys = _row_keys(raw, salt)
        found = pc.index_in(keys, value_set=self._last_keys.cast(FIXED_KEY_TYPE))
        found = pc.fill_null(found, -1).to_numpy(zero_copy_only=False)
        found = found.astype(np.int64)
        known = found >= 0
        unknown = with_texts(rows_where(raw, ~known) if known.any() else raw, np.flatnonzero(~known), raw_texts)
        fresh = parse_rows(frame_to_raw_rows(unknown), fmt, tenant_id, max_text_chars)
        light = self._in_row_order(found, fresh[LIGHT_COLUMNS])
        self.reused += int(known.sum())
        self.parsed += len(fresh)
        added = pd.Series(pd.arrays.ArrowExtensionArray(keys.filter(pa.array(~known)).cast(KEY_TYPE)), dtype=KEY_DTYPE)
        return light.assign(**{RECORD: self._add(found, fresh.assign(**{KEY: added.to_numpy()}))})

    def add(self, documents: pd.DataFrame) -> pd.DataFrame:
        """``documents`` (a ``DOCUMENT_COLUMNS`` frame not parsed from catalog rows: the inbox's)
        as records of this build, in the form ``parse`` gives. They have no key: no later build
        finds them."""
        records = documents.reindex(columns=list(PARSE_COLUMNS)).astype(PARSE_COLUMNS)
        positions = self._add(np.full(len(documents), -1, dtype=np.int64), records.assign(**{KEY: None}))
        return records[LIGHT_COLUMNS].reset_index(drop=True).assign(**{RECORD: positions})

    def _add(self, sources: np.ndarray, fresh: pd.DataFrame) -> np.ndarray:
        """Records of this build: ``sources`` (a last build's record, or -1 for the next of
        ``fresh``); their positions in this build's table."""
        self._sources.append(sources)
        self._fresh.append(fresh.astype({KEY: KEY_DTYPE}))
        positions = self._rows + np.arange(len(sources))
        self._rows += len(sources)
        return positions

    def _in_row_order(self, found: np.ndarray, fresh: pd.DataFrame) -> pd.DataFrame:
        """The last build's records at ``found`` (-1: the next row of ``fresh``), in that order."""
        known = found >= 0
        if not known.any() or self._last is None:
            return fresh.reset_index(drop=True)
        kept = self._last.take(found[known], list(fresh.columns)).to_pandas().astype(fresh.dtypes.to_dict())
        return interleave(kept, fresh, known)

    def texts(self, records: np.ndarray) -> list[str]:
        """The text of each of these records of this build (for a duplicate id's detail)."""
        sources, fresh = self._pending()
        at = sources[records]
        texts = np.empty(len(records), dtype=object)
        if (at >= 0).any() and self._last is not None:
            texts[at >= 0] = self._last.take(at[at >= 0], ["text"]).column(0).to_pylist()
        added = (np.cumsum(sources < 0) - 1)[records[at < 0]]
        texts[at < 0] = fresh["text"].iloc[added].tolist()
        return texts.tolist()

    def _pending(self) -> tuple[np.ndarray, pd.DataFrame]:
        sources = np.concatenate(self._sources) if self._sources else np.zeros(0, dtype=np.int64)
        fresh = pd.concat(self._fresh, ignore_index=True) if self._fresh else _empty_records()
        return sources, fresh

    def save(self) -> None:
        """Store this build's records: the last build's kept in place and the new ones added, or,
        once that table would be too scattered (``worth_extending``), every record written."""
        sources, fresh = self._pending()
        if self._last is None:
            write = TableWrite(fresh, RECORDS_TAG)
        else:
            write = extended_or_whole(fresh, RECORDS_TAG, self._last, sources)
        write.write(self._stem)
        # Segments of the memo builds kept before it was one table.
        for segment in self._stem.parent.glob(f"{PARSED_STEM}.segment-*.parquet"):
            segment.unlink(missing_ok=True)
        self._saved = open_table(self._stem)

    def documents(self, documents: pd.DataFrame) -> TableWrite:
        """The cleaned documents table of ``documents`` (``parse``'s form: each one's ``RECORD``),
        once ``save``d: runs of the saved table's rows, its document columns only, where that
        table is not too scattered for it; else those rows written."""
        if self._saved is None:
            raise RuntimeError("save the records before making the documents table of them")
        sources = documents[RECORD].to_numpy(dtype=np.int64)
        return extended_or_whole(_empty_records(), DOCUMENTS_TAG, self._saved, sources, tuple(DOCUMENT_COLUMNS))


def _empty_records() -> pd.DataFrame:
    return empty_frame({**PARSE_COLUMNS, KEY: KEY_DTYPE})


# The chunk table's column holding each chunk's document key (``document_keys``): not one
# readers of the chunks see, but the one the next build's chunking looks its documents up by.
DOCUMENT_KEY = "doc_key"
# Whether each chunk's text is empty or only whitespace, kept beside it for the chunks' check.
BLANK_TEXT = "blank_text"
# What a chunk table holds beside its chunks (with the row hash, ``tables.ROW_HASH``): part of
# its tag, so that a table without one of them is made again rather than extended.
CHUNK_TABLE_LAYOUT = "doc_key,row_hash,blank_text"


def remove_legacy_chunk_memo(directory: Path) -> None:
    """Delete the chunk memo builds kept before the chunk table held document keys (as large as
    the chunk table, and read by nothing now)."""
    for path in [Path(directory) / "chunks.parquet", *Path(directory).glob("chunks.segment-*.parquet")]:
        path.unlink(missing_ok=True)


def chunker_tag(settings: ChunkingSettings) -> str:
    """What the chunks a table holds were made under: the chunking code, the chunk id scheme and
    the settings. Chunks made under another tag are made again."""
    scheme = inspect.getsource(Chunk.make_id) + inspect.getsource(document_key)
    return _source_hash(inspect.getsource(chunking), scheme, settings.model_dump_json(), CHUNK_TABLE_LAYOUT)[:16]


def document_keys(documents: pd.DataFrame, tag: str) -> np.ndarray:
    """One key per row of a documents frame: a hash of its cleaned fields under ``tag``."""
    hashed = pd.util.hash_pandas_object(documents[list(DOCUMENT_COLUMNS)], index=False, hash_key=tag)
    return hashed.to_numpy(dtype=np.uint64)


def stored_document_keys(documents: PartedTable, tag: str) -> np.ndarray:
    """``document_keys`` of a stored cleaned documents table, by way of the records' row keys it
    holds (``KEY``): a document's fields are those its row parses to, so the row key names them,
    and a million documents' texts are neither read nor hashed (about 3 s a delta). A document
    without one (the inbox's) is hashed from its fields."""
    record_keys = documents.read([KEY]).column(0)
    missing = record_keys.is_null().to_numpy(zero_copy_only=False)
    keys = np.zeros(len(record_keys), dtype=np.uint64)
    present = record_keys.filter(pc.invert(record_keys.is_null())).to_numpy(zero_copy_only=False)
    keys[~missing] = pd.util.hash_array(present.astype(object), hash_key=tag)
    if missing.any():
        keys[missing] = document_keys(documents_at(documents, np.flatnonzero(missing)), tag)
    return keys


def documents_at(documents: PartedTable, positions: np.ndarray) -> pd.DataFrame:
    """The rows at ``positions`` of a stored documents table, as a ``DOCUMENT_COLUMNS`` frame."""
    return documents.take(positions, list(DOCUMENT_COLUMNS)).to_pandas().astype(DOCUMENT_COLUMNS)

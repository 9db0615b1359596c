"""The raw catalog table as a table a build extends (``core.io.parted``), each row with a digest
of its content.

A nightly delta of a million-line catalog changes a few thousand lines, yet the raw table was
written whole and cleaning read all of it back (1.2 GB: 4.6 s in a profiled 1 % delta) to hash
every row. Now the raw step hashes each row while it holds it, keeps the last build's rows that
are the same row (same source, line number and digest) where they are, and writes only the
others, in a file of their own. Cleaning reads the rows' light columns and digests, and the text
of only the rows it parses: the changed ones, which lie in that file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from retrieval_assets.core.io.parted import PartedTable, TableWrite, extended_or_whole
from retrieval_assets.core.io.tables import RAW_ROW_COLUMNS, RECORD_BLOCK_ROWS, take_rows

# The layout of a raw table that a build may extend; a table stored under another tag (or a
# plain file, as builds before it wrote) is written whole again.
RAW_TABLE_TAG = "raw-rows-1"
# Each row's content digest (``row_digests``): stored beside the row, not shown to readers.
ROW_DIGEST = "row_digest"
DIGEST_BYTES = 16
# What cleaning reads of every row; the text it reads only for the rows it parses.
LIGHT_RAW_COLUMNS = ["source", "line_number", "utf8_error", ROW_DIGEST]


def row_digests(raw: pd.DataFrame) -> pa.BinaryArray:
    """Each raw row's content digest: BLAKE2b of its UTF-8 error flag and its text's bytes.
    Hashed from the Arrow column's own bytes where it is one (977k rows: 1.25 s against 2 s
    through Python strings), else from its text a block of rows at a time. Binary, not fixed
    width: pandas reads no fixed-width binary column back from Parquet."""
    digests = b"".join(_digests(raw))
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(DIGEST_BYTES), len(raw), [None, pa.py_buffer(digests)])
    return fixed.cast(pa.binary())


def _digests(raw: pd.DataFrame) -> Iterator[bytes]:
    flagged = {error: hashlib.blake2b(bytes([error]), digest_size=DIGEST_BYTES) for error in (0, 1)}
    errors = raw["utf8_error"].to_numpy(dtype=bool).astype(np.uint8).tolist()
    texts = raw["raw"].array
    if not isinstance(texts, pd.arrays.ArrowStringArray):
        for start in range(0, len(raw), RECORD_BLOCK_ROWS):
            block = raw["raw"].iloc[start : start + RECORD_BLOCK_ROWS].tolist()
            for text, error in zip(block, errors[start : start + RECORD_BLOCK_ROWS], strict=True):
                hasher = flagged[error].copy()
                hasher.update(text.encode("utf-8", errors="surrogatepass"))
                yield hasher.digest()
        return
    row = 0
    for chunk in texts.__arrow_array__().chunks:
        offsets, data = _string_buffers(chunk)
        for first, last in zip(offsets[:-1], offsets[1:], strict=True):
            hasher = flagged[errors[row]].copy()
            hasher.update(data[first:last])
            yield hasher.digest()
            row += 1


def _string_buffers(chunk: pa.Array) -> tuple[list[int], memoryview]:
    """A string array's value offsets (one more than its rows) and its data, not copied."""
    _, offsets, data = chunk.buffers()
    width = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
    bounds = np.frombuffer(offsets, dtype=width)[chunk.offset : chunk.offset + len(chunk) + 1].tolist()
    return bounds, memoryview(data) if data is not None else memoryview(b"")


def with_digests(raw: pd.DataFrame) -> pd.DataFrame:
    """``raw`` with its ``ROW_DIGEST`` column (computed where it has none)."""
    if ROW_DIGEST in raw.columns:
        return raw
    return raw.assign(**{ROW_DIGEST: pd.Series(pd.arrays.ArrowExtensionArray(row_digests(raw)), index=raw.index)})


def raw_table(raw: pd.DataFrame, last: PartedTable | None) -> TableWrite:
    """The raw table of ``raw`` (every row read now) to store: the rows of ``last`` (the last
    build's raw table) that are the same row, in the same source at the same line with the same
    digest, kept in place, and the others written; or every row written where there is no such
    table or the result would be too scattered."""
    raw = with_digests(raw[list(RAW_ROW_COLUMNS)]).reset_index(drop=True)
    shown = tuple(RAW_ROW_COLUMNS)
    if last is None or last.tag != RAW_TABLE_TAG or not last.rows:
        return TableWrite(raw, RAW_TABLE_TAG, columns=shown)
    found = _same_rows(raw, last.read(["source", "line_number", ROW_DIGEST]))
    if not (found >= 0).any():
        return TableWrite(raw, RAW_TABLE_TAG, columns=shown)
    return extended_or_whole(take_rows(raw, np.flatnonzero(found < 0)), RAW_TABLE_TAG, last, found, shown)


def _same_rows(raw: pd.DataFrame, last: pa.Table) -> np.ndarray:
    """For each row of ``raw``, the position in ``last`` of the same row (source, line number and
    digest), else -1."""
    ours = pa.Table.from_pandas(raw[["source", "line_number", ROW_DIGEST]], preserve_index=False)
    names = pc.unique(ours.column("source").cast(pa.large_string()))
    found = pc.index_in(_identity(ours, names), value_set=_identity(last, names))
    return pc.fill_null(found, -1).to_numpy(zero_copy_only=False).astype(np.int64)


def _identity(rows: pa.Table, names: pa.Array) -> pa.FixedSizeBinaryArray:
    """Each row's digest, line number and source (its place in ``names``; -1 for one not in
    them) as one fixed-width key."""
    line = rows.column("line_number").to_numpy().astype(np.int64)
    place = pc.index_in(rows.column("source").cast(pa.large_string()), value_set=names)
    key = np.empty((len(line), DIGEST_BYTES + 12), dtype=np.uint8)
    key[:, :DIGEST_BYTES] = digest_matrix(rows.column(ROW_DIGEST).combine_chunks())
    key[:, DIGEST_BYTES : DIGEST_BYTES + 8] = line.view(np.uint8).reshape(-1, 8)
    key[:, DIGEST_BYTES + 8 :] = pc.fill_null(place, -1).to_numpy(zero_copy_only=False).astype(np.int32).view(
        np.uint8
    ).reshape(-1, 4)
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(key.shape[1]), len(line), [None, pa.py_buffer(key)])


def digest_matrix(digests: pa.Array) -> np.ndarray:
    """A digest column as a (rows, ``DIGEST_BYTES``) byte matrix."""
    digests = digests.cast(pa.binary(DIGEST_BYTES))
    data = np.frombuffer(digests.buffers()[1], dtype=np.uint8)
    return data[digests.offset * DIGEST_BYTES : (digests.offset + len(digests)) * DIGEST_BYTES].reshape(
        -1, DIGEST_BYTES
    )


def with_texts(
    rows: pd.DataFrame, positions: np.ndarray, raw_texts: Callable[[np.ndarray], list[str]] | None
) -> pd.DataFrame:
    """``rows`` with their text: as they are where they hold it, else the texts ``raw_texts``
    gives for ``positions`` (the rows' places in what it reads)."""
    if "raw" in rows.columns:
        return rows
    if raw_texts is None:
        raise ValueError("raw rows without their text need a way to read it (raw_texts)")
    texts = pd.Series(raw_texts(np.asarray(positions, dtype=np.int64)), index=rows.index, dtype="string")
    return rows.assign(raw=texts)[list(RAW_ROW_COLUMNS) + [c for c in rows.columns if c not in RAW_ROW_COLUMNS]]


def light_rows(table: PartedTable) -> pd.DataFrame:
    """What cleaning reads of every row of a stored raw table: ``LIGHT_RAW_COLUMNS``, or every
    column of a table stored without digests (by an older build)."""
    if ROW_DIGEST not in table.held_columns:
        return table.read_pandas()
    return table.read_pandas(LIGHT_RAW_COLUMNS)


def stored_texts(table: PartedTable) -> Callable[[np.ndarray], list[str]]:
    """The texts of a stored raw table's rows, by position."""
    return lambda positions: table.take(positions, ["raw"]).column(0).to_pylist()

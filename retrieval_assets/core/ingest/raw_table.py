"""The raw catalog table as a table a build extends (``core.io.parted``), each row with a digest
of its content.

A nightly delta of a million-line catalog changes a few thousand lines, yet the raw table was
written whole and cleaning read all of it back (1.2 GB: 4.6 s in a profiled 1 % delta) to hash
every row. Now the raw step hashes each row as it reads it (a JSON Lines file from the bytes of
its memory map, without making its texts), keeps the last build's rows that are the same row
(same source, line number and digest) where they are, and writes only the others, in a file of
their own. Cleaning reads the rows' light columns and digests, and the text of only the rows it
parses: the changed ones, which lie in that file.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from retrieval_assets.core.ingest.catalog import LineBlock
from retrieval_assets.core.io.parted import PartedTable, TableWrite, extended_or_whole
from retrieval_assets.core.io.tables import RAW_ROW_COLUMNS, raw_lines_frame, raw_rows_to_frame, take_rows

# The layout of a raw table that a build may extend; a table stored under another tag (or a
# plain file, as builds before it wrote) is written whole again.
RAW_TABLE_TAG = "raw-rows-1"
# Each row's content digest (``SourceRows.digests``): stored beside the row, not shown to readers.
ROW_DIGEST = "row_digest"
DIGEST_BYTES = 16
# What cleaning reads of every row; the text it reads only for the rows it parses.
LIGHT_RAW_COLUMNS = ["source", "line_number", "utf8_error", ROW_DIGEST]


class SourceRows(ABC):
    """One catalog source's rows as read, for the raw table: each row's line number and content
    digest, and the rows asked for as raw rows. The digest is BLAKE2b of the row's UTF-8 error
    flag and its text's bytes."""

    def __init__(self, source: str, line_numbers: np.ndarray) -> None:
        self.source = source
        self.line_numbers = line_numbers
        self._digests: pa.BinaryArray | None = None

    def __len__(self) -> int:
        return len(self.line_numbers)

    def digests(self) -> pa.BinaryArray:
        """Each row's digest (hashed once). Binary, not fixed width: pandas reads no fixed-width
        binary column back from Parquet."""
        if self._digests is None:
            width = pa.binary(DIGEST_BYTES)
            fixed = pa.FixedSizeBinaryArray.from_buffers(width, len(self), [None, pa.py_buffer(self._hashed())])
            self._digests = fixed.cast(pa.binary())
        return self._digests

    def frame(self, positions: np.ndarray | None = None, digests: bool = False) -> pd.DataFrame:
        """The rows at ``positions`` (ascending; every row by default) as raw rows
        (``RAW_ROW_COLUMNS``), with ``ROW_DIGEST`` where ``digests``."""
        frame = self._rows(positions)
        if not digests:
            return frame
        hashed = self.digests() if positions is None else self.digests().take(pa.array(positions, pa.int64()))
        return frame.assign(**{ROW_DIGEST: pd.arrays.ArrowExtensionArray(hashed)})

    @abstractmethod
    def _rows(self, positions: np.ndarray | None) -> pd.DataFrame:
        """The rows at ``positions`` (every row for None) as raw rows."""

    @abstractmethod
    def _hashed(self) -> bytes:
        """Every row's digest, joined."""


class FrameRows(SourceRows):
    """The rows of a raw rows frame (a folder, table or inbox read row by row)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        super().__init__(str(frame["source"].iat[0]) if len(frame) else "", frame["line_number"].to_numpy(np.int64))
        self._frame = frame.reset_index(drop=True)

    def _rows(self, positions: np.ndarray | None) -> pd.DataFrame:
        return self._frame if positions is None else take_rows(self._frame, positions).reset_index(drop=True)

    def _hashed(self) -> bytes:
        errors = self._frame["utf8_error"].to_numpy(dtype=bool)
        texts = self._frame["raw"].array
        if isinstance(texts, pd.arrays.ArrowStringArray):
            return _hash_spans([_string_spans(chunk) for chunk in texts.__arrow_array__().chunks], errors)
        encoded = [text.encode("utf-8", errors="surrogatepass") for text in self._frame["raw"].tolist()]
        offsets = np.cumsum([0, *map(len, encoded)])
        return _hash_spans([(memoryview(b"".join(encoded)), offsets[:-1], offsets[1:])], errors)


class LineRows(SourceRows):
    """The rows of a JSON Lines file, in the blocks it was read in (``read_line_blocks``): hashed
    from the bytes read, their texts made only for the rows asked for (a 1M-line catalog's texts
    are 1.2 GB, and a delta writes a few thousand of them)."""

    def __init__(self, source: str, blocks: list[LineBlock]) -> None:
        numbers = [block.line_numbers for block in blocks]
        super().__init__(source, np.concatenate(numbers) if numbers else np.zeros(0, np.int64))
        self._blocks = blocks
        self._firsts = np.cumsum([0, *(len(block.line_numbers) for block in blocks)])

    def _rows(self, positions: np.ndarray | None) -> pd.DataFrame:
        if positions is None:
            made = [block.texts() for block in self._blocks]
            numbers = self.line_numbers
        else:
            positions = np.asarray(positions, dtype=np.int64)
            block_of = np.searchsorted(self._firsts, positions, side="right") - 1
            made = [
                self._blocks[index].texts(positions[block_of == index] - self._firsts[index])
                for index in np.unique(block_of).tolist()
            ]
            numbers = self.line_numbers[positions]
        texts = pa.chunked_array([texts for texts, _ in made], pa.large_string())
        errors = np.concatenate([errors for _, errors in made]) if made else np.zeros(0, dtype=bool)
        return raw_lines_frame(self.source, numbers, texts, errors)

    def _hashed(self) -> bytes:
        digests = []
        for block in self._blocks:
            if block.utf8:
                spans = [(block.data, block.starts, block.stops)]
                errors = np.zeros(len(block.line_numbers), dtype=bool)
            else:  # hashed from the lossy decode, as the frame of the same lines is
                texts, errors = block.texts()
                spans = [_string_spans(texts)]
            digests.append(_hash_spans(spans, errors))
        return b"".join(digests)


def _hash_spans(spans: list[tuple[memoryview, np.ndarray, np.ndarray]], errors: np.ndarray) -> bytes:
    """The digests of the rows whose bytes are ``data[start:stop]`` for each of ``spans``' data,
    starts and stops, in order, with their error flags, joined."""
    flagged = {error: hashlib.blake2b(bytes([error]), digest_size=DIGEST_BYTES) for error in (0, 1)}
    flags = errors.astype(np.uint8).tolist()
    digests, row = [], 0
    for data, starts, stops in spans:
        for first, last in zip(starts.tolist(), stops.tolist(), strict=True):
            hasher = flagged[flags[row]].copy()
            hasher.update(data[first:last])
            digests.append(hasher.digest())
            row += 1
    return b"".join(digests)


def _string_spans(chunk: pa.Array) -> tuple[memoryview, np.ndarray, np.ndarray]:
    """A string array's data and each value's start and stop in it, not copied."""
    _, offsets, data = chunk.buffers()
    width = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
    bounds = np.frombuffer(offsets, dtype=width)[chunk.offset : chunk.offset + len(chunk) + 1]
    return (memoryview(data) if data is not None else memoryview(b"")), bounds[:-1], bounds[1:]


def with_digests(raw: pd.DataFrame) -> pd.DataFrame:
    """``raw`` with its ``ROW_DIGEST`` column (computed where it has none)."""
    if ROW_DIGEST in raw.columns:
        return raw
    return FrameRows(raw).frame(digests=True).set_axis(raw.index)


def raw_table(read: Sequence[SourceRows], last: PartedTable | None) -> TableWrite:
    """The raw table of the rows read now, to store: the rows of ``last`` (the last build's raw
    table) that are the same row, in the same source at the same line with the same digest,
    kept in place, and the others written; or every row written where there is no such table or
    the result would be too scattered."""
    shown = tuple(RAW_ROW_COLUMNS)
    if last is None or last.tag != RAW_TABLE_TAG or not last.rows:
        return TableWrite(_frames(read, None), RAW_TABLE_TAG, columns=shown)
    found = _same_rows(read, last.read(["source", "line_number", ROW_DIGEST]))
    if not (found >= 0).any():
        return TableWrite(_frames(read, None), RAW_TABLE_TAG, columns=shown)
    return extended_or_whole(_frames(read, found < 0), RAW_TABLE_TAG, last, found, shown)


def _frames(read: Sequence[SourceRows], chosen: np.ndarray | None) -> pd.DataFrame:
    """The rows read (those ``chosen``, where given) with their digests, as one frame."""
    frames, first = [], 0
    for rows in read:
        mine = None if chosen is None else np.flatnonzero(chosen[first : first + len(rows)])
        first += len(rows)
        if mine is None or len(mine):
            frames.append(rows.frame(mine, digests=True))
    if not frames:
        return FrameRows(raw_rows_to_frame([])).frame(digests=True)
    return pd.concat(frames, ignore_index=True)


def _same_rows(read: Sequence[SourceRows], last: pa.Table) -> np.ndarray:
    """For each row read, the position in ``last`` of the same row (source, line number and
    digest), else -1."""
    names = pa.array([rows.source for rows in read], pa.large_string())
    ours = _identity(
        np.repeat(np.arange(len(read), dtype=np.int32), [len(rows) for rows in read]),
        np.concatenate([rows.line_numbers for rows in read] or [np.zeros(0, np.int64)]),
        pa.concat_arrays([rows.digests() for rows in read] or [pa.array([], pa.binary())]),
    )
    place = pc.index_in(last.column("source").cast(pa.large_string()), value_set=names)
    theirs = _identity(
        pc.fill_null(place, -1).to_numpy(zero_copy_only=False).astype(np.int32),
        last.column("line_number").to_numpy().astype(np.int64),
        last.column(ROW_DIGEST).combine_chunks(),
    )
    return pc.fill_null(pc.index_in(ours, value_set=theirs), -1).to_numpy(zero_copy_only=False).astype(np.int64)


def _identity(place: np.ndarray, line: np.ndarray, digests: pa.Array) -> pa.FixedSizeBinaryArray:
    """Each row's digest, line number and source (its place in the sources read; -1 for none of
    them) as one fixed-width key."""
    return fixed_width_keys(
        [digest_matrix(digests), line.view(np.uint8).reshape(-1, 8), place.view(np.uint8).reshape(-1, 4)]
    )


def fixed_width_keys(parts: Sequence[np.ndarray]) -> pa.FixedSizeBinaryArray:
    """One key per row made of ``parts``' bytes side by side (each a (rows, width) byte matrix):
    looked up at fixed width, a million keys take half the time of binary ones."""
    key = np.hstack(parts)
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(key.shape[1]), len(key), [None, pa.py_buffer(key)])


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

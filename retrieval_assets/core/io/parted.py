"""Stored tables that a build extends instead of rewriting: a table whose rows are runs of rows
of several Parquet files, listed in a manifest.

A nightly delta changes a few of a million embedding rows, yet rewrote the whole table (a million
SPLADE vectors: 2.8 s to write, as long to read back). A parted table keeps the rows it had, where
they are, and writes only the new ones to a file of their own; the manifest says which runs of
which file make the table, in its row order. Past ``MAX_FILES`` files, a quarter of unused rows in
them, or runs shorter than ``MIN_MEAN_RUN`` rows on average, the table is written whole again.

A table may show fewer columns than its files hold: the chunk table keeps each chunk's document
key beside it, which the next build's chunking looks up and no reader of chunks sees.

A plain ``{stem}.parquet`` reads as a table of one part, so every reader takes either form.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from retrieval_assets.core.io.files import link_or_copy, write_json
from retrieval_assets.core.io.tables import interleave, parquet_row_slices, write_parquet

MANIFEST_SUFFIX = ".parts.json"
PLAIN_SUFFIX = ".parquet"
# A table is written whole again past this many files, ...
MAX_FILES = 16
# ... once fewer than this share of its files' rows are in use, ...
MIN_USED_SHARE = 0.75
# ... or once its runs are this short on average (reading it would be a take of scattered rows).
MIN_MEAN_RUN = 16


@dataclass(frozen=True)
class PartedTable:
    """The stored rows of a table: ``pieces[i] = (file, start, stop)`` are the rows
    ``start:stop`` of ``files[file]`` (names in ``directory``), in table order. ``tag`` is what
    the writer recorded to know the rows are still valid (an encoder's fingerprint); a plain
    file has none. ``columns`` are the ones a read returns when it names none (None: all the
    files hold); a read that names others gets them."""

    directory: Path
    files: tuple[str, ...]
    pieces: np.ndarray
    file_rows: tuple[int, ...]
    tag: str | None = None
    columns: tuple[str, ...] | None = None

    @property
    def rows(self) -> int:
        return int((self.pieces[:, 2] - self.pieces[:, 1]).sum()) if len(self.pieces) else 0

    @property
    def paths(self) -> list[Path]:
        return [self.directory / name for name in self.files]

    @property
    def held_columns(self) -> list[str]:
        """Every column its files hold, those it does not show included."""
        return pq.read_schema(self.paths[0]).names if self.paths else []

    @property
    def whole_file(self) -> Path | None:
        """The one file this table is, all of its rows in order; None for a parted table."""
        if len(self.files) == 1 and len(self.pieces) == 1 and tuple(self.pieces[0][1:]) == (0, self.file_rows[0]):
            return self.paths[0]
        return None

    def _shown(self, columns: Sequence[str] | None) -> list[str] | None:
        """The columns a read of ``columns`` returns."""
        if columns is not None:
            return list(columns)
        return list(self.columns) if self.columns is not None else None

    def read(self, columns: Sequence[str] | None = None) -> pa.Table:
        """Every row, ``columns`` only when given."""
        columns = self._shown(columns)
        whole = self.whole_file
        if whole is not None:
            return pq.read_table(whole, columns=columns)
        tables = [pq.read_table(path, columns=columns) for path in self.paths]
        if not len(self.pieces):
            return tables[0].slice(0, 0) if tables else pa.table({})
        return pa.concat_tables([tables[file].slice(start, stop - start) for file, start, stop in self.pieces.tolist()])

    def read_pandas(self, columns: Sequence[str] | None = None, dtype_backend: str | None = None) -> pd.DataFrame:
        """``read`` as ``pd.read_parquet`` would give it (Arrow-backed columns with
        ``dtype_backend="pyarrow"``)."""
        whole, columns = self.whole_file, self._shown(columns)
        if whole is not None:
            options = {"dtype_backend": dtype_backend} if dtype_backend else {}
            return pd.read_parquet(whole, columns=columns, **options)
        return _to_pandas(self.read(columns), dtype_backend)

    def column(self, name: str) -> pa.ChunkedArray:
        return self.read([name]).column(0)

    def read_where(
        self, column: str, values: Collection[str], columns: Sequence[str] | None = None
    ) -> pa.Table:
        """The rows whose ``column`` holds one of ``values``, in table order, decoding only the row
        groups that hold them (a delta's upserted rows lie in its newest file)."""
        columns = self._shown(columns)
        if columns is not None and column not in columns:
            raise ValueError(f"read_where selects on {column!r}, which the columns {columns} leave out")
        wanted = pa.array(list(values), type=pa.string())
        found: list[pa.Table] = []
        positions: list[np.ndarray] = []
        for index, path in enumerate(self.paths):
            file = pq.ParquetFile(path)
            held = np.flatnonzero(pc.is_in(file.read(columns=[column]).column(0), value_set=wanted).to_numpy(False))
            rows, logical = self._in_use(index, held)
            if not len(rows):
                continue
            found.append(_rows_of(file, rows, columns))
            positions.append(logical)
        return self._in_order(found, positions, columns)

    def take(self, positions: Sequence[int] | np.ndarray, columns: Sequence[str] | None = None) -> pa.Table:
        """The rows at these positions of the table, in this order, decoding only the row groups
        that hold them (a delta's chunks to encode, not a million chunks' texts: 1.4 s a step)."""
        wanted, columns = np.asarray(positions, dtype=np.int64), self._shown(columns)
        if wanted.size and (wanted.min() < 0 or wanted.max() >= self.rows):
            raise IndexError(f"positions out of range for a table of {self.rows} rows")
        starts = np.cumsum(np.r_[0, self.pieces[:, 2] - self.pieces[:, 1]])
        piece = np.searchsorted(starts, wanted, side="right") - 1
        files, rows = self.pieces[piece, 0], self.pieces[piece, 1] + wanted - starts[piece]
        found, order = [], []
        for file in np.unique(files).tolist():
            mine = np.flatnonzero(files == file)
            found.append(_rows_of(pq.ParquetFile(self.paths[file]), rows[mine], columns))
            order.append(mine)
        return self._in_order(found, order, columns)

    def _in_order(self, found: list[pa.Table], positions: list[np.ndarray], columns: Sequence[str] | None) -> pa.Table:
        """``found`` tables' rows, each at its place in ``positions``, in those places' order."""
        if not found:
            empty = pq.ParquetFile(self.paths[0]).schema_arrow if self.paths else pa.schema([])
            selected = empty if columns is None else pa.schema([empty.field(name) for name in columns])
            return selected.empty_table()
        table = pa.concat_tables(found)
        return table.take(pa.array(np.argsort(np.concatenate(positions), kind="stable")))

    def _in_use(self, file: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Of these rows of one file, those the table uses, and their positions in the table."""
        mine = np.flatnonzero(self.pieces[:, 0] == file)
        if not len(mine) or not len(rows):
            return rows[:0], rows[:0]
        starts = np.cumsum(np.r_[0, self.pieces[:-1, 2] - self.pieces[:-1, 1]])
        order = mine[np.argsort(self.pieces[mine, 1], kind="stable")]
        piece = order[np.maximum(np.searchsorted(self.pieces[order, 1], rows, side="right") - 1, 0)]
        used = (rows >= self.pieces[piece, 1]) & (rows < self.pieces[piece, 2])
        logical = starts[piece] + rows - self.pieces[piece, 1]
        return rows[used], logical[used]

    def row_slices(self, rows: int, columns: Sequence[str] | None = None) -> Iterator[pa.Table]:
        """The table's rows in consecutive slices of exactly ``rows`` (the last may be shorter),
        a few row groups of each file held at a time."""
        whole, columns = self.whole_file, self._shown(columns)
        if whole is not None:
            yield from parquet_row_slices(whole, rows, columns)
            return
        readers = [_FileRows(path, columns) for path in self.paths]
        pending: list[pa.Table] = []
        held = 0
        for file, start, stop in self.pieces.tolist():
            for begin in range(start, stop, rows):
                part = readers[file].rows(begin, min(begin + rows, stop))
                pending.append(part)
                held += part.num_rows
                while held >= rows:
                    joined = pa.concat_tables(pending)
                    yield joined.slice(0, rows)
                    rest = joined.slice(rows)
                    pending, held = ([rest] if rest.num_rows else []), rest.num_rows
        if held:
            yield pa.concat_tables(pending)

    def positions_of(self, keys: dict[str, pa.Array]) -> np.ndarray:
        """For each row of ``keys`` (columns of the same name here, the first one unique), the
        position of the row here holding the same values in every column, else -1."""
        names = list(keys)
        mine = self.read(names)
        first = names[0]
        found = pc.index_in(keys[first], value_set=mine.column(first).combine_chunks().cast(keys[first].type))
        positions = pc.fill_null(found, -1).to_numpy(False).astype(np.int64)
        for name in names[1:]:
            hit = np.flatnonzero(positions >= 0)
            if not len(hit):
                break
            theirs = keys[name].take(pa.array(hit))
            ours = mine.column(name).take(pa.array(positions[hit])).cast(theirs.type)
            same = pc.fill_null(pc.equal(ours, theirs), False).to_numpy(False)
            positions[hit[~same]] = -1
        return positions


class _FileRows:
    """Rows of one Parquet file by range, the row groups last read kept for the next range."""

    def __init__(self, path: Path, columns: Sequence[str] | None) -> None:
        self._file = pq.ParquetFile(path, pre_buffer=False)
        self._columns = list(columns) if columns is not None else None
        sizes = [self._file.metadata.row_group(group).num_rows for group in range(self._file.num_row_groups)]
        self._ends = np.cumsum(sizes)
        self._held: tuple[int, int, pa.Table] | None = None

    def rows(self, start: int, stop: int) -> pa.Table:
        first = int(np.searchsorted(self._ends, start, side="right"))
        last = int(np.searchsorted(self._ends, stop - 1, side="right"))
        if self._held is None or not (self._held[0] <= first and last <= self._held[1]):
            groups = list(range(first, last + 1))
            self._held = (first, last, self._file.read_row_groups(groups, columns=self._columns))
        offset = int(self._ends[self._held[0] - 1]) if self._held[0] else 0
        return self._held[2].slice(start - offset, stop - start)


def _rows_of(file: pq.ParquetFile, rows: np.ndarray, columns: Sequence[str] | None) -> pa.Table:
    """The file's ``rows``, in that order, read from the row groups holding them only."""
    sizes = np.array([file.metadata.row_group(group).num_rows for group in range(file.num_row_groups)])
    ends = np.cumsum(sizes)
    group_of = np.searchsorted(ends, rows, side="right")
    groups = np.unique(group_of)
    table = file.read_row_groups(groups.tolist(), columns=list(columns) if columns is not None else None)
    # A row's place in the groups read, which follow one another in the table.
    before = np.cumsum(np.r_[0, sizes[groups][:-1]])
    local = before[np.searchsorted(groups, group_of)] + rows - (ends - sizes)[group_of]
    return table.take(pa.array(local))


def _to_pandas(table: pa.Table, dtype_backend: str | None) -> pd.DataFrame:
    return table.to_pandas(types_mapper=pd.ArrowDtype if dtype_backend == "pyarrow" else None)


def open_table(stem: Path) -> PartedTable | None:
    """The table stored at ``stem`` (``{stem}.parts.json``, else ``{stem}.parquet``), or None."""
    manifest = stem.with_name(stem.name + MANIFEST_SUFFIX)
    if manifest.is_file():
        recorded = json.loads(manifest.read_text(encoding="utf-8"))
        pieces = np.asarray(recorded["pieces"], dtype=np.int64).reshape(-1, 3)
        shown = recorded.get("columns")
        return PartedTable(
            stem.parent,
            tuple(recorded["files"]),
            pieces,
            tuple(recorded["file_rows"]),
            recorded.get("tag"),
            tuple(shown) if shown is not None else None,
        )
    plain = stem.with_name(stem.name + PLAIN_SUFFIX)
    if plain.is_file():
        rows = pq.read_metadata(plain).num_rows
        return PartedTable(stem.parent, (plain.name,), np.array([[0, 0, rows]], dtype=np.int64), (rows,))
    return None


def table_path(path: Path) -> PartedTable:
    """The table a stored path names: a manifest, or a plain Parquet file."""
    suffix = MANIFEST_SUFFIX if path.name.endswith(MANIFEST_SUFFIX) else PLAIN_SUFFIX
    table = open_table(path.with_name(path.name.removesuffix(suffix)))
    if table is None:
        raise FileNotFoundError(f"{path} does not exist")
    return table


@dataclass(frozen=True)
class TableWrite:
    """A table to store under a tag: ``frame`` whole, or, given the ``base`` table and
    ``sources`` (for each row of the new table, its position in ``base``, or -1 for the next row
    of ``frame``), the base's rows kept in place and ``frame``'s rows added in a file of their own.
    ``columns``: the ones readers see (``PartedTable.columns``), where ``frame`` holds more."""

    frame: pd.DataFrame
    tag: str
    base: PartedTable | None = None
    sources: np.ndarray | None = None
    columns: tuple[str, ...] | None = None

    @property
    def rows(self) -> int:
        return len(self.frame) if self.sources is None else len(self.sources)

    @property
    def kept(self) -> int:
        """Rows kept from the base table."""
        return 0 if self.sources is None else int((self.sources >= 0).sum())

    def head(self, rows: int) -> pd.DataFrame:
        """The first ``rows`` rows of the table this stores (the columns readers see)."""
        shown = list(self.columns) if self.columns is not None else list(self.frame.columns)
        return self._rows_in_order(min(rows, self.rows), shown)

    def whole(self) -> TableWrite:
        """The same table written in one file: the base's rows it keeps read and written again
        with its own, in order (a table too scattered to extend, ``worth_extending``)."""
        if self.base is None or self.sources is None:
            return self
        frame = self._rows_in_order(self.rows, list(self.frame.columns)).astype(self.frame.dtypes.to_dict())
        return TableWrite(frame, self.tag, columns=self.columns)

    def _rows_in_order(self, rows: int, columns: list[str]) -> pd.DataFrame:
        """``columns`` of the table's first ``rows`` rows: the base's kept ones and its own."""
        if self.base is None or self.sources is None:
            return self.frame.iloc[:rows][columns].reset_index(drop=True)
        chosen = self.sources[:rows]
        kept = self.base.take(chosen[chosen >= 0], columns).to_pandas()
        return interleave(kept, self.frame.iloc[: int((chosen < 0).sum())][columns], chosen >= 0)

    def write(self, stem: Path) -> Path:
        """Store the table at ``stem``; files no longer used by it are removed afterwards."""
        name = f"{stem.name}.part-{uuid.uuid4().hex}{PLAIN_SUFFIX}"
        if self.base is None or self.sources is None:
            write_parquet(self.frame, stem.parent / name)
            files, pieces, file_rows = [name], np.array([[0, 0, len(self.frame)]], dtype=np.int64), [len(self.frame)]
        else:
            if len(self.frame):
                write_parquet(self.frame, stem.parent / name, schema=pq.read_schema(self.base.paths[0]))
            files, pieces, file_rows = _extended(self.base, self.sources, name, len(self.frame))
            # The base's files are this table's under this table's names: a table made of another
            # one's files (the cleaned documents of the parse records) removes them when stale.
            own = {kept: _part_name(stem.name, kept) for kept in set(files) & set(self.base.files)}
            for kept, named in own.items():
                link_or_copy(self.base.directory / kept, stem.parent / named)
            files = [own.get(file, file) for file in files]
        manifest = stem.with_name(stem.name + MANIFEST_SUFFIX)
        recorded = {"files": files, "file_rows": file_rows, "pieces": pieces.tolist(), "tag": self.tag}
        write_json(recorded | ({"columns": list(self.columns)} if self.columns is not None else {}), manifest)
        keep = set(files)
        for stale in [stem.with_name(stem.name + PLAIN_SUFFIX), *stem.parent.glob(f"{stem.name}.part-*{PLAIN_SUFFIX}")]:
            if stale.name not in keep:
                stale.unlink(missing_ok=True)
        return manifest


def _part_name(stem_name: str, file: str) -> str:
    """The name a file of another table (or a plain file) has as a part of ``stem_name``."""
    prefix = f"{stem_name}.part-"
    if file.startswith(prefix):
        return file
    return f"{prefix}{file.rsplit('.part-', 1)[-1].removesuffix(PLAIN_SUFFIX)}{PLAIN_SUFFIX}"


def _extended(
    base: PartedTable, sources: np.ndarray, added: str, added_rows: int
) -> tuple[list[str], np.ndarray, list[int]]:
    """The files, pieces and file row counts of ``base`` with ``sources`` applied."""
    lengths = base.pieces[:, 2] - base.pieces[:, 1]
    file_of = np.repeat(base.pieces[:, 0], lengths)
    row_of = np.repeat(base.pieces[:, 1] - np.cumsum(np.r_[0, lengths[:-1]]), lengths) + np.arange(lengths.sum())
    kept = sources >= 0
    new_file = len(base.files)
    files = np.where(kept, file_of[np.where(kept, sources, 0)], new_file)
    rows = np.where(kept, row_of[np.where(kept, sources, 0)], np.cumsum(~kept) - 1)
    if len(files):
        breaks = np.flatnonzero((files[1:] != files[:-1]) | (rows[1:] != rows[:-1] + 1)) + 1
        starts, ends = np.r_[0, breaks], np.r_[breaks, len(files)]
        pieces = np.stack([files[starts], rows[starts], rows[ends - 1] + 1], axis=1)
    else:
        pieces = np.zeros((0, 3), dtype=np.int64)
    names, counts = [*base.files, added], [*base.file_rows, added_rows]
    used = sorted(set(pieces[:, 0].tolist()))
    renumber = np.zeros(len(names), dtype=np.int64)
    renumber[used] = np.arange(len(used))
    pieces[:, 0] = renumber[pieces[:, 0]]
    return [names[i] for i in used], pieces.astype(np.int64), [counts[i] for i in used]


def extended_or_whole(
    frame: pd.DataFrame, tag: str, base: PartedTable, sources: np.ndarray, columns: tuple[str, ...] | None = None
) -> TableWrite:
    """``frame``'s rows added to ``base`` by ``sources`` (``TableWrite``), or, where that table
    would be too scattered (``worth_extending``), the same table written whole."""
    write = TableWrite(frame, tag, base, sources, columns)
    return write if worth_extending(base, sources) else write.whole()


def worth_extending(base: PartedTable, sources: np.ndarray) -> bool:
    """Whether ``sources`` over ``base`` make a table worth storing parted (else write it whole)."""
    added = int((sources < 0).sum())
    files, pieces, file_rows = _extended(base, sources, "", added)
    return (
        len(files) <= MAX_FILES
        and len(sources) >= MIN_USED_SHARE * sum(file_rows)
        and len(pieces) * MIN_MEAN_RUN <= max(len(sources), MIN_MEAN_RUN)
    )

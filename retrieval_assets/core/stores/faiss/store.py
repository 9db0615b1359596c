"""FAISS dense store: exact (flat) or approximate (IVF or HNSW) inner product on L2-normalised vectors.

On disk: ``index.faiss`` (an ``IndexIDMap2`` keyed by ``point_int64(chunk_id)``), payload
files (uncompressed Arrow IPC files of rows id, chunk_id, doc_id and the payload as JSON) and
``manifest.json``, whose ``payload_files`` name those files in order and the rows of each no
longer live: the live rows, in that order, are the index's, one per live vector. A save writes
the rows added since the last into a new file and keeps the others, hard-linked into a new
directory (a delta's one changed chunk no longer rewrites a million payloads: 1.39 GB, 5 s),
until files or removed rows pass ``MAX_PAYLOAD_FILES`` or ``MAX_REMOVED_PAYLOAD_SHARE``, when
one file of the live rows is written. Versions saved before held one ``payloads.arrow``. FAISS lives
in memory: writes are saved by ``finalize()`` or ``close()``. Payloads are not loaded: a saved
one is read from the file when it is asked for, and all stay JSON text, never one Python object
per row. A hit parses its own payload only when it is shown, and a filter parses them all once
per field it names, keeping only that field's values (``PayloadColumns``). With 200,000 chunks,
the store took 1.5 GB of a serving process while it held every payload as a parsed dict, 1.1 GB
with their JSON read from Parquet into memory, and 0.6 GB this way (docs/benchmarks/scale.md).
Versions saved before the IPC file hold ``payloads.parquet`` instead, which is read whole.
Filters are evaluated over the payloads and handed to FAISS as an ``IDSelector``, so the
search itself only considers matching vectors. On an approximate index, a filter that keeps few
rows (a tenant's share, say) is answered by an exact scan of those rows: a graph walk meets too
few allowed nodes to find their nearest ones (measured: recall@10 0.134 for a 10 % tenant at 200k
chunks with efSearch 128). A wider filter walks the graph with efSearch, or scans IVF cells with
their number, raised in proportion.

An IVF index (``IndexIVFFlat``) keeps each vector, whole, in the list of its nearest k-means
cell; a query scores exactly every vector of its ``ivf_probes`` nearest cells. Its cells are
trained once, on a sample of the first build's vectors (``train``), and kept by every delta.

Neither approximate index is asked to remove a vector (an HNSW graph cannot, and an IVF index
behind an ``IndexIDMap2`` would renumber the map's positions), so a deleted or replaced vector
becomes a tombstone: its id in the ``IndexIDMap2`` is set to ``TOMBSTONE`` and every search
excludes it. A delta build therefore adds and removes a few vectors without rebuilding the index;
it is rebuilt from the live vectors only when tombstones pass ``COMPACT_TOMBSTONE_FRACTION``.
"""

from __future__ import annotations

import json
import math
import os
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import faiss
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from retrieval_assets.core.io.files import link_or_copy
from retrieval_assets.core.io.tables import parquet_batches
from retrieval_assets.core.models import StoreHit
from retrieval_assets.core.stores.base import (
    DenseStore,
    Payload,
    as_query_vector,
    as_vector_matrix,
    check_top_k,
    parse_payload,
    point_int64,
    prepare_index_dir,
    read_manifest,
    validate_payloads,
    write_manifest,
)
from retrieval_assets.core.stores.filters import MetadataFilter

IndexType = Literal["flat", "ivf", "hnsw"]
IvfVectors = Literal["float16", "float32"]
# How an IVF index stores its vectors: a scalar quantizer's code, or None for the floats as they are.
IVF_CODES: dict[str, int | None] = {"float32": None, "float16": faiss.ScalarQuantizer.QT_fp16}
INDEX_FILE = "index.faiss"
# Saved before 2026-11-29: the one payload file, which the manifest did not name.
PAYLOAD_FILE = "payloads.arrow"
# A payload file a save writes: ``payloads-<hex>.arrow``, a name never written again (and
# ``.tmp`` until it is whole).
PAYLOAD_FILE_GLOB = "payloads*.arrow*"
# A save writes every live row into one file once the payload files would be more than this
# many, or hold more than this share of rows no longer live.
MAX_PAYLOAD_FILES = 16
MAX_REMOVED_PAYLOAD_SHARE = 0.25
# Saved before 2026-11-27: Parquet, read into memory whole (200,000 payloads, 254 MB of Arrow
# data, took a reader 521 MB of memory, which Arrow's allocator kept after they were freed).
LEGACY_PAYLOAD_FILE = "payloads.parquet"
# Rows per record batch of the payload file: appending a delta's rows and filtering copy batches.
PAYLOAD_BATCH_ROWS = 16_384
# The id of a removed vector of an approximate index; point ids are non-negative (``point_int64``).
TOMBSTONE = -2
# Above this share of tombstones a save rebuilds an approximate index from the live vectors: each
# one costs a graph walk a detour or an IVF scan a score, and memory.
COMPACT_TOMBSTONE_FRACTION = 0.2
# Distinct filters whose matching rows a store keeps (a tenant's scope repeats on every query).
FILTER_CACHE_SIZE = 64


class PayloadColumns:
    """Payload fields as flat columns, to evaluate ``MetadataFilter`` over all rows at once.

    A vectorised twin of ``MetadataFilter.matches``: list values are exploded into one entry
    per element, equality compares ``str()`` forms and ranges compare ``float()`` values.
    Each field's column is built on first use, in one pass over ``payloads`` (iterated again
    for each new field), and cached, so a query pays only for the compare.
    """

    def __init__(self, payloads: Collection[Payload]):
        self._payloads = payloads
        self._rows = len(payloads)
        self._columns: dict[str, tuple[np.ndarray, pa.Array, np.ndarray]] = {}
        self._masks: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()  # serving threads share the cache

    def mask(self, filters: Sequence[MetadataFilter]) -> np.ndarray:
        """Boolean mask (read-only) of the rows that pass every filter; the masks of the last
        ``FILTER_CACHE_SIZE`` distinct filters are kept (a store's rows change only by a write,
        which replaces this object)."""
        key = json.dumps([flt.model_dump(mode="json") for flt in filters])
        with self._lock:
            cached = self._masks.get(key)
            if cached is not None:
                self._masks.move_to_end(key)
                return cached
        mask = self._compute_mask(filters)
        mask.setflags(write=False)
        with self._lock:
            self._masks[key] = mask
            if len(self._masks) > FILTER_CACHE_SIZE:
                self._masks.popitem(last=False)
        return mask

    def _compute_mask(self, filters: Sequence[MetadataFilter]) -> np.ndarray:
        mask = np.ones(self._rows, dtype=bool)
        for flt in filters:
            rows, strings, numbers = self._column(flt.field)
            if flt.any_of is not None:
                wanted = pa.array(sorted({str(v) for v in flt.any_of}), type=pa.string())
                hit = pc.is_in(strings, value_set=wanted).to_numpy(zero_copy_only=False)
            else:
                hit = ~np.isnan(numbers)
                if flt.gte is not None:
                    hit &= numbers >= flt.gte
                if flt.lte is not None:
                    hit &= numbers <= flt.lte
            passed = np.zeros(self._rows, dtype=bool)
            passed[rows[hit]] = True
            mask &= passed
        return mask

    def _column(self, field: str) -> tuple[np.ndarray, pa.Array, np.ndarray]:
        """(row of each entry, its str() form, its float value or NaN) for one field; a row
        without the field, or with None or an empty list there, has no entry."""
        column = self._columns.get(field)
        if column is None:
            rows: list[int] = []
            values: list[Any] = []
            for row, payload in enumerate(self._payloads):
                value = payload.get(field)
                for item in value if isinstance(value, list) else (value,):
                    if item is not None:
                        rows.append(row)
                        values.append(item)
            # object dtype keeps ints as ints and bools as bools, so str() agrees with matches().
            entries = pd.Series(values, dtype=object)
            column = (
                np.asarray(rows, dtype=np.int64),
                pa.array(entries.map(str).tolist(), type=pa.string()),
                pd.to_numeric(entries, errors="coerce").to_numpy(dtype=np.float64),
            )
            with self._lock:
                self._columns[field] = column
        return column


class _HeldTexts:
    """Payload texts in memory: rows written since the store was opened, or read from a legacy file."""

    def __init__(self, array: pa.Array):
        self._array = array.cast(pa.large_string())

    def __len__(self) -> int:
        return len(self._array)

    def text(self, row: int) -> str:
        return cast(str, self._array[row].as_py())

    def array(self, start: int, stop: int) -> pa.Array:
        return self._array.slice(start, stop - start)

    def part(self, start: int, stop: int) -> _HeldTexts:
        return _HeldTexts(self.array(start, stop))


class _SavedTexts:
    """One record batch's payload texts in the saved file, read with ``os.pread`` when asked for:
    what is read stays in the kernel's page cache, which it can reclaim, not in this process
    (a memory-mapped file keeps the pages it touches in the process's RSS, and a fault maps more
    than the page read)."""

    def __init__(self, file: _PayloadFile, data_offset: int, offsets: np.ndarray, first_row: int):
        self.file = file  # shared by the batches of one file, which no save changes
        self._data_offset = data_offset
        self._offsets = offsets  # rows + 1 byte offsets into the batch's data
        self.first_row = first_row  # the file's row that is this part's first

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def text(self, row: int) -> str:
        return self._bytes(row, row + 1).decode()

    def array(self, start: int, stop: int) -> pa.Array:
        offsets = self._offsets[start : stop + 1] - self._offsets[start]
        return pa.LargeStringArray.from_buffers(
            stop - start, pa.py_buffer(offsets), pa.py_buffer(self._bytes(start, stop))
        )

    def part(self, start: int, stop: int) -> _SavedTexts:
        """Rows ``start`` to ``stop``, still in the file: their offsets are the batch's own."""
        return _SavedTexts(self.file, self._data_offset, self._offsets[start : stop + 1], self.first_row + start)

    def _bytes(self, start: int, stop: int) -> bytes:
        first, last = int(self._offsets[start]), int(self._offsets[stop])
        return os.pread(self.file.fd, last - first, self._data_offset + first) if last > first else b""


class _PayloadFile:
    """A saved payload file, open for ``os.pread`` until the last part that reads it is gone."""

    def __init__(self, path: Path, rows: int):
        self.path = path
        self.rows = rows
        self.fd = os.open(path, os.O_RDONLY)
        weakref.finalize(self, os.close, self.fd)


class PayloadTexts(Collection[Payload]):
    """Payloads as JSON text, a part per saved record batch (read from the file when asked for)
    and per write since (in memory); parsed a block at a time while iterated."""

    BLOCK_ROWS = 8192

    def __init__(self, parts: Sequence[_HeldTexts | _SavedTexts] = ()):
        self._parts = list(parts)
        self._starts = np.cumsum([0, *(len(part) for part in self._parts)])

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __iter__(self) -> Iterator[Payload]:
        for part in self._parts:
            for start in range(0, len(part), self.BLOCK_ROWS):
                yield from map(parse_payload, part.array(start, min(start + self.BLOCK_ROWS, len(part))).to_pylist())

    def __contains__(self, payload: object) -> bool:
        return any(payload == own for own in self)

    def text(self, row: int) -> str:
        index = int(np.searchsorted(self._starts, row, side="right")) - 1
        return self._parts[index].text(row - int(self._starts[index]))

    def with_rows(self, added: pa.Array) -> PayloadTexts:
        """These payloads followed by ``added`` (JSON texts)."""
        return PayloadTexts([*self._parts, *([_HeldTexts(added)] if len(added) else [])])

    def kept(self, keep: np.ndarray) -> PayloadTexts:
        """The rows where ``keep`` is true, as parts of these parts, each a run of kept rows: no
        text is read or copied (a delta's few deleted rows used to read every payload of a
        million into memory, 1 GB, to filter them)."""
        parts: list[_HeldTexts | _SavedTexts] = []
        for part, start in zip(self._parts, self._starts[:-1].tolist(), strict=True):
            held = np.asarray(keep[start : start + len(part)], dtype=np.int8)
            edges = np.flatnonzero(np.diff(np.r_[np.int8(0), held, np.int8(0)])).tolist()
            parts += [part.part(first, last) for first, last in zip(edges[::2], edges[1::2], strict=True)]
        return PayloadTexts(parts)

    def column(self) -> pa.ChunkedArray:
        """Every row, in memory."""
        return pa.chunked_array([part.array(0, len(part)) for part in self._parts], pa.large_string())

    def joined(self, other: PayloadTexts) -> PayloadTexts:
        return PayloadTexts([*self._parts, *other._parts])

    def saved_rows(self) -> tuple[dict[_PayloadFile, np.ndarray], int] | None:
        """The rows of each payload file that these are, in order, and how many rows follow
        them in memory only; None unless that is the whole of it (rows of files in the files'
        order, each file's in its order, then rows in memory)."""
        files: dict[_PayloadFile, list[np.ndarray]] = {}
        held = 0
        for part in self._parts:
            if isinstance(part, _HeldTexts):
                held += len(part)
                continue
            if held or (files and part.file is not next(reversed(files)) and part.file in files):
                return None
            files.setdefault(part.file, []).append(np.arange(part.first_row, part.first_row + len(part)))
        rows = {file: np.concatenate(parts) for file, parts in files.items()}
        if any(np.any(np.diff(file_rows) <= 0) for file_rows in rows.values()):
            return None
        return rows, held


class FaissDenseStore(DenseStore):
    """Dense vectors in FAISS, payloads in a Parquet sidecar. Scores are cosine similarities."""

    backend = "faiss"
    # A filtered approximate search scans the matching rows exactly when they are at most this many or
    # this share of the rows. The scan checks each stored vector against a bitmap and scores
    # only the allowed ones, so it costs about that share of an exact search of the whole index.
    exact_filter_max_rows = 10_000
    exact_filter_max_share = 0.25

    def __init__(
        self,
        directory: Path,
        index: faiss.IndexIDMap2,
        chunk_ids: pa.Array,
        doc_ids: pa.Array,
        payloads: PayloadTexts,
        manifest: dict[str, Any],
    ):
        """Use ``create`` or ``open``."""
        self.directory = directory
        self._manifest = manifest
        self.dim: int = manifest["dim"]
        self.index_type: IndexType = manifest["index_type"]
        self.ef_search: int = manifest["ef_search"]
        # Saved before IVF existed: a flat or HNSW index, which reads neither.
        self.ivf_probes: int = manifest.get("ivf_probes", 1)
        self._index = index
        # One entry per live row, in the index's order: Arrow strings, not a Python object per row.
        self._chunk_ids = _appended(pa.chunked_array([], pa.string()), chunk_ids)
        self._doc_ids = _appended(pa.chunked_array([], pa.string()), doc_ids)
        self._payloads = payloads
        # Each live row's position in the index (rows of a flat index are its positions; an
        # approximate index also holds tombstones between them), and the point id of each.
        self._positions = np.flatnonzero(_id_map(index) != TOMBSTONE).astype(np.int64)
        self._ids = _id_map(index)[self._positions].copy()
        self._id_lookup: tuple[np.ndarray, np.ndarray] | None = None  # see ``_rows_of``
        self._columns: PayloadColumns | None = None
        self._dirty = False

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        dim: int,
        *,
        index_type: IndexType = "flat",
        hnsw_m: int = 32,
        ef_construction: int = 40,
        ef_search: int = 64,
        ivf_lists: int = 1,
        ivf_probes: int = 128,
        ivf_vectors: IvfVectors = "float32",
        overwrite: bool = False,
    ) -> FaissDenseStore:
        """A new, empty index at ``path`` (saved at once, so ``open`` works straight away). An
        IVF index is trained by ``train``, or else on the vectors of its first write."""
        if dim < 1:
            raise ValueError(f"dim must be positive, got {dim}")
        if index_type not in ("flat", "ivf", "hnsw"):
            raise ValueError(f"index_type must be 'flat', 'ivf' or 'hnsw', got {index_type!r}")
        if ivf_lists < 1 or ivf_probes < 1:
            raise ValueError(f"ivf_lists and ivf_probes must be positive, got {ivf_lists} and {ivf_probes}")
        if ivf_vectors not in IVF_CODES:
            raise ValueError(f"ivf_vectors must be one of {sorted(IVF_CODES)}, got {ivf_vectors!r}")
        directory = prepare_index_dir(path, overwrite)
        manifest = {
            "backend": cls.backend,
            "format_version": 1,
            "dim": dim,
            "count": 0,
            "index_type": index_type,
            "metric": "cosine",  # inner product on vectors normalised at insert and query time
            "hnsw_m": hnsw_m,
            "ef_construction": ef_construction,
            "ef_search": ef_search,
            "ivf_lists": ivf_lists,
            "ivf_probes": ivf_probes,
            "ivf_vectors": ivf_vectors,
        }
        no_ids = pa.array([], pa.string())
        store = cls(directory, _new_index(manifest), no_ids, no_ids, PayloadTexts(), manifest)
        store._save()
        return store

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> FaissDenseStore:
        """Load an existing index into memory."""
        directory, manifest = read_manifest(path, cls.backend)
        # read_index returns the concrete class, and this store only writes IndexIDMap2 (``_new_index``).
        index = cast(faiss.IndexIDMap2, faiss.read_index(str(directory / INDEX_FILE)))
        stored_ids, chunk_ids, doc_ids, payloads = _open_payloads(directory, manifest)
        live_ids = _id_map(index)[_id_map(index) != TOMBSTONE]
        if not np.array_equal(stored_ids, live_ids):
            raise ValueError(f"{directory}: {INDEX_FILE} and its payload files are out of sync")
        if doc_ids is None:  # saved before doc_id had its own column: read from each payload once
            doc_ids = pa.array([payload["doc_id"] for payload in payloads], pa.string())
        return cls(directory, index, chunk_ids, doc_ids, payloads, manifest)

    @classmethod
    def open_copy(cls, source: str | os.PathLike[str], target: str | os.PathLike[str]) -> FaissDenseStore:
        """The store at ``source``, opened to save into ``target`` (a new or replaced directory):
        the index is held in memory whole, so its files need no copying first."""
        store = cls.open(source)
        store.directory = prepare_index_dir(target, overwrite=True)
        store._dirty = True
        return store

    def count(self) -> int:
        return len(self._chunk_ids)

    @property
    def tombstones(self) -> int:
        """Removed vectors an approximate index still holds (always 0 for a flat index)."""
        return int(self._index.ntotal) - len(self._chunk_ids)

    def chunk_ids(self) -> set[str]:
        return set(self._chunk_ids.to_pylist())

    def holding(self, chunk_ids: Collection[str]) -> set[str]:
        return set(self._held_rows(chunk_ids))

    def _held_rows(self, chunk_ids: Iterable[str]) -> dict[str, int]:
        """The row of each of ``chunk_ids`` the store holds."""
        wanted = list(dict.fromkeys(chunk_ids))
        found = self._rows_of(np.array([point_int64(chunk_id) for chunk_id in wanted], dtype=np.int64))
        return {
            chunk_id: int(row)
            for chunk_id, row in zip(wanted, found, strict=True)
            if row >= 0 and self._chunk_ids[int(row)].as_py() == chunk_id
        }

    @property
    def is_trained(self) -> bool:
        """Whether vectors can be added: always, but to an IVF index whose cells are not yet trained."""
        return bool(self._index.is_trained)

    def train(self, vectors: np.ndarray) -> None:
        """Train an IVF index's cells (k-means) on ``vectors``, a sample of what it will hold;
        nothing to do for another index, or one already trained."""
        if self.is_trained:
            return
        lists = self._manifest["ivf_lists"]
        matrix = as_vector_matrix(vectors, self.dim, len(vectors)).copy()
        if len(matrix) < lists:
            raise ValueError(f"{self.directory}: {lists} IVF cells need {lists} training vectors, got {len(matrix)}")
        faiss.normalize_L2(matrix)
        self._index.train(matrix)
        self._dirty = True

    def upsert_dense(self, payloads: Sequence[Payload], vectors: np.ndarray) -> None:
        """Add points; a chunk_id already present is replaced. Saved by ``finalize``."""
        validate_payloads(payloads)
        matrix = as_vector_matrix(vectors, self.dim, len(payloads)).copy()  # normalised in place
        faiss.normalize_L2(matrix)
        ids = np.array([point_int64(p["chunk_id"]) for p in payloads], dtype=np.int64)
        self.train(matrix)
        rows = self._rows_of(ids)
        replaced = rows[rows >= 0]
        for payload, row in zip(payloads, rows, strict=True):
            if row >= 0 and (existing := self._chunk_ids[int(row)].as_py()) != payload["chunk_id"]:
                raise ValueError(f"int64 id collision between {payload['chunk_id']!r} and {existing!r}")
        if replaced.size:
            self._drop_rows(replaced)
        first_position = int(self._index.ntotal)
        self._index.add_with_ids(matrix, ids)
        self._positions = np.concatenate([self._positions, np.arange(first_position, self._index.ntotal)])
        self._chunk_ids = _appended(self._chunk_ids, pa.array([p["chunk_id"] for p in payloads], pa.string()))
        self._doc_ids = _appended(self._doc_ids, pa.array([p["doc_id"] for p in payloads], pa.string()))
        self._payloads = self._payloads.with_rows(_payload_json(payloads))
        self._ids = np.concatenate([self._ids, ids])
        self._id_lookup = None
        self._columns = None
        self._dirty = True

    def delete(self, chunk_ids: Iterable[str]) -> None:
        """Remove these chunks (unknown ids are ignored). Saved by ``finalize``."""
        rows = list(self._held_rows(chunk_ids).values())
        if rows:
            self._drop_rows(np.array(rows, dtype=np.int64))
            self._columns = None
            self._dirty = True

    @staticmethod
    def stored_payload_json(path: str | os.PathLike[str], chunk_ids: Collection[str] | None = None) -> dict[str, str]:
        """The payloads saved at ``path`` (only ``chunk_ids`` when given) as JSON text by chunk
        id, read without loading the index: what a delta build reuses for the chunks it keeps."""
        wanted = None if chunk_ids is None else pa.array(list(chunk_ids), type=pa.string())
        texts: dict[str, str] = {}
        for batch in FaissDenseStore.stored_payload_batches(path):
            if wanted is not None:
                batch = batch.filter(pc.is_in(batch.column("chunk_id"), wanted))
            texts.update(zip(batch.column("chunk_id").to_pylist(), batch.column("payload").to_pylist(), strict=True))
        return texts

    @staticmethod
    def stored_payload_batches(path: str | os.PathLike[str]) -> Iterator[pa.RecordBatch]:
        """The payloads saved at ``path`` (chunk id and JSON text), a record batch at a time,
        each read into memory and let go: pages of a mapped file would stay in the process's RSS."""
        directory, manifest = read_manifest(path, FaissDenseStore.backend)
        columns = ["chunk_id", "payload"]
        if _legacy_payload_table(directory) is not None:
            yield from parquet_batches(directory / LEGACY_PAYLOAD_FILE, PAYLOAD_BATCH_ROWS, columns)
            return
        for entry in _payload_files(manifest):
            removed = _removed_rows(entry)
            with pa.OSFile(str(directory / entry["name"])) as source:
                reader = pa.ipc.open_file(source)
                first = 0
                for number in range(reader.num_record_batches):
                    batch = reader.get_batch(number).select(columns)
                    live = _live_rows(removed, first, batch.num_rows)
                    first += batch.num_rows
                    yield batch if live.all() else batch.filter(pa.array(live))

    @staticmethod
    def stored_payloads(path: str | os.PathLike[str], chunk_ids: Collection[str] | None = None) -> dict[str, Payload]:
        """``stored_payload_json``, parsed."""
        texts = FaissDenseStore.stored_payload_json(path, chunk_ids)
        return {chunk_id: parse_payload(text) for chunk_id, text in texts.items()}

    def search_dense(self, vector: np.ndarray, top_k: int, filters: Sequence[MetadataFilter] = ()) -> list[StoreHit]:
        check_top_k(top_k)
        query = as_query_vector(vector, self.dim).reshape(1, -1).copy()
        faiss.normalize_L2(query)
        if not self._chunk_ids:
            return []
        if filters:
            rows = np.flatnonzero(self._payload_columns().mask(filters))
            if rows.size == 0:
                return []
            if self.index_type != "flat":
                return self._search_approximate_rows(query, rows, top_k)
            return self._search(query, top_k, faiss.IDSelectorBatch(self._ids[rows]))
        if self.tombstones:
            return self._search(query, top_k, faiss.IDSelectorRange(0, np.iinfo(np.int64).max))  # all but TOMBSTONE
        return self._search(query, top_k, None)

    def _search(self, query: np.ndarray, top_k: int, selector: faiss.IDSelector | None) -> list[StoreHit]:
        """``top_k`` nearest of the ids ``selector`` allows, by point id through the ``IndexIDMap2``."""
        # faiss's stub lacks SearchParametersHNSW and the keyword arguments faiss's Python wrapper
        # accepts for every SearchParameters class.
        if self.index_type == "hnsw":
            params = faiss.SearchParametersHNSW(  # type: ignore[attr-defined]
                sel=selector, efSearch=max(self.ef_search, top_k)
            )
        elif self.index_type == "ivf":
            params = faiss.SearchParametersIVF(sel=selector, nprobe=self.ivf_probes)  # type: ignore[call-arg]
        else:
            params = faiss.SearchParameters(sel=selector)  # type: ignore[call-arg]
        # One query vector: OpenMP threads only add wake-up latency and contend with the query
        # encoder on a small CPU (measured: encode + search 11.6 ms P50 with them, 4.4 ms without).
        faiss.omp_set_num_threads(1)
        scores, ids = self._index.search(query, min(top_k, len(self._chunk_ids)), params=params)
        # FAISS pads with id -1 when fewer than top_k vectors pass the selector.
        found = ids[0] != -1
        rows = self._rows_of(ids[0][found])
        return [self._hit(int(row), float(score)) for row, score in zip(rows, scores[0][found], strict=True)]

    def _search_approximate_rows(self, query: np.ndarray, rows: np.ndarray, top_k: int) -> list[StoreHit]:
        """The ``top_k`` nearest of ``rows`` in an approximate index: an exact scan of them when
        they are few (``exact_filter_max_rows``, ``exact_filter_max_share``), else a graph walk
        whose efSearch, or an IVF scan whose cells, grow as the filter's share shrinks, so that it
        meets about as many allowed vectors as an unfiltered search."""
        share = rows.size / len(self._chunk_ids)
        # ``rows`` ascend (a mask's nonzero rows), and so do their positions in the index.
        positions = self._positions[rows]
        allowed = np.zeros(int(self._index.ntotal), dtype=bool)
        allowed[positions] = True
        bitmap = np.packbits(allowed, bitorder="little")
        # The selector reads ``bitmap``'s memory, which this frame keeps alive until the search returns.
        selector = faiss.IDSelectorBitmap(bitmap.size, faiss.swig_ptr(bitmap))
        faiss.omp_set_num_threads(1)
        exact = rows.size <= self.exact_filter_max_rows or share <= self.exact_filter_max_share
        index, params = self._filtered_search(selector, 0.0 if exact else share, top_k)
        scores, found = index.search(query, min(top_k, rows.size), params=params)
        hits = found[0] != -1
        at = np.searchsorted(positions, found[0][hits])
        return [self._hit(int(row), float(score)) for row, score in zip(rows[at], scores[0][hits], strict=True)]

    def _filtered_search(
        self, selector: faiss.IDSelector, share: float, top_k: int
    ) -> tuple[faiss.Index, faiss.SearchParameters]:
        """The inner index and parameters of a search of the positions ``selector`` allows:
        exact when ``share`` is 0, else widened by ``1 / share``."""
        inner = faiss.downcast_index(self._index.index)
        # faiss's stub lacks the parameter classes and the keyword arguments its Python wrapper accepts.
        if isinstance(inner, faiss.IndexIVF):
            probes = inner.nlist if not share else min(inner.nlist, math.ceil(self.ivf_probes / share))
            return inner, faiss.SearchParametersIVF(sel=selector, nprobe=probes)  # type: ignore[call-arg]
        hnsw = cast(faiss.IndexHNSW, inner)
        if not share:  # every stored vector checked against the selector, only the allowed ones scored
            return hnsw.storage, faiss.SearchParameters(sel=selector)  # type: ignore[call-arg]
        ef_search = math.ceil(max(self.ef_search, top_k) / share)
        return hnsw, faiss.SearchParametersHNSW(sel=selector, efSearch=ef_search)  # type: ignore[attr-defined]

    def finalize(self) -> None:
        """Save the index, payloads and manifest if anything changed."""
        if self._dirty:
            self._save()

    def close(self) -> None:
        """Save pending writes; the in-memory index is freed with the object."""
        self.finalize()

    def _hit(self, row: int, score: float) -> StoreHit:
        # Parsed only if the hit is shown. A write replaces the store's PayloadTexts, never changes
        # one, so the row still names this payload then.
        payloads = self._payloads
        return StoreHit(
            self._chunk_ids[row].as_py(),
            score,
            doc_id=self._doc_ids[row].as_py(),
            load=lambda: parse_payload(payloads.text(row)),
        )

    def _rows_of(self, point_ids: np.ndarray) -> np.ndarray:
        """The row of each point id, -1 where there is none: a binary search of the ids sorted
        once per write (a dict of them took 30 MB for 200,000 rows)."""
        if self._id_lookup is None:
            order = np.argsort(self._ids, kind="stable")
            self._id_lookup = (self._ids[order], order)
        sorted_ids, order = self._id_lookup
        if not sorted_ids.size:
            return np.full(len(point_ids), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(sorted_ids, point_ids), sorted_ids.size - 1)
        return np.where(sorted_ids[at] == point_ids, order[at], -1)

    def _payload_columns(self) -> PayloadColumns:
        if self._columns is None:
            self._columns = PayloadColumns(self._payloads)
        return self._columns

    def _drop_rows(self, rows: np.ndarray) -> None:
        """Remove rows from index and payloads, keeping the remaining rows in order."""
        keep = np.ones(len(self._ids), dtype=bool)
        keep[rows] = False
        if self.index_type == "flat":
            self._index.remove_ids(faiss.IDSelectorBatch(self._ids[rows]))
            self._positions = np.arange(int(keep.sum()), dtype=np.int64)
        else:
            # An HNSW graph cannot remove a node: its id becomes a tombstone, which searches skip.
            _id_map(self._index)[self._positions[rows]] = TOMBSTONE
            self._positions = self._positions[keep]
        self._ids = self._ids[keep]
        kept = pa.array(keep)
        self._chunk_ids = self._chunk_ids.filter(kept)
        self._doc_ids = self._doc_ids.filter(kept)
        self._payloads = self._payloads.kept(keep)
        self._id_lookup = None

    def _compact(self) -> None:
        """Rebuild the approximate index from the live vectors, dropping every tombstone; an IVF
        index keeps its trained cells."""
        # ``old`` owns ``inner``: it is kept until the cells are copied.
        old, inner = self._index, faiss.downcast_index(self._index.index)
        if isinstance(inner, faiss.IndexIVF):
            inner.make_direct_map()  # what ``reconstruct`` of an IVF index reads
        vectors = inner.reconstruct_batch(self._positions)
        self._index = _new_index(self._manifest)
        if isinstance(inner, faiss.IndexIVF):
            fresh = faiss.extract_index_ivf(self._index)
            fresh.quantizer.add(inner.quantizer.reconstruct_n(0, inner.nlist))
            fresh.is_trained = True
        del old, inner
        self._index.add_with_ids(vectors, self._ids)
        self._positions = np.arange(len(self._ids), dtype=np.int64)

    def _save(self) -> None:
        if self.tombstones > COMPACT_TOMBSTONE_FRACTION * self._index.ntotal:
            self._compact()
        # The index to a temporary name, renamed once the payload files are in place and before
        # the manifest names them: open() refuses an index and payload rows from different saves.
        index_tmp = self.directory / (INDEX_FILE + ".tmp")
        faiss.write_index(self._index, str(index_tmp))
        files = self._save_payloads()
        os.replace(index_tmp, self.directory / INDEX_FILE)
        self._manifest["count"] = len(self._chunk_ids)
        self._manifest["payload_files"] = files
        write_manifest(self.directory, self._manifest)
        named = {entry["name"] for entry in files}
        for path in [*self.directory.glob(PAYLOAD_FILE_GLOB), self.directory / LEGACY_PAYLOAD_FILE]:
            if path.name not in named:
                path.unlink(missing_ok=True)
        self._dirty = False

    def _save_payloads(self) -> list[dict[str, Any]]:
        """The payload files of this save (``payload_files`` entries): the saved files whose rows
        are still live, linked into this directory, and a new file of the rows added since; or
        one new file of every live row when that many files or removed rows would be too many."""
        saved = self._payloads.saved_rows()
        if saved is not None:
            rows, held = saved
            total = sum(file.rows for file in rows)
            removed = total - sum(len(file_rows) for file_rows in rows.values())
            if len(rows) + bool(held) <= MAX_PAYLOAD_FILES and removed <= MAX_REMOVED_PAYLOAD_SHARE * total:
                entries = [_kept_file(file, file_rows, self.directory) for file, file_rows in rows.items()]
                if held:
                    start = len(self._ids) - held
                    earlier = np.arange(len(self._ids)) < start
                    # Only the rows in memory are read: ``column`` of every row reads the files' too.
                    name, texts = self._write_payload_file(start, self._payloads.kept(~earlier).column())
                    entries.append({"name": name, "rows": held, "removed": []})
                    self._payloads = self._payloads.kept(earlier).joined(texts)
                return entries
        name, self._payloads = self._write_payload_file(0, self._payloads.column())
        return [{"name": name, "rows": len(self._ids), "removed": []}]

    def _write_payload_file(self, start: int, payloads: pa.ChunkedArray) -> tuple[str, PayloadTexts]:
        """The live rows from ``start`` on (``payloads``: their texts) as a new payload file in
        this directory: its name, and its texts as saved rows."""
        table = pa.table(
            {
                "id": pa.array(self._ids[start:], type=pa.int64()),
                "chunk_id": self._chunk_ids.slice(start),
                "doc_id": self._doc_ids.slice(start),
                "payload": payloads,
            }
        )
        name = f"payloads-{uuid.uuid4().hex}.arrow"
        tmp = self.directory / (name + ".tmp")
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=PAYLOAD_BATCH_ROWS)
        os.replace(tmp, self.directory / name)
        _, texts = _read_payload_file(self.directory / name)
        return name, texts


def _kept_file(file: _PayloadFile, live_rows: np.ndarray, directory: Path) -> dict[str, Any]:
    """A saved payload file kept by a save into ``directory`` (linked there): its
    ``payload_files`` entry, whose removed rows are those not in ``live_rows``."""
    link_or_copy(file.path, directory / file.path.name)
    live = np.zeros(file.rows, dtype=bool)
    live[live_rows] = True
    return {"name": file.path.name, "rows": file.rows, "removed": np.flatnonzero(~live).tolist()}


def _payload_files(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The payload files a manifest names, in order (saved before it named them: the one file)."""
    return manifest.get("payload_files") or [{"name": PAYLOAD_FILE, "removed": []}]


def _removed_rows(entry: dict[str, Any]) -> np.ndarray:
    """A ``payload_files`` entry's removed rows, sorted."""
    return np.sort(np.asarray(entry["removed"], dtype=np.int64))


def _live_rows(removed: np.ndarray, first: int, rows: int) -> np.ndarray:
    """Whether each of a payload file's rows ``first`` to ``first + rows`` is live, given its
    sorted ``removed`` rows (a file may hold thousands of record batches: one search each)."""
    live = np.ones(rows, dtype=bool)
    start, stop = np.searchsorted(removed, [first, first + rows])
    live[removed[start:stop] - first] = False
    return live


def _legacy_payload_table(directory: Path) -> pa.Table | None:
    """The Parquet payload file of a version saved before the IPC file, read whole; None otherwise."""
    if (directory / PAYLOAD_FILE).exists() or not (directory / LEGACY_PAYLOAD_FILE).exists():
        return None
    return pq.read_table(directory / LEGACY_PAYLOAD_FILE)


def _open_payloads(
    directory: Path, manifest: dict[str, Any]
) -> tuple[np.ndarray, pa.Array, pa.Array | None, PayloadTexts]:
    """The saved live rows' point ids, chunk ids, doc ids (None in a file saved without them) and
    payload texts, which stay in their files (``_SavedTexts``) unless the file is a legacy one."""
    legacy = _legacy_payload_table(directory)
    if legacy is not None:
        tables = [legacy.drop_columns(["payload"])]
        payloads = PayloadTexts([_HeldTexts(chunk) for chunk in legacy.column("payload").chunks])
    else:
        tables, payloads = [], PayloadTexts()
        for entry in _payload_files(manifest):
            table, texts = _read_payload_file(directory / entry["name"])
            live = _live_rows(_removed_rows(entry), 0, table.num_rows)
            if not live.all():
                table, texts = table.filter(pa.array(live)), texts.kept(live)
            tables.append(table)
            payloads = payloads.joined(texts)
    ids = np.concatenate([np.zeros(0, np.int64), *(table.column("id").to_numpy() for table in tables)])
    chunk_ids = _copied(pa.chunked_array([table.column("chunk_id") for table in tables], pa.string()))
    with_doc_ids = all("doc_id" in table.column_names for table in tables)
    doc_ids = _copied(pa.chunked_array([t.column("doc_id") for t in tables], pa.string())) if with_doc_ids else None
    return ids.astype(np.int64), chunk_ids, doc_ids, payloads


def _read_payload_file(path: Path) -> tuple[pa.Table, PayloadTexts]:
    """A payload file's rows but their payloads, and the payloads as texts read from the file."""
    # Mapped only to find the payload buffers' places in the file and copy the id columns;
    # unmapped on return, so no page it touched stays in the process.
    with pa.memory_map(str(path)) as source:
        reader = pa.ipc.open_file(source)
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        file = _PayloadFile(path, sum(batch.num_rows for batch in batches))
        source.seek(0)
        base = source.read_buffer(1).address
        starts = np.cumsum([0, *(batch.num_rows for batch in batches)]).tolist()
        parts = zip(batches, starts, strict=False)  # one start more than batches
        texts = PayloadTexts([_saved_texts(file, base, batch.column("payload"), start) for batch, start in parts])
        table = pa.Table.from_batches(
            [batch.drop_columns(["payload"]) for batch in batches],
            reader.schema.remove(reader.schema.get_field_index("payload")),
        )
        # Copied out of the mapped file, so the mapping can go.
        table = pa.table({name: _copied(table.column(name)) for name in table.column_names})
    return table, texts


def _copied(column: pa.ChunkedArray) -> pa.Array:
    # Empty chunks left out: an empty batch's offsets may be empty, which concatenating refuses.
    return pa.concat_arrays([pa.array([], column.type), *(chunk for chunk in column.chunks if len(chunk))])


def _appended(column: pa.ChunkedArray, values: pa.Array) -> pa.ChunkedArray:
    # No empty chunks: a saved file would hold an empty record batch for each.
    return pa.chunked_array([*column.chunks, *([values] if len(values) else [])], pa.string())


def _saved_texts(file: _PayloadFile, base: int, column: pa.Array, first_row: int) -> _SavedTexts:
    if column.null_count or not pa.types.is_large_string(column.type):
        raise ValueError(f"{file.path}: the payload column must be large strings without nulls")
    _, offsets, data = column.buffers()
    if not len(column) or offsets is None or data is None:  # an empty batch's buffers may lie outside the file
        return _SavedTexts(file, 0, np.zeros(1, dtype=np.int64), first_row)
    row_offsets = np.frombuffer(offsets, dtype=np.int64)[column.offset : column.offset + len(column) + 1].copy()
    return _SavedTexts(file, data.address - base, row_offsets, first_row)


def _payload_json(payloads: Sequence[Payload]) -> pa.Array:
    # JSON keeps heterogeneous metadata types (a field int here, str there) intact.
    return pa.array([json.dumps(p, ensure_ascii=False) for p in payloads], type=pa.large_string())


def _id_map(index: faiss.IndexIDMap2) -> np.ndarray:
    """The index's id of each position, as a writable view (setting TOMBSTONE removes a vector
    from every search; the reverse map, used only by ``reconstruct``, is not consulted)."""
    size = index.id_map.size()
    return faiss.rev_swig_ptr(index.id_map.data(), size) if size else np.zeros(0, dtype=np.int64)


def _new_index(manifest: dict[str, Any]) -> faiss.IndexIDMap2:
    dim = manifest["dim"]
    inner: faiss.Index
    if manifest["index_type"] == "hnsw":
        inner = hnsw = faiss.IndexHNSWFlat(dim, manifest["hnsw_m"], faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = manifest["ef_construction"]
    elif manifest["index_type"] == "ivf":
        # faiss's Python wrapper keeps the quantizer alive as long as the IVF index.
        quantizer, lists = faiss.IndexFlatIP(dim), manifest["ivf_lists"]
        code = IVF_CODES[manifest.get("ivf_vectors", "float32")]  # saved before the setting: float32
        if code is None:
            inner = faiss.IndexIVFFlat(quantizer, dim, lists, faiss.METRIC_INNER_PRODUCT)
        else:
            inner = ivf = faiss.IndexIVFScalarQuantizer(quantizer, dim, lists, code, faiss.METRIC_INNER_PRODUCT)
            ivf.by_residual = False  # vectors as they are, as IndexIVFFlat stores them: no residual per cell
    else:
        inner = faiss.IndexFlatIP(dim)
    return faiss.IndexIDMap2(inner)

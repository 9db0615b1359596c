"""Conversions between pipeline models and Parquet-friendly pandas frames.

Every frame has fixed columns and dtypes, empty or not, so that Parquet schemas stay stable
between runs. Metadata is stored as a JSON string column: catalogs with different metadata
fields then share one schema, and the flat fields are rebuilt only for store payloads.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pandas.api.extensions import ExtensionArray

from retrieval_assets.core.ingest.catalog import RawRow
from retrieval_assets.core.io.files import write_atomically
from retrieval_assets.core.models import Chunk, Document, MetadataValue, QuarantineRecord, TextSpan
from retrieval_assets.core.stores.base import Payload

# "string" (not pandas 3's default "str") keeps missing values as <NA> on every pandas version.
RAW_ROW_COLUMNS: dict[str, str] = {"source": "string", "line_number": "int64", "raw": "string", "utf8_error": "bool"}
DOCUMENT_COLUMNS: dict[str, str] = {
    "doc_id": "string",
    "title": "string",
    "text": "string",
    "tenant_id": "string",
    "metadata": "string",
    # JSON list of TextSpan objects for structured documents (files); <NA> for the others
    "structure": "string",
    # JSON object of precomputed vectors by model name (``Document.vectors``); <NA> for none
    "vectors": "string",
}
QUARANTINE_COLUMNS: dict[str, str] = {
    "source": "string",
    "line_number": "Int64",  # nullable: a record may not come from a numbered line
    "doc_id": "string",
    "reason": "string",
    "detail": "string",
    "raw": "string",
}
# What became of each inbox entry in a build (``ingest.steps.apply_inbox``).
RECEIPT_COLUMNS: dict[str, str] = {
    "receipt": "string",
    "operation": "string",
    "doc_id": "string",
    "tenant_id": "string",
    "outcome": "string",
    "reason": "string",
    "detail": "string",
}
CHUNK_COLUMNS: dict[str, str] = {
    "chunk_id": "string",
    "doc_id": "string",
    "ordinal": "int64",
    "tenant_id": "string",
    "section": "string",
    "title": "string",
    "text": "string",
    "metadata": "string",
    "content_hash": "string",
    # JSON object of the document's precomputed vectors (``Chunk.vectors``); <NA> for none
    "vectors": "string",
}


# A chunk row's hash as indexed (``chunk_row_hashes``): the chunk table keeps it beside each row.
ROW_HASH = "row_hash"


def chunk_row_hashes(chunks: pd.DataFrame) -> np.ndarray:
    """A hash of each chunk's whole row as indexed (``CHUNK_COLUMNS``: text, hash, metadata)."""
    without_vectors = chunks[[name for name in CHUNK_COLUMNS if name != "vectors" and name in chunks]]
    hashes = pd.util.hash_pandas_object(without_vectors, index=False).to_numpy().copy()
    # A chunk without precomputed vectors hashes as before the column existed, so upgrading
    # renames no version; one with them changes when they do.
    if "vectors" in chunks:
        carried = chunks["vectors"].notna().to_numpy()
        hashes[carried] ^= pd.util.hash_pandas_object(chunks["vectors"][carried], index=False).to_numpy()
    return hashes


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    """A frame with no rows and these columns and dtypes: what a missing memo or table reads as."""
    return pd.DataFrame({column: pd.Series([], dtype=dtype) for column, dtype in columns.items()})


# Rows per Parquet row group: ``PartedTable.read_where`` reads only the groups holding the rows it wants.
ROW_GROUP_ROWS = 8192


def write_parquet(frame: pd.DataFrame, path: str | os.PathLike[str], schema: pa.Schema | None = None) -> Path:
    """Write ``frame`` as Parquet through a temporary file and a rename, so readers never see
    a half-written file; with ``schema``, in that schema (rows added to another file's)."""
    return write_atomically(path, lambda tmp: _write_row_groups(frame, tmp, schema))


def _write_row_groups(frame: pd.DataFrame, path: Path, schema: pa.Schema | None = None) -> None:
    """``frame.to_parquet``, converted to Arrow one row group at a time rather than whole (a whole
    copy of a million 384-dim float32 vectors is 1.5 GB). The first group's schema is every
    group's unless ``schema`` is given; where a later group does not fit it (a column of only
    nulls at first), whole."""
    head = frame.iloc[:ROW_GROUP_ROWS]
    first = _arrow_part(head, schema) if schema is not None else pa.Table.from_pandas(head, preserve_index=False)
    options = _column_options(first)
    if len(frame) <= ROW_GROUP_ROWS:
        pq.write_table(first, path, row_group_size=ROW_GROUP_ROWS, **options)
        return
    try:
        with pq.ParquetWriter(path, first.schema, **options) as writer:
            writer.write_table(first)
            for start in range(ROW_GROUP_ROWS, len(frame), ROW_GROUP_ROWS):
                writer.write_table(_arrow_part(frame.iloc[start : start + ROW_GROUP_ROWS], first.schema))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        if schema is not None:
            raise
        frame.to_parquet(path, index=False, row_group_size=ROW_GROUP_ROWS, **options)


def _column_options(first: pa.Table) -> dict[str, Any]:
    """How each column is written, judged from the first row group (``first``).

    Nothing is compressed: Snappy cost more time than the bytes it saved. On the 1M bench's
    tables (about 1 GB each uncompressed, 2.2 times their Snappy size) a write took 0.7-1.0 s
    against 2.3-3.0 s, and a read 0.3-0.9 s against 1.0-1.7 s (benchmarks/scale.md). A column
    gets a dictionary only where its values repeat (a tenant, a section): Parquet tries one for
    each column chunk before falling back, and the 1M chunk table, whose ids and titles are
    mostly distinct, read back in 0.52 s without one for them against 1.49 s with. Vectors (list
    columns) get none: their values hardly repeat."""
    plain = [f.name for f in first.schema if not pa.types.is_list(f.type)]
    strings = [f.name for f in first.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    distinct = {name for name in strings if pc.count_distinct(first[name]).as_py() * 2 > first.num_rows}
    return {"use_dictionary": [name for name in plain if name not in distinct], "compression": "none"}


def _arrow_part(part: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    """``pa.Table.from_pandas(part, schema=schema)``, but a column of 1-D numpy arrays (vectors)
    becomes one Arrow list in one concatenation: Arrow converts them one by one (200k rows of two
    120-term SPLADE columns were written in 0.96 s that way, 0.64 s this way)."""
    arrays = []
    for field in schema:
        column = part[field.name]
        vectors = _vector_list(column.to_numpy(), field.type) if column.dtype == object else None
        arrays.append(vectors if vectors is not None else pa.array(column, type=field.type, from_pandas=True))
    return pa.Table.from_arrays(arrays, schema=schema)


def _vector_list(values: np.ndarray, arrow_type: pa.DataType) -> pa.Array | None:
    """An object column of 1-D numpy arrays as an Arrow list of ``arrow_type``; None for a
    column holding anything else (a missing value, a Python list, a string)."""
    if not (pa.types.is_list(arrow_type) and len(values)):
        return None
    if not all(isinstance(value, np.ndarray) and value.ndim == 1 for value in values):
        return None
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum([len(value) for value in values], out=offsets[1:])
    flat = np.concatenate(values).astype(arrow_type.value_type.to_pandas_dtype(), copy=False)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat), type=arrow_type)


# Past this many runs of consecutive rows, ``take_rows`` takes them all at once.
MAX_ROW_RUNS = 256


def take_rows(frame: pd.DataFrame, positions: np.ndarray) -> pd.DataFrame:
    """``frame.iloc[positions]``, made of slices where the positions run on one after another: a
    delta keeps nearly every one of a million memo rows in its order, and taking them copied all
    their text (4.4 s for 1M chunks); a slice of an Arrow-backed column is not copied. Past
    ``MAX_ROW_RUNS`` runs, Arrow columns are taken a chunk at a time (``_take_chunked``)."""
    positions = np.asarray(positions, dtype=np.int64)
    if len(positions) == 0:
        return frame.iloc[:0]
    breaks = np.flatnonzero(np.diff(positions) != 1) + 1
    if len(breaks) >= MAX_ROW_RUNS:
        return pd.DataFrame(
            {name: _take_column(frame[name], positions) for name in frame.columns}, index=frame.index[positions]
        )
    starts, ends = np.r_[0, breaks], np.r_[breaks, len(positions)]
    runs = [frame.iloc[positions[start] : positions[end - 1] + 1] for start, end in zip(starts, ends, strict=True)]
    return runs[0] if len(runs) == 1 else pd.concat(runs)


def interleave(kept: pd.DataFrame, added: pd.DataFrame, is_kept: np.ndarray) -> pd.DataFrame:
    """One row per entry of ``is_kept``: the next row of ``kept`` where it is true, else the next
    of ``added`` (rows a table keeps and rows it adds, back in the table's order)."""
    place = np.argsort(np.r_[np.flatnonzero(is_kept), np.flatnonzero(~is_kept)], kind="stable")
    return take_rows(pd.concat([kept, added], ignore_index=True), place).reset_index(drop=True)


def rows_where(frame: pd.DataFrame, mask: np.ndarray | pd.Series) -> pd.DataFrame:
    """``frame[mask]`` through ``take_rows``: a few rows of a table read from Parquet, without
    joining every chunk of its Arrow columns into one first."""
    return take_rows(frame, np.flatnonzero(np.asarray(mask, dtype=bool)))


def _take_column(column: pd.Series, positions: np.ndarray) -> ExtensionArray | np.ndarray:
    array = column.array
    if not isinstance(array, pd.arrays.ArrowExtensionArray):
        return column.to_numpy()[positions] if isinstance(column.dtype, np.dtype) else array.take(positions)
    chunked = array.__arrow_array__()
    taken = _take_chunked(chunked, positions) if chunked.num_chunks > 1 else chunked.take(positions)
    kind = type(array)
    return kind(taken, dtype=array.dtype) if isinstance(array, pd.arrays.ArrowStringArray) else kind(taken)


# Past this many chunks holding the rows to take, ``_take_chunked`` joins the chunks and takes once.
MAX_CHUNKS_TAKEN_APART = 64


def _take_chunked(chunked: pa.ChunkedArray, positions: np.ndarray) -> pa.ChunkedArray:
    """``chunked.take(positions)`` a chunk at a time. Arrow takes from a chunked array of strings
    by joining its chunks into one array first: a copy of the whole column per take, which a few
    rows of a million chunks' texts paid in full (0.2 to 0.5 s each). Rows spread over more than
    ``MAX_CHUNKS_TAKEN_APART`` chunks (a table a build extended reads as thousands of runs) are
    taken after all from the joined chunks: a Python step per chunk cost more."""
    if len(positions) and (positions.min() < 0 or positions.max() >= len(chunked)):
        raise IndexError(f"positions out of bounds for {len(chunked)} rows")
    order = np.argsort(positions, kind="stable")
    ordered = positions[order]
    ends = np.cumsum([len(chunk) for chunk in chunked.chunks])
    chunk_of = np.searchsorted(ends, ordered, side="right")
    touched = np.unique(chunk_of)
    if len(touched) > MAX_CHUNKS_TAKEN_APART:
        return pa.chunked_array([pa.concat_arrays(chunked.chunks).take(pa.array(positions))], type=chunked.type)
    pieces, starts = [], np.r_[0, ends[:-1]]
    for chunk_index in touched.tolist():
        local = ordered[chunk_of == chunk_index] - starts[chunk_index]
        pieces.append(chunked.chunk(chunk_index).take(pa.array(local)))
    taken = pa.chunked_array(pieces, type=chunked.type)
    if np.all(order[:-1] < order[1:]):
        return taken
    # Back into the order asked for: a take of the rows taken, not of the whole column.
    return pa.chunked_array([pa.concat_arrays(taken.chunks).take(pa.array(np.argsort(order, kind="stable")))])


def parquet_batches(
    path: str | os.PathLike[str], rows: int, columns: Sequence[str] | None = None
) -> Iterator[pa.RecordBatch]:
    """A Parquet file's record batches of at most ``rows``, each let go once the next is read.
    Without ``pre_buffer=False`` pyarrow keeps every column chunk it has read until the last
    batch: iterating 200k stored vectors held 347 MB at the end instead of 71 MB."""
    return pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size=rows, columns=columns)


def parquet_row_slices(
    path: str | os.PathLike[str], rows: int, columns: Sequence[str] | None = None
) -> Iterator[pa.Table]:
    """A Parquet file's rows in consecutive slices of exactly ``rows`` (the last may be shorter),
    one held at a time: several files of one row count stay in step whatever their row groups."""
    pending: pa.Table | None = None
    for batch in parquet_batches(path, rows, columns):
        read = pa.Table.from_batches([batch])
        pending = read if pending is None else pa.concat_tables([pending, read])
        while pending.num_rows >= rows:
            yield pending.slice(0, rows)
            pending = pending.slice(rows)
    if pending is not None and pending.num_rows:
        yield pending


def _frame(
    records: Iterable[Any], columns: dict[str, str], value: Callable[[Any, str], Any] = dict.get
) -> pd.DataFrame:
    """Records (dicts, or objects with ``value=getattr``) as a frame of ``columns``, made a column
    at a time: pandas made 300k raw rows from their dicts in 1.63 s, from column lists in 0.79 s,
    0.50 s when the lists were read off the rows' attributes rather than ``model_dump``."""
    rows = list(records)
    return pd.DataFrame(
        {name: pd.Series([value(row, name) for row in rows], dtype=dtype) for name, dtype in columns.items()}
    )


# Columns a frame written before they existed lacks: read as all missing.
OPTIONAL_COLUMNS = frozenset({"vectors"})
# Rows turned into Python objects at once where a whole table is walked row by row.
RECORD_BLOCK_ROWS = 8192


def _records(frame: pd.DataFrame, columns: dict[str, str], what: str) -> Iterator[dict[str, Any]]:
    """Rows as plain Python dicts (missing values as ``None``), after checking the columns."""
    missing = [c for c in columns if c not in frame.columns]
    if missing and set(missing) <= OPTIONAL_COLUMNS:
        frame, missing = frame.assign(**dict.fromkeys(missing)), []
    if missing:
        raise ValueError(f"{what} frame lacks columns {missing}; has {list(frame.columns)}")
    selected = frame[list(columns)]
    # A block at a time: to_dict("records") makes every row's dict at once.
    for start in range(0, len(selected), RECORD_BLOCK_ROWS):
        for record in selected.iloc[start : start + RECORD_BLOCK_ROWS].to_dict("records"):
            yield {key: None if pd.isna(value) else value for key, value in record.items()}


def dump_metadata(metadata: dict[str, MetadataValue]) -> str:
    return json.dumps(metadata, ensure_ascii=False, sort_keys=True)


def raw_rows_to_frame(rows: Iterable[RawRow]) -> pd.DataFrame:
    return _frame(rows, RAW_ROW_COLUMNS, getattr)


def raw_lines_frame(source: str, line_numbers: np.ndarray, texts: pa.ChunkedArray, errors: np.ndarray) -> pd.DataFrame:
    """Raw rows of one source from their line numbers, texts and UTF-8 error flags."""
    return pd.DataFrame(
        {
            "source": pd.Series(source, index=range(len(texts)), dtype=RAW_ROW_COLUMNS["source"]),
            "line_number": line_numbers,
            "raw": pd.Series(pd.arrays.ArrowStringArray(texts), dtype=RAW_ROW_COLUMNS["raw"]),
            "utf8_error": errors,
        }
    )


def frame_to_raw_rows(frame: pd.DataFrame) -> Iterator[RawRow]:
    return (RawRow(**record) for record in _records(frame, RAW_ROW_COLUMNS, "raw rows"))


def document_row(doc: Document) -> dict[str, Any]:
    """A document as a ``DOCUMENT_COLUMNS`` row."""
    return {
        **doc.model_dump(exclude={"structure", "vectors"}),
        "metadata": dump_metadata(doc.metadata),
        "structure": dump_structure(doc.structure),
        "vectors": dump_vectors(doc.vectors),
    }


def dump_vectors(vectors: Mapping[str, Sequence[float] | None]) -> str | None:
    """Precomputed vectors by model name as JSON, None for none (most documents)."""
    return json.dumps(vectors, sort_keys=True) if vectors else None


def load_vectors(value: str | None) -> dict[str, Any]:
    return json.loads(value) if value else {}


def dump_structure(structure: Sequence[TextSpan]) -> str | None:
    if not structure:
        return None
    return json.dumps([span.model_dump(exclude_none=True) for span in structure], ensure_ascii=False)


def documents_to_frame(documents: Iterable[Document]) -> pd.DataFrame:
    return _frame(map(document_row, documents), DOCUMENT_COLUMNS)


def frame_to_documents(frame: pd.DataFrame) -> list[Document]:
    return [
        Document(
            **{
                **record,
                "metadata": json.loads(record["metadata"]),
                "structure": json.loads(record["structure"]) if record["structure"] else [],
                "vectors": load_vectors(record["vectors"]),
            }
        )
        for record in _records(frame, DOCUMENT_COLUMNS, "documents")
    ]


def quarantine_to_frame(records: Iterable[QuarantineRecord]) -> pd.DataFrame:
    return _frame((record.model_dump() for record in records), QUARANTINE_COLUMNS)


def receipts_to_frame(receipts: Iterable[dict[str, Any]]) -> pd.DataFrame:
    return _frame(receipts, RECEIPT_COLUMNS)


def frame_to_receipts(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return list(_records(frame, RECEIPT_COLUMNS, "inbox receipts"))


def chunks_to_frame(chunks: Iterable[Chunk]) -> pd.DataFrame:
    records = (
        {**chunk.model_dump(), "metadata": dump_metadata(chunk.metadata), "vectors": dump_vectors(chunk.vectors)}
        for chunk in chunks
    )
    return _frame(records, CHUNK_COLUMNS)


def frame_to_chunks(frame: pd.DataFrame) -> list[Chunk]:
    return [
        Chunk(**{**record, "metadata": json.loads(record["metadata"]), "vectors": load_vectors(record["vectors"])})
        for record in _records(frame, CHUNK_COLUMNS, "chunks")
    ]


def chunk_payloads(frame: pd.DataFrame) -> list[Payload]:
    """Flat store payloads: the required fields plus each metadata field (lists as ``list[str]``)."""
    payloads: list[Payload] = []
    for record in _records(frame, CHUNK_COLUMNS, "chunks"):
        metadata = {
            key: [str(item) for item in value] if isinstance(value, list) else value
            for key, value in json.loads(record.pop("metadata")).items()
        }
        record.pop("ordinal")
        record.pop("content_hash")
        record.pop("vectors")  # the dense index holds them; a payload is what a hit shows
        # Required fields last: they win over a colliding metadata key (cleaning renames those anyway).
        payloads.append({**metadata, **record})
    return payloads

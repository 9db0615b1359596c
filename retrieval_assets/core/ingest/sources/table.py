"""The ``table`` source kind: one document per row of a Parquet, CSV or JSON Lines table.

Files. ``path`` is one of

* a Parquet file (``.parquet``, ``.pq``, ``.parq``), or a folder of Parquet files read recursively
  in sorted path order; hive partition folders (``year=2020/``) add their keys as columns. Names
  starting with ``.`` or ``_`` (``_SUCCESS``, ``.part-0.crc``) are skipped, as pyarrow does; every
  other file in the folder is read as Parquet whatever its name (Hive writes ``000000_0``). In a
  folder, a file Parquet cannot open becomes one ``corrupt_file`` row and the other files are still
  read; a single Parquet file that cannot be opened is a ``CatalogError``.
* a CSV file with a header row: ``.csv``, ``.csv.gz``, or tab-separated ``.tsv``, ``.tsv.gz``;
* a JSON Lines file, one object per line: ``.jsonl``, ``.jsonl.gz``, ``.ndjson``, ``.ndjson.gz``.

Rows stream through in batches (Parquet and CSV through pyarrow), so a table larger than memory
can be read. A file that fails part-way (a corrupt page, a truncated gzip stream) ends with one
``corrupt_file`` row saying how many rows it gave first. Rows are numbered from 1 over the whole
table, in file order; a JSON Lines row's number is its line number.

Columns. ``columns.id``, ``title``, ``text`` and ``tenant`` name columns exactly; an unset one is
the first of these names the table has, compared case-insensitively (of two columns differing only
in case, the first in the table wins), skipping columns already named:

* id: ``id``, ``_id``, ``doc_id``, ``document_id``, ``uuid``, ``key``
* title: ``title``, ``name``, ``heading``
* text: ``text``, ``body``, ``content``, ``abstract``, ``description``, ``document``, ``passage``
* tenant: ``tenant_id``, ``tenant`` (a row without one gets the source's tenant)

A named column (metadata ones included) that the table lacks is a ``CatalogError``: that is
configuration. A table without an id column quarantines every row as ``missing_id``, one without a
text column every row as ``empty_text``, each with a detail listing the table's columns, so a run
reports the problem rather than failing. Per row: a null or empty id is ``missing_id``; an id that is
not a string or an integer, or a title or text that is not a string, is ``invalid_field_type``. A
null title or text becomes ``""`` and cleaning decides (a title-only row keeps its title as text).

Metadata. ``columns.metadata`` names the columns kept; unset, every other column whose values
are scalars, lists of scalars or one-level structs (objects) is kept, and the others (bytes, maps,
deeper nesting) are skipped and counted in ``stats["skipped_columns"]``. A named Parquet column of
such a type is a ``CatalogError``; a named JSON Lines field nested too deep is passed on and
cleaning quarantines the row as ``invalid_metadata``. Structs become ``parent.child`` keys;
timestamps, dates and times become ISO 8601 strings, decimals floats, durations seconds; nulls,
NaN and infinities (which JSON cannot hold) are dropped.

Precomputed vectors. A column named ``embedding:<model>`` (``records.VECTOR_PREFIX``) holds each
row's dense vector of that model (docs/sources.md#precomputed-vectors): a list of numbers in Parquet
and JSON Lines, a JSON array (``[0.1, -0.2]``) in CSV and TSV, whose fields are text; an empty or
null value is no vector. Such columns are never metadata; cleaning checks their values.

CSV decoding. CSV has no types: every field is read as bytes and decoded here, so all values are
strings (cleaning turns a digit-string ``year`` into an integer) and an empty field is null. This
keeps ids such as ``007`` intact, lets a column that looks numeric in the first block hold ``n/a``
later (pyarrow infers CSV types from the first block only and would stop the stream), and confines
invalid UTF-8 to its row: the row is quarantined as ``invalid_utf8``, naming the column, and the
rest of the file is read. Quoted values may span lines. A row with more or fewer fields than the
header is quarantined as ``malformed_row`` with its record number (the header is record 1) and
text; it is numbered just before the rows of the block it was found in.

JSON Lines. Each line is parsed alone: a blank line is ``blank_line``, undecodable bytes
``invalid_utf8``, a line that is not JSON ``malformed_json``, a value that is not an object
``not_an_object``. The table's columns are the keys of all its objects in first-seen order, found
by a first pass over the file, so a key missing from the first rows (writers omit null fields) is
still found.
"""

from __future__ import annotations

import codecs
import datetime
import decimal
import gzip
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.dataset as ds

from retrieval_assets.core.ingest.catalog import CatalogError, CatalogSource, ColumnMapping, RawRow
from retrieval_assets.core.ingest.reasons import QuarantineReason
from retrieval_assets.core.ingest.sources.records import (
    VECTOR_PREFIX,
    SourceRead,
    document_record,
    record_row,
    rejected_record,
)

PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")
CSV_SUFFIXES = (".csv", ".csv.gz")
TSV_SUFFIXES = (".tsv", ".tsv.gz")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")
BATCH_ROWS = 10_000
CSV_BLOCK_BYTES = 4 * 2**20

FIELDS = ("id", "title", "text", "tenant")
CANDIDATES: dict[str, tuple[str, ...]] = {
    "id": ("id", "_id", "doc_id", "document_id", "uuid", "key"),
    "title": ("title", "name", "heading"),
    "text": ("text", "body", "content", "abstract", "description", "document", "passage"),
    "tenant": ("tenant_id", "tenant"),
}
_IGNORED_PREFIXES = (".", "_")
_UNSUPPORTED = object()  # a metadata value that is not a scalar or a list of scalars
_JSON_SCALARS = frozenset({str, int, bool})


def detect_table(path: str | Path) -> bool:
    """Whether ``path`` looks like a table: a Parquet or CSV/TSV file, or a folder whose files are
    all Parquet (JSON Lines files are left to the ``tool_catalog`` format)."""
    path = Path(path)
    if path.is_file():
        return path.name.lower().endswith(PARQUET_SUFFIXES + CSV_SUFFIXES + TSV_SUFFIXES)
    if path.is_dir():
        files = _folder_files(path)
        return bool(files) and all(f.name.lower().endswith(PARQUET_SUFFIXES) for f in files)
    return False


def read_table(source: CatalogSource) -> SourceRead:
    """The rows of a table as document records. Files are opened and columns resolved here, so a
    missing table or a misnamed column is reported at call time; rows are read as they are taken."""
    started = time.perf_counter()
    path = Path(source.path)
    if not path.exists():
        raise CatalogError(f"table not found: {path}")
    name = path.name.lower()
    if path.is_dir():
        reader: _Reader = _ParquetReader(path, _folder_files(path), hive=True)
    elif name.endswith(PARQUET_SUFFIXES):
        reader = _ParquetReader(path, [path], hive=False)
    elif name.endswith(CSV_SUFFIXES + TSV_SUFFIXES):
        reader = _CsvReader(path, delimiter="\t" if name.endswith(TSV_SUFFIXES) else ",")
    elif name.endswith(JSONL_SUFFIXES):
        reader = _JsonLinesReader(path)
    else:
        supported = ", ".join(PARQUET_SUFFIXES + CSV_SUFFIXES + TSV_SUFFIXES + JSONL_SUFFIXES)
        raise CatalogError(f"{path}: not a table file; expected a folder of Parquet files or one of {supported}")
    plan = reader.plan(source.columns)
    stats: dict[str, float] = {
        "rows": 0,
        "documents": 0,
        "quarantined": 0,
        "bytes_read": float(sum(f.stat().st_size for f in reader.files)),
        "read_seconds": time.perf_counter() - started,
        "files": len(reader.files),
        "skipped_columns": len(plan.skipped),
    }
    return SourceRead(_timed(_numbered(str(path), reader.records(plan), stats), stats), stats)


# --------------------------------------------------------------------------- column mapping


@dataclass(frozen=True)
class _Plan:
    """Which column holds what, resolved once per table."""

    columns: tuple[str, ...]
    id: str | None
    title: str | None
    text: str | None
    tenant: str | None
    metadata: tuple[str, ...]
    metadata_named: bool  # columns.metadata was given: keep what it names, however nested
    skipped: tuple[str, ...]  # columns left out of metadata: bytes, maps, deep nesting
    vectors: tuple[str, ...] = ()  # ``embedding:<model>`` columns
    vectors_as_text: bool = False  # CSV: a vector is a JSON array in a text field

    def wanted(self) -> list[str]:
        """Columns to read, in table order."""
        keep = {self.id, self.title, self.text, self.tenant, *self.metadata, *self.vectors}
        return [c for c in self.columns if c in keep]


def _resolve(
    where: Path,
    columns: Sequence[str],
    mapping: ColumnMapping,
    supported: Mapping[str, bool] | None = None,
    *,
    vectors_as_text: bool = False,
) -> _Plan:
    """The plan for a table with ``columns``; ``supported`` tells, per column, whether its type can be
    metadata (None: decided per value, for JSON Lines and CSV)."""

    def missing(name: str, what: str) -> CatalogError:
        return CatalogError(f"{where}: column {name!r} ({what}) not found; the table has columns {list(columns)}")

    chosen: dict[str, str | None] = {}
    for field in FIELDS:
        named = getattr(mapping, field)
        if named is not None and named not in columns:
            raise missing(named, f"columns.{field}")
        chosen[field] = named
    lowered: dict[str, str] = {}
    vectors = tuple(c for c in columns if c.startswith(VECTOR_PREFIX) and c not in chosen.values())
    for column in columns:
        lowered.setdefault(column.lower(), column)
    for field in FIELDS:
        if chosen[field] is None:
            found = (lowered.get(c) for c in CANDIDATES[field])
            chosen[field] = next((c for c in found if c is not None and c not in chosen.values()), None)

    skipped: tuple[str, ...] = ()
    if mapping.metadata is not None:
        for column in mapping.metadata:
            if column not in columns:
                raise missing(column, "columns.metadata")
            if supported is not None and not supported[column]:
                raise CatalogError(
                    f"{where}: column {column!r} (columns.metadata) cannot be metadata: metadata holds scalars, "
                    "lists of scalars and one-level structs, not bytes, maps or deeper nesting"
                )
        metadata = tuple(c for c in mapping.metadata if c not in vectors)
    else:
        others = [c for c in columns if c not in chosen.values() and c not in vectors]
        metadata = tuple(c for c in others if supported is None or supported[c])
        skipped = tuple(c for c in others if c not in metadata)
    return _Plan(
        columns=tuple(columns),
        id=chosen["id"],
        title=chosen["title"],
        text=chosen["text"],
        tenant=chosen["tenant"],
        metadata=metadata,
        metadata_named=mapping.metadata is not None,
        skipped=skipped,
        vectors=vectors,
        vectors_as_text=vectors_as_text,
    )


def _record(row: Mapping[str, Any], plan: _Plan) -> dict[str, Any]:
    """A row's document record, or its rejection."""
    if plan.id is None:
        detail = f"no id column: the table has columns {list(plan.columns)}; set columns.id"
        return rejected_record(None, QuarantineReason.MISSING_ID, detail)
    raw_id = row.get(plan.id)
    if raw_id is None or (isinstance(raw_id, str) and not raw_id.strip()):
        return rejected_record(None, QuarantineReason.MISSING_ID, f"column {plan.id!r} is null or empty")
    if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
        detail = f"column {plan.id!r} must hold strings or integers, got {type(raw_id).__name__}"
        return rejected_record(None, QuarantineReason.INVALID_FIELD_TYPE, detail)
    doc_id = str(raw_id).strip()
    if plan.text is None:
        detail = f"no text column: the table has columns {list(plan.columns)}; set columns.text"
        return rejected_record(doc_id, QuarantineReason.EMPTY_TEXT, detail)

    fields: dict[str, str] = {}
    for field, column in (("title", plan.title), ("text", plan.text), ("tenant", plan.tenant)):
        value = row.get(column) if column is not None else None
        if value is not None and not isinstance(value, str):
            detail = f"column {column!r} must hold strings, got {type(value).__name__}"
            return rejected_record(doc_id, QuarantineReason.INVALID_FIELD_TYPE, detail)
        fields[field] = value or ""
    metadata: dict[str, Any] = {}
    for column in plan.metadata:
        value = row.get(column)
        if isinstance(value, dict):
            for child, child_value in value.items():
                _put_metadata(metadata, f"{column}.{child}", child_value, plan.metadata_named)
        else:
            _put_metadata(metadata, column, value, plan.metadata_named)
    vectors = {column: _vector_value(row.get(column), plan.vectors_as_text) for column in plan.vectors}
    return document_record(
        doc_id,
        fields["title"],
        text=fields["text"],
        tenant_id=fields["tenant"].strip() or None,
        metadata=metadata,
        vectors={column: value for column, value in vectors.items() if value is not None},
    )


def _vector_value(value: Any, as_text: bool) -> Any:
    """A vector column's value for cleaning to check: a CSV field's JSON array parsed (text that is
    not JSON is passed on as it is, for cleaning to quarantine), a tuple as a list."""
    if as_text and isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return list(value) if isinstance(value, tuple) else value


def _put_metadata(metadata: dict[str, Any], key: str, value: Any, keep_unsupported: bool) -> None:
    plain = _plain(value)
    if plain is _UNSUPPORTED:
        # Only JSON values get here (Parquet types are checked up front), so the raw value serialises.
        if keep_unsupported:
            metadata[key] = value
    elif plain is not None:
        metadata[key] = plain


def _plain(value: Any) -> Any:
    """A JSON-ready scalar or list of scalars, None for a null, or ``_UNSUPPORTED``."""
    kind = type(value)
    if value is None or kind in _JSON_SCALARS:
        return value
    if kind is list and all(type(item) in _JSON_SCALARS for item in value):
        return value  # the common list of strings, without a copy
    if isinstance(value, str | bool | int):
        return value
    if isinstance(value, float | decimal.Decimal):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, datetime.date | datetime.time):  # datetime is a date
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, list | tuple):
        items = []
        for item in value:
            plain = _UNSUPPORTED if isinstance(item, list | tuple) else _plain(item)
            if plain is _UNSUPPORTED:
                return _UNSUPPORTED
            if plain is not None:
                items.append(plain)
        return items
    return _UNSUPPORTED


def _arrow_scalar(data_type: pa.DataType) -> bool:
    if pa.types.is_dictionary(data_type):
        data_type = data_type.value_type
    return (
        pa.types.is_null(data_type)
        or pa.types.is_boolean(data_type)
        or pa.types.is_integer(data_type)
        or pa.types.is_float32(data_type)
        or pa.types.is_float64(data_type)
        or pa.types.is_decimal(data_type)
        or pa.types.is_string(data_type)
        or pa.types.is_large_string(data_type)
        or pa.types.is_string_view(data_type)
        or pa.types.is_date(data_type)
        or pa.types.is_time(data_type)
        or pa.types.is_timestamp(data_type)
        or pa.types.is_duration(data_type)
    )


def _arrow_flat(data_type: pa.DataType) -> bool:
    """A scalar type or a list of scalars."""
    is_list = pa.types.is_list(data_type) or pa.types.is_large_list(data_type) or pa.types.is_fixed_size_list(data_type)
    return _arrow_scalar(data_type.value_type) if is_list else _arrow_scalar(data_type)


def _arrow_metadata_ok(data_type: pa.DataType) -> bool:
    if pa.types.is_struct(data_type):
        return all(_arrow_flat(data_type.field(i).type) for i in range(data_type.num_fields))
    return _arrow_flat(data_type)


# --------------------------------------------------------------------------- readers


class _Reader:
    files: list[Path]

    def plan(self, mapping: ColumnMapping) -> _Plan:
        raise NotImplementedError

    def records(self, plan: _Plan) -> Iterator[dict[str, Any]]:
        raise NotImplementedError


def _folder_files(folder: Path) -> list[Path]:
    """Files under ``folder`` in sorted path order, without hidden or ``_``-prefixed names."""
    return sorted(
        path
        for path in folder.rglob("*")
        if path.is_file() and not any(part.startswith(_IGNORED_PREFIXES) for part in path.relative_to(folder).parts)
    )


def _failure(path: Path, rows: int, exc: Exception) -> dict[str, Any]:
    detail = f"{path}: reading stopped after {rows:,} rows of this file: {type(exc).__name__}: {exc}"
    return rejected_record(None, QuarantineReason.CORRUPT_FILE, detail)


class _ParquetReader(_Reader):
    def __init__(self, root: Path, files: list[Path], *, hive: bool) -> None:
        if not files:
            raise CatalogError(f"{root}: no Parquet files in the folder")
        self.root = root
        self.files = files
        self.datasets: dict[Path, ds.Dataset] = {}
        self.unreadable: dict[Path, str] = {}
        for path in files:
            try:
                if hive:
                    self.datasets[path] = ds.dataset(
                        [str(path)], format="parquet", partitioning="hive", partition_base_dir=str(root)
                    )
                else:
                    self.datasets[path] = ds.dataset(str(path), format="parquet")
            except (pa.ArrowException, OSError) as exc:
                if not hive:
                    raise CatalogError(f"{path}: cannot open as Parquet: {exc}") from None
                self.unreadable[path] = f"{type(exc).__name__}: {exc}"
        if not self.datasets:
            first = next(iter(self.unreadable.items()))
            raise CatalogError(f"{root}: no readable Parquet file among {len(files)}; {first[0]}: {first[1]}")

    def plan(self, mapping: ColumnMapping) -> _Plan:
        types: dict[str, pa.DataType] = {}
        for dataset in self.datasets.values():
            for field in dataset.schema:
                types.setdefault(field.name, field.type)
        supported = {name: _arrow_metadata_ok(data_type) for name, data_type in types.items()}
        return _resolve(self.root, list(types), mapping, supported)

    def records(self, plan: _Plan) -> Iterator[dict[str, Any]]:
        wanted = plan.wanted()
        for path in self.files:
            if path in self.unreadable:
                detail = f"{path}: cannot open as Parquet: {self.unreadable[path]}"
                yield rejected_record(None, QuarantineReason.CORRUPT_FILE, detail)
                continue
            dataset = self.datasets[path]
            columns = [c for c in wanted if c in dataset.schema.names]
            rows = 0
            try:
                for batch in dataset.to_batches(columns=columns, batch_size=BATCH_ROWS):
                    for row in batch.to_pylist():
                        rows += 1
                        yield _record(row, plan)
            except (pa.ArrowException, OSError, ValueError) as exc:  # ValueError: undecodable strings, dates
                yield _failure(path, rows, exc)


class _CsvReader(_Reader):
    def __init__(self, path: Path, delimiter: str) -> None:
        self.path = path
        self.files = [path]
        self.delimiter = delimiter
        try:
            # Only the header is wanted; types are not checked so no bytes can stop this read.
            with self._open({}, check_utf8=False) as probe:
                self.names: list[str] = probe.schema.names
        except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
            raise CatalogError(f"{path}: cannot read the CSV header: {exc}") from None
        twice = sorted({name for name in self.names if self.names.count(name) > 1})
        if twice:
            raise CatalogError(f"{path}: the CSV header names columns {twice} more than once")

    def _open(self, column_types: dict[str, pa.DataType], check_utf8: bool = True, handler: Any = None) -> Any:
        return pa_csv.open_csv(
            pa.input_stream(str(self.path)),  # decompresses .gz
            read_options=pa_csv.ReadOptions(use_threads=False, block_size=CSV_BLOCK_BYTES),
            parse_options=pa_csv.ParseOptions(
                delimiter=self.delimiter,
                newlines_in_values=True,
                invalid_row_handler=handler or (lambda _row: "skip"),
            ),
            convert_options=pa_csv.ConvertOptions(column_types=column_types, check_utf8=check_utf8),
        )

    def plan(self, mapping: ColumnMapping) -> _Plan:
        return _resolve(self.path, self.names, mapping, vectors_as_text=True)

    def records(self, plan: _Plan) -> Iterator[dict[str, Any]]:
        wanted = plan.wanted()
        malformed: list[dict[str, Any]] = []

        def skip_malformed(row: Any) -> str:
            detail = (
                f"CSV record {row.number} has {row.actual_columns} fields, the header {row.expected_columns}: "
                f"{row.text[:200]!r}"
            )
            malformed.append(rejected_record(None, QuarantineReason.MALFORMED_ROW, detail))
            return "skip"

        rows = 0
        try:
            with self._open(dict.fromkeys(self.names, pa.binary()), handler=skip_malformed) as reader:
                for batch in reader:
                    yield from malformed
                    malformed.clear()
                    values, bad = _decode_columns(batch, wanted)
                    for index in range(batch.num_rows):
                        rows += 1
                        if index in bad:
                            row_id = values[plan.id][index] if plan.id is not None and plan.id in values else None
                            detail = f"column(s) {bad[index]} not valid UTF-8"
                            yield rejected_record(row_id, QuarantineReason.INVALID_UTF8, detail)
                        else:
                            yield _record({column: values[column][index] for column in values}, plan)
                yield from malformed
        except (pa.ArrowException, OSError) as exc:
            yield from malformed
            yield _failure(self.path, rows, exc)


def _decode_columns(
    batch: pa.RecordBatch, columns: list[str]
) -> tuple[dict[str, list[str | None]], dict[int, list[str]]]:
    """A CSV batch's binary columns as strings (empty fields as None), and the rows whose bytes are
    not UTF-8, with the columns holding them."""
    values: dict[str, list[str | None]] = {}
    bad: dict[int, list[str]] = {}
    for column in columns:
        array = batch.column(column)
        try:
            # Casting checks UTF-8 for the whole column at once; only a failing column is decoded by hand.
            decoded: list[str | None] = pc.cast(array, pa.string()).to_pylist()
        except pa.ArrowInvalid:
            decoded = []
            for index, raw in enumerate(array.to_pylist()):
                try:
                    decoded.append(None if raw is None else raw.decode("utf-8"))
                except UnicodeDecodeError:
                    decoded.append(None)
                    bad.setdefault(index, []).append(column)
        values[column] = [value or None for value in decoded]
    return values, bad


class _JsonLinesReader(_Reader):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.files = [path]

    def _lines(self) -> Iterator[tuple[int, bytes]]:
        opener = gzip.open if self.path.name.lower().endswith(".gz") else open
        with opener(self.path, "rb") as handle:
            for number, line in enumerate(handle, start=1):
                line = line.rstrip(b"\r\n")
                yield number, line.removeprefix(codecs.BOM_UTF8) if number == 1 else line

    def plan(self, mapping: ColumnMapping) -> _Plan:
        keys: dict[str, None] = {}
        try:
            for _, line in self._lines():
                try:
                    value = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue  # reported per line when the rows are read
                if isinstance(value, dict):
                    keys.update(dict.fromkeys(value))
        except (OSError, EOFError):
            pass  # a truncated file: the rows before the break still give the columns; reading reports it
        return _resolve(self.path, list(keys), mapping)

    def records(self, plan: _Plan) -> Iterator[dict[str, Any]]:
        rows = 0
        try:
            for number, line in self._lines():
                rows = number
                yield self._parse(line, plan)
        except (OSError, EOFError) as exc:
            yield _failure(self.path, rows, exc)

    @staticmethod
    def _parse(line: bytes, plan: _Plan) -> dict[str, Any]:
        if not line.strip():
            return rejected_record(None, QuarantineReason.BLANK_LINE, "blank line")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            return rejected_record(None, QuarantineReason.INVALID_UTF8, f"line is not valid UTF-8 ({exc.reason})")
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            return rejected_record(None, QuarantineReason.MALFORMED_JSON, str(exc))
        if not isinstance(value, dict):
            return rejected_record(
                None, QuarantineReason.NOT_AN_OBJECT, f"expected a JSON object, got {type(value).__name__}"
            )
        return _record(value, plan)


# --------------------------------------------------------------------------- accounting


def _numbered(source: str, records: Iterator[dict[str, Any]], stats: dict[str, float]) -> Iterator[RawRow]:
    for number, record in enumerate(records, start=1):
        stats["rows"] += 1
        stats["quarantined" if "rejected" in record else "documents"] += 1
        yield record_row(source, number, record)


def _timed(rows: Iterator[RawRow], stats: dict[str, float]) -> Iterator[RawRow]:
    """``rows``, adding the time spent producing them (not consuming them) to ``read_seconds``."""
    while True:
        started = time.perf_counter()
        row = next(rows, None)
        stats["read_seconds"] += time.perf_counter() - started
        if row is None:
            return
        yield row

"""Shared helpers for asset metadata (tables with described columns, previews) and run-log progress."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pandas as pd
from dagster import (
    AssetExecutionContext,
    MetadataValue,
    TableColumn,
    TableRecord,
    TableSchema,
)

from retrieval_assets.core.embed.base import ProgressCallback
from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.defs.columns import COLUMN_DESCRIPTIONS, HISTORY_DESCRIPTIONS

_PREVIEW_CHARS = 80


def _column_type(series: pd.Series) -> str:
    if series.dtype != object:
        return str(series.dtype)
    sample = series.dropna()
    if not len(sample):
        return "object"
    value = sample.iloc[0]
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple, np.ndarray)):
        return "list"
    if isinstance(value, dict):
        return "dict"
    return type(value).__name__


def table_schema(
    frame: pd.DataFrame, columns: Sequence[str] | None = None, descriptions: Mapping[str, str] | None = None
) -> TableSchema:
    """The columns of ``frame`` (or of ``columns``) with their dtypes (object columns by their
    values' type) and descriptions: ``descriptions``, else ``COLUMN_DESCRIPTIONS``."""
    names = list(frame.columns) if columns is None else list(columns)
    described = {**COLUMN_DESCRIPTIONS, **(descriptions or {})}
    return TableSchema(
        columns=[
            TableColumn(name=str(name), type=_column_type(frame[name]), description=described.get(str(name)))
            for name in names
        ]
    )


def table_metadata(frame: pd.DataFrame, descriptions: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``dagster/row_count`` and ``dagster/column_schema`` of a table-valued asset."""
    return {
        "dagster/row_count": MetadataValue.int(len(frame)),
        "dagster/column_schema": MetadataValue.table_schema(table_schema(frame, descriptions=descriptions)),
    }


def preview(
    frame: pd.DataFrame,
    columns: Sequence[str] | None = None,
    rows: int = 5,
    descriptions: Mapping[str, str] | None = None,
) -> MetadataValue:
    """A table of the first ``rows`` rows of ``columns`` (all by default): long cells shortened,
    missing values (None, NaN) blank."""
    columns = list(frame.columns) if columns is None else list(columns)
    head = frame.loc[:, columns].head(rows)
    return MetadataValue.table(
        records=[TableRecord({str(c): _cell(v) for c, v in row.items()}) for _, row in head.iterrows()],
        schema=table_schema(frame, columns, descriptions),
    )


# What each source figure means (``SourceRead.stats`` and cleaning's per-source counts).
SOURCE_FIGURES: dict[str, str] = {
    "source": "The catalog source's name.",
    "kind": "The source's kind: beir, tool_catalog, files, table or acl_anthology.",
    "rows": "Rows (lines or table rows) read.",
    "rows_in": "Rows (lines, files, table rows or papers) read from the source.",
    "kept": "Documents kept from the source.",
    "quarantined": "Rows of the source quarantined, each with its reason.",
    "reasons": "Quarantined rows by reason.",
    "files": "Files (or folder entries) read, or table files.",
    "documents": "Documents read, before cleaning.",
    "bytes_read": "Bytes read from disk (unchanged files are not read again).",
    "extraction_seconds": "Seconds spent extracting text from files.",
    "read_seconds": "Seconds spent reading the source.",
    "files_reused": "Files unchanged since the last build, whose extraction was reused.",
    "files_parsed": "Files extracted in this build.",
    "skipped_columns": "Table columns left out of metadata (bytes, maps or deeper nesting).",
    "papers": "Anthology papers read (frontmatter not counted).",
    "volumes": "Anthology volumes read.",
    "frontmatter": "Anthology frontmatter entries skipped: they are not papers.",
}


def _source_figure(column: str) -> str:
    if column.startswith("format/"):
        return f"Documents read from {column.removeprefix('format/')} files."
    return SOURCE_FIGURES.get(column, "A reading figure of the source.")


def source_table(rows: Mapping[str, Mapping[str, Any]]) -> MetadataValue:
    """A table with one row per catalog source (its name first) and the union of the rows' fields
    as columns, blank where a source has no such field: reading and cleaning figures differ by kind."""
    columns = ["source", *dict.fromkeys(column for row in rows.values() for column in row)]
    frame = pd.DataFrame([{"source": name, **row} for name, row in rows.items()], columns=columns)
    return preview(frame, rows=len(frame), descriptions={column: _source_figure(column) for column in columns})


def _cell(value: Any) -> str | int | float | bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return "" if math.isnan(value) else round(float(value), 4)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    return _shorten(str(value))


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _PREVIEW_CHARS else text[: _PREVIEW_CHARS - 1] + "…"


def log_progress(context: AssetExecutionContext, label: str, every_percent: int = 10) -> ProgressCallback:
    """A progress callback that writes a run-log line each time another ``every_percent`` is done."""
    next_mark = [every_percent]
    started = time.perf_counter()

    def report(done: int, total: int) -> None:
        percent = 100 * done // max(total, 1)
        if percent >= next_mark[0] or done == total:
            rate = done / max(time.perf_counter() - started, 1e-9)
            context.log.info(f"{label}: {done}/{total} ({percent}%), {rate:.1f}/s")
            next_mark[0] = (percent // every_percent + 1) * every_percent

    return report


@contextmanager
def stopwatch() -> Iterator[dict[str, float]]:
    """Yields a dict whose ``seconds`` is filled in when the block ends."""
    elapsed: dict[str, float] = {}
    started = time.perf_counter()
    try:
        yield elapsed
    finally:
        elapsed["seconds"] = round(time.perf_counter() - started, 3)


# The quality history's columns beyond ``HISTORY_DESCRIPTIONS`` (``IndexVersions.quality_history``).
QUALITY_HISTORY_DESCRIPTIONS: dict[str, str] = {
    "gold": "Fingerprint of the gold queries that judged the version.",
    "gold_kind": "Which gold judged the version: curated (the catalog's own or a person's), known_item or llm "
    "(generated from the documents).",
    "gold_scope": "The tenants whose documents the gold queries were searched in: other tenants' documents cannot "
    "move the figures.",
    "forced_rollback": "A rollback that served this version although the promotion gate refused it: when, by "
    "whom and why (`retrieval-assets rollback --force`).",
}


def quality_history_table(versions: IndexVersions, *, deciding: str | None = None) -> MetadataValue:
    """``versions.quality_history()`` as a UI table; on the evaluation
    (``deciding``: the candidate being judged) without the ``promoted`` column, which only the
    promotion that follows can make true."""
    frame = pd.DataFrame(versions.quality_history())
    if deciding is not None and "promoted" in frame.columns:
        frame = frame.drop(columns=["promoted"])
    return preview(frame, rows=len(frame), descriptions={**HISTORY_DESCRIPTIONS, **QUALITY_HISTORY_DESCRIPTIONS})

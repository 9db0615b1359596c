"""Gold a person wrote: queries and the documents that answer them, in CSV or JSON Lines.

CSV has a header row naming ``query`` and ``expected_id``, and optionally ``grade`` (an integer,
1 when absent or blank) and ``query_id``; a JSON Lines file has one object per line with the same
keys. Rows with the same query (the same id, else the same normalised text) make one query with
several relevant documents; a later row for the same query and document overrides an earlier
grade, so the file works as an append log (``append_curated``, ``retrieval-assets gold add``). A
query without an id gets ``cq-`` and a hash of its normalised text, stable across files and runs.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from retrieval_assets.core.evaluation.gold.model import normalise, short_hash
from retrieval_assets.core.ingest.catalog import CatalogError, GoldSet

REQUIRED = ("query", "expected_id")
HEADER = ("query", "expected_id", "grade")
JSON_LINES = (".jsonl", ".ndjson")


def curated_query_id(query: str) -> str:
    return f"cq-{short_hash(normalise(query))}"


def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in JSON_LINES:
        return "jsonl"
    raise CatalogError(f"{path}: curated gold must be .csv or {'/'.join(JSON_LINES)}, not {suffix or 'no suffix'}")


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        columns = [c.strip() for c in reader.fieldnames or []]
        missing = [c for c in REQUIRED if c not in columns]
        if missing:
            raise CatalogError(f"{path}:1: header {columns} lacks the column(s) {', '.join(missing)}")
        reader.fieldnames = columns
        for row in reader:
            if None in row:  # DictReader's key for fields past the header's
                raise CatalogError(
                    f"{path}:{reader.line_num}: more fields than the header has (quote a value that holds a comma)"
                )
            yield reader.line_num, row


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8-sig") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CatalogError(f"{path}:{line_number}: not JSON ({exc})") from None
            if not isinstance(row, dict):
                raise CatalogError(f"{path}:{line_number}: expected an object, got {type(row).__name__}")
            yield line_number, row


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _grade(value: Any, where: str) -> int:
    if value is None or _text(value) == "":
        return 1
    if isinstance(value, bool) or (not isinstance(value, int) and not _text(value).lstrip("-").isdigit()):
        raise CatalogError(f"{where}: grade {value!r} is not an integer")
    return int(value)


def load_curated(path: str | Path) -> GoldSet:
    """The curated gold in ``path`` (``.csv``, or ``.jsonl``/``.ndjson`` for JSON Lines)."""
    path = Path(path)
    if not path.exists():
        raise CatalogError(f"curated gold file not found: {path}")
    rows = _csv_rows(path) if _format(path) == "csv" else _jsonl_rows(path)
    queries: dict[str, str] = {}
    normalised: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for line_number, row in rows:
        where = f"{path}:{line_number}"
        missing = [key for key in REQUIRED if key not in row]
        if missing:
            raise CatalogError(f"{where}: missing {', '.join(missing)}")
        query, expected = _text(row["query"]), _text(row["expected_id"])
        if not query:
            raise CatalogError(f"{where}: empty query")
        if not expected:
            raise CatalogError(f"{where}: empty expected_id")
        grade = _grade(row.get("grade"), where)
        qid = _text(row.get("query_id")) or curated_query_id(query)
        if qid in normalised and normalised[qid] != normalise(query):
            raise CatalogError(f"{where}: query id {qid} was given to another query, {queries[qid]!r}")
        queries.setdefault(qid, query)
        normalised.setdefault(qid, normalise(query))
        qrels.setdefault(qid, {})[expected] = grade
    if not queries:
        raise CatalogError(f"{path}: no curated queries")
    return GoldSet(queries=queries, qrels=qrels)


def append_curated(path: str | Path, query: str, expected_id: str, grade: int = 1) -> Path:
    """Add one judgement to a curated gold file, creating it (with a CSV header) when missing.
    A CSV row follows the file's own header, so a file without a grade column stays readable."""
    path = Path(path)
    query, expected_id = query.strip(), expected_id.strip()
    if not query:
        raise CatalogError("refusing an empty query")
    if not expected_id:
        raise CatalogError("refusing an empty expected_id")
    row = {"query": query, "expected_id": expected_id, "grade": grade}
    kind = _format(path)
    existing = path.read_text(encoding="utf-8-sig") if path.exists() else ""
    lead = "\n" if existing and not existing.endswith("\n") else ""
    if kind == "jsonl":
        record = lead + json.dumps(row, ensure_ascii=False) + "\n"
    else:
        header = next(csv.reader([existing.splitlines()[0]]), []) if existing.strip() else []
        columns = [c.strip() for c in header] or list(HEADER)
        if "grade" not in columns and grade != 1:
            raise CatalogError(f"{path}: has no grade column for grade {grade}")
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        if not header:
            writer.writerow(columns)
        writer.writerow([row.get(column, "") for column in columns])
        record = lead + buffer.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(record)
    return path

"""Reading any catalog source into raw rows, and telling a path's source kind from what it is.

Kind detection (``detect_kind``), in order:

1. a folder holding ``corpus.jsonl(.gz)``: ``beir``;
2. the ACL Anthology's ``data/`` folder, or a folder holding one: ``acl_anthology``;
3. a Parquet, CSV or TSV file, or a folder of Parquet files only: ``table``;
4. a ``.jsonl(.gz)`` file: ``tool_catalog`` when its first record has ``id`` and ``name`` and no
   ``text`` (the tool catalog's shape), else ``table`` (JSON Lines rows, columns found by name);
5. any other folder, or a single file of a format ``files`` reads: ``files``.

A folder of sources (``discover_sources``) holds one source per entry: each folder (of any kind
above) and each catalog or table file. Loose documents (a PDF, a Markdown file) in it are not
sources of their own: put them in a folder. Entries whose names start with "." are skipped.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from retrieval_assets.core.ingest.catalog import (
    CatalogError,
    CatalogSource,
    SourceFormat,
    source_name,
)
from retrieval_assets.core.ingest.sources.records import SourceRead

# The kinds whose rows are ``document`` records (``sources.records``).
DOCUMENT_KINDS = frozenset({"files", "table", "acl_anthology"})
# Lines read to find a JSON Lines file's first record.
_SNIFF_LINES = 50


def read_source(source: CatalogSource, cache_dir: Path | None = None) -> SourceRead:
    """A folder's, table's or the Anthology's raw rows, streamed (``steps`` reads JSON Lines
    catalogs and the inbox itself)."""
    if source.format == "files":
        from retrieval_assets.core.ingest.sources.files import read_files

        return read_files(source, cache_dir)
    if source.format == "table":
        from retrieval_assets.core.ingest.sources.table import read_table

        return read_table(source)
    if source.format == "acl_anthology":
        from retrieval_assets.core.ingest.sources.anthology import read_anthology

        return read_anthology(source)
    raise ValueError(f"read_source reads folders, tables and the Anthology, not {source.format!r}")


def _first_record(path: Path) -> dict | None:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
            for _, line in zip(range(_SNIFF_LINES), handle, strict=False):
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    return record
    except OSError as error:
        raise CatalogError(f"cannot read {path}: {error}") from None
    return None


def detect_kind(path: str | Path) -> SourceFormat:
    """The source kind of a path (module docstring), or a ``CatalogError`` naming what is wrong."""
    from retrieval_assets.core.ingest.sources.anthology import detect_anthology
    from retrieval_assets.core.ingest.sources.table import detect_table

    path = Path(path)
    if not path.exists():
        raise CatalogError(f"source not found: {path}")
    if path.is_dir() and any((path / name).is_file() for name in ("corpus.jsonl", "corpus.jsonl.gz")):
        return "beir"
    if path.is_dir() and detect_anthology(path):
        return "acl_anthology"
    if detect_table(path):
        return "table"
    if path.is_file() and path.name.endswith((".jsonl", ".jsonl.gz")):
        record = _first_record(path) or {}
        return "tool_catalog" if {"id", "name"} <= record.keys() and "text" not in record else "table"
    return "files"


def source_for_path(path: str | Path, tenant_id: str, kind: SourceFormat | None = None) -> CatalogSource:
    """A catalog source for a path of any kind; a single file that ``files`` reads becomes a
    ``files`` source of its folder that includes only it."""
    path = Path(path)
    kind = kind or detect_kind(path)
    if kind == "files" and path.is_file():
        return CatalogSource(format=kind, path=str(path.parent), tenant_id=tenant_id, include=(path.name,))
    return CatalogSource(format=kind, path=str(path), tenant_id=tenant_id)


def discover_sources(directory: str | Path) -> dict[str, CatalogSource]:
    """The sources in a folder of sources by name (module docstring), each its own tenant."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CatalogError(f"catalog sources directory not found: {directory}")
    found = {}
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith("."):
            continue
        kind = detect_kind(entry)
        if kind != "files" or entry.is_dir():
            name = source_name(entry)
            found[name] = CatalogSource(format=kind, path=str(entry), tenant_id=name)
    return found

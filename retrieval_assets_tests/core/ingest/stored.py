"""Cleaning and chunking into stored tables, as the ingest assets do, for tests of the memos."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from retrieval_assets.core.ingest.steps import ChunkedTable, CleanedCatalogs, chunk_into_table
from retrieval_assets.core.io.parted import TableWrite, open_table
from retrieval_assets.core.settings import ChunkingSettings


def stored_chunks(documents: pd.DataFrame, settings: ChunkingSettings, home: Path) -> tuple[pd.DataFrame, ChunkedTable]:
    """The chunks of ``documents`` stored at ``home/chunks`` over what is there, read back."""
    made = chunk_into_table(documents, settings, open_table(home / "chunks"))
    return _stored(made.write, home / "chunks"), made


def stored_documents(cleaned: CleanedCatalogs, home: Path) -> pd.DataFrame:
    """The cleaned documents table of a cleaning with a memo, stored at ``home/cleaned_documents``
    and read back."""
    assert cleaned.table is not None
    return _stored(cleaned.table, home / "cleaned_documents")


def _stored(write: TableWrite, stem: Path) -> pd.DataFrame:
    stem.parent.mkdir(parents=True, exist_ok=True)
    write.write(stem)
    stored = open_table(stem)
    assert stored is not None
    return stored.read_pandas()

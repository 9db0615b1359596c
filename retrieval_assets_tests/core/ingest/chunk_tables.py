"""Chunking into a stored chunk table, as the chunks asset does, for tests of the chunk memo."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from retrieval_assets.core.ingest.steps import ChunkedTable, chunk_into_table
from retrieval_assets.core.io.parted import open_table
from retrieval_assets.core.settings import ChunkingSettings


def stored_chunks(documents: pd.DataFrame, settings: ChunkingSettings, home: Path) -> tuple[pd.DataFrame, ChunkedTable]:
    """The chunks of ``documents`` stored at ``home/chunks`` over what is there, read back."""
    stem = home / "chunks"
    stem.parent.mkdir(parents=True, exist_ok=True)
    made = chunk_into_table(documents, settings, open_table(stem))
    made.write.write(stem)
    stored = open_table(stem)
    assert stored is not None
    return stored.read_pandas(), made

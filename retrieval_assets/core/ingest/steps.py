"""Ingest steps: read every catalog line, clean it (or quarantine it with a reason), chunk it.

Each step is a plain function over tables so that any asset can be re-materialized alone from
the Parquet output of the one before it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from retrieval_assets.core.embed.cache import content_hash
from retrieval_assets.core.ingest.catalog import CatalogSource, catalog_file, load_raw_rows
from retrieval_assets.core.ingest.chunking import make_chunker
from retrieval_assets.core.ingest.cleaning import CleaningResult, CleaningStats, clean_rows
from retrieval_assets.core.io.tables import frame_to_raw_rows, raw_rows_to_frame
from retrieval_assets.core.models import Chunk, Document
from retrieval_assets.core.settings import ChunkingSettings


def read_raw_catalog(source: CatalogSource) -> pd.DataFrame:
    return raw_rows_to_frame(load_raw_rows(source))


def read_raw_catalogs(sources: Sequence[CatalogSource]) -> pd.DataFrame:
    """Every line of every source; the ``source`` column says which file it came from."""
    return raw_rows_to_frame(row for source in sources for row in load_raw_rows(source))


def clean_catalog(raw: pd.DataFrame, source: CatalogSource) -> CleaningResult:
    return clean_rows(frame_to_raw_rows(raw), source.format, source.tenant_id)


def clean_catalogs(raw: pd.DataFrame, sources: Sequence[CatalogSource]) -> CleaningResult:
    """Each source's rows cleaned with its own format and tenant, the results concatenated."""
    results = []
    for source in sources:
        rows = raw[raw["source"] == str(catalog_file(source.path, source.format))]
        results.append(clean_catalog(rows, source))
    unclaimed = len(raw) - sum(r.stats.rows_in for r in results)
    if unclaimed:
        raise ValueError(f"{unclaimed} raw rows come from no configured source: re-materialize raw_catalog")
    return CleaningResult(
        documents=[d for r in results for d in r.documents],
        quarantine=[q for r in results for q in r.quarantine],
        stats=CleaningStats.combine(r.stats for r in results),
    )


def chunk_documents(documents: Sequence[Document], settings: ChunkingSettings) -> list[Chunk]:
    """Chunks with their ``content_hash``: the embedding text under this chunker config."""
    chunker = make_chunker(settings.kind, settings.window_words, settings.overlap_words)
    config = settings.model_dump_json()
    return [
        chunk.model_copy(update={"content_hash": content_hash(config, chunk.embedding_text)})
        for doc in documents
        for chunk in chunker.chunk(doc)
    ]


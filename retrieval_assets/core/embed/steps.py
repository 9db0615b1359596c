"""Embedding steps: dense and SPLADE vectors of every chunk through the content-addressed cache.

A chunk may carry precomputed dense vectors from its catalog row (``Chunk.vectors``,
docs/sources.md#precomputed-vectors). The configured dense model's vector is used as given,
L2-normalised, when its length is the model's dimension: neither encoded nor written to or read
from the cache, which holds what the encoder made of a text (a catalog's vector for a text must
not stand in for the encoder's when the same text comes without one, nor outlive its row). Every
other chunk is encoded through the cache, and what happened to each vector is counted
(``PrecomputedStats``): vectors of other models are ignored, and a vector of the configured model
that cannot describe its chunk (its document spans several chunks, or its length is not the
model's dimension) leaves the chunk to the encoder, reported rather than silently."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

import numpy as np
import pandas as pd
import pyarrow as pa
from pandas.api.extensions import ExtensionArray

from retrieval_assets.core.embed.base import DenseEncoder, ProgressCallback, SparseEncoder, encoder_fingerprint
from retrieval_assets.core.embed.cache import (
    DEFAULT_BLOCK_ROWS,
    BlockEncoder,
    CacheStats,
    EmbeddingCache,
    encode_with_cache,
)
from retrieval_assets.core.embed.vectors import (
    DENSE_COLUMNS,
    SPARSE_COLUMNS,
    dense_values,
    l2_normalise,
    sparse_values,
)
from retrieval_assets.core.io.parted import PartedTable, TableWrite, worth_extending
from retrieval_assets.core.models import embedding_text


def _embed(
    chunks: pd.DataFrame,
    encode_block: BlockEncoder,
    cache: EmbeddingCache,
    columns: list[str],
    progress: ProgressCallback | None,
    block_rows: int,
    texts: Sequence[str] | None,
) -> tuple[pd.DataFrame, CacheStats]:
    # Read from the table's columns: building a Chunk per row cost 2 s per step on the ACL Anthology.
    keys = chunks["content_hash"].tolist()
    if not all(isinstance(key, str) and key for key in keys):
        raise ValueError("chunks lack a content_hash: make them with chunk_documents")
    if texts is None:
        texts = ChunkTexts(chunks["title"].array, chunks["text"].array)
    values, stats = encode_with_cache(keys, texts, encode_block, cache, block_rows=block_rows, progress=progress)
    values.insert(0, "chunk_id", pd.Series(chunks["chunk_id"].to_numpy(), dtype="string"))
    return values[columns], stats


# The chunk columns an embedding step reads (metadata, the largest of the rest, is left on disk);
# the dense one also reads each document's precomputed vectors. The texts are read only if a
# chunk is encoded (``DeferredChunkTexts``).
TEXT_COLUMNS = ["title", "text"]
SPARSE_CHUNK_COLUMNS = ["chunk_id", "content_hash"]
DENSE_CHUNK_COLUMNS = [*SPARSE_CHUNK_COLUMNS, "doc_id", "tenant_id", "vectors"]


class ChunkTexts(Sequence[str]):
    """Chunks' embedding texts, each made when asked for from the chunk table's own columns: the
    cache holds most chunks' vectors in a nightly run, and made up front, 200k ACL chunks' texts
    took 523 MB (a script), and turning the columns into Python strings first made a fully cached
    SPLADE step's work over them 11.7 s instead of 2.8 s."""

    def __init__(self, titles: ExtensionArray | np.ndarray, texts: ExtensionArray | np.ndarray) -> None:
        self._titles, self._texts = titles, texts

    def __len__(self) -> int:
        return len(self._texts)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        title = self._titles[index]
        return embedding_text(title if isinstance(title, str) else None, str(self._texts[index]))


class DeferredChunkTexts(Sequence[str]):
    """The embedding texts of a chunks table's ``rows`` rows, whose title and text columns
    ``load`` reads when a text is first asked for, of the rows at the positions it is given
    (None: every row): a step whose vectors are all cached never reads them, and one that
    encodes a few chunks reads theirs only (a million chunks' texts are about 1 GB)."""

    def __init__(
        self, rows: int, load: Callable[[Sequence[int] | None], pd.DataFrame], positions: Sequence[int] | None = None
    ) -> None:
        self._rows, self._load, self._positions = rows, load, positions
        self._texts: ChunkTexts | None = None

    def at(self, positions: Sequence[int]) -> DeferredChunkTexts:
        """The texts of these rows (of this sequence), in this order, still unread."""
        if self._positions is not None:
            positions = [self._positions[position] for position in positions]
        return DeferredChunkTexts(len(positions), self._load, positions)

    def __len__(self) -> int:
        return self._rows

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if self._texts is None:
            columns = self._load(self._positions)
            self._texts = ChunkTexts(columns["title"].array, columns["text"].array)
        return self._texts[index]


# Chunk ids named per kind of unused vector in ``PrecomputedStats.examples``.
EXAMPLES = 5


@dataclass(frozen=True)
class PrecomputedStats:
    """What became of the precomputed vectors a chunks table carried, in chunks."""

    used: int = 0  # the configured model's vector, used instead of encoding
    # Encoded although their document carried the configured model's vector: it spans several chunks.
    split: int = 0
    split_documents: int = 0
    # Encoded although they carried the configured model's vector: its length is not the model's.
    wrong_dim: int = 0
    # Ignored: vectors of other models, by model name.
    other_models: dict[str, int] = field(default_factory=dict)
    # A few chunk ids for each of split and wrong_dim, to say where to look.
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def unused(self) -> int:
        """Chunks encoded although they carried a vector of the configured model."""
        return self.split + self.wrong_dim


@dataclass(frozen=True)
class DenseStats(CacheStats):
    """``CacheStats`` of the chunks encoded through the cache, and the precomputed vectors' fate."""

    precomputed: PrecomputedStats = field(default_factory=PrecomputedStats)


def precomputed_vectors(chunks: pd.DataFrame, model: str, dim: int) -> tuple[dict[int, np.ndarray], PrecomputedStats]:
    """The usable precomputed vectors of ``model`` by row position, L2-normalised float32, and
    what became of every precomputed vector in the table."""
    if "vectors" not in chunks.columns:
        return {}, PrecomputedStats()
    column = chunks["vectors"]
    positions = np.flatnonzero(column.notna().to_numpy(dtype=bool)).tolist()
    used: dict[int, np.ndarray] = {}
    other: Counter[str] = Counter()
    split: list[int] = []
    wrong: list[int] = []
    for position in positions:
        vectors = json.loads(column.iat[position])
        other.update(name for name in vectors if name != model)
        if model not in vectors:
            continue
        vector = vectors[model]
        if vector is None:
            split.append(position)
        elif len(vector) != dim:
            wrong.append(position)
        else:
            values = np.asarray(vector, dtype=np.float64)
            values = values / np.max(np.abs(values))  # no overflow in the norm of huge values
            used[position] = l2_normalise(values[None, :])[0]
    chunk_ids = chunks["chunk_id"]
    examples = {
        kind: [str(chunk_ids.iat[p]) for p in found[:EXAMPLES]]
        for kind, found in (("split", split), ("wrong_dim", wrong))
        if found
    }
    split_documents = len({(chunks["tenant_id"].iat[p], chunks["doc_id"].iat[p]) for p in split}) if split else 0
    stats = PrecomputedStats(
        used=len(used),
        split=len(split),
        split_documents=split_documents,
        wrong_dim=len(wrong),
        other_models=dict(sorted(other.items())),
        examples=examples,
    )
    return used, stats


def embed_dense(
    chunks: pd.DataFrame,
    encoder: DenseEncoder,
    cache: EmbeddingCache,
    progress: ProgressCallback | None = None,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    texts: DeferredChunkTexts | None = None,
) -> tuple[pd.DataFrame, DenseStats]:
    """Dense vectors of every chunk of a chunks table: the configured model's precomputed vector
    where a chunk carries a usable one (``precomputed_vectors``), else through the cache, where
    only text the cache lacks is encoded. ``texts``, when given, are the chunks' texts, read
    only if one is encoded; else the table holds them."""
    given, precomputed = precomputed_vectors(chunks, encoder.model_name, encoder.dim)
    rest = [position for position in range(len(chunks)) if position not in given] if given else None
    frame, stats = _embed(
        chunks if rest is None else chunks.iloc[rest].reset_index(drop=True),
        lambda texts, report: dense_values(np.asarray(encoder.encode_documents(texts, progress=report))),
        cache,
        DENSE_COLUMNS,
        progress,
        block_rows,
        texts if texts is None or rest is None else texts.at(rest),
    )
    if rest is not None:
        positions = list(given)
        supplied = pd.DataFrame(
            {
                "chunk_id": pd.Series(chunks["chunk_id"].iloc[positions].to_numpy(), dtype="string"),
                "content_hash": pd.Series(chunks["content_hash"].iloc[positions].to_numpy(), dtype="string"),
                "embedding": list(given.values()),
            }
        )
        order = np.argsort(np.asarray(rest + positions), kind="stable")
        both = pd.concat([frame.astype({"chunk_id": "string", "content_hash": "string"}), supplied], ignore_index=True)
        frame = both.iloc[order].reset_index(drop=True)[DENSE_COLUMNS]
    return frame, DenseStats(stats.requested, stats.reused, stats.encoded, precomputed)


def embed_sparse(
    chunks: pd.DataFrame,
    encoder: SparseEncoder,
    cache: EmbeddingCache,
    progress: ProgressCallback | None = None,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    texts: DeferredChunkTexts | None = None,
) -> tuple[pd.DataFrame, CacheStats]:
    """SPLADE vectors of every chunk of a chunks table; only text the cache lacks is encoded
    (``texts`` as ``embed_dense``'s)."""
    return _embed(
        chunks,
        lambda texts, report: sparse_values(encoder.encode_documents(texts, progress=report)),
        cache,
        SPARSE_COLUMNS,
        progress,
        block_rows,
        texts,
    )


# Embeds a chunks table's rows with their texts (``embed_dense`` or ``embed_sparse`` bound to an encoder).
RowsEmbedder = Callable[[pd.DataFrame, "DeferredChunkTexts | None"], tuple[pd.DataFrame, CacheStats]]


def embeddings_table(
    chunks: pd.DataFrame,
    embed: RowsEmbedder,
    fingerprint: str,
    last: PartedTable | None,
    texts: DeferredChunkTexts | None = None,
) -> tuple[TableWrite, CacheStats]:
    """Every chunk's vectors as the table to store: where ``last`` (the table the step stored
    before) was made by the same encoder, its rows of chunks whose id and content hash are
    unchanged stay where they are and only the other chunks are embedded (``core.io.parted``);
    else, or once that table would be too scattered, every chunk is embedded and written whole.
    A chunk carrying precomputed vectors is always embedded again: its text may be unchanged
    while its catalog vector is not."""
    sources = _kept_rows(chunks, last) if last is not None and last.tag == fingerprint else None
    if sources is None or last is None or not worth_extending(last, sources):
        frame, stats = embed(chunks, texts)
        return TableWrite(frame, fingerprint), stats
    added = np.flatnonzero(sources < 0)
    frame, stats = embed(chunks.iloc[added].reset_index(drop=True), None if texts is None else texts.at(added.tolist()))
    return TableWrite(frame, fingerprint, last, sources), stats


def _kept_rows(chunks: pd.DataFrame, last: PartedTable) -> np.ndarray:
    """Each chunk's row in ``last`` (same chunk id and content hash), else -1."""
    keys = {name: pa.array(chunks[name], type=pa.string()) for name in ("chunk_id", "content_hash")}
    sources = last.positions_of(keys)
    if "vectors" in chunks.columns:
        sources[chunks["vectors"].notna().to_numpy(dtype=bool)] = -1
    return sources


def embedding_cache(cache_root: Path, kind: str, encoder: DenseEncoder | SparseEncoder) -> EmbeddingCache:
    return EmbeddingCache(cache_root / kind, encoder_fingerprint(encoder))



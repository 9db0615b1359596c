"""Precomputed vectors at embedding time (docs/sources.md#precomputed-vectors), on the packaged
dense model: a catalog's vector of the configured model is used, L2-normalised, instead of
encoding its chunk; vectors of other models are ignored and counted; a vector that cannot describe
its chunk leaves the chunk to the encoder, counted; the cache never holds a catalog's vector."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval_assets.core.embed.base import DenseEncoder
from retrieval_assets.core.embed.configured import dense_encoder_for
from retrieval_assets.core.embed.steps import embed_dense, embedding_cache
from retrieval_assets.core.embed.vectors import DENSE_COLUMNS, dense_matrix
from retrieval_assets.core.ingest.catalog import CatalogSource
from retrieval_assets.core.ingest.steps import chunk_documents, clean_catalog, read_raw_catalog
from retrieval_assets.core.io.tables import chunks_to_frame
from retrieval_assets.core.models import Document
from retrieval_assets.core.settings import ChunkingSettings, ModelSettings
from retrieval_assets_tests.defs.test_incremental_build import CountingDense

OTHER = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def real() -> DenseEncoder:
    """The configured (default, packaged) dense model."""
    return dense_encoder_for(ModelSettings(device="cpu"))


@pytest.fixture
def dense(real: DenseEncoder) -> CountingDense:
    return CountingDense(real)


def _vector(seed: int, dim: int) -> list[float]:
    """A vector no encoder made, not unit length."""
    return (np.random.default_rng(seed).normal(size=dim) * 3).tolist()


def _unit(vector: list[float]) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float64)
    return (array / np.linalg.norm(array)).astype(np.float32)


def _chunks(path: Path, fmt: str, settings: ChunkingSettings | None = None) -> Any:
    source = CatalogSource(format=fmt, path=str(path))  # type: ignore[arg-type]
    cleaned = clean_catalog(read_raw_catalog(source), source)
    assert not cleaned.quarantine, cleaned.quarantine
    return chunks_to_frame(chunk_documents(cleaned.documents, settings or ChunkingSettings()))


def _embedded(chunks: Any, dense: CountingDense, cache_root: Path) -> tuple[dict[str, np.ndarray], Any]:
    frame, stats = embed_dense(chunks, dense, embedding_cache(cache_root, "dense", dense))
    assert list(frame.columns) == DENSE_COLUMNS and list(frame["chunk_id"]) == list(chunks["chunk_id"])
    assert list(frame["content_hash"]) == list(chunks["content_hash"])
    matrix = dense_matrix(frame, list(frame["chunk_id"]))
    return {str(chunk_id).split("/", 1)[1]: row for chunk_id, row in zip(frame["chunk_id"], matrix, strict=True)}, stats


def test_jsonl_catalog_vectors_of_the_model_are_used_not_encoded(dense: CountingDense, tmp_path: Path) -> None:
    model = dense.model_name
    tools = [
        {"id": "given", "name": "Given", "description": "Aligns reads.", f"embedding:{model}": _vector(1, dense.dim)},
        {"id": "also", "name": "Also", "description": "Sorts files.", f"embedding:{model}": _vector(2, dense.dim),
         f"embedding:{OTHER}": _vector(3, 4)},
        {"id": "other", "name": "Other", "description": "Calls variants.", f"embedding:{OTHER}": _vector(4, 4)},
        {"id": "plain", "name": "Plain", "description": "Counts k-mers."},
    ]
    catalog = tmp_path / "tools.jsonl"
    catalog.write_text("".join(json.dumps(tool) + "\n" for tool in tools))
    chunks = _chunks(catalog, "tool_catalog")

    vectors, stats = _embedded(chunks, dense, tmp_path / "cache")

    assert dense.texts == ["Other\nCalls variants.", "Plain\nCounts k-mers."]
    np.testing.assert_allclose(vectors["given#0"], _unit(tools[0][f"embedding:{model}"]), rtol=1e-6)
    np.testing.assert_allclose(vectors["also#0"], _unit(tools[1][f"embedding:{model}"]), rtol=1e-6)
    encoded = dense.inner.encode_documents(["Plain\nCounts k-mers."])[0]
    np.testing.assert_allclose(vectors["plain#0"], encoded, atol=1e-6)
    assert all(abs(np.linalg.norm(v) - 1) < 1e-5 for v in vectors.values())
    assert (stats.encoded, stats.reused, stats.requested) == (2, 0, 2)
    assert stats.precomputed.used == 2 and stats.precomputed.unused == 0
    assert stats.precomputed.other_models == {OTHER: 2}  # ignored, and said so

    # The cache holds what the encoder made only: the same texts without vectors are encoded once.
    dense.texts.clear()
    without = [{key: value for key, value in tool.items() if not key.startswith("embedding:")} for tool in tools]
    catalog.write_text("".join(json.dumps(tool) + "\n" for tool in without))
    _, stats = _embedded(_chunks(catalog, "tool_catalog"), dense, tmp_path / "cache")
    assert dense.texts == ["Given\nAligns reads.", "Also\nSorts files."]
    assert (stats.encoded, stats.reused, stats.precomputed.used) == (2, 2, 0)


def test_parquet_table_vectors_are_used_not_encoded(dense: CountingDense, tmp_path: Path) -> None:
    model = dense.model_name
    given = [_vector(10 + n, dense.dim) for n in range(3)]
    table = tmp_path / "rows.parquet"
    pq.write_table(
        pa.table(
            {
                "id": ["r1", "r2", "r3", "r4"],
                "title": ["One", "Two", "Three", "Four"],
                "text": ["first row text", "second row text", "third row text", "fourth row text"],
                f"embedding:{model}": pa.array([*given, None], type=pa.list_(pa.float32())),
            }
        ),
        table,
    )
    vectors, stats = _embedded(_chunks(table, "table"), dense, tmp_path / "cache")

    assert dense.texts == ["Four\nfourth row text"]
    for n, vector in enumerate(given, start=1):
        stored = np.asarray(vector, dtype=np.float32).tolist()  # Parquet kept them as float32
        np.testing.assert_allclose(vectors[f"r{n}#0"], _unit(stored), rtol=1e-6)
    assert (stats.precomputed.used, stats.encoded) == (3, 1)


def test_vectors_that_cannot_describe_their_chunk_are_encoded_and_counted(
    dense: CountingDense, tmp_path: Path
) -> None:
    model = dense.model_name
    long = " ".join(f"word{n}" for n in range(40))
    documents = [
        Document(doc_id="split", title="Split", text=long, vectors={model: _vector(20, dense.dim)}),
        Document(doc_id="small", title="Small", text="A few words.", vectors={model: [1.0, 2.0, 3.0]}),
        Document(doc_id="fine", title="Fine", text="Fits one chunk.", vectors={model: _vector(21, dense.dim)}),
    ]
    settings = ChunkingSettings(kind="sliding_window", window_words=16, overlap_words=0)
    chunks = chunks_to_frame(chunk_documents(documents, settings))
    split_chunks = int((chunks["doc_id"] == "split").sum())
    assert split_chunks == 3

    vectors, stats = _embedded(chunks, dense, tmp_path / "cache")

    assert len(dense.texts) == split_chunks + 1 and "Small\nA few words." in dense.texts
    assert stats.precomputed.used == 1 and "fine#0" in vectors
    assert (stats.precomputed.split, stats.precomputed.split_documents, stats.precomputed.wrong_dim) == (3, 1, 1)
    assert stats.precomputed.examples == {"split": ["default/split#0", "default/split#1", "default/split#2"],
                                          "wrong_dim": ["default/small#0"]}


def test_a_table_of_precomputed_vectors_only_encodes_nothing(dense: CountingDense, tmp_path: Path) -> None:
    model = dense.model_name
    documents = [Document(doc_id=f"d{n}", text=f"text {n}", vectors={model: _vector(n, dense.dim)}) for n in range(3)]
    chunks = chunks_to_frame(chunk_documents(documents, ChunkingSettings()))
    vectors, stats = _embedded(chunks, dense, tmp_path / "cache")
    assert dense.texts == [] and stats.encoded == 0 and stats.precomputed.used == 3 and len(vectors) == 3

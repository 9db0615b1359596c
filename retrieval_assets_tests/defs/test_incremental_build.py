"""Incremental builds through the build job on the real encoders: only new or changed text is
encoded, and removed documents leave every backend (crash recovery: ``test_crash_recovery.py``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from retrieval_assets.core.embed.base import DenseEncoder, ProgressCallback, SparseEncoder
from retrieval_assets.core.embed.cache import FINGERPRINT_FILE, MAX_SEGMENTS, EmbeddingCache, encode_with_cache
from retrieval_assets.core.embed.steps import embedding_cache
from retrieval_assets.core.embed.vectors import dense_values
from retrieval_assets.core.index.build import backend_chunk_ids
from retrieval_assets.core.index.layout import IndexLayout
from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.core.io import parted
from retrieval_assets.core.io.parted import open_table
from retrieval_assets.core.models import Chunk, SparseVector
from retrieval_assets.core.retrieval.service import open_retriever
from retrieval_assets.core.settings import RetrievalSettings
from retrieval_assets.defs.io_manager import stored_value
from retrieval_assets.defs.resources import IndexBuildResource, ModelResource
from retrieval_assets_tests import TEST_DATA
from retrieval_assets_tests.builds import build_catalog

TOOLS = TEST_DATA / "tools_with_relations.jsonl"
QUERIES = ("align sequencing reads to a reference genome", "variant calling", "sort BAM files")


class CountingDense(DenseEncoder):
    """The real dense encoder, recording every document text it is asked to encode."""

    def __init__(self, inner: DenseEncoder) -> None:
        self.inner, self.texts = inner, []
        self.model_name, self.dim, self.max_length = inner.model_name, inner.dim, inner.max_length

    def encode_documents(self, texts: Sequence[str], progress: ProgressCallback | None = None) -> np.ndarray:
        self.texts.extend(texts)
        return self.inner.encode_documents(texts, progress)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.encode_queries(texts)


class CountingSparse(SparseEncoder):
    def __init__(self, inner: SparseEncoder) -> None:
        self.inner, self.texts = inner, []
        self.model_name, self.vocab_size, self.max_length = inner.model_name, inner.vocab_size, inner.max_length

    def encode_documents(self, texts: Sequence[str], progress: ProgressCallback | None = None) -> list[SparseVector]:
        self.texts.extend(texts)
        return self.inner.encode_documents(texts, progress)

    def encode_queries(self, texts: Sequence[str]) -> list[SparseVector]:
        return self.inner.encode_queries(texts)

    def id_to_term(self, term_id: int) -> str:
        return self.inner.id_to_term(term_id)


@pytest.fixture(scope="module")
def encoders() -> tuple[DenseEncoder, SparseEncoder]:
    models = ModelResource()
    return models.dense_encoder(), models.sparse_encoder()


# The counting encoders of the running test; Dagster re-creates resources per run, so they are
# reached through this module rather than held by the resource.
COUNTING: dict[str, DenseEncoder | SparseEncoder] = {}


class CountingModels(ModelResource):
    def dense_encoder(self) -> DenseEncoder:
        return COUNTING["dense"]

    def sparse_encoder(self) -> SparseEncoder:
        return COUNTING["sparse"]


def _tools() -> list[dict]:
    return [json.loads(line) for line in TOOLS.read_text().splitlines()]


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def _answers(layout: IndexLayout, encoders) -> dict[str, list[tuple[str, float]]]:
    retriever = open_retriever(
        layout, dense_encoder=encoders[0], sparse_encoder=encoders[1], settings=RetrievalSettings()
    )
    try:
        return {q: [(h.chunk_id, round(h.score, 5)) for h in retriever.search(q, top_k=5).hits] for q in QUERIES}
    finally:
        retriever.close()


def test_rerun_encodes_only_new_or_changed_text(tmp_path: Path, encoders) -> None:
    dense, sparse = CountingDense(encoders[0]), CountingSparse(encoders[1])
    COUNTING.update(dense=dense, sparse=sparse)
    home, tools = tmp_path / "home", _tools()
    catalog = _write(tmp_path / "catalog.jsonl", tools)

    first, first_version = build_catalog(home, catalog, models=CountingModels())
    assert first.encoded["dense"] == first.encoded["sparse"] == first.chunks == len(tools)

    dense.texts.clear(), sparse.texts.clear()
    unchanged, unchanged_version = build_catalog(home, catalog, models=CountingModels())
    assert unchanged.candidate.reused and unchanged_version == first_version
    assert dense.texts == [] and sparse.texts == []

    removed, edited = tools[0]["id"], tools[1]["id"]
    changed = [dict(tool) for tool in tools[1:]]
    changed[0]["description"] += " Now also reads CRAM."
    added = {"id": "newtool", "name": "NewTool", "description": "Assembles long nanopore reads into contigs."}
    _write(catalog, [*changed, added])
    dense.texts.clear(), sparse.texts.clear()
    third, third_version = build_catalog(home, catalog, models=CountingModels())

    assert not third.candidate.reused and third_version != first_version
    assert third.encoded["dense"] == third.encoded["sparse"] == 2
    encoded = "\n---\n".join(sparse.texts)
    assert len(sparse.texts) == 2 and changed[0]["description"] in encoded and added["description"] in encoded
    # The vocabulary encoded only the terms it had not seen: the few new words of those two texts.
    assert len(dense.texts) - 2 == third.encoded["vocabulary"] < 20
    # Chunk ids name the document's tenant (``Chunk.make_id``).
    expected = {Chunk.make_id(tool["id"], 0, tenant_id=tool.get("tenant_id", "default")) for tool in [*changed, added]}
    for backend, ids in backend_chunk_ids(third_version).items():
        assert ids == expected, backend
        assert f"default/{removed}#0" not in ids and f"default/{edited}#0" in ids


def test_cache_is_keyed_by_encoder_fingerprint(tmp_path: Path) -> None:
    def encode(texts: Sequence[str], progress: ProgressCallback | None) -> object:
        return dense_values(np.ones((len(texts), 2), dtype=np.float32))

    one, other = EmbeddingCache(tmp_path, "model-a|dim=2"), EmbeddingCache(tmp_path, "model-b|dim=2")
    _, stats = encode_with_cache(["k1", "k2"], ["a", "b"], encode, one, block_rows=1)
    assert (stats.encoded, len(one.segments())) == (2, 2)  # one durable segment per block
    _, stats = encode_with_cache(["k2", "k1", "k3"], ["b", "a", "c"], encode, one)
    assert (stats.reused, stats.encoded) == (2, 1)
    _, stats = encode_with_cache(["k1"], ["a"], encode, other)
    assert stats.encoded == 1  # a different model never reuses another model's vectors
    one.compact(["k1"], max_segments=0)
    assert len(one.segments()) == 1 and list(one.lookup(["k1", "k2", "k3"])["content_hash"]) == ["k1"]


def _variants(tools: list[dict], copies: int) -> list[dict]:
    """Distinct tools with distinct text, enough that encoding takes many blocks."""
    return [
        {**tool, "id": f"{tool['id']}-v{n}", "description": f"{tool['description']} Variant {n} of the tool."}
        for n in range(copies)
        for tool in tools
    ]


def test_bench_incremental_prints_the_figures_last(tiny_beir: Path, tmp_path: Path, capsys) -> None:
    from retrieval_assets.cli import main

    arguments = ["--dataset", str(tiny_beir), "--workdir", str(tmp_path), "--changed-fraction", "0.2"]
    assert main(["bench-incremental", *arguments]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"full_seconds", "noop_seconds", "one_percent_seconds", "peak_rss_mb", "reembedded_chunks_noop",
            "reembedded_chunks_one_percent"} <= set(figures)
    assert figures["reembedded_chunks_noop"] == 0 and figures["noop_reused_version"]
    assert 0 < figures["changed_documents"] <= figures["reembedded_chunks_one_percent"] < figures["chunks"]
    assert figures["noop_seconds"] < figures["full_seconds"]

    assert all(run["cache_segments"] for run in figures["changed_runs"])

    # Resumed: the recorded full build is not repeated, and the re-runs change documents anew.
    resume = ["bench-incremental", "--dataset", str(tiny_beir), "--workdir", str(tmp_path), "--changed-fraction", "0.2"]
    assert main([*resume, "--resume"]) == 0
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert resumed["resumed"] and resumed["full_version"] == figures["full_version"]
    assert resumed["full_seconds"] == figures["full_seconds"] and resumed["noop_reused_version"]
    assert resumed["reembedded_chunks_one_percent"] >= resumed["changed_documents"] > 0
    assert main([*resume[:3], "--resume"]) == 2 and "--workdir" in capsys.readouterr().err
    assert main(["bench-latency", "--index-root", str(tmp_path / "home" / "indexes")]) == 0
    latency = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(latency["runs"]) == {"bm25", "dense", "splade", "hybrid"} and latency["chunks"] == figures["chunks"]
    assert all(0 < run["p50_ms"] <= run["p95_ms"] for run in latency["runs"].values())


def test_a_changed_encoder_reencodes_once_and_says_why(tmp_path: Path, encoders) -> None:
    home = tmp_path / "home"
    catalog = _write(tmp_path / "catalog.jsonl", _tools()[:5])
    first, _ = build_catalog(home, catalog)
    # As if the cached vectors had been made by the INT8 graph as shipped: another fingerprint.
    cache = embedding_cache(home / "embedding_cache", "dense", encoders[0])
    assert "graph=dequantized-fp32" in (cache.path / FINGERPRINT_FILE).read_text()
    shipped = "OnnxDenseEncoder|bge|graph=as-shipped"
    cache.path.rename(cache.path.with_name("int8-vectors"))
    (cache.path.with_name("int8-vectors") / FINGERPRINT_FILE).write_text(shipped)
    # The last build's table holds those vectors too, under their fingerprint: none is kept in place.
    manifest = home / "artifacts" / "dense_embeddings.parts.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "tag": shipped}))

    again, _ = build_catalog(home, catalog)
    assert again.encoded["dense"] == first.chunks and again.encoded["sparse"] == 0
    (materialization,) = again.run.asset_materializations_for_node("dense_embeddings")
    said = materialization.metadata["encoder_changed"].value
    assert isinstance(said, str) and "the encoder changed" in said and "graph=as-shipped" in said
    third, _ = build_catalog(home, catalog)
    assert third.encoded["dense"] == 0


def test_nightly_build_merges_a_grown_cache_into_live_vectors(tmp_path: Path, encoders) -> None:
    """The embedding assets, which every nightly run materializes, keep the cache bounded."""
    home = tmp_path / "home"
    catalog = _write(tmp_path / "catalog.jsonl", _tools())
    build_catalog(home, catalog)
    cache = embedding_cache(home / "embedding_cache", "dense", encoders[0])
    live_keys = list(stored_value(home / "artifacts", "dense_embeddings")["content_hash"])
    stale = cache.lookup(live_keys[:1]).assign(content_hash="stale")
    before = len(cache.segments())
    for _ in range(MAX_SEGMENTS):
        cache.append(stale)
    assert len(cache.segments()) == before + MAX_SEGMENTS > MAX_SEGMENTS

    again, _ = build_catalog(home, catalog)
    assert again.candidate.reused and again.encoded["dense"] == 0
    assert len(cache.segments()) == 1
    assert cache.lookup(["stale"]).empty and set(cache.lookup(live_keys)["content_hash"]) == set(live_keys)


@pytest.mark.parametrize("delta", [True, False])
def test_a_rerun_keeps_unchanged_vectors_in_place_and_answers_as_a_fresh_build(
    tmp_path: Path, encoders, monkeypatch, delta: bool
) -> None:
    """The embedding tables keep their unchanged rows where they are (``core.io.parted``); the
    version built on them, as a delta or in full, answers as one built from nothing."""
    monkeypatch.setattr(parted, "MIN_MEAN_RUN", 1)  # 18 tools: parted even in runs of one row
    home, tools = tmp_path / "home", _tools()
    catalog = _write(tmp_path / "catalog.jsonl", tools)
    _, first_version = build_catalog(home, catalog)
    IndexVersions(home / "indexes").promote(first_version, reason="test")  # a delta's base
    first_files = {name: open_table(home / "artifacts" / name) for name in ("dense_embeddings", "sparse_embeddings")}

    changed = [dict(tool) for tool in tools]
    changed[4]["description"] += " Now also reads CRAM."
    del changed[9]
    build = IndexBuildResource(delta_max_changed_fraction=0.5 if delta else 0.0)
    outcome, version = build_catalog(home, _write(catalog, changed), build=build)
    assert outcome.candidate.mode.startswith("delta from") if delta else outcome.candidate.mode == "full"

    chunks = stored_value(home / "artifacts", "chunks")
    for name, first in first_files.items():
        (materialization,) = outcome.run.asset_materializations_for_node(name)
        metadata = {key: value.value for key, value in materialization.metadata.items()}
        assert (metadata["vectors"], metadata["kept_in_place"], metadata["vectors_written"]) == (17, 16, 1)
        table = open_table(home / "artifacts" / name)
        assert table is not None and first is not None and table.files[0] == first.files[0]
        assert metadata["path"].endswith(f"{name}.parts.json") and len(table.files) == 2
        stored = stored_value(home / "artifacts", name)
        assert stored["chunk_id"].tolist() == chunks["chunk_id"].tolist()
        assert stored["content_hash"].tolist() == chunks["content_hash"].tolist()
    dense = stored_value(home / "artifacts", "dense_embeddings")
    cache = embedding_cache(home / "embedding_cache", "dense", encoders[0])
    cached = cache.lookup(dense["content_hash"].tolist()).set_index("content_hash").loc[dense["content_hash"]]
    assert np.array_equal(np.stack(dense["embedding"].to_list()), np.stack(cached["embedding"].to_list()))

    _, fresh = build_catalog(tmp_path / "fresh", tmp_path / "catalog.jsonl")
    assert _answers(version.layout, encoders) == _answers(fresh.layout, encoders)

"""A catalog carrying its own dense vectors, built through the build job on the real encoders
(docs/sources.md#precomputed-vectors): the dense encoder encodes none of its chunks, the
dense index holds the catalog's vectors, and the version answers dense searches with them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrieval_assets.core.embed.base import DenseEncoder, SparseEncoder
from retrieval_assets.core.index.layout import IndexLayout
from retrieval_assets.core.ingest.catalog import CatalogSource
from retrieval_assets.core.ingest.steps import chunk_documents, clean_catalog, read_raw_catalog
from retrieval_assets.core.models import Strategy
from retrieval_assets.core.retrieval.service import open_retriever
from retrieval_assets.core.settings import ChunkingSettings, RetrievalSettings
from retrieval_assets.defs.resources import ModelResource
from retrieval_assets.runs import materialized
from retrieval_assets_tests import TEST_DATA
from retrieval_assets_tests.builds import build_catalog
from retrieval_assets_tests.defs.test_incremental_build import CountingDense

TOOLS = TEST_DATA / "tools_with_relations.jsonl"
# bwa's vector in the catalog is the encoder's vector of this text, not of bwa's own: a dense
# search for it finds bwa only if the catalog's vector is the one indexed.
DECOY = "A recipe for chocolate cake: butter, sugar, eggs and cocoa, baked for forty minutes."


# The counting encoder of the running test; Dagster re-creates resources per run, so it is
# reached through this module rather than held by the resource.
COUNTING: dict[str, DenseEncoder | SparseEncoder] = {}


class CountingModels(ModelResource):
    def dense_encoder(self) -> DenseEncoder:
        return COUNTING["dense"]  # type: ignore[return-value]

    def sparse_encoder(self) -> SparseEncoder:
        return COUNTING["sparse"]  # type: ignore[return-value]


@pytest.fixture(scope="module")
def encoders() -> tuple[DenseEncoder, SparseEncoder]:
    models = ModelResource()
    return models.dense_encoder(), models.sparse_encoder()


def test_a_catalog_with_vectors_builds_without_dense_encoding_and_searches(tmp_path: Path, encoders) -> None:
    real_dense, real_sparse = encoders
    tools = [json.loads(line) for line in TOOLS.read_text().splitlines()]
    source = CatalogSource(format="tool_catalog", path=str(TOOLS))
    chunks = chunk_documents(clean_catalog(read_raw_catalog(source), source).documents, ChunkingSettings())
    texts = {chunk.doc_id: chunk.embedding_text for chunk in chunks}
    assert len(chunks) == len(tools) == len(texts)  # each tool is one chunk
    vectors = real_dense.encode_documents([DECOY if tool["id"] == "bwa" else texts[tool["id"]] for tool in tools])
    field = f"embedding:{real_dense.model_name}"
    catalog = tmp_path / "catalog.jsonl"
    rows = [{**tool, field: vector.tolist()} for tool, vector in zip(tools, vectors, strict=True)]
    catalog.write_text("".join(json.dumps(row) + "\n" for row in rows))

    dense = CountingDense(real_dense)
    COUNTING.update(dense=dense, sparse=real_sparse)
    outcome, version = build_catalog(tmp_path / "home", catalog, models=CountingModels())

    assert outcome.encoded["dense"] == 0 and outcome.encoded["sparse"] == len(tools)
    assert not set(texts.values()) & set(dense.texts)  # the dense encoder saw vocabulary terms only
    metadata = materialized(outcome.run, "dense_embeddings")
    assert metadata["precomputed_used"] == len(tools) and metadata["precomputed_unused"] == 0

    answers = _answers(version.layout, encoders)
    assert answers["chocolate cake recipe"][0][0] == "default/bwa#0"
    assert answers["sort alignments in BAM files"][0][0] == "default/samtools#0"
    assert answers["hybrid: sort alignments in BAM files"][0][0] == "default/samtools#0"

    # A new vector for an unchanged text is a changed chunk: the re-run indexes it, encoding
    # nothing, and equals a full build of the changed catalog.
    changed = {"bwa": real_dense.encode_documents([texts["bwa"]])[0].tolist(), "samtools": vectors[0].tolist()}
    rows = [{**row, field: changed.get(row["id"], row[field])} for row in rows]
    catalog.write_text("".join(json.dumps(row) + "\n" for row in rows))
    rerun, rerun_version = build_catalog(tmp_path / "home", catalog, models=CountingModels())
    assert rerun_version.id != version.id and rerun.encoded["dense"] == 0
    full, full_version = build_catalog(tmp_path / "fresh", catalog, models=CountingModels())
    assert full_version.id == rerun_version.id
    answers = _answers(rerun_version.layout, encoders)
    assert answers == _answers(full_version.layout, encoders)
    assert answers["chocolate cake recipe"][0][0] == "default/samtools#0"


def _answers(layout: IndexLayout, encoders: tuple[DenseEncoder, SparseEncoder]) -> dict[str, list[tuple[str, float]]]:
    retriever = open_retriever(
        layout, dense_encoder=encoders[0], sparse_encoder=encoders[1], settings=RetrievalSettings()
    )
    try:
        dense = {
            query: retriever.search(query, top_k=3, strategies=[Strategy.DENSE])
            for query in ("chocolate cake recipe", "sort alignments in BAM files")
        }
        hybrid = {"hybrid: sort alignments in BAM files": retriever.search("sort alignments in BAM files", top_k=3)}
    finally:
        retriever.close()
    return {
        query: [(hit.chunk_id, round(hit.score, 5)) for hit in result.hits]
        for query, result in {**dense, **hybrid}.items()
    }

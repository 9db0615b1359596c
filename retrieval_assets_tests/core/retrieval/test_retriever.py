"""The query pipeline end to end on real small indexes: real models, real engines, no mocks.

One tool catalog (the graph fixtures' tools plus imaging tools with formats and a second
tenant) is built once through the same pipeline functions the assets use.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from retrieval_assets.core.embed.base import DenseEncoder
from retrieval_assets.core.embed.configured import dense_encoder_for, sparse_encoder_for
from retrieval_assets.core.embed.query_cores import query_encoding_alone
from retrieval_assets.core.index.build import build_lexical_index
from retrieval_assets.core.index.layout import IndexLayout, read_build_manifest
from retrieval_assets.core.ingest.catalog import CatalogSource
from retrieval_assets.core.ingest.steps import chunk_documents, clean_catalog, read_raw_catalog
from retrieval_assets.core.io.tables import chunks_to_frame
from retrieval_assets.core.query.control_tags import ControlTagError
from retrieval_assets.core.retrieval.rerank.cross_encoder import load_reranker
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.retrieval.service import open_retriever
from retrieval_assets.core.settings import (
    ChunkingSettings,
    ModelSettings,
    RetrievalSettings,
)
from retrieval_assets.core.stores.qdrant.edge import QdrantEdgeStore
from retrieval_assets.core.stores.remote import strongest_terms
from retrieval_assets.core.stores.tantivy.store import TAG_SCORE, TantivyLexicalStore
from retrieval_assets.defs.resources import IndexBuildResource, VocabularyConfig
from retrieval_assets.paths import BUNDLED_DATA
from retrieval_assets_tests import TEST_DATA
from retrieval_assets_tests.builds import build_catalog

TOOLS_WITH_RELATIONS = TEST_DATA / "tools_with_relations.jsonl"
IMAGING_TOOLS = [
    {
        "id": "horos",
        "name": "Horos",
        "description": "Free open-source medical image viewer for CT, MRI and PET studies, with 3D volume "
        "rendering and tumour segmentation tools.",
        "metadata": {"topics": ["Medical imaging"], "formats": ["DICOM"], "license": "LGPL-3.0"},
    },
    {
        "id": "itksnap",
        "name": "ITK-SNAP",
        "description": "Interactive software for semi-automatic segmentation of structures in 3D medical images.",
        "metadata": {"topics": ["Medical imaging"], "formats": ["NIfTI"], "license": "GPL-3.0"},
    },
    {
        "id": "orthanc",
        "name": "Orthanc",
        "description": "Lightweight server that stores and serves medical images over the network for hospitals.",
        "metadata": {"topics": ["Medical imaging"], "formats": ["DICOM"], "license": "GPL-3.0"},
    },
    {
        "id": "acme-secret-aligner",
        "name": "Acme aligner",
        "tenant_id": "acme",
        "description": "Proprietary read aligner that maps sequencing reads to a reference genome, like BWA.",
        "metadata": {"topics": ["Mapping"]},
        "relations": {"compatible_with": ["samtools"]},
    },
]


@pytest.fixture(scope="session")
def encoders():
    settings = ModelSettings()
    return dense_encoder_for(settings), sparse_encoder_for(settings)


@pytest.fixture(scope="session")
def reranker():
    rerank = RetrievalSettings().rerank
    return load_reranker(rerank.model, max_length=rerank.max_length)


@pytest.fixture(scope="session")
def tool_layout(tmp_path_factory: pytest.TempPathFactory, encoders) -> IndexLayout:
    root = tmp_path_factory.mktemp("tool_indexes")
    catalog = root / "catalog.jsonl"
    lines = TOOLS_WITH_RELATIONS.read_text().splitlines() + [json.dumps(tool) for tool in IMAGING_TOOLS]
    catalog.write_text("\n".join(lines) + "\n")
    build, version = build_catalog(root, catalog, build=IndexBuildResource(vocabulary=VocabularyConfig(min_doc_freq=1)))
    assert not build.quarantined
    return version.layout


@pytest.fixture()
def retriever(tool_layout, encoders, reranker) -> Iterator[HybridRetriever]:
    dense_encoder, sparse_encoder = encoders
    opened = open_retriever(
        tool_layout,
        dense_encoder=dense_encoder,
        sparse_encoder=sparse_encoder,
        settings=RetrievalSettings(),
        reranker=reranker,
    )
    yield opened
    opened.close()


def _ids(result) -> list[str]:
    return [hit.doc_id for hit in result.hits]


# -- control tags ---------------------------------------------------------------------------------


def test_exclude_tag_removes_ids_and_is_stripped(retriever: HybridRetriever) -> None:
    plain = retriever.search("align sequencing reads to a reference genome", top_k=5, tenant_id="default")
    excluded = plain.hits[0].doc_id, plain.hits[1].doc_id
    tagged = retriever.search(
        f"align sequencing reads [EXCLUDE:{excluded[0]}|{excluded[1]}] to a reference genome",
        top_k=5,
        tenant_id="default",
    )
    assert not set(excluded) & set(_ids(tagged))
    assert len(tagged.hits) == 5
    assert tagged.diagnostics["query"] == "align sequencing reads to a reference genome"
    assert tagged.diagnostics["excluded_ids"] == sorted(excluded)


def test_no_rerank_and_refine_tags(tool_layout, encoders, reranker) -> None:
    dense_encoder, sparse_encoder = encoders
    settings = RetrievalSettings.model_validate({"rerank": {"enabled": True}})
    with open_retriever(
        tool_layout, dense_encoder=dense_encoder, sparse_encoder=sparse_encoder, settings=settings, reranker=reranker
    ) as retriever:
        assert retriever.search("sort BAM files").reranked
        skipped = retriever.search("sort BAM files [NO_RERANK] [REFINE]")
    assert not skipped.reranked and skipped.refine
    assert "rerank" not in skipped.diagnostics


@pytest.mark.parametrize("query", ["[EXCLUDE:] bwa", "bwa [EXCLUDE samtools]", "bwa [NO_RERANK:yes]", "[REFINE]"])
def test_malformed_tags_are_clear_errors(retriever: HybridRetriever, query: str) -> None:
    with pytest.raises(ControlTagError):
        retriever.search(query)


# -- context tokens -------------------------------------------------------------------------------


def test_attached_file_adds_format_tokens_that_meet_record_tokens(retriever: HybridRetriever) -> None:
    result = retriever.search("medical image viewer", top_k=3, strategies=["bm25"], context_files=["scan.dcm"])
    assert result.diagnostics["context_tokens"] == ["format:DICOM"]
    assert set(_ids(result)[:2]) == {"horos", "orthanc"}  # the two tools that read DICOM
    # Each matching tag adds a fixed nudge to the BM25 score of the tools that carry it, and nothing to others.
    plain = {h.doc_id: h.score for h in retriever.search("medical images", top_k=10, strategies=["bm25"]).hits}
    nifti = retriever.search("medical images", top_k=10, strategies=["bm25"], context_files=["brain.nii.gz"])
    assert nifti.diagnostics["context_tokens"] == ["format:3D", "format:NIFTI"]
    boosted = {h.doc_id: h.score for h in nifti.hits}
    assert boosted["itksnap"] == pytest.approx(plain["itksnap"] + TAG_SCORE, rel=1e-4)
    assert boosted["horos"] == pytest.approx(plain["horos"], rel=1e-4)


# -- expansion and retry --------------------------------------------------------------------------


def test_few_results_trigger_broader_expansion(retriever: HybridRetriever) -> None:
    # "neoplasm" occurs nowhere in the catalog; its vocabulary neighbours ("tumour") do.
    result = retriever.search("neoplasm", top_k=5, strategies=["bm25"])
    attempts = result.diagnostics["expansion"]
    assert [a["level"] for a in attempts] == list(range(len(attempts)))
    assert attempts[0]["expansion_terms"] == {} and attempts[0]["results"] == 0
    assert 1 < len(attempts) <= 3
    assert attempts[-1]["results"] > 0 and "horos" in _ids(result)


def test_expansion_on_request_adds_weighted_neighbours(retriever: HybridRetriever) -> None:
    result = retriever.search("tumour segmentation", strategies=["bm25"], expand=True)
    terms = result.diagnostics["expansion"][0]["expansion_terms"]
    assert 0 < len(terms) <= RetrievalSettings().expansion.max_terms
    assert all(0 < weight <= RetrievalSettings().expansion.weight for weight in terms.values())
    assert not {"tumour", "segmentation"} & set(terms)


# -- fusion, provenance, rerank ---------------------------------------------------------------------


@pytest.mark.parametrize("method", ["rrf", "minmax", "zscore", "similarity_rrf"])
def test_every_fusion_method_runs_with_provenance(retriever: HybridRetriever, method: str) -> None:
    result = retriever.search(
        "sort and index BAM alignments", top_k=5, fusion=method, strategies=["bm25", "splade", "dense"]
    )
    assert result.fusion == method
    assert result.hits[0].doc_id == "samtools"
    assert set(result.hits[0].strategy_scores) >= {"bm25", "splade", "dense"}
    assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)
    assert {"bm25_ms", "splade_ms", "dense_ms", "fusion_ms", "total_ms"} <= set(result.timings_ms)
    # Each query encoding is timed within its strategy, and its thread's CPU is reported.
    for name in ("splade", "dense"):
        assert 0 < result.timings_ms[f"{name}_encode_ms"] <= result.timings_ms[f"{name}_ms"]
        assert result.diagnostics["encoder_cpu_ms"][name] > 0
    assert "_encode" not in result.diagnostics


def test_rerank_orders_by_cross_encoder_and_reports_moves(retriever: HybridRetriever) -> None:
    query = "quality control report for raw sequencing reads"
    # The first-stage list the cross-encoder reads from: the same search without rerank, in full.
    first_stage = _ids(retriever.search(query, top_k=100, rerank=False))
    result = retriever.search(query, top_k=8, rerank=True)
    assert result.reranked
    assert len(result.hits) == 8
    scores = [hit.strategy_scores["rerank"].score for hit in result.hits]
    assert scores == sorted(scores, reverse=True)
    assert result.hits[0].doc_id == "fastqc"
    diagnostics = result.diagnostics["rerank"]
    # The head of the first stage was scored: as many candidates as configured (or all there are).
    expected_scored = min(RetrievalSettings().rerank.candidates, len(first_stage))
    assert expected_scored > len(result.hits)
    assert diagnostics["scored"] == expected_scored
    # Every returned hit was scored, and remembers its place in the first-stage list.
    assert [hit.strategy_scores["rerank"].rank for hit in result.hits] == list(range(1, 9))
    for hit in result.hits:
        assert hit.first_stage_rank is not None and 1 <= hit.first_stage_rank <= expected_scored
        assert first_stage[hit.first_stage_rank - 1] == hit.doc_id
    assert [(m["key"], m["from"], m["to"]) for m in diagnostics["moves"]] == [
        (hit.doc_id, hit.first_stage_rank, to) for to, hit in enumerate(result.hits, start=1)
    ]


# -- knowledge graph --------------------------------------------------------------------------------


def test_graph_adds_related_tools_marked_as_such(retriever: HybridRetriever) -> None:
    result = retriever.search("Burrows-Wheeler aligner", top_k=20, strategies=["bm25"], tenant_id="default")
    graph_hits = [hit for hit in result.hits if "graph" in hit.strategy_scores]
    assert graph_hits, result.diagnostics
    for hit in graph_hits:
        assert hit.graph_path and set(hit.strategy_scores) == {"graph"}
    assert len(result.diagnostics["graph"]["added"]) <= RetrievalSettings().graph.max_nodes


def test_graph_and_every_strategy_respect_the_tenant(retriever: HybridRetriever) -> None:
    for tenant, foreign in (("default", "acme-secret-aligner"), ("acme", "bwa")):
        for strategies in (["bm25"], ["splade"], ["dense"], None):
            result = retriever.search(
                "read aligner compatible with samtools", top_k=30, tenant_id=tenant, strategies=strategies
            )
            assert {hit.tenant_id for hit in result.hits} <= {tenant}
            assert foreign not in _ids(result)


# -- more like this ---------------------------------------------------------------------------------


def test_document_id_query_searches_like_that_document(retriever: HybridRetriever) -> None:
    result = retriever.search("bwa", top_k=5)
    assert result.diagnostics["more_like_this"] == "bwa"
    assert "bwa" not in _ids(result)
    assert "bowtie2" in _ids(result)[:3]
    # Ids of another tenant are not found, so they are searched as plain text.
    assert "more_like_this" not in retriever.search("acme-secret-aligner", tenant_id="default").diagnostics


# -- multi-query ------------------------------------------------------------------------------------


def test_multi_query_fuses_feedback_reformulation(tool_layout, encoders, reranker) -> None:
    dense_encoder, sparse_encoder = encoders
    # Graph off (it rescales fused scores) and only the feedback reformulation, so the fused scores
    # can be recomputed from the two rankings the pipeline should have searched.
    settings = RetrievalSettings.model_validate(
        {"graph": {"enabled": False}, "multi_query": {"vocabulary_expansion": False}}
    )
    query = "variant calling from aligned reads"
    with open_retriever(
        tool_layout, dense_encoder=dense_encoder, sparse_encoder=sparse_encoder, settings=settings, reranker=reranker
    ) as retriever:
        plain = retriever.search(query, top_k=100, multi_query=False)
        result = retriever.search(query, top_k=100, multi_query=True)
        diagnostics = result.diagnostics["multi_query"]
        [reformulation] = diagnostics["reformulations"]
        assert reformulation["label"] == "prf" and reformulation["expansion_terms"] == {}
        assert reformulation["query"].startswith(f"{query} ")
        assert len(reformulation["query"].split()) > len(query.split())
        # The reformulation searched on its own, the same way the pipeline searches it.
        feedback = retriever.search(reformulation["query"], top_k=100, multi_query=False)
    assert "multi_query_ms" in result.timings_ms
    assert diagnostics["candidates"] == {"original": len(plain.hits), "prf": len(feedback.hits)}
    assert len(plain.hits) > 0 and len(feedback.hits) > 0
    assert _ids(feedback) != _ids(plain)
    # Fused by RRF (k=60) over both runs: each document sums 1 / (60 + rank) over the runs that found it.
    expected: dict[str, float] = {}
    for run in (_ids(plain), _ids(feedback)):
        for rank, doc_id in enumerate(run, start=1):
            expected[doc_id] = expected.get(doc_id, 0.0) + 1 / (60 + rank)
    assert {hit.doc_id: hit.score for hit in result.hits} == pytest.approx(expected, rel=1e-9)
    assert [hit.score for hit in result.hits] == sorted(expected.values(), reverse=True)
    # Multi-query changed the ranking, not just the scores.
    assert _ids(result)[:5] != _ids(plain)[:5]


class _ChatCompletions(BaseHTTPRequestHandler):
    """A loopback OpenAI-compatible endpoint answering with fixed paraphrases."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert body["messages"][0]["content"]
        if self.headers.get("Authorization") != "Bearer test-key":
            self.send_response(401)
            self.end_headers()
            return
        answer = {"choices": [{"message": {"content": "1. short read alignment tool\n2. map reads to genome"}}]}
        payload = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def llm_endpoint() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _ChatCompletions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("api_key", "works"), [("test-key", True), ("wrong-key", False)])
def test_llm_reformulations_when_an_endpoint_is_configured(tool_layout, encoders, llm_endpoint, api_key, works) -> None:
    dense_encoder, sparse_encoder = encoders
    settings = RetrievalSettings.model_validate({"multi_query": {"enabled": True, "llm_base_url": llm_endpoint}})
    with open_retriever(
        tool_layout, dense_encoder=dense_encoder, sparse_encoder=sparse_encoder, settings=settings, llm_api_key=api_key
    ) as retriever:
        result = retriever.search("bwa alternative")
    labels = [r["label"] for r in result.diagnostics["multi_query"]["reformulations"]]
    assert ("llm1" in labels and "llm2" in labels) == works
    assert ("llm_error" in result.diagnostics) != works
    assert "test-key" not in json.dumps(result.diagnostics) and "wrong-key" not in json.dumps(result.diagnostics)
    assert result.hits  # without the LLM, everything still works


# -- natural-language filters on real bibliographic records -----------------------------------------


@pytest.fixture(scope="session")
def acl_retriever(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HybridRetriever]:
    """BM25 only over the bundled ACL sample: NL filters need no model."""
    source = CatalogSource(format="beir", path=str(BUNDLED_DATA / "acl_sample"))
    cleaned = clean_catalog(read_raw_catalog(source), source)
    frame = chunks_to_frame(chunk_documents(cleaned.documents, ChunkingSettings()))
    path = tmp_path_factory.mktemp("acl") / "tantivy"
    build_lexical_index(path, frame).close()
    lexical = TantivyLexicalStore.open(path)
    facets = read_build_manifest(path)["facets"]
    settings = RetrievalSettings(strategies=("bm25",))
    retriever = HybridRetriever(
        dense_encoder=None,
        sparse_encoder=None,
        dense_store=None,
        sparse_store=None,
        lexical_store=lexical,
        settings=settings,
        nl_filter_settings=settings.nl_filters.model_copy(update={"known_venues": frozenset(facets["venue"])}),
        filterable_fields=lambda _: {"doc_id", "tenant_id", *lexical.field_types},
    )
    yield retriever
    retriever.close()


def test_year_phrases_become_range_filters(acl_retriever: HybridRetriever) -> None:
    result = acl_retriever.search("machine translation since 2019", top_k=50)
    assert result.hits and all(hit.metadata["year"] >= 2019 for hit in result.hits)
    assert result.diagnostics["query"] == "machine translation"
    ranged = acl_retriever.search("parsing 2000-2010", top_k=50)
    assert ranged.hits and all(2000 <= hit.metadata["year"] <= 2010 for hit in ranged.hits)


def test_author_and_venue_phrases(acl_retriever: HybridRetriever) -> None:
    everything = acl_retriever.search("language model evaluation", top_k=300)
    author = everything.hits[0].metadata["authors"][0]
    surname = author.split()[-1]
    by_author = acl_retriever.search(f"language model evaluation by {surname}", top_k=50)
    assert by_author.hits and all(
        surname.lower() in [a.split()[-1].lower() for a in hit.metadata["authors"]] for hit in by_author.hits
    )
    in_acl = acl_retriever.search("question answering in ACL", top_k=50)
    assert in_acl.hits and all("acl" in hit.metadata["venue"] for hit in in_acl.hits)
    assert in_acl.diagnostics["query"] == "question answering"


def test_year_phrase_on_a_corpus_without_years_stays_text(retriever: HybridRetriever) -> None:
    result = retriever.search("alignment tools published in 2019", top_k=3)
    assert result.hits and "nl_filters_ignored" in result.diagnostics
    assert result.diagnostics["query"] == "alignment tools published in 2019"


class _NotingDenseEncoder(DenseEncoder):
    """The real query encoder, noting for each call whether it was told it runs alone."""

    def __init__(self, inner: DenseEncoder) -> None:
        self.inner, self.model_name, self.dim = inner, inner.model_name, inner.dim
        self.alone: list[bool] = []

    def encode_documents(self, texts, progress=None):
        return self.inner.encode_documents(texts, progress)

    def encode_queries(self, texts):
        self.alone.append(query_encoding_alone())
        return self.inner.encode_queries(texts)


def test_a_lone_dense_search_encodes_its_query_alone(tool_layout, encoders) -> None:
    """Only a search running one strategy, with no other search in flight, may take every core."""
    dense_encoder, sparse_encoder = encoders
    noting = _NotingDenseEncoder(dense_encoder)
    retriever = open_retriever(
        tool_layout, dense_encoder=noting, sparse_encoder=sparse_encoder,
        settings=RetrievalSettings(collapse_chunks=False),
    )
    try:
        alone = retriever.search("align reads", top_k=3, strategies=["dense"])
        retriever.search("align reads", top_k=3, strategies=["bm25", "dense"])
        with retriever._in_flight.search():  # another caller's search, still running
            retriever.search("align reads", top_k=3, strategies=["dense"])
    finally:
        retriever.close()
    assert noting.alone == [True, False, False]
    assert alone.hits


def test_splade_query_is_cut_to_the_store_term_limit_and_reported(tool_layout, encoders) -> None:
    """A sparse engine with a clause limit gets the query's heaviest terms; the cut is in the diagnostics."""
    _, sparse_encoder = encoders
    query = "align sequencing reads to a reference genome"
    store = QdrantEdgeStore.open(tool_layout.qdrant)
    store.max_query_terms = 3  # as an engine with a 3-clause limit would declare
    retriever = HybridRetriever(
        dense_encoder=None, sparse_encoder=sparse_encoder, dense_store=None, sparse_store=store,
        lexical_store=None, settings=RetrievalSettings(strategies=["splade"], collapse_chunks=False),
    )
    try:
        result = retriever.search(query, top_k=5)
        full = sparse_encoder.encode_queries([query])[0]
        heaviest, _ = strongest_terms(full, 3)
        expected = [hit.chunk_id for hit in store.search_sparse(heaviest, 5)]
    finally:
        retriever.close()
    assert len(full.indices) > 3
    assert result.diagnostics["splade_query_terms"] == {
        "terms": len(set(full.indices)), "terms_sent": 3, "terms_dropped": len(set(full.indices)) - 3,
        "weight_dropped": pytest.approx(sum(sorted(full.values, reverse=True)[3:]), rel=1e-5),
    }
    assert [hit.chunk_id for hit in result.hits] == expected

"""Materialize the whole asset graph in process on a tiny real catalog, then query it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from dagster import materialize

from retrieval_assets.core.evaluation.benchmark import CONFIGURATIONS
from retrieval_assets.core.settings import RetrievalSettings
from retrieval_assets.definitions import ASSETS
from retrieval_assets.defs.io_manager import ParquetIOManager, stored_value
from retrieval_assets.defs.jobs import WHOLE_BUILD
from retrieval_assets.defs.resources import (
    CatalogResource,
    IndexStorageResource,
    ModelResource,
    SearchResource,
    code_location_resources,
)
from retrieval_assets_tests.defs.tables import undescribed_columns


@pytest.fixture(scope="module")
def built(tiny_beir: Path, tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("home")
    storage = IndexStorageResource(home=str(home))
    models = ModelResource()
    search = SearchResource(storage=storage, models=models)
    result = materialize(
        ASSETS,
        selection=WHOLE_BUILD,
        resources={
            **code_location_resources(),
            "catalog": CatalogResource(format="beir", path=str(tiny_beir)),
            "models": models,
            "storage": storage,
            "search": search,
            "parquet_io_manager": ParquetIOManager(base_dir=str(storage.artifacts_dir)),
        },
    )
    return result, storage, search


def _metadata(result, asset: str) -> dict:
    [event] = result.asset_materializations_for_node(asset) or [None]
    if event is None:  # multi-asset outputs share one node
        events = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
        event = events[0].materialization
    return {k: v.value for k, v in event.metadata.items()}


def test_graph_materializes_with_counts(built, tiny_beir: Path) -> None:
    result, storage, _ = built
    assert result.success
    corpus_lines = len((tiny_beir / "corpus.jsonl").read_text().splitlines())
    raw = stored_value(storage.artifacts_dir, "raw_catalog")
    cleaned = stored_value(storage.artifacts_dir, "cleaned_documents")
    quarantined = pd.read_parquet(storage.artifacts_dir / "quarantined_documents.parquet")
    chunks = stored_value(storage.artifacts_dir, "chunks")
    dense = stored_value(storage.artifacts_dir, "dense_embeddings")
    sparse = stored_value(storage.artifacts_dir, "sparse_embeddings")

    assert len(raw) == corpus_lines
    assert len(cleaned) == corpus_lines - 1
    assert quarantined["reason"].tolist() == ["malformed_json"]
    assert len(chunks) >= len(cleaned)
    assert set(chunks["doc_id"]) == set(cleaned["doc_id"])
    assert len(dense) == len(sparse) == len(chunks)
    for index in ("faiss_index", "qdrant_edge_index", "tantivy_index"):
        assert _metadata(result, index)["points"] == len(chunks)
    assert all(check.passed for check in result.get_asset_check_evaluations())


def test_evaluation_is_recorded(built) -> None:
    result, storage, _ = built
    metadata = _metadata(result, "retrieval_evaluation")
    assert metadata["evaluated"] is True
    assert 0.0 <= metadata["ndcg@10"] <= 1.0
    promoted = storage.versions().promoted()
    report = promoted.evaluation()
    assert set(report["runs"]) == set(CONFIGURATIONS) and report["gate"]["passed"]
    # The asset's figures are the report's figures for the default configuration.
    default = report["runs"][metadata["configuration"]]
    for metric in ("ndcg@10", "recall@100", "mrr@10", "p50_ms", "p95_ms"):
        assert metadata[metric] == pytest.approx(default[metric]), metric
    # Every configuration's latency percentiles are real measurements in milliseconds: positive,
    # finite, P50 <= P95, and no single query took longer than the whole evaluation step.
    elapsed_ms = metadata["seconds"] * 1000
    for name, run in report["runs"].items():
        p50, p95 = run["p50_ms"], run["p95_ms"]
        assert math.isfinite(p50) and math.isfinite(p95), name
        assert 0 < p50 <= p95 <= elapsed_ms, (name, p50, p95, elapsed_ms)
    # The gate judged exactly the P95 the report records.
    assert report["gate"]["comparison"]["p95_ms"]["candidate"] == pytest.approx(default["p95_ms"])
    assert metadata["version"] == promoted.id and _metadata(result, "promoted_index")["version"] == promoted.id


def test_real_query_finds_the_expected_document(built, tiny_beir: Path) -> None:
    _, _, search = built
    queries = [json.loads(line) for line in (tiny_beir / "queries.jsonl").read_text().splitlines()]
    [query] = [q for q in queries if q["_id"] == "36"]  # "A deficiency of vitamin B12 increases ... homocysteine."
    qrels = [line.split("\t") for line in (tiny_beir / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    expected = {doc for qid, doc, _ in qrels if qid == query["_id"]}
    result = search.search(query["text"], top_k=3)
    assert expected & {hit.doc_id for hit in result.hits}
    top = result.hits[0]
    assert top.chunk_id.startswith(f"{top.tenant_id}/{top.doc_id}#")  # chunk ids name the tenant
    assert set(top.strategy_scores) <= {"bm25", "splade", "dense"} and top.strategy_scores
    assert result.strategies == list(RetrievalSettings().strategies)
    assert result.fusion == RetrievalSettings().fusion.method


def test_every_table_column_in_the_run_is_described(built) -> None:
    result, _, _ = built
    undescribed = [
        column
        for event in result.get_asset_materialization_events()
        for column in undescribed_columns(event.materialization.metadata, event.asset_key.to_user_string())
    ]
    undescribed += [
        column
        for check in result.get_asset_check_evaluations()
        for column in undescribed_columns(check.metadata, check.asset_check_key.name)
    ]
    assert undescribed == []

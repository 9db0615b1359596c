"""Materialize raw_catalog -> cleaned_documents -> knowledge_graph (into the candidate version)
on the hand-made tool catalog."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from dagster import materialize

from retrieval_assets.core.retrieval.graph_expansion import ToolGraph
from retrieval_assets.defs.assets.candidate import index_candidate
from retrieval_assets.defs.assets.graph import knowledge_graph
from retrieval_assets.defs.assets.ingest import chunks, cleaned_documents, raw_catalog
from retrieval_assets.defs.io_manager import ParquetIOManager
from retrieval_assets.defs.resources import CatalogResource, IndexStorageResource, code_location_resources
from retrieval_assets_tests import TEST_DATA

TOOLS = TEST_DATA / "tools_with_relations.jsonl"


def _materialize(catalog: CatalogResource, home: Path):
    storage = IndexStorageResource(home=str(home))
    result = materialize(
        [raw_catalog, cleaned_documents, chunks, index_candidate, knowledge_graph],
        resources={
            **code_location_resources(),
            "catalog": catalog,
            "storage": storage,
            "parquet_io_manager": ParquetIOManager(base_dir=str(storage.artifacts_dir)),
        },
    )
    [event] = result.asset_materializations_for_node("knowledge_graph")
    metadata = {key: value.value for key, value in event.metadata.items()}
    candidate = storage.versions().version(result.output_for_node("index_candidate").version)
    return result, candidate.layout.graph, metadata


def test_knowledge_graph_asset(tmp_path: Path) -> None:
    result, published, metadata = _materialize(CatalogResource(format="tool_catalog", path=str(TOOLS)), tmp_path)
    assert result.success
    [check] = [c for c in result.get_asset_check_evaluations() if c.check_name == "graph_edges_within_tenant"]
    assert check.passed

    table = pd.read_parquet(Path(tmp_path, "artifacts", "knowledge_graph.parquet"))
    pd.testing.assert_frame_equal(pd.read_parquet(published), table)
    assert metadata["edges"] == len(table) and metadata["tenants"] == 2
    assert metadata["edges_by_relation"]["requires"] == 4
    assert metadata["dropped_by_reason"]["cross_tenant"] == 2
    assert "samtools" in [record.data["doc_id"] for record in metadata["top_degree"].records]

    hits = ToolGraph.load(published).expand([("htslib", 1.0)], tenant_id="default", max_depth=1)
    assert sorted(hit.doc_id for hit in hits) == ["bcftools", "samtools"]


def test_document_catalog_gives_an_empty_graph(tmp_path: Path, tiny_beir: Path) -> None:
    result, published, metadata = _materialize(CatalogResource(format="beir", path=str(tiny_beir)), tmp_path)
    assert result.success and metadata["edges"] == 0
    assert all(check.passed for check in result.get_asset_check_evaluations())
    assert pd.read_parquet(published).empty

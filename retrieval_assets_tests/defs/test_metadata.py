"""Every column of the tables assets record has a description the UI shows (the tables whose
columns depend on a run are checked where a run makes them: test_materialize_graph.py and
test_learned_configuration.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from dagster import MetadataValue

from retrieval_assets.core.embed.vectors import DENSE_COLUMNS, SPARSE_COLUMNS
from retrieval_assets.core.evaluation.gate import GateSettings, decide
from retrieval_assets.core.evaluation.significance import per_query_changes
from retrieval_assets.core.index.graph import EDGE_COLUMNS
from retrieval_assets.core.index.vocabulary import VOCABULARY_COLUMNS
from retrieval_assets.core.io.tables import (
    CHUNK_COLUMNS,
    DOCUMENT_COLUMNS,
    QUARANTINE_COLUMNS,
    RAW_ROW_COLUMNS,
    RECEIPT_COLUMNS,
    empty_frame,
)
from retrieval_assets.defs.assets.evaluation import _gate_table
from retrieval_assets.defs.columns import EDGE_DESCRIPTIONS
from retrieval_assets.defs.metadata import preview, table_metadata, table_schema
from retrieval_assets_tests.defs.tables import undescribed_columns

STORED_TABLES = {
    "raw_catalog": list(RAW_ROW_COLUMNS),
    "cleaned_documents": list(DOCUMENT_COLUMNS),
    "quarantined_documents": list(QUARANTINE_COLUMNS),
    "inbox_receipts": list(RECEIPT_COLUMNS),
    "chunks": list(CHUNK_COLUMNS),
    "dense_embeddings": DENSE_COLUMNS,
    "sparse_embeddings": SPARSE_COLUMNS,
    "vocabulary": VOCABULARY_COLUMNS,
    "knowledge_graph": EDGE_COLUMNS,
}


@pytest.mark.parametrize("asset", STORED_TABLES)
def test_every_column_of_a_stored_table_is_described(asset: str) -> None:
    frame = pd.DataFrame(columns=STORED_TABLES[asset])
    assert undescribed_columns(table_metadata(frame), asset) == []


def test_a_table_may_describe_a_column_its_own_way() -> None:
    edges = pd.DataFrame(columns=EDGE_COLUMNS)
    columns = table_schema(edges, descriptions=EDGE_DESCRIPTIONS).columns
    [source] = [column for column in columns if column.name == "source"]
    assert source.description == EDGE_DESCRIPTIONS["source"]
    [raw_source] = [column for column in table_schema(empty_frame(RAW_ROW_COLUMNS)).columns if column.name == "source"]
    assert raw_source.description != source.description


def test_the_gate_and_per_query_tables_are_described() -> None:
    summary = {"ndcg@10": 0.5, "recall@100": 0.8, "mrr@10": 0.5, "p50_ms": 10.0, "p95_ms": 20.0}
    per_query = {"q1": {"ndcg@10": 0.5, "recall@100": 1.0}, "q2": {"ndcg@10": 0.2, "recall@100": 0.5}}
    decision = decide(summary, summary, GateSettings(), candidate_queries=per_query, promoted_queries=per_query)
    changes = per_query_changes({"q1": 0.5, "q2": 0.4}, {"q1": 0.4, "q2": 0.5})
    tables = {"gate": _gate_table(decision), "changes": preview(pd.DataFrame(changes), rows=len(changes))}
    assert undescribed_columns(tables, "gate") == []


def test_an_unknown_column_is_reported() -> None:
    # A guard against a checker that finds nothing.
    table = MetadataValue.table_schema(table_schema(pd.DataFrame(columns=["no_such_column"])))
    assert undescribed_columns({"table": table}, "asset") == ["asset:table:no_such_column"]

"""Evaluation of the current indexes against the catalog's gold queries."""


import json

import pandas as pd
from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from retrieval_assets.core.benchmark import (
    CONFIGURATIONS,
    DEFAULT_CONFIGURATION,
    evaluate_configurations,
    ndcg_histogram,
    summarize,
)
from retrieval_assets.orchestration.assets.embeddings import vocabulary
from retrieval_assets.orchestration.assets.graph import knowledge_graph
from retrieval_assets.orchestration.assets.indexes import faiss_index, lexical_index, qdrant_index
from retrieval_assets.orchestration.metadata import log_progress, stopwatch
from retrieval_assets.orchestration.resources import CatalogResource, IndexStorageResource, SearchResource

GROUP = "evaluation"


# The query resource reads the vocabulary and the graph too, so evaluation waits for them.
@asset(group_name=GROUP, deps=[faiss_index, qdrant_index, lexical_index, vocabulary, knowledge_graph])
def retrieval_evaluation(
    context: AssetExecutionContext,
    catalog: CatalogResource,
    storage: IndexStorageResource,
    search: SearchResource,
) -> MaterializeResult:
    """recall@k, nDCG@10, MRR@10 and per-query latency for every configuration, through the query resource."""
    gold = catalog.gold()
    if gold is None:
        context.log.warning("the catalog has no gold queries (set gold_path): nothing to evaluate")
        return MaterializeResult(metadata={"evaluated": False, "reason": "no gold queries configured"})
    with stopwatch() as timer:
        reports = evaluate_configurations(
            search.retriever(), gold, progress=lambda label: log_progress(context, label, every_percent=25)
        )
    summary = {name: summarize(report) for name, report in reports.items()}
    default = summary[DEFAULT_CONFIGURATION]
    report_path = storage.layout().root / "evaluation.json"
    report_path.write_text(json.dumps({"runs": summary, "default": DEFAULT_CONFIGURATION}, indent=2))
    context.log.info(f"{DEFAULT_CONFIGURATION}: " + ", ".join(f"{k}={v}" for k, v in default.items()))

    table = pd.DataFrame(summary).T.rename_axis("configuration").reset_index()
    histogram = pd.DataFrame(ndcg_histogram(reports[DEFAULT_CONFIGURATION]), columns=["ndcg@10", "queries"])
    return MaterializeResult(
        metadata={
            "evaluated": True,
            "queries": reports[DEFAULT_CONFIGURATION].queries,
            "configuration": DEFAULT_CONFIGURATION,
            "options": MetadataValue.json(CONFIGURATIONS[DEFAULT_CONFIGURATION]),
            **{metric: MetadataValue.float(value) for metric, value in default.items()},
            "configurations": MetadataValue.md(table.to_markdown(index=False)),
            "ndcg@10_distribution": MetadataValue.md(histogram.to_markdown(index=False)),
            "report_path": str(report_path),
            "seconds": timer["seconds"],
        }
    )

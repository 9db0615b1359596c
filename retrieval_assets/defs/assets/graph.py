"""cleaned_documents -> knowledge_graph: the tool graph that query-time expansion walks."""



import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    asset,
)

from retrieval_assets.core.index.build import graph_violations, publish_graph
from retrieval_assets.core.index.graph import collect_tool_graph, graph_summary
from retrieval_assets.core.io.tables import frame_to_documents
from retrieval_assets.core.index.versions import CandidateRecord
from retrieval_assets.defs.assets.index import INDEX_WRITES_POOL, NIGHTLY_FRESHNESS, candidate_layout
from retrieval_assets.defs.metadata import OWNERS, code_referenced, preview, stopwatch, table_metadata
from retrieval_assets.defs.resources import IndexBuildResource, IndexStorageResource

GROUP = "index"
TOP_DEGREE_ROWS = 10


@asset(
    group_name=GROUP,
    io_manager_key="parquet_io_manager",
    kinds={"parquet"},
    owners=OWNERS,
    code_version="1",
    freshness_policy=NIGHTLY_FRESHNESS,
    pool=INDEX_WRITES_POOL,
    check_specs=[
        AssetCheckSpec(
            "graph_edges_within_tenant",
            asset="knowledge_graph",
            blocking=True,
            description="Every tool an edge names is in the catalog and in the edge's tenant.",
        )
    ],
)
def knowledge_graph(
    context: AssetExecutionContext,
    build: IndexBuildResource,
    storage: IndexStorageResource,
    cleaned_documents: pd.DataFrame,
    index_candidate: CandidateRecord,
):  # no return annotation: Dagster reads one as an output tuple once check_specs are present
    """Tool-tool edges from catalog relations and tool-domain links, for bounded graph expansion,
    written into the candidate version."""
    documents = frame_to_documents(cleaned_documents)
    path = candidate_layout(storage, index_candidate).graph
    with stopwatch() as timer:
        # Built whole in every mode, deltas included: it takes 0.2 s for 103k ACL documents, and
        # an edge of an unchanged tool may name a changed or removed one.
        graph = collect_tool_graph(documents, domain_fields=build.graph_domain_fields)
        # A reused version is complete (maybe serving): it is read, never written again.
        reused = index_candidate.reused
        violations = graph_violations(graph, documents) if reused else publish_graph(graph, documents, path)
    summary = graph_summary(graph.edges, dropped=graph.dropped, documents=graph.documents, top=TOP_DEGREE_ROWS)
    passed = not any(violations.values())
    if passed:
        context.log.info(f"knowledge graph with {summary.edges} edges over {summary.tools} tools at {path}")
    else:
        context.log.error(f"knowledge graph not published to {path}: {violations}")

    top = pd.DataFrame(
        [row.model_dump() for row in summary.top_degree], columns=["doc_id", "tenant_id", "relations", "domains"]
    )
    return MaterializeResult(
        value=graph.edges,
        metadata={
            **table_metadata(graph.edges),
            "edges": summary.edges,
            "tools": summary.tools,
            "documents": graph.documents,
            "domain_nodes": summary.domain_nodes,
            "tenants": summary.tenants,
            "domain_fields": ", ".join(build.graph_domain_fields),
            "edges_by_relation": MetadataValue.json(summary.edges_by_relation),
            "dropped_by_reason": MetadataValue.json(summary.dropped_by_reason),
            "dropped": sum(summary.dropped_by_reason.values()),
            "graph_path": str(path) if passed else "(not published)",
            "mode": index_candidate.mode,
            "seconds": timer["seconds"],
            # Markdown, not a table: it is read as text (retrieval_assets_tests/defs/test_knowledge_graph_asset.py).
            "top_degree": preview(top, list(top.columns), rows=TOP_DEGREE_ROWS),
        },
        check_results=[
            AssetCheckResult(check_name="graph_edges_within_tenant", passed=passed, metadata={**violations, "violations": sum(violations.values())}),
        ],
    )


# The asset links to its source in the UI; the name is rebound so it is loaded once.
(knowledge_graph,) = code_referenced(knowledge_graph)

"""cleaned_documents -> knowledge_graph: the tool graph that query-time expansion walks."""



import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetIn,
    MaterializeResult,
    MetadataValue,
    asset,
)

from retrieval_assets.core.index.build import publish_graph
from retrieval_assets.core.index.graph import (
    collect_frame_graph,
    edge_violations,
    frame_tenants,
    graph_summary,
)
from retrieval_assets.core.index.versions import CandidateRecord
from retrieval_assets.defs.assets.candidate import INDEX_WRITES_POOL, candidate_layout
from retrieval_assets.defs.columns import EDGE_DESCRIPTIONS
from retrieval_assets.defs.metadata import preview, stopwatch, table_metadata
from retrieval_assets.defs.resources import IndexBuildResource, IndexStorageResource

GROUP = "index"
TOP_DEGREE_ROWS = 10


@asset(
    group_name=GROUP,
    io_manager_key="parquet_io_manager",
    kinds={"parquet"},
    # Not titles and texts: 0.7 of the 0.8 s it takes to read 103k ACL documents.
    ins={"cleaned_documents": AssetIn(metadata={"columns": ["doc_id", "tenant_id", "metadata"]})},
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
    path = candidate_layout(storage, index_candidate).graph
    with stopwatch() as timer:
        # Built whole in every mode, deltas included: an edge of an unchanged tool may name a
        # changed or removed one.
        graph = collect_frame_graph(cleaned_documents, domain_fields=build.graph_domain_fields)
        tenant_of = frame_tenants(cleaned_documents) if len(graph.edges) else {}  # what edges are checked against
        # A reused version is complete (maybe serving): it is read, never written again.
        reused = index_candidate.reused
        violations = edge_violations(graph.edges, tenant_of) if reused else publish_graph(graph, tenant_of, path)
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
            **table_metadata(graph.edges, EDGE_DESCRIPTIONS),
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
            AssetCheckResult(
                check_name="graph_edges_within_tenant",
                passed=passed,
                metadata={**violations, "violations": sum(violations.values())},
            ),
        ],
    )

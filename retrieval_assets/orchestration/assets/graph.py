"""cleaned_documents -> knowledge_graph: the tool graph that query-time expansion walks."""


import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    Config,
    MaterializeResult,
    MetadataValue,
    asset,
)

from retrieval_assets.core.graph import (
    DEFAULT_DOMAIN_FIELDS,
    collect_tool_graph,
    edge_violations,
    graph_summary,
    save_edges,
)
from retrieval_assets.core.tables import frame_to_documents
from retrieval_assets.orchestration.assets.indexes import NIGHTLY_FRESHNESS
from retrieval_assets.orchestration.metadata import preview, stopwatch
from retrieval_assets.orchestration.resources import IndexStorageResource

GROUP = "indexes"
TOP_DEGREE_ROWS = 10


class GraphConfig(Config):
    # Metadata fields whose values become domain nodes (EDAM "topics", also "operations").
    domain_fields: list[str] = list(DEFAULT_DOMAIN_FIELDS)


@asset(
    group_name=GROUP,
    io_manager_key="parquet_io_manager",
    freshness_policy=NIGHTLY_FRESHNESS,
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
    context: AssetExecutionContext, config: GraphConfig, storage: IndexStorageResource, cleaned_documents: pd.DataFrame
):  # no return annotation: Dagster reads one as an output tuple once check_specs are present
    """Tool-tool edges from catalog relations and tool-domain links, for bounded graph expansion."""
    documents = frame_to_documents(cleaned_documents)
    with stopwatch() as timer:
        build = collect_tool_graph(documents, domain_fields=config.domain_fields)
    summary = graph_summary(build.edges, dropped=build.dropped, documents=build.documents, top=TOP_DEGREE_ROWS)
    violations = edge_violations(build.edges, {doc.doc_id: doc.tenant_id for doc in documents})
    passed = not any(violations.values())

    path = storage.layout().graph
    if passed:
        save_edges(build.edges, path)
        context.log.info(f"knowledge graph with {summary.edges} edges over {summary.tools} tools at {path}")
    else:
        # A graph that could cross tenants must not be served: no graph means no expansion.
        path.unlink(missing_ok=True)
        context.log.error(f"knowledge graph not published to {path}: {violations}")

    top = pd.DataFrame(
        [row.model_dump() for row in summary.top_degree], columns=["doc_id", "tenant_id", "relations", "domains"]
    )
    return MaterializeResult(
        value=build.edges,
        metadata={
            "edges": summary.edges,
            "tools": summary.tools,
            "documents": build.documents,
            "domain_nodes": summary.domain_nodes,
            "tenants": summary.tenants,
            "domain_fields": ", ".join(config.domain_fields),
            "edges_by_relation": MetadataValue.json(summary.edges_by_relation),
            "dropped_by_reason": MetadataValue.json(summary.dropped_by_reason),
            "dropped": sum(summary.dropped_by_reason.values()),
            "graph_path": str(path) if passed else "(not published)",
            "seconds": timer["seconds"],
            "top_degree": preview(top, list(top.columns), rows=TOP_DEGREE_ROWS),
        },
        check_results=[
            AssetCheckResult(check_name="graph_edges_within_tenant", passed=passed, metadata=dict(violations)),
        ],
    )

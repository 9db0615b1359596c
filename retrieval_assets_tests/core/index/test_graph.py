"""Knowledge-graph build, checks and summary, on a hand-made catalog of real tools and on bio.tools."""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pytest

from retrieval_assets.core.index.graph import (
    EDGE_COLUMNS,
    IN_DOMAIN,
    SAME_DOMAIN,
    DropReason,
    build_tool_graph,
    collect_frame_graph,
    collect_tool_graph,
    document_tenants,
    domain_node,
    edge_violations,
    frame_tenants,
    graph_summary,
)
from retrieval_assets.core.ingest.catalog import read_raw_rows
from retrieval_assets.core.ingest.cleaning import clean_rows
from retrieval_assets.core.io.tables import documents_to_frame
from retrieval_assets.core.models import Document, document_key
from retrieval_assets.core.retrieval.graph_expansion import ToolGraph
from retrieval_assets.paths import BUNDLED_DATA
from retrieval_assets_tests import TEST_DATA

TOOLS = TEST_DATA / "tools_with_relations.jsonl"


def _documents(path: Path) -> list[Document]:
    result = clean_rows(read_raw_rows(path), "tool_catalog")
    assert not result.quarantine
    return result.documents


@pytest.fixture(scope="module")
def documents() -> list[Document]:
    return _documents(TOOLS)


@pytest.fixture(scope="module")
def build(documents: list[Document]):
    return collect_tool_graph(documents)


def _edges(frame: pd.DataFrame) -> set[tuple[str, str, str, str]]:
    return set(frame[EDGE_COLUMNS].itertuples(index=False, name=None))


# --------------------------------------------------------------------------- build


def test_edges_come_from_relations_and_topics(build) -> None:
    edges = _edges(build.edges)
    assert list(build.edges.columns) == EDGE_COLUMNS
    assert all(str(dtype) == "string" for dtype in build.edges.dtypes)
    assert ("samtools", "htslib", "requires", "default") in edges
    assert ("bwa", "samtools", "compatible_with", "default") in edges
    assert ("bowtie2", "bwa", "alternative_to", "default") in edges  # other relation names kept as given
    assert ("freebayes", "vcflib", "compatible_with", "lab-b") in edges
    assert ("samtools", "topic:Sequencing", IN_DOMAIN, "default") in edges
    assert ("freebayes", "topic:Sequencing", IN_DOMAIN, "lab-b") in edges
    # No same_domain edges are materialised: they are walked through domain nodes.
    assert SAME_DOMAIN not in set(build.edges["relation"])


def test_dangling_and_cross_tenant_relations_are_dropped_and_counted(build) -> None:
    targets = set(build.edges["target"])
    assert not {"openjdk", "vtk", "r"} & targets  # not in the catalog
    assert ("gatk", "freebayes") not in set(zip(build.edges["source"], build.edges["target"], strict=True))
    assert ("freebayes", "htslib") not in set(zip(build.edges["source"], build.edges["target"], strict=True))
    # openjdk x3 (gatk, picard, trimmomatic), vtk, r; gatk -> freebayes and freebayes -> htslib.
    assert build.dropped == {
        **{reason.value: 0 for reason in DropReason},
        "unknown_target": 5,
        "cross_tenant": 2,
    }


def test_every_drop_reason_is_counted() -> None:
    docs = [
        Document(
            doc_id="a",
            text="A.",
            metadata={
                "relations.requires": ["b", "b", "a", " ", "ghost", "c"],
                "relations.in_domain": ["b"],
                "relations.weird": 3,
                "topics": ["X", "X", ""],
            },
        ),
        Document(doc_id="b", text="B."),
        Document(doc_id="c", text="C.", tenant_id="other"),
    ]
    result = collect_tool_graph(docs)
    assert _edges(result.edges) == {("a", "b", "requires", "default"), ("a", "topic:X", IN_DOMAIN, "default")}
    assert result.dropped == {
        "unknown_target": 1,
        "cross_tenant": 1,
        "self_loop": 1,
        "duplicate": 2,
        "blank_target": 2,
        "reserved_relation": 1,
        "invalid_value": 1,
    }


def test_build_ignores_catalog_order(documents: list[Document]) -> None:
    shuffled = list(documents)
    random.Random(7).shuffle(shuffled)
    pd.testing.assert_frame_equal(build_tool_graph(shuffled), build_tool_graph(documents))


def test_domain_node_names() -> None:
    assert domain_node("topics", "Genomics") == "topic:Genomics"
    assert domain_node("edam.operations", "Read mapping") == "operation:Read mapping"


def test_summary_counts(build) -> None:
    summary = graph_summary(build.edges, dropped=build.dropped, documents=build.documents, top=3)
    assert summary.documents == 18 and summary.tools == 18 and summary.tenants == 2
    assert summary.edges == len(build.edges) == sum(summary.edges_by_relation.values())
    assert summary.edges_by_relation["requires"] == 4  # samtools, bcftools -> htslib; gatk -> picard; 3dslicer -> itk
    assert summary.dropped_by_reason["unknown_target"] == 5
    assert summary.top_degree[0].doc_id == "samtools"  # the hub of the alignment tools
    assert len(summary.top_degree) == 3


def test_edge_violations(build, documents: list[Document]) -> None:
    tenant_of = document_tenants(documents)
    assert edge_violations(build.edges, tenant_of) == {"unknown_tool": 0, "cross_tenant": 0}
    leaky = pd.DataFrame(
        [("gatk", "freebayes", "compatible_with", "default"), ("gatk", "openjdk", "requires", "default")],
        columns=EDGE_COLUMNS,
    )
    assert edge_violations(leaky, tenant_of) == {"unknown_tool": 1, "cross_tenant": 1}


def test_two_tenants_may_hold_the_same_tool_id() -> None:
    """Ids live in a tenant's namespace: each tenant's ``bwa`` is its own tool, a relation names
    its own tenant's tool, and one that only another tenant holds is cross_tenant."""
    docs = [
        Document(doc_id="bwa", text="Aligner.", tenant_id="alpha", metadata={"relations.requires": ["samtools"]}),
        Document(doc_id="samtools", text="SAM tools.", tenant_id="alpha", metadata={"topics": ["Mapping"]}),
        Document(doc_id="bwa", text="Aligner.", tenant_id="beta", metadata={"relations.requires": ["samtools"]}),
        Document(doc_id="picard", text="Picard.", tenant_id="beta", metadata={"relations.requires": ["bwa"]}),
    ]
    build = collect_tool_graph(docs)
    assert _edges(build.edges) == {
        ("bwa", "samtools", "requires", "alpha"),
        ("samtools", "topic:Mapping", IN_DOMAIN, "alpha"),
        ("picard", "bwa", "requires", "beta"),
    }
    assert build.dropped[DropReason.CROSS_TENANT] == 1  # beta's bwa -> samtools, which only alpha holds
    assert edge_violations(build.edges, document_tenants(docs)) == {"unknown_tool": 0, "cross_tenant": 0}
    assert collect_frame_graph(documents_to_frame(docs)).edges.equals(build.edges)
    summary = graph_summary(build.edges, dropped=build.dropped, documents=len(docs))
    assert summary.tools == 4 and summary.tenants == 2  # bwa twice: one per tenant
    assert {(t.tenant_id, t.doc_id) for t in summary.top_degree} >= {("alpha", "bwa"), ("beta", "bwa")}
    crossing = pd.DataFrame([("bwa", "samtools", "requires", "beta")], columns=EDGE_COLUMNS)
    assert edge_violations(crossing, document_tenants(docs)) == {"unknown_tool": 0, "cross_tenant": 1}


def test_documents_without_relations_or_topics_give_an_empty_graph() -> None:
    rows = list(read_raw_rows(BUNDLED_DATA / "scifact_mini" / "corpus.jsonl"))[:50]
    docs = clean_rows(rows, "beir").documents
    build = collect_tool_graph(docs)
    assert build.edges.empty and list(build.edges.columns) == EDGE_COLUMNS
    assert sum(build.dropped.values()) == 0
    graph = ToolGraph.from_edges(build.edges)
    assert graph.expand([(doc.doc_id, 1.0) for doc in docs], tenant_id=None) == []
    assert graph_summary(build.edges).tools == 0


def test_biotools_sample() -> None:
    docs = _documents(BUNDLED_DATA / "biotools_sample" / "catalog.jsonl")
    build = collect_tool_graph(docs, domain_fields=("topics", "operations"))
    summary = graph_summary(build.edges, dropped=build.dropped, documents=build.documents)
    assert summary.documents == 303
    assert 250 <= summary.tools <= 303  # nearly every bio.tools entry has an EDAM topic or operation
    assert summary.edges_by_relation == {IN_DOMAIN: summary.edges}  # no relations in this export
    assert summary.domain_nodes > 100 and summary.tenants == 1
    assert sum(build.dropped.values()) == 0
    nodes = set(build.edges["target"])
    assert "topic:Genomics" in nodes and any(node.startswith("operation:") for node in nodes)

    graph = ToolGraph.from_edges(build.edges)
    hits = graph.expand([("samtools", 1.0)], tenant_id=None, max_nodes=20, max_fanout=10)
    assert len(hits) == 20
    assert all(hit.depth == 2 and hit.relation == SAME_DOMAIN for hit in hits)


@pytest.mark.parametrize("domain_fields", [("topics",), ("topics", "operations")])
def test_the_frame_graph_equals_the_document_graph(documents: list[Document], domain_fields) -> None:
    """The documents frame path parses only rows whose metadata names a relation or domain
    field; it must keep every edge and drop count, including a relation whose key is not
    ASCII and a document that mentions the relation prefix only in a value."""
    extra = [
        Document(doc_id="ü-tool", title="t", text="x", metadata={"relations.benötigt": "bwa"}),
        Document(doc_id="mention", title="t", text="x", metadata={"note": '"relations.requires": "bwa"'}),
    ]
    docs = [*documents, *extra]
    frame = documents_to_frame(docs)[["doc_id", "tenant_id", "metadata"]]
    expected = collect_tool_graph(docs, domain_fields=domain_fields)
    got = collect_frame_graph(frame, domain_fields=domain_fields)
    pd.testing.assert_frame_equal(got.edges, expected.edges)
    assert (got.dropped, got.documents) == (expected.dropped, expected.documents)
    assert ("ü-tool", "bwa", "benötigt") in {tuple(edge[:3]) for edge in _edges(got.edges)}


def test_frame_tenants_keys_each_document_as_document_key_does() -> None:
    frame = pd.DataFrame({"tenant_id": ["a/b", "c d", "a/b"], "doc_id": ["x", "x", "y#1"]}, dtype="string")
    pairs = zip(frame["tenant_id"], frame["doc_id"], strict=True)
    assert frame_tenants(frame) == {document_key(tenant, doc_id): tenant for tenant, doc_id in pairs}

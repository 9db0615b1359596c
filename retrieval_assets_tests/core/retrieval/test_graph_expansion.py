"""Bounded graph expansion at query time: walk labels, depth and node caps, tenants, scores, determinism."""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pytest

from retrieval_assets.core.index.graph import (
    EDGE_COLUMNS,
    IN_DOMAIN,
    SAME_DOMAIN,
    build_tool_graph,
    collect_tool_graph,
    save_edges,
)
from retrieval_assets.core.ingest.catalog import read_raw_rows
from retrieval_assets.core.ingest.cleaning import clean_rows
from retrieval_assets.core.models import Document
from retrieval_assets.core.retrieval.graph_expansion import ToolGraph, reverse_label
from retrieval_assets_tests import TEST_DATA

TOOLS = TEST_DATA / "tools_with_relations.jsonl"
LAB_B = {"freebayes", "vcflib"}


@pytest.fixture(scope="module")
def documents() -> list[Document]:
    result = clean_rows(read_raw_rows(TOOLS), "tool_catalog")
    assert not result.quarantine
    return result.documents


@pytest.fixture(scope="module")
def build(documents: list[Document]):
    return collect_tool_graph(documents)


@pytest.fixture(scope="module")
def graph(build) -> ToolGraph:
    return ToolGraph.from_edges(build.edges)


def _ids(hits) -> list[str]:
    return [hit.doc_id for hit in hits]


def test_reverse_labels() -> None:
    assert reverse_label("requires") == "required_by"
    assert reverse_label("compatible_with") == "compatible_with"
    assert reverse_label("alternative_to") == "reverse_alternative_to"


def test_forward_and_reverse_labels(graph: ToolGraph) -> None:
    required_by = graph.expand([("htslib", 1.0)], tenant_id="default", relations={"required_by"})
    assert _ids(required_by) == ["bcftools", "samtools"]
    assert required_by[0].path == ["htslib", "required_by", "bcftools"] and required_by[0].relation == "required_by"
    requires = graph.expand([("samtools", 1.0)], tenant_id="default", relations={"requires"})
    assert [(h.doc_id, h.path) for h in requires] == [("htslib", ["samtools", "requires", "htslib"])]
    # compatible_with is symmetric: stated only by bwa, walked from samtools too.
    compatible = graph.expand([("samtools", 1.0)], tenant_id="default", max_depth=1, relations={"compatible_with"})
    assert "bwa" in _ids(compatible)
    assert all(hit.relation == "compatible_with" for hit in compatible)
    assert all(hit.strategy == "graph" for hit in compatible)


def test_same_domain_is_reached_at_depth_two(graph: ToolGraph) -> None:
    hits = graph.expand([("deseq2", 1.0)], tenant_id="default", relations={SAME_DOMAIN})
    by_id = {hit.doc_id: hit for hit in hits}
    assert {"salmon", "star", "hisat2"} <= set(by_id)  # RNA-Seq
    assert all(hit.depth == 2 and hit.score == 0.25 for hit in hits)
    assert by_id["hisat2"].path == ["deseq2", IN_DOMAIN, "topic:RNA-Seq", SAME_DOMAIN, "hisat2"]
    # One hop is not enough to get past a domain node.
    assert graph.expand([("deseq2", 1.0)], tenant_id="default", max_depth=1, relations={SAME_DOMAIN}) == []


def test_declared_relation_beats_shared_topic_at_a_tie(graph: ToolGraph) -> None:
    # salmon is both compatible_with deseq2 (depth 1) and shares RNA-Seq with it (depth 2).
    [salmon] = [h for h in graph.expand([("deseq2", 1.0)], tenant_id="default") if h.doc_id == "salmon"]
    assert (salmon.depth, salmon.relation) == (1, "compatible_with")
    # At depth 2, walks along declared relations come before walks through a topic.
    hits = graph.expand([("htslib", 1.0)], tenant_id="default")
    domain_walk = [IN_DOMAIN in hit.path for hit in hits if hit.depth == 2]
    assert domain_walk == sorted(domain_walk) and any(domain_walk) and not all(domain_walk)


def test_depth_bound(graph: ToolGraph, documents: list[Document]) -> None:
    one = graph.expand([("htslib", 1.0)], tenant_id="default", max_depth=1, max_nodes=100)
    assert sorted(_ids(one)) == ["bcftools", "samtools"]
    for depth in range(4):
        hits = graph.expand([("itk", 1.0)], tenant_id="default", max_depth=depth, max_nodes=100)
        assert all(hit.depth <= depth and len(hit.path) == 2 * hit.depth + 1 for hit in hits)
    assert graph.expand([("htslib", 1.0)], tenant_id="default", max_depth=0) == []
    # itk -> 3dslicer (required_by) -> nothing else: 3dslicer's other topic, Informatics, is its own.
    two = graph.expand([("itk", 1.0)], tenant_id="default", max_depth=2, max_nodes=100)
    assert _ids(two) == ["3dslicer"]


def test_node_cap_is_exact_and_a_prefix_of_the_uncapped_result(graph: ToolGraph) -> None:
    everything = graph.expand([("samtools", 1.0), ("salmon", 0.8)], tenant_id="default", max_nodes=1000)
    assert len(everything) > 5
    for cap in range(len(everything) + 2):
        capped = graph.expand([("samtools", 1.0), ("salmon", 0.8)], tenant_id="default", max_nodes=cap)
        assert capped == everything[:cap]


def test_fanout_cap(graph: ToolGraph) -> None:
    wide = graph.expand([("fastqc", 1.0)], tenant_id="default", relations={SAME_DOMAIN}, max_nodes=100)
    narrow = graph.expand([("fastqc", 1.0)], tenant_id="default", relations={SAME_DOMAIN}, max_fanout=2, max_nodes=100)
    assert len(wide) >= 8  # Sequencing is shared by most of the catalog
    # Two domains, two members each, fewest-domains first then by id: Data quality management gives
    # fastqc (the seed, not returned) and trimmomatic; Sequencing gives bcftools and bowtie2.
    assert len(narrow) <= 2 * 2
    assert _ids(narrow) == ["bcftools", "bowtie2", "trimmomatic"]
    assert narrow[2].path[2] == "topic:Data quality management"


def test_tenant_isolation(graph: ToolGraph, documents: list[Document]) -> None:
    every_default = [(doc.doc_id, 1.0) for doc in documents if doc.tenant_id == "default"]
    for tenant in ("default", None):
        hits = graph.expand(every_default, tenant_id=tenant, max_depth=3, max_nodes=1000)
        assert not LAB_B & set(_ids(hits))
        # gatk names freebayes as compatible, and both share Genetic variation and Sequencing.
        gatk = graph.expand([("gatk", 1.0)], tenant_id=tenant, max_depth=3, max_nodes=1000)
        assert gatk and not LAB_B & set(_ids(gatk))
    lab_b = graph.expand([("freebayes", 1.0)], tenant_id="lab-b")
    assert _ids(lab_b) == ["vcflib"] and lab_b[0].tenant_id == "lab-b"
    assert graph.expand([("freebayes", 1.0)], tenant_id="default") == []  # a seed of another tenant adds nothing
    assert graph.expand([("gatk", 1.0)], tenant_id="lab-b") == []
    mixed = graph.expand([("freebayes", 1.0), ("htslib", 0.5)], tenant_id=None, max_nodes=1000)
    assert all((hit.tenant_id == "lab-b") == (hit.via == "freebayes") for hit in mixed)


def test_a_tool_id_under_two_tenants_is_two_tools() -> None:
    """Ids live in a tenant's namespace: ``a`` and ``b`` of t1 and t2 are four tools, and a walk
    from a seed stays in the seed's own tenant (``seed_tenants``), never crossing by a shared id."""
    edges = pd.DataFrame(
        [("a", "b", "requires", "t1"), ("b", "c", "requires", "t2"), ("a", "d", "requires", "t2")],
        columns=EDGE_COLUMNS,
    ).astype("string")
    graph = ToolGraph.from_edges(edges)
    assert graph.tenants == ["t1", "t2"] and "a" in graph and "b" in graph

    def walked(seeds, tenant_id=None, seed_tenants=None) -> set[tuple[str, str]]:
        hits = graph.expand(seeds, tenant_id=tenant_id, seed_tenants=seed_tenants, max_nodes=100)
        return {(hit.tenant_id, hit.doc_id) for hit in hits}

    assert walked([("a", 1.0)], tenant_id="t1") == {("t1", "b")}
    assert walked([("a", 1.0)], tenant_id="t2") == {("t2", "d")}
    assert walked([("a", 1.0)]) == set()  # two tenants hold it, and neither is named
    assert walked([("a", 1.0)], seed_tenants=["t2"]) == {("t2", "d")}
    assert walked([("b", 1.0)], seed_tenants=["t1"]) == {("t1", "a")}
    assert walked([("b", 1.0), ("b", 0.5)], seed_tenants=["t1", "t2"]) == {("t1", "a"), ("t2", "c")}
    assert walked([("c", 1.0)], tenant_id="t1", seed_tenants=["t2"]) == set()  # outside tenant_id
    with pytest.raises(ValueError, match="seed tenants"):
        graph.expand([("a", 1.0)], tenant_id=None, seed_tenants=[])


def test_seeds_are_not_returned(graph: ToolGraph) -> None:
    seeds = [("samtools", 1.0), ("htslib", 0.9), ("bwa", 0.5)]
    hits = graph.expand(seeds, tenant_id="default", max_nodes=1000)
    assert hits and not {"samtools", "htslib", "bwa"} & set(_ids(hits))
    assert len(set(_ids(hits))) == len(hits)


def test_scores_decay_with_depth(graph: ToolGraph) -> None:
    hits = graph.expand([("samtools", 0.8), ("deseq2", 0.6)], tenant_id="default", decay=0.3, max_nodes=1000)
    seed_score = {"samtools": 0.8, "deseq2": 0.6}
    for hit in hits:
        assert hit.score == pytest.approx(seed_score[hit.via] * 0.3**hit.depth)
        assert hit.path[0] == hit.via
    scores = [hit.score for hit in hits]
    assert scores == sorted(scores, reverse=True)
    # A tool reachable from both seeds keeps its best walk: salmon is deseq2's direct neighbour.
    [salmon] = [hit for hit in hits if hit.doc_id == "salmon"]
    assert (salmon.via, salmon.depth) == ("deseq2", 1)


def test_expansion_is_deterministic(documents: list[Document], graph: ToolGraph) -> None:
    shuffled = list(documents)
    random.Random(3).shuffle(shuffled)
    other = ToolGraph.from_edges(build_tool_graph(shuffled).sample(frac=1.0, random_state=5))
    seeds = [("multiqc", 1.0), ("gatk", 1.0)]
    assert graph.expand(seeds, tenant_id="default") == other.expand(seeds, tenant_id="default")


def test_saved_graph_loads_the_same(build, graph: ToolGraph, tmp_path: Path) -> None:
    path = save_edges(build.edges, tmp_path / "indexes" / "graph.parquet")
    loaded = ToolGraph.load(path)
    assert "samtools" in loaded and loaded.tenants == ["default", "lab-b"]
    assert loaded.expand([("bwa", 1.0)], tenant_id="default") == graph.expand([("bwa", 1.0)], tenant_id="default")


def test_unknown_seeds_and_bad_arguments(graph: ToolGraph) -> None:
    assert graph.expand([("not-a-tool", 1.0)], tenant_id=None) == []
    assert graph.expand([], tenant_id=None) == []
    for kwargs in ({"decay": 0.0}, {"decay": 1.5}, {"max_depth": -1}, {"max_nodes": -1}, {"max_fanout": 0}):
        with pytest.raises(ValueError):
            graph.expand([("bwa", 1.0)], tenant_id=None, **kwargs)
    with pytest.raises(ValueError, match="seed scores"):
        graph.expand([("bwa", float("nan"))], tenant_id=None)

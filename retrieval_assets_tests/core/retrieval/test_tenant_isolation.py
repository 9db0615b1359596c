"""Tenant isolation as a property: a query scoped to tenant A never returns another tenant's document.

Random tenants, filters (including ones naming other tenants), control tags, NL filter phrases,
document ids of other tenants ("more like this") and injection attempts, through every strategy,
with graph expansion, multi-query and rerank switched on at random, over real indexes of three
tenants whose tools are near-copies of each other. A rejected query (malformed tag, conflicting
filter phrases) is an acceptable outcome; a hit from another tenant is not.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from retrieval_assets.core.models import RetrievalResult, SearchRequest
from retrieval_assets.core.query.control_tags import ControlTagError
from retrieval_assets.core.stores.filters import FilterError
from retrieval_assets.defs.resources import GraphConfig, RerankConfig, SearchResource
from retrieval_assets_tests.core.retrieval.tenant_indexes import TENANTS, build_tenant_indexes, tenant_of

TENANT_OF = tenant_of()  # catalog documents and documents posted through the inbox
OTHER_IDS = sorted(TENANT_OF)
WORDS = [
    "align", "reads", "genome", "variant", "calling", "quality", "control", "sort", "BAM", "medical", "image", "viewer",
    "posted", "nanopore",
]
INJECTIONS = [
    "tenant_id:beta", "tenant_id:*", '{"tenant_id": "beta"}', "tenant_id=gamma", "+tenant_id:alpha OR *",
    "by Smith since 2019", "by Smith", "since 2019", "before 2015", "in 2012", "2010-2014", "since 2020 before 2012",
    "[NO_RERANK]", "[REFINE]", "[EXCLUDE:bwa|beta-bwa]", "[EXCLUDE:]", "[NO-RERANK]", "[EXCLUDE:gamma-bwa",
    "doc:beta-bwa", "id:gamma-bwa", "bowtie2", "beta-bowtie2", "hisat2", "3dslicer", "*", "AND", "NOT", '"', ")", "\\",
]
SCOPES = ("tenant_id", "filter", "both")
REJECTIONS = ("query must be a non-empty string", "nothing is left to search")


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SearchResource]:
    build = build_tenant_indexes(tmp_path_factory.getbasetemp() / "tenant_indexes")
    assert build.success
    # Graph expansion and more-like-this are on by default; rerank scores a short head to stay fast.
    resource = build.search_resource(graph=GraphConfig(enabled=True), rerank=RerankConfig(candidates=5))
    yield resource
    resource.close()


@st.composite
def _query(draw: st.DrawFn) -> str:
    """Mostly catalog words mixed with injections and ids (so that most examples have hits to check),
    sometimes arbitrary text or a bare document id of any tenant (more like this)."""
    kind = draw(st.sampled_from(["words", "words", "words", "text", "id"]))
    if kind == "text":
        return draw(st.text(min_size=1, max_size=40))
    if kind == "id":
        return draw(st.sampled_from(OTHER_IDS))
    pieces = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
    pieces += draw(st.lists(st.sampled_from(INJECTIONS + OTHER_IDS), max_size=3))
    return " ".join(draw(st.permutations(pieces)))


def _filters() -> st.SearchStrategy[dict[str, Any] | None]:
    values = {
        "tenant_id": st.one_of(st.sampled_from(TENANTS), st.lists(st.sampled_from(TENANTS), min_size=1, max_size=3)),
        "license": st.sampled_from(["MIT", "GPL-3.0", ["MIT", "GPL-3.0"]]),
        "year": st.fixed_dictionaries({"gte": st.integers(2005, 2020)}),
        "topics": st.sampled_from(["Mapping", "Medical imaging", "Sequencing"]),
        "doc_id": st.lists(st.sampled_from(OTHER_IDS), min_size=1, max_size=8),
    }
    return st.one_of(st.none(), st.none(), st.fixed_dictionaries({}, optional=values))


def _request(draw: st.DrawFn, strategies: list[str] | None) -> tuple[str, SearchRequest]:
    tenant = draw(st.sampled_from(TENANTS))
    filters = draw(_filters())
    # The scope as the request's tenant, as a tenant_id filter, or both; with the request's tenant alone,
    # the drawn filters may name other tenants, which must narrow the result, never widen it.
    scope = draw(st.sampled_from(SCOPES))
    if scope != "tenant_id":
        filters = {**(filters or {}), "tenant_id": tenant}
    request = SearchRequest(
        query=draw(_query()),
        top_k=draw(st.integers(1, 40)),
        filters=filters,
        tenant_id=None if scope == "filter" else tenant,
        strategies=strategies,
        fusion=draw(st.sampled_from([None, "rrf", "minmax", "zscore", "similarity_rrf"])),
        rerank=draw(st.booleans()),
        expand=draw(st.booleans()),
        multi_query=draw(st.booleans()),
        context_files=draw(st.lists(st.sampled_from(["scan.dcm", "brain.nii.gz", "reads.bam"]), max_size=2)),
    )
    return tenant, request


def _assert_scoped(result: RetrievalResult, tenant: str) -> None:
    leaked = {hit.doc_id: TENANT_OF.get(hit.doc_id) for hit in result.hits if TENANT_OF.get(hit.doc_id) != tenant}
    assert not leaked, f"hits from other tenants: {leaked}; diagnostics: {result.diagnostics}"
    assert all(hit.tenant_id == tenant for hit in result.hits)
    # Nothing of another tenant is named in how the result was reached either.
    diagnostics = result.diagnostics
    graph = diagnostics.get("graph", {})
    named = [diagnostics.get("more_like_this"), *graph.get("seeds", []), *graph.get("added", [])]
    assert all(TENANT_OF[doc_id] == tenant for doc_id in named if doc_id is not None)


STRATEGIES = {
    "bm25": ["bm25"], "splade": ["splade"], "dense": ["dense"], "hybrid": ["bm25", "splade", "dense"], "default": None
}


@pytest.mark.parametrize("strategies", STRATEGIES.values(), ids=STRATEGIES.keys())
@settings(max_examples=20, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_tenant_scoped_query_never_returns_another_tenants_documents(
    search: SearchResource, strategies: list[str] | None, data: st.DataObject
) -> None:
    tenant, request = _request(data.draw, strategies)
    try:
        result = search.run(request)
    except (ControlTagError, FilterError) as rejected:
        event(f"rejected: {type(rejected).__name__}")
        assert str(rejected)
        return
    except ValueError as rejected:  # a blank query, or nothing left once filter phrases are taken out
        assert any(reason in str(rejected) for reason in REJECTIONS), rejected
        event("rejected: ValueError")
        return
    # What the example exercised (pytest --hypothesis-show-statistics).
    event("hits" if result.hits else "no hits")
    for stage in ("more_like_this", "rerank", "multi_query"):
        if stage in result.diagnostics:
            event(stage)
    if result.diagnostics.get("graph", {}).get("added"):
        event("graph added hits")
    _assert_scoped(result, tenant)


def test_the_property_has_teeth(search: SearchResource) -> None:
    """Unscoped, the same catalog does return several tenants, posted documents included: the
    scoped test would see a leak."""
    result = search.run(SearchRequest(query="align sequencing reads to a reference genome", top_k=40))
    assert {hit.tenant_id for hit in result.hits} == set(TENANTS)
    posted = search.run(SearchRequest(query="posted nanopore aligner", top_k=10, rerank=False))
    assert {hit.doc_id for hit in posted.hits} >= {f"posted-{tenant}" for tenant in TENANTS}
    scoped = search.run(SearchRequest(query="bwa", top_k=40, tenant_id="beta"))
    assert scoped.hits and {hit.tenant_id for hit in scoped.hits} == {"beta"}
    # More like this over another tenant's id finds nothing to be like: the id is plain text.
    assert "more_like_this" not in scoped.diagnostics
    graph = search.run(SearchRequest(query="Burrows-Wheeler aligner", top_k=40, tenant_id="alpha", strategies=["bm25"]))
    assert any("graph" in hit.strategy_scores for hit in graph.hits)

"""The OpenSearch request bodies: text, SPLADE, first-chunk and id-page searches, lexical writes."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval_assets.core.models import SparseVector
from retrieval_assets.core.stores.filters import parse_filters
from retrieval_assets.core.stores.opensearch.requests import KEEP_FEATURES_SCRIPT
from retrieval_assets.core.stores.opensearch.store import OpenSearchStore
from retrieval_assets_tests.core.stores.fake_servers import FakeOpenSearch
from retrieval_assets_tests.core.stores.opensearch.recording import (
    os_store,
    search_response,
)
from retrieval_assets_tests.core.stores.server_inputs import (
    FAST,
    FILTER_SPEC,
    payload,
)

EXPECTED_FILTERS = [
    {"terms": {"tenant_id": ["acme"]}},
    {"terms": {"m_license": ["MIT", "GPL-3.0"]}},
    {"range": {"m_year": {"gte": 2016, "lte": 2020}}},  # integer field: bounds rounded inwards
    {"terms": {"m_open_source": [True]}},
]


def test_opensearch_text_query_body(recorder, sleeps):
    store = os_store(recorder, sleeps)
    recorder.reply(200, search_response(payload(0), payload(1), scores=[7.5, 3.25]))
    hits = store.search_text(
        "heart attack",
        5,
        parse_filters(FILTER_SPEC),
        expansion_terms={"myocardial": 0.6, "infarction": 0.0},
        tag_terms=["format:DICOM", "format:DICOM", "os:linux"],
    )
    (request,) = recorder.requests
    assert (request.method, request.url) == ("POST", "/chunks-v1/_search")
    multi = {"fields": ["content"], "type": "cross_fields", "operator": "or"}
    assert request.json() == {
        "size": 5,
        "track_total_hits": False,
        "_source": ["payload"],
        "query": {
            "bool": {
                "must": [
                    {
                        "bool": {
                            "should": [
                                {"multi_match": {"query": "heart attack", **multi}},
                                {"multi_match": {"query": "myocardial", **multi, "boost": 0.6}},
                            ],
                            "minimum_should_match": 1,
                        }
                    }
                ],
                "filter": EXPECTED_FILTERS,
                "should": [
                    {"constant_score": {"filter": {"term": {"m_tags": "format:DICOM"}}, "boost": 1.0}},
                    {"constant_score": {"filter": {"term": {"m_tags": "os:linux"}}, "boost": 1.0}},
                ],
            }
        },
    }
    assert [(h.chunk_id, h.score, h.payload) for h in hits] == [("d0#0", 7.5, payload(0)), ("d1#0", 3.25, payload(1))]


def test_opensearch_text_query_title_boost_and_empty_queries(recorder, sleeps):
    store = os_store(recorder, sleeps, title_boost=2.0)
    body = store.text_query("", 3, expansion_terms={"zebra": 1.0})
    match = body["query"]["bool"]["must"][0]["bool"]["should"]
    assert match == [{"multi_match": {"query": "zebra", "fields": ["content", "title^2"], "type": "cross_fields",
                                      "operator": "or"}}]
    assert "should" not in body["query"]["bool"]  # no tags asked for
    # Nothing to match: no request at all. A zero-weight expansion word adds no clause.
    assert store.search_text("   ", 3) == [] and store.text_query("...", 3, expansion_terms={"y": 0.0}) is not None
    assert store.text_query(" ", 3, expansion_terms={"y": 0.0, " ": 1.0}) is None
    assert recorder.requests == []
    with pytest.raises(ValueError, match="weight"):
        store.search_text("x", 3, expansion_terms={"y": 1.5})


def test_opensearch_sparse_query_body(recorder, sleeps):
    store = os_store(recorder, sleeps)
    recorder.reply(200, search_response(payload(3), scores=[2.5]))
    query = SparseVector(indices=[2023, 7, 99], values=[1.5, 0.25, 0.0])
    hits = store.search_sparse(query, 10, parse_filters(FILTER_SPEC))
    assert recorder.requests[0].json() == {
        "size": 10,
        "track_total_hits": False,
        "_source": ["payload"],
        "query": {
            "bool": {
                "should": [
                    {"rank_feature": {"field": "splade_features.2023", "linear": {}, "boost": 1.5}},
                    {"rank_feature": {"field": "splade_features.7", "linear": {}, "boost": 0.25}},
                ],
                "minimum_should_match": 1,
                "filter": EXPECTED_FILTERS,
            }
        },
    }
    assert [(h.chunk_id, h.score) for h in hits] == [("d3#0", 2.5)]
    assert store.search_sparse(SparseVector(indices=[], values=[]), 3) == []
    assert len(recorder.requests) == 1


def test_opensearch_sparse_query_keeps_the_top_terms_below_the_clause_limit():
    fake = FakeOpenSearch()
    store = OpenSearchStore.create(fake.client(), "chunks", field_types={"year": "integer"}, version="v1", retry=FAST)
    terms = 3000
    rng = np.random.default_rng(0)
    weights = rng.random(terms) + 0.01
    query = SparseVector(indices=list(range(terms)), values=weights.tolist())
    store.search_sparse(query, 10, parse_filters({"tenant_id": "acme", "year": {"gte": 2019}}))
    body = fake.requests[-1].body
    clauses = body["query"]["bool"]["should"]
    filters = body["query"]["bool"]["filter"]
    assert len(clauses) + len(filters) < 1024  # indices.query.bool.max_clause_count's default
    assert len(clauses) == OpenSearchStore.max_query_terms
    kept = {int(c["rank_feature"]["field"].split(".")[1]) for c in clauses}
    assert kept == set(np.argsort(-weights)[: OpenSearchStore.max_query_terms].tolist())  # the heaviest


def test_opensearch_fetch_documents_collapses_on_doc_id(recorder, sleeps):
    store = os_store(recorder, sleeps)
    recorder.reply(200, search_response(payload(2), payload(1), scores=[None, None]))
    hits = store.fetch_documents(["d1", "d9", "d2", "d1"], parse_filters({"tenant_id": "acme"}))
    assert recorder.requests[0].json() == {
        "size": 3,
        "track_total_hits": False,
        "_source": ["payload"],
        "query": {"bool": {"filter": [{"terms": {"doc_id": ["d1", "d9", "d2"]}}, {"terms": {"tenant_id": ["acme"]}}]}},
        "collapse": {"field": "doc_id"},
        "sort": [{"chunk_ordinal": {"order": "asc", "missing": "_last"}}, {"chunk_id": "asc"}],
    }
    assert [(h.chunk_id, h.score) for h in hits] == [("d1#0", 0.0), ("d2#0", 0.0)]
    assert store.fetch_documents([]) == []


def test_opensearch_count_and_chunk_ids_page_with_search_after(recorder, sleeps, monkeypatch):
    store = os_store(recorder, sleeps)
    monkeypatch.setattr("retrieval_assets.core.stores.opensearch.store._PAGE_SIZE", 2)
    recorder.reply(200, {"count": 3, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0}})
    recorder.reply(200, {"hits": {"hits": [{"_id": "a", "sort": ["a"]}, {"_id": "b", "sort": ["b"]}]}})
    recorder.reply(200, {"hits": {"hits": [{"_id": "c", "sort": ["c"]}]}})
    assert store.count() == 3
    assert store.chunk_ids() == {"a", "b", "c"}
    assert [(r.method, r.url) for r in recorder.requests] == [
        ("POST", "/chunks-v1/_count"), ("POST", "/chunks-v1/_search"), ("POST", "/chunks-v1/_search"),
    ]
    page = {"size": 2, "_source": False, "track_total_hits": False, "sort": [{"chunk_id": "asc"}]}
    assert recorder.requests[1].json() == page
    assert recorder.requests[2].json() == {**page, "search_after": ["b"]}


def test_opensearch_counts_a_tenant_scope_with_a_filtered_count(recorder, sleeps):
    store = os_store(recorder, sleeps)
    recorder.reply(200, {"count": 2, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0}})
    assert store.count_tenants({"beta", "acme"}) == 2
    (request,) = recorder.requests
    assert (request.method, request.url) == ("POST", "/chunks-v1/_count")
    assert request.json() == {"query": {"bool": {"filter": [{"terms": {"tenant_id": ["acme", "beta"]}}]}}}


def test_opensearch_lexical_write_keeps_splade_features(recorder, sleeps):
    store = os_store(recorder, sleeps)
    store.add([payload(0)])
    action, body = recorder.requests[0].ndjson()
    assert action == {"update": {"_id": "d0#0", "retry_on_conflict": 3}}
    source = body["upsert"]
    assert "splade_features" not in source and source["payload"] == payload(0)
    assert body["script"] == {
        "source": KEEP_FEATURES_SCRIPT,
        "lang": "painless",
        "params": {"doc": source, "field": "splade_features"},
    }


def test_opensearch_lexical_only_index(recorder, sleeps):
    store = os_store(recorder, sleeps, sparse=False)
    store.add([payload(0)])
    action, source = recorder.requests[0].ndjson()
    assert action == {"index": {"_id": "d0#0"}} and "splade_features" not in source
    with pytest.raises(ValueError, match="sparse=False"):
        store.upsert_sparse([payload(0)], [SparseVector(indices=[1], values=[1.0])])

"""Server-adapter defects found by checking the adapters against the servers' specifications
(issue 15): the Qdrant version floor, the SPLADE clause cap for OpenSearch, repeated sparse
indices, sparse search on a lexical-only index, and retried alias updates. Each runs through the
real clients over the recording fakes in ``fake_servers``."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval_assets.core.models import SparseVector
from retrieval_assets.core.stores.filters import parse_filters
from retrieval_assets.core.stores.opensearch_store import OpenSearchStore
from retrieval_assets.core.stores.qdrant_server_store import QdrantServerStore
from retrieval_assets.core.stores.remote import RetryPolicy, strongest_terms
from retrieval_assets_tests.core.stores.fake_servers import FakeOpenSearch, FakeQdrant

FAST = RetryPolicy(max_retries=2, initial_backoff_s=0.0, sleep=lambda s: None)


def chunk(i: int) -> dict:
    return {"chunk_id": f"d{i}#0", "doc_id": f"d{i}", "tenant_id": "acme", "section": "body",
            "title": f"T{i}", "text": f"text {i}", "year": 2020}


# -- Fix 4: Qdrant version floor ----------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.15.2", "1.9.0", "0.11.1"])
def test_qdrant_below_the_floor_is_refused_at_open_and_create(version):
    fake = FakeQdrant(version="1.19.0")
    client = fake.client()
    QdrantServerStore.create(client, "chunks", 2, version="v1", retry=FAST)
    old = FakeQdrant(version=version, collections=fake.collections, aliases=fake.aliases)
    with pytest.raises(RuntimeError, match=rf"Qdrant server runs {version}.*1\.16"):
        QdrantServerStore.open(old.client(), "chunks-v1", retry=FAST)
    with pytest.raises(RuntimeError, match=rf"Qdrant server runs {version}.*1\.16"):
        QdrantServerStore.create(FakeQdrant(version=version).client(), "chunks", 2, version="v2", retry=FAST)


@pytest.mark.parametrize("version", ["1.16.0", "1.19.0", "1.20.3-rc1", "2.0.0"])
def test_qdrant_at_or_above_the_floor_is_accepted(version):
    fake = FakeQdrant(version=version)
    QdrantServerStore.create(fake.client(), "chunks", 2, version="v1", retry=FAST)
    assert QdrantServerStore.open(fake.client(), "chunks-v1", retry=FAST).collection == "chunks-v1"


# -- Fix 5: SPLADE clause cap for OpenSearch ----------------------------------------------------


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


def test_strongest_terms_keeps_the_heaviest_and_reports_the_cut():
    query = SparseVector(indices=[5, 1, 9, 1, 3], values=[0.2, 0.3, 0.9, 0.4, 0.1])
    kept, cut = strongest_terms(query, 2)
    # Index 1 repeats (0.3 + 0.4 = 0.7): merged first, then the two heaviest (9: 0.9, 1: 0.7) kept.
    assert (kept.indices, kept.values) == ([9, 1], [0.9, pytest.approx(0.7)])
    assert cut == {"terms": 4, "terms_sent": 2, "terms_dropped": 2, "weight_dropped": pytest.approx(0.3)}
    assert strongest_terms(query, None)[1] == {} and strongest_terms(query, 4)[1] == {}


# -- Fix 6: repeated sparse indices -------------------------------------------------------------


def test_repeated_sparse_indices_are_merged_before_qdrant():
    fake = FakeQdrant()
    store = QdrantServerStore.create(fake.client(), "chunks", 2, version="v1", retry=FAST)
    repeated = SparseVector(indices=[7, 3, 7], values=[0.5, 1.0, 0.25])
    store.upsert([chunk(0)], dense=np.array([[1.0, 0.0]]), sparse=[repeated])
    (point,) = next(r for r in fake.requests if r.path.endswith("/points") and r.method == "PUT").body["points"]
    assert point["vector"]["splade"] == {"indices": [7, 3], "values": [0.75, 1.0]}
    store.search_sparse(repeated, 3)
    store.search_hybrid(np.array([1.0, 0.0]), repeated, 3)
    sparse_query, hybrid = (r.body["searches"][0] for r in fake.requests[-2:])
    merged = {"indices": [7, 3], "values": [0.75, 1.0]}
    assert sparse_query["query"] in (merged, {"nearest": merged})  # the client may wrap it
    assert hybrid["prefetch"][1]["query"] in (merged, {"nearest": merged})


def test_one_shared_merge_for_both_adapters():
    from retrieval_assets.core.stores import opensearch_store, qdrant_server_store
    from retrieval_assets.core.stores.remote import merge_sparse

    assert opensearch_store.merge_sparse is qdrant_server_store.merge_sparse is merge_sparse
    merged = merge_sparse(SparseVector(indices=[5, 1, 5, 5], values=[1.0, 2.0, 0.5, 0.0]))
    assert merged == SparseVector(indices=[5, 1], values=[1.5, 2.0])


# -- Fix 7: sparse search on a lexical-only index -----------------------------------------------


def test_sparse_search_on_a_lexical_only_opensearch_index_is_an_error():
    fake = FakeOpenSearch()
    store = OpenSearchStore.create(fake.client(), "chunks", version="v1", sparse=False, retry=FAST)
    store.add([chunk(0)])
    before = len(fake.requests)
    with pytest.raises(ValueError, match="without SPLADE features"):
        store.search_sparse(SparseVector(indices=[1], values=[1.0]), 3)
    assert len(fake.requests) == before


# -- Fix 8: alias updates under the retry policy ------------------------------------------------


def test_alias_updates_are_retried_by_each_store():
    qdrant = FakeQdrant()
    collection = QdrantServerStore.create(qdrant.client(), "chunks", 2, version="v1", retry=FAST)
    qdrant.fail("POST", "/collections/aliases", status=503)
    assert collection.promote() is None and qdrant.aliases == {"chunks": "chunks-v1"}
    opensearch = FakeOpenSearch()
    index = OpenSearchStore.create(opensearch.client(), "chunks", version="v1", retry=FAST)
    opensearch.fail("POST", "/_aliases", status=503)
    assert index.promote() == [] and opensearch.aliases == {"chunks": {"chunks-v1"}}

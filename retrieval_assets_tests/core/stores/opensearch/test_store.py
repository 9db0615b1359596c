"""The OpenSearch store over a recording connection: bulk retries and failures, finalize, promotion,
opening by alias, snapshots; and over the fake server: lexical-only indexes, retried alias updates.
"""

from __future__ import annotations

import logging

import pytest

from retrieval_assets.core.models import SparseVector
from retrieval_assets.core.stores.opensearch.store import (
    BulkIndexError,
    OpenSearchStore,
)
from retrieval_assets_tests.core.stores.fake_servers import FakeOpenSearch
from retrieval_assets_tests.core.stores.opensearch.recording import (
    bulk_response,
    os_client,
    os_store,
)
from retrieval_assets_tests.core.stores.server_inputs import (
    FAST,
    SECRET,
    chunk,
    payload,
)


def test_opensearch_rejects_bad_names_and_settings(recorder):
    with pytest.raises(ValueError, match="lowercase"):
        OpenSearchStore.create(os_client(recorder), "Chunks")
    with pytest.raises(ValueError, match="title_boost"):
        OpenSearchStore.create(os_client(recorder), "chunks", title_boost=-1)
    with pytest.raises(ValueError, match="identifier"):
        OpenSearchStore.create(os_client(recorder), "chunks", field_types={"tenant_id": "integer"})
    assert recorder.requests == []


def test_opensearch_bulk_retries_429_then_200_with_backoff(recorder, sleeps, caplog):
    store = os_store(recorder, sleeps)
    recorder.reply(429, {"error": {"type": "rejected_execution_exception", "reason": "bulk queue full"}, "status": 429})
    unavailable = {"type": "unavailable_shards_exception", "reason": "primary not active"}
    recorder.reply(503, {"error": unavailable, "status": 503})
    recorder.reply(200, bulk_response(("index", "d0#0", 201, None)))
    with caplog.at_level(logging.WARNING):
        store.upsert_sparse([payload(0)], [SparseVector(indices=[1], values=[1.0])])
    assert len(recorder.requests) == 3
    assert recorder.requests[0].body == recorder.requests[1].body == recorder.requests[2].body
    assert sleeps == [0.5, 1.0]
    assert "retry 1 of 3" in caplog.text and SECRET not in caplog.text


def test_opensearch_bulk_resends_only_documents_rejected_with_429(recorder, sleeps):
    store = os_store(recorder, sleeps)
    rejected = {"type": "es_rejected_execution_exception", "reason": "rejected execution"}
    recorder.reply(200, bulk_response(("index", "d0#0", 201, None), ("index", "d1#0", 429, rejected)))
    recorder.reply(200, bulk_response(("index", "d1#0", 200, None)))
    store.upsert_sparse([payload(0), payload(1)], [SparseVector(indices=[1], values=[1.0])] * 2)
    first, second = (r.ndjson() for r in recorder.requests)
    assert [line["index"]["_id"] for line in first[::2]] == ["d0#0", "d1#0"]
    assert second == first[2:]
    assert sleeps == [0.5]


def test_opensearch_partial_bulk_failure_is_raised_per_document(recorder, sleeps):
    store = os_store(recorder, sleeps)
    bad = {"type": "mapper_parsing_exception", "reason": "failed to parse field [m_stars] of type [double]"}
    recorder.reply(200, bulk_response(("index", "d0#0", 201, None), ("index", "d1#0", 400, bad),
                                      ("index", "d2#0", 400, bad)))
    with pytest.raises(BulkIndexError) as error:
        store.upsert_sparse([payload(i) for i in range(3)], [SparseVector(indices=[1], values=[1.0])] * 3)
    assert error.value.failures == [
        ("d1#0", 400, "mapper_parsing_exception: failed to parse field [m_stars] of type [double]"),
        ("d2#0", 400, "mapper_parsing_exception: failed to parse field [m_stars] of type [double]"),
    ]
    assert "2 document(s) failed to index into chunks-v1: d1#0: 400" in str(error.value)
    assert len(recorder.requests) == 1 and sleeps == []  # a mapping error is not retried


def test_opensearch_gives_up_after_max_retries(recorder, sleeps):
    store = os_store(recorder, sleeps)
    for _ in range(4):
        recorder.reply(502, {"error": "bad gateway", "status": 502})
    with pytest.raises(Exception, match="502"):
        store.count()
    assert len(recorder.requests) == 4 and sleeps == [0.5, 1.0, 2.0]


def test_opensearch_finalize_restores_refresh_and_replicas(recorder, sleeps):
    store = os_store(recorder, sleeps, replicas=2, refresh_interval="5s")
    store.finalize()
    store.finalize()
    assert [(r.method, r.url, r.json()) for r in recorder.requests] == [
        ("PUT", "/chunks-v1/_settings", {"index": {"refresh_interval": "5s", "number_of_replicas": 2}}),
        ("POST", "/chunks-v1/_refresh", None),
        ("POST", "/chunks-v1/_refresh", None),
    ]


def test_opensearch_promotion_is_one_atomic_aliases_call(recorder, sleeps):
    store = os_store(recorder, sleeps)
    recorder.reply(200, {"chunks-v0": {"aliases": {"chunks": {}}}})
    assert store.promote() == ["chunks-v0"]
    assert [(r.method, r.url) for r in recorder.requests] == [("GET", "/_alias/chunks"), ("POST", "/_aliases")]
    assert recorder.requests[1].json() == {
        "actions": [
            {"remove": {"index": "chunks-v0", "alias": "chunks"}},
            {"add": {"index": "chunks-v1", "alias": "chunks"}},
        ]
    }
    recorder.requests.clear()
    recorder.reply(404, {"error": "alias [chunks] missing", "status": 404})
    assert store.promote() == []
    assert recorder.requests[1].json() == {"actions": [{"add": {"index": "chunks-v1", "alias": "chunks"}}]}


def test_opensearch_open_resolves_the_alias_and_checks_the_mapping_version(recorder, sleeps):
    client = os_client(recorder)
    meta = {"backend": "opensearch", "mapping_version": 1, "alias": "chunks", "sparse": True,
            "field_types": {"year": "integer"},
            "schema_names": {"year": "m_year"}, "title_boost": 0.5}
    recorder.reply(200, {"chunks-v1": {"aliases": {"chunks": {}}}})
    recorder.reply(200, {"chunks-v1": {"mappings": {"_meta": meta, "properties": {}}}})
    store = OpenSearchStore.open(client, "chunks")
    assert (store.index, store.alias, store.title_boost) == ("chunks-v1", "chunks", 0.5)
    assert store.field_types == {"year": "integer"}
    assert [r.url for r in recorder.requests] == ["/_alias/chunks", "/chunks-v1/_mapping"]
    recorder.reply(404, {"error": "alias [chunks-v0] missing", "status": 404})
    recorder.reply(200, {"chunks-v0": {"mappings": {"_meta": {**meta, "mapping_version": 0}}}})
    with pytest.raises(ValueError, match="rebuild the index"):
        OpenSearchStore.open(client, "chunks-v0")
    recorder.reply(404, {"error": "alias missing", "status": 404})
    recorder.reply(404, {"error": {"type": "index_not_found_exception"}, "status": 404})
    with pytest.raises(LookupError, match="no OpenSearch index or alias named 'nothing'"):
        OpenSearchStore.open(client, "nothing")


def test_opensearch_snapshot_into_the_configured_repository(recorder, sleeps):
    with pytest.raises(ValueError, match="no snapshot repository"):
        os_store(recorder, sleeps).snapshot()
    store = os_store(recorder, sleeps, snapshot_repository="backups")
    recorder.reply(200, {"snapshot": {"snapshot": "nightly", "indices": ["chunks-v1"], "state": "SUCCESS"}})
    assert store.snapshot("nightly") == "nightly"
    (request,) = recorder.requests
    assert (request.method, request.url) == ("PUT", "/_snapshot/backups/nightly?wait_for_completion=true")
    assert request.json() == {
        "indices": "chunks-v1",
        "include_global_state": False,
        "metadata": {"alias": "chunks", "mapping_version": 1},
    }
    recorder.reply(200, {"snapshot": {"snapshot": "x", "state": "PARTIAL"}})
    with pytest.raises(RuntimeError, match="PARTIAL"):
        store.snapshot("x")


def test_sparse_search_on_a_lexical_only_opensearch_index_is_an_error():
    fake = FakeOpenSearch()
    store = OpenSearchStore.create(fake.client(), "chunks", version="v1", sparse=False, retry=FAST)
    store.add([chunk(0)])
    before = len(fake.requests)
    with pytest.raises(ValueError, match="without SPLADE features"):
        store.search_sparse(SparseVector(indices=[1], values=[1.0]), 3)
    assert len(fake.requests) == before


def test_alias_updates_are_retried_by_the_opensearch_store():
    opensearch = FakeOpenSearch()
    index = OpenSearchStore.create(opensearch.client(), "chunks", version="v1", retry=FAST)
    opensearch.fail("POST", "/_aliases", status=503)
    assert index.promote() == [] and opensearch.aliases == {"chunks": {"chunks-v1"}}

"""The exact requests the server adapters send, checked against the engines' REST formats.

OpenSearch: the real ``opensearch-py`` client over a recording connection class (it records
method, URL, body and headers, and answers with documented response shapes, including a 429
before a 200 and a partial bulk failure). Qdrant: the pure request builders' JSON, the real
``qdrant-client`` over a recording ``httpx`` transport, and the adapter on qdrant-client's
in-process local mode (``QdrantClient(":memory:")``: upsert, prefetch + fusion, filters; payload
indexes are accepted there but have no effect). No server is needed.
"""

from __future__ import annotations

import base64
import json
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx
import numpy as np
import pytest
from opensearchpy.connection import Urllib3HttpConnection
from qdrant_client import QdrantClient

from retrieval_assets.core.stores.filters import FilterError, parse_filters
from retrieval_assets.core.models import SparseVector
from retrieval_assets.core.stores.base import point_uuid
from retrieval_assets.core.stores.opensearch_store import (
    KEEP_FEATURES_SCRIPT,
    BulkIndexError,
    OpenSearchSettings,
    OpenSearchStore,
    RetryPolicy,
    connect,
)
from retrieval_assets.core.stores.qdrant_server_store import (
    QdrantServerSettings,
    QdrantServerStore,
    alias_operations,
    build_filter,
    collection_request,
    dense_request,
    hybrid_request,
    payload_index_schemas,
    sparse_request,
)
from retrieval_assets.core.stores.qdrant_server_store import connect as qdrant_connect

SECRET = "s3cret-Pa55"
FIELD_TYPES = {"license": "keyword", "tags": "keyword", "year": "integer", "stars": "float", "open_source": "bool"}
# Tenant + set + range + bool: what every query must carry in filter context.
FILTER_SPEC = {
    "tenant_id": "acme", "license": ["MIT", "GPL-3.0"], "year": {"gte": 2015.5, "lte": 2020}, "open_source": "true",
}


def payload(i: int, tenant: str = "acme", **extra: Any) -> dict[str, Any]:
    return {
        "doc_id": f"d{i}",
        "chunk_id": f"d{i}#0",
        "tenant_id": tenant,
        "section": "body",
        "title": f"Title {i}",
        "text": f"Text number {i}.",
        "license": "MIT",
        "tags": ["format:DICOM", "os:linux"],
        "year": 2018,
        "stars": 4.5,
        "open_source": True,
        **extra,
    }


# -- OpenSearch: a recording connection -----------------------------------------------------


@dataclass
class Recorded:
    method: str
    url: str
    body: str | None
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body or "null")

    def ndjson(self) -> list[Any]:
        assert self.body is not None and self.body.endswith("\n")
        return [json.loads(line) for line in self.body.splitlines()]


@dataclass
class Recorder:
    """Requests seen, and the responses to give: queued (status, body) pairs, else 200 ack."""

    requests: list[Recorded] = field(default_factory=list)
    responses: list[tuple[int, Any]] = field(default_factory=list)

    def reply(self, status: int, body: Any) -> None:
        self.responses.append((status, body))

    def connection_class(self) -> type[Urllib3HttpConnection]:
        recorder = self

        class RecordingConnection(Urllib3HttpConnection):
            def perform_request(self, method, url, params=None, body=None, timeout=None, ignore=(), headers=None):
                full_url = url + (f"?{urlencode(params)}" if params else "")
                text = body.decode("utf-8") if isinstance(body, bytes) else body
                recorder.requests.append(Recorded(method, full_url, text, {**self.headers, **(headers or {})}))
                status, data = recorder.responses.pop(0) if recorder.responses else (200, {"acknowledged": True})
                raw = json.dumps(data)
                if not (200 <= status < 300) and status not in ignore:
                    self._raise_error(status, raw, "application/json")
                return status, {"content-type": "application/json"}, raw

        return RecordingConnection


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def sleeps() -> list[float]:
    return []


def os_client(recorder: Recorder, **settings: Any):
    config = OpenSearchSettings(url="https://search.example:9200", username="admin", password=SECRET, **settings)
    return connect(config, connection_class=recorder.connection_class())


def os_store(recorder: Recorder, sleeps: list[float], **create: Any) -> OpenSearchStore:
    retry = RetryPolicy(max_retries=3, initial_backoff_s=0.5, sleep=sleeps.append)
    create = {"field_types": FIELD_TYPES, "version": "v1", **create}
    store = OpenSearchStore.create(os_client(recorder), "chunks", retry=retry, **create)
    recorder.requests.clear()
    return store


def search_response(*payloads: dict[str, Any], scores: list[float | None] | None = None) -> dict[str, Any]:
    hits = [
        {"_index": "chunks-v1", "_id": p["chunk_id"], "_score": s, "_source": {"payload": p}}
        for p, s in zip(payloads, scores or [1.0] * len(payloads), strict=True)
    ]
    return {"took": 1, "timed_out": False, "hits": {"max_score": None, "hits": hits}}


def bulk_response(*items: tuple[str, str, int, dict | None]) -> dict[str, Any]:
    """(op, chunk_id, status, error) per document, as the _bulk API answers."""
    entries = []
    for op, chunk_id, status, error in items:
        result: dict[str, Any] = {"_index": "chunks-v1", "_id": chunk_id, "status": status}
        if error:
            result["error"] = error
        entries.append({op: result})
    return {"took": 3, "errors": any(status >= 300 for _, _, status, _ in items), "items": entries}


# -- OpenSearch: index creation -------------------------------------------------------------


def test_opensearch_index_is_created_from_the_versioned_mapping(recorder):
    OpenSearchStore.create(os_client(recorder), "chunks", field_types=FIELD_TYPES, version="v1", shards=2)
    (request,) = recorder.requests
    assert (request.method, request.url) == ("PUT", "/chunks-v1")
    text = {"type": "text", "analyzer": "english", "similarity": "bm25_lucene"}
    assert request.json() == {
        "settings": {
            "index": {
                "number_of_shards": 2,
                "number_of_replicas": 0,
                "refresh_interval": "-1",
                "similarity": {"bm25_lucene": {"type": "BM25", "k1": 1.2, "b": 0.75}},
            }
        },
        "mappings": {
            "dynamic": "false",
            "_meta": {
                "backend": "opensearch",
                "mapping_version": 1,
                "alias": "chunks",
                "sparse": True,
                "field_types": FIELD_TYPES,
                "schema_names": {
                    "license": "m_license",
                    "open_source": "m_open_source",
                    "stars": "m_stars",
                    "tags": "m_tags",
                    "year": "m_year",
                },
                "title_boost": 0.0,
            },
            "properties": {
                "content": text,
                "title": text,
                "chunk_id": {"type": "keyword"},
                "doc_id": {"type": "keyword"},
                "tenant_id": {"type": "keyword"},
                "section": {"type": "keyword"},
                "chunk_ordinal": {"type": "integer"},
                "splade_features": {"type": "rank_features"},
                "payload": {"type": "object", "enabled": False},
                "m_license": {"type": "keyword"},
                "m_tags": {"type": "keyword"},
                "m_year": {"type": "long"},
                "m_stars": {"type": "double"},
                "m_open_source": {"type": "boolean"},
            },
        },
    }
    assert request.headers["authorization"] == "Basic " + base64.b64encode(f"admin:{SECRET}".encode()).decode()


def test_opensearch_rejects_bad_names_and_settings(recorder):
    with pytest.raises(ValueError, match="lowercase"):
        OpenSearchStore.create(os_client(recorder), "Chunks")
    with pytest.raises(ValueError, match="title_boost"):
        OpenSearchStore.create(os_client(recorder), "chunks", title_boost=-1)
    with pytest.raises(ValueError, match="identifier"):
        OpenSearchStore.create(os_client(recorder), "chunks", field_types={"tenant_id": "integer"})
    assert recorder.requests == []


# -- OpenSearch: bulk indexing --------------------------------------------------------------


def test_opensearch_bulk_ndjson_lines_in_batches(recorder, sleeps):
    store = os_store(recorder, sleeps)
    store.batch_size = 2
    payloads = [payload(0), payload(1, tenant="globex", tags=["a"], year="n/a"), dict(payload(2), chunk_id="d2#7")]
    sparse = [SparseVector(indices=[7, 2023, 7], values=[0.5, 1.25, 0.25]), SparseVector(indices=[1], values=[0.0]),
              SparseVector(indices=[], values=[])]
    store.upsert_sparse(payloads, sparse)
    assert [(r.method, r.url) for r in recorder.requests] == [("POST", "/chunks-v1/_bulk")] * 2
    lines = recorder.requests[0].ndjson() + recorder.requests[1].ndjson()
    assert lines[0] == {"index": {"_id": "d0#0"}}
    assert lines[1] == {
        "chunk_id": "d0#0",
        "doc_id": "d0",
        "tenant_id": "acme",
        "section": "body",
        "content": "Title 0\nText number 0.",
        "title": "Title 0",
        "payload": payloads[0],
        "chunk_ordinal": 0,
        "m_license": "MIT",
        "m_tags": ["format:DICOM", "os:linux"],
        "m_year": 2018,
        "m_stars": 4.5,
        "m_open_source": True,
        "splade_features": {"7": 0.75, "2023": 1.25},
    }
    # A value that is not the field's type stays in the payload only; zero weights are dropped.
    assert "m_year" not in lines[3] and lines[3]["m_tags"] == "a" and lines[3]["splade_features"] == {}
    assert lines[4] == {"index": {"_id": "d2#7"}}
    assert lines[5]["chunk_ordinal"] == 7 and lines[5]["splade_features"] == {}
    with pytest.raises(ValueError, match="rank_features"):
        store.upsert_sparse([payload(3)], [SparseVector(indices=[1], values=[-0.5])])


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


# -- OpenSearch: queries --------------------------------------------------------------------

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


def test_opensearch_filters_that_cannot_be_expressed(recorder, sleeps):
    store = os_store(recorder, sleeps)
    with pytest.raises(FilterError, match="declare it in field_types"):
        store.search_text("x", 3, parse_filters({"color": "red"}))
    with pytest.raises(FilterError, match="range filter"):
        store.search_sparse(SparseVector(indices=[1], values=[1.0]), 3, parse_filters({"license": {"gte": 1}}))
    with pytest.raises(FilterError, match="expects integer"):
        store.search_text("x", 3, parse_filters({"year": "recent"}))
    assert recorder.requests == []


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
    monkeypatch.setattr("retrieval_assets.core.stores.opensearch_store._PAGE_SIZE", 2)
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


# -- OpenSearch: lifecycle ------------------------------------------------------------------


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


def test_opensearch_secrets_are_masked_and_api_keys_sent_as_is(recorder):
    settings = OpenSearchSettings(url="https://search.example:9200", username="admin", password=SECRET)
    assert SECRET not in repr(settings) and SECRET not in str(settings)
    client = connect(settings, connection_class=recorder.connection_class())
    store = OpenSearchStore.create(client, "chunks", version="v0")
    assert SECRET not in repr(client) and SECRET not in repr(store)
    recorder.requests.clear()
    keyed = OpenSearchSettings(url="https://search.example:9200", api_key="os_token123")
    OpenSearchStore.create(connect(keyed, connection_class=recorder.connection_class()), "chunks", version="v1")
    assert recorder.requests[0].headers["authorization"] == "ApiKey os_token123"
    assert "os_token123" not in repr(keyed)
    with pytest.raises(ValueError, match="not in the url") as error:
        OpenSearchSettings(url=f"https://admin:{SECRET}@search.example:9200")
    assert SECRET not in str(error.value)
    with pytest.raises(ValueError, match="both"):
        OpenSearchSettings(url="https://search.example:9200", username="admin")
    with pytest.raises(ValueError, match="not both"):
        OpenSearchSettings(url="https://search.example:9200", username="a", password="b", api_key="c")


# -- Qdrant: request builders against the REST API's JSON -----------------------------------


def as_json(model: Any) -> Any:
    if isinstance(model, list):
        return [as_json(item) for item in model]
    return model.model_dump(mode="json", exclude_unset=True, exclude_none=True)


def test_qdrant_collection_request_json():
    request = collection_request(
        384, hnsw_m=32, hnsw_ef_construct=200, quantization="int8", shards=2, metadata={"alias": "chunks"}
    )
    assert as_json(request) == {
        "vectors": {"dense": {"size": 384, "distance": "Cosine"}},
        "sparse_vectors": {"splade": {}},
        "hnsw_config": {"m": 0, "ef_construct": 200},
        "quantization_config": {"scalar": {"type": "int8", "quantile": 0.99, "always_ram": True}},
        "shard_number": 2,
        "replication_factor": 1,
        "metadata": {"alias": "chunks"},
    }
    direct = collection_request(None, distance="dot", defer_indexing=False)
    assert as_json(direct) == {
        "vectors": {},
        "sparse_vectors": {"splade": {}},
        "hnsw_config": {"m": 16, "ef_construct": 100},
        "shard_number": 1,
        "replication_factor": 1,
    }


def test_qdrant_payload_index_schemas_json():
    schemas = payload_index_schemas({"license": "keyword", "year": "integer", "stars": "float", "ok": "bool",
                                     "relations.requires": "keyword"})
    assert {key: as_json(value) if hasattr(value, "model_dump") else value.value for key, value in schemas.items()} == {
        "tenant_id": {"type": "keyword", "is_tenant": True},
        "doc_id": "keyword",
        "section": "keyword",
        "license": "keyword",
        "year": {"type": "integer", "lookup": True, "range": True},
        "stars": "float",
        "ok": "bool",
        '"relations.requires"': "keyword",
    }


def test_qdrant_filter_json_tenant_set_range_and_mixed_values():
    spec = {**FILTER_SPEC, "stars": [4.5, "5"], "relations.requires": "samtools", "extra": ["x", 3]}
    flt = build_filter(parse_filters(spec), FIELD_TYPES | {"relations.requires": "keyword"})
    assert as_json(flt) == {
        "must": [
            {"key": "tenant_id", "match": {"any": ["acme"]}},
            {"key": "license", "match": {"any": ["MIT", "GPL-3.0"]}},
            {"key": "year", "range": {"gte": 2015.5, "lte": 2020.0}},
            {"key": "open_source", "match": {"value": True}},
            {"should": [{"key": "stars", "range": {"gte": 4.5, "lte": 4.5}},
                        {"key": "stars", "range": {"gte": 5.0, "lte": 5.0}}]},
            {"key": '"relations.requires"', "match": {"any": ["samtools"]}},
            # Undeclared: values as given, strings and integers matched separately.
            {"should": [{"key": "extra", "match": {"any": ["x"]}}, {"key": "extra", "match": {"any": [3]}}]},
        ]
    }
    assert build_filter([], FIELD_TYPES) is None
    with pytest.raises(FilterError, match="range filter"):
        build_filter(parse_filters({"license": {"gte": 1}}), FIELD_TYPES)
    with pytest.raises(FilterError, match="double quote"):
        build_filter(parse_filters({'say "hi"': "x"}), {})


def test_qdrant_query_requests_json():
    flt = build_filter(parse_filters({"tenant_id": "acme"}), {})
    tenant = {"must": [{"key": "tenant_id", "match": {"any": ["acme"]}}]}
    assert as_json(dense_request([0.5, -0.5], 5, flt)) == {
        "query": [0.5, -0.5], "using": "dense", "filter": tenant, "limit": 5, "with_payload": True,
    }
    sparse = SparseVector(indices=[7, 2023], values=[0.5, 1.5])
    assert as_json(sparse_request(sparse, 3, None)) == {
        "query": {"indices": [7, 2023], "values": [0.5, 1.5]}, "using": "splade", "limit": 3, "with_payload": True,
    }
    from qdrant_client import models

    rescore = models.QuantizationSearchParams(rescore=True, oversampling=2.0)
    params = models.SearchParams(hnsw_ef=128, quantization=rescore)
    hybrid = hybrid_request([0.5, -0.5], sparse, 10, flt, params=params, prefetch_limit=50, rrf_k=20)
    assert as_json(hybrid) == {
        "prefetch": [
            {"query": [0.5, -0.5], "using": "dense", "filter": tenant, "limit": 50,
             "params": {"hnsw_ef": 128, "quantization": {"rescore": True, "oversampling": 2.0}}},
            {"query": {"indices": [7, 2023], "values": [0.5, 1.5]}, "using": "splade", "filter": tenant, "limit": 50},
        ],
        "query": {"rrf": {"k": 20}},
        "limit": 10,
        "with_payload": True,
    }
    dbsf = hybrid_request([1.0], SparseVector(indices=[], values=[]), 200, None, fusion="dbsf")
    assert as_json(dbsf) == {
        "prefetch": [{"query": [1.0], "using": "dense", "limit": 200}],
        "query": {"fusion": "dbsf"},
        "limit": 200,
        "with_payload": True,
    }
    with pytest.raises(ValueError, match="fusion"):
        hybrid_request([1.0], sparse, 1, None, fusion="sum")  # type: ignore[arg-type]


def test_qdrant_alias_switch_json():
    assert as_json(alias_operations("chunks", "chunks-v2")) == [
        {"delete_alias": {"alias_name": "chunks"}},
        {"create_alias": {"collection_name": "chunks-v2", "alias_name": "chunks"}},
    ]


# -- Qdrant: the real client over a recording httpx transport -------------------------------


@dataclass
class HttpRecorder:
    requests: list[tuple[str, str, Any, httpx.Headers]] = field(default_factory=list)
    failures: list[int] = field(default_factory=list)  # statuses to answer before succeeding
    routes: dict[tuple[str, str], Callable[[], Any]] = field(default_factory=dict)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        path = request.url.path + (f"?{request.url.query.decode()}" if request.url.query else "")
        self.requests.append((request.method, path, body, request.headers))
        if self.failures:
            status = self.failures.pop(0)
            return httpx.Response(status, json={"status": {"error": "Service Unavailable"}, "time": 0.0})
        if (request.method, request.url.path) == ("GET", "/"):  # the version check (floor 1.16)
            return httpx.Response(200, json={"title": "qdrant - vector search engine", "version": "1.19.0"})
        result = self.routes.get((request.method, request.url.path), lambda: True)()
        return httpx.Response(200, json={"result": result, "status": "ok", "time": 0.001})


def upsert_result() -> dict[str, Any]:
    return {"operation_id": 1, "status": "acknowledged"}


@pytest.fixture
def qdrant_http():
    recorder = HttpRecorder()
    settings = QdrantServerSettings(url="https://qdrant.example:6333", api_key=SECRET)
    client = qdrant_connect(settings, check_compatibility=False, transport=httpx.MockTransport(recorder))
    yield recorder, client
    client.close()


def test_qdrant_create_sends_collection_then_payload_indexes(qdrant_http):
    recorder, client = qdrant_http
    recorder.routes[("PUT", "/collections/chunks-v1/index")] = upsert_result
    QdrantServerStore.create(client, "chunks", 4, version="v1", field_types={"year": "integer"}, quantization="int8")
    calls = [(method, path) for method, path, _, _ in recorder.requests]
    assert calls == [("GET", "/"), ("PUT", "/collections/chunks-v1")] + [
        ("PUT", "/collections/chunks-v1/index?wait=true")
    ] * 4
    create_body = recorder.requests[1][2]
    assert create_body["vectors"] == {"dense": {"size": 4, "distance": "Cosine"}}
    assert create_body["sparse_vectors"] == {"splade": {}}
    assert create_body["hnsw_config"] == {"m": 0, "ef_construct": 100}
    assert create_body["quantization_config"] == {"scalar": {"type": "int8", "quantile": 0.99, "always_ram": True}}
    assert create_body["metadata"]["field_types"] == {"year": "integer"}
    assert [body for _, _, body, _ in recorder.requests[2:]] == [
        {"field_name": "tenant_id", "field_schema": {"type": "keyword", "is_tenant": True}},
        {"field_name": "doc_id", "field_schema": "keyword"},
        {"field_name": "section", "field_schema": "keyword"},
        {"field_name": "year", "field_schema": {"type": "integer", "lookup": True, "range": True}},
    ]
    assert all(headers["api-key"] == SECRET for *_, headers in recorder.requests)


def test_qdrant_upsert_batches_wait_on_the_last_and_retry_503(qdrant_http):
    recorder, client = qdrant_http
    store = QdrantServerStore(client, "chunks-v1", {"alias": "chunks", "dim": 2, "hnsw_m": 16, "hnsw_ef": None,
                                                    "quantization": None, "field_types": {}},
                              retry=RetryPolicy(max_retries=2, initial_backoff_s=0.25, sleep=(sleeps := []).append))
    store.batch_size = 2
    recorder.routes[("PUT", "/collections/chunks-v1/points")] = upsert_result
    recorder.failures = [503]
    payloads = [payload(i) for i in range(3)]
    dense = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], dtype=np.float32)
    sparse = [SparseVector(indices=[i], values=[1.0]) for i in range(3)]
    store.upsert(payloads, dense=dense, sparse=sparse)
    calls = [(method, path) for method, path, _, _ in recorder.requests]
    assert calls == [
        ("PUT", "/collections/chunks-v1/points?wait=false"),
        ("PUT", "/collections/chunks-v1/points?wait=false"),
        ("PUT", "/collections/chunks-v1/points?wait=true"),
    ]
    assert sleeps == [0.25]
    assert recorder.requests[0][2] == recorder.requests[1][2]
    assert recorder.requests[2][2] == {
        "points": [
            {
                "id": point_uuid("d2#0"),
                "vector": {
                    "dense": [pytest.approx(0.6), pytest.approx(0.8)],
                    "splade": {"indices": [2], "values": [1.0]},
                },
                "payload": payloads[2],
            }
        ]
    }


def test_qdrant_queries_promotion_and_snapshot_on_the_wire(qdrant_http):
    recorder, client = qdrant_http
    store = QdrantServerStore(client, "chunks-v2", {"alias": "chunks", "dim": 2, "hnsw_m": 16, "hnsw_ef": 64,
                                                    "quantization": None, "field_types": {"year": "integer"}})
    point = {"id": point_uuid("d1#0"), "version": 3, "score": 0.75, "payload": payload(1)}
    recorder.routes[("POST", "/collections/chunks-v2/points/query/batch")] = lambda: [{"points": [point]}]
    alias = {"alias_name": "chunks", "collection_name": "chunks-v1"}
    recorder.routes[("GET", "/aliases")] = lambda: {"aliases": [alias]}
    recorder.routes[("POST", "/collections/chunks-v2/snapshots")] = lambda: {
        "name": "chunks-v2-2026.snapshot", "creation_time": "2026-11-22T10:00:00", "size": 1024}
    recorder.routes[("POST", "/collections/chunks-v2/points/count")] = lambda: {"count": 12}

    hits = store.search_hybrid(np.array([1.0, 0.0]), SparseVector(indices=[5], values=[2.0]), 3,
                               parse_filters({"tenant_id": "acme", "year": {"gte": 2019}}), prefetch_limit=20)
    assert [(h.chunk_id, h.score, h.payload) for h in hits] == [("d1#0", 0.75, payload(1))]
    assert store.promote() == "chunks-v1"
    assert store.snapshot() == "chunks-v2-2026.snapshot"
    assert store.count() == 12
    calls = [(method, path, body) for method, path, body, _ in recorder.requests]
    flt = {"must": [{"key": "tenant_id", "match": {"any": ["acme"]}}, {"key": "year", "range": {"gte": 2019.0}}]}
    assert calls == [
        ("POST", "/collections/chunks-v2/points/query/batch", {"searches": [{
            "prefetch": [
                {"query": [1.0, 0.0], "using": "dense", "filter": flt, "params": {"hnsw_ef": 64}, "limit": 20},
                {"query": {"indices": [5], "values": [2.0]}, "using": "splade", "filter": flt, "limit": 20},
            ],
            "query": {"rrf": {"k": 60}},
            "limit": 3,
            "with_payload": True,
        }]}),
        ("GET", "/aliases", None),
        ("POST", "/collections/aliases", {"actions": [
            {"delete_alias": {"alias_name": "chunks"}},
            {"create_alias": {"collection_name": "chunks-v2", "alias_name": "chunks"}},
        ]}),
        ("POST", "/collections/chunks-v2/snapshots?wait=true", None),
        ("POST", "/collections/chunks-v2/points/count", {"exact": True}),
    ]


def test_qdrant_finalize_enables_hnsw_and_waits_for_green(qdrant_http):
    recorder, client = qdrant_http
    local = QdrantClient(":memory:")
    local.create_collection("x", vectors_config={})
    info = local.get_collection("x").model_dump(mode="json")  # a real CollectionInfo document
    statuses = iter(["yellow", "grey", "green"])
    recorder.routes[("GET", "/collections/chunks-v1")] = lambda: {**info, "status": next(statuses)}
    sleeps: list[float] = []
    store = QdrantServerStore(client, "chunks-v1", {"alias": "chunks", "dim": 2, "hnsw_m": 24, "hnsw_ef": None,
                                                    "quantization": None, "field_types": {}},
                              retry=RetryPolicy(sleep=sleeps.append), building=True)
    store.finalize()
    assert [(method, path, body) for method, path, body, _ in recorder.requests] == [
        ("PATCH", "/collections/chunks-v1", {"hnsw_config": {"m": 24}}),
        ("GET", "/collections/chunks-v1", None),
        ("GET", "/collections/chunks-v1", None),
        ("PATCH", "/collections/chunks-v1", {"optimizers_config": {}}),
        ("GET", "/collections/chunks-v1", None),
    ]
    assert sleeps == [0.5, 0.5]
    recorder.routes[("GET", "/collections/chunks-v1")] = lambda: {**info, "status": "red"}
    with pytest.raises(RuntimeError, match="red"):
        store.finalize()


def test_qdrant_settings_mask_the_api_key():
    settings = QdrantServerSettings(url="https://qdrant.example:6333", api_key=SECRET)
    assert SECRET not in repr(settings)
    with pytest.raises(ValueError, match="not in the url") as error:
        QdrantServerSettings(url=f"https://key:{SECRET}@qdrant.example:6333")
    assert SECRET not in str(error.value)


# -- Qdrant: the adapter on qdrant-client's local mode (in-process, no server) --------------


@pytest.fixture
def local_store():
    client = QdrantClient(":memory:")
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((6, 8)).astype(np.float32)
    payloads = [payload(i, tenant="acme" if i % 2 else "globex", year=2010 + i) for i in range(6)]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Payload indexes have no effect")  # local mode accepts, ignores
        store = QdrantServerStore.create(client, "local", 8, version="v1", field_types=FIELD_TYPES)
    store.upsert_dense(payloads, vectors)
    # The second upsert carries only sparse vectors: the dense ones must be kept.
    store.upsert_sparse(payloads, [SparseVector(indices=[i, 50], values=[1.0, 0.1]) for i in range(6)])
    store.finalize()
    yield store, vectors
    client.close()


def test_qdrant_local_mode_hybrid_fusion_and_filters(local_store):
    store, vectors = local_store
    sparse = SparseVector(indices=[3], values=[1.0])
    rrf = store.search_hybrid(vectors[3], sparse, 3)
    assert rrf[0].chunk_id == "d3#0" and rrf[0].score == pytest.approx(2 / 60, rel=0.02)
    assert store.search_hybrid(vectors[3], sparse, 3, fusion="dbsf")[0].chunk_id == "d3#0"
    # d3 belongs to acme: with the globex filter inside both prefetches it never comes back, and
    # with one candidate per prefetch the globex document nearest to d3 still does.
    globex = parse_filters({"tenant_id": "globex", "year": {"gte": 2012}})
    cosine = vectors @ vectors[3] / np.linalg.norm(vectors, axis=1)
    nearest = max((2, 4), key=lambda i: cosine[i])
    filtered = store.search_hybrid(vectors[3], sparse, 1, globex, prefetch_limit=1)
    assert [h.chunk_id for h in filtered] == [f"d{nearest}#0"]
    assert [h.chunk_id for h in store.search_dense(vectors[3], 6, globex)] == [f"d{nearest}#0", f"d{6 - nearest}#0"]
    both = SparseVector(indices=[3, 50], values=[1.0, 1.0])
    assert {h.chunk_id for h in store.search_sparse(both, 6, globex)} == {"d2#0", "d4#0"}
    assert [h.chunk_id for h in store.search_sparse(both, 1, parse_filters({"open_source": True}))] == ["d3#0"]
    assert store.search_sparse(both, 6, parse_filters({"open_source": False})) == []


def test_qdrant_local_mode_promotion_and_open_by_alias(local_store):
    store, _ = local_store
    assert store.promote() is None
    reopened = QdrantServerStore.open(store._client, "local")
    assert (reopened.collection, reopened.field_types, reopened.count()) == ("local-v1", FIELD_TYPES, 6)
    second = QdrantServerStore.create(store._client, "local", 8, version="v2")
    assert second.promote() == "local-v1"
    assert QdrantServerStore.open(store._client, "local").collection == "local-v2"
    with pytest.raises(LookupError, match="no Qdrant collection"):
        QdrantServerStore.open(store._client, "missing")
    with pytest.raises(NotImplementedError, match="Snapshots are not supported"):
        store.snapshot()

"""The Qdrant server store: the real ``qdrant-client`` over a recording ``httpx`` transport, over the
fake server, and on qdrant-client's in-process local mode (``QdrantClient(":memory:")``: upsert,
prefetch + fusion, filters; payload indexes are accepted there but have no effect). No server is needed.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import pytest
from qdrant_client import QdrantClient

from retrieval_assets.core.models import SparseVector
from retrieval_assets.core.stores.base import (
    point_uuid,
)
from retrieval_assets.core.stores.filters import parse_filters
from retrieval_assets.core.stores.qdrant.connection import QdrantServerSettings
from retrieval_assets.core.stores.qdrant.connection import connect as qdrant_connect
from retrieval_assets.core.stores.qdrant.server import QdrantServerStore
from retrieval_assets.core.stores.remote import RetryPolicy
from retrieval_assets_tests.core.stores.fake_servers import FakeQdrant
from retrieval_assets_tests.core.stores.server_inputs import (
    FAST,
    FIELD_TYPES,
    SECRET,
    payload,
)


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


def test_alias_updates_are_retried_by_the_qdrant_store():
    qdrant = FakeQdrant()
    collection = QdrantServerStore.create(qdrant.client(), "chunks", 2, version="v1", retry=FAST)
    qdrant.fail("POST", "/collections/aliases", status=503)
    assert collection.promote() is None and qdrant.aliases == {"chunks": "chunks-v1"}


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

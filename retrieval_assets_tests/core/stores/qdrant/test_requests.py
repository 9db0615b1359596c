"""The Qdrant server's request builders against the REST API's JSON."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval_assets.core.models import SparseVector
from retrieval_assets.core.stores.filters import parse_filters
from retrieval_assets.core.stores.qdrant.filters import build_filter
from retrieval_assets.core.stores.qdrant.requests import (
    SERVER_CONDITIONS,
    alias_operations,
    collection_request,
    dense_request,
    hybrid_request,
    payload_index_schemas,
    sparse_request,
)
from retrieval_assets.core.stores.qdrant.server import QdrantServerStore
from retrieval_assets_tests.core.stores.fake_servers import FakeQdrant
from retrieval_assets_tests.core.stores.server_inputs import (
    FAST,
    as_json,
    chunk,
)


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


def test_qdrant_query_requests_json():
    flt = build_filter(parse_filters({"tenant_id": "acme"}), {}, SERVER_CONDITIONS)
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

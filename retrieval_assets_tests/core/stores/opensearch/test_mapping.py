"""The OpenSearch index layout: the mapping an index is created with and the documents written to it."""

from __future__ import annotations

import base64

import pytest

from retrieval_assets.core.models import SparseVector
from retrieval_assets.core.stores.opensearch.store import OpenSearchStore
from retrieval_assets_tests.core.stores.opensearch.recording import (
    os_client,
    os_store,
)
from retrieval_assets_tests.core.stores.server_inputs import (
    FIELD_TYPES,
    SECRET,
    payload,
)


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
                "stemmer": "english",
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


def test_an_unstemmed_opensearch_index_analyses_text_as_english_without_its_stemmer(recorder):
    OpenSearchStore.create(os_client(recorder), "chunks", field_types=FIELD_TYPES, version="v1", stemmer="none")
    body = recorder.requests[0].json()
    analyzer = {"type": "standard", "stopwords": "_english_"}
    assert body["settings"]["index"]["analysis"] == {"analyzer": {"english_unstemmed": analyzer}}
    properties = body["mappings"]["properties"]
    assert properties["content"]["analyzer"] == properties["title"]["analyzer"] == "english_unstemmed"
    assert body["mappings"]["_meta"]["stemmer"] == "none"


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

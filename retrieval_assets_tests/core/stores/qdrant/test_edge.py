"""The qdrant-edge store: sparse and hybrid search, deletes, the shard lock, undeclared and quoted keys,
sparse-only shards, optimising while writing, and copies that link immutable segments' files.
"""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest

from retrieval_assets.core.models import SparseVector
from retrieval_assets.core.stores.filters import FilterError, parse_filters
from retrieval_assets.core.stores.qdrant import edge as edge_module
from retrieval_assets.core.stores.qdrant.edge import SHARD_DIR, QdrantEdgeStore, ShardBusyError
from retrieval_assets_tests.core.stores.embedded_corpus import (
    CHUNK_IDS,
    DIM,
    FAR,
    FAR_ONLY_FILTERS,
    FAR_QUERY,
    FIELD_TYPES,
    PAYLOADS,
    SPARSE,
    VECTORS,
    sparse_dot,
)


@pytest.fixture
def qdrant(tmp_path):
    store = QdrantEdgeStore.create(tmp_path / "qdrant", DIM, field_types=FIELD_TYPES)
    # Dense first, sparse second: the second upsert must keep the first vector.
    store.upsert_dense(PAYLOADS, VECTORS)
    store.upsert_sparse(PAYLOADS, SPARSE)
    store.finalize()
    yield store
    store.close()


def test_qdrant_sparse_ranking_equals_dot_product(qdrant):
    for i, query in enumerate(SPARSE[:4]):
        expected = sorted(((sparse_dot(query, doc), CHUNK_IDS[j]) for j, doc in enumerate(SPARSE)), reverse=True)
        hits = qdrant.search_sparse(query, top_k=5)
        assert hits[0].chunk_id == CHUNK_IDS[i]
        assert [h.score for h in hits] == pytest.approx([score for score, _ in expected[:5]], rel=1e-3)
        # Documents sharing only the common term tie; compare ids above that level.
        strong = [cid for score, cid in expected[:5] if score > 0.001]
        assert [h.chunk_id for h in hits[: len(strong)]] == strong


@pytest.mark.parametrize("spec", FAR_ONLY_FILTERS, ids=lambda spec: next(iter(spec)))
def test_qdrant_sparse_filter_is_applied_inside_search(qdrant, spec):
    hits = qdrant.search_sparse(SPARSE[0], top_k=1, filters=parse_filters(spec))
    assert [h.chunk_id for h in hits] == [CHUNK_IDS[FAR]]


def test_qdrant_sparse_edge_cases(qdrant):
    assert qdrant.search_sparse(SparseVector(indices=[], values=[]), top_k=3) == []
    assert qdrant.search_sparse(SparseVector(indices=[10_000], values=[1.0]), top_k=3) == []


def test_qdrant_keeps_both_vectors_and_hybrid_fuses(qdrant):
    assert qdrant.count() == len(PAYLOADS)
    assert qdrant.search_dense(VECTORS[4], top_k=1)[0].chunk_id == CHUNK_IDS[4]
    hits = qdrant.search_hybrid(VECTORS[2], SPARSE[2], top_k=3)
    assert hits[0].chunk_id == CHUNK_IDS[2]
    assert hits[0].score == pytest.approx(2 / 60)  # first in both lists; Qdrant counts ranks from 0
    tenant = parse_filters({"tenant_id": "initech"})
    filtered = qdrant.search_hybrid(VECTORS[2], SPARSE[2], top_k=3, filters=tenant)
    assert [h.chunk_id for h in filtered] == [CHUNK_IDS[FAR]]
    # With one candidate per list, FAR survives only if the filter runs inside the prefetches.
    year = parse_filters({"year": {"gte": 2025}})
    narrow = qdrant.search_hybrid(FAR_QUERY, SPARSE[0], top_k=1, filters=year, prefetch_limit=1)
    assert [h.chunk_id for h in narrow] == [CHUNK_IDS[FAR]]


def test_qdrant_dense_vectors_and_sparse_index_stay_on_disk(qdrant):
    # A serving process searches this shard for SPLADE only (FAISS answers dense), so its dense
    # vectors are memory-mapped rather than loaded, and so is the SPLADE index, of which a
    # search reads its terms' posting lists only; both are still searched when asked.
    config = json.loads((qdrant.directory / SHARD_DIR / "edge_config.json").read_text())
    assert config["vectors"]["dense"]["memory"] == "cold"
    assert config["sparse_vectors"]["splade"]["memory"] == "cold"
    assert qdrant.search_dense(VECTORS[3], top_k=1)[0].chunk_id == CHUNK_IDS[3]
    assert qdrant.search_sparse(SPARSE[3], top_k=1)[0].chunk_id == CHUNK_IDS[3]


def test_qdrant_payload_indexes_are_memory_mapped_and_reopen_so(qdrant):
    # Loaded whole, the indexes made opening a 1M shard (each delta copies and opens one) take 4.3 s.
    qdrant.close()
    reopened = QdrantEdgeStore.open(qdrant.directory)
    try:
        schema = reopened._shard.info().payload_schema
        assert set(schema) == {"tenant_id", "doc_id", "section", *FIELD_TYPES}
        assert all(index.params.on_disk for index in schema.values())
        assert schema["tenant_id"].params.is_tenant
        filtered = reopened.search_sparse(SPARSE[0], top_k=1, filters=parse_filters({"tenant_id": "initech"}))
        assert [h.chunk_id for h in filtered] == [CHUNK_IDS[FAR]]
    finally:
        reopened.close()


def test_qdrant_delete_removes_both_vectors(qdrant, tmp_path):
    qdrant.delete([CHUNK_IDS[1], "no-such-chunk#0"])
    qdrant.finalize()
    assert qdrant.count() == len(PAYLOADS) - 1 and CHUNK_IDS[1] not in qdrant.chunk_ids()
    assert CHUNK_IDS[1] not in {h.chunk_id for h in qdrant.search_sparse(SPARSE[1], top_k=len(PAYLOADS))}
    assert CHUNK_IDS[1] not in {h.chunk_id for h in qdrant.search_dense(VECTORS[1], top_k=len(PAYLOADS))}
    # Deleting and upserting again restores the point with both vectors.
    qdrant.upsert(PAYLOADS[1:2], dense=VECTORS[1:2], sparse=SPARSE[1:2])
    qdrant.finalize()
    assert qdrant.search_sparse(SPARSE[1], top_k=1)[0].chunk_id == CHUNK_IDS[1]
    assert qdrant.search_dense(VECTORS[1], top_k=1)[0].chunk_id == CHUNK_IDS[1]


def test_qdrant_second_open_fails_clearly(qdrant):
    with pytest.raises(ShardBusyError, match="already open"):
        QdrantEdgeStore.open(qdrant.directory)


def test_qdrant_undeclared_fields(tmp_path):
    store = QdrantEdgeStore.create(tmp_path / "plain", DIM)
    store.upsert_dense(PAYLOADS, VECTORS)
    # Undeclared fields still filter inside the engine (by payload scan) ...
    hits = store.search_dense(FAR_QUERY, top_k=1, filters=parse_filters({"license": "WTFPL"}))
    assert [h.chunk_id for h in hits] == [CHUNK_IDS[FAR]]
    hits = store.search_dense(FAR_QUERY, top_k=1, filters=parse_filters({"stars": 99.5}))
    assert [h.chunk_id for h in hits] == [CHUNK_IDS[FAR]]
    # ... except booleans, which this engine version cannot match unless declared.
    with pytest.raises(FilterError, match="declare it as 'bool'"):
        store.search_dense(FAR_QUERY, top_k=1, filters=parse_filters({"open_source": False}))
    store.close()


@pytest.mark.parametrize("declared", [True, False])
def test_qdrant_filters_on_dotted_and_spaced_keys(tmp_path, declared):
    # Flattened catalog keys ("relations.requires") are one payload key, not a nested path.
    fields = {"relations.requires": "keyword", "first author": "keyword"}
    store = QdrantEdgeStore.create(tmp_path / "keys", None, field_types=fields if declared else None)
    base = {"section": "body", "title": "", "text": "x", "tenant_id": "t"}
    store.upsert_sparse(
        [
            {**base, "chunk_id": "a#0", "doc_id": "a", "relations.requires": ["samtools"], "first author": "Smith"},
            {**base, "chunk_id": "b#0", "doc_id": "b", "relations.requires": ["htslib"], "first author": "Jones"},
        ],
        [SparseVector(indices=[1], values=[1.0]), SparseVector(indices=[1], values=[2.0])],
    )
    store.finalize()
    query = SparseVector(indices=[1], values=[1.0])
    for spec, expected in (({"relations.requires": "samtools"}, ["a"]), ({"first author": "Jones"}, ["b"])):
        assert [h.payload["doc_id"] for h in store.search_sparse(query, 5, parse_filters(spec))] == expected
    store.close()


def test_qdrant_sparse_only_shard(tmp_path):
    store = QdrantEdgeStore.create(tmp_path / "sparse-only", None)
    store.upsert_sparse(PAYLOADS, SPARSE)
    assert store.search_sparse(SPARSE[6], top_k=1)[0].chunk_id == CHUNK_IDS[6]
    with pytest.raises(ValueError, match="without a dense vector"):
        store.search_dense(VECTORS[0], top_k=1)
    store.close()


def test_qdrant_optimised_while_writing_answers_as_one_pass(qdrant, tmp_path, monkeypatch):
    """A build optimised every few points into capped segments (what bounds a large build's
    memory) holds the same points and ranks exactly as one optimiser pass at the end."""
    monkeypatch.setattr(QdrantEdgeStore, "optimize_every", 3)
    store = QdrantEdgeStore.create(tmp_path / "segmented", DIM, field_types=FIELD_TYPES, max_segment_kb=1)
    store.upsert(PAYLOADS, dense=VECTORS, sparse=SPARSE)
    store.finalize()
    assert store.chunk_ids() == set(CHUNK_IDS)
    for i in range(len(PAYLOADS)):
        for search, query in ((store.search_dense, VECTORS[i]), (store.search_sparse, SPARSE[i])):
            got, expected = search(query, top_k=5), getattr(qdrant, search.__name__)(query, top_k=5)
            assert [h.score for h in got] == pytest.approx([h.score for h in expected], rel=1e-5)
            # Documents sharing only the common SPARSE term tie; compare ids above that level.
            assert [h.chunk_id for h in got if h.score > 0.001] == [h.chunk_id for h in expected if h.score > 0.001]
    store.close()


def test_qdrant_deferred_optimising_waits_for_enough_points_across_copies(qdrant, tmp_path, monkeypatch):
    """A delta's few points wait for the optimiser until ``optimize_every`` have been written
    since its last pass, counted across reopened copies, and are searched exactly meanwhile."""
    monkeypatch.setattr(QdrantEdgeStore, "optimize_every", len(PAYLOADS) + 2)
    path = tmp_path / "deferred"
    store = QdrantEdgeStore.create(path, DIM, field_types=FIELD_TYPES)
    store.upsert(PAYLOADS, dense=VECTORS, sparse=SPARSE)
    store.finalize(defer_optimizing=True)
    for i in range(len(PAYLOADS)):
        got, expected = store.search_dense(VECTORS[i], top_k=5), qdrant.search_dense(VECTORS[i], top_k=5)
        assert [h.chunk_id for h in got] == [h.chunk_id for h in expected]
    store.close()
    assert json.loads((path / "manifest.json").read_text())["unoptimized_points"] == len(PAYLOADS)

    again = QdrantEdgeStore.open(path)  # as a later delta's copy: the count carries over
    again.upsert(PAYLOADS[:1], dense=VECTORS[:1], sparse=SPARSE[:1])
    again.finalize(defer_optimizing=True)
    assert json.loads((path / "manifest.json").read_text())["unoptimized_points"] == len(PAYLOADS) + 1
    again.upsert(PAYLOADS[:1], dense=VECTORS[:1], sparse=SPARSE[:1])
    again.finalize(defer_optimizing=True)  # optimize_every reached: the optimiser has run
    assert json.loads((path / "manifest.json").read_text())["unoptimized_points"] == 0
    again.finalize()
    assert again.chunk_ids() == set(CHUNK_IDS)
    again.close()


def _optimised_shard(path, points=8_000, dim=384):
    """A shard with an immutable (optimised) segment: 8,000 bge-small-sized points pass the
    engine's indexing threshold."""
    rng = np.random.default_rng(0)
    payloads = [
        {"chunk_id": f"c{i}", "doc_id": f"d{i}", "tenant_id": "t", "title": "", "text": "x", "section": "body"}
        for i in range(points)
    ]
    store = QdrantEdgeStore.create(path, dim, field_types={"tenant_id": "keyword"}, hnsw_m=0)
    sparse = [SparseVector(indices=[i % 50, 50 + i % 7], values=[1.0, 0.5]) for i in range(points)]
    store.upsert(payloads, dense=rng.standard_normal((points, dim)).astype(np.float32), sparse=sparse)
    store.finalize()
    store.close()
    return payloads, rng


def _file_digests(root):
    files = [p for p in root.rglob("*") if p.is_file()]
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.mark.parametrize("link_everything", [False, True])
def test_a_copy_links_immutable_segment_files_and_its_writes_leave_the_source_as_it_was(
    tmp_path, monkeypatch, link_everything
):
    base = tmp_path / "base"
    payloads, rng = _optimised_shard(base)
    if link_everything:  # the test's own check: linking a file the engine writes does change the base
        monkeypatch.setattr(edge_module, "IMMUTABLE_SEGMENT_FILES", re.compile(r".*"))
    before = _file_digests(base)
    copy = QdrantEdgeStore.open_copy(base, tmp_path / "copy")
    linked = [p.name for p in (tmp_path / "copy").rglob("*") if p.is_file() and p.stat().st_nlink > 1]
    # A delta's writes: deletes, and upserts of points already in the immutable segment.
    copy.delete([p["chunk_id"] for p in payloads[:200]])
    changed = payloads[200:400]
    copy.upsert(changed, dense=rng.standard_normal((len(changed), 384)).astype(np.float32),
                sparse=[SparseVector(indices=[999], values=[1.0])] * len(changed))
    copy.finalize(defer_optimizing=True)
    copy.close()
    after = _file_digests(base)
    if link_everything:
        assert after != before
        return
    assert set(linked) >= {"matrix.dat", "inverted_index.dat"}
    assert after == before
    reopened, copied = QdrantEdgeStore.open(base), QdrantEdgeStore.open(tmp_path / "copy")
    assert reopened.count() == 8_000 and copied.count() == 7_800
    found = copied.search_sparse(SparseVector(indices=[999], values=[1.0]), top_k=300)
    assert {hit.chunk_id for hit in found} == {p["chunk_id"] for p in changed}
    assert reopened.search_sparse(SparseVector(indices=[999], values=[1.0]), top_k=10) == []
    reopened.close()
    copied.close()

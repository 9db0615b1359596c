"""The dense port's contract over the embedded stores (FAISS flat and HNSW, qdrant-edge), and every
embedded store reopened in a new process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from retrieval_assets.core.stores.base import (
    DenseStore,
)
from retrieval_assets.core.stores.faiss.store import FaissDenseStore
from retrieval_assets.core.stores.filters import parse_filters
from retrieval_assets.core.stores.qdrant.edge import QdrantEdgeStore
from retrieval_assets.core.stores.tantivy.store import TantivyLexicalStore
from retrieval_assets_tests.core.stores.embedded_corpus import (
    CHUNK_IDS,
    DIM,
    FAR,
    FAR_ONLY_FILTERS,
    FAR_QUERY,
    FIELD_TYPES,
    MULTI_FILTERS,
    PAYLOADS,
    SPARSE,
    VECTORS,
    brute_force,
)

DENSE_KINDS = ["faiss-flat", "faiss-ivf", "faiss-hnsw", "qdrant-edge"]


def create_dense(kind: str, path: Path, dim: int = DIM, overwrite: bool = False) -> DenseStore:
    if kind == "faiss-flat":
        return FaissDenseStore.create(path, dim, overwrite=overwrite)
    if kind == "faiss-hnsw":
        return FaissDenseStore.create(path, dim, index_type="hnsw", hnsw_m=8, overwrite=overwrite)
    if kind == "faiss-ivf":  # every cell probed: the contract's exact answers hold
        return FaissDenseStore.create(path, dim, index_type="ivf", ivf_lists=2, ivf_probes=2, overwrite=overwrite)
    return QdrantEdgeStore.create(path, dim, field_types=FIELD_TYPES, overwrite=overwrite)


def open_dense(kind: str, path: Path) -> DenseStore:
    return (QdrantEdgeStore if kind == "qdrant-edge" else FaissDenseStore).open(path)


@pytest.fixture(params=DENSE_KINDS)
def dense(request, tmp_path):
    """(kind, path, store) with the corpus upserted and finalised."""
    path = tmp_path / request.param
    store = create_dense(request.param, path)
    store.upsert_dense(PAYLOADS, VECTORS)
    store.finalize()
    holder = {"store": store}
    yield request.param, path, holder
    holder["store"].close()


def test_dense_nearest_neighbour_first_with_payload(dense):
    _, _, holder = dense
    store = holder["store"]
    for i, vector in enumerate(VECTORS):
        hits = store.search_dense(vector, top_k=3)
        assert hits[0].chunk_id == CHUNK_IDS[i]
        assert hits[0].score == pytest.approx(1.0, abs=1e-4)
        assert hits[0].payload == PAYLOADS[i]
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_dense_count_and_chunk_ids(dense):
    _, _, holder = dense
    assert holder["store"].count() == len(PAYLOADS)
    assert holder["store"].chunk_ids() == set(CHUNK_IDS)


@pytest.mark.parametrize("spec", FAR_ONLY_FILTERS, ids=lambda spec: next(iter(spec)))
def test_dense_filter_is_applied_inside_search(dense, spec):
    store = dense[2]["store"]
    assert store.search_dense(FAR_QUERY, top_k=len(PAYLOADS))[-1].chunk_id == CHUNK_IDS[FAR]
    hits = store.search_dense(FAR_QUERY, top_k=1, filters=parse_filters(spec))
    assert [h.chunk_id for h in hits] == [CHUNK_IDS[FAR]]


@pytest.mark.parametrize("spec", MULTI_FILTERS, ids=str)
def test_dense_filtered_results_equal_brute_force(dense, spec):
    store = dense[2]["store"]
    filters = parse_filters(spec)
    query = VECTORS[0] + 0.5 * VECTORS[5]
    expected = brute_force(query, filters, top_k=4)
    hits = store.search_dense(query, top_k=4, filters=filters)
    assert [h.chunk_id for h in hits] == [cid for cid, _ in expected]
    assert [h.score for h in hits] == pytest.approx([score for _, score in expected], abs=1e-4)


def test_dense_filter_matching_nothing_returns_empty(dense):
    store = dense[2]["store"]
    assert store.search_dense(VECTORS[0], top_k=5, filters=parse_filters({"tenant_id": "nobody"})) == []
    assert store.search_dense(VECTORS[0], top_k=5, filters=parse_filters({"no_such_field": "x"})) == []


def test_dense_reopen_returns_same_results(dense):
    kind, path, holder = dense
    query = VECTORS[3] + 0.3 * VECTORS[7]
    filters = parse_filters({"tenant_id": "globex"})
    before = [holder["store"].search_dense(query, 5), holder["store"].search_dense(query, 5, filters)]
    holder["store"].close()
    holder["store"] = open_dense(kind, path)
    after = [holder["store"].search_dense(query, 5), holder["store"].search_dense(query, 5, filters)]
    for old, new in zip(before, after, strict=True):
        assert [h.chunk_id for h in new] == [h.chunk_id for h in old]
        assert [h.score for h in new] == pytest.approx([h.score for h in old], abs=1e-5)
        assert [h.payload for h in new] == [h.payload for h in old]
    assert holder["store"].count() == len(PAYLOADS)


def test_dense_upsert_replaces_existing_chunk(dense):
    kind, path, holder = dense
    store = holder["store"]
    new_vector = np.random.default_rng(99).standard_normal((1, DIM)).astype(np.float32)
    new_vector /= np.linalg.norm(new_vector)
    changed = dict(PAYLOADS[0], title="Vector search, revised")
    store.upsert_dense([changed], new_vector)
    store.finalize()
    assert store.count() == len(PAYLOADS)
    top = store.search_dense(new_vector[0], top_k=1)[0]
    assert (top.chunk_id, top.payload["title"]) == (CHUNK_IDS[0], "Vector search, revised")
    assert store.search_dense(VECTORS[0], top_k=1)[0].score < 0.999
    store.close()
    holder["store"] = open_dense(kind, path)
    assert holder["store"].count() == len(PAYLOADS)
    assert holder["store"].search_dense(new_vector[0], top_k=1)[0].payload["title"] == "Vector search, revised"


def test_dense_delete_removes_chunks_from_search_and_disk(dense):
    kind, path, holder = dense
    store = holder["store"]
    gone = {CHUNK_IDS[0], CHUNK_IDS[FAR]}
    store.delete([*gone, "no-such-chunk#0", CHUNK_IDS[0]])
    store.finalize()
    kept = [i for i, chunk_id in enumerate(CHUNK_IDS) if chunk_id not in gone]
    expected = sorted(((float(VECTORS[i] @ VECTORS[0]), CHUNK_IDS[i]) for i in kept), reverse=True)[:5]
    for current in (store, None):
        if current is None:
            store.close()
            holder["store"] = current = open_dense(kind, path)
        assert current.count() == len(kept) and current.chunk_ids() == set(CHUNK_IDS) - gone
        hits = current.search_dense(VECTORS[0], top_k=5)
        assert [h.chunk_id for h in hits] == [chunk_id for _, chunk_id in expected]
        assert [h.score for h in hits] == pytest.approx([score for score, _ in expected], abs=1e-5)
        assert current.search_dense(FAR_QUERY, top_k=3, filters=parse_filters({"tenant_id": "initech"})) == []
    # Writes after searches (payloads parsed by then) are saved as well.
    current.upsert_dense(PAYLOADS[:1], VECTORS[:1])
    current.delete([CHUNK_IDS[2]])
    current.close()
    holder["store"] = reopened = open_dense(kind, path)
    assert reopened.chunk_ids() == set(CHUNK_IDS) - {CHUNK_IDS[FAR], CHUNK_IDS[2]}
    assert reopened.search_dense(VECTORS[0], top_k=1)[0].payload == PAYLOADS[0]


def test_dense_dimension_mismatch_is_a_clear_error(dense):
    store = dense[2]["store"]
    with pytest.raises(ValueError, match="dimension|shape"):
        store.upsert_dense(PAYLOADS[:2], np.ones((2, DIM + 1), dtype=np.float32))
    with pytest.raises(ValueError, match="dimension|shape"):
        store.search_dense(np.ones(DIM - 1, dtype=np.float32), top_k=1)
    with pytest.raises(ValueError, match="vectors for"):
        store.upsert_dense(PAYLOADS[:2], VECTORS[:3])


def test_dense_rejects_bad_payloads(dense):
    store = dense[2]["store"]
    with pytest.raises(ValueError, match="required fields"):
        store.upsert_dense([{"chunk_id": "x"}], VECTORS[:1])
    with pytest.raises(ValueError, match="twice"):
        store.upsert_dense([PAYLOADS[0], PAYLOADS[0]], VECTORS[:2])


@pytest.mark.parametrize("kind", DENSE_KINDS)
def test_dense_create_refuses_non_empty_dir(kind, tmp_path):
    path = tmp_path / kind
    store = create_dense(kind, path)
    store.upsert_dense(PAYLOADS, VECTORS)
    store.close()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        create_dense(kind, path)
    fresh = create_dense(kind, path, overwrite=True)
    assert fresh.count() == 0
    assert fresh.search_dense(VECTORS[0], top_k=3) == []
    fresh.close()
    with pytest.raises(FileNotFoundError):
        open_dense(kind, tmp_path / "missing")


def test_stores_open_in_a_new_process(tmp_path):
    faiss_store = FaissDenseStore.create(tmp_path / "faiss", DIM)
    qdrant_store = QdrantEdgeStore.create(tmp_path / "qdrant", DIM, field_types=FIELD_TYPES)
    tantivy_store = TantivyLexicalStore.create(tmp_path / "tantivy", field_types=FIELD_TYPES)
    for store in (faiss_store, qdrant_store):
        store.upsert_dense(PAYLOADS, VECTORS)
    qdrant_store.upsert_sparse(PAYLOADS, SPARSE)
    tantivy_store.add(PAYLOADS)
    filters = parse_filters({"tenant_id": "acme"})
    for store in (faiss_store, qdrant_store, tantivy_store):
        store.finalize()
    expected = {
        "faiss": [h.chunk_id for h in faiss_store.search_dense(VECTORS[5], 3, filters)],
        "qdrant": [h.chunk_id for h in qdrant_store.search_dense(VECTORS[5], 3, filters)],
        "qdrant_sparse": [h.chunk_id for h in qdrant_store.search_sparse(SPARSE[5], 3)],
        "tantivy": [h.chunk_id for h in tantivy_store.search_text("common search", 3, filters)],
    }
    for store in (faiss_store, qdrant_store, tantivy_store):
        store.close()
    script = textwrap.dedent(
        """
        import json, sys
        import numpy as np
        from retrieval_assets.core.stores.filters import parse_filters
        from retrieval_assets.core.models import SparseVector
        from retrieval_assets.core.stores.faiss.store import FaissDenseStore
        from retrieval_assets.core.stores.qdrant.edge import QdrantEdgeStore
        from retrieval_assets.core.stores.tantivy.store import TantivyLexicalStore
        root, vector = sys.argv[1], np.array(json.loads(sys.argv[2]), dtype=np.float32)
        sparse = SparseVector.model_validate_json(sys.argv[3])
        filters = parse_filters({"tenant_id": "acme"})
        faiss_store = FaissDenseStore.open(root + "/faiss")
        qdrant = QdrantEdgeStore.open(root + "/qdrant")
        tantivy_store = TantivyLexicalStore.open(root + "/tantivy")
        out = {
            "faiss": [h.chunk_id for h in faiss_store.search_dense(vector, 3, filters)],
            "qdrant": [h.chunk_id for h in qdrant.search_dense(vector, 3, filters)],
            "qdrant_sparse": [h.chunk_id for h in qdrant.search_sparse(sparse, 3)],
            "tantivy": [h.chunk_id for h in tantivy_store.search_text("common search", 3, filters)],
        }
        qdrant.close()
        print(json.dumps(out))
        """
    )
    args = [str(tmp_path), json.dumps(VECTORS[5].tolist()), SPARSE[5].model_dump_json()]
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected


def test_chunk_ids_given_the_expected_ones_are_the_stores_own_listing(dense):
    # Two held chunks the caller does not expect, one expected chunk the store never held.
    store = dense[2]["store"]
    expected = {*CHUNK_IDS[2:], "never-written#0"}
    assert store.chunk_ids_given(expected) == store.chunk_ids() == set(CHUNK_IDS)


def test_holding_names_the_given_ids_the_store_holds(dense):
    store = dense[2]["store"]
    assert store.holding([CHUNK_IDS[0], "never-written#0", CHUNK_IDS[3], CHUNK_IDS[0]]) == {CHUNK_IDS[0], CHUNK_IDS[3]}
    store.delete([CHUNK_IDS[0]])
    store.finalize()
    assert store.holding([CHUNK_IDS[0], CHUNK_IDS[3]]) == {CHUNK_IDS[3]} and store.holding([]) == set()

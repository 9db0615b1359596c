"""The FAISS dense store: copies, payloads read without the index, filter masks and the HNSW id selector."""

from __future__ import annotations

from retrieval_assets.core.stores.faiss.store import FaissDenseStore, PayloadColumns
from retrieval_assets.core.stores.filters import (
    MetadataFilter,
    matches_all,
    parse_filters,
)
from retrieval_assets_tests.core.stores.embedded_corpus import (
    CHUNK_IDS,
    DIM,
    FAR_ONLY_FILTERS,
    FAR_QUERY,
    MULTI_FILTERS,
    PAYLOADS,
    VECTORS,
    brute_force,
)


def test_faiss_store_copy_leaves_the_original_unchanged(tmp_path):
    # A delta build's copy of the base's FAISS index: opened from the base, saved elsewhere.
    base, copy = tmp_path / "base", tmp_path / "copy"
    with FaissDenseStore.create(base, DIM) as store:
        store.upsert_dense(PAYLOADS, VECTORS)
    store = FaissDenseStore.open_copy(base, copy)
    store.delete([CHUNK_IDS[2]])
    store.finalize()
    assert FaissDenseStore.open(copy).chunk_ids() == set(CHUNK_IDS) - {CHUNK_IDS[2]}
    original = FaissDenseStore.open(base)
    assert original.chunk_ids() == set(CHUNK_IDS)
    assert original.search_dense(VECTORS[2], top_k=1)[0].chunk_id == CHUNK_IDS[2]


def test_faiss_stored_payloads_are_read_without_the_index(tmp_path):
    path = tmp_path / "faiss"
    with FaissDenseStore.create(path, DIM) as store:
        store.upsert_dense(PAYLOADS, VECTORS)
    assert FaissDenseStore.stored_payloads(path) == dict(zip(CHUNK_IDS, PAYLOADS, strict=True))
    assert FaissDenseStore.stored_payloads(path, {CHUNK_IDS[2], "no-such-chunk#0"}) == {CHUNK_IDS[2]: PAYLOADS[2]}


def test_faiss_filter_mask_agrees_with_metadata_filter():
    payloads = [
        {"x": 1, "y": "2019", "z": ["a", "b"]},
        {"x": 2.5, "y": 2019, "z": []},
        {"x": True, "y": None, "z": ["c"]},
        {"y": "abc"},
        {"x": "7", "y": 2020.0, "z": ["a"]},
    ]
    columns = PayloadColumns(payloads)
    cases = [
        MetadataFilter(field="x", any_of=[1, "2.5"]),
        MetadataFilter(field="x", gte=1),
        MetadataFilter(field="x", lte=3),
        MetadataFilter(field="y", any_of=["2019"]),
        MetadataFilter(field="y", gte=2019.5),
        MetadataFilter(field="z", any_of=["a", "c"]),
        MetadataFilter(field="missing", any_of=["a"]),
    ]
    for flt in cases:
        assert columns.mask([flt]).tolist() == [flt.matches(p) for p in payloads], flt
    both = [cases[1], cases[5]]
    assert columns.mask(both).tolist() == [matches_all(p, both) for p in payloads]


def test_faiss_hnsw_filters_through_the_id_selector(tmp_path):
    """Above exact_filter_max_rows the filter is an IDSelector inside the HNSW search."""
    store = FaissDenseStore.create(tmp_path / "hnsw", DIM, index_type="hnsw", hnsw_m=8)
    store.upsert_dense(PAYLOADS, VECTORS)
    store.exact_filter_max_rows = 0
    for spec in [*FAR_ONLY_FILTERS, *MULTI_FILTERS]:
        filters = parse_filters(spec)
        expected = brute_force(FAR_QUERY, filters, top_k=3)
        hits = store.search_dense(FAR_QUERY, top_k=3, filters=filters)
        assert [h.chunk_id for h in hits] == [cid for cid, _ in expected], spec

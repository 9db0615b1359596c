"""The FAISS dense store: copies, payloads read without the index, filter masks, IVF cells, tombstones."""

from __future__ import annotations

import gc
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval_assets.core.stores.base import parse_payload, read_manifest
from retrieval_assets.core.stores.faiss import store as store_module
from retrieval_assets.core.stores.faiss.store import (
    LEGACY_PAYLOAD_FILE,
    PAYLOAD_FILE,
    FaissDenseStore,
    PayloadColumns,
    PayloadTexts,
)
from retrieval_assets.core.stores.filters import (
    MetadataFilter,
    matches_all,
    parse_filters,
)
from retrieval_assets_tests.core.stores.embedded_corpus import (
    CHUNK_IDS,
    DIM,
    FAR,
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


def _batched_payloads(path) -> dict[str, dict]:
    batches = list(FaissDenseStore.stored_payload_batches(path))
    assert all(batch.schema.names == ["chunk_id", "payload"] for batch in batches)
    return {
        chunk_id: parse_payload(text)
        for batch in batches
        for chunk_id, text in zip(
            batch.column("chunk_id").to_pylist(), batch.column("payload").to_pylist(), strict=True
        )
    }


def test_faiss_stored_payloads_are_read_a_batch_at_a_time_from_either_file(tmp_path):
    path = tmp_path / "faiss"
    with FaissDenseStore.create(path, DIM) as store:
        store.upsert_dense(PAYLOADS, VECTORS)
    assert _batched_payloads(path) == dict(zip(CHUNK_IDS, PAYLOADS, strict=True))
    _saved_as_legacy_parquet(path, drop_doc_id=False)
    assert _batched_payloads(path) == dict(zip(CHUNK_IDS, PAYLOADS, strict=True))


def test_faiss_payloads_stay_json_until_a_hit_is_shown(tmp_path):
    path = tmp_path / "faiss"
    with FaissDenseStore.create(path, DIM) as store:
        store.upsert_dense(PAYLOADS, VECTORS)
    store = FaissDenseStore.open(path)
    assert isinstance(store._payloads, PayloadTexts)
    hit = store.search_dense(VECTORS[2], top_k=1)[0]
    assert (hit.chunk_id, hit.doc_id) == (CHUNK_IDS[2], PAYLOADS[2]["doc_id"])
    # A write after the search leaves the hit's payload as it was found.
    store.delete([CHUNK_IDS[0], CHUNK_IDS[2]])
    assert hit.payload == PAYLOADS[2]
    assert [h.chunk_id for h in store.search_dense(VECTORS[3], top_k=1)] == [CHUNK_IDS[3]]
    assert store.search_dense(VECTORS[3], top_k=1)[0].payload == PAYLOADS[3]


def test_faiss_payloads_are_saved_in_record_batches_and_mapped_not_read(tmp_path, monkeypatch):
    # Mapped, the payloads' pages are loaded when touched; a delta copies whole batches.
    monkeypatch.setattr(store_module, "PAYLOAD_BATCH_ROWS", 3)
    path = tmp_path / "faiss"
    with FaissDenseStore.create(path, DIM) as store:
        store.upsert_dense(PAYLOADS, VECTORS)
    with pa.memory_map(str(_payload_file(path))) as source:
        assert pa.ipc.open_file(source).num_record_batches == -(-len(PAYLOADS) // 3)
    gc.collect()  # the writer's buffers, freed
    allocated = pa.total_allocated_bytes()
    store = FaissDenseStore.open(path)
    assert pa.total_allocated_bytes() <= allocated  # no payload copied into Arrow's memory
    assert store.search_dense(VECTORS[2], top_k=1)[0].payload == PAYLOADS[2]
    assert FaissDenseStore.stored_payloads(path) == dict(zip(CHUNK_IDS, PAYLOADS, strict=True))


def test_faiss_reads_a_payload_file_holding_an_empty_record_batch(tmp_path):
    # An empty batch's buffers need not lie in the file: nothing is read for it.
    path = tmp_path / "faiss"
    with FaissDenseStore.create(path, DIM) as store:
        store.upsert_dense(PAYLOADS, VECTORS)
    with pa.memory_map(str(_payload_file(path))) as source:
        table = pa.ipc.open_file(source).read_all()
    rewritten = tmp_path / "rewritten.arrow"  # not over the mapped file the table still reads
    with pa.OSFile(str(rewritten), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_batch(pa.RecordBatch.from_pylist([], schema=table.schema))
        writer.write_table(table)
    rewritten.replace(_payload_file(path))
    store = FaissDenseStore.open(path)
    assert list(store._payloads) == PAYLOADS
    far_only = parse_filters(FAR_ONLY_FILTERS[0])
    assert [h.chunk_id for h in store.search_dense(VECTORS[FAR], top_k=1, filters=far_only)] == [CHUNK_IDS[FAR]]


def _payload_file(path):
    """The one payload file a store's manifest names."""
    _, manifest = read_manifest(path, FaissDenseStore.backend)
    [entry] = manifest["payload_files"]
    return path / entry["name"]


def _saved_as_one_payload_file(path) -> None:
    """Rewrite a store's payload file as versions saved before 2026-11-29 held it: one file,
    ``payloads.arrow``, that the manifest does not name."""
    _payload_file(path).rename(path / PAYLOAD_FILE)
    _, manifest = read_manifest(path, FaissDenseStore.backend)
    del manifest["payload_files"]
    (path / "manifest.json").write_text(json.dumps(manifest))


def _saved_as_legacy_parquet(path, *, drop_doc_id: bool) -> None:
    """Rewrite a store's payload file as versions saved before 2026-11-27 held it."""
    _saved_as_one_payload_file(path)
    with pa.memory_map(str(path / PAYLOAD_FILE)) as source:
        table = pa.ipc.open_file(source).read_all()
    pq.write_table(table.drop_columns(["doc_id"]) if drop_doc_id else table, path / LEGACY_PAYLOAD_FILE)
    (path / PAYLOAD_FILE).unlink()


def test_faiss_opens_a_legacy_parquet_payload_file_and_saves_the_mapped_one(tmp_path):
    path = tmp_path / "faiss"
    with FaissDenseStore.create(path, DIM) as store:
        store.upsert_dense(PAYLOADS, VECTORS)
    _saved_as_legacy_parquet(path, drop_doc_id=False)
    assert FaissDenseStore.stored_payloads(path) == dict(zip(CHUNK_IDS, PAYLOADS, strict=True))
    store = FaissDenseStore.open(path)
    assert store.search_dense(VECTORS[2], top_k=1)[0].payload == PAYLOADS[2]
    store.delete([CHUNK_IDS[0]])
    store.finalize()
    assert _payload_file(path).exists() and not (path / LEGACY_PAYLOAD_FILE).exists()
    assert FaissDenseStore.open(path).chunk_ids() == set(CHUNK_IDS[1:])


def test_faiss_opens_payloads_saved_without_a_doc_id_column(tmp_path):
    # Versions built before doc_id had its own column: each doc id is read from its payload.
    path = tmp_path / "faiss"
    with FaissDenseStore.create(path, DIM) as store:
        store.upsert_dense(PAYLOADS, VECTORS)
    _saved_as_legacy_parquet(path, drop_doc_id=True)
    hits = FaissDenseStore.open(path).search_dense(VECTORS[4], top_k=len(PAYLOADS))
    assert {h.chunk_id: h.doc_id for h in hits} == {p["chunk_id"]: p["doc_id"] for p in PAYLOADS}


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
    """Above exact_filter_max_rows and exact_filter_max_share the filter is an IDSelector inside the HNSW search."""
    store = FaissDenseStore.create(tmp_path / "hnsw", DIM, index_type="hnsw", hnsw_m=8)
    store.upsert_dense(PAYLOADS, VECTORS)
    store.exact_filter_max_rows, store.exact_filter_max_share = 0, 0.0
    for spec in [*FAR_ONLY_FILTERS, *MULTI_FILTERS]:
        filters = parse_filters(spec)
        expected = brute_force(FAR_QUERY, filters, top_k=3)
        hits = store.search_dense(FAR_QUERY, top_k=3, filters=filters)
        assert [h.chunk_id for h in hits] == [cid for cid, _ in expected], spec


def test_a_filters_mask_is_kept_until_the_store_is_written(tmp_path):
    store = FaissDenseStore.create(tmp_path / "flat", DIM)
    store.upsert_dense(PAYLOADS[:6], VECTORS[:6])
    filters = parse_filters(FAR_ONLY_FILTERS[0])
    columns = store._payload_columns()
    first = columns.mask(filters)
    # The same filter again is the same (read-only) array: a tenant's scope is computed once.
    assert columns.mask(parse_filters(FAR_ONLY_FILTERS[0])) is first and not first.flags.writeable
    store.upsert_dense(PAYLOADS[6:], VECTORS[6:])
    # A write replaces the columns, so the mask covers the new rows.
    assert store._payload_columns().mask(filters).tolist() == [matches_all(p, filters) for p in PAYLOADS]


def _tenant_corpus(rows: int, tenant_every: int, seed: int = 0):
    """Random unit vectors, every ``tenant_every``-th in tenant "small", the rest in "large"."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((rows, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    payloads = [
        {"chunk_id": f"c{i}", "doc_id": f"d{i}", "section": "body", "title": "", "text": "",
         "tenant_id": "small" if i % tenant_every == 0 else "large"}
        for i in range(rows)
    ]
    return vectors, payloads, rng.standard_normal((20, DIM)).astype(np.float32)


def _exact_top(vectors, payloads, query, tenant, top_k=10):
    scores = vectors @ (query / np.linalg.norm(query))
    order = [i for i in np.argsort(-scores) if payloads[i]["tenant_id"] == tenant]
    return [payloads[i]["chunk_id"] for i in order[:top_k]]


def test_a_selective_filter_on_hnsw_scans_its_rows_exactly(tmp_path):
    # A graph too sparse to walk to a 10 % tenant's neighbours (M 4, efSearch 10): the exact scan
    # of the tenant's rows finds them all, tombstones excluded.
    vectors, payloads, queries = _tenant_corpus(3_000, tenant_every=10)
    store = FaissDenseStore.create(tmp_path / "hnsw", DIM, index_type="hnsw", hnsw_m=4, ef_search=10)
    store.upsert_dense(payloads, vectors)
    store.delete(["c0", "c10"])
    store.exact_filter_max_rows = 0  # the share alone decides
    kept = [i for i in range(len(payloads)) if payloads[i]["chunk_id"] not in ("c0", "c10")]
    live_vectors, live_payloads = vectors[kept], [payloads[i] for i in kept]
    for query in queries:
        found = _nearest(store, query, top_k=10, filters=parse_filters({"tenant_id": "small"}))
        assert found == _exact_top(live_vectors, live_payloads, query, "small")


def test_a_wide_filter_on_hnsw_walks_the_graph_with_efsearch_raised_by_its_share(tmp_path):
    vectors, payloads, queries = _tenant_corpus(3_000, tenant_every=2)
    store = FaissDenseStore.create(tmp_path / "hnsw", DIM, index_type="hnsw", hnsw_m=8, ef_search=16)
    store.upsert_dense(payloads, vectors)
    store.exact_filter_max_rows = 0
    filters = parse_filters({"tenant_id": "small"})  # half the rows: above the exact share
    walked = []
    for query in queries:
        found = _nearest(store, query, top_k=10, filters=filters)
        assert all(chunk_id in {p["chunk_id"] for p in payloads[::2]} for chunk_id in found)
        walked.append(len(set(found) & set(_exact_top(vectors, payloads, query, "small"))) / 10)
    store.exact_filter_max_share = 1.0
    for query in queries:
        assert _nearest(store, query, top_k=10, filters=filters) == _exact_top(vectors, payloads, query, "small")
    assert np.mean(walked) >= 0.8, walked


# Approximate kinds with tombstones; the IVF index probes both its cells, so exact answers hold.
APPROXIMATE = ["hnsw", "ivf"]


def _approximate(path, kind, vectors=VECTORS, payloads=PAYLOADS):
    store = FaissDenseStore.create(path, DIM, index_type=kind, hnsw_m=8, ivf_lists=2, ivf_probes=2)
    store.upsert_dense(payloads, vectors)
    store.finalize()
    return store


def _nearest(store, vector, top_k=3, filters=()):
    return [hit.chunk_id for hit in store.search_dense(vector, top_k=top_k, filters=filters)]


@pytest.mark.parametrize("kind", APPROXIMATE)
def test_approximate_delete_leaves_a_tombstone_instead_of_rebuilding_the_index(tmp_path, kind):
    store = _approximate(tmp_path / "hnsw", kind)
    store.delete([CHUNK_IDS[2]])
    # The graph still holds all 12 vectors: nothing was rebuilt, one is a tombstone.
    assert (store.count(), store.tombstones) == (len(CHUNK_IDS) - 1, 1)
    assert CHUNK_IDS[2] not in _nearest(store, VECTORS[2], top_k=len(CHUNK_IDS))
    store.finalize()
    reopened = FaissDenseStore.open(tmp_path / "hnsw")
    assert (reopened.count(), reopened.tombstones) == (len(CHUNK_IDS) - 1, 1)
    assert reopened.chunk_ids() == set(CHUNK_IDS) - {CHUNK_IDS[2]}
    # Every remaining vector is still found, unfiltered and filtered (the filtered path both
    # through the id selector and through the exact scan of the graph's storage).
    for row, chunk_id in enumerate(CHUNK_IDS):
        if row != 2:
            assert _nearest(reopened, VECTORS[row], top_k=1) == [chunk_id]
    for exact_filter_max_rows, exact_filter_max_share in ((0, 0.0), (10_000, 0.25)):
        reopened.exact_filter_max_rows, reopened.exact_filter_max_share = exact_filter_max_rows, exact_filter_max_share
        for spec in [*FAR_ONLY_FILTERS, *MULTI_FILTERS]:
            filters = parse_filters(spec)
            expected = [cid for cid, _ in brute_force(FAR_QUERY, filters, top_k=3) if cid != CHUNK_IDS[2]]
            assert _nearest(reopened, FAR_QUERY, top_k=3, filters=filters)[: len(expected)] == expected[:3], spec


@pytest.mark.parametrize("kind", APPROXIMATE)
def test_approximate_replacing_a_vector_serves_the_new_one_only(tmp_path, kind):
    store = _approximate(tmp_path / "hnsw", kind)
    moved = VECTORS[FAR]  # chunk 0 now points where FAR is
    store.upsert_dense([PAYLOADS[0]], moved[None, :])
    assert store.tombstones == 1 and store.count() == len(CHUNK_IDS)
    found = store.search_dense(moved, top_k=len(CHUNK_IDS))
    assert [hit.chunk_id for hit in found].count(CHUNK_IDS[0]) == 1
    assert {hit.chunk_id for hit in found[:2]} == {CHUNK_IDS[0], CHUNK_IDS[FAR]}
    assert CHUNK_IDS[0] not in _nearest(store, VECTORS[0], top_k=1)


@pytest.mark.parametrize("kind", APPROXIMATE)
def test_approximate_index_is_rebuilt_once_tombstones_pass_the_compaction_share(tmp_path, kind):
    store = _approximate(tmp_path / "hnsw", kind)
    store.delete(CHUNK_IDS[:2])  # 2 of 12: below the share, kept as tombstones
    store.finalize()
    assert FaissDenseStore.open(tmp_path / "hnsw").tombstones == 2
    store.delete(CHUNK_IDS[2:4])  # 4 of 12 is above it: the save compacts
    store.finalize()
    compacted = FaissDenseStore.open(tmp_path / "hnsw")
    assert (compacted.tombstones, compacted.count()) == (0, len(CHUNK_IDS) - 4)
    for row in range(4, len(CHUNK_IDS)):
        assert _nearest(compacted, VECTORS[row], top_k=1) == [CHUNK_IDS[row]]
    assert FaissDenseStore.stored_payloads(tmp_path / "hnsw") == dict(zip(CHUNK_IDS[4:], PAYLOADS[4:], strict=True))


@pytest.mark.parametrize("kind", APPROXIMATE)
def test_approximate_copy_keeps_the_base_untouched(tmp_path, kind):
    _approximate(tmp_path / "base", kind).close()
    copy = FaissDenseStore.open_copy(tmp_path / "base", tmp_path / "copy")
    copy.delete([CHUNK_IDS[5]])
    copy.finalize()
    base = FaissDenseStore.open(tmp_path / "base")
    assert base.tombstones == 0 and _nearest(base, VECTORS[5], top_k=1) == [CHUNK_IDS[5]]
    assert FaissDenseStore.open(tmp_path / "copy").tombstones == 1


def _ivf(path, vectors, payloads, lists=16, probes=1):
    store = FaissDenseStore.create(path, DIM, index_type="ivf", ivf_lists=lists, ivf_probes=probes)
    store.upsert_dense(payloads, vectors)
    store.finalize()
    return store


def test_an_ivf_query_scans_its_ivf_probes_nearest_cells(tmp_path):
    vectors, payloads, queries = _tenant_corpus(3_000, tenant_every=10)
    every_cell = _ivf(tmp_path / "all", vectors, payloads, probes=16)
    one_cell = _ivf(tmp_path / "one", vectors, payloads, probes=1)
    exact = [_exact_top(vectors, payloads, q, "small") for q in queries]
    exact_all = [[payloads[i]["chunk_id"] for i in np.argsort(-(vectors @ (q / np.linalg.norm(q))))[:10]]
                 for q in queries]
    assert [_nearest(every_cell, q, top_k=10) for q in queries] == exact_all
    # Random vectors spread a query's neighbours over many cells: one cell misses some of them.
    assert [_nearest(one_cell, q, top_k=10) for q in queries] != exact_all
    reopened = FaissDenseStore.open(tmp_path / "one")
    assert (reopened.index_type, reopened.ivf_probes) == ("ivf", 1)
    # A 10 % tenant is scanned exactly, every cell, whatever ivf_probes says.
    assert [_nearest(reopened, q, top_k=10, filters=parse_filters({"tenant_id": "small"})) for q in queries] == exact


def test_a_wide_filter_on_ivf_scans_cells_raised_by_its_share(tmp_path):
    vectors, payloads, queries = _tenant_corpus(3_000, tenant_every=2)
    store = _ivf(tmp_path / "ivf", vectors, payloads, probes=4)
    store.exact_filter_max_rows = 0
    filters = parse_filters({"tenant_id": "small"})  # half the rows: above the exact share, 8 cells scanned
    recall = [
        len(set(_nearest(store, q, top_k=10, filters=filters)) & set(_exact_top(vectors, payloads, q, "small"))) / 10
        for q in queries
    ]
    store.ivf_probes = 8  # what the filtered search above scanned, unfiltered
    unfiltered = []
    for q in queries:
        exact = [payloads[i]["chunk_id"] for i in np.argsort(-(vectors @ (q / np.linalg.norm(q))))[:10]]
        unfiltered.append(len(set(_nearest(store, q, top_k=10)) & set(exact)) / 10)
    assert np.mean(recall) >= 0.8 and np.mean(recall) >= np.mean(unfiltered) - 0.1, (recall, unfiltered)


def test_an_ivf_index_is_trained_before_its_first_vector_and_keeps_its_cells(tmp_path):
    vectors, payloads, queries = _tenant_corpus(600, tenant_every=10)
    store = FaissDenseStore.create(tmp_path / "ivf", DIM, index_type="ivf", ivf_lists=8, ivf_probes=8)
    assert not store.is_trained
    with pytest.raises(ValueError, match="8 IVF cells need 8 training vectors, got 3"):
        store.train(vectors[:3])
    store.train(vectors[::2])
    cells = faiss_cells(store)
    store.upsert_dense(payloads, vectors)
    store.delete([p["chunk_id"] for p in payloads[:300]])  # half: the save compacts
    store.close()
    compacted = FaissDenseStore.open(tmp_path / "ivf")
    assert compacted.tombstones == 0 and np.array_equal(faiss_cells(compacted), cells)
    live = vectors[300:]
    for q in queries:
        expected = [payloads[300 + i]["chunk_id"] for i in np.argsort(-(live @ (q / np.linalg.norm(q))))[:5]]
        assert _nearest(compacted, q, top_k=5) == expected


def test_an_ivf_index_of_float16_vectors_finds_what_float32_finds_in_half_the_file(tmp_path):
    vectors, payloads, queries = _tenant_corpus(3_000, tenant_every=10)
    stores = {}
    for vectors_as in ("float32", "float16"):
        store = FaissDenseStore.create(
            tmp_path / vectors_as, DIM, index_type="ivf", ivf_lists=16, ivf_probes=16, ivf_vectors=vectors_as
        )
        store.upsert_dense(payloads, vectors)
        store.delete([p["chunk_id"] for p in payloads[:1_000]])  # a third: the save compacts, keeping the codes
        store.close()
        stores[vectors_as] = FaissDenseStore.open(tmp_path / vectors_as)
    half = stores["float16"]
    assert read_manifest(tmp_path / "float16", "faiss")[1]["ivf_vectors"] == "float16" and half.tombstones == 0
    inner = store_module.faiss.downcast_index(half._index.index)
    assert isinstance(inner, store_module.faiss.IndexIVFScalarQuantizer) and inner.code_size == 2 * DIM
    sizes = {name: (tmp_path / name / "index.faiss").stat().st_size for name in stores}
    # Two bytes less per number of the 2,000 live vectors, give or take the headers.
    assert abs(sizes["float32"] - sizes["float16"] - 2_000 * DIM * 2) < 1_000, sizes
    found = [(_nearest(stores["float32"], q, top_k=10), _nearest(half, q, top_k=10)) for q in queries]
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in found]) >= 0.95
    with pytest.raises(ValueError, match="ivf_vectors must be one of"):
        FaissDenseStore.create(tmp_path / "bad", DIM, index_type="ivf", ivf_vectors="int8")  # type: ignore[arg-type]


def test_an_ivf_index_saved_before_the_setting_stays_float32(tmp_path):
    vectors, payloads, _ = _tenant_corpus(600, tenant_every=10)
    store = _ivf(tmp_path / "old", vectors, payloads, lists=4, probes=4)
    manifest_path = tmp_path / "old" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["ivf_vectors"]
    manifest_path.write_text(json.dumps(manifest))
    store.close()
    reopened = FaissDenseStore.open(tmp_path / "old")
    reopened.delete([p["chunk_id"] for p in payloads[:400]])  # compacted into a new index of the manifest's kind
    reopened.close()
    compacted = FaissDenseStore.open(tmp_path / "old")  # held: it owns the index looked into
    assert isinstance(store_module.faiss.downcast_index(compacted._index.index), store_module.faiss.IndexIVFFlat)


def faiss_cells(store):
    ivf = store_module.faiss.extract_index_ivf(store._index)
    return ivf.quantizer.reconstruct_n(0, ivf.nlist)


def test_deleting_rows_keeps_the_saved_payloads_in_the_file_and_in_order(tmp_path, monkeypatch):
    # Batches of three, so the deleted rows cut runs inside and across batches.
    monkeypatch.setattr(store_module, "PAYLOAD_BATCH_ROWS", 3)
    base, copy = tmp_path / "base", tmp_path / "copy"
    with FaissDenseStore.create(base, DIM) as store:
        store.upsert_dense(PAYLOADS, VECTORS)
    store = FaissDenseStore.open_copy(base, copy)
    gone = {CHUNK_IDS[0], CHUNK_IDS[2], CHUNK_IDS[3], CHUNK_IDS[-1]}
    allocated = pa.total_allocated_bytes()
    store.delete(sorted(gone))
    assert pa.total_allocated_bytes() <= allocated  # no payload text read into memory
    kept = [payload for chunk_id, payload in zip(CHUNK_IDS, PAYLOADS, strict=True) if chunk_id not in gone]
    assert list(store._payloads) == kept
    store.upsert_dense(PAYLOADS[:1], VECTORS[:1])
    assert [parse_payload(store._payloads.text(row)) for row in range(len(kept) + 1)] == [*kept, PAYLOADS[0]]
    store.finalize()
    assert FaissDenseStore.stored_payloads(copy) == {
        **{chunk_id: payload for chunk_id, payload in zip(CHUNK_IDS, PAYLOADS, strict=True) if chunk_id not in gone},
        CHUNK_IDS[0]: PAYLOADS[0],
    }


def _files(path) -> list[dict]:
    return read_manifest(path, FaissDenseStore.backend)[1]["payload_files"]


def test_a_save_writes_only_the_rows_added_and_links_the_files_it_keeps(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "PAYLOAD_BATCH_ROWS", 3)
    base, copy = tmp_path / "base", tmp_path / "copy"
    with FaissDenseStore.create(base, DIM) as store:
        store.upsert_dense(PAYLOADS, VECTORS)
    [base_file] = _files(base)
    store = FaissDenseStore.open_copy(base, copy)
    changed = {**PAYLOADS[1], "year": 1999}
    store.delete([CHUNK_IDS[4]])
    store.upsert_dense([changed], VECTORS[1:2])
    with monkeypatch.context() as patched:  # the saved rows' texts are not read to be saved
        patched.setattr(store_module._SavedTexts, "_bytes", lambda *_: pytest.fail("a saved payload was read"))
        store.finalize()
    kept, added = _files(copy)
    # The base's file, linked, less the deleted row and the changed one's old row; the changed row, new.
    assert kept == {**base_file, "removed": [1, 4]} and (added["rows"], added["removed"]) == (1, [])
    assert (copy / kept["name"]).stat().st_ino == (base / base_file["name"]).stat().st_ino
    expected = {**dict(zip(CHUNK_IDS, PAYLOADS, strict=True)), CHUNK_IDS[1]: changed}
    del expected[CHUNK_IDS[4]]
    assert FaissDenseStore.stored_payloads(copy) == expected
    assert _batched_payloads(copy) == expected
    # Payloads by id, from either file; a removed row is not found.
    assert FaissDenseStore.stored_payloads(copy, {CHUNK_IDS[1], CHUNK_IDS[4]}) == {CHUNK_IDS[1]: changed}
    assert FaissDenseStore.stored_payloads(copy, {CHUNK_IDS[0]}) == {CHUNK_IDS[0]: PAYLOADS[0]}
    reopened = FaissDenseStore.open(copy)
    assert reopened.chunk_ids() == set(expected)
    assert reopened.search_dense(VECTORS[1], top_k=1)[0].payload == changed
    year = parse_filters({"year": {"lte": 1999}})
    assert [h.chunk_id for h in reopened.search_dense(VECTORS[1], top_k=3, filters=year)] == [CHUNK_IDS[1]]
    # A save in place after that one adds one more file and leaves the two.
    reopened.upsert_dense(PAYLOADS[4:5], VECTORS[4:5])
    reopened.finalize()
    assert [entry["name"] for entry in _files(copy)][:2] == [kept["name"], added["name"]]
    assert FaissDenseStore.stored_payloads(copy) == {**expected, CHUNK_IDS[4]: PAYLOADS[4]}
    assert FaissDenseStore.stored_payloads(base) == dict(zip(CHUNK_IDS, PAYLOADS, strict=True))


def test_payload_files_are_written_as_one_past_too_many_files_or_removed_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "MAX_PAYLOAD_FILES", 3)
    path = tmp_path / "faiss"
    with FaissDenseStore.create(path, DIM) as store:
        store.upsert_dense(PAYLOADS, VECTORS)
    for n in range(3):
        with FaissDenseStore.open(path) as store:
            store.upsert_dense([{**PAYLOADS[n], "round": n}], VECTORS[n : n + 1])
    files = _files(path)
    assert len(files) == 1 and files[0]["rows"] == len(PAYLOADS)  # the third save would have made 4
    assert sorted(p.name for p in path.glob("payloads*")) == [files[0]["name"]]  # the others deleted
    revised = {CHUNK_IDS[n]: {**PAYLOADS[n], "round": n} for n in range(3)}
    expected = dict(zip(CHUNK_IDS, PAYLOADS, strict=True)) | revised
    assert FaissDenseStore.stored_payloads(path) == expected
    # Deleting over a quarter of the rows writes the live ones into one file too.
    with FaissDenseStore.open(path) as store:
        store.delete(CHUNK_IDS[: len(CHUNK_IDS) // 3])
    [entry] = _files(path)
    assert (entry["rows"], entry["removed"]) == (len(CHUNK_IDS) - len(CHUNK_IDS) // 3, [])


def test_a_store_saved_with_one_payload_file_is_read_and_extended(tmp_path):
    path = tmp_path / "faiss"
    with FaissDenseStore.create(path, DIM) as store:
        store.upsert_dense(PAYLOADS, VECTORS)
    _saved_as_one_payload_file(path)
    assert FaissDenseStore.stored_payloads(path) == dict(zip(CHUNK_IDS, PAYLOADS, strict=True))
    with FaissDenseStore.open(path) as store:
        store.delete([CHUNK_IDS[0]])
    assert _files(path) == [{"name": PAYLOAD_FILE, "rows": len(PAYLOADS), "removed": [0]}]
    assert FaissDenseStore.open(path).chunk_ids() == set(CHUNK_IDS[1:])

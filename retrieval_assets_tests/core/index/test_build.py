"""The seal's view of what each embedded backend holds (real stores, seeded vectors, no models):
a backend whose index step recorded exactly the build's chunk ids is not opened again; any other
is listed, so a disagreement still names what is missing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tantivy

from retrieval_assets.core.embed.vectors import dense_matrix
from retrieval_assets.core.index import build as build_module
from retrieval_assets.core.index import facets as facets_module
from retrieval_assets.core.index.build import (
    IndexConsistencyError,
    backend_chunk_ids,
    backend_differences,
    build_faiss_index,
    build_fingerprint,
    build_lexical_index,
    build_qdrant_index,
    checked_backend_chunk_ids,
    chunk_table,
    record_candidate_chunks,
    record_listed_chunk_ids,
    seal_candidate,
)
from retrieval_assets.core.index.layout import read_build_manifest
from retrieval_assets.core.index.points import PointTables
from retrieval_assets.core.index.versions import IndexVersion, IndexVersions
from retrieval_assets.core.io.parted import table_path
from retrieval_assets.core.io.tables import write_parquet
from retrieval_assets.core.settings import DenseIndexSettings
from retrieval_assets.core.stores.base import read_manifest
from retrieval_assets.core.stores.faiss.store import FaissDenseStore
from retrieval_assets.core.stores.qdrant.edge import QdrantEdgeStore
from retrieval_assets.core.stores.tantivy.store import INDEX_DIR, TantivyLexicalStore
from retrieval_assets_tests.core.index.test_delta import _chunks, _vectors

STORES = (FaissDenseStore, QdrantEdgeStore, TantivyLexicalStore)


@pytest.fixture
def built(tmp_path: Path) -> tuple[IndexVersion, pd.DataFrame]:
    """An unsealed candidate with all three embedded indexes written, no listing recorded."""
    chunks = _chunks()
    version = IndexVersions(tmp_path / "indexes").candidate(build_fingerprint(chunk_table(chunks), settings="s"))
    dense, sparse = _vectors(chunks)
    tables = PointTables.in_memory(chunks, dense, sparse)
    build_faiss_index(version.layout.faiss, tables, "dense-model").close()
    build_qdrant_index(version.layout.qdrant, tables, "dense-model", "sparse-model").close()
    build_lexical_index(version.layout.lexical, chunks).close()
    return version, chunks


def _record_all(version: IndexVersion, ids: set[str]) -> None:
    for path in (version.layout.faiss, version.layout.qdrant, version.layout.lexical):
        record_listed_chunk_ids(path, ids)


def test_recorded_listings_of_the_build_are_not_listed_again(built, monkeypatch) -> None:
    version, chunks = built
    expected = set(chunks["chunk_id"])
    _record_all(version, expected)
    for store_type in STORES:
        monkeypatch.setattr(store_type, "open", classmethod(lambda cls, path: pytest.fail(f"{cls.__name__} opened")))
    assert checked_backend_chunk_ids(version, expected) == {"faiss": expected, "qdrant": expected, "tantivy": expected}


def test_backends_without_a_matching_listing_are_listed(built) -> None:
    version, chunks = built
    expected = set(chunks["chunk_id"])
    assert checked_backend_chunk_ids(version, expected) == backend_chunk_ids(version)

    # A listing recorded before tantivy lost a chunk no longer describes the build's chunk ids.
    _record_all(version, expected - {"default/d0#0"})
    with TantivyLexicalStore.open(version.layout.lexical) as store:
        store.delete(["default/d0#0"])
    held = checked_backend_chunk_ids(version, expected)
    assert backend_differences(held, expected)["tantivy"] == {"missing": 1, "unexpected": 0}
    assert held["faiss"] == held["qdrant"] == expected


def test_the_seal_checks_the_backends_against_the_candidates_chunk_table(built) -> None:
    version, chunks = built
    versions = IndexVersions(version.path.parent.parent)
    record_candidate_chunks(version, chunk_table(chunks))
    held = backend_chunk_ids(version)
    # A backend short of one chunk of the table: the version is not sealed.
    with pytest.raises(IndexConsistencyError, match="'tantivy': {'missing': 1, 'unexpected': 0}"):
        seal_candidate(versions, version, "fingerprint", {**held, "tantivy": held["tantivy"] - {"default/d0#0"}})
    assert not version.sealed
    manifest = seal_candidate(versions, version, "fingerprint", held)
    assert version.sealed and (manifest["chunks"], manifest["documents"]) == (len(chunks), chunks["doc_id"].nunique())


@pytest.mark.parametrize(
    ("extra", "approximate_index", "index_type"), [(0, "ivf", "ivf"), (0, "hnsw", "hnsw"), (1, "ivf", "flat")]
)
def test_a_version_of_approximate_from_chunks_chunks_or_more_gets_the_approximate_index(
    tmp_path: Path, extra, approximate_index, index_type
) -> None:
    chunks = _chunks()
    dense, _ = _vectors(chunks)
    settings = DenseIndexSettings(
        approximate_from_chunks=len(chunks) + extra,
        approximate_index=approximate_index,
        hnsw_m=8,
        hnsw_ef_search=16,
        ivf_lists=2,
        ivf_probes=2,
    )
    tables = PointTables.in_memory(chunks, dense)
    store = build_faiss_index(tmp_path / "faiss", tables, "dense-model", dense_index=settings)
    store.close()
    reopened = FaissDenseStore.open(tmp_path / "faiss")
    assert (reopened.index_type, read_build_manifest(tmp_path / "faiss")["index_type"]) == (index_type, index_type)
    if index_type == "hnsw":
        assert reopened.ef_search == 16
    if index_type == "ivf":
        assert reopened.is_trained and reopened.ivf_probes == 2
    # Every chunk is its own nearest neighbour, whichever index holds it.
    for chunk_id in chunks["chunk_id"]:
        assert reopened.search_dense(dense_matrix(dense, [chunk_id])[0], 1)[0].chunk_id == chunk_id


def test_ivf_cells_follow_the_chunk_count_unless_set() -> None:
    settings = DenseIndexSettings()
    counts = (0, 20, 10_000, 100_000, 200_000, 1_000_000)
    assert [settings.lists_for(n) for n in counts] == [1, 1, 256, 1024, 2048, 4096]
    assert DenseIndexSettings(ivf_lists=7).lists_for(1_000_000) == 7


def test_an_ivf_training_sample_is_drawn_from_every_slice(tmp_path: Path, monkeypatch) -> None:
    chunks = _chunks()
    dense, _ = _vectors(chunks)
    tables = PointTables.in_memory(chunks, dense)
    monkeypatch.setattr(build_module, "FAISS_SLICE_ROWS", 2)
    every = dense_matrix(dense, chunks["chunk_id"].tolist())
    assert np.array_equal(build_module.training_sample(tables, len(chunks)), every)
    drawn = build_module.training_sample(tables, len(chunks) // 2, seed=1)
    assert 0 < len(drawn) < len(chunks)


def test_a_build_written_in_slices_equals_one_written_at_once(tmp_path: Path, monkeypatch) -> None:
    chunks = _chunks()
    dense, sparse = _vectors(chunks)
    tables = PointTables.in_memory(chunks, dense, sparse)
    whole = build_faiss_index(tmp_path / "whole", tables, "dense-model")
    field_types, dim, batches = build_module.point_batches(tables, rows=len(chunks))
    monkeypatch.setattr(build_module, "FAISS_SLICE_ROWS", 2)
    sliced = build_faiss_index(tmp_path / "sliced", tables, "dense-model")
    assert len(chunks) > 2 and sliced.chunk_ids() == whole.chunk_ids()
    query = dense_matrix(dense, [chunks["chunk_id"].iloc[0]])[0]
    assert sliced.search_dense(query, 5) == whole.search_dense(query, 5)
    assert FaissDenseStore.stored_payloads(tmp_path / "sliced") == FaissDenseStore.stored_payloads(tmp_path / "whole")

    small_types, small_dim, small_batches = build_module.point_batches(tables, rows=2)
    assert (small_types, small_dim) == (field_types, dim) and dim == whole.dim
    [(payloads, matrix, vectors)] = list(batches)
    parts = list(small_batches)
    assert [p for part in parts for p in part[0]] == payloads
    assert np.array_equal(np.vstack([part[1] for part in parts]), matrix)
    assert [v for part in parts for v in part[2]] == vectors


def test_a_lexical_build_from_a_stored_table_in_slices_and_tenant_groups_equals_one_batch(
    tmp_path: Path, monkeypatch
) -> None:
    chunks = _chunks()
    chunks["tenant_id"] = [f"t{n % 5}" for n in range(len(chunks))]  # interleaved, as a table's sources are
    whole = build_lexical_index(tmp_path / "whole", chunks)
    write_parquet(chunks, tmp_path / "chunks.parquet")
    # Slices of 3 rows, and 3 passes of at most 2 tenants each.
    monkeypatch.setattr(build_module, "LEXICAL_SLICE_ROWS", 3)
    monkeypatch.setattr(build_module, "MAX_OPEN_WRITERS", 2)
    sliced = build_lexical_index(tmp_path / "sliced", table_path(tmp_path / "chunks.parquet"))
    assert sliced.count() == whole.count() == len(chunks)
    for query in ("reads genomes", "variants seeds", "assembly tool 7"):
        assert sliced.search_text(query, 10) == whole.search_text(query, 10)
    assert read_build_manifest(tmp_path / "sliced") == read_build_manifest(tmp_path / "whole")
    # Each tenant's writer opened once: one segment each, as the one batch made.
    _, manifest = read_manifest(tmp_path / "sliced", TantivyLexicalStore.backend)
    assert len(manifest["tenant_dirs"]) == 5
    for name in manifest["tenant_dirs"].values():
        assert tantivy.Index.open(str(tmp_path / "sliced" / INDEX_DIR / name)).searcher().num_segments == 1


def _facets_of(payloads: list[dict], fields: list[str], limit: int) -> dict[str, list[str]]:
    """The facets by their definition: each field's distinct values over ``payloads``, when 1 to ``limit``."""
    values: dict[str, set[str]] = {field: set() for field in fields}
    for payload in payloads:
        for field in fields:
            value = payload.get(field)
            if value is not None:
                values[field].update(str(v) for v in (value if isinstance(value, list) else [value]))
    return {field: sorted(seen) for field, seen in values.items() if 0 < len(seen) <= limit}


def test_keyword_facets_in_one_pass_are_each_tenants_and_every_payloads_distinct_values(monkeypatch) -> None:
    monkeypatch.setattr(facets_module, "MAX_FACET_VALUES", 5)
    rng = np.random.default_rng(0)
    payloads = [
        {
            "tenant_id": tenant,
            "venue": f"v{rng.integers(3)}",  # few values in each tenant and over all
            "year": int(rng.integers(2000, 2003)) if rng.random() < 0.8 else None,  # ints, and gaps
            "authors": [f"a{rng.integers(4)}" for _ in range(2)],  # lists
            "doc_id": f"{tenant}-{n}",  # a value per payload: too many everywhere
            "lab": f"{tenant}-lab{n % 3}",  # 3 per tenant, 6 over both: too many over all only
            "rare": "x" if n == 7 else [],  # one value, once; empty lists elsewhere
        }
        for n in range(40)
        for tenant in ("alpha", "beta")
    ]
    fields = ["venue", "year", "authors", "doc_id", "lab", "rare", "absent"]
    types = {field: "keyword" for field in fields} | {"n": "integer"}
    counts = facets_module.count_facets(payloads, types)  # type: ignore[arg-type]
    overall, per_tenant = counts.facets(facets_module.keyword_fields(types))  # type: ignore[arg-type]
    assert overall == _facets_of(payloads, fields, 5)
    assert set(overall) == {"venue", "year", "authors", "rare"}
    for tenant in ("alpha", "beta"):
        assert per_tenant[tenant] == _facets_of([p for p in payloads if p["tenant_id"] == tenant], fields, 5)
    assert set(per_tenant["alpha"]) == {"venue", "year", "authors", "lab", "rare"}

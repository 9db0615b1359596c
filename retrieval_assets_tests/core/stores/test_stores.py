"""Contract tests for the embedded index stores (FAISS, Qdrant Edge, tantivy).

Small hand-made corpus with seeded random vectors. Document ``FAR`` is the only one with
a set of unique metadata values and is as far as possible from the dense query used in
the filter tests, so a filter applied after a top-k cut would lose it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from retrieval_assets.core.stores.filters import FilterError, MetadataFilter, matches_all, parse_filters
from retrieval_assets.core.models import SparseVector
from retrieval_assets.core.stores.base import (
    DenseStore,
    coerce_filter_values,
    infer_field_types,
    parse_payload,
)
from retrieval_assets.core.stores.faiss_store import FaissDenseStore, PayloadColumns
from retrieval_assets.core.stores.qdrant_edge_store import QdrantEdgeStore, ShardBusyError
from retrieval_assets.core.stores.tantivy_store import TantivyLexicalStore

DIM = 16
FAR = 11
TEXTS = [
    ("Vector search", "Approximate nearest neighbour search with HNSW graphs is a common technique."),
    ("Running BM25", "Runners rank documents with BM25; the common trick is stemming words."),
    ("Sparse retrieval", "SPLADE learns sparse term weights, a common choice for hybrid search."),
    ("Dagster assets", "Software-defined assets describe data pipelines; common in data teams."),
    ("Quantization", "Scalar quantization shrinks vectors to int8, a common memory saving."),
    ("Tokenizers", "Word pieces split rare words into common sub-word units."),
    ("Cross encoders", "A cross-encoder reranks the top candidates; common in two-stage retrieval."),
    ("Evaluation", "nDCG and recall measure ranking quality on common benchmarks."),
    ("Chunking", "Long documents are split into overlapping chunks, a common preprocessing step."),
    ("Filters", "Metadata filters restrict search to one tenant, a common requirement."),
    ("Fusion", "Reciprocal rank fusion merges ranked lists; common and robust."),
    ("Gardening", "Tomatoes need sun, water and patience; pruning suckers early helps the plant "
     "grow strong stems and sweet fruit through a long summer, a common garden lesson."),
]
LICENSES = ["MIT", "Apache-2.0", "GPL-3.0"]
FIELD_TYPES = {
    "license": "keyword",
    "tags": "keyword",
    "year": "integer",
    "stars": "float",
    "open_source": "bool",
}


def make_payloads() -> list[dict]:
    payloads = []
    for i, (title, text) in enumerate(TEXTS):
        far = i == FAR
        payloads.append(
            {
                "doc_id": f"d{i}",
                "chunk_id": f"d{i}#0",
                "tenant_id": "initech" if far else ("acme" if i % 2 == 0 else "globex"),
                "section": "abstract" if i % 3 == 0 else "body",
                "title": title,
                "text": text,
                "license": "WTFPL" if far else LICENSES[i % 3],
                "tags": ["rare", "garden"] if far else ["search", f"topic{i % 4}"],
                "year": 2030 if far else 2010 + i,
                "stars": 99.5 if far else 0.5 * i + 0.25,
                "open_source": not far,
            }
        )
    return payloads


PAYLOADS = make_payloads()
CHUNK_IDS = [p["chunk_id"] for p in PAYLOADS]
_rng = np.random.default_rng(7)
VECTORS = _rng.standard_normal((len(TEXTS), DIM)).astype(np.float32)
VECTORS /= np.linalg.norm(VECTORS, axis=1, keepdims=True)
# Exactly opposite FAR: FAR is the last of all documents for this query.
FAR_QUERY = -VECTORS[FAR]

# Filters that only FAR passes.
FAR_ONLY_FILTERS = [
    {"tenant_id": "initech"},
    {"license": ["WTFPL", "no-such-license"]},
    {"tags": "rare"},
    {"year": {"gte": 2025}},
    {"stars": {"gte": 50, "lte": 100}},
    {"open_source": False},
]
# Filters with several matches, compared with brute force.
MULTI_FILTERS = [
    {"tenant_id": "acme"},
    {"license": ["MIT", "GPL-3.0"], "year": {"lte": 2016}},
    {"stars": {"gte": 1.0, "lte": 3.0}},
    {"open_source": True, "tenant_id": "globex"},
    {"tags": ["topic1", "topic3"], "section": "body"},
]


def brute_force(query: np.ndarray, filters: list[MetadataFilter], top_k: int) -> list[tuple[str, float]]:
    scores = VECTORS @ (query / np.linalg.norm(query))
    ranked = sorted(
        ((CHUNK_IDS[i], float(scores[i])) for i in range(len(PAYLOADS)) if matches_all(PAYLOADS[i], filters)),
        key=lambda pair: -pair[1],
    )
    return ranked[:top_k]


# -- dense contract -----------------------------------------------------------------------

DENSE_KINDS = ["faiss-flat", "faiss-hnsw", "qdrant-edge"]


def create_dense(kind: str, path: Path, dim: int = DIM, overwrite: bool = False) -> DenseStore:
    if kind == "faiss-flat":
        return FaissDenseStore.create(path, dim, overwrite=overwrite)
    if kind == "faiss-hnsw":
        return FaissDenseStore.create(path, dim, index_type="hnsw", hnsw_m=8, overwrite=overwrite)
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


# -- qdrant-edge sparse and hybrid ---------------------------------------------------------

COMMON_TERM = 0


def make_sparse() -> list[SparseVector]:
    """Five random terms per document, plus a low-weight term that every document shares."""
    rng = np.random.default_rng(11)
    vectors = []
    for _ in PAYLOADS:
        terms = rng.choice(np.arange(1, 60), size=5, replace=False)
        weights = rng.uniform(0.5, 2.0, size=5)
        vectors.append(
            SparseVector(indices=[COMMON_TERM, *map(int, terms)], values=[0.01, *map(float, weights)])
        )
    return vectors


SPARSE = make_sparse()


def sparse_dot(a: SparseVector, b: SparseVector) -> float:
    weights = dict(zip(a.indices, a.values, strict=True))
    return sum(weights.get(i, 0.0) * v for i, v in zip(b.indices, b.values, strict=True))


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


# -- tantivy ------------------------------------------------------------------------------


@pytest.fixture
def lexical(tmp_path):
    store = TantivyLexicalStore.create(tmp_path / "tantivy", field_types=FIELD_TYPES)
    store.add(PAYLOADS)
    store.finalize()
    holder = {"store": store}
    yield tmp_path / "tantivy", holder
    holder["store"].close()


def test_tantivy_bm25_with_stemming(lexical):
    store = lexical[1]["store"]
    hits = store.search_text("running runner", top_k=3)
    assert hits[0].chunk_id == CHUNK_IDS[1]  # "Running" in the title, "Runners" in the text
    assert hits[0].payload == PAYLOADS[1]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert store.search_text("tomato", top_k=1)[0].chunk_id == CHUNK_IDS[FAR]


def test_tantivy_count_and_chunk_ids(lexical):
    store = lexical[1]["store"]
    assert store.count() == len(PAYLOADS)
    assert store.chunk_ids() == set(CHUNK_IDS)


@pytest.mark.parametrize(
    "query",
    [
        'C++ (foo) AND "bar',
        "title:x",
        "text:common^3",
        "*",
        ")(",
        "AND OR NOT",
        '"',
        "\\",
        "a:b:c",
        "[1 TO 2}",
        "-search +vector~2",
    ],
)
def test_tantivy_query_syntax_is_plain_text(lexical, query):
    hits = lexical[1]["store"].search_text(query, top_k=5)
    assert isinstance(hits, list)


def test_tantivy_syntax_characters_are_searched_as_words(lexical):
    store = lexical[1]["store"]
    assert store.search_text('"nearest (neighbour" AND', top_k=1)[0].chunk_id == CHUNK_IDS[0]
    assert store.search_text("title:tomatoes", top_k=1)[0].chunk_id == CHUNK_IDS[FAR]


@pytest.mark.parametrize("query", ["", "   ", "!!! ??? ...", "+-&&||!(){}[]^\"~*?:\\/"])
def test_tantivy_query_without_terms_returns_empty(lexical, query):
    assert lexical[1]["store"].search_text(query, top_k=5) == []


@pytest.mark.parametrize("spec", FAR_ONLY_FILTERS, ids=lambda spec: next(iter(spec)))
def test_tantivy_filter_is_applied_inside_search(lexical, spec):
    store = lexical[1]["store"]
    # "common" is in every text; FAR's text is the longest, so BM25 ranks it last.
    assert store.search_text("common", top_k=len(PAYLOADS))[-1].chunk_id == CHUNK_IDS[FAR]
    hits = store.search_text("common", top_k=1, filters=parse_filters(spec))
    assert [h.chunk_id for h in hits] == [CHUNK_IDS[FAR]]
    assert hits[0].score > 0


@pytest.mark.parametrize("spec", MULTI_FILTERS, ids=str)
def test_tantivy_filters_select_exactly_the_matching_docs(lexical, spec):
    store = lexical[1]["store"]
    filters = parse_filters(spec)
    hits = store.search_text("common", top_k=len(PAYLOADS), filters=filters)
    assert {h.chunk_id for h in hits} == {p["chunk_id"] for p in PAYLOADS if matches_all(p, filters)}
    unfiltered = {h.chunk_id: h.score for h in store.search_text("common", top_k=len(PAYLOADS))}
    # Filters add nothing to the BM25 score.
    assert [h.score for h in hits] == pytest.approx([unfiltered[h.chunk_id] for h in hits])


def test_tantivy_filter_on_undeclared_field_is_an_error(lexical):
    with pytest.raises(FilterError, match="not a filter field of this index"):
        lexical[1]["store"].search_text("common", top_k=3, filters=parse_filters({"color": "red"}))
    with pytest.raises(FilterError, match="range filter"):
        lexical[1]["store"].search_text("common", top_k=3, filters=parse_filters({"license": {"gte": 1}}))


def test_tantivy_title_boost(tmp_path):
    in_title = dict(PAYLOADS[0], chunk_id="a", title="zebra", text="animals of africa")
    in_text = dict(PAYLOADS[0], chunk_id="b", title="animals", text="zebra of africa")
    flat = TantivyLexicalStore.create(tmp_path / "flat")
    flat.add([in_title, in_text])
    flat.finalize()
    # One content field by default: a title word counts like any other word.
    scores = {h.chunk_id: h.score for h in flat.search_text("zebra", top_k=2)}
    assert scores["a"] == pytest.approx(scores["b"])
    flat.close()
    boosted = TantivyLexicalStore.create(tmp_path / "boost", title_boost=0.5)
    boosted.add([in_title, in_text])
    boosted.close()
    reopened = TantivyLexicalStore.open(tmp_path / "boost")
    assert [h.chunk_id for h in reopened.search_text("zebra", top_k=2)] == ["a", "b"]
    reopened.close()
    with pytest.raises(ValueError, match="title_boost"):
        TantivyLexicalStore.create(tmp_path / "bad", title_boost=-1.0)


def test_tantivy_reopen_and_replace(lexical):
    path, holder = lexical
    filters = parse_filters({"tenant_id": "acme"})
    before = holder["store"].search_text("common search", top_k=5, filters=filters)
    holder["store"].close()
    holder["store"] = store = TantivyLexicalStore.open(path)
    after = store.search_text("common search", top_k=5, filters=filters)
    assert [(h.chunk_id, h.payload) for h in after] == [(h.chunk_id, h.payload) for h in before]
    assert [h.score for h in after] == pytest.approx([h.score for h in before])
    store.add([dict(PAYLOADS[0], text="Graph indexes for zeppelin navigation.")])
    store.finalize()
    assert store.count() == len(PAYLOADS)
    assert store.search_text("zeppelin", top_k=3)[0].chunk_id == CHUNK_IDS[0]
    assert CHUNK_IDS[0] not in {h.chunk_id for h in store.search_text("HNSW", top_k=3)}


def test_tantivy_delete_removes_chunks_after_finalize(lexical):
    path, holder = lexical
    store = holder["store"]
    store.delete([CHUNK_IDS[1], "no-such-chunk#0"])
    assert store.search_text("running", top_k=1)[0].chunk_id == CHUNK_IDS[1]  # not yet committed
    store.finalize()
    store.close()
    holder["store"] = store = TantivyLexicalStore.open(path)
    assert store.count() == len(PAYLOADS) - 1 and store.chunk_ids() == set(CHUNK_IDS) - {CHUNK_IDS[1]}
    assert store.search_text("running runner", top_k=3) == []
    assert store.fetch_documents([PAYLOADS[1]["doc_id"]]) == []


def test_tantivy_one_writer_many_readers(lexical):
    path, holder = lexical
    holder["store"].add([PAYLOADS[0]])  # now holds the index's writer lock
    reader = TantivyLexicalStore.open(path)
    assert reader.count() == len(PAYLOADS)
    with pytest.raises(RuntimeError, match="already has a writer"):
        reader.add([PAYLOADS[1]])
    reader.close()


def test_tantivy_create_refuses_non_empty_dir(lexical):
    path, holder = lexical
    with pytest.raises(FileExistsError):
        TantivyLexicalStore.create(path)


def test_tantivy_filters_on_fields_whose_names_tantivy_rejects(tmp_path):
    # Cleaning flattens nested metadata and tool relations into dotted keys.
    fields = {"relations.requires": "keyword", "payload_json": "keyword", "meta data": "integer"}
    store = TantivyLexicalStore.create(tmp_path / "odd", field_types=fields)
    base = {"section": "body", "title": "", "tenant_id": "t"}
    store.add([
        {**base, "chunk_id": "a#0", "doc_id": "a", "text": "aligner", "relations.requires": ["samtools"], "meta data": 1,
         "payload_json": "x"},
        {**base, "chunk_id": "b#0", "doc_id": "b", "text": "aligner", "relations.requires": ["htslib"], "meta data": 5},
    ])
    store.finalize()
    hits = store.search_text("aligner", 5, parse_filters({"relations.requires": "samtools", "payload_json": "x"}))
    assert [h.payload["doc_id"] for h in hits] == ["a"]
    ranged = store.search_text("aligner", 5, parse_filters({"meta data": {"gte": 2}}))
    assert [h.payload["doc_id"] for h in ranged] == ["b"]
    store.close()
    reopened = TantivyLexicalStore.open(tmp_path / "odd")
    assert [h.payload["doc_id"] for h in reopened.search_text("aligner", 5, parse_filters({"meta data": 1}))] == ["a"]


# -- persistence across processes and shared helpers --------------------------------------


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
        from retrieval_assets.core.stores.faiss_store import FaissDenseStore
        from retrieval_assets.core.stores.qdrant_edge_store import QdrantEdgeStore
        from retrieval_assets.core.stores.tantivy_store import TantivyLexicalStore
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


def test_infer_field_types():
    assert infer_field_types(PAYLOADS) == FIELD_TYPES | {"license": "keyword", "tags": "keyword"}
    mixed = [{"a": 1, "b": 1, "c": True, "d": "x"}, {"a": 2, "b": 2.5, "c": 1, "d": None}]
    assert infer_field_types(mixed) == {"a": "integer", "b": "float", "c": "keyword", "d": "keyword"}


def test_coerce_filter_values():
    assert coerce_filter_values(MetadataFilter(field="y", any_of=["2019", 2020.0]), "integer") == [2019, 2020]
    assert coerce_filter_values(MetadataFilter(field="b", any_of=["false", True]), "bool") == [False, True]
    assert coerce_filter_values(MetadataFilter(field="k", any_of=[1, True]), "keyword") == ["1", "True"]
    with pytest.raises(FilterError, match="expects integer"):
        coerce_filter_values(MetadataFilter(field="y", any_of=["abc"]), "integer")


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


def test_payloads_with_nan_survive_the_faster_parser(tmp_path):
    """``json.dumps`` writes NaN, which orjson refuses: ``parse_payload`` reads it all the same."""
    payloads = [{**PAYLOADS[0], "score": float("nan"), "bound": float("inf")}]
    store = FaissDenseStore.create(tmp_path / "faiss", DIM)
    store.upsert_dense(payloads, VECTORS[:1])
    store.finalize()
    store.close()
    stored = FaissDenseStore.stored_payloads(tmp_path / "faiss")[payloads[0]["chunk_id"]]
    assert np.isnan(stored["score"]) and stored["bound"] == float("inf")
    assert parse_payload(json.dumps({"a": "é", "b": [1, 2.5]}).encode()) == {"a": "é", "b": [1, 2.5]}

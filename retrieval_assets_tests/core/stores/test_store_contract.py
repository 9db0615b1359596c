"""One contract per port, run over every backend that implements it.

- dense: faiss, qdrant-edge, qdrant-client-local, qdrant-server
- sparse: qdrant-edge, qdrant-client-local, qdrant-server, opensearch
- lexical: tantivy, opensearch

Embedded backends always run. ``qdrant-client-local`` is the Qdrant server adapter on
qdrant-client's in-process local mode (``QdrantClient(":memory:")``): the same requests, served
by a pure-Python engine, not a server. ``qdrant-server`` and ``opensearch`` run against real
servers when ``QDRANT_URL`` / ``OPENSEARCH_URL`` are set (credentials from ``QDRANT_API_KEY``,
``OPENSEARCH_USER`` + ``OPENSEARCH_PASSWORD`` or ``OPENSEARCH_API_KEY``, CA file from
``*_CA_CERTS``; see docker/README.md), are marked ``integration`` and are skipped otherwise.
Each server test works in its own uniquely named collection or index and deletes it afterwards.

Vectors come from the texts: the dense "embedding" sums a fixed random vector per word and the
sparse one weights each word's hashed id, so a query's nearest documents are the ones sharing
its words and brute force over the same functions gives the expected ranking.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retrieval_assets.core.models import SparseVector, StoreHit
from retrieval_assets.core.stores.base import IndexStore
from retrieval_assets.core.stores.faiss.store import FaissDenseStore
from retrieval_assets.core.stores.filters import MetadataFilter, matches_all, parse_filters
from retrieval_assets.core.stores.qdrant.edge import QdrantEdgeStore
from retrieval_assets.core.stores.tantivy.store import TAG_SCORE, TantivyLexicalStore

DIM = 32
VOCAB = 30_522
FIELD_TYPES = {"license": "keyword", "tags": "keyword", "year": "integer", "stars": "float", "open_source": "bool"}
# (doc_id, ordinal, tenant, title, text, license, year, stars, open_source, tags)
DOCS = [
    ("hnsw", 0, "acme", "Graph indexes", "HNSW graphs answer approximate nearest neighbour queries quickly.",
     "MIT", 2016, 4.5, True, ["topic:ann"]),
    ("bm25", 0, "acme", "Running BM25", "Runners rank documents with BM25 and stemming of words.",
     "Apache-2.0", 2009, 3.0, True, ["topic:lexical"]),
    ("splade", 0, "globex", "Sparse retrieval", "SPLADE learns sparse term weights for hybrid search.",
     "MIT", 2021, 4.0, True, ["topic:sparse"]),
    ("dagster", 0, "acme", "Data assets", "Software-defined assets describe data pipelines and their lineage.",
     "Apache-2.0", 2019, 2.5, True, []),
    ("quant", 0, "globex", "Quantization", "Scalar quantization shrinks vectors to int8 to save memory.",
     "GPL-3.0", 2018, 3.5, False, ["topic:ann"]),
    ("rerank", 0, "acme", "Cross encoders", "A cross encoder reranks the top candidates of a first search stage.",
     "MIT", 2020, 5.0, True, ["topic:rerank"]),
    ("fusion", 0, "initech", "Rank fusion", "Reciprocal rank fusion merges the ranked lists of hybrid search.",
     "BSD-3-Clause", 2009, 1.5, False, ["topic:fusion"]),
    ("garden", 0, "initech", "Gardening", "Tomatoes need sun, water and patience; pruning helps the plant.",
     "CC-BY-4.0", 2023, 0.5, False, ["topic:garden"]),
    # A document in three chunks, written out of order: "#10" sorts before "#2" as text.
    ("review", 2, "acme", "Search review", "Second part of a review of hybrid search engines.",
     "MIT", 2022, 3.0, True, ["topic:review"]),
    ("review", 10, "acme", "Search review", "Last part of a review of hybrid search engines.",
     "MIT", 2022, 3.0, True, ["topic:review"]),
    ("review", 0, "acme", "Search review", "First part of a review of hybrid search engines.",
     "MIT", 2022, 3.0, True, ["topic:review"]),
]
PAYLOADS = [
    {
        "doc_id": doc_id, "chunk_id": f"{doc_id}#{ordinal}", "tenant_id": tenant, "section": "body",
        "title": title, "text": text, "license": license_, "year": year, "stars": stars,
        "open_source": open_source, "tags": tags,
    }
    for doc_id, ordinal, tenant, title, text, license_, year, stars, open_source, tags in DOCS
]
CHUNK_IDS = [p["chunk_id"] for p in PAYLOADS]
BY_ID = {p["chunk_id"]: p for p in PAYLOADS}

# Filters compared with brute force: tenant, set, range, bool, list field, and combinations.
FILTER_SPECS = [
    {"tenant_id": "acme"},
    {"license": ["MIT", "GPL-3.0"]},
    {"year": {"gte": 2018, "lte": 2021}},
    {"stars": {"gte": 3.0}},
    {"open_source": False},
    {"tags": ["topic:ann", "topic:fusion"]},
    {"tenant_id": ["acme", "initech"], "year": {"lte": 2020}, "license": "MIT"},
]


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _seed(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")


def embed(text: str) -> np.ndarray:
    """A fixed random unit vector per word, summed and normalised: shared words mean closeness."""
    total = np.zeros(DIM, dtype=np.float32)
    for word in words(text):
        total += np.random.default_rng(_seed(word)).standard_normal(DIM).astype(np.float32)
    return total / np.linalg.norm(total)


def sparse_embed(text: str) -> SparseVector:
    """Hashed word id -> (1 + ln tf) x a per-word factor in [0.5, 1.5): few exact ties."""
    counts = Counter(words(text))
    terms = {(_seed(w) % VOCAB): (1 + math.log(n)) * (0.5 + (_seed(w) >> 20) % 1000 / 1000) for w, n in counts.items()}
    indices = sorted(terms)
    return SparseVector(indices=indices, values=[terms[i] for i in indices])


def doc_text(payload: dict[str, Any]) -> str:
    return f"{payload['title']}\n{payload['text']}"


DENSE = np.stack([embed(doc_text(p)) for p in PAYLOADS])
SPARSE = [sparse_embed(doc_text(p)) for p in PAYLOADS]


def dot(a: SparseVector, b: SparseVector) -> float:
    weights = dict(zip(a.indices, a.values, strict=True))
    return sum(weights.get(i, 0.0) * v for i, v in zip(b.indices, b.values, strict=True))


def true_scores(port: str, query: Any) -> dict[str, float]:
    if port == "dense":
        return {cid: float(score) for cid, score in zip(CHUNK_IDS, DENSE @ query, strict=True)}
    return {cid: dot(query, vector) for cid, vector in zip(CHUNK_IDS, SPARSE, strict=True)}


def expected_ranking(port: str, query: Any, filters: list[MetadataFilter], top_k: int) -> list[tuple[str, float]]:
    scores = true_scores(port, query)
    ranked = sorted(
        ((cid, s) for cid, s in scores.items() if matches_all(BY_ID[cid], filters) and (port == "dense" or s > 0)),
        key=lambda pair: -pair[1],
    )
    return ranked[:top_k]


def assert_ranking(
    hits: list[StoreHit], expected: list[tuple[str, float]], scores: dict[str, float], rel: float
) -> None:
    """Same length, same score at each rank, and every hit really has its score: robust to ties,
    strict about order and membership."""
    assert len(hits) == len(expected), ([h.chunk_id for h in hits], expected)
    assert [h.score for h in hits] == pytest.approx([s for _, s in expected], rel=rel, abs=1e-4)
    for hit in hits:
        assert scores[hit.chunk_id] == pytest.approx(hit.score, rel=rel, abs=1e-4), hit.chunk_id
        assert hit.payload == BY_ID[hit.chunk_id]


# -- backends ---------------------------------------------------------------------------------

DENSE_KINDS = ["faiss", "qdrant-edge", "qdrant-client-local", "qdrant-server"]
SPARSE_KINDS = ["qdrant-edge", "qdrant-client-local", "qdrant-server", "opensearch"]
LEXICAL_KINDS = ["tantivy", "opensearch"]
# OpenSearch keeps 9 significant bits of each rank feature; the others compute in float32.
SCORE_REL = {"opensearch": 1e-2}


def _require(variable: str, what: str) -> str:
    value = os.environ.get(variable)
    if not value:
        pytest.skip(f"{variable} not set: no {what} server to run the contract against (see docker/README.md)")
    return value


def _unique_name() -> str:
    return f"contract-{uuid.uuid4().hex[:12]}"


@contextmanager
def open_backend(kind: str, port: str, tmp_path: Path) -> Iterator[Any]:
    """A new, empty store of ``kind`` for ``port``; server-side state is deleted afterwards."""
    if kind == "faiss":
        store: Any = FaissDenseStore.create(tmp_path / "faiss", DIM)
        cleanup: Callable[[], None] = store.close
    elif kind == "qdrant-edge":
        store = QdrantEdgeStore.create(tmp_path / "edge", DIM, field_types=FIELD_TYPES)
        cleanup = store.close
    elif kind == "tantivy":
        store = TantivyLexicalStore.create(tmp_path / "tantivy", field_types=FIELD_TYPES)
        cleanup = store.close
    elif kind in ("qdrant-client-local", "qdrant-server"):
        from qdrant_client import QdrantClient

        from retrieval_assets.core.stores.qdrant.connection import QdrantServerSettings, connect
        from retrieval_assets.core.stores.qdrant.server import QdrantServerStore

        if kind == "qdrant-server":
            url = _require("QDRANT_URL", "Qdrant")
            settings = QdrantServerSettings(
                url=url, api_key=os.environ.get("QDRANT_API_KEY") or None, ca_certs=os.environ.get("QDRANT_CA_CERTS")
            )
            client = connect(settings)
        else:
            client = QdrantClient(":memory:")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Payload indexes have no effect")  # local mode only
            store = QdrantServerStore.create(client, _unique_name(), DIM, field_types=FIELD_TYPES)

        def cleanup() -> None:
            client.delete_collection(store.collection)
            client.close()
    elif kind == "opensearch":
        from retrieval_assets.core.stores.opensearch.connection import OpenSearchSettings, connect
        from retrieval_assets.core.stores.opensearch.store import OpenSearchStore

        settings = OpenSearchSettings(
            url=_require("OPENSEARCH_URL", "OpenSearch"),
            username=os.environ.get("OPENSEARCH_USER") or None,
            password=os.environ.get("OPENSEARCH_PASSWORD") or None,
            api_key=os.environ.get("OPENSEARCH_API_KEY") or None,
            ca_certs=os.environ.get("OPENSEARCH_CA_CERTS") or None,
            verify_certs=os.environ.get("OPENSEARCH_VERIFY_CERTS", "true").lower() != "false",
        )
        client = connect(settings)
        store = OpenSearchStore.create(client, _unique_name(), field_types=FIELD_TYPES, sparse=port == "sparse")

        def cleanup() -> None:
            client.indices.delete(index=store.index)
            client.close()
    else:
        raise AssertionError(kind)
    try:
        yield store
    finally:
        cleanup()


def write(store: Any, port: str, payloads: list[dict], rows: list[int] | None = None) -> None:
    """Write ``payloads`` through ``port`` (with the corpus vectors of ``rows``) and finalize."""
    rows = list(range(len(payloads))) if rows is None else rows
    if port == "dense":
        store.upsert_dense(payloads, DENSE[rows])
    elif port == "sparse":
        store.upsert_sparse(payloads, [SPARSE[i] for i in rows])
    else:
        store.add(payloads)
    store.finalize()


PORT_BACKENDS = [("dense", k) for k in DENSE_KINDS] + [("sparse", k) for k in SPARSE_KINDS] + [
    ("lexical", k) for k in LEXICAL_KINDS
]
# Backends behind a real server (QDRANT_URL / OPENSEARCH_URL): their tests are marked integration.
SERVER_KINDS = ("qdrant-server", "opensearch")


def backend_param(value: Any, kind: str) -> Any:
    """``value`` as a fixture parameter, marked ``integration`` when ``kind`` needs a server."""
    ident = "-".join(value) if isinstance(value, tuple) else value
    return pytest.param(value, id=ident, marks=[pytest.mark.integration] if kind in SERVER_KINDS else [])


@pytest.fixture(scope="module")
def corpus_store(tmp_path_factory) -> Iterator[Callable[[str, str], Any]]:
    """(port, backend) -> a store holding the corpus, built once per module for read-only tests."""
    stores: dict[tuple[str, str], Any] = {}
    with ExitStack() as stack:

        def get(port: str, kind: str) -> Any:
            if (port, kind) not in stores:
                store = stack.enter_context(open_backend(kind, port, tmp_path_factory.mktemp(kind)))
                write(store, port, PAYLOADS)
                stores[port, kind] = store
            return stores[port, kind]

        yield get


@pytest.fixture(params=[backend_param(pair, pair[1]) for pair in PORT_BACKENDS])
def port_store(request, corpus_store):
    """(port, backend, store) for every backend of every port, holding the corpus."""
    port, kind = request.param
    return port, kind, corpus_store(port, kind)


@pytest.fixture(params=[backend_param(pair, pair[1]) for pair in PORT_BACKENDS if pair[0] != "lexical"])
def vector_store(request, corpus_store):
    port, kind = request.param
    return port, kind, corpus_store(port, kind)


@pytest.fixture(params=[backend_param(kind, kind) for kind in LEXICAL_KINDS])
def lexical(request, corpus_store):
    return corpus_store("lexical", request.param)


def search(port: str, store: Any, text: str, top_k: int, filters: list[MetadataFilter] = ()) -> list[StoreHit]:
    if port == "dense":
        return store.search_dense(embed(text), top_k, filters)
    if port == "sparse":
        return store.search_sparse(sparse_embed(text), top_k, filters)
    return store.search_text(text, top_k, filters)


def query_vector(port: str, text: str) -> Any:
    return embed(text) if port == "dense" else sparse_embed(text)


# -- every port -------------------------------------------------------------------------------


def test_count_and_chunk_ids(port_store):
    _, _, store = port_store
    assert isinstance(store, IndexStore)
    assert store.count() == len(PAYLOADS)
    assert store.chunk_ids() == set(CHUNK_IDS)


def test_tenant_isolation_even_for_the_best_match(port_store):
    port, _, store = port_store
    text = "SPLADE learns sparse term weights for hybrid search."  # globex's document, verbatim
    assert search(port, store, text, 1)[0].chunk_id == "splade#0"
    hits = search(port, store, text, len(PAYLOADS), parse_filters({"tenant_id": "acme"}))
    assert hits and {h.payload["tenant_id"] for h in hits} == {"acme"}
    assert search(port, store, text, 5, parse_filters({"tenant_id": "nobody"})) == []


def test_replace_on_upsert(port_store):
    port, _, store = port_store
    garden = CHUNK_IDS.index("garden#0")
    changed = dict(PAYLOADS[garden], title="Zeppelins", text="Airships float on lifting gas over the city.")
    try:
        # Dense and sparse: garden#0 takes rerank#0's vectors; lexical: its new text.
        write(store, port, [changed], [CHUNK_IDS.index("rerank#0")])
        assert store.count() == len(PAYLOADS)
        assert store.chunk_ids() == set(CHUNK_IDS)
        new_query = "airships lifting gas" if port == "lexical" else doc_text(BY_ID["rerank#0"])
        hits = {h.chunk_id: h for h in search(port, store, new_query, 2)}
        assert hits["garden#0"].payload == changed
        old = search(port, store, "Tomatoes need sun, water and patience", 1)
        assert not old or old[0].chunk_id != "garden#0"
    finally:
        write(store, port, [PAYLOADS[garden]], [garden])  # the shared corpus again, for later tests
    assert search(port, store, "Tomatoes need sun, water and patience", 1)[0].chunk_id == "garden#0"


@pytest.mark.parametrize("spec", FILTER_SPECS, ids=str)
def test_filters_are_pushed_down(port_store, spec):
    port, kind, store = port_store
    filters = parse_filters(spec)
    if port == "lexical":
        text = "search review hybrid engines"  # matches most chunks, with different scores
        unfiltered = {h.chunk_id: h.score for h in store.search_text(text, len(PAYLOADS))}
        hits = store.search_text(text, len(PAYLOADS), filters)
        assert {h.chunk_id for h in hits} == {cid for cid in unfiltered if matches_all(BY_ID[cid], filters)}
        # Filters decide membership only: scores are unchanged.
        assert [h.score for h in hits] == pytest.approx([unfiltered[h.chunk_id] for h in hits], rel=1e-5)
        return
    text = "Tomatoes need sun, water and patience"  # garden#0 (initech) is the best match
    query = query_vector(port, text)
    # With top_k=2 a filter applied after the cut would come back short or wrong.
    hits = search(port, store, text, 2, filters)
    assert_ranking(hits, expected_ranking(port, query, filters, 2), true_scores(port, query), SCORE_REL.get(kind, 1e-4))


# -- dense and sparse: ranking equals brute force ---------------------------------------------


@pytest.mark.parametrize("text", ["hybrid search engines", "nearest neighbour graph queries", "rank fusion of lists"])
def test_vector_ranking_equals_brute_force(vector_store, text):
    port, kind, store = vector_store
    query = query_vector(port, text)
    hits = search(port, store, text, 5)
    assert_ranking(hits, expected_ranking(port, query, [], 5), true_scores(port, query), SCORE_REL.get(kind, 1e-4))


# -- lexical only -----------------------------------------------------------------------------


def test_lexical_bm25_order_on_real_text(lexical):
    store = lexical
    hits = store.search_text("running runner", 3)
    assert hits[0].chunk_id == "bm25#0" and hits[0].payload == BY_ID["bm25#0"]  # stemming
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert store.search_text("tomato pruning", 1)[0].chunk_id == "garden#0"
    assert store.search_text("the of and", 3) == []  # stop words only
    assert store.search_text('C++ (foo) AND "bar title:x', 3) == []  # syntax is just text


def test_lexical_expansion_and_tags(lexical):
    store = lexical
    assert store.search_text("the", 3, expansion_terms={"tomatoes": 0.5})[0].chunk_id == "garden#0"
    base = {h.chunk_id: h.score for h in store.search_text("hybrid search", 10)}
    tags = ["topic:sparse", "topic:garden"]
    tagged = {h.chunk_id: h.score for h in store.search_text("hybrid search", 10, tag_terms=tags)}
    # A tag adds TAG_SCORE to what the words match (splade) and never adds a document (garden).
    assert set(tagged) == set(base) and "garden#0" not in tagged
    assert tagged["splade#0"] == pytest.approx(base["splade#0"] + TAG_SCORE, rel=1e-4)
    assert all(tagged[cid] == pytest.approx(score, rel=1e-5) for cid, score in base.items() if cid != "splade#0")


def test_lexical_fetch_documents(lexical):
    store = lexical
    hits = store.fetch_documents(["review", "missing", "garden", "review", "hnsw"])
    assert [(h.chunk_id, h.score) for h in hits] == [("review#0", 0.0), ("garden#0", 0.0), ("hnsw#0", 0.0)]
    assert hits[0].payload == BY_ID["review#0"]
    acme = parse_filters({"tenant_id": "acme"})
    assert [h.chunk_id for h in store.fetch_documents(["garden", "review"], acme)] == ["review#0"]
    assert store.fetch_documents([]) == []

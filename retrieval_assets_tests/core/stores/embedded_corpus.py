"""The hand-made corpus of the embedded stores' tests, with seeded random dense and sparse vectors.

Document ``FAR`` is the only one with a set of unique metadata values and is as far as possible
from the dense query used in the filter tests, so a filter applied after a top-k cut would lose it.
"""

from __future__ import annotations

import numpy as np

from retrieval_assets.core.models import SparseVector
from retrieval_assets.core.stores.filters import MetadataFilter, matches_all

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

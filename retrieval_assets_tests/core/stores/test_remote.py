"""What the server adapters share: the strongest SPLADE terms under a clause limit, and one sparse merge."""

from __future__ import annotations

import pytest

from retrieval_assets.core.models import SparseVector
from retrieval_assets.core.stores.remote import strongest_terms


def test_strongest_terms_keeps_the_heaviest_and_reports_the_cut():
    query = SparseVector(indices=[5, 1, 9, 1, 3], values=[0.2, 0.3, 0.9, 0.4, 0.1])
    kept, cut = strongest_terms(query, 2)
    # Index 1 repeats (0.3 + 0.4 = 0.7): merged first, then the two heaviest (9: 0.9, 1: 0.7) kept.
    assert (kept.indices, kept.values) == ([9, 1], [0.9, pytest.approx(0.7)])
    assert cut == {"terms": 4, "terms_sent": 2, "terms_dropped": 2, "weight_dropped": pytest.approx(0.3)}
    assert strongest_terms(query, None)[1] == {} and strongest_terms(query, 4)[1] == {}


def test_one_shared_merge_for_both_adapters():
    from retrieval_assets.core.stores.opensearch import requests as opensearch_requests
    from retrieval_assets.core.stores.qdrant import requests as qdrant_requests
    from retrieval_assets.core.stores.remote import merge_sparse

    assert opensearch_requests.merge_sparse is qdrant_requests.merge_sparse is merge_sparse
    merged = merge_sparse(SparseVector(indices=[5, 1, 5, 5], values=[1.0, 2.0, 0.5, 0.0]))
    assert merged == SparseVector(indices=[5, 1], values=[1.5, 2.0])

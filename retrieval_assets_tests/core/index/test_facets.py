"""Facet counts: what a delta's removals and additions leave equals counting what is left."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retrieval_assets.core.index import facets as facets_module
from retrieval_assets.core.index.facets import FacetCounts, count_facets, keyword_fields

TYPES = {"venue": "keyword", "authors": "keyword", "doc_id": "keyword", "lab": "keyword", "n": "integer"}


def _payloads(count: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {
            "tenant_id": str(rng.choice(["alpha", "beta"])),
            "venue": f"v{rng.integers(3)}",
            "authors": [f"a{rng.integers(8)}" for _ in range(2)] if rng.random() < 0.9 else None,
            "doc_id": f"d{seed}-{n}",  # a value per payload: counted, then only bounded
            "lab": f"lab{rng.integers(7)}",  # more than a facet's share, fewer than are counted
            "n": n,
        }
        for n in range(count)
    ]


@pytest.fixture
def small_limits(monkeypatch) -> None:
    monkeypatch.setattr(facets_module, "MAX_FACET_VALUES", 5)
    monkeypatch.setattr(facets_module, "COUNTED_VALUES", 30)


@pytest.mark.usefixtures("small_limits")
def test_removing_and_adding_payloads_counts_what_counting_the_rest_would(tmp_path: Path) -> None:
    base, added = _payloads(60, 0), _payloads(10, 1)
    counts = count_facets(base, TYPES)  # type: ignore[arg-type]
    assert all(bound > 30 for bounded in counts.bounds.values() for bound in bounded.values())
    counts.save(tmp_path)
    loaded = FacetCounts.load(tmp_path)
    assert loaded == counts
    removed = base[::7]
    loaded.remove(removed)
    loaded.add(added, keyword_fields(TYPES))  # type: ignore[arg-type]
    rest = [payload for payload in base if payload not in removed] + added
    again = count_facets(rest, TYPES)  # type: ignore[arg-type]
    # Document ids stay bounded here (at least 31 per tenant, less those removed) where counting
    # the rest from scratch counts them (30 or fewer): every other field is counted alike.
    assert loaded.exact and all("doc_id" in bounded for bounded in loaded.bounds.values())
    without_ids = {
        tenant: {name: held for name, held in counted.items() if name != "doc_id"}
        for tenant, counted in again.counts.items()
    }
    assert without_ids == loaded.counts
    fields = keyword_fields(TYPES)  # type: ignore[arg-type]
    assert loaded.facets(fields) == again.facets(fields)
    overall, per_tenant = again.facets(fields)
    assert set(overall) == {"venue"} and set(per_tenant["alpha"]) == {"venue"}  # authors, lab: 7-8 values


@pytest.mark.usefixtures("small_limits")
def test_a_bounded_field_that_may_have_fallen_to_a_facets_size_is_not_exact() -> None:
    base = _payloads(80, 0)
    counts = count_facets(base, TYPES)  # type: ignore[arg-type]
    alpha = [payload for payload in base if payload["tenant_id"] == "alpha"]
    # Removing 26 of alpha's payloads could leave 5 of its 31+ document ids.
    counts.remove(alpha[:26])
    assert not counts.exact


def test_a_tenant_no_payload_is_left_in_is_forgotten() -> None:
    counts = count_facets(_payloads(10, 0), TYPES)  # type: ignore[arg-type]
    counts.keep_tenants({"alpha"})
    assert set(counts.counts) == set(counts.bounds) == {"alpha"}

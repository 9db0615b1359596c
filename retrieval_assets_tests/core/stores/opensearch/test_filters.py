"""The OpenSearch filter translator: each filter's clause, and the filters it refuses."""

from __future__ import annotations

from typing import Any

import pytest

from retrieval_assets.core.models import SparseVector
from retrieval_assets.core.stores.base import KEYWORD_PAYLOAD_FIELDS, metadata_field_names
from retrieval_assets.core.stores.filters import FilterError, parse_filters
from retrieval_assets.core.stores.opensearch.filters import filter_clauses
from retrieval_assets_tests.core.stores.opensearch.recording import os_store
from retrieval_assets_tests.core.stores.server_inputs import FIELD_TYPES

NAMES = {**{field: field for field in KEYWORD_PAYLOAD_FIELDS}, **metadata_field_names(FIELD_TYPES)}

# filter spec -> its clause, or the FilterError message it raises.
CASES: dict[str, tuple[dict[str, Any], Any]] = {
    "identifier": ({"tenant_id": "acme"}, {"terms": {"tenant_id": ["acme"]}}),
    "keyword set": ({"license": ["MIT", "GPL-3.0"]}, {"terms": {"m_license": ["MIT", "GPL-3.0"]}}),
    "integer from text": ({"year": "2019"}, {"terms": {"m_year": [2019]}}),
    "integer range rounded inwards": (
        {"year": {"gte": 2015.5, "lte": 2020}}, {"range": {"m_year": {"gte": 2016, "lte": 2020}}}
    ),
    "float range as given": ({"stars": {"gte": 4.5}}, {"range": {"m_stars": {"gte": 4.5}}}),
    "float values": ({"stars": [4.5, "5"]}, {"terms": {"m_stars": [4.5, 5.0]}}),
    "bool from text": ({"open_source": "true"}, {"terms": {"m_open_source": [True]}}),
    "bool either": ({"open_source": [True, "false"]}, {"terms": {"m_open_source": [True, False]}}),
    "bool on keyword": ({"license": True}, {"terms": {"m_license": ["True"]}}),
    "undeclared": ({"color": "red"}, "declare it in field_types"),
    "range on keyword": ({"license": {"gte": 1}}, "range filter"),
    "range on bool": ({"open_source": {"lte": 1}}, "range filter"),
    "text on integer": ({"year": "recent"}, "expects integer"),
    "bool on integer": ({"year": True}, "expects integer"),
}


@pytest.mark.parametrize("case", CASES, ids=str)
def test_each_filter_becomes_one_clause(case):
    spec, expected = CASES[case]
    filters = parse_filters(spec)
    if isinstance(expected, str):
        with pytest.raises(FilterError, match=expected):
            filter_clauses(filters, FIELD_TYPES, NAMES, "chunks-v1")
        return
    assert filter_clauses(filters, FIELD_TYPES, NAMES, "chunks-v1") == [expected]


def test_opensearch_filters_that_cannot_be_expressed(recorder, sleeps):
    store = os_store(recorder, sleeps)
    with pytest.raises(FilterError, match="declare it in field_types"):
        store.search_text("x", 3, parse_filters({"color": "red"}))
    with pytest.raises(FilterError, match="range filter"):
        store.search_sparse(SparseVector(indices=[1], values=[1.0]), 3, parse_filters({"license": {"gte": 1}}))
    with pytest.raises(FilterError, match="expects integer"):
        store.search_text("x", 3, parse_filters({"year": "recent"}))
    assert recorder.requests == []

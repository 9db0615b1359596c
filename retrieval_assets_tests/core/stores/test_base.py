"""The store ports' shared helpers: field-type inference, filter value coercion, payload parsing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from retrieval_assets.core.stores.base import (
    coerce_filter_values,
    infer_field_types,
    parse_payload,
)
from retrieval_assets.core.stores.faiss.store import FaissDenseStore
from retrieval_assets.core.stores.filters import FilterError, MetadataFilter
from retrieval_assets_tests.core.stores.embedded_corpus import (
    DIM,
    FIELD_TYPES,
    PAYLOADS,
    VECTORS,
)


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

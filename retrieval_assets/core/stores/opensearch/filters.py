"""OpenSearch filters: our ``MetadataFilter`` list as query clauses for ``filter`` context.

A value filter becomes ``terms`` (values converted to the field's declared type), a range
filter ``range`` (on an integer field its bounds rounded inwards). Only the identifiers and the
fields declared in ``field_types`` are in the mapping, so any other field is an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from retrieval_assets.core.stores.base import (
    KEYWORD_PAYLOAD_FIELDS,
    FieldType,
    coerce_filter_values,
)
from retrieval_assets.core.stores.filters import FilterError, MetadataFilter


def filter_clauses(
    filters: Sequence[MetadataFilter],
    field_types: Mapping[str, FieldType],
    names: Mapping[str, str],
    index: str,
) -> list[dict[str, Any]]:
    """One clause per filter, all of which must hold; ``names`` maps each filterable field to
    its name in the mapping (identifiers as they are), and ``index`` names the index in errors."""
    return [_clause(flt, field_types, names, index) for flt in filters]


def _clause(
    flt: MetadataFilter, field_types: Mapping[str, FieldType], names: Mapping[str, str], index: str
) -> dict[str, Any]:
    field_type = "keyword" if flt.field in KEYWORD_PAYLOAD_FIELDS else field_types.get(flt.field)
    if field_type is None:
        raise FilterError(
            f"{flt.field!r} is not a filter field of OpenSearch index {index}; declare it in "
            f"field_types at create (filterable: {sorted(field_types)})"
        )
    name = names[flt.field]
    if flt.any_of is not None:
        return {"terms": {name: coerce_filter_values(flt, field_type)}}
    if field_type not in ("integer", "float"):
        raise FilterError(f"range filter on {flt.field!r}, a {field_type} field")
    bounds: dict[str, float | int] = {}
    if flt.gte is not None:
        bounds["gte"] = math.ceil(flt.gte) if field_type == "integer" else flt.gte
    if flt.lte is not None:
        bounds["lte"] = math.floor(flt.lte) if field_type == "integer" else flt.lte
    return {"range": {name: bounds}}

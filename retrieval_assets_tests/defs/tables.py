"""Test helper: the table columns in asset or check metadata that carry no description."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import TableSchema


def undescribed_columns(metadata: Mapping[str, Any], where: str) -> list[str]:
    """``where:key:column`` for every column without a description in the tables and table
    schemas of ``metadata`` (metadata values, or their ``.value``)."""
    found = []
    for key, value in metadata.items():
        schema = getattr(value, "schema", value)  # a table or a schema value holds its schema
        if isinstance(schema, TableSchema):
            found += [f"{where}:{key}:{column.name}" for column in schema.columns if not column.description]
    return found

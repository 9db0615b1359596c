"""Keyword facets of a lexical index, for the NL filter parser: the distinct values of each keyword
field that has at most ``MAX_FACET_VALUES`` of them, per tenant and over every payload.

A build counts how many payloads hold each value (``FacetCounts``), so that a delta updates the
counts with the payloads it removes and adds instead of reading every kept payload again (1M
payloads parsed for one changed document: about 5 s). A field keeps being counted past
``MAX_FACET_VALUES`` values, up to ``COUNTED_VALUES``; past that it is only known to hold at least
that many, less one per value a delta removed since, and once that bound falls to
``MAX_FACET_VALUES`` the facets are counted again from every payload.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrieval_assets.core.io.files import write_json
from retrieval_assets.core.stores.base import FieldType, Payload

# Keyword fields with at most this many distinct values are listed as facets (e.g. venues).
MAX_FACET_VALUES = 1000
# Values of a field counted per tenant before the field is only bounded (document ids, say).
COUNTED_VALUES = 100 * MAX_FACET_VALUES
# Beside a lexical index's build manifest: its ``FacetCounts``.
FACET_COUNTS_FILE = "facet_counts.json"


@dataclass
class FacetCounts:
    """Per tenant and keyword field, how many payloads hold each value (``counts``), or, for a
    field with more than ``COUNTED_VALUES`` values, how many it holds at least (``bounds``)."""

    counts: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    bounds: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, payloads: Iterable[Payload], fields: Collection[str]) -> None:
        # Each tenant's counted fields as (field, counts) pairs, made again only when one is bounded.
        active: dict[str, list[tuple[str, dict[str, int]]]] = {}
        for payload in payloads:
            tenant = str(payload["tenant_id"])
            if tenant not in self.counts:
                self.counts[tenant] = {name: {} for name in fields}
                self.bounds[tenant] = {}
            if tenant not in active:
                active[tenant] = list(self.counts[tenant].items())
            bounded = False
            for name, held in active[tenant]:
                value = payload.get(name)
                if value is None:
                    continue
                for item in _values(value):
                    held[item] = held.get(item, 0) + 1
                if len(held) > COUNTED_VALUES:
                    self.bounds[tenant][name] = len(self.counts[tenant].pop(name))
                    bounded = True
            if bounded:
                active[tenant] = list(self.counts[tenant].items())

    def remove(self, payloads: Iterable[Payload]) -> None:
        """Take away ``payloads``, which these counts hold."""
        for payload in payloads:
            tenant = str(payload["tenant_id"])
            bounded = self.bounds[tenant]
            for name, held in self.counts[tenant].items():
                value = payload.get(name)
                if value is None:
                    continue
                for item in _values(value):
                    left = held[item] - 1
                    if left:
                        held[item] = left
                    else:
                        del held[item]
            for name in bounded:
                value = payload.get(name)
                if value is not None:
                    bounded[name] -= len(_values(value))

    def keep_tenants(self, tenants: Collection[str]) -> None:
        """Forget the tenants no payload is left in."""
        for gone in set(self.counts) - set(tenants):
            del self.counts[gone], self.bounds[gone]

    @property
    def exact(self) -> bool:
        """Whether every field with at most ``MAX_FACET_VALUES`` values is counted: a bounded
        field may have fallen that low."""
        return all(bound > MAX_FACET_VALUES for bounded in self.bounds.values() for bound in bounded.values())

    def facets(self, fields: Iterable[str]) -> tuple[dict[str, list[str]], dict[str, dict[str, list[str]]]]:
        """The facets over every payload and per tenant (a scoped query is parsed against its
        tenants' values only: "in BetaVenue" is text to alpha)."""
        per_tenant = {
            tenant: {name: sorted(held) for name, held in counted.items() if 0 < len(held) <= MAX_FACET_VALUES}
            for tenant, counted in sorted(self.counts.items())
        }
        overall = {}
        for name in fields:
            if any(name not in counted or len(counted[name]) > MAX_FACET_VALUES for counted in self.counts.values()):
                continue
            values = set().union(*(counted[name] for counted in self.counts.values()))
            if 0 < len(values) <= MAX_FACET_VALUES:
                overall[name] = sorted(values)
        return overall, per_tenant

    def save(self, directory: Path) -> None:
        write_json({"counts": self.counts, "bounds": self.bounds}, directory / FACET_COUNTS_FILE)

    @classmethod
    def load(cls, directory: Path) -> FacetCounts | None:
        """The counts saved beside a lexical index; None for one built before they were."""
        path = directory / FACET_COUNTS_FILE
        if not path.is_file():
            return None
        saved: dict[str, Any] = json.loads(path.read_text())
        return cls(saved["counts"], saved["bounds"])


def keyword_fields(field_types: Mapping[str, FieldType]) -> list[str]:
    return [name for name, kind in field_types.items() if kind == "keyword"]


def count_facets(payloads: Iterable[Payload], field_types: Mapping[str, FieldType]) -> FacetCounts:
    counts = FacetCounts()
    counts.add(payloads, keyword_fields(field_types))
    return counts


def _values(value: object) -> set[str] | tuple[str]:
    return {str(item) for item in value} if isinstance(value, list) else (str(value),)

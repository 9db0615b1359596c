"""Gold made for a catalog nobody judged: the queries, their judgements and where each came from.

A ``GeneratedGold``'s fingerprint covers its active queries and judgements only, the same JSON that
``tuning.gold_fingerprint`` hashes (that one is this fingerprint's first 16 characters), so a
learned configuration and an evaluation name the same gold whichever way it was loaded.
"""

from __future__ import annotations

import json
import unicodedata
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field, computed_field

from retrieval_assets.core.embed.cache import content_hash
from retrieval_assets.core.ingest.catalog import GoldSet

GoldKind = Literal["known_item", "llm", "curated"]
QuerySource = Literal["title", "terms", "llm", "curated"]


def normalise(text: str) -> str:
    """Compatibility-folded, case-folded, whitespace collapsed: what "the same text" means here."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def short_hash(*parts: str) -> str:
    return content_hash(*parts)[:8]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def fingerprint_of(queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> str:
    return content_hash(json.dumps({"queries": queries, "qrels": qrels}, sort_keys=True))


class GoldChange(BaseModel):
    """One change of a frozen gold set's active queries, recorded in the file that results."""

    action: Literal["retire", "redraw"]
    at: str
    from_fingerprint: str
    to_fingerprint: str
    # retire: queries whose documents are all gone -> why
    retired: dict[str, str] = Field(default_factory=dict)
    # retire: queries that keep a document but lost others (deleted duplicates) -> those doc ids
    pruned: dict[str, list[str]] = Field(default_factory=dict)


class GeneratedGold(BaseModel):
    kind: GoldKind
    method: str  # one line: how the queries were made
    seed: int
    created_at: str  # ISO 8601; not part of the fingerprint
    queries: dict[str, str]  # active queries only
    qrels: dict[str, dict[str, int]]
    # The next three keep retired queries too, for the record.
    query_doc: dict[str, str]  # query id -> the document it was made from
    query_source: dict[str, QuerySource]
    tenant_of: dict[str, str]
    retired: dict[str, str] = Field(default_factory=dict)  # query id -> why it no longer counts
    history: list[GoldChange] = Field(default_factory=list)
    # What the generator saw and left out (documents, duplicates, too_short, eligible, ...).
    stats: dict[str, int] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def fingerprint(self) -> str:
        return fingerprint_of(self.queries, self.qrels)

    def as_gold_set(self) -> GoldSet:
        return GoldSet(queries=dict(self.queries), qrels={qid: dict(rel) for qid, rel in self.qrels.items()})

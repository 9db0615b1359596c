"""What one search carries from stage to stage: its tenant scope, its trace, its plan and its fused candidates."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from retrieval_assets.core.models import FusionMethod, ScoredHit, SearchRequest, StoreHit, Strategy, StrategyScore
from retrieval_assets.core.stores.base import REQUIRED_PAYLOAD_FIELDS
from retrieval_assets.core.stores.filters import MetadataFilter


class TenantScopeError(ValueError):
    """A request names a tenant its caller may not see (or is granted none)."""


def tenant_scope(request: SearchRequest) -> frozenset[str] | None:
    """The tenants a request may see: its tenant, within its grant (``tenants``); None when it
    names neither. A tenant outside the grant is an error, not an empty result."""
    if request.tenants is None:
        return None if request.tenant_id is None else frozenset([request.tenant_id])
    if not request.tenants:
        raise TenantScopeError("the caller is granted no tenant")
    if request.tenant_id is None:
        return frozenset(request.tenants)
    if request.tenant_id not in request.tenants:
        raise TenantScopeError(f"tenant {request.tenant_id!r} is not among the caller's tenants")
    return frozenset([request.tenant_id])


@dataclass
class SearchTrace:
    """What one search did: timings and diagnostics, filled in stage by stage."""

    timings_ms: dict[str, float] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            self.timings_ms[f"{name}_ms"] = self.timings_ms.get(f"{name}_ms", 0.0) + elapsed


@dataclass
class SearchPlan:
    """Everything fixed for one request once the query is understood."""

    query: str
    depth: int
    filters: list[MetadataFilter]
    tag_terms: list[str]
    excluded: set[str]
    strategies: list[Strategy]
    fusion: FusionMethod
    trace: SearchTrace
    # The tenants whose documents (and terms) the request may see; None: every tenant.
    tenants: frozenset[str] | None = None
    # Strategy results already computed for this request: retries re-run BM25 only.
    cache: dict[tuple[str, str], list[StoreHit]] = field(default_factory=dict)
    # The LLM's paraphrases do not change between retries: asked for once per request.
    llm_reformulations: list[str] | None = None

    @property
    def only_tenant(self) -> str | None:
        """The one tenant the request is scoped to, or None (every tenant, or several)."""
        tenants = self.tenants
        return next(iter(tenants)) if tenants is not None and len(tenants) == 1 else None


@dataclass
class Candidate:
    """One fused document (or chunk) with the hit that represents it and its provenance."""

    key: str
    hit: StoreHit
    score: float
    # strategy -> (score, rank); models are built only for the hits a search returns.
    strategy_scores: dict[str, tuple[float, int]]
    first_stage_rank: int | None = None
    graph_path: list[str] | None = None

    def rescored(self, score: float) -> Candidate:
        """This candidate, now with ``score`` (changed in place: candidates belong to one search)."""
        self.score = score
        return self

    def scored_hit(self) -> ScoredHit:
        """The hit a search returns for this candidate."""
        payload = self.hit.payload
        return ScoredHit.model_construct(
            doc_id=self.hit.doc_id,
            chunk_id=self.hit.chunk_id,
            text=payload.get("text", ""),
            title=payload.get("title", ""),
            section=payload.get("section", "body"),
            tenant_id=payload.get("tenant_id", "default"),
            score=self.score,
            strategy_scores={
                name: StrategyScore.model_construct(score=score, rank=rank)
                for name, (score, rank) in self.strategy_scores.items()
            },
            first_stage_rank=self.first_stage_rank,
            graph_path=self.graph_path,
            metadata={k: v for k, v in payload.items() if k not in REQUIRED_PAYLOAD_FIELDS},
        )

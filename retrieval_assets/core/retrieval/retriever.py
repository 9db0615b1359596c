"""Hybrid retrieval: BM25, SPLADE and dense searches run in parallel and are fused by RRF."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from retrieval_assets.core.encoders.base import DenseEncoder, SparseEncoder
from retrieval_assets.core.filters import MetadataFilter, parse_filters
from retrieval_assets.core.models import RetrievalResult, ScoredHit, StoreHit, StrategyScore
from retrieval_assets.core.retrieval.fusion import reciprocal_rank_fusion
from retrieval_assets.core.settings import RetrievalSettings, Strategy
from retrieval_assets.core.stores.base import DenseStore, LexicalStore, SparseStore


class HybridRetriever:
    """Answers queries over one set of indexes; safe to share across threads."""

    def __init__(
        self,
        *,
        dense_encoder: DenseEncoder | None,
        sparse_encoder: SparseEncoder | None,
        dense_store: DenseStore | None,
        sparse_store: SparseStore | None,
        lexical_store: LexicalStore | None,
        settings: RetrievalSettings | None = None,
    ) -> None:
        self.settings = settings or RetrievalSettings()
        # One Qdrant store may serve both dense and sparse search: close each store once.
        self._stores = list({id(s): s for s in (dense_store, sparse_store, lexical_store) if s is not None}.values())
        self._searchers: dict[str, Callable[[str, int, list[MetadataFilter]], list[StoreHit]]] = {}
        if lexical_store is not None:
            self._searchers["bm25"] = lexical_store.search_text
        if sparse_store is not None and sparse_encoder is not None:
            self._searchers["splade"] = lambda q, k, f: sparse_store.search_sparse(
                sparse_encoder.encode_queries([q])[0], k, f
            )
        if dense_store is not None and dense_encoder is not None:
            self._searchers["dense"] = lambda q, k, f: dense_store.search_dense(
                dense_encoder.encode_queries([q])[0], k, f
            )
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(self._searchers)), thread_name_prefix="retrieve")

    @property
    def available_strategies(self) -> list[str]:
        return list(self._searchers)

    def search(
        self,
        query: str,
        top_k: int = 10,
        filters: Mapping[str, Any] | Sequence[MetadataFilter] | None = None,
        strategies: Sequence[Strategy] | None = None,
    ) -> RetrievalResult:
        if not query or not query.strip():
            raise ValueError("query must be a non-empty string")
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        wanted = list(strategies or self.settings.strategies)
        missing = [s for s in wanted if s not in self._searchers]
        if missing:
            raise ValueError(
                f"strategies {missing} are not available; this index serves {self.available_strategies}"
            )
        parsed_filters = parse_filters(filters)
        depth = max(top_k, self.settings.candidates_per_strategy)

        started = time.perf_counter()
        futures = {
            name: self._pool.submit(_timed, self._searchers[name], query, depth, parsed_filters)
            for name in wanted
        }
        per_strategy = {name: future.result() for name, future in futures.items()}
        timings = {f"{name}_ms": elapsed for name, (_, elapsed) in per_strategy.items()}

        fuse_started = time.perf_counter()
        hits = self._fuse({name: hits for name, (hits, _) in per_strategy.items()}, top_k)
        timings["fusion_ms"] = (time.perf_counter() - fuse_started) * 1000
        timings["total_ms"] = (time.perf_counter() - started) * 1000
        return RetrievalResult(
            query=query,
            hits=hits,
            strategies=wanted,
            fusion="rrf" if len(wanted) > 1 else "none",
            timings_ms=timings,
            diagnostics={
                "candidates": {name: len(h) for name, (h, _) in per_strategy.items()},
                "filters": [f.model_dump(exclude_none=True) for f in parsed_filters],
            },
        )

    def _fuse(self, per_strategy: Mapping[str, list[StoreHit]], top_k: int) -> list[ScoredHit]:
        key = (lambda h: h.payload["doc_id"]) if self.settings.collapse_chunks else (lambda h: h.chunk_id)
        rankings: dict[str, list[str]] = {}
        provenance: dict[str, dict[str, StrategyScore]] = {}
        best_hit: dict[str, tuple[int, StoreHit]] = {}
        for name, hits in per_strategy.items():
            ranking: list[str] = []
            seen: set[str] = set()
            for hit in hits:  # hits arrive best first; keep each key's best chunk
                item = key(hit)
                if item in seen:
                    continue
                seen.add(item)
                ranking.append(item)
                rank = len(ranking)
                provenance.setdefault(item, {})[name] = StrategyScore(score=hit.score, rank=rank)
                if item not in best_hit or rank < best_hit[item][0]:
                    best_hit[item] = (rank, hit)
            rankings[name] = ranking
        fused = reciprocal_rank_fusion(rankings, k=self.settings.rrf_k)[:top_k]
        return [_to_scored_hit(best_hit[item][1], score, provenance[item]) for item, score in fused]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        for store in self._stores:
            store.close()


def _timed(fn: Callable[..., list[StoreHit]], *args: Any) -> tuple[list[StoreHit], float]:
    started = time.perf_counter()
    result = fn(*args)
    return result, (time.perf_counter() - started) * 1000


def _to_scored_hit(hit: StoreHit, score: float, strategy_scores: dict[str, StrategyScore]) -> ScoredHit:
    payload = hit.payload
    reserved = {"doc_id", "chunk_id", "text", "title", "section", "tenant_id"}
    return ScoredHit(
        doc_id=payload["doc_id"],
        chunk_id=hit.chunk_id,
        text=payload.get("text", ""),
        title=payload.get("title", ""),
        section=payload.get("section", "body"),
        tenant_id=payload.get("tenant_id", "default"),
        score=score,
        strategy_scores=strategy_scores,
        metadata={k: v for k, v in payload.items() if k not in reserved},
    )

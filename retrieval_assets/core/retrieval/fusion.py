"""Fusion of per-strategy result lists into one ranking.

Every function takes, per strategy, the candidates' scores best first and returns
``(key, fused score)`` pairs best first, ties broken by key so fused orders are reproducible.
Weights default to 1 for every strategy.

* ``rrf``: Cormack et al. reciprocal rank fusion, ``sum w / (k + rank)`` with 1-based ranks.
* ``minmax`` / ``zscore``: a weighted sum of each strategy's scores normalised over its own
  candidate list (Bruch et al. 2023, "An Analysis of Fusion Functions for Hybrid Retrieval").
  A candidate a strategy did not return counts as that strategy's worst normalised score
  (0 for min-max, the lowest z for z-score): it is at best as good as what was cut off.
* ``similarity_rrf``: ``w * avg_similarity + (1 - w) * normalized_rrf``, where
  ``avg_similarity`` is the weighted mean of min-max normalised scores and ``normalized_rrf``
  the RRF score divided by the best RRF score, so both terms lie in [0, 1].

``document_rankings`` and ``fuse_rankings`` are the retriever's first-stage fusion over store
hits; the configuration tuner replays them over hits it searched once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from retrieval_assets.core.models import FusionMethod, StoreHit
from retrieval_assets.core.settings import FusionSettings

# The normalisations of the weighted-sum methods.
_NORMALISED = (FusionMethod.MINMAX, FusionMethod.ZSCORE)

# strategy -> [(key, score), ...] best first
StrategyScores = Mapping[str, Sequence[tuple[str, float]]]


def _weight(weights: Mapping[str, float] | None, strategy: str) -> float:
    weight = 1.0 if weights is None else weights.get(strategy, 1.0)
    if weight < 0:
        raise ValueError(f"fusion weight of {strategy!r} must not be negative, got {weight}")
    return weight


def _ranked(scores: Mapping[str, float]) -> list[tuple[str, float]]:
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def reciprocal_rank_fusion(
    rankings: Mapping[str, Sequence[str]], k: int = 60, weights: Mapping[str, float] | None = None
) -> list[tuple[str, float]]:
    """``sum(w / (k + rank))`` over the strategies that ranked each key, 1-based ranks."""
    if k <= 0:
        raise ValueError(f"RRF k must be positive, got {k}")
    fused: dict[str, float] = {}
    for strategy, ranking in rankings.items():
        weight = _weight(weights, strategy)
        for rank, key in enumerate(ranking, start=1):
            fused[key] = fused.get(key, 0.0) + weight / (k + rank)
    return _ranked(fused)


def min_max(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """``values`` scaled to [0, 1]; one value, or all equal: every one is as good as the best."""
    array = np.asarray(values, dtype=float)
    low, spread = array.min(), array.max() - array.min()
    return (array - low) / spread if spread > 0 else np.ones_like(array)


def _normalised(scored: Sequence[tuple[str, float]], method: FusionMethod) -> tuple[dict[str, float], float]:
    """Each key's normalised score and the value a missing key gets."""
    values = np.array([score for _, score in scored], dtype=float)
    if method == FusionMethod.MINMAX:
        return dict(zip((key for key, _ in scored), min_max(values).tolist(), strict=True)), 0.0
    std = values.std()
    normalised = (values - values.mean()) / std if std > 0 else np.zeros_like(values)
    return dict(zip((key for key, _ in scored), normalised.tolist(), strict=True)), float(normalised.min())


def normalized_score_fusion(
    per_strategy: StrategyScores,
    method: FusionMethod = FusionMethod.MINMAX,
    weights: Mapping[str, float] | None = None,
) -> list[tuple[str, float]]:
    """Weighted sum of per-strategy normalised scores (see the module notes for missing keys)."""
    if method not in _NORMALISED:
        raise ValueError(f"normalisation must be 'minmax' or 'zscore', got {method!r}")
    lists = {strategy: scored for strategy, scored in per_strategy.items() if scored}
    normalised = {strategy: _normalised(scored, method) for strategy, scored in lists.items()}
    weight = {strategy: _weight(weights, strategy) for strategy in lists}
    # Every key starts from every strategy's "missing" value; present keys then add the difference.
    floor = sum(weight[strategy] * missing for strategy, (_, missing) in normalised.items())
    fused: dict[str, float] = {}
    for strategy, (values, missing) in normalised.items():
        for key, value in values.items():
            fused[key] = fused.get(key, floor) + weight[strategy] * (value - missing)
    return _ranked(fused)


def similarity_rrf_fusion(
    per_strategy: StrategyScores,
    similarity_weight: float = 0.5,
    k: int = 60,
    weights: Mapping[str, float] | None = None,
) -> list[tuple[str, float]]:
    """``w * avg_similarity + (1 - w) * normalized_rrf`` (see the module notes)."""
    if not 0.0 <= similarity_weight <= 1.0:
        raise ValueError(f"similarity weight must be in [0, 1], got {similarity_weight}")
    rankings = {s: [key for key, _ in scored] for s, scored in per_strategy.items()}
    rrf = dict(reciprocal_rank_fusion(rankings, k, weights))
    if not rrf:
        return []
    best_rrf = max(rrf.values())
    total_weight = sum(_weight(weights, strategy) for strategy, scored in per_strategy.items() if scored)
    similarity = dict(normalized_score_fusion(per_strategy, FusionMethod.MINMAX, weights))
    fused = {
        key: similarity_weight * similarity[key] / total_weight + (1 - similarity_weight) * rrf[key] / best_rrf
        for key in rrf
    }
    return _ranked(fused)


def fuse(
    per_strategy: StrategyScores,
    method: FusionMethod = FusionMethod.RRF,
    *,
    rrf_k: int = 60,
    weights: Mapping[str, float] | None = None,
    similarity_weight: float = 0.5,
) -> list[tuple[str, float]]:
    """One entry point for every fusion method, as configured in ``FusionSettings``."""
    if method == FusionMethod.RRF:
        rankings = {s: [key for key, _ in scored] for s, scored in per_strategy.items()}
        return reciprocal_rank_fusion(rankings, rrf_k, weights)
    if method in _NORMALISED:
        return normalized_score_fusion(per_strategy, method, weights)
    if method == FusionMethod.SIMILARITY_RRF:
        return similarity_rrf_fusion(per_strategy, similarity_weight, rrf_k, weights)
    raise ValueError(f"unknown fusion method {method!r}; use one of {', '.join(FusionMethod)}")


def blend_scores(first: Sequence[float], second: Sequence[float], weight: float) -> list[float]:
    """``(1 - weight) * first + weight * second``, each min-max normalised over the list (the
    cross-encoder blend of the reranked head with its first-stage scores)."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"blend weight must be in [0, 1], got {weight}")
    if not first:
        return []
    return ((1 - weight) * min_max(first) + weight * min_max(second)).tolist()


def document_rankings(
    per_strategy: Mapping[str, Sequence[StoreHit]], key: Callable[[StoreHit], str], excluded: set[str]
) -> dict[str, list[tuple[str, StoreHit]]]:
    """Each strategy's hits (best first) as a ranking of keys, each key's best hit once, without
    excluded documents or chunks."""
    rankings = {}
    for name, hits in per_strategy.items():
        ranking: list[tuple[str, StoreHit]] = []
        seen: set[str] = set()
        for hit in hits:
            item = key(hit)
            if item in seen or hit.doc_id in excluded or hit.chunk_id in excluded:
                continue
            seen.add(item)
            ranking.append((item, hit))
        rankings[name] = ranking
    return rankings


def fuse_rankings(
    scored: Mapping[str, Sequence[tuple[str, float]]], method: FusionMethod, settings: FusionSettings
) -> list[tuple[str, float]]:
    """The first stage's fusion of per-strategy rankings: one strategy keeps its own scores."""
    if len(scored) == 1:
        return list(next(iter(scored.values())))
    return fuse(
        scored, method, rrf_k=settings.rrf_k, weights=settings.weights, similarity_weight=settings.similarity_weight
    )

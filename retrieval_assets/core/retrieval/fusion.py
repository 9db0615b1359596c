"""Rank fusion over per-strategy rankings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def reciprocal_rank_fusion(
    rankings: Mapping[str, Sequence[str]], k: int = 60
) -> list[tuple[str, float]]:
    """Cormack et al. RRF: ``sum(1 / (k + rank))`` with 1-based ranks, best first.

    Ties are broken by key so that fused orders are reproducible.
    """
    if k <= 0:
        raise ValueError(f"RRF k must be positive, got {k}")
    scores: dict[str, float] = {}
    for ranking in rankings.values():
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))

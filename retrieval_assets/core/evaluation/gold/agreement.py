"""Does generated gold rank configurations the way real gold does?

Kendall's tau-b between two scorings of the same configurations (a metric per configuration
under generated and under real gold): 1 is the same order, 0 no relation, -1 the reverse. Tau-b
corrects for ties, which are common among configurations that differ little. Generated gold that
agrees with real gold on a catalog that has both is some evidence that it can stand in for real
gold on a catalog that has none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from scipy import stats


def kendall_tau(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Tau-b over the configurations both scored; NaN when either scored them all alike."""
    common = sorted(set(a) & set(b))
    if len(common) < 2:
        raise ValueError(f"kendall tau needs two configurations scored by both, got {len(common)}")
    statistic = stats.kendalltau([a[c] for c in common], [b[c] for c in common], variant="b").statistic
    return float(statistic) if statistic is not None else math.nan


def split_half_agreement(
    per_query: Mapping[str, Mapping[str, float]], *, splits: int = 500, seed: int = 0, bar: float = 0.6
) -> dict[str, float | int]:
    """How far the real gold agrees with itself: the queries every configuration was scored on
    are split at random into two disjoint halves ``splits`` times, and each time the halves'
    rankings of the configurations (mean score) are compared by tau-b. Its median is the
    agreement an independent gold of half the size, free of bias, would reach; a generated
    gold's tau is judged against it, not against 1. Splits where a half scores every
    configuration alike are left out."""
    names = sorted(per_query)
    if len(names) < 2:
        raise ValueError(f"split-half agreement needs two configurations, got {len(names)}")
    queries = sorted(set.intersection(*(set(per_query[name]) for name in names)))
    if len(queries) < 4:
        raise ValueError(f"split-half agreement needs four queries scored by every configuration, got {len(queries)}")
    scores = np.array([[per_query[name][q] for q in queries] for name in names])
    half = len(queries) // 2
    rng = np.random.default_rng(seed)
    taus = []
    for _ in range(splits):
        order = rng.permutation(len(queries))
        first, second = scores[:, order[:half]].mean(axis=1), scores[:, order[half : 2 * half]].mean(axis=1)
        tau = kendall_tau(dict(zip(names, first.tolist(), strict=True)), dict(zip(names, second.tolist(), strict=True)))
        if not math.isnan(tau):
            taus.append(tau)
    if not taus:
        raise ValueError("every split scored the configurations alike: the gold cannot rank them")
    values = np.array(taus)
    return {
        "queries_per_half": half,
        "splits": len(taus),
        "median": round(float(np.median(values)), 4),
        "q1": round(float(np.percentile(values, 25)), 4),
        "q3": round(float(np.percentile(values, 75)), 4),
        "bar": bar,
        "share_reaching_bar": round(float(np.mean(values >= bar)), 4),
    }

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

from scipy import stats


def kendall_tau(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Tau-b over the configurations both scored; NaN when either scored them all alike."""
    common = sorted(set(a) & set(b))
    if len(common) < 2:
        raise ValueError(f"kendall tau needs two configurations scored by both, got {len(common)}")
    statistic = stats.kendalltau([a[c] for c in common], [b[c] for c in common], variant="b").statistic
    return float(statistic) if statistic is not None else math.nan

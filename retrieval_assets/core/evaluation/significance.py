"""Paired comparison of two systems over the same queries: is a difference more than noise?

The p-value comes from a paired randomization test (each query's two scores swapped at random,
Fisher's sign-flip test, as ranx and trec_eval's users run it) and the interval from a
bootstrap of the per-query differences; both are scipy's, seeded, so a verdict is reproducible.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from pydantic import BaseModel
from scipy import stats

RESAMPLES = 10_000
SEED = 0


class PairedDifference(BaseModel):
    """``candidate - baseline`` over the queries both were scored on."""

    queries: int
    mean: float
    ci_low: float  # 95 % bootstrap interval of the mean difference
    ci_high: float
    p_value: float  # two-sided paired randomization test
    wins: int  # queries where the candidate scores higher
    losses: int
    ties: int


def _mean_difference(differences: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(differences, axis=axis)


def paired_difference(
    candidate: Mapping[str, float], baseline: Mapping[str, float], resamples: int = RESAMPLES
) -> PairedDifference:
    """Compare per-query scores of the queries both mappings hold (query id -> score)."""
    common = sorted(set(candidate) & set(baseline))
    if not common:
        raise ValueError("no query was scored by both systems")
    differences = np.array([candidate[q] - baseline[q] for q in common], dtype=float)
    counts = {"wins": int((differences > 0).sum()), "losses": int((differences < 0).sum())}
    if not differences.any():  # identical scores: nothing to test, and scipy cannot resample a constant
        return PairedDifference(
            queries=len(common), mean=0.0, ci_low=0.0, ci_high=0.0, p_value=1.0, ties=len(common), **counts
        )
    rng = np.random.default_rng(SEED)
    # Sign flips of the differences are the paired permutations of the two systems' scores.
    test = stats.permutation_test(
        (differences,), _mean_difference, permutation_type="samples", n_resamples=resamples, vectorized=True, rng=rng
    )
    interval = stats.bootstrap(
        (differences,), _mean_difference, n_resamples=resamples, vectorized=True, method="percentile", rng=rng
    ).confidence_interval
    return PairedDifference(
        queries=len(common),
        mean=float(differences.mean()),
        ci_low=float(interval.low),
        ci_high=float(interval.high),
        p_value=float(test.pvalue),
        ties=len(common) - counts["wins"] - counts["losses"],
        **counts,
    )


def per_query_changes(
    candidate: Mapping[str, float], baseline: Mapping[str, float], limit: int = 10
) -> list[dict[str, float | str]]:
    """The ``limit`` largest losses and wins, worst first: where a difference comes from."""
    # (difference, query id), sorted as the rows are reported: by difference, then query id.
    changes = sorted(
        (candidate[q] - baseline[q], q) for q in set(candidate) & set(baseline) if candidate[q] != baseline[q]
    )
    losses = [(d, q) for d, q in changes if d < 0][:limit]
    wins = [(d, q) for d, q in reversed(changes) if d > 0][:limit]
    return [
        {"query_id": q, "candidate": candidate[q], "baseline": baseline[q], "difference": d}
        for d, q in losses + wins[::-1]
    ]


def scores_of(per_query: Mapping[str, Mapping[str, float]], metric: str) -> dict[str, float]:
    return {qid: float(values[metric]) for qid, values in per_query.items()}


def is_significant_drop(difference: PairedDifference, alpha: float) -> bool:
    return difference.mean < 0 and difference.p_value < alpha


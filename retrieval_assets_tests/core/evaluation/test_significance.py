"""The paired comparison behind the promotion gate and the learner: known cases."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval_assets.core.evaluation.significance import (
    is_significant_drop,
    paired_difference,
    per_query_changes,
)

RNG = np.random.default_rng(7)
BASELINE = {f"q{i}": float(x) for i, x in enumerate(RNG.random(300))}


def test_a_small_drop_on_a_few_queries_is_significant() -> None:
    # 10 of 300 queries lose 0.25: the mean falls by only 0.008, inside a 0.01 margin.
    candidate = {q: (v - 0.25 if i < 10 else v) for i, (q, v) in enumerate(BASELINE.items())}
    difference = paired_difference(candidate, BASELINE)
    assert difference.mean == pytest.approx(-10 * 0.25 / 300)
    assert difference.losses == 10 and difference.wins == 0 and difference.ties == 290
    assert difference.p_value < 0.01 and is_significant_drop(difference, 0.05)
    assert difference.ci_low <= difference.mean <= difference.ci_high < 0


def test_noise_without_a_shift_is_not_significant() -> None:
    noise = RNG.normal(0, 0.05, len(BASELINE))
    candidate = {q: v + n for (q, v), n in zip(BASELINE.items(), noise - noise.mean(), strict=True)}
    difference = paired_difference(candidate, BASELINE)
    assert difference.p_value > 0.05 and not is_significant_drop(difference, 0.05)
    assert difference.ci_low < 0 < difference.ci_high


def test_identical_scores_and_disjoint_queries() -> None:
    same = paired_difference(BASELINE, dict(BASELINE))
    assert same.p_value == 1.0 and same.mean == 0.0 and same.ties == 300
    with pytest.raises(ValueError, match="no query was scored by both"):
        paired_difference({"a": 1.0}, {"b": 1.0})


def test_the_result_is_reproducible() -> None:
    candidate = {q: v + RNG.normal(0.01, 0.05) for q, v in BASELINE.items()}
    assert paired_difference(candidate, BASELINE) == paired_difference(candidate, BASELINE)


def test_per_query_changes_lists_losses_worst_first_then_wins() -> None:
    candidate = {"a": 0.5, "b": 0.9, "c": 0.1, "d": 0.4}
    baseline = {"a": 0.5, "b": 0.6, "c": 0.7, "d": 0.5}
    rows = per_query_changes(candidate, baseline)
    assert [row["query_id"] for row in rows] == ["c", "d", "b"]
    assert rows[0]["difference"] == pytest.approx(-0.6)

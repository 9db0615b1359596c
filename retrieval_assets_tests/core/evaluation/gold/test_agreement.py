"""Kendall's tau between two scorings of the same configurations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from retrieval_assets.core.evaluation.gold.agreement import kendall_tau, split_half_agreement


def test_tau_over_the_configurations_both_scored() -> None:
    real = {"bm25": 0.30, "dense": 0.40, "hybrid": 0.45}
    assert kendall_tau(real, {"bm25": 0.5, "dense": 0.6, "hybrid": 0.7, "only_here": 0.1}) == pytest.approx(1.0)
    assert kendall_tau(real, {"bm25": 0.7, "dense": 0.6, "hybrid": 0.5}) == pytest.approx(-1.0)
    assert kendall_tau(real, {"bm25": 0.6, "dense": 0.5, "hybrid": 0.7}) == pytest.approx(1 / 3)
    # tau-b: one tie in the second scoring, 2 concordant pairs / sqrt(3 * 2)
    assert kendall_tau(real, {"bm25": 0.5, "dense": 0.5, "hybrid": 0.7}) == pytest.approx(2 / math.sqrt(6))
    assert math.isnan(kendall_tau(real, {"bm25": 0.5, "dense": 0.5, "hybrid": 0.5}))
    with pytest.raises(ValueError, match="two configurations"):
        kendall_tau(real, {"bm25": 0.5, "other": 0.1})


def _scores(means: dict[str, float], queries: int, spread: float, seed: int) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(seed)
    return {
        name: {f"q{i}": float(mean + spread * rng.standard_normal()) for i in range(queries)}
        for name, mean in means.items()
    }


def test_split_half_agreement_is_high_for_well_separated_configurations_and_low_for_equal_ones() -> None:
    separated = split_half_agreement(_scores({"a": 0.2, "b": 0.4, "c": 0.6, "d": 0.8}, 200, 0.05, seed=1))
    assert separated["median"] == 1.0 and separated["share_reaching_bar"] == 1.0
    assert separated["queries_per_half"] == 100 and separated["splits"] == 500 and separated["bar"] == 0.6
    alike = split_half_agreement(_scores({name: 0.5 for name in "abcdef"}, 200, 0.2, seed=2))
    # Equal configurations: only this sample's chance differences order them, weakly.
    assert float(alike["median"]) < 0.5 and float(alike["share_reaching_bar"]) < 0.5
    assert alike["q1"] <= alike["median"] <= alike["q3"]
    # Seeded: the same scores give the same figures.
    assert alike == split_half_agreement(_scores({name: 0.5 for name in "abcdef"}, 200, 0.2, seed=2))


def test_split_half_agreement_uses_the_queries_every_configuration_scored() -> None:
    scores = _scores({"a": 0.2, "b": 0.8}, 10, 0.01, seed=3)
    scores["a"] |= {"only_a": 1.0, "another": 1.0}
    assert split_half_agreement(scores)["queries_per_half"] == 5
    with pytest.raises(ValueError, match="four queries"):
        split_half_agreement({"a": {"q1": 0.1, "q2": 0.2, "q3": 0.3}, "b": {"q1": 0.1, "q2": 0.2, "q3": 0.3}})
    with pytest.raises(ValueError, match="two configurations"):
        split_half_agreement({"a": {"q1": 0.1}})
    with pytest.raises(ValueError, match="alike"):
        split_half_agreement({name: {f"q{i}": 1.0 for i in range(8)} for name in "ab"})

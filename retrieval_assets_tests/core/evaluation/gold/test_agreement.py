"""Kendall's tau between two scorings of the same configurations."""

from __future__ import annotations

import math

import pytest

from retrieval_assets.core.evaluation.gold.agreement import kendall_tau


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

"""``bench-auth`` over the real three-tenant build: the same search, served with and without keys."""

from __future__ import annotations

import json

import pytest

from retrieval_assets.bench.auth_overhead import TARGET_OVERHEAD_MS, measure_auth_overhead
from retrieval_assets.serving import create_app
from retrieval_assets.serving.auth import ApiKeys, new_key
from retrieval_assets_tests.core.retrieval.tenant_indexes import build_tenant_indexes


def test_bench_auth_times_both_arms_in_alternating_rounds(tmp_path_factory: pytest.TempPathFactory) -> None:
    build = build_tenant_indexes(tmp_path_factory.getbasetemp() / "tenant_indexes")
    assert build.success
    service = build.search_resource().service
    token, key = new_key("bench", ["alpha"], ["search"], requests_per_minute=10_000_000)
    home = tmp_path_factory.mktemp("bench_auth_home")
    apps = [create_app(service, home=home, catalog_format="tool_catalog", keys=keys) for keys in (None, ApiKeys([key]))]
    figures = measure_auth_overhead(
        *apps, token, "alpha", ["align reads", "medical image viewer"], requests=6, rounds=3
    )
    assert figures["requests_per_arm"] == 6 and figures["concurrency"] == 1
    for arm in ("open", "open_tenant", "with_key"):
        assert len(figures[f"rounds_{arm}"]) == 3 and 0 < figures[f"p50_{arm}_ms"] <= figures[f"p95_{arm}_ms"]
    assert figures["p50_overhead_ms"] == round(figures["p50_with_key_ms"] - figures["p50_open_tenant_ms"], 3)
    assert figures["p50_tenant_filter_ms"] == round(figures["p50_open_tenant_ms"] - figures["p50_open_ms"], 3)
    assert figures["target_met"] == (figures["p50_overhead_ms"] <= TARGET_OVERHEAD_MS)
    json.dumps(figures)


def test_bench_auth_refuses_a_keyed_app_that_answers_without_a_key(tmp_path_factory: pytest.TempPathFactory) -> None:
    build = build_tenant_indexes(tmp_path_factory.getbasetemp() / "tenant_indexes")
    service = build.search_resource().service
    home = tmp_path_factory.mktemp("bench_auth_open")
    apps = [create_app(service, home=home, catalog_format="tool_catalog") for _ in range(2)]
    with pytest.raises(RuntimeError, match="answered 200 without a key, not 401"):
        measure_auth_overhead(*apps, "ra.x.y", "alpha", ["align reads"], requests=2, rounds=1)

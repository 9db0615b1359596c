"""The LLM API key, configured through a Dagster ``EnvVar``, is used but never written anywhere.

The shared three-tenant build configures ``SearchResource.llm_api_key = EnvVar(...)`` and evaluates
with multi-query on, so the key is sent to a loopback OpenAI-compatible endpoint. The key must not
appear in the run's event log (logs, asset metadata, check results), in the stored run config, in
any Python log record, in ``/health`` or in a search result's diagnostics.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from dagster import EnvVar, build_resources
from dagster._serdes import serialize_value
from fastapi.testclient import TestClient

from retrieval_assets.defs.resources import MultiQueryConfig, SearchResource
from retrieval_assets.serving import create_app
from retrieval_assets_tests.core.retrieval.tenant_indexes import SECRET, SECRET_ENV, TenantBuild, build_tenant_indexes


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> TenantBuild:
    built = build_tenant_indexes(tmp_path_factory.getbasetemp() / "tenant_indexes")
    assert built.success
    return built


def test_the_key_reached_the_llm_endpoint(build: TenantBuild) -> None:
    # Otherwise the absence checks below would prove nothing: the key was resolved from the environment and used.
    assert f"Bearer {SECRET}" in build.llm_authorization


def test_the_key_is_not_in_the_run_record(build: TenantBuild) -> None:
    entries = build.instance.all_logs(build.run_id)
    # Logs, materializations (with their metadata) and check results: everything the UI shows of the run.
    assert any(entry.asset_materialization for entry in entries) and any(entry.user_message for entry in entries)
    for entry in entries:
        assert SECRET not in serialize_value(entry), entry.user_message
    run = build.instance.get_run_by_id(build.run_id)
    assert run is not None and SECRET not in serialize_value(run)
    assert build.python_log and not [line for line in build.python_log if SECRET in line]


@pytest.fixture(scope="module")
def client(build: TenantBuild) -> Iterator[TestClient]:
    """The API as ``retrieval-assets serve`` builds it: the EnvVar resolved by ``build_resources``."""
    configured = build.search_resource(
        multi_query=MultiQueryConfig(llm_base_url=build.llm_url), llm_api_key=EnvVar(SECRET_ENV)
    )
    with build_resources({"search": configured}) as resources:
        search: SearchResource = resources.search
        assert search.llm_api_key == SECRET
        with TestClient(create_app(search.service, catalog_format="tool_catalog")) as test_client:
            yield test_client


def test_the_key_is_not_in_health_results_or_logs(
    client: TestClient, build: TenantBuild, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    calls_before = len(build.llm_authorization)
    health = client.get("/health")
    assert health.status_code == 200 and SECRET not in health.text
    result = client.post("/search", json={"query": "align reads to a genome", "multi_query": True, "tenant": "alpha"})
    assert result.status_code == 200
    labels = [r["label"] for r in result.json()["diagnostics"]["multi_query"]["reformulations"]]
    assert "llm1" in labels and build.llm_authorization[calls_before:] == [f"Bearer {SECRET}"]
    assert SECRET not in result.text
    stream = client.get("/search/stream", params={"query": "align reads", "multi_query": True})
    assert stream.status_code == 200 and SECRET not in stream.text
    assert SECRET not in client.get("/openapi.json").text
    assert caplog.records and SECRET not in caplog.text

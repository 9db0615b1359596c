"""The code location's resources: servers and secrets as ``EnvVar`` fields set where the
definitions load (a server nobody named stays off), and a description on every field of every
resource and config, which the Dagster UI shows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import ConfigurableResource, EnvVar, build_resources
from dagster._config import ConfigType, ConfigTypeKind
from pydantic import Field, SecretStr

from retrieval_assets.definitions import defs
from retrieval_assets.defs.resources import CatalogResource, code_location_resources
from retrieval_assets.runs import deployment_resources

SERVER_VARIABLES = {
    "QDRANT_URL": "http://qdrant.example:6333",
    "QDRANT_API_KEY": "qdrant-key",
    "OPENSEARCH_URL": "https://opensearch.example:9200",
    "OPENSEARCH_USER": "admin",
    "OPENSEARCH_PASSWORD": "opensearch-password",
    "OPENSEARCH_VERIFY_CERTS": "false",
    "OPENSEARCH_REPLICAS": "0",
}
LLM_VARIABLES = {"RETRIEVAL_LLM_BASE_URL": "http://llm.example/v1", "RETRIEVAL_LLM_API_KEY": "llm-key"}
EVERY_VARIABLE = [
    *SERVER_VARIABLES,
    *LLM_VARIABLES,
    "QDRANT_CA_CERTS",
    "OPENSEARCH_API_KEY",
    "OPENSEARCH_CA_CERTS",
    "OPENSEARCH_SNAPSHOT_REPOSITORY",
]


def _plain(secret: SecretStr | str | None) -> str | None:
    return secret.get_secret_value() if isinstance(secret, SecretStr) else secret


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in EVERY_VARIABLE:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_unset_variables_leave_the_servers_off(clean_environment: pytest.MonkeyPatch) -> None:
    clean_environment.setenv("QDRANT_URL", "")  # empty counts as unset
    resources = code_location_resources()
    storage, search = resources["storage"], resources["search"]
    assert storage.qdrant_url is None and storage.opensearch_url is None
    assert search.llm_api_key is None and search.multi_query.llm_base_url is None
    with build_resources({"storage": storage}) as built:
        assert built.storage.servers() is None


def test_set_variables_are_envvar_fields_that_a_run_resolves(clean_environment: pytest.MonkeyPatch) -> None:
    for name, value in {**SERVER_VARIABLES, **LLM_VARIABLES}.items():
        clean_environment.setenv(name, value)
    resources = code_location_resources()
    storage, search = resources["storage"], resources["search"]
    # The definitions hold the variables' names (what the UI shows), not their values.
    assert isinstance(storage.qdrant_url, EnvVar) and storage.qdrant_url.env_var_name == "QDRANT_URL"
    assert isinstance(search.llm_api_key, EnvVar) and search.llm_api_key.env_var_name == "RETRIEVAL_LLM_API_KEY"
    assert storage.qdrant_ca_certs is None  # its variable is unset
    with build_resources({"storage": storage, "search": search}) as built:
        servers = built.storage.servers()
        assert servers is not None
        assert servers.settings.qdrant is not None and servers.settings.qdrant.url == SERVER_VARIABLES["QDRANT_URL"]
        assert _plain(servers.settings.qdrant.api_key) == "qdrant-key"
        opensearch = servers.settings.opensearch
        assert opensearch is not None and opensearch.url == SERVER_VARIABLES["OPENSEARCH_URL"]
        assert (opensearch.username, _plain(opensearch.password)) == ("admin", "opensearch-password")
        assert opensearch.verify_certs is False
        assert servers.settings.opensearch_replicas == 0
        assert built.search.llm_api_key == "llm-key"
        assert built.search.retrieval_settings().multi_query.llm_base_url == LLM_VARIABLES["RETRIEVAL_LLM_BASE_URL"]


def test_scratch_deployments_leave_the_environment_alone(clean_environment: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in {**SERVER_VARIABLES, **LLM_VARIABLES}.items():
        clean_environment.setenv(name, value)
    resources = deployment_resources(tmp_path, CatalogResource(path=str(tmp_path)))
    assert resources["storage"].servers() is None and resources["search"].llm_api_key is None


def _undescribed(config_type: ConfigType, path: str) -> Iterator[str]:
    """Fields without a description in a Dagster config type, nested fields included."""
    if ConfigTypeKind.has_fields(config_type.kind):
        for name, field in config_type.fields.items():  # type: ignore[attr-defined]
            if not field.description:
                yield f"{path}.{name}"
            yield from _undescribed(field.config_type, f"{path}.{name}")
    elif config_type.kind in (ConfigTypeKind.ARRAY, ConfigTypeKind.NONEABLE, ConfigTypeKind.MAP):
        yield from _undescribed(config_type.inner_type, path)  # type: ignore[attr-defined]


def _undescribed_in(resources: dict[str, Any]) -> list[str]:
    return [
        field
        for key, resource in resources.items()
        if resource.config_schema is not None
        for field in _undescribed(resource.config_schema.config_type, key)
    ]


def test_every_resource_field_is_described() -> None:
    repository = defs.get_repository_def()
    assert _undescribed_in(repository.get_top_level_resources()) == []


def test_every_op_config_field_is_described() -> None:
    repository = defs.get_repository_def()
    undescribed = [
        field
        for job in repository.get_all_jobs()
        for op in job.graph.iterate_op_defs()
        if op.config_schema is not None and op.config_schema.config_type is not None
        for field in _undescribed(op.config_schema.config_type, op.name)
    ]
    assert undescribed == []


def test_an_undescribed_field_is_reported() -> None:
    # A guard against a checker that finds nothing.
    class Example(ConfigurableResource):
        described: int = Field(1, description="a field with a description")
        bare: int = 1

    assert _undescribed_in({"example": Example().get_resource_definition()}) == ["example.bare"]


def test_catalog_sources_of_every_kind_each_their_own_tenant(tmp_path: Path) -> None:
    from retrieval_assets.core.ingest.catalog import ColumnMapping

    (tmp_path / "papers").mkdir()
    (tmp_path / "rows.csv").write_text("key,body\na,x\n")
    catalog = CatalogResource(
        format="auto",
        path=str(tmp_path / "papers"),
        extra_sources=[str(tmp_path / "rows.csv")],
        exclude=["drafts/**"],
        max_file_mb=1,
        id_column="key",
        text_column="body",
    )
    sources = catalog.sources()
    assert {name: (s.format, s.tenant_id) for name, s in sources.items()} == {
        "papers": ("files", "default"),
        "rows": ("table", "rows"),
    }
    assert (sources["papers"].exclude, sources["papers"].max_file_bytes) == (("drafts/**",), 2**20)
    assert sources["rows"].columns == ColumnMapping(id="key", text="body")
    assert catalog.gold() is None  # a folder of files has no gold of its own
    clash = CatalogResource(format="auto", path=str(tmp_path / "papers"), extra_sources=[str(tmp_path / "papers")])
    with pytest.raises(ValueError, match="two catalog sources are named 'papers'"):
        clash.sources()

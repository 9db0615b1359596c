"""The HTTP tests' shared build: the three-tenant catalog, through the build job."""

from __future__ import annotations

import pytest

from retrieval_assets_tests.core.retrieval.tenant_indexes import TenantBuild, build_tenant_indexes


@pytest.fixture(scope="session")
def build(tmp_path_factory: pytest.TempPathFactory) -> TenantBuild:
    built = build_tenant_indexes(tmp_path_factory.getbasetemp() / "tenant_indexes")  # once per session
    assert built.success
    return built

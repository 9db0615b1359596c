"""The production instance's servers, started once for the deployment tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from retrieval_assets_tests.servers import Postgres, postgres_server, redis_server


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url

"""Fixtures of the OpenSearch tests: a request recorder and the retry sleeps it saw."""

from __future__ import annotations

import pytest

from retrieval_assets_tests.core.stores.opensearch.recording import (
    Recorder,
)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def sleeps() -> list[float]:
    return []

"""Reaching a Qdrant server: the version floor and the masked API key."""

from __future__ import annotations

import pytest

from retrieval_assets.core.stores.qdrant.connection import QdrantServerSettings
from retrieval_assets.core.stores.qdrant.server import QdrantServerStore
from retrieval_assets_tests.core.stores.fake_servers import FakeQdrant
from retrieval_assets_tests.core.stores.server_inputs import (
    FAST,
    SECRET,
)


@pytest.mark.parametrize("version", ["1.15.2", "1.9.0", "0.11.1"])
def test_qdrant_below_the_floor_is_refused_at_open_and_create(version):
    fake = FakeQdrant(version="1.19.0")
    client = fake.client()
    QdrantServerStore.create(client, "chunks", 2, version="v1", retry=FAST)
    old = FakeQdrant(version=version, collections=fake.collections, aliases=fake.aliases)
    with pytest.raises(RuntimeError, match=rf"Qdrant server runs {version}.*1\.16"):
        QdrantServerStore.open(old.client(), "chunks-v1", retry=FAST)
    with pytest.raises(RuntimeError, match=rf"Qdrant server runs {version}.*1\.16"):
        QdrantServerStore.create(FakeQdrant(version=version).client(), "chunks", 2, version="v2", retry=FAST)


@pytest.mark.parametrize("version", ["1.16.0", "1.19.0", "1.20.3-rc1", "2.0.0"])
def test_qdrant_at_or_above_the_floor_is_accepted(version):
    fake = FakeQdrant(version=version)
    QdrantServerStore.create(fake.client(), "chunks", 2, version="v1", retry=FAST)
    assert QdrantServerStore.open(fake.client(), "chunks-v1", retry=FAST).collection == "chunks-v1"


def test_qdrant_settings_mask_the_api_key():
    settings = QdrantServerSettings(url="https://qdrant.example:6333", api_key=SECRET)
    assert SECRET not in repr(settings)
    with pytest.raises(ValueError, match="not in the url") as error:
        QdrantServerSettings(url=f"https://key:{SECRET}@qdrant.example:6333")
    assert SECRET not in str(error.value)

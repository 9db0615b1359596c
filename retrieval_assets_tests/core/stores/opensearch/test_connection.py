"""Reaching OpenSearch: credentials masked, API keys sent as they are, bad settings refused."""

from __future__ import annotations

import pytest

from retrieval_assets.core.stores.opensearch.connection import (
    OpenSearchSettings,
    connect,
)
from retrieval_assets.core.stores.opensearch.store import OpenSearchStore
from retrieval_assets_tests.core.stores.server_inputs import (
    SECRET,
)


def test_opensearch_secrets_are_masked_and_api_keys_sent_as_is(recorder):
    settings = OpenSearchSettings(url="https://search.example:9200", username="admin", password=SECRET)
    assert SECRET not in repr(settings) and SECRET not in str(settings)
    client = connect(settings, connection_class=recorder.connection_class())
    store = OpenSearchStore.create(client, "chunks", version="v0")
    assert SECRET not in repr(client) and SECRET not in repr(store)
    recorder.requests.clear()
    keyed = OpenSearchSettings(url="https://search.example:9200", api_key="os_token123")
    OpenSearchStore.create(connect(keyed, connection_class=recorder.connection_class()), "chunks", version="v1")
    assert recorder.requests[0].headers["authorization"] == "ApiKey os_token123"
    assert "os_token123" not in repr(keyed)
    with pytest.raises(ValueError, match="not in the url") as error:
        OpenSearchSettings(url=f"https://admin:{SECRET}@search.example:9200")
    assert SECRET not in str(error.value)
    with pytest.raises(ValueError, match="both"):
        OpenSearchSettings(url="https://search.example:9200", username="admin")
    with pytest.raises(ValueError, match="not both"):
        OpenSearchSettings(url="https://search.example:9200", username="a", password="b", api_key="c")

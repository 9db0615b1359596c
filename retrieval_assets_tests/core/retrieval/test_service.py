"""The SearchService follows the promoted version; a promoted shard still held by the run that
promoted it is served from the version it replaced until it can be opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.core.stores.qdrant.edge import QdrantEdgeStore, ShardBusyError
from retrieval_assets.defs.resources import (
    IndexStorageResource,
    ModelResource,
    SearchResource,
)
from retrieval_assets_tests import TEST_DATA
from retrieval_assets_tests.builds import build_catalog

TOOLS = TEST_DATA / "tools_with_relations.jsonl"


def test_a_promoted_shard_open_elsewhere_is_served_from_the_previous_version_until_it_opens(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _, first = build_catalog(home, TOOLS)
    lines = TOOLS.read_text().splitlines()
    changed = tmp_path / "changed.jsonl"
    changed.write_text("\n".join(lines[:-1]) + "\n")
    _, second = build_catalog(home, changed)
    versions = IndexVersions(home / "indexes")
    versions.promote(first, reason="test")
    search = SearchResource(storage=IndexStorageResource(home=str(home)), models=ModelResource())
    service = search.service
    try:
        assert service.retriever() is service.retriever(first.id)
        held = QdrantEdgeStore.open(second.layout.qdrant)  # as the promoting run's process holds it
        versions.promote(second, reason="test")
        assert service.retriever() is service.retriever(first.id)  # the one it replaced answers
        with pytest.raises(ShardBusyError):
            service.retriever(second.id)  # a named version is never substituted
        held.close()
        assert service.retriever() is service.retriever(second.id)
        assert service.search("sequence alignment", top_k=3).hits
    finally:
        search.close()


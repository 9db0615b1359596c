"""The SearchService follows the promoted version; a shard another process holds (a server, or
the run that promoted it) is searched from a private copy, so no reader fails because another reads."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.core.stores.qdrant.edge import QdrantEdgeStore
from retrieval_assets.defs.resources import (
    IndexStorageResource,
    ModelResource,
    SearchResource,
)
from retrieval_assets_tests import TEST_DATA
from retrieval_assets_tests.builds import build_catalog

TOOLS = TEST_DATA / "tools_with_relations.jsonl"


def test_a_shard_open_elsewhere_is_searched_from_a_private_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    _, first = build_catalog(home, TOOLS)
    lines = TOOLS.read_text().splitlines()
    changed = tmp_path / "changed.jsonl"
    changed.write_text("\n".join(lines[:-1]) + "\n")
    _, second = build_catalog(home, changed)
    versions = IndexVersions(home / "indexes")
    versions.promote(first, reason="test")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    query = {"query": "sequence alignment", "top_k": 5, "strategies": ["splade"], "rerank": False}

    def splade_hits() -> list[str]:
        search = SearchResource(storage=IndexStorageResource(home=str(home)), models=ModelResource())
        try:
            return [hit.chunk_id for hit in search.service.search(**query).hits]
        finally:
            search.close()

    held = QdrantEdgeStore.open(second.layout.qdrant)  # as a server serving it, or the promoting run, holds it
    search = SearchResource(storage=IndexStorageResource(home=str(home)), models=ModelResource())
    service = search.service
    try:
        assert service.retriever() is service.retriever(first.id)
        versions.promote(second, reason="test")
        assert service.retriever() is service.retriever(second.id)  # at once, not after the holder lets go
        assert [path.name[:19] for path in scratch.iterdir()] == ["qdrant-edge-reader-"]
        beside_the_holder = [hit.chunk_id for hit in service.search(**query).hits]
    finally:
        search.close()
    assert list(scratch.iterdir()) == []  # the copy went with the retriever
    held.close()
    assert beside_the_holder and beside_the_holder == splade_hits()

"""Versions on a Qdrant server, through qdrant-client's in-process local mode (no server here):
a build in slices, the chunk-id check, alias promotion and rollback, and dropping a version."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from qdrant_client import QdrantClient

from retrieval_assets.core.models import SparseVector, Strategy
from retrieval_assets.core.index.servers import ServerIndexes, ServerSettings, roll_back, switch_serving
from retrieval_assets.core.stores.qdrant_server_store import QdrantServerSettings
from retrieval_assets.core.index.versions import IndexVersions


def _batches(ids: list[str], rows: int):
    vectors = np.eye(len(ids), 4, dtype=np.float32) + 0.1
    for start in range(0, len(ids), rows):
        part = ids[start : start + rows]
        payloads = [{"chunk_id": i, "doc_id": i.split("#")[0], "tenant_id": "t", "section": "body",
                     "title": "", "text": f"text of {i}"} for i in part]
        sparse = [SparseVector(indices=[n], values=[1.0]) for n, _ in enumerate(part, start=start)]
        yield payloads, vectors[start : start + rows], sparse


@pytest.fixture()
def servers() -> ServerIndexes:
    indexes = ServerIndexes(ServerSettings(qdrant=QdrantServerSettings(url="http://unused:6333")))
    indexes.__dict__["_qdrant"] = QdrantClient(":memory:")  # in place of connecting to QDRANT_URL
    return indexes


def test_versions_on_the_server_are_built_promoted_rolled_back_and_dropped(servers, tmp_path) -> None:
    first, second = ["a#0", "b#0", "c#0"], ["a#0", "c#0", "d#0", "e#0"]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Payload indexes have no effect")  # local mode accepts, ignores
        assert servers.build("v-1", 4, {}, _batches(first, rows=2)) == {"qdrant-server": 3}
        servers.build("v-2", 4, {}, _batches(["stale#0"], rows=1))  # an interrupted build's leftover
        assert servers.build("v-2", 4, {}, _batches(second, rows=3)) == {"qdrant-server": 4}
    assert servers.chunk_ids("v-1") == {"qdrant-server": set(first)}
    assert servers.chunk_ids("v-2") == {"qdrant-server": set(second)}  # the leftover was replaced

    versions = IndexVersions(tmp_path)
    local = {name: versions.candidate(name * 8) for name in ("1", "2")}
    for version in local.values():
        versions.seal(version, version.id)
    # The local versions' ids name the server versions.
    servers.build(local["1"].id, 4, {}, _batches(first, rows=2))
    servers.build(local["2"].id, 4, {}, _batches(second, rows=2))
    client = servers.__dict__["_qdrant"]

    def alias_target() -> str:
        return {a.alias_name: a.collection_name for a in client.get_aliases().aliases}["retrieval_chunks"]

    switch_serving(versions, servers, local["1"], reason="test")
    switch_serving(versions, servers, local["2"], reason="test")
    assert alias_target() == servers.name(local["2"].id) and versions.promoted() == local["2"]
    assert roll_back(versions, servers) == local["1"]
    assert alias_target() == servers.name(local["1"].id)
    hits = servers.stores(local["1"].id)[Strategy.DENSE].search_dense(np.eye(1, 4, dtype=np.float32)[0] + 0.1, top_k=3)
    assert {hit.chunk_id for hit in hits} == set(first)

    servers.drop("v-1")
    assert not client.collection_exists(servers.name("v-1"))

"""Versions on a Qdrant server, through qdrant-client's in-process local mode (no server here):
a build in slices, the chunk-id check, alias promotion and rollback, and dropping a version."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from qdrant_client import QdrantClient

from retrieval_assets.core.index.servers import ServerIndexes, ServerSettings, roll_back, switch_serving
from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.core.models import SparseVector, Strategy
from retrieval_assets.core.stores.qdrant.connection import QdrantServerSettings


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


# -- both servers, through the real clients over recorded transports (fake_servers) ------------

from retrieval_assets.core.stores.opensearch.connection import OpenSearchSettings  # noqa: E402
from retrieval_assets_tests.core.stores.fake_servers import FakeOpenSearch, FakeQdrant  # noqa: E402

REPOSITORY = "retrieval-snapshots"


@pytest.fixture()
def fakes():
    return FakeQdrant(), FakeOpenSearch()


def both_servers(fakes, **settings) -> ServerIndexes:
    qdrant, opensearch = fakes
    indexes = ServerIndexes(ServerSettings(
        qdrant=QdrantServerSettings(url="https://qdrant.example:6333"),
        opensearch=OpenSearchSettings(url="https://search.example:9200"),
        opensearch_replicas=0, initial_backoff_s=0.0, **settings,
    ))
    indexes.retry = type(indexes.retry)(max_retries=2, initial_backoff_s=0.0, sleep=lambda s: None)
    indexes.__dict__["_qdrant"] = qdrant.client()
    indexes.__dict__["_opensearch"] = opensearch.client()
    return indexes


def built_versions(servers: ServerIndexes, tmp_path, count: int = 2) -> tuple[IndexVersions, list]:
    versions = IndexVersions(tmp_path)
    built = []
    for n in range(count):
        version = versions.candidate(str(n) * 8)
        versions.seal(version, version.id)
        servers.build(version.id, 4, {"year": "integer"}, _batches([f"x{n}#0", f"y{n}#0"], rows=1))
        built.append(version)
    return versions, built


def serving(fakes, servers: ServerIndexes) -> tuple[str | None, list[str]]:
    qdrant, opensearch = fakes
    alias = servers.settings.alias
    return qdrant.aliases.get(alias), sorted(opensearch.aliases.get(alias, set()))


def test_promotion_takes_a_snapshot_when_a_repository_is_configured(fakes, tmp_path) -> None:
    # Fix 2: OPENSEARCH_SNAPSHOT_REPOSITORY reaches the store that promotes.
    servers = both_servers(fakes, snapshot_repository=REPOSITORY)
    versions, (v1, _) = built_versions(servers, tmp_path)
    switch_serving(versions, servers, v1, reason="test")
    assert [key.split("/")[0] for key in fakes[1].snapshots] == [REPOSITORY]
    assert next(iter(fakes[1].snapshots.values()))["indices"] == servers.name(v1.id)


def test_a_failed_snapshot_leaves_both_aliases_and_the_pointer_agreeing(fakes, tmp_path) -> None:
    # Fix 3: the snapshot is taken before any alias moves; when it fails nothing moved.
    servers = both_servers(fakes, snapshot_repository=REPOSITORY)
    versions, (v1, v2) = built_versions(servers, tmp_path)
    switch_serving(versions, servers, v1, reason="test")
    fakes[1].fail("PUT", r"/_snapshot/.*", status=500, times=10,
                  body={"type": "snapshot_creation_exception", "reason": "disk full"})
    with pytest.raises(Exception, match="500|snapshot"):
        switch_serving(versions, servers, v2, reason="test")
    assert serving(fakes, servers) == (servers.name(v1.id), [servers.name(v1.id)])
    assert versions.promoted() == v1


def test_the_snapshot_is_retried_and_not_bound_by_the_client_timeout(fakes, tmp_path) -> None:
    # Fix 3: one transient failure does not fail a promotion; the wait is not the client's 30 s.
    servers = both_servers(fakes, snapshot_repository=REPOSITORY)
    versions, (v1, _) = built_versions(servers, tmp_path)
    fakes[1].fail("PUT", r"/_snapshot/.*", status=503)
    switch_serving(versions, servers, v1, reason="test")
    assert serving(fakes, servers) == (servers.name(v1.id), [servers.name(v1.id)])
    waits = [timeout for call, timeout in fakes[1].timeouts if call.startswith("PUT /_snapshot/")]
    assert len(waits) == 2 and all(t is not None and t > 30 for t in waits), waits


def test_alias_updates_are_retried_on_both_servers(fakes, tmp_path) -> None:
    # Fix 8: one transient 503 on each alias update does not fail a promotion.
    servers = both_servers(fakes)
    versions, (v1, _) = built_versions(servers, tmp_path)
    fakes[0].fail("POST", "/collections/aliases", status=503)
    fakes[1].fail("POST", "/_aliases", status=503)
    switch_serving(versions, servers, v1, reason="test")
    assert serving(fakes, servers) == (servers.name(v1.id), [servers.name(v1.id)])


def test_opensearch_refusing_restores_the_qdrant_alias(fakes, tmp_path) -> None:
    servers = both_servers(fakes)
    versions, (v1, v2) = built_versions(servers, tmp_path)
    switch_serving(versions, servers, v1, reason="test")
    fakes[1].fail("POST", "/_aliases", status=400)
    with pytest.raises(Exception, match="400"):
        switch_serving(versions, servers, v2, reason="test")
    assert serving(fakes, servers) == (servers.name(v1.id), [servers.name(v1.id)])
    assert versions.promoted() == v1
    # The very first promotion refused: no Qdrant alias is left behind either.
    fresh_fakes = (FakeQdrant(), FakeOpenSearch())
    fresh = both_servers(fresh_fakes)
    fresh_versions, (w1, _) = built_versions(fresh, tmp_path / "fresh")
    fresh_fakes[1].fail("POST", "/_aliases", status=400)
    with pytest.raises(Exception, match="400"):
        switch_serving(fresh_versions, fresh, w1, reason="test")
    assert serving(fresh_fakes, fresh) == (None, []) and fresh_versions.promoted() is None


def test_rollback_moves_both_aliases_back_without_a_new_snapshot(fakes, tmp_path) -> None:
    servers = both_servers(fakes, snapshot_repository=REPOSITORY)
    versions, (v1, v2) = built_versions(servers, tmp_path)
    switch_serving(versions, servers, v1, reason="test")
    switch_serving(versions, servers, v2, reason="test")
    assert serving(fakes, servers) == (servers.name(v2.id), [servers.name(v2.id)])
    assert roll_back(versions, servers) == v1
    assert serving(fakes, servers) == (servers.name(v1.id), [servers.name(v1.id)])
    assert len(fakes[1].snapshots) == 2  # one per promotion; the rollback target has its own


def test_pruning_drops_server_versions(fakes, tmp_path) -> None:
    servers = both_servers(fakes)
    versions, built = built_versions(servers, tmp_path, count=4)
    switch_serving(versions, servers, built[2], reason="test")
    switch_serving(versions, servers, built[3], reason="test")
    pruned = versions.prune(keep=2)
    for version_id in pruned:
        servers.drop(version_id)
    assert sorted(pruned) == sorted(v.id for v in built[:2])
    kept = {servers.name(v.id) for v in built[2:]}
    assert set(fakes[0].collections) == kept and set(fakes[1].indexes) == kept
    assert serving(fakes, servers) == (servers.name(built[3].id), [servers.name(built[3].id)])


def test_sparse_search_is_not_routed_to_a_lexical_only_index(fakes, tmp_path) -> None:
    # Fix 7: with Qdrant configured the OpenSearch index is lexical-only; without Qdrant it must
    # not be asked for SPLADE.
    servers = both_servers(fakes)
    _, (v1, _) = built_versions(servers, tmp_path)
    servers.__dict__["_qdrant"] = None
    assert Strategy.SPLADE not in servers.stores(v1.id)

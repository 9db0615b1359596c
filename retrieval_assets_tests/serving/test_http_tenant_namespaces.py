"""Document ids live in a tenant's namespace, through the build job and the HTTP API.

One small home, built once: two tenants' catalogs holding the same id (one catalog naming two
tenants, and a second catalog of a third tenant), alpha posting ids that beta and the default
tenant hold (``beta-3``, ``4983``), alpha and beta posting the same new id, and repeated ids
within one tenant (in one catalog and across two catalogs). Each tenant gets its own document,
indexed and searchable in its own scope; probing another tenant's id answers as an id nobody
holds does; a repeated id within a tenant is still ``duplicate_id``; deleting one tenant's copy
leaves the other's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from retrieval_assets.core.index.versions import IndexVersion, IndexVersions
from retrieval_assets.core.ingest.inbox import DocumentInbox, InboxEntry, InboxOperation, InboxOutcome
from retrieval_assets.core.models import SearchRequest
from retrieval_assets.defs.resources import (
    CatalogResource,
    GraphConfig,
    IndexBuildResource,
    IndexStorageResource,
    ModelResource,
    SearchResource,
)
from retrieval_assets.runs import BuildOutcome, build_index, deployment_resources, materialized
from retrieval_assets.serving import create_app
from retrieval_assets.serving.auth import ApiKeys, new_key


def _tool(doc_id: str, name: str, description: str, tenant: str | None = None, **fields: Any) -> dict[str, Any]:
    record = {"id": doc_id, "name": name, "description": description, **fields}
    return record if tenant is None else {**record, "tenant_id": tenant}


# The main catalog names each record's tenant; gamma.jsonl is its own tenant, "gamma".
CATALOG = [
    _tool(
        "shared-tool",
        "Quillwort Mapper",
        "Quillwort Mapper aligns nanopore reads against a reference genome.",
        "alpha",
        metadata={"topics": ["Mapping"]},
        relations={"requires": ["alpha-lib"]},
    ),
    _tool(
        "alpha-lib",
        "Alpha Seedlib",
        "Seedlib builds minimizer seed indexes for aligners.",
        "alpha",
        metadata={"topics": ["Mapping"]},
    ),
    _tool("alpha-dup", "Alpha Dup", "The first copy of a repeated alpha id: kept.", "alpha"),
    _tool("alpha-dup", "Alpha Dup Again", "The second copy of a repeated alpha id: a duplicate.", "alpha"),
    _tool("alpha-vcf", "Alpha VCF Tools", "Annotates variant call files with gene models.", "alpha"),
    _tool(
        "shared-tool",
        "Marzipanic Caller",
        "Marzipanic Caller phases structural variants from long reads.",
        "beta",
        metadata={"topics": ["Variants"]},
        relations={"requires": ["beta-lib"]},
    ),
    _tool(
        "beta-lib",
        "Beta Phaselib",
        "Phaselib phases haplotypes for variant callers.",
        "beta",
        metadata={"topics": ["Variants"]},
    ),
    _tool("beta-3", "Beta Three", "Beta Three counts k-mers in sequencing reads.", "beta"),
    _tool("beta-qc", "Beta QC", "Quality control reports for raw sequencing runs.", "beta"),
    _tool("4983", "Default Record", "A protein structure viewer for crystallography models.", "default"),
    _tool("default-extra", "Default Extra", "Plots coverage depth along chromosomes.", "default"),
    _tool("gamma-only", "Zebrafinch Viewer", "Zebrafinch Viewer shows microscopy stacks: the first copy.", "gamma"),
]
GAMMA = [
    _tool("shared-tool", "Gamma Render", "Gamma Render draws medical volumes in three dimensions."),
    _tool("gamma-only", "Zebrafinch Again", "A second gamma copy of an id gamma's main-catalog record holds."),
    _tool("gamma-dicom", "Gamma DICOM", "Stores DICOM studies on a small server."),
]
# Posted through the inbox: alpha takes ids beta and the default tenant hold, and a fresh one;
# alpha and beta post the same new id.
POSTS = [
    ("alpha", _tool("beta-3", "Alpha Three", "Alpha's own beta-3 trims adapters from reads.")),
    ("alpha", _tool("4983", "Alpha Number", "Alpha's own 4983 merges paired reads.")),
    ("alpha", _tool("alpha-fresh", "Alpha Fresh", "An id nobody else holds: dereplicates amplicons.")),
    ("alpha", _tool("posted-same", "Posted Alpha", "Alpha's posted-same assembles plasmids.")),
    ("beta", _tool("posted-same", "Posted Beta", "Beta's posted-same assembles chloroplasts.")),
]
GRANTS = {
    "alpha-app": (["alpha"], ["search", "documents:write"]),
    "beta-app": (["beta"], ["search", "documents:write"]),
    "gamma-app": (["gamma"], ["search", "documents:write"]),
    "default-app": (["default"], ["search", "documents:write"]),
    "alpha-beta": (["alpha", "beta"], ["search"]),
}
_ISSUED = {key_id: new_key(key_id, tenants, scopes) for key_id, (tenants, scopes) in GRANTS.items()}  # type: ignore[arg-type]
KEYS = ApiKeys([key for _, key in _ISSUED.values()])


def _auth(key_id: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {_ISSUED[key_id][0]}"}


# Deltas up to half the chunks: the rebuild after a delete applies it to a copy of the served version.
BUILD = IndexBuildResource(delta_max_changed_fraction=0.5)


def _build(home: Path, catalog: Path, gamma: Path) -> tuple[BuildOutcome, IndexVersion]:
    """The build job over both catalogs and the inbox; its version promoted."""
    resources = deployment_resources(
        home, CatalogResource(format="tool_catalog", path=str(catalog), extra_sources=[str(gamma)]), build=BUILD
    )
    outcome = build_index(resources)
    assert outcome.success and outcome.candidate is not None and outcome.candidate.sealed, outcome.run.run_id
    versions = IndexVersions(home / "indexes")
    version = versions.version(outcome.candidate.version)
    versions.promote(version, reason="test")
    return outcome, version


@dataclass
class Home:
    home: Path
    catalog: Path
    gamma: Path
    first: BuildOutcome
    version: IndexVersion


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Home:
    root = tmp_path_factory.mktemp("tenant_namespaces")
    catalog, gamma = _write(root / "catalog.jsonl", CATALOG), _write(root / "gamma.jsonl", GAMMA)
    home = root / "home"
    entries = [
        InboxEntry.new(InboxOperation.UPSERT, record["id"], tenant, format="tool_catalog", record=record)
        for tenant, record in POSTS
    ]
    DocumentInbox.under(home).append(entries)
    first, version = _build(home, catalog, gamma)
    return Home(home, catalog, gamma, first, version)


def _resource(home: Path) -> SearchResource:
    storage = IndexStorageResource(home=str(home))
    return SearchResource(storage=storage, models=ModelResource(), build=BUILD, graph=GraphConfig(enabled=True))


@pytest.fixture
def client(built: Home) -> Iterator[TestClient]:
    # A server per test: a qdrant-edge shard opens once per process.
    resource = _resource(built.home)
    app = create_app(resource.service, home=built.home, catalog_format="tool_catalog", keys=KEYS)
    with TestClient(app) as test_client:
        yield test_client
    resource.close()


def _get(client: TestClient, key_id: str, doc_id: str) -> Any:
    return client.get(f"/documents/{doc_id}", headers=_auth(key_id))


def _search(client: TestClient, key_id: str, query: str, **options: Any) -> list[tuple[str, str, str]]:
    body = {"query": query, "top_k": 20, "rerank": False, **options}
    response = client.post("/search", json=body, headers=_auth(key_id))
    assert response.status_code == 200, response.text
    return [(hit["tenant_id"], hit["doc_id"], hit["title"]) for hit in response.json()["hits"]]


def test_two_catalogs_and_the_inbox_hold_the_same_id_for_different_tenants_and_all_build(built: Home) -> None:
    cleaned = materialized(built.first.run, "cleaned_documents")
    chunks = materialized(built.first.run, "chunks")
    # alpha-dup twice in one catalog, gamma-only in two catalogs of gamma: the only quarantined rows.
    assert cleaned["quarantined"] == 2 and cleaned["quarantined/duplicate_id"] == 2
    assert built.first.documents == 18 and chunks["chunks"] == 18
    assert built.version.manifest()["documents"] == 18  # each tenant's shared-tool counted apart
    outcomes = {(e.tenant_id, e.doc_id): (e.outcome, e.reason) for e in DocumentInbox.under(built.home).archived()}
    assert outcomes == {(tenant, record["id"]): (InboxOutcome.INDEXED, None) for tenant, record in POSTS}
    # The knowledge graph holds each tenant's shared-tool, apart.
    graph = materialized(built.first.run, "knowledge_graph")
    assert graph["graph_path"] == str(built.version.layout.graph) and built.version.layout.graph.is_file()


def test_each_tenant_sees_its_own_copy_through_get_and_search(client: TestClient) -> None:
    titles = {"alpha-app": "Quillwort Mapper", "beta-app": "Marzipanic Caller", "gamma-app": "Gamma Render"}
    for key_id, title in titles.items():
        document = _get(client, key_id, "shared-tool").json()
        assert (document["status"], document["title"]) == ("indexed", title), document
        assert document["tenant_id"] == GRANTS[key_id][0][0] and document["doc_id"] == "shared-tool"
        assert document["chunk_id"] == f"{document['tenant_id']}/shared-tool#0"
    for key_id, title in (("alpha-app", "Posted Alpha"), ("beta-app", "Posted Beta")):
        document = _get(client, key_id, "posted-same").json()
        assert (document["status"], document["title"], document["receipt"] is not None) == ("indexed", title, True)
    # In search, each tenant finds its own copy, and never another's, by its own words or another's.
    assert ("alpha", "shared-tool", "Quillwort Mapper") in _search(client, "alpha-app", "Quillwort nanopore aligner")
    assert ("beta", "shared-tool", "Marzipanic Caller") in _search(client, "beta-app", "Marzipanic structural variants")
    for key_id, query in (("alpha-app", "Marzipanic structural variants"), ("beta-app", "Quillwort nanopore")):
        hits = _search(client, key_id, query, expand=True)
        assert hits and {tenant for tenant, _, _ in hits} == set(GRANTS[key_id][0]), hits
    # A caller granted both tenants gets both documents, one hit each (not collapsed into one).
    both = _search(client, "alpha-beta", "posted-same assembles plasmids chloroplasts")
    assert {("alpha", "Posted Alpha"), ("beta", "Posted Beta")} <= {(tenant, title) for tenant, _, title in both}
    unscoped = client.app.state.service.run(SearchRequest(query="shared tool", top_k=40, rerank=False))
    copies = {hit.tenant_id for hit in unscoped.hits if hit.doc_id == "shared-tool"}
    assert copies == {"alpha", "beta", "gamma"}


def test_more_like_this_and_the_graph_resolve_an_id_within_the_callers_tenants(client: TestClient) -> None:
    walks = (("alpha-app", "alpha", "Quillwort nanopore", "alpha-lib"), ("beta-app", "beta", "Marzipanic", "beta-lib"))
    for key_id, tenant, query, related in walks:
        body = {"query": "doc:shared-tool", "top_k": 20, "rerank": False}
        result = client.post("/search", json=body, headers=_auth(key_id)).json()
        assert result["diagnostics"]["more_like_this"] == "shared-tool"
        assert {hit["tenant_id"] for hit in result["hits"]} == {tenant}
        assert "shared-tool" not in {hit["doc_id"] for hit in result["hits"]}  # the document itself is left out
        # BM25 finds the tenant's shared-tool; the graph walks from it in its own tenant only.
        body = {"query": query, "top_k": 20, "rerank": False, "expand": False, "strategies": ["bm25"]}
        result = client.post("/search", json=body, headers=_auth(key_id)).json()
        hits = [(hit["tenant_id"], hit["doc_id"]) for hit in result["hits"]]
        assert hits[0] == (tenant, "shared-tool") and (tenant, related) in hits
        assert {t for t, _ in hits} == {tenant} and "shared-tool" in result["diagnostics"]["graph"]["seeds"]
    # alpha's walk from its shared-tool adds the tool it requires (BM25 alone does not find it).
    body = {"query": "Quillwort nanopore", "top_k": 20, "rerank": False, "expand": False, "strategies": ["bm25"]}
    result = client.post("/search", json=body, headers=_auth("alpha-app")).json()
    assert result["diagnostics"]["graph"]["added"] == ["alpha-lib"]


def test_probing_another_tenants_id_answers_as_an_id_nobody_holds(client: TestClient, built: Home) -> None:
    """alpha took beta-3 and 4983 in its own namespace, exactly as it took an id nobody held;
    the owners keep theirs. A tenant that never posted them is told nothing of either."""
    shown = ("status", "version", "candidate", "reason", "detail", "operation", "tenant_id")

    def status(key_id: str, doc_id: str) -> dict[str, Any]:
        response = _get(client, key_id, doc_id)
        assert response.status_code == 200, response.text
        return {k: v for k, v in response.json().items() if k in shown}

    fresh = status("alpha-app", "alpha-fresh")
    assert fresh == {**fresh, "status": "indexed", "version": built.version.id, "reason": None, "tenant_id": "alpha"}
    assert status("alpha-app", "beta-3") == status("alpha-app", "4983") == fresh
    assert _get(client, "alpha-app", "beta-3").json()["title"] == "Alpha Three"
    assert _get(client, "beta-app", "beta-3").json()["title"] == "Beta Three"
    assert _get(client, "default-app", "4983").json()["title"] == "Default Record"
    for doc_id in ("beta-3", "4983", "posted-same", "alpha-fresh"):
        probe, unknown = _get(client, "gamma-app", doc_id), _get(client, "gamma-app", "nobody-holds-this")
        assert probe.status_code == unknown.status_code == 404
        assert probe.text == unknown.text.replace("nobody-holds-this", doc_id)
    # Posting another tenant's id is accepted as any new id is; the receipt says nothing more.
    for doc_id in ("beta-3", "4983", "never-held"):
        record = _tool(doc_id, "Gamma Probe", "Gamma's probe of an id.")
        response = client.post("/documents", json=record, headers=_auth("gamma-app"))
        assert response.status_code == 202, response.text
        (receipt,) = response.json()["receipts"]
        assert {k: receipt[k] for k in ("doc_id", "tenant_id", "status")} == {
            "doc_id": doc_id,
            "tenant_id": "gamma",
            "status": "pending",
        }


def test_deleting_one_tenants_copy_leaves_the_others(built: Home) -> None:
    resource = _resource(built.home)
    app = create_app(resource.service, home=built.home, catalog_format="tool_catalog", keys=KEYS)
    with TestClient(app) as client:
        assert client.delete("/documents/shared-tool", headers=_auth("beta-app")).status_code == 202
    resource.close()
    outcome, version = _build(built.home, built.catalog, built.gamma)
    assert outcome.candidate is not None and outcome.candidate.base_version == built.version.id  # a delta
    resource = _resource(built.home)
    app = create_app(resource.service, home=built.home, catalog_format="tool_catalog", keys=KEYS)
    with TestClient(app) as client:
        deleted = _get(client, "beta-app", "shared-tool").json()
        assert (deleted["status"], deleted["version"], deleted["title"]) == ("deleted", version.id, None)
        for key_id, title in (("alpha-app", "Quillwort Mapper"), ("gamma-app", "Gamma Render")):
            kept = _get(client, key_id, "shared-tool").json()
            assert (kept["status"], kept["title"]) == ("indexed", title)
        assert ("alpha", "shared-tool", "Quillwort Mapper") in _search(client, "alpha-app", "Quillwort nanopore")
        assert "shared-tool" not in {doc_id for _, doc_id, _ in _search(client, "beta-app", "Marzipanic variants")}
        gamma_posts = {
            e.doc_id: e.outcome for e in DocumentInbox.under(built.home).archived() if e.tenant_id == "gamma"
        }
        assert gamma_posts == dict.fromkeys(("beta-3", "4983", "never-held"), InboxOutcome.INDEXED)
    resource.close()

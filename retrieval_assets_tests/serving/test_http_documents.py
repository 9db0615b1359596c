"""The document routes of the HTTP API over the real three-tenant build (the one test_http_api
uses), with the inbox in a scratch home: batches, all-or-nothing rejection, deletes, statuses
through take-in and promotion, tenant isolation, and concurrent posts."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from retrieval_assets.core.index.layout import IndexLayout
from retrieval_assets.core.index.versions import IndexVersion
from retrieval_assets.core.ingest.inbox import DocumentInbox, InboxOutcome
from retrieval_assets.serving import create_app
from retrieval_assets.serving.schemas import MAX_DOCUMENT_BATCH
from retrieval_assets_tests.core.retrieval.tenant_indexes import TenantBuild

INDEXED = (InboxOutcome.INDEXED, None, None)


@pytest.fixture(scope="module")
def promoted(build: TenantBuild) -> IndexVersion:
    version = build.search_resource().storage.versions().promoted()
    assert version is not None
    return version


@pytest.fixture(scope="module")
def client(build: TenantBuild, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    # The inbox goes to a scratch home so that posted documents do not touch the shared build.
    app = create_app(
        build.search_resource().service, home=tmp_path_factory.mktemp("documents_home"), catalog_format="tool_catalog"
    )
    with TestClient(app) as test_client:
        yield test_client


def tool(doc_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": doc_id, "name": f"Tool {doc_id}", "description": "Aligns long reads to a genome.", **fields}


def inbox_of(client: TestClient) -> DocumentInbox:
    return client.app.state.inbox


def post(client: TestClient, body: Any, tenant: str | None = None) -> Any:
    params = {"tenant": tenant} if tenant else {}
    content = body if isinstance(body, bytes) else json.dumps(body)
    return client.post("/documents", content=content, params=params, headers={"content-type": "application/json"})


def get(client: TestClient, doc_id: str, tenant: str | None = None) -> Any:
    return client.get(f"/documents/{doc_id}", params={"tenant": tenant} if tenant else {})


def delete(client: TestClient, doc_id: str, tenant: str | None = None) -> Any:
    return client.delete(f"/documents/{doc_id}", params={"tenant": tenant} if tenant else {})


def test_a_batch_is_queued_with_one_receipt_per_record(client: TestClient) -> None:
    records = [tool("batch-1", metadata={"year": 2025}), tool("batch-2"), tool("batch-3")]
    response = post(client, records, tenant="beta")
    assert response.status_code == 202, response.text
    receipts = response.json()["receipts"]
    assert [r["doc_id"] for r in receipts] == ["batch-1", "batch-2", "batch-3"]
    assert {(r["tenant_id"], r["operation"], r["status"]) for r in receipts} == {("beta", "upsert", "pending")}
    queued = {entry.receipt: entry for entry in inbox_of(client).pending()}
    assert [queued[r["receipt"]].record for r in receipts] == records
    assert {queued[r["receipt"]].format for r in receipts} == {"tool_catalog"}
    status = get(client, "batch-1", "beta").json()
    assert status["status"] == "pending" and status["receipt"] == receipts[0]["receipt"]
    assert status["operation"] == "upsert" and status["received_at"] == receipts[0]["received_at"]
    assert status["title"] is None  # not in the served index yet
    single = post(client, tool("single-1"))  # one record: the same shape, the default tenant
    assert single.status_code == 202 and [(r["doc_id"], r["tenant_id"]) for r in single.json()["receipts"]] == [
        ("single-1", "default")
    ]
    twice = post(client, [tool("twice", name="First"), tool("twice", name="Second")], tenant="beta")
    assert [r["doc_id"] for r in twice.json()["receipts"]] == ["twice", "twice"]  # the later supersedes
    assert get(client, "twice", "beta").json()["receipt"] == twice.json()["receipts"][1]["receipt"]


def test_a_batch_with_a_quarantined_record_writes_nothing(client: TestClient) -> None:
    post(client, tool("before-the-bad-batch"))  # the inbox file exists
    before = inbox_of(client).pending_path.read_bytes()
    records = [tool("ok-1"), {"name": "No id", "description": "d"}, tool("ok-2"), tool("empty", description=" ")]
    response = post(client, records)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["reason"] == "missing_id" and body["detail"].startswith("record 1: missing_id: field 'id'")
    assert "1 more" in body["detail"] and body["error"] == "QuarantinedRecord"
    assert [(e["loc"], e["type"]) for e in body["errors"]] == [(["body", 1], "missing_id"), (["body", 3], "empty_text")]
    assert body["errors"][1]["doc_id"] == "empty" and "description" in body["errors"][1]["msg"]
    # Cleaning would take this one, the published record schema does not (a key ending in a space).
    unkeyed = post(client, [tool("ok-3"), tool("odd-key", metadata={"note ": "x"})])
    assert unkeyed.status_code == 422 and unkeyed.json()["errors"][0]["loc"][:3] == ["body", 1, "metadata"]
    assert inbox_of(client).pending_path.read_bytes() == before


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"[]", "no records"),
        (json.dumps([tool(f"many-{i}") for i in range(MAX_DOCUMENT_BATCH + 1)]).encode(), "at most 1,000 records"),
        (
            json.dumps([tool("own-tenant", tenant_id="alpha")]).encode(),
            "0.tenant_id: a posted record does not name its tenant",
        ),
        (json.dumps([tool("no-name", name=None)]).encode(), "invalid_field_type"),
        (b'[{"id": "nan", "name": "N", "description": "d", "metadata": {"score": NaN}}]', "malformed_json"),
        (b'[{"id": "sur", "name": "S", "description": "a lone \\ud800 surrogate"}]', "invalid_utf8"),
    ],
)
def test_batches_that_cannot_be_taken_are_422(client: TestClient, body: bytes, expected: str) -> None:
    before = inbox_of(client).snapshot()
    response = post(client, body, tenant="alpha")
    assert response.status_code == 422 and expected in response.json()["detail"], response.text
    assert inbox_of(client).snapshot() == before


def test_a_body_over_the_limit_is_413(client: TestClient) -> None:
    records = [tool(f"large-{i}", description="x" * 150_000) for i in range(15)]  # each record fits, the body not
    assert post(client, records).status_code == 413


def test_quarantined_records_are_422_with_the_reason(client: TestClient) -> None:
    for body, reason in (
        (b'{"id": "x", "name": "Broken', "malformed_json"),
        (b'{"id": "x", "name": "Empty", "description": "  "}', "empty_text"),
        (b'{"name": "No id", "description": "d"}', "missing_id"),
        (b'{"id": "x", "name": "caf\xe9", "description": "d"}', "invalid_utf8"),
        (b'{"id": "x", "name": 5, "description": "d"}', "invalid_field_type"),
        (b'{"id": "x", "name": "N", "description": "d", "metadata": {"score": NaN}}', "malformed_json"),
        (b"[1, 2]", "not_an_object"),
    ):
        response = post(client, body)
        assert response.status_code == 422 and response.json()["reason"] == reason, response.text


def test_delete_needs_a_document_the_index_or_the_inbox_holds(client: TestClient) -> None:
    unknown = delete(client, "no-such-tool", "alpha")
    assert unknown.status_code == 404 and unknown.json()["detail"] == "no document 'no-such-tool' for tenant 'alpha'"
    post(client, tool("to-delete"), tenant="alpha")
    accepted = delete(client, "to-delete", "alpha")
    assert accepted.status_code == 202, accepted.text
    (receipt,) = accepted.json()["receipts"]
    assert (receipt["doc_id"], receipt["tenant_id"], receipt["operation"], receipt["status"]) == (
        "to-delete",
        "alpha",
        "delete",
        "pending",
    )
    assert inbox_of(client).receipt(receipt["receipt"]).operation == "delete"
    status = get(client, "to-delete", "alpha").json()
    assert (status["status"], status["operation"], status["receipt"]) == ("pending", "delete", receipt["receipt"])
    assert delete(client, "to-delete", "alpha").status_code == 404  # its latest entry is a delete, and it is not served
    # Only in the served index: the delete is queued, and the served copy still shows until a build.
    served = delete(client, "vcflib", "alpha")
    assert served.status_code == 202
    status = get(client, "vcflib", "alpha").json()
    assert (status["status"], status["operation"], status["chunk_id"]) == ("pending", "delete", "alpha/vcflib#0")


def test_statuses_follow_take_in_and_the_promoted_version(client: TestClient, promoted: IndexVersion) -> None:
    ids = ("st-indexed", "st-rejected", "st-deleted", "st-candidate")
    post(client, [tool(doc_id) for doc_id in ids], tenant="gamma")
    assert delete(client, "st-deleted", "gamma").status_code == 202
    entries = {(e.doc_id, e.operation): e.receipt for e in inbox_of(client).pending() if e.doc_id in ids}
    detail = "the record's id 'other' is not the entry's"
    inbox_of(client).take_in(
        promoted.id,
        {
            entries["st-indexed", "upsert"]: INDEXED,
            entries["st-rejected", "upsert"]: (InboxOutcome.REJECTED, "invalid_field_type", detail),
            entries["st-deleted", "upsert"]: INDEXED,
            entries["st-deleted", "delete"]: (InboxOutcome.DELETED, None, None),
        },
    )
    # A build that is sealed but not promoted (sealed later than the promoted one).
    inbox_of(client).take_in("v-not-promoted", {entries["st-candidate", "upsert"]: INDEXED})

    def status(doc_id: str) -> dict[str, Any]:
        response = get(client, doc_id, "gamma")
        assert response.status_code == 200, response.text
        shown = ("status", "version", "candidate", "reason", "detail")
        return {k: v for k, v in response.json().items() if v is not None and k in shown}

    assert status("st-indexed") == {"status": "indexed", "version": promoted.id}
    assert status("st-rejected") == {
        "status": "rejected",
        "version": promoted.id,
        "reason": "invalid_field_type",
        "detail": detail,
    }
    assert status("st-deleted") == {"status": "deleted", "version": promoted.id}
    assert status("st-candidate") == {"status": "pending", "candidate": "v-not-promoted"}
    # Rejected documents cannot be deleted; taken-in ones can.
    assert delete(client, "st-rejected", "gamma").status_code == 404
    assert delete(client, "st-indexed", "gamma").status_code == 202


def test_documents_are_tenant_scoped(client: TestClient, promoted: IndexVersion) -> None:
    post(client, tool("alpha-only"), tenant="alpha")
    for doc_id in ("alpha-only", "bwa"):  # pending in alpha's inbox / indexed in alpha
        missing = get(client, doc_id, "beta")
        assert missing.status_code == 404 and missing.json()["detail"] == f"no document {doc_id!r} for tenant 'beta'"
        assert delete(client, doc_id, "beta").json()["detail"] == missing.json()["detail"]
        assert get(client, doc_id, "alpha").json()["tenant_id"] == "alpha"
    assert get(client, "alpha-only").json()["status"] == "pending"  # no tenant: any tenant, as before
    assert get(client, "never-posted", "beta").json()["detail"] == "no document 'never-posted' for tenant 'beta'"


def test_indexed_documents_come_from_the_served_index(client: TestClient, promoted: IndexVersion) -> None:
    document = get(client, "bwa").json()
    assert (document["status"], document["version"], document["tenant_id"]) == ("indexed", promoted.id, "alpha")
    assert document["chunk_id"] == "alpha/bwa#0"  # chunk ids name the tenant: ids live in its namespace
    assert document["metadata"]["year"] == 2010 and document["receipt"] is None
    assert get(client, "beta-bwa", "beta").json()["tenant_id"] == "beta"


def test_concurrent_posts_are_each_queued_once(client: TestClient) -> None:
    """Eight clients at once: past the write slots a post is a 503 with Retry-After, and a client
    that retries gets each record queued exactly once."""
    refused = []

    def send(i: int) -> list[str]:
        while (
            response := post(client, [tool(f"bulk-{i}-a", description="x" * 5_000), tool(f"bulk-{i}-b")])
        ).status_code == 503:
            assert response.headers["Retry-After"] == "1"
            refused.append(i)
            time.sleep(0.01)  # sooner than Retry-After asks: the test only needs a later turn
        assert response.status_code == 202, response.text
        return [r["receipt"] for r in response.json()["receipts"]]

    with ThreadPoolExecutor(max_workers=8) as pool:
        accepted = [receipt for receipts in pool.map(send, range(60)) for receipt in receipts]
    queued = [entry for entry in inbox_of(client).pending() if entry.doc_id.startswith("bulk-")]
    assert len(accepted) == len(set(accepted)) == 120 and sorted(e.receipt for e in queued) == sorted(accepted)
    lines = inbox_of(client).pending_path.read_text().splitlines()
    assert all(json.loads(line) for line in lines)  # whole lines only


def test_over_a_fixed_layout_the_index_says_what_is_applied(promoted: IndexVersion, tmp_path: Path) -> None:
    def never_opened() -> Any:
        raise AssertionError("document routes do not open a retriever")

    app = create_app(never_opened, layout=promoted.layout, home=tmp_path, catalog_format="tool_catalog", warm_up=False)
    with TestClient(app) as fixed:
        indexed = get(fixed, "bwa", "alpha").json()
        assert (indexed["status"], indexed["version"]) == ("indexed", None)
        post(fixed, [tool("bwa"), tool("fixed-new")], tenant="alpha")
        inbox = inbox_of(fixed)
        inbox.take_in("v-any", {entry.receipt: INDEXED for entry in inbox.pending()})
        assert get(fixed, "bwa", "alpha").json()["status"] == "indexed"  # the index holds it
        new = get(fixed, "fixed-new", "alpha").json()
        assert (new["status"], new["candidate"]) == ("pending", "v-any")  # the index does not hold it yet


def test_beir_records_are_taken_by_their_own_schema(tmp_path: Path) -> None:
    def never_opened() -> Any:
        raise AssertionError("document routes do not open a retriever")

    # beir: the default catalog format
    app = create_app(never_opened, layout=IndexLayout(tmp_path / "indexes"), home=tmp_path, warm_up=False)
    with TestClient(app) as beir:
        accepted = post(beir, [{"_id": 7, "title": "Insulin", "text": "Insulin resistance in mice.", "year": 2019}])
        assert accepted.status_code == 202 and accepted.json()["receipts"][0]["doc_id"] == "7"
        assert [(e.format, e.record["year"]) for e in inbox_of(beir).pending()] == [("beir", 2019)]
        for record, error in (
            ({"_id": "x", "text": "t", "": 1}, "QuarantinedRecord"),  # an empty metadata key
            ({"_id": "x", "text": "t", "big": 2**64}, "QuarantinedRecord"),  # beyond int64
            ({"_id": "x", "title": "Only a title"}, "RequestValidationError"),  # the catalog takes it, HTTP needs text
            ({"_id": "x", "text": "t", "note ": "x"}, "RequestValidationError"),  # a field name that ends in a space
        ):
            response = post(beir, record)
            assert response.status_code == 422 and response.json()["error"] == error, (record, response.text)
        assert len(inbox_of(beir).pending()) == 1
        record_schema = beir.get("/openapi.json").json()["paths"]["/documents"]["post"]["requestBody"]["content"]
        record_schema = record_schema["application/json"]["schema"]["oneOf"][0]
        assert record_schema["required"] == ["_id", "text"] and "propertyNames" in record_schema


def test_the_document_routes_are_documented(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    post_op, item = paths["/documents"]["post"], paths["/documents/{doc_id}"]
    assert set(post_op["responses"]) >= {"202", "413", "422"}
    record, array = post_op["requestBody"]["content"]["application/json"]["schema"]["oneOf"]
    assert array["maxItems"] == MAX_DOCUMENT_BATCH and "2,000,000 bytes" in post_op["requestBody"]["description"]
    assert array["items"] == record and set(record["required"]) == {"id", "name", "description"}  # tool_catalog
    assert set(item["get"]["responses"]) >= {"200", "404", "422"}
    assert set(item["delete"]["responses"]) >= {"202", "404", "422"}

"""The HTTP API over real small indexes (three tenants, every asset materialized), and the load test."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from retrieval_assets.bench.document_writes import measure_document_writes
from retrieval_assets.bench.loadtest import run_load_test
from retrieval_assets.core.index.layout import IndexLayout
from retrieval_assets.core.ingest.inbox import INBOX_DIR
from retrieval_assets.core.models import SearchRequest
from retrieval_assets.core.retrieval.service import BackendNotAvailableError
from retrieval_assets.serving import create_app
from retrieval_assets.serving.metrics import ServingMetrics
from retrieval_assets_tests.core.retrieval.tenant_indexes import TenantBuild

QUERY = "align sequencing reads to a reference genome"


@pytest.fixture(scope="module")
def client(build: TenantBuild, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    # The inbox goes to a scratch home so that posted documents do not touch the shared build.
    app = create_app(
        build.search_resource().service, home=tmp_path_factory.mktemp("api_home"), catalog_format="tool_catalog"
    )
    with TestClient(app) as test_client:  # runs the lifespan: opens the retriever, closes it at the end
        yield test_client


def _ids(body: dict[str, Any]) -> list[str]:
    return [hit["doc_id"] for hit in body["hits"]]


def test_search_answers_the_query_resources_result(client: TestClient) -> None:
    body = {"query": QUERY, "top_k": 5, "tenant": "alpha", "fusion": "rrf", "rerank": False}
    response = client.post("/search", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    expected = client.app.state.service.run(SearchRequest(query=QUERY, top_k=5, tenant_id="alpha", fusion="rrf"))
    assert _ids(result) == [hit.doc_id for hit in expected.hits] and len(result["hits"]) == 5
    assert result["strategies"] == expected.strategies and result["fusion"] == "rrf"
    assert result["reranked"] is False and result["refine"] is False
    assert {"total_ms", *(f"{name}_ms" for name in expected.strategies)} <= set(result["timings_ms"])
    top = result["hits"][0]
    assert top["tenant_id"] == "alpha" and set(top["strategy_scores"]) & set(expected.strategies)
    assert result["diagnostics"]["filters"] == [{"field": "tenant_id", "any_of": ["alpha"]}]


def test_search_options_reach_the_retriever(client: TestClient) -> None:
    body = {
        "query": "medical image viewer [REFINE]",
        "top_k": 3,
        "tenant_id": "gamma",  # the SearchRequest spelling works too
        "strategies": ["bm25", "dense"],
        "fusion": "zscore",
        "rerank": True,
        "expand": True,
        "multi_query": True,
        "context_files": ["scan.dcm"],
        "filters": {"topics": "Medical imaging"},
    }
    result = client.post("/search", json=body).json()
    assert result["strategies"] == ["bm25", "dense"] and result["fusion"] == "zscore"
    assert result["reranked"] and result["refine"]
    assert result["diagnostics"]["context_tokens"] == ["format:DICOM"]
    assert "multi_query" in result["diagnostics"] and result["hits"]
    assert {hit["tenant_id"] for hit in result["hits"]} == {"gamma"}


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        events.append((fields["event"], json.loads(fields["data"])))
    return events


def test_stream_sends_metadata_then_hits_then_done(client: TestClient) -> None:
    params = {"query": QUERY, "top_k": 4, "tenant": "beta", "strategies": "bm25,splade", "fusion": "minmax"}
    response = client.get("/search/stream", params=params)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = _events(response.text)
    (kind, meta), *hits, (last, done) = events
    assert kind == "meta" and last == "done"
    assert meta["query"] == QUERY and meta["strategies"] == ["bm25", "splade"] and meta["fusion"] == "minmax"
    assert meta["count"] == len(hits) == done["count"] == 4 and "total_ms" in meta["timings_ms"]
    assert [data["rank"] for _, data in hits] == [1, 2, 3, 4]
    assert {data["tenant_id"] for _, data in hits} == {"beta"} and all(data["strategy_scores"] for _, data in hits)


@pytest.mark.parametrize(
    ("request_body", "expected"),
    [
        ({"query": "x" * 1001}, "at most 1000 characters"),
        ({"query": ""}, "at least 1 character"),
        ({"query": "bwa", "top_k": 0}, "greater than or equal to 1"),
        ({"query": "bwa", "top_k": 1001}, "less than or equal to 1000"),
        ({"query": "bwa", "strategies": ["bm42"]}, "strategies"),
        ({"query": "bwa", "topk": 3}, "Extra inputs are not permitted"),
        ({"query": "bwa", "filters": {"year": {"above": 2019}}}, "unknown range keys"),
        ({"query": "bwa", "filters": {"license": []}}, "at least 1 item"),
        ({"query": "bwa", "filters": {"year": {}}}, "gte, lte or both"),
        ({"query": "bwa", "filters": {"year": None}}, "a filter is a string, number or boolean"),
        ({"query": "bwa", "filters": {"": "x"}}, "at least 1 character"),
        ({"query": "bwa", "top_k": "5"}, "top_k must be an integer"),
        ({"query": "bwa", "rerank": 0}, "valid boolean"),
        ({"query": "bwa", "strategies": ["bm25,dense"]}, "strategies"),  # the comma form is the query string's
        ({"query": "bwa [EXCLUDE:]"}, "malformed control tag"),
        ({"query": "[NO_RERANK]"}, "only control tags"),
        ({"query": "aligners since 2020 before 2010"}, "2020"),
        ({"query": "since 2019"}, "nothing is left to search"),
        ({"query": "   "}, "not a space"),
    ],
)
def test_bad_requests_are_422_with_a_clear_message(client: TestClient, request_body: dict, expected: str) -> None:
    response = client.post("/search", json=request_body)
    assert response.status_code == 422, response.text
    body = response.json()
    assert expected in body["detail"] and body["error"]
    assert "x" * 100 not in response.text  # hostile input is not echoed back


@pytest.mark.parametrize(
    ("path", "body", "reason"),
    [
        ("/search", b'{"query": "bwa", "filters": {"year": {"gte": Infinity}}}', None),
        ("/search", b'{"query": "bwa", "filters": {"tenant_id": "\\ud800"}}', None),
        ("/documents", b'{"id": "nan", "name": "N", "description": "d", "metadata": {"score": NaN}}', "malformed_json"),
        ("/documents", b'{"id": "sur", "name": "S", "description": "a lone \\ud800 surrogate"}', "invalid_utf8"),
    ],
)
def test_what_python_parses_but_nothing_can_store_is_422(
    client: TestClient, path: str, body: bytes, reason: str
) -> None:
    # NaN/Infinity and lone surrogates pass json.loads; stores and Parquet then fail (see test_hostile_input).
    response = client.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json().get("reason") == reason


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "latin-1"])
def test_a_body_that_is_not_utf8_is_422_on_every_route(client: TestClient, encoding: str) -> None:
    # json.loads takes UTF-16 and UTF-32 bytes: without the check this search would be answered.
    for path, body in (("/search", {"query": "bwa é"}), ("/documents", {"id": "é", "name": "é", "description": "é"})):
        response = client.post(path, content=json.dumps(body, ensure_ascii=False).encode(encoding))
        assert response.status_code == 422, (path, response.text)
        assert response.json()["reason"] == "invalid_utf8" and "not UTF-8" in response.json()["detail"]


def test_headers_past_their_bounds_are_431(client: TestClient) -> None:
    many = {f"x-filler-{n}": "1" for n in range(100)}
    large = {"x-filler": "x" * 17_000}
    for headers in (many, large):
        response = client.post("/search", json={"query": "bwa"}, headers=headers)
        assert response.status_code == 431 and "at most 100 fields" in response.json()["detail"], response.text
    assert client.post("/search", json={"query": "bwa"}, headers={"x-filler": "x" * 8_000}).status_code == 200


def test_oversized_bodies_are_413(client: TestClient) -> None:
    big_search = {"query": "bwa", "context_metadata": {"note": "x" * 70_000}}
    assert client.post("/search", json=big_search).status_code == 413
    too_large = client.post("/documents", content=b'{"id": "big", "description": "' + b"x" * 2_100_000 + b'"}')
    assert too_large.status_code == 413


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"licence": "MIT"}, "'licence' is not a filter field of the served index"),
        ({"year": "recent"}, "expects integer values"),
        ({"license": {"gte": 1}}, "range filter on 'license', a keyword field"),
        ({"year": 2**63}, "outside the range of an integer field"),
        ({"year": {"lte": 1e300}}, "outside the range of an integer field"),
    ],
)
def test_filters_the_served_index_cannot_apply_are_409(client: TestClient, filters: dict, expected: str) -> None:
    # Well-formed, but the field names and types are the served version's data (GET /health lists them).
    for response in (
        client.post("/search", json={"query": "bwa", "filters": filters}),
        client.get("/search/stream", params={"query": "bwa", "filters": json.dumps(filters)}),
    ):
        assert response.status_code == 409 and expected in response.json()["detail"], response.text
    assert client.get("/health").json()["filter_fields"]["year"] == "integer"


def test_the_document_says_what_the_server_does(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    stream = spec["paths"]["/search/stream"]["get"]
    assert {code: set(r.get("content", {})) for code, r in stream["responses"].items() if code != "200"} == {
        "409": {"application/json"}, "422": {"application/json"}, "431": {"application/json"},
        "503": {"application/json"},
    }  # fmt: skip
    assert {p["name"] for p in stream["parameters"] if "content" in p} == {"filters", "context_metadata"}
    filters = spec["components"]["schemas"]["SearchBody"]["properties"]["filters"]["anyOf"][0]
    # The example names identifiers every index has, not fields of one catalog.
    (example,) = filters["examples"]
    assert set(example) <= set(client.get("/health").json()["filter_fields"])
    assert "filter_fields" in filters["description"]
    assert "413" in spec["paths"]["/search"]["post"]["responses"] and "413" not in stream["responses"]
    assert "422" not in spec["paths"]["/health"]["get"]["responses"]  # nothing there to validate
    writes = [spec["paths"]["/documents"]["post"], spec["paths"]["/documents/{doc_id}"]["delete"]]
    assert all("Retry-After" in operation["responses"]["503"]["headers"] for operation in writes)


def test_405_lists_the_allowed_methods_and_undecodable_bodies_are_422(client: TestClient) -> None:
    refused = (("TRACE", "/search", "POST"), ("PUT", "/health", "GET"), ("POST", "/search/stream", "GET"))
    for method, path, allowed in refused:
        response = client.request(method, path)
        assert response.status_code == 405 and response.headers["allow"] == allowed, (method, path)
    # Where several routes share a path, each knows only its own method: Allow names all of them.
    documented = client.get("/openapi.json").json()["paths"]["/documents/{doc_id}"]
    allowed = ", ".join(sorted(m.upper() for m in documented))
    assert client.request("TRACE", "/documents/bwa").headers["allow"] == allowed
    response = client.post("/search", content=b'{"query": "caf\xe9"}', headers={"content-type": "application/json"})
    assert response.status_code == 422 and response.json()["reason"] == "invalid_utf8", response.text


def test_stream_rejects_bad_input_before_streaming(client: TestClient) -> None:
    for params, expected in (
        ({"query": "bwa", "filters": "{not json"}, "not valid JSON"),
        ({"query": "bwa", "filters": '{"year": {"gte": NaN}}'}, "not a JSON number"),
        ({"query": "bwa", "filters": "[" * 3_000}, "not valid JSON"),
        ({"query": "bwa", "filters": '{"license": []}'}, "at least 1 item"),
        ({"query": "bwa", "context_metadata": "null"}, "must be a JSON object"),
        ({"query": "bwa [REFINE=1]"}, "REFINE"),
    ):
        response = client.get("/search/stream", params=params)
        assert response.status_code == 422 and expected in response.json()["detail"]


def test_health_reports_backends_and_version(client: TestClient, build: TenantBuild) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    health = response.json()
    counts = {name: backend["count"] for name, backend in health["backends"].items()}
    assert health["status"] == "ok" and all(b["ready"] for b in health["backends"].values())
    assert len(set(counts.values())) == 1 and counts["tantivy"] > 0
    assert health["vocabulary"] and health["graph"] and health["strategies"] == ["bm25", "splade", "dense"]
    pointer = build.search_resource().storage.versions().pointer()
    assert health["version"] == pointer["version"] and health["promoted_at"] == pointer["promoted_at"]


def test_without_indexes_health_and_search_say_unavailable(tmp_path: Path) -> None:
    def missing() -> Any:
        raise BackendNotAvailableError("no index at /nowhere: materialize the faiss_index asset first")

    with TestClient(create_app(missing, layout=IndexLayout(tmp_path / "indexes"))) as offline:
        health = offline.get("/health")
        assert health.status_code == 503 and "materialize" in health.json()["error"]
        assert not any(b["ready"] for b in health.json()["backends"].values())
        assert offline.post("/search", json={"query": "bwa"}).status_code == 503
        assert offline.get("/documents/bwa").status_code == 404
    assert not (tmp_path / INBOX_DIR).exists()


def test_openapi_and_docs_are_served(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert {"/search", "/search/stream", "/documents", "/documents/{doc_id}", "/health"} <= set(spec["paths"])
    assert client.get("/docs").status_code == 200


@pytest.fixture()
def live_url(client: TestClient) -> Iterator[str]:
    """The same app served by uvicorn on a free loopback port (lifespan off: the client owns the retriever)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(client.app, lifespan="off", log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        _wait_until_ready(server, thread, url, timeout_s=30.0)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def _wait_until_ready(server: uvicorn.Server, thread: threading.Thread, url: str, timeout_s: float) -> None:
    """Block until uvicorn has started and ``GET /health`` answers 200; fail the test otherwise."""
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    while time.monotonic() < deadline:
        if not thread.is_alive():
            pytest.fail(
                f"the uvicorn thread exited before {url} became ready (started={server.started}); see its log above"
            )
        if server.started:
            try:
                health = httpx.get(f"{url}/health", timeout=5.0)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if health.status_code == 200:
                    return
                last = f"HTTP {health.status_code}: {health.text[:200]}"
        time.sleep(0.05)
    pytest.fail(
        f"{url} was not ready within {timeout_s:.0f} s (uvicorn started={server.started}; last /health: {last})"
    )


def test_loadtest_reports_each_level(live_url: str) -> None:
    figures = run_load_test(live_url, [1, 2], requests=4, queries=[QUERY, "medical image viewer"], max_seconds=30)
    assert [level["concurrency"] for level in figures["levels"]] == [1, 2]
    for level in figures["levels"]:
        assert level["requests"] == 4 and level["errors"] == 0 and not level["stopped_by_time_limit"]
        assert level["throughput_rps"] > 0 and 0 < level["p50_ms"] <= level["p95_ms"] <= level["p99_ms"]
        # CPU per request: the server's from its /metrics, the client's own.
        assert level["server_cpu_ms_per_request"] > 0 and level["client_cpu_ms_per_request"] > 0
        assert 0 < level["server_encoder_cpu_ms_per_request"] < level["server_cpu_ms_per_request"]
    json.dumps(figures)  # one JSON line is what the command prints


def test_bench_document_writes_reports_the_servers_cpu_per_record(live_url: str, client: TestClient) -> None:
    inbox = client.app.state.inbox
    before = len(inbox.pending())
    records = [{"id": "x", "name": f"Tool {n}", "description": f"Aligns reads, variant {n}."} for n in range(25)]
    figures = measure_document_writes(live_url, records, repeat=2, tenant="beta", headers={})
    assert figures["records_per_post"] == 25 and len(figures["posts"]) == 2
    assert all(post["server_cpu_s"] > 0 and post["wall_s"] > 0 for post in figures["posts"])
    assert figures["server_cpu_ms_per_record"] > 0
    queued = inbox.pending()[before:]
    assert len(queued) == 50 and {entry.tenant_id for entry in queued} == {"beta"}
    assert len({entry.doc_id for entry in queued}) == 50  # each post's ids are fresh
    json.dumps(figures)


def test_process_cpu_seconds_resolve_less_than_a_clock_tick() -> None:
    # /proc counts CPU in 10 ms ticks; a small document post costs less and read as none.
    registry = ServingMetrics().registry

    def cpu() -> float:
        value = registry.get_sample_value("process_cpu_seconds_total")
        assert value is not None
        return value

    before = cpu()
    deadline = time.process_time() + 0.002
    while time.process_time() < deadline:
        pass
    after = cpu()
    assert after - before >= 0.002
    # Not whole 10 ms ticks (other threads may add CPU, so the difference alone proves nothing).
    assert any(abs(value * 100 - round(value * 100)) > 1e-6 for value in (before, after))
    assert registry.get_sample_value("process_resident_memory_bytes")  # the rest of the collector stays


def test_metrics_report_requests_stages_and_retrieval_signals(client: TestClient) -> None:
    body = {"query": "medical image viewer", "top_k": 5, "tenant": "gamma", "expand": True, "rerank": True}
    assert client.post("/search", json=body).status_code == 200
    assert client.post("/search", json={"query": "x", "filters": {"nosuch": 1}}).status_code == 409
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in response.text.splitlines()
        if line and not line.startswith("#")
    }
    assert samples['retrieval_http_requests_total{method="POST",route="/search",status="200"}'] >= 1
    assert samples['retrieval_http_requests_total{method="POST",route="/search",status="409"}'] >= 1
    for stage in ("parse", "bm25", "dense", "dense_encode", "fusion", "rerank", "serialisation"):
        assert samples[f'retrieval_stage_seconds_count{{stage="{stage}"}}'] >= 1, stage
    assert samples['retrieval_candidates_count{strategy="bm25"}'] >= 1
    assert samples['retrieval_fused_score_count{which="top"}'] >= 1 and samples["retrieval_hits_count"] >= 1
    assert samples["retrieval_rerank_mean_abs_rank_change_count"] >= 1
    assert samples["retrieval_expansion_terms_count"] >= 1
    assert samples["retrieval_searches_running"] == 0 and samples["retrieval_searches_waiting"] == 0
    assert samples["process_cpu_seconds_total"] > 0
    assert samples['retrieval_encoder_cpu_seconds_total{strategy="dense"}'] > 0
    # Routes are labelled by their template: a document id never becomes a label.
    client.get("/documents/some-secret-id")
    assert "some-secret-id" not in client.get("/metrics").text

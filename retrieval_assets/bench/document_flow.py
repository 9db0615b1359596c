"""``retrieval-assets bench-document-flow``: seconds from ``POST /documents`` to a hit in ``/search``.

Run against a served API whose home a Dagster daemon watches (``dagster dev`` with the code
location): the inbox sensor builds, evaluates and promotes, and the server answers from the
promoted version. The posted document carries a made-up word found nowhere else, so the search
for it finds that document or nothing.
"""

from __future__ import annotations

import sys
import time
import uuid
from typing import Any

import httpx

from retrieval_assets.bench.loadtest import client_headers
from retrieval_assets.bench.report import emit_figures

POLL_SECONDS = 0.5


def sample_record(nonce: str) -> dict[str, Any]:
    """A BEIR-style record (the bundled catalog's format) whose title and text carry ``nonce``."""
    return {
        "_id": f"flow-{nonce}",
        "title": f"Benchmark abstract {nonce}",
        "text": f"The marker {nonce} appears in this abstract only. It reports a measured delay between "
        "posting a document and finding it through the search endpoint of the served index.",
    }


def measure_document_flow(
    url: str,
    tenant: str | None = None,
    timeout_seconds: float = 300.0,
    record: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """POST one document, then poll ``GET /documents/{id}`` and ``POST /search`` until the search
    returns it; every figure is wall time from just before the POST."""
    nonce = "zq" + uuid.uuid4().hex[:10]
    record = record or sample_record(nonce)
    doc_id = str(record["_id"])
    query = {"query": nonce, "top_k": 5, "rerank": False} | ({"tenant": tenant} if tenant else {})
    params = {"tenant": tenant} if tenant else {}
    figures: dict[str, Any] = {"url": url, "doc_id": doc_id, "tenant": tenant}
    statuses: list[tuple[float, str]] = []
    with httpx.Client(base_url=url, timeout=30.0, headers=headers) as client:
        started = time.perf_counter()
        posted = client.post("/documents", json=record, params=params)
        figures["accepted_ms"] = round((time.perf_counter() - started) * 1000, 1)
        if posted.status_code != 202:
            raise RuntimeError(f"POST /documents answered {posted.status_code}: {posted.text[:500]}")
        while (elapsed := time.perf_counter() - started) < timeout_seconds:
            status = client.get(f"/documents/{doc_id}", params=params).json().get("status", "?")
            if not statuses or statuses[-1][1] != status:
                statuses.append((round(elapsed, 2), status))
            hits = client.post("/search", json=query).json().get("hits", []) if status == "indexed" else []
            if any(hit.get("doc_id") == doc_id for hit in hits):
                figures["searchable_seconds"] = round(time.perf_counter() - started, 2)
                break
            time.sleep(POLL_SECONDS)
        else:
            figures["searchable_seconds"] = None
            figures["timed_out_after_seconds"] = timeout_seconds
    figures["statuses"] = [{"seconds": seconds, "status": status} for seconds, status in statuses]
    return figures


def bench_document_flow(url: str, tenant: str | None, timeout: float, json_out: str | None) -> int:
    """POST a document and time it until /search finds it; the last stdout line is the JSON
    figures (exit 1 when it was not found in time)."""
    try:
        figures = measure_document_flow(url, tenant, timeout, headers=client_headers())
    except (httpx.HTTPError, RuntimeError) as exc:
        print(f"bench-document-flow: {exc}", file=sys.stderr)
        return 2
    emit_figures(figures, json_out)
    return 0 if figures["searchable_seconds"] is not None else 1

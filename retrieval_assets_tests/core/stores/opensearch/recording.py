"""A recording OpenSearch connection: the real ``opensearch-py`` client, its requests kept and answered.

It records method, URL, body and headers, and answers with documented response shapes
(queued statuses such as a 429 before a 200, or a partial bulk failure), so no server is needed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from opensearchpy.connection import Urllib3HttpConnection

from retrieval_assets.core.stores.opensearch.connection import (
    OpenSearchSettings,
    connect,
)
from retrieval_assets.core.stores.opensearch.store import OpenSearchStore
from retrieval_assets.core.stores.remote import RetryPolicy
from retrieval_assets_tests.core.stores.server_inputs import (
    FIELD_TYPES,
    SECRET,
)


@dataclass
class Recorded:
    method: str
    url: str
    body: str | None
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body or "null")

    def ndjson(self) -> list[Any]:
        assert self.body is not None and self.body.endswith("\n")
        return [json.loads(line) for line in self.body.splitlines()]


@dataclass
class Recorder:
    """Requests seen, and the responses to give: queued (status, body) pairs, else 200 ack."""

    requests: list[Recorded] = field(default_factory=list)
    responses: list[tuple[int, Any]] = field(default_factory=list)

    def reply(self, status: int, body: Any) -> None:
        self.responses.append((status, body))

    def connection_class(self) -> type[Urllib3HttpConnection]:
        recorder = self

        class RecordingConnection(Urllib3HttpConnection):
            def perform_request(self, method, url, params=None, body=None, timeout=None, ignore=(), headers=None):
                full_url = url + (f"?{urlencode(params)}" if params else "")
                text = body.decode("utf-8") if isinstance(body, bytes) else body
                recorder.requests.append(Recorded(method, full_url, text, {**self.headers, **(headers or {})}))
                status, data = recorder.responses.pop(0) if recorder.responses else (200, {"acknowledged": True})
                raw = json.dumps(data)
                if not (200 <= status < 300) and status not in ignore:
                    self._raise_error(status, raw, "application/json")
                return status, {"content-type": "application/json"}, raw

        return RecordingConnection


def os_client(recorder: Recorder, **settings: Any):
    config = OpenSearchSettings(url="https://search.example:9200", username="admin", password=SECRET, **settings)
    return connect(config, connection_class=recorder.connection_class())


def os_store(recorder: Recorder, sleeps: list[float], **create: Any) -> OpenSearchStore:
    retry = RetryPolicy(max_retries=3, initial_backoff_s=0.5, sleep=sleeps.append)
    create = {"field_types": FIELD_TYPES, "version": "v1", **create}
    store = OpenSearchStore.create(os_client(recorder), "chunks", retry=retry, **create)
    recorder.requests.clear()
    return store


def search_response(*payloads: dict[str, Any], scores: list[float | None] | None = None) -> dict[str, Any]:
    hits = [
        {"_index": "chunks-v1", "_id": p["chunk_id"], "_score": s, "_source": {"payload": p}}
        for p, s in zip(payloads, scores or [1.0] * len(payloads), strict=True)
    ]
    return {"took": 1, "timed_out": False, "hits": {"max_score": None, "hits": hits}}


def bulk_response(*items: tuple[str, str, int, dict | None]) -> dict[str, Any]:
    """(op, chunk_id, status, error) per document, as the _bulk API answers."""
    entries = []
    for op, chunk_id, status, error in items:
        result: dict[str, Any] = {"_index": "chunks-v1", "_id": chunk_id, "status": status}
        if error:
            result["error"] = error
        entries.append({op: result})
    return {"took": 3, "errors": any(status >= 300 for _, _, status, _ in items), "items": entries}

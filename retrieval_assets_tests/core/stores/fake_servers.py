"""Stateful, recording stand-ins for a Qdrant and an OpenSearch server (no server runs here).

Both sit under the real clients: ``FakeQdrant`` is an ``httpx`` transport handler for
``qdrant-client`` (REST), ``FakeOpenSearch`` a connection class for ``opensearch-py``. Each keeps
just enough state (collections / indexes, aliases, metadata / mappings, point ids) for builds,
promotions, rollbacks and pruning to behave as on a server, records every request as a
``Sent`` (method, path, query parameters, body) for the spec-conformance tests, and can be told
to fail a request (``fail``) to test retries and compensation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

import httpx
from opensearchpy.connection import Urllib3HttpConnection
from qdrant_client import QdrantClient

from retrieval_assets.core.stores.opensearch.connection import OpenSearchSettings
from retrieval_assets.core.stores.opensearch.connection import connect as connect_opensearch
from retrieval_assets.core.stores.qdrant.connection import QdrantServerSettings
from retrieval_assets.core.stores.qdrant.connection import connect as connect_qdrant


@dataclass
class Sent:
    """One request as it went on the wire."""

    method: str
    path: str
    query: dict[str, str]
    body: Any  # parsed JSON, a list of parsed NDJSON lines (``_bulk``), or None

    def __repr__(self) -> str:
        query = f"?{urlencode(self.query)}" if self.query else ""
        return f"{self.method} {self.path}{query}"


@dataclass
class Failure:
    """Answer requests matching ``method`` and ``path`` (a regex) with ``status``, ``times`` times."""

    method: str
    path: str
    status: int
    times: int = 1
    body: Any = None


def _take_failure(failures: list[Failure], method: str, path: str) -> Failure | None:
    for failure in failures:
        if failure.method == method and re.fullmatch(failure.path, path) and failure.times > 0:
            failure.times -= 1
            return failure
    return None


# -- Qdrant ------------------------------------------------------------------------------------


def _collection_info_template() -> dict[str, Any]:
    local = QdrantClient(":memory:")
    local.create_collection("x", vectors_config={})
    info = local.get_collection("x").model_dump(mode="json", exclude_none=True)
    local.close()
    return info


@dataclass
class FakeQdrant:
    version: str = "1.19.0"
    requests: list[Sent] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    collections: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {"metadata", "points"}
    aliases: dict[str, str] = field(default_factory=dict)
    snapshots: list[str] = field(default_factory=list)

    def client(self) -> QdrantClient:
        settings = QdrantServerSettings(url="https://qdrant.example:6333", api_key="key")
        return connect_qdrant(settings, check_compatibility=False, transport=httpx.MockTransport(self))

    def fail(self, method: str, path: str, status: int = 503, times: int = 1) -> None:
        self.failures.append(Failure(method, path, status, times))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        path = request.url.path
        query = dict(parse_qsl(request.url.query.decode()))
        method = request.method
        self.requests.append(Sent(method, path, query, body))
        failure = _take_failure(self.failures, method, path)
        if failure is not None:
            return httpx.Response(failure.status, json={"status": {"error": f"injected {failure.status}"}, "time": 0})
        if (method, path) == ("GET", "/"):
            return httpx.Response(200, json={"title": "qdrant - vector search engine", "version": self.version})
        try:
            result = self._route(method, path, body)
        except LookupError as exc:
            return httpx.Response(404, json={"status": {"error": f"Not found: {exc}"}, "time": 0})
        return httpx.Response(200, json={"result": result, "status": "ok", "time": 0.001})

    def _route(self, method: str, path: str, body: Any) -> Any:
        ack = {"operation_id": 1, "status": "completed"}
        if (method, path) == ("GET", "/aliases"):
            return {"aliases": [{"alias_name": a, "collection_name": c} for a, c in self.aliases.items()]}
        if (method, path) == ("POST", "/collections/aliases"):
            for action in body["actions"]:
                if "delete_alias" in action:
                    self.aliases.pop(action["delete_alias"]["alias_name"], None)
                if "create_alias" in action:
                    create = action["create_alias"]
                    if create["collection_name"] not in self.collections:
                        raise LookupError(create["collection_name"])
                    self.aliases[create["alias_name"]] = create["collection_name"]
            return True
        match = re.fullmatch(r"/collections/([^/]+)(/.*)?", path)
        if not match:
            raise LookupError(path)
        name, rest = match.group(1), match.group(2) or ""
        if (method, rest) == ("PUT", ""):
            self.collections[name] = {"metadata": body.get("metadata"), "points": {}}
            return True
        if (method, rest) == ("GET", "/exists"):
            return {"exists": name in self.collections}
        if (method, rest) == ("DELETE", ""):
            self.collections.pop(name, None)
            self.aliases = {a: c for a, c in self.aliases.items() if c != name}
            return True
        collection = self.collections.get(self.aliases.get(name, name))
        if collection is None:
            raise LookupError(name)
        if (method, rest) == ("GET", ""):
            info = _collection_info_template()
            info["status"] = "green"
            info["points_count"] = len(collection["points"])
            info["config"]["metadata"] = collection["metadata"]
            return info
        if (method, rest) == ("PATCH", ""):
            return True
        if (method, rest) == ("PUT", "/index"):
            return ack
        if (method, rest) == ("PUT", "/points"):
            for point in body["points"]:
                collection["points"][point["id"]] = point["payload"]
            return ack
        if (method, rest) == ("POST", "/points"):  # retrieve
            return []
        if (method, rest) == ("POST", "/points/count"):
            return {"count": len(collection["points"])}
        if (method, rest) == ("POST", "/points/scroll"):
            records = [{"id": i, "payload": {"chunk_id": p["chunk_id"]}} for i, p in collection["points"].items()]
            return {"points": records, "next_page_offset": None}
        if (method, rest) == ("POST", "/points/query/batch"):
            hits = [{"id": i, "version": 1, "score": 1.0, "payload": p} for i, p in collection["points"].items()]
            return [{"points": hits[: search.get("limit", 10)]} for search in body["searches"]]
        if (method, rest) == ("POST", "/snapshots"):
            snapshot = f"{name}-{len(self.snapshots)}.snapshot"
            self.snapshots.append(snapshot)
            return {"name": snapshot, "creation_time": "2026-11-23T10:00:00", "size": 1024}
        raise LookupError(f"{method} {path}")


# -- OpenSearch --------------------------------------------------------------------------------


@dataclass
class FakeOpenSearch:
    requests: list[Sent] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    indexes: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {"mappings", "docs"}
    aliases: dict[str, set[str]] = field(default_factory=dict)  # alias -> indexes
    snapshots: dict[str, dict[str, Any]] = field(default_factory=dict)  # "repo/name" -> body
    repositories: set[str] = field(default_factory=lambda: {"retrieval-snapshots"})
    # Seconds the client allowed each request ("timeout" as opensearch-py passes it).
    timeouts: list[tuple[str, Any]] = field(default_factory=list)

    def client(self):
        settings = OpenSearchSettings(url="https://search.example:9200", username="admin", password="pw")
        return connect_opensearch(settings, connection_class=self.connection_class())

    def fail(self, method: str, path: str, status: int = 503, times: int = 1, body: Any = None) -> None:
        self.failures.append(Failure(method, path, status, times, body))

    def connection_class(self) -> type[Urllib3HttpConnection]:
        fake = self

        class FakeConnection(Urllib3HttpConnection):
            def perform_request(self, method, url, params=None, body=None, timeout=None, ignore=(), headers=None):
                text = body.decode("utf-8") if isinstance(body, bytes) else body
                status, data = fake.handle(method, url, dict(params or {}), text, timeout)
                raw = json.dumps(data)
                if not (200 <= status < 300) and status not in ignore:
                    self._raise_error(status, raw, "application/json")
                return status, {"content-type": "application/json"}, raw

        return FakeConnection

    def handle(self, method: str, url: str, params: dict[str, Any], text: str | None, timeout: Any) -> tuple[int, Any]:
        path = url.split("?", 1)[0]
        if text is None:
            body = None
        elif path.endswith("/_bulk"):
            body = [json.loads(line) for line in text.splitlines()]
        else:
            body = json.loads(text)
        params = {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in params.items()}
        self.requests.append(Sent(method, path, params, body))
        self.timeouts.append((f"{method} {path}", timeout))
        failure = _take_failure(self.failures, method, path)
        if failure is not None:
            error = failure.body or {"type": "injected", "reason": f"injected {failure.status}"}
            return failure.status, {"error": error, "status": failure.status}
        return self._route(method, path, params, body)

    def _targets(self, name: str) -> list[str]:
        return sorted(self.aliases.get(name, set())) or ([name] if name in self.indexes else [])

    def _route(self, method: str, path: str, params: dict[str, Any], body: Any) -> tuple[int, Any]:
        ack = (200, {"acknowledged": True})
        missing = (404, {"error": {"type": "index_not_found_exception", "reason": "no such index"}, "status": 404})
        if (method, path) == ("POST", "/_aliases"):
            for action in body["actions"]:
                (kind, spec), = action.items()
                if kind == "remove":
                    self.aliases.get(spec["alias"], set()).discard(spec["index"])
                elif kind == "add":
                    if spec["index"] not in self.indexes:
                        return missing
                    self.aliases.setdefault(spec["alias"], set()).add(spec["index"])
            return ack
        match = re.fullmatch(r"/_alias/([^/]+)", path)
        if match and method == "GET":
            found = sorted(self.aliases.get(match.group(1), set()))
            if not found:
                return 404, {"error": f"alias [{match.group(1)}] missing", "status": 404}
            return 200, {index: {"aliases": {match.group(1): {}}} for index in found}
        match = re.fullmatch(r"/_snapshot/([^/]+)/([^/]+)", path)
        if match:
            repository, snapshot = match.groups()
            key = f"{repository}/{snapshot}"
            if repository not in self.repositories:
                return 404, {"error": {"type": "repository_missing_exception", "reason": repository}, "status": 404}
            if method in ("PUT", "POST"):
                self.snapshots[key] = body
                state = {"snapshot": snapshot, "state": "SUCCESS", "indices": [body["indices"]]}
                done = str(params.get("wait_for_completion")).lower() == "true"
                return 200, ({"snapshot": state} if done else {"accepted": True})
            if method == "GET":
                if key not in self.snapshots:
                    return 404, {"error": {"type": "snapshot_missing_exception", "reason": key}, "status": 404}
                return 200, {"snapshots": [{"snapshot": snapshot, "state": "SUCCESS"}]}
        match = re.fullmatch(r"/([^/_][^/]*)(/.*)?", path)
        if not match:
            return 404, {"error": f"no route {method} {path}", "status": 404}
        name, rest = match.group(1), match.group(2) or ""
        if (method, rest) == ("PUT", ""):
            self.indexes[name] = {"mappings": body["mappings"], "docs": {}}
            return 200, {"acknowledged": True, "shards_acknowledged": True, "index": name}
        if (method, rest) == ("DELETE", ""):
            if name not in self.indexes and str(params.get("ignore_unavailable")).lower() != "true":
                return missing
            self.indexes.pop(name, None)
            for indexes in self.aliases.values():
                indexes.discard(name)
            return ack
        targets = self._targets(name)
        if not targets:
            return missing
        if (method, rest) == ("GET", "/_mapping"):
            return 200, {index: {"mappings": self.indexes[index]["mappings"]} for index in targets}
        if rest in ("/_settings", "/_refresh"):
            return ack
        (index,) = targets
        docs = self.indexes[index]["docs"]
        if (method, rest) == ("POST", "/_bulk"):
            items = []
            for action, source in zip(body[::2], body[1::2], strict=True):
                (op, meta), = action.items()
                docs[meta["_id"]] = source.get("upsert", source)
                items.append({op: {"_index": index, "_id": meta["_id"], "status": 201}})
            return 200, {"took": 1, "errors": False, "items": items}
        if (method, rest) == ("POST", "/_count"):
            return 200, {"count": len(docs), "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0}}
        if (method, rest) == ("POST", "/_search"):
            ordered = sorted(docs.items())
            if "search_after" in body:
                ordered = [(i, d) for i, d in ordered if i > body["search_after"][0]]
            hits = [
                {"_index": index, "_id": i, "_score": 1.0, "_source": {"payload": d["payload"]}, "sort": [i]}
                for i, d in ordered[: body.get("size", 10)]
            ]
            return 200, {"took": 1, "timed_out": False, "hits": {"hits": hits}}
        return 404, {"error": f"no route {method} {path}", "status": 404}

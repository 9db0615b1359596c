"""Every request the server adapters make, checked against the servers' published specifications.

The adapters run through the real clients (qdrant-client over an ``httpx`` mock transport,
opensearch-py over a connection class: ``fake_servers``) across builds, promotion (with
snapshots), rollback, pruning, queries of every strategy with filters, counts and chunk-id
listing. Each recorded request is matched to its operation in the specification (method and
path template) and its path and query parameters and body are validated with ``jsonschema``
and a ``referencing`` registry:

- Qdrant: ``specs/qdrant/openapi-v1.16.x.json`` (the floor) and ``openapi-v1.19.x.json`` (what
  compose runs); OpenAPI 3.0's ``nullable`` is turned into JSON-schema types, and every object
  schema that lists ``properties`` is closed (``additionalProperties: false``): unknown keys fail.
- OpenSearch: ``specs/opensearch/spec`` (OpenAPI 3.1 over files; ``$ref``s resolve by file path);
  every object schema listing ``properties`` is closed with ``unevaluatedProperties: false``
  (``allOf`` parts are closed at the parent, so composed schemas keep their parts' keys), with
  the waivers in ``OPENSEARCH_WAIVERS`` for known gaps of the specification.

Mutated requests must fail, so the validators are shown to reject. The specifications are
copies in this repository (``retrieval_assets_tests/specs``, see its README); nothing here reads
outside it.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from retrieval_assets.core.index.servers import ServerIndexes, ServerSettings, roll_back, switch_serving
from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.core.models import SparseVector, Strategy
from retrieval_assets.core.stores.filters import parse_filters
from retrieval_assets.core.stores.opensearch.connection import OpenSearchSettings
from retrieval_assets.core.stores.opensearch.store import OpenSearchStore
from retrieval_assets.core.stores.qdrant.connection import QdrantServerSettings
from retrieval_assets.core.stores.qdrant.server import QdrantServerStore
from retrieval_assets.core.stores.remote import RetryPolicy
from retrieval_assets_tests.core.stores.fake_servers import FakeOpenSearch, FakeQdrant, Sent

SPECS = Path(__file__).resolve().parents[2] / "specs"
QDRANT_SPECS = ["openapi-v1.16.x.json", "openapi-v1.19.x.json"]
OPENSEARCH_NAMESPACES = ["_core.yaml", "indices.yaml", "snapshot.yaml"]
FIELD_TYPES = {"license": "keyword", "tags": "keyword", "year": "integer", "stars": "float", "open_source": "bool"}
FILTERS = parse_filters({"tenant_id": "acme", "license": ["MIT", "GPL-3.0"], "year": {"gte": 2015.5, "lte": 2020},
                         "stars": [4.5], "open_source": "true"})
FAST = RetryPolicy(max_retries=2, initial_backoff_s=0.0, sleep=lambda s: None)

# Known gaps of the OpenSearch specification (commit in specs/README.md) for shapes the server
# accepts: (operation group, JSON path of the error, text in its message, why it is waived).
OPENSEARCH_WAIVERS: list[tuple[str, str, str, str]] = [
    # IndexSettings lists the built-in similarities only; user-named ones ("bm25_lucene") are
    # documented (index-modules similarity) but not in the schema.
    ("indices.create", "$.settings.index.similarity", "'bm25_lucene' was unexpected", "user-named similarity"),
]


# -- loading and closing the specifications ----------------------------------------------------


def _pointer(*parts: str) -> str:
    return "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def _walk(node: Any, visit: Callable[[dict], None]) -> None:
    if isinstance(node, dict):
        visit(node)
        for value in list(node.values()):
            _walk(value, visit)
    elif isinstance(node, list):
        for value in node:
            _walk(value, visit)


def _is_object_schema(node: dict) -> bool:
    return isinstance(node.get("properties"), dict) and node.get("type", "object") in ("object", ["object"])


def _qdrant_document(name: str) -> dict:
    doc = json.loads((SPECS / "qdrant" / name).read_text())
    composed: set[int] = set()

    def mark(node: dict) -> None:
        if isinstance(node.get("allOf"), list) and len(node["allOf"]) > 1:
            composed.update(id(part) for part in node["allOf"])

    def close(node: dict) -> None:
        if node.pop("nullable", False):
            if "type" in node:
                node["type"] = [node["type"], "null"]
            elif "$ref" in node or "allOf" in node or "anyOf" in node or "oneOf" in node:
                inner = {k: node.pop(k) for k in ("$ref", "allOf", "anyOf", "oneOf") if k in node}
                node["anyOf"] = [inner, {"type": "null"}]
            else:  # a bare {"nullable": true} branch of an anyOf: the null alternative
                node["type"] = "null"
        if _is_object_schema(node) and "additionalProperties" not in node and id(node) not in composed:
            node["additionalProperties"] = False
        # OpenAPI 3.0 writes exclusiveMinimum as a boolean next to "minimum" (Draft 4 style).
        for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if isinstance(node.get(bound), bool):
                node[bound] = node.pop(limit) if node[bound] and limit in node else None
                if node[bound] is None:
                    del node[bound]

    _walk(doc, mark)
    _walk(doc, close)
    return doc


@cache
def _opensearch_documents() -> dict[str, dict]:
    root = SPECS / "opensearch" / "spec"
    docs = {str(path.relative_to(root)): yaml.safe_load(path.read_text()) for path in root.glob("*/*.yaml")}
    # Parts of an allOf (and what they $ref) are closed at the composing schema instead.
    open_parts: set[tuple[str, str]] = set()
    for file, doc in docs.items():
        def mark(node: dict, file: str = file) -> None:
            for part in node.get("allOf", []) if isinstance(node.get("allOf"), list) else []:
                ref = part.get("$ref", "") if isinstance(part, dict) else ""
                if ref:
                    target, _, fragment = ref.partition("#")
                    target_file = ((root / file).parent / target).resolve() if target else None
                    open_parts.add((str(target_file.relative_to(root.resolve())) if target_file else file, fragment))
                elif isinstance(part, dict):
                    part["x-open-part"] = True
        _walk(doc, mark)
    for file, doc in docs.items():
        for section in ("schemas",):
            for name, schema in (doc.get("components", {}).get(section) or {}).items():
                if (file, f"/components/{section}/{name}") in open_parts and isinstance(schema, dict):
                    schema["x-open-part"] = True

        def close(node: dict) -> None:
            if node.pop("x-open-part", False):
                return
            has_parts = isinstance(node.get("allOf"), list)
            if (_is_object_schema(node) or has_parts) and "additionalProperties" not in node \
                    and "unevaluatedProperties" not in node and "patternProperties" not in node:
                node["unevaluatedProperties"] = False

        _walk(doc, close)
    return docs


@cache
def _opensearch_registry() -> Registry:
    resources = [
        (f"file:///spec/{file}", Resource.from_contents(doc, default_specification=DRAFT202012))
        for file, doc in _opensearch_documents().items()
    ]
    return Registry().with_resources(resources)


@cache
def _qdrant_registry(name: str) -> tuple[dict, Registry]:
    doc = _qdrant_document(name)
    return doc, Registry().with_resource(f"urn:{name}", Resource.from_contents(doc, default_specification=DRAFT202012))


# -- matching a request to its operation -------------------------------------------------------


@dataclass
class Operation:
    base: str  # the resource URI the operation lives in
    path: str
    method: str
    spec: dict
    params: dict[tuple[str, str], tuple[str, dict]]  # (in, name) -> (its URI, parameter object)

    @property
    def name(self) -> str:
        return self.spec.get("x-operation-group") or self.spec.get("operationId", f"{self.method} {self.path}")


def _template_regex(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{[^}]+\\\}", r"([^/]+)", re.escape(template)) + "$")


def _resolve(registry: Registry, base: str, node: dict) -> tuple[str, dict]:
    """A parameter / request body object with its $ref followed (URI it lives at, object)."""
    while "$ref" in node:
        resolved = registry.resolver(base).lookup(node["$ref"])
        base, node = resolved.resolver._base_uri, resolved.contents
    return base, node


def _operations(paths: dict, base: str, registry: Registry) -> Iterator[Operation]:
    for path, item in paths.items():
        for method, spec in item.items():
            if method not in ("get", "put", "post", "delete", "patch", "head"):
                continue
            params = {}
            for parameter in spec.get("parameters", []) + item.get("parameters", []):
                pbase, resolved = _resolve(registry, base, parameter)
                params[(resolved["in"], resolved["name"])] = (pbase, resolved)
            yield Operation(base, path, method.upper(), spec, params)


@cache
def _qdrant_operations(name: str) -> list[Operation]:
    doc, registry = _qdrant_registry(name)
    return list(_operations(doc["paths"], f"urn:{name}", registry))


@cache
def _opensearch_operations() -> list[Operation]:
    ops = []
    for namespace in OPENSEARCH_NAMESPACES:
        file = f"namespaces/{namespace}"
        ops += _operations(_opensearch_documents()[file]["paths"], f"file:///spec/{file}", _opensearch_registry())
    return ops


def _match(operations: list[Operation], sent: Sent) -> tuple[Operation, dict[str, str]]:
    candidates = []
    for op in operations:
        found = _template_regex(op.path).match(sent.path)
        if op.method == sent.method and found:
            names = re.findall(r"\{([^}]+)\}", op.path)
            candidates.append((len(names), op, dict(zip(names, found.groups(), strict=True))))
    assert candidates, f"{sent!r}: no operation in the specification"
    # A literal segment beats a parameter (/collections/aliases over /collections/{name}).
    _, op, path_params = min(candidates, key=lambda c: c[0])
    return op, path_params


def _coerce(value: str, schema: dict, registry: Registry, base: str) -> Any:
    _, schema = _resolve(registry, base, schema)
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "boolean" in kinds and value in ("true", "false"):
        return value == "true"
    if "integer" in kinds and re.fullmatch(r"-?\d+", value):
        return int(value)
    if "number" in kinds and re.fullmatch(r"-?\d+(\.\d+)?", value):
        return float(value)
    return value


def problems(operations: list[Operation], registry: Registry, sent: Sent,
             waivers: list[tuple[str, str, str, str]] = ()) -> list[str]:
    """What in ``sent`` breaks its operation's specification (empty: it conforms)."""
    op, path_params = _match(operations, sent)
    found: list[str] = []

    def check(where: str, schema_ref: str, base: str, instance: Any) -> None:
        validator = jsonschema.Draft202012Validator({"$ref": schema_ref}, registry=registry)
        for error in validator.iter_errors(instance):
            if any(name == op.name and error.json_path == path and text in error.message
                   for name, path, text, _ in waivers):
                continue
            found.append(f"{op.name} {where} {error.json_path}: {error.message[:300]}")

    for name, value in path_params.items():
        if ("path", name) not in op.params:
            found.append(f"{op.name}: path parameter {name} not declared")
            continue
        base, param = op.params[("path", name)]
        check(f"path {name}", _ref_to(base, param, "schema"), base, value)
    for name, value in sent.query.items():
        if ("query", name) not in op.params:
            found.append(f"{op.name}: query parameter {name!r} not in the specification")
            continue
        base, param = op.params[("query", name)]
        check(f"query {name}", _ref_to(base, param, "schema"), base, _coerce(value, param["schema"], registry, base))
    body_spec = op.spec.get("requestBody")
    if body_spec is None:
        if sent.body is not None:
            found.append(f"{op.name}: a body where the specification takes none")
        return found
    body_base, body = _resolve(registry, op.base, body_spec)
    if sent.body is None:
        if body.get("required"):
            found.append(f"{op.name}: the required body is missing")
        return found
    media = next(iter(body["content"]))
    check("body", _ref_to_body(body_base, body, media), body_base, sent.body)
    return found


def _ref_to(base: str, node: dict, field: str) -> str:
    """A $ref to ``node[field]``, found by locating ``node`` in the resource at ``base``."""
    return base + "#" + _locate(base, node) + _pointer(field)


def _ref_to_body(base: str, body: dict, media: str) -> str:
    return base + "#" + _locate(base, body) + _pointer("content", media, "schema")


_locations: dict[tuple[str, int], str] = {}


def _locate(base: str, node: dict) -> str:
    key = (base, id(node))
    if key not in _locations:
        root = _root(base)
        stack: list[tuple[Any, str]] = [(root, "")]
        while stack:
            current, pointer = stack.pop()
            if isinstance(current, dict):
                _locations.setdefault((base, id(current)), pointer)
                stack += [(v, pointer + _pointer(k)) for k, v in current.items() if isinstance(v, (dict, list))]
            elif isinstance(current, list):
                stack += [(v, pointer + _pointer(str(i))) for i, v in enumerate(current) if isinstance(v, (dict, list))]
    return _locations[key]


def _root(base: str) -> dict:
    if base.startswith("urn:"):
        return _qdrant_registry(base[4:])[0]
    return _opensearch_documents()[base.removeprefix("file:///spec/")]


# -- the scenario: everything the adapters send ------------------------------------------------


def _chunk(i: int, tenant: str = "acme") -> dict[str, Any]:
    return {"chunk_id": f"d{i}#{i % 3}", "doc_id": f"d{i}", "tenant_id": tenant, "section": "body",
            "title": f"Title {i}", "text": f"Text number {i}.", "license": "MIT", "tags": ["format:DICOM", "os:linux"],
            "year": 2010 + i, "stars": 4.5, "open_source": bool(i % 2)}


def _batches(n: int, dim: int = 4):
    payloads = [_chunk(i, "acme" if i % 2 else "globex") for i in range(n)]
    dense = np.eye(n, dim, dtype=np.float32) + 0.1
    sparse = [SparseVector(indices=[i, 50, i], values=[1.0, 0.25, 0.5]) for i in range(n)]
    yield payloads[: n // 2], dense[: n // 2], sparse[: n // 2]
    yield payloads[n // 2 :], dense[n // 2 :], sparse[n // 2 :]


def _servers(qdrant: FakeQdrant | None, opensearch: FakeOpenSearch, **settings: Any) -> ServerIndexes:
    servers = ServerIndexes(ServerSettings(
        qdrant=QdrantServerSettings(url="https://qdrant.example:6333") if qdrant else None,
        opensearch=OpenSearchSettings(url="https://search.example:9200"), opensearch_replicas=0, **settings,
    ))
    servers.retry = FAST
    servers.__dict__["_qdrant"] = qdrant.client() if qdrant else None
    servers.__dict__["_opensearch"] = opensearch.client()
    return servers


def _lifecycle(servers: ServerIndexes, root: Path) -> None:
    """Build three versions, promote two (snapshots), roll back, prune the oldest."""
    versions = IndexVersions(root)
    built = []
    for n in range(3):
        version = versions.candidate(str(n) * 8)
        versions.seal(version, version.id)
        servers.build(version.id, 4, FIELD_TYPES, _batches(6))
        built.append(version)
    switch_serving(versions, servers, built[1], reason="test")
    switch_serving(versions, servers, built[2], reason="test")
    roll_back(versions, servers)
    servers.chunk_ids(built[1].id)
    servers.drop(built[0].id)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict[str, list[Sent]]:
    """Every request of the scenario, per server."""
    qdrant, opensearch = FakeQdrant(), FakeOpenSearch()
    # Both servers: Qdrant dense + SPLADE, OpenSearch lexical-only.
    servers = _servers(qdrant, opensearch, snapshot_repository="retrieval-snapshots")
    _lifecycle(servers, tmp_path_factory.mktemp("both"))
    stores = servers.stores("v-11111111")
    dense_store = stores[Strategy.DENSE]
    assert isinstance(dense_store, QdrantServerStore)
    query = np.array([1.0, 0.0, 0.0, 0.0])
    sparse = SparseVector(indices=[3, 50, 3], values=[1.0, 0.5, 0.25])
    for filters in ((), FILTERS):
        dense_store.search_dense(query, 5, filters)
        dense_store.search_sparse(sparse, 5, filters)
        dense_store.search_hybrid(query, sparse, 5, filters, prefetch_limit=20, rrf_k=20)
        dense_store.search_hybrid(query, sparse, 5, filters, fusion="dbsf")
        stores[Strategy.BM25].search_text("heart attack", 5, filters, expansion_terms={"myocardial": 0.6},
                                          tag_terms=["format:DICOM"])
        stores[Strategy.BM25].fetch_documents(["d1", "d2"], filters)
    dense_store.count()
    dense_store.snapshot()
    dense_store.upsert_sparse([_chunk(1)], [sparse])  # keeps the dense vector: a retrieve first
    tuned = QdrantServerStore.create(servers._qdrant, "tuned", 4, version="v1", quantization="int8", hnsw_ef=64,
                                     field_types=FIELD_TYPES, retry=FAST)
    tuned.search_dense(query, 5, FILTERS)
    QdrantServerStore.create(servers._qdrant, "sparse-only", None, version="v1", retry=FAST)

    # OpenSearch alone: it serves BM25 and SPLADE.
    alone = FakeOpenSearch()
    solo = _servers(None, alone, snapshot_repository="retrieval-snapshots")
    _lifecycle(solo, tmp_path_factory.mktemp("alone"))
    store = solo.stores("v-11111111")[Strategy.SPLADE]
    assert isinstance(store, OpenSearchStore)
    for filters in ((), FILTERS):
        store.search_sparse(sparse, 5, filters)
        store.search_text("heart attack", 5, filters, expansion_terms={"myocardial": 0.6}, tag_terms=["os:linux"])
    store.add([_chunk(1)])  # a lexical write keeping the SPLADE features: scripted update
    store.count()
    store.chunk_ids()
    # A retried snapshot that finds its own earlier attempt waits on it (GET the snapshot).
    alone.snapshots["retrieval-snapshots/again"] = {"indices": store.index}
    alone.fail("PUT", "/_snapshot/retrieval-snapshots/again", status=503)
    alone.fail("PUT", "/_snapshot/retrieval-snapshots/again", status=400,
               body={"type": "invalid_snapshot_name_exception", "reason": "snapshot with the same name already exists"})
    store.snapshot("again")
    titled = OpenSearchStore.create(solo._opensearch, "titled", version="v1", title_boost=2.0, retry=FAST)
    titled.search_text("zebra", 3)
    return {"qdrant": qdrant.requests, "opensearch": opensearch.requests + alone.requests}


def _signatures(requests: list[Sent]) -> set[str]:
    return {r.method + " " + re.sub(r"/[^/]+-(v-\d+|v1)(?=/|$)", "/*", r.path) for r in requests}


@pytest.mark.parametrize("spec", QDRANT_SPECS)
def test_every_qdrant_request_conforms(recorded, spec):
    doc, registry = _qdrant_registry(spec)
    operations = _qdrant_operations(spec)
    found = [p for sent in recorded["qdrant"] for p in problems(operations, registry, sent)]
    assert found == []
    assert len(recorded["qdrant"]) >= 60
    # Every kind of call the adapter makes was seen (so none escaped the check).
    assert {"POST /collections/aliases", "GET /aliases", "PUT /collections/*", "DELETE /collections/*",
            "PUT /collections/*/index", "PUT /collections/*/points", "POST /collections/*/points",
            "POST /collections/*/points/query/batch", "POST /collections/*/points/count",
            "POST /collections/*/points/scroll", "POST /collections/*/snapshots", "PATCH /collections/*",
            "GET /collections/*", "GET /collections/*/exists", "GET /"} <= _signatures(recorded["qdrant"])


def test_every_opensearch_request_conforms(recorded):
    found = [p for sent in recorded["opensearch"]
             for p in problems(_opensearch_operations(), _opensearch_registry(), sent, OPENSEARCH_WAIVERS)]
    assert found == []
    assert len(recorded["opensearch"]) >= 60
    assert {"PUT /*", "DELETE /*", "POST /*/_bulk", "PUT /*/_settings", "POST /*/_refresh", "GET /_alias/*",
            "POST /_aliases", "GET /*/_mapping", "POST /*/_search", "POST /*/_count",
            "PUT /_snapshot/*/*", "GET /_snapshot/*/*"} <= {
        re.sub(r"/[a-z_-]+-(v-\d+|v1)|/retrieval-snapshots|/again|/[a-z_-]+-v-\d+-[\d-]+", "/*", s)
        for s in (f"{r.method} {r.path}" for r in recorded["opensearch"])}


# -- the validators reject -----------------------------------------------------------------------


def _mutated(requests: list[Sent], method: str, pattern: str, change: Callable[[Sent], None]) -> Sent:
    original = next(r for r in requests if r.method == method and re.fullmatch(pattern, r.path))
    sent = copy.deepcopy(original)
    change(sent)
    return sent


QDRANT_MUTATIONS: list[tuple[str, str, str, Callable[[Sent], None]]] = [
    ("unknown key in a collection", "PUT", r"/collections/[^/]+",
     lambda s: s.body.update(vectorz={})),
    ("unknown HNSW setting", "PUT", r"/collections/[^/]+",
     lambda s: s.body["hnsw_config"].update(m_max=3)),
    ("string where the RRF k is an integer", "POST", r"/collections/[^/]+/points/query/batch",
     lambda s: s.body["searches"][0].update(query={"rrf": {"k": "sixty"}})),
    ("unknown filter condition key", "POST", r"/collections/[^/]+/points/query/batch",
     lambda s: s.body["searches"][0].update(filter={"must": [{"key": "x", "matches": {"any": ["a"]}}]})),
    ("unknown alias action", "POST", r"/collections/aliases",
     lambda s: s.body["actions"].append({"rename_alias_to": {"alias_name": "x"}})),
    ("undeclared query parameter", "PUT", r"/collections/[^/]+/points",
     lambda s: s.query.update(wait_for="true")),
    ("boolean parameter that is not one", "PUT", r"/collections/[^/]+/points",
     lambda s: s.query.update(wait="maybe")),
    ("sparse vector values as a string", "PUT", r"/collections/[^/]+/points",
     lambda s: s.body["points"][0]["vector"].update(splade={"indices": [1], "values": "1.0"})),
]


@pytest.mark.parametrize(
    ("label", "method", "pattern", "change"), QDRANT_MUTATIONS, ids=[m[0] for m in QDRANT_MUTATIONS]
)
def test_the_qdrant_validator_rejects_mutated_requests(recorded, label, method, pattern, change):
    doc, registry = _qdrant_registry("openapi-v1.19.x.json")
    sent = _mutated(recorded["qdrant"], method, pattern, change)
    assert problems(_qdrant_operations("openapi-v1.19.x.json"), registry, sent), label


OPENSEARCH_MUTATIONS: list[tuple[str, str, str, Callable[[Sent], None]]] = [
    ("unknown top-level search key", "POST", r"/[^/]+/_search", lambda s: s.body.update(sizee=3)),
    ("unknown rank_feature function", "POST", r"/[^/]+/_search",
     lambda s: s.body.update(query={"rank_feature": {"field": "f.1", "linearr": {}}})),
    ("unknown bool clause", "POST", r"/[^/]+/_search",
     lambda s: s.body.update(query={"bool": {"shoud": [{"match_all": {}}]}})),
    ("unknown alias action", "POST", r"/_aliases", lambda s: s.body["actions"].append({"rename": {"index": "a"}})),
    ("alias action with an unknown key", "POST", r"/_aliases",
     lambda s: s.body["actions"][-1]["add"].update(aliass="x")),
    ("unknown mapping type key", "PUT", r"/[a-z][^/]*", lambda s: s.body["mappings"].update(dynamik="false")),
    ("undeclared query parameter", "PUT", r"/_snapshot/[^/]+/[^/]+",
     lambda s: s.query.update(wait_for_completionn="true")),
    ("snapshot body with an unknown key", "PUT", r"/_snapshot/[^/]+/[^/]+", lambda s: s.body.update(indexes="x")),
    # (A bulk action line with an unknown key passes: the spec lets any line be a free-form
    # document source, so only the shape of the body as lines is checked there.)
    ("bulk body that is not a list of lines", "POST", r"/[^/]+/_bulk", lambda s: setattr(s, "body", "index")),
]


@pytest.mark.parametrize(("label", "method", "pattern", "change"), OPENSEARCH_MUTATIONS,
                         ids=[m[0] for m in OPENSEARCH_MUTATIONS])
def test_the_opensearch_validator_rejects_mutated_requests(recorded, label, method, pattern, change):
    sent = _mutated(recorded["opensearch"], method, pattern, change)
    assert problems(_opensearch_operations(), _opensearch_registry(), sent, OPENSEARCH_WAIVERS), label


def test_the_hybrid_rrf_query_needs_the_version_floor():
    """What the floor rests on: 1.16's specification has the ``rrf`` query with ``k``."""
    doc, _ = _qdrant_registry("openapi-v1.16.x.json")
    assert "k" in json.dumps(doc["components"]["schemas"].get("Rrf", {}))
    assert "metadata" in doc["components"]["schemas"]["CreateCollection"]["properties"]

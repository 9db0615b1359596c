"""API keys bound what a caller sees: no answer of any route, with any option, names a document
id, title or term that only documents of tenants outside the key's grant hold.

Over the real three-tenant build (test_http_api's), served with graph expansion on and several
keys (one tenant, two tenants, search only, write only, admin), and with an inbox in a scratch
home that already holds pending documents of every tenant. The property draws a key (or none,
or a bogus one), a route and its options: the tenant parameter (none, the key's own, another),
strategies, fusion, rerank, vocabulary expansion, multi-query, filters naming other tenants and
their documents, queries made of every tenant's words, ids and titles (``doc:<id>``: more like
this), and malformed input for the error answers. Whatever the caller sent itself may come back
(an echo is no leak); anything else of another tenant may not, in a body, an SSE event or an
error's text. The tests after it pin each channel on its own.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from retrieval_assets.core.index.vocabulary import words
from retrieval_assets.core.ingest.inbox import DocumentInbox, InboxEntry, InboxOperation
from retrieval_assets.core.models import SearchRequest
from retrieval_assets.core.query import control_tags, nl_filters
from retrieval_assets.core.retrieval import retriever, service
from retrieval_assets.core.stores import base as stores_base
from retrieval_assets.core.stores import filters
from retrieval_assets.core.stores.tantivy.store import TantivyLexicalStore
from retrieval_assets.defs.resources import GraphConfig, RerankConfig, SearchResource
from retrieval_assets.serving import app as http_app
from retrieval_assets.serving import auth, create_app, errors, openapi, schemas
from retrieval_assets.serving.auth import ApiKeys, new_key
from retrieval_assets.serving.routes import documents as document_routes
from retrieval_assets.serving.routes import operations as operation_routes
from retrieval_assets.serving.routes import search as search_routes
from retrieval_assets_tests.core.retrieval.tenant_indexes import (
    GAMMA_VENUE,
    TENANTS,
    TenantBuild,
    posted_entries,
    tenant_records,
)

# key id -> (tenants, scopes); the property draws from these.
GRANTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "alpha-search": (("alpha",), ("search",)),
    "beta-app": (("beta",), ("search", "documents:write")),
    "alpha-gamma-search": (("alpha", "gamma"), ("search",)),
    "alpha-gamma-writer": (("alpha", "gamma"), ("documents:write",)),
    "gamma-admin": (("gamma",), ("admin",)),
}
SLOW = "alpha-slow"  # two requests a minute: only the rate test uses it
_ISSUED = {
    key_id: new_key(key_id, tenants, scopes)  # type: ignore[arg-type]
    for key_id, (tenants, scopes) in GRANTS.items()
}
_ISSUED[SLOW] = new_key(SLOW, ["alpha"], ["search"], requests_per_minute=2)
TOKENS = {key_id: token for key_id, (token, _) in _ISSUED.items()}
KEYS = ApiKeys([key for _, key in _ISSUED.values()])
PRODUCT_MODULES = (
    http_app,
    schemas,
    errors,
    openapi,
    search_routes,
    document_routes,
    operation_routes,
    auth,
    retriever,
    control_tags,
    nl_filters,
    filters,
    stores_base,
    service,
)
SCOPE_OF_ROUTE = {
    "search": "search",
    "stream": "search",
    "get": "search",
    "delete": "documents:write",
    "post": "documents:write",
}


def _pending_entries() -> list[InboxEntry]:
    """Two pending upserts and one pending delete per tenant, in the scratch inbox only: GET
    /documents must find them for their own tenant and for no other."""
    canary = {"alpha": "Quillwort", "beta": "Marzipanic", "gamma": "Zebrafinch"}
    removed = {"alpha": "vcflib", "beta": "beta-itk", "gamma": "orthanc"}
    entries = []
    for tenant in TENANTS:
        for n in (1, 2):
            record = {
                "id": f"pending-{tenant}-{n}",
                "name": f"{canary[tenant]} {n}",
                "description": f"{canary[tenant]} annotates {canary[tenant].lower()}ome reads, pending for {tenant}.",
            }
            entries.append(
                InboxEntry.new(InboxOperation.UPSERT, record["id"], tenant, format="tool_catalog", record=record)
            )
        entries.append(InboxEntry.new(InboxOperation.DELETE, removed[tenant], tenant))
    return entries


PENDING = _pending_entries()


@dataclass(frozen=True)
class Document:
    tenant: str
    doc_id: str
    title: str
    record: dict[str, Any]


def _documents() -> list[Document]:
    """Every document of every tenant: catalog, posted through the build's inbox, pending in ours."""
    records = [(r["tenant_id"], {k: v for k, v in r.items() if k != "tenant_id"}) for r in tenant_records()]
    records += [(e.tenant_id, e.record) for e in [*posted_entries(), *PENDING] if e.record is not None]
    return [Document(tenant, str(record["id"]), record["name"], record) for tenant, record in records]


DOCUMENTS = _documents()
TENANT_OF = {d.doc_id: d.tenant for d in DOCUMENTS if not d.doc_id.startswith("pending-")}
_ID_TOKEN = re.compile(r"[A-Za-z0-9_-]+")


def _id_tokens(text: str) -> set[str]:
    return set(_ID_TOKEN.findall(text))


def _has_phrase(phrase: str, text: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` on word boundaries, case and spacing aside."""
    pattern = r"(?<![\w-])" + r"\s+".join(map(re.escape, phrase.lower().split())) + r"(?![\w-])"
    return re.search(pattern, text.lower()) is not None


def _terms(document: Document) -> set[str]:
    record = document.record
    return set(words(" ".join([document.title, record.get("description", ""), *record.get("keywords", [])])))


@dataclass(frozen=True)
class Forbidden:
    """What only documents of tenants outside a grant hold: anything a document of the grant holds
    anywhere in its record (an id in its relations, a word in its metadata) is the grant's own."""

    ids: frozenset[str]
    titles: frozenset[str]
    terms: frozenset[str]
    held_terms: frozenset[str]  # the grant's terms and keyword phrases: what expansion may add


def _forbidden(grant: frozenset[str]) -> Forbidden:
    own = [d for d in DOCUMENTS if d.tenant in grant]
    others = [d for d in DOCUMENTS if d.tenant not in grant]
    corpus = "\n".join([*(f"{d.doc_id} {d.title} {json.dumps(d.record, ensure_ascii=False)}" for d in own), *grant])
    held_ids, held_words = _id_tokens(corpus), set(words(corpus))
    phrases = {" ".join(str(k).lower().split()) for d in own for k in d.record.get("keywords", [])}
    return Forbidden(
        # "star" is alpha's id, and a word of beta's "STAR" (beta-star): a term of the grant's own.
        ids=frozenset(d.doc_id for d in others if d.doc_id not in held_ids and d.doc_id.lower() not in held_words),
        titles=frozenset(d.title for d in others if not _has_phrase(d.title, corpus)),
        terms=frozenset(term for d in others for term in _terms(d) if term not in held_words),
        held_terms=frozenset(held_words | phrases),
    )


FORBIDDEN = {key_id: _forbidden(frozenset(tenants)) for key_id, (tenants, _) in GRANTS.items()}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The inbox goes to a scratch home so that posted documents do not touch the shared build.
    scratch = tmp_path_factory.mktemp("auth_home")
    DocumentInbox.under(scratch).append(PENDING)
    return scratch


def _app(build: TenantBuild, home: Path) -> tuple[FastAPI, SearchResource]:
    # Graph expansion on; rerank scores a short head to stay fast.
    resource = build.search_resource(graph=GraphConfig(enabled=True), rerank=RerankConfig(candidates=5))
    return create_app(resource.service, home=home, catalog_format="tool_catalog", keys=KEYS), resource


@contextmanager
def _serve(build: TenantBuild, home: Path) -> Iterator[TestClient]:
    app, resource = _app(build, home)
    with TestClient(app) as test_client:
        yield test_client
    resource.close()


# A server per test (a qdrant-edge shard opens once per process, so two cannot be open at once;
# after the first, one opens in a fraction of a second), each with a fresh rate limiter.
@pytest.fixture
def client(build: TenantBuild, home: Path) -> Iterator[TestClient]:
    with _serve(build, home) as served:
        yield served


@pytest.fixture
def property_client(build: TenantBuild, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The property's own server and inbox, one for all its examples: what it posts (another
    tenant's ids among them) does not change what the tests of each channel find."""
    scratch = tmp_path_factory.mktemp("auth_property_home")
    DocumentInbox.under(scratch).append(PENDING)
    with _serve(build, scratch) as served:
        yield served


@pytest.fixture(scope="module")
def product_words(build: TenantBuild, home: Path) -> frozenset[str]:
    """Words the API says of itself: its OpenAPI document (field names, descriptions, enum values)
    and the strings (docstrings aside) of the modules that write its answers, diagnostics and errors."""
    texts = [json.dumps(_app(build, home)[0].openapi())]  # no lifespan: nothing is opened
    for module in PRODUCT_MODULES:
        tree = ast.parse(Path(str(module.__file__)).read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        texts += [
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        ]
    return frozenset(words(" ".join(texts)))


def _auth(key_id: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[key_id]}"} if key_id else {}


def _sse_events(text: str) -> list[tuple[str, Any]]:
    """(event, data) of each Server-Sent Event of a stream."""
    events = []
    for block in text.replace("\r\n", "\n").strip().split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(":")
            fields[name] = fields.get(name, "") + value.removeprefix(" ")
        events.append((fields.get("event", "message"), json.loads(fields["data"])))
    return events


def _leaks(key_id: str, text: str, sent: str, product_words: frozenset[str]) -> dict[str, list[str]]:
    """What ``text`` names of other tenants than the key's, beyond what the caller ``sent``."""
    forbidden = FORBIDDEN[key_id]
    leaks = {
        "ids": sorted(forbidden.ids & _id_tokens(text) - _id_tokens(sent)),
        "titles": sorted(t for t in forbidden.titles if _has_phrase(t, text) and not _has_phrase(t, sent)),
        "terms": sorted(forbidden.terms & set(words(text)) - set(words(sent)) - product_words),
    }
    return {kind: found for kind, found in leaks.items() if found}


def _readable(response: Any) -> str:
    """The answer's whole text, JSON re-written with its \\u escapes decoded."""
    text = response.text
    if response.headers.get("content-type", "").startswith("application/json"):
        text += "\n" + json.dumps(response.json(), ensure_ascii=False)
    return text


def _check_result(key_id: str, result: dict[str, Any], where: str) -> None:
    """A search result's hits, and the ids and terms its diagnostics name, are within the grant."""
    grant = set(GRANTS[key_id][0])
    hits = result["hits"]
    outside = {h["doc_id"]: h["tenant_id"] for h in hits if h["tenant_id"] not in grant}
    outside |= {h["doc_id"]: TENANT_OF.get(h["doc_id"]) for h in hits if TENANT_OF.get(h["doc_id"]) not in grant}
    assert not outside, f"{where}: hits of other tenants {outside}"
    diagnostics = result["diagnostics"]
    graph = diagnostics.get("graph", {})
    named = [diagnostics.get("more_like_this"), *graph.get("seeds", []), *graph.get("added", [])]
    named += [node for h in hits for node in h.get("graph_path") or [] if node in TENANT_OF]
    foreign_ids = {doc_id: TENANT_OF.get(doc_id) for doc_id in named if doc_id and TENANT_OF.get(doc_id) not in grant}
    assert not foreign_ids, f"{where}: diagnostics or graph paths name other tenants' documents {foreign_ids}"
    foreign = sorted(_expansion_terms(diagnostics) - FORBIDDEN[key_id].held_terms)
    assert not foreign, f"{where}: expansion terms no document of {sorted(grant)} holds: {foreign}"
    venues = {value for flt in diagnostics.get("filters", []) if flt["field"] == "venue" for value in flt["any_of"]}
    assert "gamma" in grant or not venues, f"{where}: matched venues only gamma's documents hold: {venues}"


def _expansion_terms(diagnostics: dict[str, Any]) -> set[str]:
    """The terms vocabulary expansion added: to the query (each attempt) and to multi-query's reformulations."""
    terms = {term for attempt in diagnostics.get("expansion", []) for term in attempt["expansion_terms"]}
    reformulations = diagnostics.get("multi_query", {}).get("reformulations", [])
    return terms | {term for reformulation in reformulations for term in reformulation["expansion_terms"]}


# -- what the property draws ------------------------------------------------------------------------

ALL_IDS = sorted({d.doc_id for d in DOCUMENTS})
ALL_TITLES = sorted({d.title for d in DOCUMENTS})
ALL_TERMS = sorted({term for d in DOCUMENTS for term in _terms(d)})
INJECTIONS = [
    "tenant_id:beta",
    "tenant_id:*",
    '{"tenant_id": "gamma"}',
    "+tenant_id:alpha OR *",
    "by Smith since 2019",
    "before 2015",
    f"in {GAMMA_VENUE.upper()}",
    "[NO_RERANK]",
    "[REFINE]",
    "[EXCLUDE:bwa|beta-bwa]",
    "*",
    "AND",
    "NOT",
    '"',
    ")",
    "\\",
]
MALFORMED_TAGS = ["[EXCLUDE:", "[NO-RERANK]", "[EXCLUDE:gamma-bwa", "[REFINE"]
# How a request is malformed: "schema" ones are refused (422) before the grant is checked, "late"
# ones (a filter field the index lacks, a value its type cannot hold: 409; a bad control tag: 422) after.
# "widen" names the core's ``tenants`` itself, which the API must refuse rather than take.
MALFORMED = {
    "none": None,
    "widen": "schema",
    "top_k": "schema",
    "filter_shape": "schema",
    "unknown_field": "late",
    "bad_value": "late",
    "control_tag": "late",
}


@st.composite
def _query(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["words", "words", "words", "id", "doc", "title"]))
    if kind == "id":
        return draw(st.sampled_from(ALL_IDS))
    if kind == "doc":  # more like this, of any tenant's document
        return f"{draw(st.sampled_from(['doc:', 'id:']))}{draw(st.sampled_from(ALL_IDS))}"
    if kind == "title":
        return draw(st.sampled_from(ALL_TITLES))
    pieces = draw(st.lists(st.sampled_from(ALL_TERMS), min_size=1, max_size=4))
    pieces += draw(st.lists(st.sampled_from(INJECTIONS + ALL_IDS + [f"doc:{i}" for i in ALL_IDS]), max_size=2))
    return " ".join(draw(st.permutations(pieces)))


def _filters(draw: st.DrawFn, malformed: str) -> dict[str, Any] | None:
    if malformed == "filter_shape":
        return draw(st.sampled_from([{"year": {"gt": 2015}}, {"doc_id": []}, {"year": {}}, {"topics": {"a": 1}}]))
    if malformed == "unknown_field":
        return {draw(st.sampled_from(["no_such_field", "vendor", "tenant"])): draw(st.sampled_from(ALL_IDS))}
    if malformed == "bad_value":
        return {"year": draw(st.sampled_from(["recent", "horos", "beta-bwa"]))}
    values = {
        "tenant_id": st.one_of(st.sampled_from(TENANTS), st.lists(st.sampled_from(TENANTS), min_size=1, max_size=3)),
        "doc_id": st.lists(st.sampled_from(ALL_IDS), min_size=1, max_size=6),
        "license": st.sampled_from(["MIT", "GPL-3.0"]),
        "year": st.fixed_dictionaries({"gte": st.integers(2008, 2022)}),
        "topics": st.sampled_from(["Mapping", "Medical imaging", "Sequencing"]),
    }
    return draw(st.one_of(st.none(), st.fixed_dictionaries({}, optional=values)))


@dataclass
class Call:
    method: str
    path: str
    params: dict[str, Any]
    body: Any = None
    malformed: str = "none"

    @property
    def schema_error(self) -> bool:  # refused before the grant is checked
        return MALFORMED.get(self.malformed) == "schema"

    def sent(self) -> str:
        return " ".join([self.path, *(json.dumps(part, ensure_ascii=False) for part in (self.params, self.body))])


def _search_call(draw: st.DrawFn, route: str, tenant: str | None) -> Call:
    malformed = draw(st.sampled_from([*["none"] * 18, *MALFORMED]))  # about a quarter malformed
    query = draw(_query())
    if malformed == "control_tag":
        query = f"{query} {draw(st.sampled_from(MALFORMED_TAGS))}"
    options: dict[str, Any] = {
        "query": query,
        "top_k": 0 if malformed == "top_k" else draw(st.integers(1, 40)),
        "strategies": draw(st.sampled_from([None, ["bm25"], ["dense"], ["splade"], ["bm25", "splade", "dense"]])),
        "fusion": draw(st.sampled_from([None, "rrf", "minmax", "zscore", "similarity_rrf"])),
        "rerank": draw(st.booleans()),
        "expand": draw(st.sampled_from([True, True, False])),
        "multi_query": draw(st.booleans()),
        "context_files": draw(st.lists(st.sampled_from(["scan.dcm", "brain.nii.gz", "reads.bam"]), max_size=2)),
        "filters": _filters(draw, malformed),
    }
    if tenant is not None:
        options[draw(st.sampled_from(["tenant", "tenant_id"]))] = tenant
    if malformed == "widen":
        options["tenants"] = draw(st.lists(st.sampled_from(TENANTS), min_size=1, max_size=3, unique=True))
    options = {name: value for name, value in options.items() if value is not None}
    if route == "search":
        return Call("POST", "/search", {}, options, malformed)
    params = dict(options)
    for flag in ("rerank", "expand", "multi_query"):
        params[flag] = str(params[flag]).lower()
    for listed in ("strategies", "tenants"):
        if listed in params:
            params[listed] = ",".join(params[listed])
    if "filters" in params:
        params["filters"] = json.dumps(params["filters"])
    return Call("GET", "/search/stream", params, None, malformed)


def _document_call(draw: st.DrawFn, route: str, tenant: str | None) -> Call:
    params = {"tenant": tenant} if tenant is not None else {}
    if route == "post":
        n = draw(st.integers(0, 10**6))
        doc_id = draw(st.sampled_from([f"new-{n}", *ALL_IDS]))  # another tenant's id names a new document of ours
        text = " ".join(draw(st.lists(st.sampled_from(ALL_TERMS), min_size=1, max_size=6)))
        record: dict[str, Any] = {"id": doc_id, "name": draw(st.sampled_from(ALL_TITLES)), "description": text}
        bad = draw(st.sampled_from(["none", "none", "none", "tenant_id", "empty", "no_id"]))
        if bad == "tenant_id":
            record["tenant_id"] = draw(st.sampled_from(TENANTS))
        elif bad == "empty":
            record["description"] = " "
        elif bad == "no_id":
            del record["id"]
        body = record if draw(st.booleans()) else [record]
        return Call("POST", "/documents", params, body)
    doc_id = draw(st.sampled_from([*ALL_IDS, "no-such-doc", "new-1"]))
    return Call("GET" if route == "get" else "DELETE", f"/documents/{doc_id}", params)


def _send(client: TestClient, call: Call, key_id: str | None, bogus: bool = False) -> Any:
    headers = {"Authorization": "Bearer ra.alpha-search.not-the-secret"} if bogus else _auth(key_id)
    if call.method == "POST":
        return client.post(call.path, params=call.params, json=call.body, headers=headers)
    return client.request(call.method, call.path, params=call.params, headers=headers)


@settings(
    max_examples=1200,
    derandomize=True,
    database=None,
    deadline=None,
    # One server for every example, on purpose (property_client).
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_no_answer_names_what_only_other_tenants_hold(
    property_client: TestClient, product_words: frozenset[str], data: st.DataObject
) -> None:
    client = property_client
    draw = data.draw
    key_id = draw(st.sampled_from(sorted(GRANTS)))
    tenants, scopes = GRANTS[key_id]
    route = draw(st.sampled_from(["search"] * 3 + ["stream"] * 3 + ["get"] * 2 + ["delete", "post", "health"]))
    if route == "health":
        _check_health(client, draw(st.sampled_from([key_id, None])))
        return
    tenant = draw(st.sampled_from([None] * 4 + [*TENANTS, "no-such-tenant"]))
    call = (_search_call if route in ("search", "stream") else _document_call)(draw, route, tenant)
    auth = draw(st.sampled_from(["key"] * 18 + ["none", "bogus"]))

    if auth != "key":
        response = _send(client, call, None, bogus=auth == "bogus")
        assert response.status_code == 401, response.text
        assert response.headers["WWW-Authenticate"] == "Bearer"
        event("401")
        return
    response = _send(client, call, key_id)
    status = response.status_code
    event(f"{route} {status}")
    granted = tenant is None or tenant in tenants
    where = f"{call.method} {call.path} {call.params} {call.body} as {key_id}"
    if SCOPE_OF_ROUTE[route] not in scopes and "admin" not in scopes:
        assert status == 403 and "scope" in response.json()["detail"], f"{where}: {status}"
    elif not granted and not call.schema_error:
        assert status == 403 and "is not granted" in response.json()["detail"], f"{where}: {status}, not 403"
    elif route in ("post", "delete") and tenant is None and len(tenants) > 1:
        assert status in {403, 422} and "name" in response.json()["detail"], f"{where}: {status}"  # which tenant?
    elif call.malformed == "widen":
        assert status == 422 and "tenants" in response.json()["detail"], f"{where}: {status}, not 422"
    else:
        assert status in {200, 202, 404, 409, 422}, f"{where}: {status} {response.text}"
    text = _readable(response)
    if route == "stream" and status == 200:
        events = _sse_events(response.text)
        assert [name for name, _ in events] == ["meta", *["hit"] * (len(events) - 2), "done"]
        meta, hits = events[0][1], [hit for _, hit in events[1:-1]]
        assert meta["count"] == len(hits) == events[-1][1]["count"]
        _check_result(key_id, {**meta, "hits": hits}, where)
        text += "\n" + "\n".join(json.dumps(payload, ensure_ascii=False) for _, payload in events)
    elif route == "search" and status == 200:
        _check_result(key_id, response.json(), where)
    elif route == "get" and status == 200:
        document = response.json()
        assert document["tenant_id"] in tenants, f"{where}: {response.text}"
        assert f"/documents/{document['doc_id']}" == call.path, f"{where}: {response.text}"
    elif status == 202:
        assert {r["tenant_id"] for r in response.json()["receipts"]} <= set(tenants), f"{where}: {response.text}"
    leaks = _leaks(key_id, text, call.sent(), product_words)
    assert not leaks, f"{where}: {status} names {leaks}"


def _check_health(client: TestClient, key_id: str | None) -> dict[str, Any]:
    """``GET /health`` tells no caller anything of tenants outside its grant: without a key only
    whether the service is up and which version serves; chunk counts (every tenant's) only to
    the admin scope; filter fields of the grant's tenants."""
    response = client.get("/health", headers=_auth(key_id))
    health = response.json()
    assert response.status_code == 200, response.text
    if key_id is None:
        assert set(health) == {"status", "version"}, health
        return health
    tenants, scopes = GRANTS[key_id]
    counts = {name: backend.get("count") for name, backend in health["backends"].items()}
    assert all(counts.values()) if "admin" in scopes else not any(counts.values()), (key_id, counts)
    assert set(health["filter_fields"]) == set(client.app.state.service.filter_fields(tenants)), key_id
    return health


# -- each channel on its own ------------------------------------------------------------------------


def _search(client: TestClient, key_id: str, **body: Any) -> dict[str, Any]:
    response = client.post("/search", json=body, headers=_auth(key_id))
    assert response.status_code == 200, response.text
    return response.json()


def _assert_no_leaks(key_id: str, text: str, sent: str, product_words: frozenset[str]) -> None:
    leaks = _leaks(key_id, text, sent, product_words)
    assert not leaks, f"{key_id} is answered {leaks}"


def test_a_search_naming_no_tenant_is_limited_to_the_grant(client: TestClient, product_words: frozenset[str]) -> None:
    query = "align sequencing reads to a reference genome"
    unscoped = client.app.state.service.run(SearchRequest(query=query, top_k=40, rerank=False))
    assert {hit.tenant_id for hit in unscoped.hits} == set(TENANTS)  # without a grant: every tenant
    for key_id in ("alpha-search", "beta-app", "alpha-gamma-search", "gamma-admin"):
        grant = GRANTS[key_id][0]
        result = _search(client, key_id, query=query, top_k=40, rerank=False, expand=True)
        assert {hit["tenant_id"] for hit in result["hits"]} == set(grant)
        assert result["diagnostics"]["filters"] == [{"field": "tenant_id", "any_of": list(grant)}]
        _check_result(key_id, result, "search")
        _assert_no_leaks(key_id, json.dumps(result), query, product_words)
    # A tenant_id filter naming another tenant narrows within the grant: nothing, not beta's hits.
    narrowed = _search(client, "alpha-search", query=query, top_k=40, filters={"tenant_id": ["beta", "gamma"]})
    assert narrowed["hits"] == []


def test_another_tenants_document_is_404_as_an_unknown_one_is(client: TestClient) -> None:
    cases = [
        ("alpha-search", "beta-bwa", None),
        ("alpha-search", "orthanc", "alpha"),
        ("alpha-search", "pending-gamma-1", None),
        ("beta-app", "bwa", None),
        ("beta-app", "pending-alpha-2", "beta"),
        ("gamma-admin", "posted-alpha", None),
        ("alpha-gamma-search", "beta-itk", None),
        ("alpha-gamma-search", "pending-beta-1", "gamma"),
    ]
    for key_id, doc_id, tenant in cases:
        params = {"tenant": tenant} if tenant else {}
        other = client.get(f"/documents/{doc_id}", params=params, headers=_auth(key_id))
        unknown = client.get("/documents/no-such-doc", params=params, headers=_auth(key_id))
        assert other.status_code == unknown.status_code == 404, other.text
        assert other.text == unknown.text.replace("no-such-doc", doc_id)
    # Nor can a writer delete another tenant's document (nor learn that it exists).
    for key_id, doc_id, tenant in [("beta-app", "bwa", None), ("alpha-gamma-writer", "beta-itk", "alpha")]:
        params = {"tenant": tenant} if tenant else {}
        other = client.delete(f"/documents/{doc_id}", params=params, headers=_auth(key_id))
        unknown = client.delete("/documents/no-such-doc", params=params, headers=_auth(key_id))
        assert other.status_code == unknown.status_code == 404, other.text
        assert other.text == unknown.text.replace("no-such-doc", doc_id)
    # Their owners find them: served, pending and pending-deleted.
    owned = {"beta-app": "beta-bwa", "gamma-admin": "pending-gamma-1", "alpha-gamma-search": "orthanc"}
    for key_id, doc_id in owned.items():
        response = client.get(f"/documents/{doc_id}", headers=_auth(key_id))
        assert response.status_code == 200 and response.json()["tenant_id"] in GRANTS[key_id][0], response.text


def test_another_tenants_id_is_not_more_like_this(client: TestClient, product_words: frozenset[str]) -> None:
    owner = _search(client, "gamma-admin", query="doc:horos", rerank=False)
    assert owner["diagnostics"]["more_like_this"] == "horos"  # the owner's query is Horos's own text
    for key_id in ("alpha-search", "beta-app"):
        for query in ("doc:horos", "horos", "id:orthanc", "itksnap viewer"):
            result = _search(client, key_id, query=query, rerank=False, multi_query=True)
            assert "more_like_this" not in result["diagnostics"], result["diagnostics"]
            _check_result(key_id, result, query)
            _assert_no_leaks(key_id, json.dumps(result), query, product_words)


@pytest.mark.parametrize(
    ("key_id", "query", "foreign_unscoped"),
    [
        ("gamma-admin", "sequence alignment", True),
        ("gamma-admin", "image segmentation", False),
        ("beta-app", "quality control", False),
    ],
)
def test_expansion_adds_only_terms_the_grant_holds(
    client: TestClient, product_words: frozenset[str], key_id: str, query: str, foreign_unscoped: bool
) -> None:
    options = {"expand": True, "multi_query": True, "rerank": False}
    unscoped = client.app.state.service.run(SearchRequest(query=query, **options))
    scoped = _search(client, key_id, query=query, **options)
    held = FORBIDDEN[key_id].held_terms
    # Unscoped, with terms no document of the grant holds, where another tenant's documents hold
    # such a neighbour often enough to enter the vocabulary for that tenant.
    assert bool(_expansion_terms(unscoped.diagnostics) - held) == foreign_unscoped
    assert _expansion_terms(scoped["diagnostics"]) and _expansion_terms(scoped["diagnostics"]) <= held
    reformulations = scoped["diagnostics"]["multi_query"]["reformulations"]
    assert {r["label"] for r in reformulations} == {"prf", "expansion"}
    _assert_no_leaks(key_id, json.dumps(scoped), query, product_words)


def test_graph_expansion_adds_nothing_of_other_tenants(client: TestClient, product_words: frozenset[str]) -> None:
    query = "Burrows-Wheeler aligner"
    walks = (("beta-app", {"beta-bcftools", "beta-multiqc", "beta-picard"}), ("alpha-gamma-search", None))
    for key_id, expected in walks:
        result = _search(client, key_id, query=query, top_k=40, strategies=["bm25"], rerank=False)
        added = result["diagnostics"]["graph"]["added"]
        assert added and (expected is None or set(added) == expected)  # the walk did add related tools
        walked = [h for h in result["hits"] if "graph" in h["strategy_scores"]]
        assert {h["doc_id"] for h in walked} == set(added)
        _check_result(key_id, result, query)
        _assert_no_leaks(key_id, json.dumps(result), query, product_words)


def test_stream_events_stay_within_the_grant(client: TestClient, product_words: frozenset[str]) -> None:
    params = {"query": "medical image viewer", "top_k": "10", "expand": "true", "multi_query": "true", "rerank": "true"}
    unscoped = client.app.state.service.run(SearchRequest(query=params["query"], top_k=10, rerank=False))
    assert {"horos", "orthanc", "itksnap"} <= {hit.doc_id for hit in unscoped.hits}  # gamma's imaging tools
    for key_id in ("alpha-search", "beta-app"):
        response = client.get("/search/stream", params=params, headers=_auth(key_id))
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = _sse_events(response.text)
        hits = [data for _, data in events[1:-1]]
        assert [name for name, _ in events] == ["meta", *["hit"] * len(hits), "done"] and hits
        assert events[0][1]["count"] == events[-1][1]["count"] == len(hits)
        assert {hit["tenant_id"] for hit in hits} == set(GRANTS[key_id][0])
        _check_result(key_id, {**events[0][1], "hits": hits}, "stream")
        _assert_no_leaks(key_id, response.text, json.dumps(params), product_words)


def test_a_tenant_or_scope_outside_the_grant_is_403(client: TestClient) -> None:
    record = {"id": "x-1", "name": "X", "description": "Aligns reads."}
    refused = [
        ("alpha-search", "POST", "/search", {}, {"query": "bwa", "tenant": "beta"}, "tenant 'beta' is not granted"),
        ("alpha-search", "POST", "/search", {}, {"query": "bwa", "tenant_id": "gamma"}, "tenant 'gamma' is not"),
        ("beta-app", "GET", "/search/stream", {"query": "bwa", "tenant": "alpha"}, None, "tenant 'alpha' is not"),
        ("alpha-gamma-search", "GET", "/documents/beta-bwa", {"tenant": "beta"}, None, "tenant 'beta' is not"),
        ("beta-app", "POST", "/documents", {"tenant": "alpha"}, record, "tenant 'alpha' is not granted"),
        ("alpha-gamma-writer", "DELETE", "/documents/beta-bwa", {"tenant": "beta"}, None, "tenant 'beta' is not"),
        ("alpha-search", "POST", "/documents", {"tenant": "alpha"}, record, "lacks the 'documents:write' scope"),
        ("alpha-gamma-search", "DELETE", "/documents/bwa", {}, None, "lacks the 'documents:write' scope"),
        ("alpha-gamma-writer", "POST", "/search", {}, {"query": "bwa"}, "lacks the 'search' scope"),
        ("alpha-gamma-writer", "GET", "/documents/bwa", {}, None, "lacks the 'search' scope"),
    ]
    for key_id, method, path, params, body, reason in refused:
        response = client.request(method, path, params=params, json=body, headers=_auth(key_id))
        assert response.status_code == 403, (key_id, method, path, response.text)
        assert reason in response.json()["detail"] and key_id in response.json()["detail"]
    assert client.post("/search", json={"query": "bwa", "tenant": "beta"}, headers=_auth("beta-app")).status_code == 200


def test_no_key_or_an_unknown_one_is_401(client: TestClient) -> None:
    routes = [("POST", "/search"), ("GET", "/search/stream?query=bwa"), ("GET", "/documents/bwa")]
    routes += [("DELETE", "/documents/bwa"), ("POST", "/documents")]
    for headers in ({}, {"Authorization": "Bearer ra.gamma-admin.wrong"}, {"Authorization": "Bearer nonsense"}):
        for method, path in routes:
            response = client.request(method, path, json={"query": "bwa"}, headers=headers)
            assert response.status_code == 401 and response.headers["WWW-Authenticate"] == "Bearer", response.text
    assert client.get("/health").status_code == 200  # the one open route
    # /metrics is admin only, and counts a refusal under the route it was refused at (not its path).
    assert client.get("/metrics", headers=_auth("alpha-search")).status_code == 403
    metrics = client.get("/metrics", headers=_auth("gamma-admin")).text
    assert 'retrieval_http_requests_total{method="DELETE",route="/documents/{doc_id:path}",status="401"} 3.0' in metrics


def test_a_venue_only_another_tenant_holds_stays_text(client: TestClient) -> None:
    """Natural-language filters match venues of the caller's tenants only: to alpha, "in
    <gamma's venue>" is words of the query, and the venue's spelling is never printed."""
    query = f"medical image viewer in {GAMMA_VENUE.upper()}"
    alpha = _search(client, "alpha-search", query=query, rerank=False)
    assert alpha["diagnostics"]["filters"] == [{"field": "tenant_id", "any_of": ["alpha"]}]
    assert alpha["diagnostics"]["query"] == query and GAMMA_VENUE not in json.dumps(alpha)
    gamma = _search(client, "gamma-admin", query=query, rerank=False)
    assert {"field": "venue", "any_of": [GAMMA_VENUE]} in gamma["diagnostics"]["filters"]
    assert gamma["hits"] and gamma["diagnostics"]["query"] == "medical image viewer"


@pytest.mark.parametrize("query", ["sequence alignment reads", "genome variant calling", "quality control"])
def test_bm25_scores_count_only_the_grants_documents(client: TestClient, tmp_path: Path, query: str) -> None:
    """Scoped to alpha, every BM25 score is what an index of alpha's documents alone gives, bit
    for bit: no score ratio of a shared and a private word can count another tenant's documents."""
    lexical = client.app.state.service._lexical_store()
    alpha_ids = sorted({d.doc_id for d in DOCUMENTS if d.tenant == "alpha" and not d.doc_id.startswith("pending-")})
    alpha = filters.parse_filters({"tenant_id": "alpha"})
    payloads = [hit.payload for hit in lexical.fetch_documents(alpha_ids, alpha)]
    assert len(payloads) == len(alpha_ids) == lexical.count_tenants(["alpha"])  # one chunk per tool
    alone = TantivyLexicalStore.create(tmp_path / "alpha_only", field_types=lexical.field_types)
    alone.add(payloads)
    alone.finalize()
    answer = _search(client, "alpha-search", query=query, strategies=["bm25"], rerank=False, expand=False, top_k=50)
    scores = [(hit["doc_id"], hit["strategy_scores"].get("bm25")) for hit in answer["hits"]]  # graph walks: none
    served = {doc_id: score["score"] for doc_id, score in scores if score is not None}
    # The retriever retries a query with few hits with expansion terms: score the same terms.
    terms = answer["diagnostics"]["expansion"][-1]["expansion_terms"]
    expected = {hit.doc_id: hit.score for hit in alone.search_text(query, 50, expansion_terms=terms)}
    assert served and served == pytest.approx(expected, rel=0, abs=1e-6)
    alone.close()


def test_health_tells_each_caller_only_what_its_key_may_know(client: TestClient) -> None:
    public = _check_health(client, None)
    assert public["status"] == "ok" and public["version"]
    alpha = _check_health(client, "alpha-search")
    assert alpha["version"] == public["version"] and alpha["backends"]["tantivy"]["ready"]
    admin = _check_health(client, "gamma-admin")
    assert admin["backends"]["tantivy"]["count"] > 0


def test_posted_documents_and_deletes_name_their_sender(client: TestClient, home: Path) -> None:
    inbox = DocumentInbox.under(home)
    record = {"id": "sent-by-beta", "name": "Sent", "description": "Aligns reads to a genome."}
    response = client.post("/documents", json=record, headers=_auth("beta-app"))
    assert response.status_code == 202, response.text
    entry = inbox.pending()[-1]
    assert (entry.doc_id, entry.tenant_id, entry.sender) == ("sent-by-beta", "beta", "beta-app")
    response = client.post("/documents", params={"tenant": "alpha"}, json=[record], headers=_auth("alpha-gamma-writer"))
    assert response.status_code == 202, response.text
    entry = inbox.pending()[-1]
    assert (entry.doc_id, entry.tenant_id, entry.sender) == ("sent-by-beta", "alpha", "alpha-gamma-writer")
    assert client.delete("/documents/orthanc", headers=_auth("gamma-admin")).status_code == 202
    entry = inbox.pending()[-1]
    assert (entry.operation, entry.doc_id, entry.tenant_id) == ("delete", "orthanc", "gamma")
    assert entry.sender == "gamma-admin"


def test_a_key_over_its_rate_is_429_with_retry_after(client: TestClient) -> None:
    answers = [client.get("/documents/bwa", headers=_auth(SLOW)) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    refused = answers[-1]
    assert int(refused.headers["Retry-After"]) >= 1 and "2 requests a minute" in refused.json()["detail"]
    assert client.get("/documents/bwa", headers=_auth("alpha-search")).status_code == 200  # other keys go on


def test_field_names_only_other_tenants_hold_are_not_shown(client: TestClient) -> None:
    """gamma's imaging tools are the only documents with `formats`: alpha is never told the name."""
    alpha = client.get("/health", headers=_auth("alpha-search")).json()["filter_fields"]
    gamma = client.get("/health", headers=_auth("gamma-admin")).json()["filter_fields"]
    assert gamma["formats"] == "keyword" and "formats" not in alpha and {"doc_id", "tenant_id"} <= set(alpha)
    assert "filter_fields" not in client.get("/health").json()  # open, so it names no field of any tenant
    unknown = client.post("/search", json={"query": "viewer", "filters": {"nosuch": 1}}, headers=_auth("alpha-search"))
    assert unknown.status_code == 409 and "formats" not in unknown.text and "'nosuch'" in unknown.text
    # The field alpha has no value in is as unknown to alpha as one no tenant has.
    held_elsewhere = {"query": "viewer", "filters": {"formats": "DICOM"}}
    answer = client.post("/search", json=held_elsewhere, headers=_auth("alpha-search"))
    assert answer.status_code == 409 and answer.json()["detail"].startswith("'formats' is not a filter field")
    assert client.post("/search", json=held_elsewhere, headers=_auth("gamma-admin")).status_code == 200

"""Knowledge-graph building: the edge table of a catalog's tool relations and domains, its checks and summary.

The graph
---------
Nodes are tools (document ids) and domain nodes, one per value of a domain field
(``topics: ["Genomics"]`` gives ``topic:Genomics``; see ``domain_node``). The edge table
(``EDGE_COLUMNS``, one Parquet-friendly frame) holds, per tenant:

* tool -> tool edges from ``relations.<name>`` metadata (what ``cleaning`` makes of a tool
  catalog's ``relations`` object), the relation name kept as given (``requires``,
  ``compatible_with``, ``alternative_to``, ...);
* tool -> domain ``in_domain`` edges.

``same_domain`` is not materialised as tool -> tool edges: it is the two-hop walk
tool -> domain -> tool done at query time, so a domain shared by n tools costs n edges
rather than n². (A catalog may still state ``same_domain`` explicitly; it is then an ordinary
one-hop relation.)

Edges that cannot be kept are dropped at build time and counted by ``DropReason``: a target
that is not in the catalog (``unknown_target``), a target of another tenant
(``cross_tenant``), a tool naming itself, a repeated edge, a blank target, a relation called
``in_domain`` (reserved for domain links) and a relation or domain field whose value is not
a string or a list of strings. Targets match document ids exactly.

Tenants
-------
An edge carries its source document's tenant, and tenants never share a node: a domain node
exists once per tenant, and a tool is a document id within its tenant's namespace (two tenants
may hold the same id: they are two tools, each in its own tenant's graph). A relation names a
tool of its own tenant; one that only another tenant holds is ``cross_tenant``. Walking the
graph at query time is ``core.retrieval.graph_expansion``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import BaseModel

from retrieval_assets.core.io.tables import write_parquet
from retrieval_assets.core.models import Document, MetadataValue, document_key

EDGE_COLUMNS = ["source", "target", "relation", "tenant_id"]
_EDGE_DTYPES = dict.fromkeys(EDGE_COLUMNS, "string")

IN_DOMAIN = "in_domain"
SAME_DOMAIN = "same_domain"
DEFAULT_DOMAIN_FIELDS: tuple[str, ...] = ("topics",)
DEFAULT_RELATION_PREFIX = "relations."


class DropReason(StrEnum):
    """Why a relation or domain value did not become an edge."""

    UNKNOWN_TARGET = "unknown_target"  # the target is not a document of the catalog
    CROSS_TENANT = "cross_tenant"  # the target belongs to another tenant
    SELF_LOOP = "self_loop"  # a tool names itself
    DUPLICATE = "duplicate"  # the same edge was already kept
    BLANK_TARGET = "blank_target"  # an empty relation target or domain value
    RESERVED_RELATION = "reserved_relation"  # a relation named "in_domain", or with no name
    INVALID_VALUE = "invalid_value"  # a relation or domain field that is not str / list[str]


def domain_node(field_name: str, value: str) -> str:
    """The node of one domain value: the field's last segment, singular, as a prefix."""
    name = field_name.rsplit(".", 1)[-1]
    prefix = name[:-1] if len(name) > 1 and name.endswith("s") else name
    return f"{prefix}:{value}"


# --------------------------------------------------------------------------- build


@dataclass(frozen=True)
class GraphBuild:
    """The edge table and what was dropped on the way, for asset metadata."""

    edges: pd.DataFrame
    dropped: dict[str, int]  # every DropReason, zero included, so the shape is stable
    documents: int


def _values(value: MetadataValue) -> list[str] | None:
    """A field's values; ``None`` for numbers and booleans, which name no tool or domain."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(item) for item in value]
    return None


def _relation_drop(
    doc_id: str, tenant_id: str, relation: str, target: str, tenant_of: Mapping[str, str], held: Collection[str]
) -> DropReason | None:
    if not relation or relation == IN_DOMAIN:
        return DropReason.RESERVED_RELATION
    if not target:
        return DropReason.BLANK_TARGET
    if target == doc_id:
        return DropReason.SELF_LOOP
    if document_key(tenant_id, target) in tenant_of:
        return None
    return DropReason.CROSS_TENANT if target in held else DropReason.UNKNOWN_TARGET


def held_ids(tenant_of: Mapping[str, str]) -> set[str]:
    """Every document id of a ``document_tenants`` map, whatever its tenant."""
    return {key.partition("/")[2] for key in tenant_of}


def _candidate_edges(
    doc_id: str,
    tenant_id: str,
    metadata: Mapping[str, MetadataValue],
    domain_fields: Sequence[str],
    relation_prefix: str,
    tenant_of: Mapping[str, str],
    held: Collection[str],
) -> Iterator[tuple[tuple[str, str, str, str] | None, DropReason | None]]:
    """Each edge a document asks for, as (edge, None) or (None, why it is dropped)."""
    for key, value in sorted(metadata.items()):
        if not key.startswith(relation_prefix):
            continue
        relation = key[len(relation_prefix) :]
        targets = _values(value)
        if targets is None:
            yield None, DropReason.INVALID_VALUE
            continue
        for target in (t.strip() for t in targets):
            reason = _relation_drop(doc_id, tenant_id, relation, target, tenant_of, held)
            yield (None, reason) if reason else ((doc_id, target, relation, tenant_id), None)
    for field_name in domain_fields:
        if field_name not in metadata:
            continue
        values = _values(metadata[field_name])
        if values is None:
            yield None, DropReason.INVALID_VALUE
            continue
        for value in (v.strip() for v in values):
            if not value:
                yield None, DropReason.BLANK_TARGET
            else:
                yield (doc_id, domain_node(field_name, value), IN_DOMAIN, tenant_id), None


# (doc_id, tenant_id, metadata) of a document that may ask for edges.
_GraphNode = tuple[str, str, Mapping[str, MetadataValue]]


def _collect(
    nodes: Iterable[_GraphNode],
    tenant_of: Mapping[str, str],
    documents: int,
    domain_fields: Sequence[str],
    relation_prefix: str,
) -> GraphBuild:
    kept: set[tuple[str, str, str, str]] = set()
    dropped: Counter[str] = Counter()
    held = held_ids(tenant_of)
    for doc_id, tenant_id, metadata in nodes:
        edges = _candidate_edges(doc_id, tenant_id, metadata, domain_fields, relation_prefix, tenant_of, held)
        for edge, reason in edges:
            if edge is not None and edge in kept:
                reason = DropReason.DUPLICATE
            if reason is not None:
                dropped[reason.value] += 1
            elif edge is not None:
                kept.add(edge)
    # Sorted, not in catalog order: the same catalog in any order gives the same file.
    rows = sorted(kept, key=lambda e: (e[3], e[0], e[2], e[1]))
    edges = pd.DataFrame(rows, columns=EDGE_COLUMNS).astype(_EDGE_DTYPES)
    return GraphBuild(
        edges=edges,
        dropped={reason.value: dropped.get(reason.value, 0) for reason in DropReason},
        documents=documents,
    )


def collect_tool_graph(
    documents: Iterable[Document],
    domain_fields: Sequence[str] = DEFAULT_DOMAIN_FIELDS,
    relation_prefix: str = DEFAULT_RELATION_PREFIX,
) -> GraphBuild:
    """The edge table of ``documents`` plus the count of dropped edges by reason."""
    docs = list(documents)
    nodes = ((doc.doc_id, doc.tenant_id, doc.metadata) for doc in docs)
    return _collect(nodes, document_tenants(docs), len(docs), domain_fields, relation_prefix)


def collect_frame_graph(
    documents: pd.DataFrame,
    domain_fields: Sequence[str] = DEFAULT_DOMAIN_FIELDS,
    relation_prefix: str = DEFAULT_RELATION_PREFIX,
) -> GraphBuild:
    """``collect_tool_graph`` over a documents frame's ``doc_id``, ``tenant_id`` and ``metadata``
    (JSON) columns. Only rows whose metadata text names a relation or domain field are parsed: a
    paper catalog has none, and parsing 103k ACL documents took 3 s of a one-document delta."""
    needles = [json.dumps(relation_prefix, ensure_ascii=False)[:-1]]
    needles += [json.dumps(field, ensure_ascii=False) for field in domain_fields]
    metadata = documents["metadata"].astype("string")
    asks = np.zeros(len(documents), dtype=bool)
    for needle in needles:
        asks |= metadata.str.contains(needle, regex=False).to_numpy(dtype=bool)
    asking = documents[asks]
    nodes = (
        (doc_id, tenant_id, json.loads(text))
        for doc_id, tenant_id, text in zip(asking["doc_id"], asking["tenant_id"], asking["metadata"], strict=True)
    )
    # Without a node asking, no edge is checked against the tenants (1M documents' map: 1 s).
    tenant_of = frame_tenants(documents) if asks.any() else {}
    return _collect(nodes, tenant_of, len(documents), domain_fields, relation_prefix)


def document_tenants(documents: Iterable[Document]) -> dict[str, str]:
    """Each document's tenant by its ``document_key`` (ids live in a tenant's namespace): what an
    edge's ends are checked against."""
    return {document_key(doc.tenant_id, doc.doc_id): doc.tenant_id for doc in documents}


def frame_tenants(documents: pd.DataFrame) -> dict[str, str]:
    """``document_tenants`` of a documents frame."""
    tenants = documents["tenant_id"].tolist()
    # A key per distinct tenant, then joined: ``document_key`` per row quoted the same few tenants
    # a million times.
    prefix = {tenant: document_key(tenant, "") for tenant in set(tenants)}
    return {
        prefix[tenant] + doc_id: tenant for tenant, doc_id in zip(tenants, documents["doc_id"].tolist(), strict=True)
    }


def build_tool_graph(
    documents: Iterable[Document],
    domain_fields: Sequence[str] = DEFAULT_DOMAIN_FIELDS,
    relation_prefix: str = DEFAULT_RELATION_PREFIX,
) -> pd.DataFrame:
    """The edge table (``EDGE_COLUMNS``) of ``documents``; ``collect_tool_graph`` also counts drops."""
    return collect_tool_graph(documents, domain_fields, relation_prefix).edges


def save_edges(edges: pd.DataFrame, path: str | Path) -> Path:
    """Write the edge table as Parquet, atomically: readers never see a half-written file."""
    return write_parquet(edges.loc[:, EDGE_COLUMNS].astype(_EDGE_DTYPES), path)


# --------------------------------------------------------------------------- checks and summary


def edge_rows(edges: pd.DataFrame) -> Iterator[tuple[str, str, str, str]]:
    """The edge table's rows as (source, target, relation, tenant_id); fails on missing columns."""
    missing = [c for c in EDGE_COLUMNS if c not in edges.columns]
    if missing:
        raise ValueError(f"edge frame lacks columns {missing}; has {list(edges.columns)}")
    for row in edges.loc[:, EDGE_COLUMNS].dropna().itertuples(index=False, name=None):
        yield tuple(str(value) for value in row)  # type: ignore[misc]


def edge_violations(edges: pd.DataFrame, tenant_of: Mapping[str, str]) -> dict[str, int]:
    """Edges that break the build's guarantees against the catalog's documents
    (``document_tenants``: each document's tenant by its ``document_key``).

    ``unknown_tool``: a tool end that no tenant's document holds; ``cross_tenant``: a tool end that
    only other tenants than the edge's hold. Both are zero for a table from ``build_tool_graph``.
    """
    counts = {"unknown_tool": 0, "cross_tenant": 0}
    held: set[str] | None = None
    for source, target, relation, tenant in edge_rows(edges):
        tools = (source,) if relation == IN_DOMAIN else (source, target)
        missing = [tool for tool in tools if document_key(tenant, tool) not in tenant_of]
        if not missing:
            continue
        held = held_ids(tenant_of) if held is None else held
        if any(tool not in held for tool in missing):
            counts["unknown_tool"] += 1
        else:
            counts["cross_tenant"] += 1
    return counts


class ToolDegree(BaseModel):
    doc_id: str
    tenant_id: str
    relations: int  # tool-tool edges, in and out
    domains: int


class GraphSummary(BaseModel):
    documents: int | None  # None when the summary was made from an edge table alone
    tools: int  # tools with at least one edge
    domain_nodes: int
    tenants: int
    edges: int
    edges_by_relation: dict[str, int]
    dropped_by_reason: dict[str, int]  # empty when unknown
    top_degree: list[ToolDegree]


def graph_summary(
    edges: pd.DataFrame,
    *,
    dropped: Mapping[str, int] | None = None,
    documents: int | None = None,
    top: int = 10,
) -> GraphSummary:
    """Node and edge counts by relation, dropped edges by reason and the best-connected tools."""
    by_relation: Counter[str] = Counter()
    # Tools are (tenant, id): two tenants may hold the same id.
    relation_degree: Counter[tuple[str, str]] = Counter()
    domain_degree: Counter[tuple[str, str]] = Counter()
    tools: set[tuple[str, str]] = set()
    domains: set[tuple[str, str]] = set()
    for source, target, relation, tenant in edge_rows(edges):
        by_relation[relation] += 1
        tools.add((tenant, source))
        if relation == IN_DOMAIN:
            domain_degree[tenant, source] += 1
            domains.add((tenant, target))
        else:
            relation_degree[tenant, source] += 1
            relation_degree[tenant, target] += 1
            tools.add((tenant, target))
    ranked = sorted(tools, key=lambda t: (-relation_degree[t], -domain_degree[t], t[1], t[0]))[:top]
    return GraphSummary(
        documents=documents,
        tools=len(tools),
        domain_nodes=len(domains),
        tenants=len({tenant for tenant, _ in tools}),
        edges=sum(by_relation.values()),
        edges_by_relation=dict(sorted(by_relation.items())),
        dropped_by_reason=dict(dropped or {}),
        top_degree=[
            ToolDegree(doc_id=t[1], tenant_id=t[0], relations=relation_degree[t], domains=domain_degree[t])
            for t in ranked
        ],
    )

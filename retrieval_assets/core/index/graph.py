"""Knowledge-graph expansion: related tools from a catalog's relations and domains.

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

Traversal
---------
Relations are directed in the catalog; expansion walks every edge both ways, labelled by the
direction walked (``reverse_label``): ``compatible_with`` and ``same_domain`` are symmetric
and keep their label, ``requires`` walked backwards is ``required_by`` (and the reverse), any
other relation ``r`` walked backwards is ``reverse_r``. A domain walk is labelled
``in_domain`` (tool -> domain) then ``same_domain`` (domain -> tool). The ``relations``
argument of ``ToolGraph.expand`` filters on these labels, and ``same_domain`` in it allows
domain walks.

Tenants
-------
An edge carries its source document's tenant, and tenants never share a node: a domain node
exists once per tenant, and tool ids are unique across tenants (cleaning already guarantees
it; ``ToolGraph.from_edges`` refuses a table that breaks it). A walk therefore stays inside the
tenant of the seed it starts from. ``expand(tenant_id="a")`` also ignores seeds of other
tenants; ``tenant_id=None`` (a single-tenant catalog, or a caller that is not
tenant-scoped) walks each seed within its own tenant.

Scores and order
----------------
``score = seed_score * decay ** depth`` where ``depth`` counts every edge walked, a hop into a
domain node included: a ``same_domain`` tool is at depth 2 and weighs ``decay²`` (sharing a
topic is weaker evidence than a declared relation), and the default ``max_depth=2`` admits
direct relations, relations of relations and tools sharing a domain. A tool reached several
ways keeps its best score; its ``via`` is the seed of that walk.

The search is best-first (with one seed it is plain breadth-first search): candidates come
off a heap ordered by score (highest first), then depth, then the number of domain nodes on
the walk (at a tie, a declared relation beats a shared topic), then seed order, then id, so
the result is deterministic and ``expand(max_nodes=k)`` is exactly the first ``k`` hits of an
uncapped call. It stops as soon as ``max_nodes`` tools are found. Each node contributes at
most ``max_fanout`` neighbours, in a fixed order: forward relations, then reverse ones (a hub
such as samtools may be required by hundreds of tools), then its domains, smallest first;
a domain node's tools come fewest-domains first (a tool annotated with one topic is more
about it than one annotated with fifteen), then by id.
"""

from __future__ import annotations

import heapq
import json
import math
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from retrieval_assets.core.io.tables import write_parquet
from retrieval_assets.core.models import Document, MetadataValue

EDGE_COLUMNS = ["source", "target", "relation", "tenant_id"]
_EDGE_DTYPES = dict.fromkeys(EDGE_COLUMNS, "string")

IN_DOMAIN = "in_domain"
SAME_DOMAIN = "same_domain"
GRAPH_STRATEGY = "graph"
SYMMETRIC_RELATIONS = frozenset({"compatible_with", SAME_DOMAIN})
_INVERSE_RELATIONS = {"requires": "required_by", "required_by": "requires"}
DEFAULT_DOMAIN_FIELDS: tuple[str, ...] = ("topics",)
DEFAULT_RELATION_PREFIX = "relations."

# Heap entries and visited keys tell tools from domain nodes by kind, so a tool id that looks
# like a domain node name ("topic:X") can never be confused with one.
_TOOL, _DOMAIN = 0, 1


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


def reverse_label(relation: str) -> str:
    """The label of ``relation`` walked from target to source."""
    if relation in SYMMETRIC_RELATIONS:
        return relation
    return _INVERSE_RELATIONS.get(relation, f"reverse_{relation}")


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
    doc_id: str, tenant_id: str, relation: str, target: str, tenant_of: Mapping[str, str]
) -> DropReason | None:
    if not relation or relation == IN_DOMAIN:
        return DropReason.RESERVED_RELATION
    if not target:
        return DropReason.BLANK_TARGET
    if target == doc_id:
        return DropReason.SELF_LOOP
    owner = tenant_of.get(target)
    if owner is None:
        return DropReason.UNKNOWN_TARGET
    return DropReason.CROSS_TENANT if owner != tenant_id else None


def _candidate_edges(
    doc_id: str,
    tenant_id: str,
    metadata: Mapping[str, MetadataValue],
    domain_fields: Sequence[str],
    relation_prefix: str,
    tenant_of: Mapping[str, str],
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
            reason = _relation_drop(doc_id, tenant_id, relation, target, tenant_of)
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
    for doc_id, tenant_id, metadata in nodes:
        for edge, reason in _candidate_edges(doc_id, tenant_id, metadata, domain_fields, relation_prefix, tenant_of):
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
    return _collect(nodes, frame_tenants(documents), len(documents), domain_fields, relation_prefix)


def document_tenants(documents: Iterable[Document]) -> dict[str, str]:
    """Each document id's tenant: what an edge's ends are checked against."""
    return {doc.doc_id: doc.tenant_id for doc in documents}


def frame_tenants(documents: pd.DataFrame) -> dict[str, str]:
    """``document_tenants`` of a documents frame."""
    return dict(zip(documents["doc_id"].tolist(), documents["tenant_id"].tolist(), strict=True))


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


def _edge_rows(edges: pd.DataFrame) -> Iterator[tuple[str, str, str, str]]:
    missing = [c for c in EDGE_COLUMNS if c not in edges.columns]
    if missing:
        raise ValueError(f"edge frame lacks columns {missing}; has {list(edges.columns)}")
    for row in edges.loc[:, EDGE_COLUMNS].dropna().itertuples(index=False, name=None):
        yield tuple(str(value) for value in row)  # type: ignore[misc]


def edge_violations(edges: pd.DataFrame, tenant_of: Mapping[str, str]) -> dict[str, int]:
    """Edges that break the build's guarantees against the catalog's ``doc_id -> tenant_id``.

    ``unknown_tool``: a tool end that is not in the catalog; ``cross_tenant``: a tool end whose
    tenant differs from the edge's. Both are zero for a table from ``build_tool_graph``.
    """
    counts = {"unknown_tool": 0, "cross_tenant": 0}
    for source, target, relation, tenant in _edge_rows(edges):
        tools = (source,) if relation == IN_DOMAIN else (source, target)
        owners = [tenant_of.get(tool) for tool in tools]
        if None in owners:
            counts["unknown_tool"] += 1
        elif any(owner != tenant for owner in owners):
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
    relation_degree: Counter[str] = Counter()
    domain_degree: Counter[str] = Counter()
    tenant_of: dict[str, str] = {}
    domains: set[tuple[str, str]] = set()
    for source, target, relation, tenant in _edge_rows(edges):
        by_relation[relation] += 1
        tenant_of[source] = tenant
        if relation == IN_DOMAIN:
            domain_degree[source] += 1
            domains.add((tenant, target))
        else:
            relation_degree[source] += 1
            relation_degree[target] += 1
            tenant_of[target] = tenant
    ranked = sorted(tenant_of, key=lambda t: (-relation_degree[t], -domain_degree[t], t))[:top]
    return GraphSummary(
        documents=documents,
        tools=len(tenant_of),
        domain_nodes=len(domains),
        tenants=len(set(tenant_of.values())),
        edges=sum(by_relation.values()),
        edges_by_relation=dict(sorted(by_relation.items())),
        dropped_by_reason=dict(dropped or {}),
        top_degree=[
            ToolDegree(doc_id=t, tenant_id=tenant_of[t], relations=relation_degree[t], domains=domain_degree[t])
            for t in ranked
        ],
    )


# --------------------------------------------------------------------------- expansion


class GraphHit(BaseModel):
    """A tool added by graph expansion, with the walk that reached it."""

    model_config = ConfigDict(frozen=True)

    doc_id: str
    score: float  # seed score * decay ** depth
    depth: int  # edges walked, domain hops included
    via: str  # the seed the walk started from
    path: list[str]  # [seed, label, node, label, node, ..., doc_id]
    tenant_id: str
    strategy: Literal["graph"] = GRAPH_STRATEGY  # marks results that come from the graph

    @property
    def relation(self) -> str:
        """The label of the last hop: how this tool relates to the node before it."""
        return self.path[-2]


@dataclass
class _TenantGraph:
    """One tenant's adjacency, each list already in fan-out order (see the module docstring)."""

    links: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # tool -> [(label, tool)]
    domains: dict[str, list[str]] = field(default_factory=dict)  # tool -> [domain node]
    members: dict[str, list[str]] = field(default_factory=dict)  # domain node -> [tool]


def _tenant_graph(links: Mapping[str, set[tuple[int, str, str]]], memberships: Mapping[str, set[str]]) -> _TenantGraph:
    members: defaultdict[str, list[str]] = defaultdict(list)
    for tool, tool_domains in memberships.items():
        for domain in tool_domains:
            members[domain].append(tool)
    return _TenantGraph(
        # (rank, label, tool): forward walks (rank 0) before reverse ones (rank 1).
        links={tool: [(label, other) for _, label, other in sorted(steps)] for tool, steps in links.items()},
        domains={
            tool: sorted(tool_domains, key=lambda d: (len(members[d]), d))
            for tool, tool_domains in memberships.items()
        },
        members={
            domain: sorted(tools, key=lambda t: (len(memberships[t]), t)) for domain, tools in members.items()
        },
    )


# (-score, depth, domain hops, seed index, kind, node, path): heap order is the result order.
_Entry = tuple[float, int, int, int, int, str, tuple[str, ...]]


class ToolGraph:
    """The edge table as per-tenant adjacency lists, for bounded expansion at query time."""

    def __init__(self, tenants: Mapping[str, _TenantGraph]) -> None:
        self._tenants = dict(tenants)
        self._tenant_of = {
            tool: tenant for tenant, graph in self._tenants.items() for tool in (*graph.links, *graph.domains)
        }

    @classmethod
    def from_edges(cls, edges: pd.DataFrame) -> ToolGraph:
        links: defaultdict[str, defaultdict[str, set[tuple[int, str, str]]]] = defaultdict(lambda: defaultdict(set))
        memberships: defaultdict[str, defaultdict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        owner: dict[str, str] = {}
        for source, target, relation, tenant in _edge_rows(edges):
            for tool in (source,) if relation == IN_DOMAIN else (source, target):
                # A tool under two tenants would let a walk cross from one to the other.
                if owner.setdefault(tool, tenant) != tenant:
                    raise ValueError(f"tool {tool!r} appears under tenants {owner[tool]!r} and {tenant!r}")
            if relation == IN_DOMAIN:
                memberships[tenant][source].add(target)
            else:
                reverse = reverse_label(relation)
                links[tenant][source].add((0, relation, target))
                links[tenant][target].add((0 if reverse == relation else 1, reverse, source))
        tenants = {tenant: _tenant_graph(links[tenant], memberships[tenant]) for tenant in {*links, *memberships}}
        return cls(tenants)

    @classmethod
    def load(cls, path: str | Path) -> ToolGraph:
        """Read an edge table written by ``save_edges`` (the ``knowledge_graph`` asset)."""
        return cls.from_edges(pd.read_parquet(path))

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._tenant_of

    @property
    def tenants(self) -> list[str]:
        return sorted(self._tenants)

    def expand(
        self,
        seeds: Sequence[tuple[str, float]],
        *,
        tenant_id: str | None,
        max_depth: int = 2,
        max_nodes: int = 50,
        decay: float = 0.5,
        relations: Collection[str] | None = None,
        max_fanout: int = 50,
    ) -> list[GraphHit]:
        """Tools related to ``seeds`` (``(doc_id, score)``, best first), best first; seeds excluded.

        ``relations`` limits the labels walked (``None``: all; ``same_domain`` allows domain
        walks). Seeds unknown to the graph, or of a tenant other than ``tenant_id``, add nothing.
        """
        _check_arguments(seeds, max_depth, max_nodes, decay, max_fanout)
        allowed = None if relations is None else frozenset(relations)
        seed_ids = {doc_id for doc_id, _ in seeds}
        seed_tenants: list[str | None] = []
        heap: list[_Entry] = []
        for index, (doc_id, score) in enumerate(seeds):
            tenant = self._tenant_of.get(doc_id)
            if tenant_id is not None and tenant != tenant_id:
                tenant = None
            seed_tenants.append(tenant)
            if tenant is not None:
                heap.append((-score, 0, 0, index, _TOOL, doc_id, (doc_id,)))
        heapq.heapify(heap)

        hits: list[GraphHit] = []
        found: set[str] = set()
        # (tenant, kind, node) -> the smallest depth it was expanded at. Entries pop best-first,
        # so a later pop at the same or a greater depth can reach nothing new.
        expanded: dict[tuple[str, int, str], int] = {}

        def worth_pushing(tenant: str, kind: int, node: str, depth: int) -> bool:
            if kind == _TOOL and node not in found and node not in seed_ids:
                return True
            return depth < max_depth and expanded.get((tenant, kind, node), max_depth + 1) > depth

        while heap and max_nodes > 0:
            neg_score, depth, hops, index, kind, node, path = heapq.heappop(heap)
            tenant = seed_tenants[index]
            assert tenant is not None  # only seeds with a tenant were pushed
            if kind == _TOOL and node not in found and node not in seed_ids:
                found.add(node)
                hit = GraphHit(
                    doc_id=node, score=-neg_score, depth=depth, via=seeds[index][0], path=list(path), tenant_id=tenant
                )
                hits.append(hit)
                if len(hits) == max_nodes:
                    break
            key = (tenant, kind, node)
            if depth >= max_depth or expanded.get(key, max_depth + 1) <= depth:
                continue
            expanded[key] = depth
            score = seeds[index][1] * decay ** (depth + 1)
            steps = self._steps(self._tenants[tenant], kind, node, allowed, room=max_depth - depth)
            for label, next_kind, neighbour in steps[:max_fanout]:
                if worth_pushing(tenant, next_kind, neighbour, depth + 1):
                    next_hops = hops + (next_kind == _DOMAIN)
                    entry = (-score, depth + 1, next_hops, index, next_kind, neighbour, (*path, label, neighbour))
                    heapq.heappush(heap, entry)
        return hits

    @staticmethod
    def _steps(
        graph: _TenantGraph, kind: int, node: str, allowed: frozenset[str] | None, room: int
    ) -> list[tuple[str, int, str]]:
        """A node's neighbours in fan-out order, as (label, kind, node); ``room`` is depth left."""
        if kind == _DOMAIN:
            return [(SAME_DOMAIN, _TOOL, tool) for tool in graph.members.get(node, ())]
        links = graph.links.get(node, ())
        steps = [(label, _TOOL, tool) for label, tool in links if allowed is None or label in allowed]
        # A domain node is only worth entering when a tool beyond it is still within reach.
        if room >= 2 and (allowed is None or SAME_DOMAIN in allowed):
            steps.extend((IN_DOMAIN, _DOMAIN, domain) for domain in graph.domains.get(node, ()))
        return steps


def _check_arguments(
    seeds: Sequence[tuple[str, float]], max_depth: int, max_nodes: int, decay: float, max_fanout: int
) -> None:
    if max_depth < 0 or max_nodes < 0:
        raise ValueError(f"max_depth and max_nodes must be >= 0, got {max_depth} and {max_nodes}")
    if max_fanout < 1:
        raise ValueError(f"max_fanout must be >= 1, got {max_fanout}")
    # Best-first order and early stopping rely on scores never growing along a walk.
    if not 0 < decay <= 1:
        raise ValueError(f"decay must be in (0, 1], got {decay}")
    bad = [(doc_id, score) for doc_id, score in seeds if not math.isfinite(score) or score < 0]
    if bad:
        raise ValueError(f"seed scores must be finite and >= 0, got {bad[:3]}")

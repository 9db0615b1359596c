"""Query-time graph expansion: a bounded, best-first walk of the tool graph from the top hits.

The edge table comes from ``core.index.graph`` (the ``knowledge_graph`` asset); ``ToolGraph``
holds it as per-tenant adjacency lists, and ``expand_candidates`` is the retriever's stage that
adds the tools a walk finds to the fused candidates.

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
Tenants never share a node (see ``core.index.graph``), so a walk stays inside the tenant of the
seed it starts from. ``expand(tenant_id="a")`` also ignores seeds of other tenants;
``tenant_id=None`` (a single-tenant catalog, or a caller that is not tenant-scoped) walks each
seed within its own tenant. Ids live in a tenant's namespace: where two tenants hold a seed's id,
the seed's own tenant (``seed_tenants``) says whose tool it is.

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
import math
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict

from retrieval_assets.core.index.graph import IN_DOMAIN, SAME_DOMAIN, edge_rows
from retrieval_assets.core.models import StoreHit, chunk_document, document_key
from retrieval_assets.core.retrieval.fusion import min_max
from retrieval_assets.core.retrieval.plan import Candidate, SearchPlan
from retrieval_assets.core.settings import GraphSettings
from retrieval_assets.core.stores.base import LexicalStore
from retrieval_assets.core.stores.filters import MetadataFilter

GRAPH_STRATEGY: Final = "graph"
SYMMETRIC_RELATIONS = frozenset({"compatible_with", SAME_DOMAIN})
_INVERSE_RELATIONS = {"requires": "required_by", "required_by": "requires"}

# Heap entries and visited keys tell tools from domain nodes by kind, so a tool id that looks
# like a domain node name ("topic:X") can never be confused with one.
_TOOL, _DOMAIN = 0, 1


def reverse_label(relation: str) -> str:
    """The label of ``relation`` walked from target to source."""
    if relation in SYMMETRIC_RELATIONS:
        return relation
    return _INVERSE_RELATIONS.get(relation, f"reverse_{relation}")


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
        # Tool id -> the tenants whose graph has it (two tenants may hold the same id).
        self._tenants_of: dict[str, set[str]] = {}
        for tenant, graph in self._tenants.items():
            for tool in (*graph.links, *graph.domains):
                self._tenants_of.setdefault(tool, set()).add(tenant)

    @classmethod
    def from_edges(cls, edges: pd.DataFrame) -> ToolGraph:
        """Per-tenant adjacency: an id two tenants hold is two tools, one in each tenant's graph."""
        links: defaultdict[str, defaultdict[str, set[tuple[int, str, str]]]] = defaultdict(lambda: defaultdict(set))
        memberships: defaultdict[str, defaultdict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        for source, target, relation, tenant in edge_rows(edges):
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
        return doc_id in self._tenants_of

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
        seed_tenants: Sequence[str | None] | None = None,
    ) -> list[GraphHit]:
        """Tools related to ``seeds`` (``(doc_id, score)``, best first), best first; seeds excluded.

        ``relations`` limits the labels walked (``None``: all; ``same_domain`` allows domain
        walks). Seeds unknown to the graph, or of a tenant other than ``tenant_id``, add nothing.
        ``seed_tenants`` (one per seed, None: unknown) names each seed's tenant; without it a seed
        whose id several tenants hold is walked only within ``tenant_id``.
        """
        _check_arguments(seeds, max_depth, max_nodes, decay, max_fanout)
        if seed_tenants is not None and len(seed_tenants) != len(seeds):
            raise ValueError(f"{len(seed_tenants)} seed tenants for {len(seeds)} seeds")
        allowed = None if relations is None else frozenset(relations)
        walk_tenants: list[str | None] = []
        heap: list[_Entry] = []
        for index, (doc_id, score) in enumerate(seeds):
            tenant = self._seed_tenant(doc_id, seed_tenants[index] if seed_tenants is not None else None, tenant_id)
            walk_tenants.append(tenant)
            if tenant is not None:
                heap.append((-score, 0, 0, index, _TOOL, doc_id, (doc_id,)))
        heapq.heapify(heap)
        # Seeds and found tools as (tenant, id), two tenants may hold the same id; a seed of no
        # known tenant is no hit in any.
        seed_ids = {(t, doc_id) for t, (doc_id, _) in zip(walk_tenants, seeds, strict=True) if t is not None}
        loose_ids = {doc_id for t, (doc_id, _) in zip(walk_tenants, seeds, strict=True) if t is None}
        hits: list[GraphHit] = []
        found: set[tuple[str, str]] = set()

        def is_new(tenant: str, node: str) -> bool:
            return (tenant, node) not in found and (tenant, node) not in seed_ids and node not in loose_ids

        # (tenant, kind, node) -> the smallest depth it was expanded at. Entries pop best-first,
        # so a later pop at the same or a greater depth can reach nothing new.
        expanded: dict[tuple[str, int, str], int] = {}

        def worth_pushing(tenant: str, kind: int, node: str, depth: int) -> bool:
            if kind == _TOOL and is_new(tenant, node):
                return True
            return depth < max_depth and expanded.get((tenant, kind, node), max_depth + 1) > depth

        while heap and max_nodes > 0:
            neg_score, depth, hops, index, kind, node, path = heapq.heappop(heap)
            tenant = walk_tenants[index]
            assert tenant is not None  # only seeds with a tenant were pushed
            if kind == _TOOL and is_new(tenant, node):
                found.add((tenant, node))
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

    def _seed_tenant(self, doc_id: str, own: str | None, tenant_id: str | None) -> str | None:
        """The tenant whose graph a seed is walked in: its own (else ``tenant_id``, else the one
        tenant holding its id); None when that graph lacks it or it is outside ``tenant_id``."""
        holders = self._tenants_of.get(doc_id, set())
        if own is None:
            own = tenant_id if tenant_id is not None else next(iter(holders)) if len(holders) == 1 else None
        if own is None or own not in holders or (tenant_id is not None and own != tenant_id):
            return None
        return own

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


def _fetch_by_tenant(
    lexical: LexicalStore, found: Sequence[GraphHit], filters: Sequence[MetadataFilter]
) -> dict[tuple[str, str], StoreHit]:
    """The first chunk of each found tool, as (tenant, id) -> hit: looked up per tenant, since
    two tenants may hold the same id; ``filters`` (the request's, its tenants among them) apply."""
    by_tenant: dict[str, list[str]] = {}
    for g in found:
        by_tenant.setdefault(g.tenant_id, []).append(g.doc_id)
    payloads: dict[tuple[str, str], StoreHit] = {}
    for tenant, doc_ids in by_tenant.items():
        scoped = [*filters, MetadataFilter(field="tenant_id", any_of=[tenant])]
        for hit in lexical.fetch_documents(doc_ids, scoped):
            payloads[tenant, hit.doc_id] = hit
    return payloads


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


def expand_candidates(
    candidates: list[Candidate],
    plan: SearchPlan,
    graph: ToolGraph,
    lexical: LexicalStore,
    settings: GraphSettings,
    *,
    collapse_chunks: bool,
) -> list[Candidate]:
    """The retriever's graph stage: add related tools from a bounded walk; they obey the same
    filters and exclusions. Seeds are in scope already, and a walk stays within its seed's tenant."""
    if not candidates:
        return candidates
    # Fused scores may be negative (z-score, cosine): walk from [0, 1] scores, same order.
    scaled = min_max([c.score for c in candidates]).tolist()
    normalised = {c.key: value for c, value in zip(candidates, scaled, strict=True)}
    heads = candidates[: settings.seeds]
    seeds = [(c.hit.doc_id, normalised[c.key]) for c in heads]
    # Documents by (tenant-qualified) key: two tenants may hold the same id. A version built
    # before chunk ids named their tenant names its documents by id alone (``chunk_document``).
    keys = [(chunk_document(c.hit.chunk_id, c.hit.doc_id), c.hit.doc_id) for c in candidates]
    present = {key for key, doc_id in keys if key != doc_id}
    legacy = {doc_id for key, doc_id in keys if key == doc_id}
    found = graph.expand(
        seeds,
        tenant_id=plan.only_tenant,
        max_depth=settings.max_depth,
        max_nodes=settings.max_nodes,
        decay=settings.decay,
        seed_tenants=[c.hit.payload.get("tenant_id") for c in heads],
    )
    found = [
        g
        for g in found
        if document_key(g.tenant_id, g.doc_id) not in present
        and g.doc_id not in legacy
        and g.doc_id not in plan.excluded
    ]
    payloads = _fetch_by_tenant(lexical, found, plan.filters)
    added: list[Candidate] = []
    for g in found:
        hit = payloads.get((g.tenant_id, g.doc_id))
        if hit is None:
            continue
        key = chunk_document(hit.chunk_id, hit.doc_id) if collapse_chunks else hit.chunk_id
        added.append(
            Candidate(
                key=key,
                hit=hit,
                score=g.score,
                strategy_scores={"graph": (g.score, len(added) + 1)},
                graph_path=list(g.path),
            )
        )
    plan.trace.diagnostics["graph"] = {"seeds": [s for s, _ in seeds], "added": [c.hit.doc_id for c in added]}
    if not added:
        return candidates
    plan.trace.diagnostics["graph"]["scores"] = "min-max normalised so graph hits share the scale"
    return sorted([c.rescored(normalised[c.key]) for c in candidates] + added, key=lambda c: -c.score)

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
seed within its own tenant.

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
from retrieval_assets.core.retrieval.fusion import min_max
from retrieval_assets.core.retrieval.plan import Candidate, SearchPlan
from retrieval_assets.core.settings import GraphSettings
from retrieval_assets.core.stores.base import LexicalStore

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
        self._tenant_of = {
            tool: tenant for tenant, graph in self._tenants.items() for tool in (*graph.links, *graph.domains)
        }

    @classmethod
    def from_edges(cls, edges: pd.DataFrame) -> ToolGraph:
        links: defaultdict[str, defaultdict[str, set[tuple[int, str, str]]]] = defaultdict(lambda: defaultdict(set))
        memberships: defaultdict[str, defaultdict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        owner: dict[str, str] = {}
        for source, target, relation, tenant in edge_rows(edges):
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
    seeds = [(c.hit.doc_id, normalised[c.key]) for c in candidates[: settings.seeds]]
    present = {c.hit.doc_id for c in candidates}
    found = graph.expand(
        seeds,
        tenant_id=plan.only_tenant,
        max_depth=settings.max_depth,
        max_nodes=settings.max_nodes,
        decay=settings.decay,
    )
    found = [g for g in found if g.doc_id not in present and g.doc_id not in plan.excluded]
    fetched = lexical.fetch_documents([g.doc_id for g in found], plan.filters)
    payloads = {hit.doc_id: hit for hit in fetched}
    added = [
        Candidate(
            key=g.doc_id if collapse_chunks else payloads[g.doc_id].chunk_id,
            hit=payloads[g.doc_id],
            score=g.score,
            strategy_scores={"graph": (g.score, rank)},
            graph_path=list(g.path),
        )
        for rank, g in enumerate((g for g in found if g.doc_id in payloads), start=1)
    ]
    plan.trace.diagnostics["graph"] = {"seeds": [s for s, _ in seeds], "added": [c.key for c in added]}
    if not added:
        return candidates
    plan.trace.diagnostics["graph"]["scores"] = "min-max normalised so graph hits share the scale"
    return sorted([c.rescored(normalised[c.key]) for c in candidates] + added, key=lambda c: -c.score)

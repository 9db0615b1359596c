"""Whose documents a gold set is judged among: its catalog's tenants, never another writer's.

A gold set belongs to a catalog, and the catalog's documents belong to its tenants: the main
catalog's tenant, each extra source's (each its own tenant), the tenants rows of a source name
themselves, and the tenants generated gold drew its queries from. The evaluation searches each gold
query scoped to those tenants (``SearchRequest.tenants``), so documents that other tenants post to
the inbox cannot enter its result lists, and cannot move the gate's figures.

A tenant that reached the index only by posting to the inbox is not one of the catalog's, even
when it posted a document under an id the gold judges (an id the catalog lacks): that post cannot
pull its tenant into the scope.

``posted_since`` counts the inbox entries a candidate took in since the promoted version, per
tenant and sender, so a refusal can tell a tenant that its own posts moved its own gold figures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GoldScope:
    """The tenants one gold set is judged among, and how each came to be in it."""

    tenants: tuple[str, ...]  # sorted
    # tenant -> why it is in the scope ("catalog source", "judged documents", "generated gold")
    why: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The scope in words: "tenant default" or "tenants a, b"."""
        return ("tenant " if len(self.tenants) == 1 else "tenants ") + ", ".join(self.tenants)


def gold_scope(
    catalog_tenants: Iterable[str],
    judged_tenants: Mapping[str, str] | None = None,
    posted: Mapping[str, Collection[str]] | None = None,
    generated_tenants: Mapping[str, str] | None = None,
) -> GoldScope:
    """The scope of a gold set of a catalog whose sources are ``catalog_tenants``'s.

    ``judged_tenants``: the tenant of each judged document found in the candidate (doc id ->
    tenant), for catalogs whose rows name their own tenants; ``generated_tenants``: generated
    gold's document of each query -> its tenant (``GeneratedGold.tenant_of`` keyed by document);
    ``posted``: doc id -> the tenants that posted it through the inbox. A document's tenant joins
    the scope unless that tenant is not a catalog source's and the document came from its posts."""
    why: dict[str, str] = {tenant: "catalog source" for tenant in catalog_tenants}
    posted = posted or {}
    for reason, tenants_of in (("judged documents", judged_tenants), ("generated gold", generated_tenants)):
        for doc_id, tenant in sorted((tenants_of or {}).items()):
            if tenant in why or tenant in posted.get(doc_id, ()):
                continue
            why[tenant] = reason
    return GoldScope(tuple(sorted(why)), why)


@dataclass(frozen=True)
class Post:
    """One inbox entry as the evaluation sees it."""

    tenant_id: str
    sender: str | None
    operation: str  # upsert or delete
    version: str | None  # the version that took it in; None while pending
    taken_at: str | None  # ISO 8601 UTC; None while pending


def posted_since(
    posts: Iterable[Post],
    *,
    promoted: str | None,
    promoted_sealed_at: str | None,
    candidate: str,
    candidate_sealed_at: str,
) -> Counter[tuple[str, str | None, str]]:
    """(tenant, sender, operation) -> entries in the candidate that the promoted version did not
    have: taken in by the candidate, or by versions sealed (and so taking entries in) after the
    promoted one and before the candidate (candidates refused since), never by the promoted version
    itself; with nothing promoted, every entry taken in up to the candidate. Pending entries are in
    no version yet."""
    counted: Counter[tuple[str, str | None, str]] = Counter()
    for post in posts:
        if post.version is None or post.version == promoted:
            continue
        taken = post.taken_at or ""
        if post.version != candidate and taken >= candidate_sealed_at:
            continue  # taken in by a build after the candidate
        if promoted_sealed_at is not None and taken <= promoted_sealed_at:
            continue
        counted[(post.tenant_id, post.sender, post.operation)] += 1
    return counted


def posted_by(counted: Mapping[tuple[str, str | None, str], int], tenants: Collection[str]) -> int:
    """Entries of ``posted_since`` that ``tenants`` posted."""
    return sum(n for (tenant, _, _), n in counted.items() if tenant in tenants)

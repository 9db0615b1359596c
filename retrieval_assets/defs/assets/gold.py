"""The gold queries the evaluation judges with, for every catalog (``core/evaluation/gold``).

A catalog's gold is, first match wins: its own (BEIR qrels: ``CatalogResource.gold()``), a curated
file (``curated_gold_path``, else ``gold/<catalog key>/curated.csv`` under the storage home when it
exists: what ``retrieval-assets gold add`` writes), or known-item gold generated from its cleaned
documents. Generated gold is drawn once per catalog and frozen (``GoldStore``), so every later
version is judged on the same queries; queries whose documents were deleted are retired (not when
more than ``max_retired_share`` of them lost their documents in one build: that is what a broken
build looks like, and the gate has to see it), and a new set is drawn only when ``gold_queries``
runs with ``redraw`` (``gold_redraw_job``, ``retrieval-assets gold redraw``). With curated gold
the generated set is kept too and judged beside it: the gate refuses a fall on either. When the multi_query LLM endpoint
is set (``RETRIEVAL_LLM_BASE_URL``), a draw asks it for natural questions; the queries it fails on
keep their known-item form, and the warnings say so.

Gold belongs to its catalog, and is judged among its catalog's tenants only (``scope_of``,
``core.evaluation.scope``); a draw leaves out documents that other tenants posted to the inbox.
"""


from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from dagster import AssetExecutionContext, AssetIn, Config, MaterializeResult, MetadataValue, asset
from pydantic import Field

from retrieval_assets.core.evaluation.gold.curated import load_curated
from retrieval_assets.core.evaluation.gold.known_item import generate_known_item_gold
from retrieval_assets.core.evaluation.gold.llm import with_llm_questions
from retrieval_assets.core.evaluation.gold.model import GeneratedGold
from retrieval_assets.core.evaluation.scope import GoldScope, gold_scope
from retrieval_assets.core.evaluation.tuning import gold_fingerprint
from retrieval_assets.core.index.versions import IndexVersion
from retrieval_assets.core.ingest.catalog import GoldSet
from retrieval_assets.core.stores.tantivy.store import TantivyLexicalStore
from retrieval_assets.defs.io_manager import StoredTable
from retrieval_assets.defs.resources import CatalogResource, IndexStorageResource, SearchResource

GROUP = "evaluation"
CURATED_FILE = "curated.csv"
DEFAULT_SEED = 13
DEFAULT_SIZE = 300
DOCUMENT_COLUMNS = ["doc_id", "title", "text", "tenant_id", "metadata"]
LLM_TIMEOUT_S = 30.0
MAX_RETIRED_SHARE = 0.2


def curated_gold_file(catalog: CatalogResource, storage: IndexStorageResource) -> Path:
    """The catalog's curated gold file: ``curated_gold_path``, else one beside its generated gold."""
    if catalog.curated_gold_path:
        return Path(catalog.curated_gold_path).expanduser()
    return storage.gold_dir / catalog.gold_key() / CURATED_FILE


@dataclass(frozen=True)
class CatalogGold:
    """The gold the gate judges a catalog's versions with, and the generated gold measured beside it."""

    gold: GoldSet | None
    kind: str | None  # curated, known_item or llm; None without gold
    source: str  # where it comes from, for a person
    generated: GeneratedGold | None  # the catalog's frozen generated gold (gating when kind is generated)

    @property
    def fingerprint(self) -> str | None:
        return gold_fingerprint(self.gold) if self.gold is not None else None

    @property
    def beside(self) -> GeneratedGold | None:
        """Generated gold judged beside curated gold (a fall on either refuses the candidate)."""
        return self.generated if self.kind == "curated" and self.generated is not None else None


def own_gold(catalog: CatalogResource, storage: IndexStorageResource) -> tuple[GoldSet, str, bool] | None:
    """The catalog's judged gold, where it comes from, and whether it is the catalog's own (BEIR)."""
    gold = catalog.gold()
    if gold is not None:
        return gold, f"BEIR qrels in {catalog.gold_path or catalog.path}", True
    path = curated_gold_file(catalog, storage)
    if catalog.curated_gold_path or path.exists():
        return load_curated(path), f"curated file {path}", False
    return None


def catalog_gold(catalog: CatalogResource, storage: IndexStorageResource) -> CatalogGold:
    own = own_gold(catalog, storage)
    if own is not None and own[2]:
        return CatalogGold(own[0], "curated", own[1], None)
    generated = storage.gold_store().current(catalog.gold_key())
    if own is not None:
        return CatalogGold(own[0], "curated", own[1], generated)
    if generated is not None:
        where = storage.gold_store().path(catalog.gold_key(), generated.fingerprint)
        return CatalogGold(generated.as_gold_set(), generated.kind, f"generated, frozen in {where}", generated)
    return CatalogGold(None, None, "none", None)


def catalog_tenants(catalog: CatalogResource) -> list[str]:
    """The tenants of the catalog's sources: the main catalog's and each extra source's (the inbox,
    whose posts carry their own tenants, is not one)."""
    return sorted({source.tenant_id for source in catalog.sources().values() if source.format != "inbox"})


def _judged_tenants(version: IndexVersion, doc_ids: list[str]) -> dict[str, str]:
    """The tenant of each of ``doc_ids`` that the version's lexical index holds ({} without one)."""
    if not doc_ids or not version.layout.lexical.exists():
        return {}
    store = TantivyLexicalStore.open(version.layout.lexical)
    try:
        return {hit.doc_id: str(hit.payload.get("tenant_id", "default")) for hit in store.fetch_documents(doc_ids)}
    finally:
        store.close()


def _inbox_posters(catalog: CatalogResource) -> dict[str, set[str]]:
    """doc id -> the tenants that posted it through the document inbox."""
    inbox = catalog.inbox()
    posters: dict[str, set[str]] = {}
    for entry in inbox.snapshot() if inbox is not None else []:
        posters.setdefault(entry.doc_id, set()).add(entry.tenant_id)
    return posters


def scope_of(
    catalog: CatalogResource, version: IndexVersion, gold: GoldSet, generated: GeneratedGold | None = None
) -> GoldScope:
    """The tenants ``gold`` (of ``catalog``; ``generated`` when it is the catalog's generated gold) is
    judged among in ``version``: the catalog's, never a tenant known only from its inbox posts
    (``core.evaluation.scope``)."""
    judged = sorted({doc for relevant in gold.qrels.values() for doc in relevant})
    drawn = (
        {generated.query_doc[qid]: generated.tenant_of[qid] for qid in generated.queries if qid in generated.tenant_of}
        if generated is not None
        else {}
    )
    return gold_scope(catalog_tenants(catalog), _judged_tenants(version, judged), _inbox_posters(catalog), drawn)


def retired_from(gold: GeneratedGold) -> tuple[set[str], set[str]]:
    """The gold sets (16-character fingerprints) ``gold`` came from by retiring queries only, since
    its last draw, and the queries whose judgements were pruned on the way: on the other queries
    still active, per-query scores measured on those sets compare with scores on ``gold``."""
    ancestors: set[str] = set()
    pruned: set[str] = set()
    current = gold.fingerprint
    for change in reversed(gold.history):
        if change.action != "retire" or change.to_fingerprint != current:
            break
        ancestors.add(change.from_fingerprint[:16])
        pruned |= set(change.pruned)
        current = change.from_fingerprint
    return ancestors, pruned


def age_days(gold: GeneratedGold) -> float:
    created = datetime.fromisoformat(gold.created_at)
    return round((datetime.now(UTC) - created).total_seconds() / 86400, 2)


def describe(gold: GeneratedGold) -> str:
    return f"{gold.kind} gold, {len(gold.queries)} queries, fingerprint {gold.fingerprint[:16]}"


def _judged_metadata(gold: GoldSet, source: str) -> dict[str, Any]:
    return {
        "kind": "curated",
        "source": source,
        "method": "judged by a person",
        "size": len(gold.queries),
        "fingerprint": gold_fingerprint(gold),
    }


class GoldConfig(Config):
    """How generated gold is drawn, and whether this run replaces the frozen set."""

    redraw: bool = Field(
        default=False,
        description="Draw a new generated gold set in place of the frozen one (whose file stays); the only way "
        "the generated gold changes besides retiring queries of deleted documents.",
    )
    seed: int = Field(default=DEFAULT_SEED, description="The seed of a new draw.")
    size: int = Field(
        default=DEFAULT_SIZE, ge=1, description="Queries of a new draw (at least 200 where the corpus allows)."
    )
    max_retired_share: float = Field(
        default=MAX_RETIRED_SHARE,
        ge=0,
        le=1,
        description="The largest share of the gold queries retired in one build because their documents are "
        "gone; when more are gone they stay, so the gate sees the loss (half the documents dropped by a broken "
        "build must not retire half the gold).",
    )


def _catalog_documents(frame: pd.DataFrame, catalog: CatalogResource) -> pd.DataFrame:
    """``frame`` without the documents that tenants other than the catalog's sources' posted to the
    inbox: gold belongs to the catalog, and another writer's posts must not become its queries."""
    own = set(catalog_tenants(catalog))
    posters = _inbox_posters(catalog)
    foreign = {(doc_id, tenant) for doc_id, tenants in posters.items() for tenant in tenants if tenant not in own}
    if not foreign:
        return frame
    keys = zip(frame["doc_id"].astype(str), frame["tenant_id"].astype(str), strict=True)
    return frame[[key not in foreign for key in keys]]


def _draw(
    context: AssetExecutionContext,
    config: GoldConfig,
    search: SearchResource,
    documents: StoredTable,
    catalog: CatalogResource,
) -> GeneratedGold:
    frame = documents.read()
    kept = _catalog_documents(frame, catalog)
    if len(kept) < len(frame):
        context.log.info(f"{len(frame) - len(kept)} documents other tenants posted to the inbox are not drawn from")
    frame = kept
    gold = generate_known_item_gold(frame, seed=config.seed, size=config.size)
    base_url = search.multi_query.llm_base_url
    if not base_url:
        return gold
    model = search.multi_query.llm_model
    context.log.info(f"asking {model} at {base_url} for questions about {len(gold.queries)} documents")
    try:
        asked = with_llm_questions(
            gold, frame, base_url, model=model, api_key=search.llm_api_key, timeout=LLM_TIMEOUT_S
        )
    except Exception as exc:  # any failure of the optional LLM step falls back to known-item gold
        note = f"LLM questions failed ({type(exc).__name__}: {exc}): known-item queries kept"
        context.log.warning(note)
        return gold.model_copy(update={"warnings": [*gold.warnings, note]})
    failed = asked.stats.get("llm_failures", 0)
    if failed:
        context.log.warning(f"{failed} LLM questions failed: those documents keep their known-item query")
    return asked


@asset(
    group_name=GROUP,
    kinds={"python"},
    ins={"cleaned_documents": AssetIn(metadata={"deferred": True, "columns": DOCUMENT_COLUMNS})},
)
def gold_queries(
    context: AssetExecutionContext,
    config: GoldConfig,
    catalog: CatalogResource,
    storage: IndexStorageResource,
    search: SearchResource,
    cleaned_documents: StoredTable,
) -> MaterializeResult:
    """The catalog's gold queries: its own (BEIR qrels), a curated file, or known-item queries
    generated from its documents once, frozen, and reused by every evaluation (queries of deleted
    documents retired, unless a build lost too many at once); generated gold is judged beside
    curated gold."""
    own = own_gold(catalog, storage)
    if own is not None and own[2]:
        if config.redraw:
            context.log.warning("the catalog has gold of its own (BEIR qrels): there is no generated gold to redraw")
        return MaterializeResult(metadata=_judged_metadata(*own[:2]))
    store, key = storage.gold_store(), catalog.gold_key()
    current = store.current(key)
    warnings: list[str] = []
    drawn = config.redraw or current is None
    if config.redraw or current is None:
        generated = _draw(context, config, search, cleaned_documents, catalog)
        if not generated.queries:
            note = "; ".join(generated.warnings) or "no document could make a query"
            context.log.warning(f"no generated gold: {note}")
            judged: dict[str, Any] = _judged_metadata(*own[:2]) if own is not None else {"kind": "none", "size": 0}
            return MaterializeResult(metadata={**judged, "warnings": note, "catalog_key": key})
        path = store.redraw(key, generated) if current is not None else store.freeze(key, generated)
        generated = store.load(path)
        context.log.info(f"drew {describe(generated)} for catalog {key}" + (" (redraw)" if current else ""))
    else:
        existing = set(cleaned_documents.column("doc_id").astype(str))
        lost = [qid for qid, judged_docs in current.qrels.items() if not existing.intersection(judged_docs)]
        if lost and len(lost) > config.max_retired_share * len(current.queries):
            note = (
                f"{len(lost)} of {len(current.queries)} gold queries lost all their documents in one build: not "
                f"retired (more than {config.max_retired_share:.0%}: a broken build looks like this, and the gate "
                "must see it); if the documents were deleted on purpose, redraw the gold"
            )
            context.log.warning(note)
            warnings.append(note)
            generated = current
        else:
            generated = store.retire_missing(key, existing)
            if lost:
                context.log.info(f"retired {len(lost)} gold queries whose documents were deleted")
    metadata: dict[str, Any] = {}
    if own is not None:
        metadata |= {
            **_judged_metadata(*own[:2]),
            "generated_kind": generated.kind,
            "generated_size": len(generated.queries),
            "generated_fingerprint": generated.fingerprint[:16],
        }
    else:
        context.log.info(
            f"the catalog has no gold of its own: {describe(generated)} is used "
            "(add curated gold with `retrieval-assets gold add`)"
        )
        metadata |= {
            "kind": generated.kind,
            "source": f"generated, frozen in {store.path(key, generated.fingerprint)}",
            "method": generated.method,
            "size": len(generated.queries),
            "fingerprint": generated.fingerprint[:16],
        }
    sources = Counter(generated.query_source[qid] for qid in generated.queries)
    return MaterializeResult(
        metadata={
            **metadata,
            "catalog_key": key,
            "drawn": drawn,
            "age_days": MetadataValue.float(age_days(generated)),
            "query_sources": MetadataValue.json(dict(sorted(sources.items()))),
            "retired": len(generated.retired),
            "warnings": "\n".join([*warnings, *generated.warnings]) or "(none)",
        }
    )

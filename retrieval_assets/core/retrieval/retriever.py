"""Hybrid retrieval: every query-side capability, in one pipeline.

A query goes through these stages; each records what it did in ``result.diagnostics`` and
its time in ``result.timings_ms``:

1. control tags (``[EXCLUDE:a|b]``, ``[NO_RERANK]``, ``[REFINE]``) are parsed and stripped;
2. natural-language filters ("since 2019", "by Smith", "in ACL") become structured filters,
   combined with the caller's filters and tenant, and pushed into every backend;
3. a query that is, or names, a document id searches with that document ("more like this");
4. attached context (file names, metadata) adds ``format:`` tokens to the lexical query;
5. vocabulary neighbours expand the lexical query, on request or when results are few;
6. BM25, SPLADE and dense search run in parallel and are fused (RRF, min-max, z-score or
   similarity+RRF); reformulations (pseudo-relevance feedback, expansion, an LLM) are searched
   the same way and fused by RRF when multi-query is on;
7. a bounded walk of the tool graph adds related tools, filtered like everything else;
8. a cross-encoder reranks the head of the list.
"""

from __future__ import annotations

import copy
import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from retrieval_assets.core.embed.base import DenseEncoder, SparseEncoder
from retrieval_assets.core.embed.query_cores import encoding_alone
from retrieval_assets.core.models import RetrievalResult, SearchRequest, StoreHit, Strategy, chunk_document
from retrieval_assets.core.query.context_tokens import ContextTokenSettings, query_context_tokens
from retrieval_assets.core.query.control_tags import parse_control_tags
from retrieval_assets.core.query.nl_filters import NLFilterSettings, parse_nl_filters
from retrieval_assets.core.retrieval.expansion import VocabularyIndex
from retrieval_assets.core.retrieval.fusion import (
    blend_scores,
    document_rankings,
    fuse_rankings,
    reciprocal_rank_fusion,
)
from retrieval_assets.core.retrieval.graph_expansion import ToolGraph, expand_candidates
from retrieval_assets.core.retrieval.multi_query import LLMReformulator, feedback_terms
from retrieval_assets.core.retrieval.plan import Candidate, SearchPlan, SearchTrace, tenant_scope
from retrieval_assets.core.retrieval.rerank.base import Reranker
from retrieval_assets.core.retrieval.strategies import ENCODE_NOTE, Done, strategy_searches, timed
from retrieval_assets.core.settings import RetrievalSettings
from retrieval_assets.core.stores.base import DenseStore, LexicalStore, SparseStore
from retrieval_assets.core.stores.filters import MetadataFilter, parse_filters

logger = logging.getLogger(__name__)


# A token that may be a document id: explicit "doc:"/"id:" or letters/punctuation mixed with digits.
_ID_PREFIX = re.compile(r"^(?:doc|id):(?P<id>\S+)$", re.IGNORECASE)
_ID_LIKE = re.compile(r"^(?=.*\d)(?=.*[^\d]).+$")


class _InFlight:
    """How many searches a retriever and its configured views are running."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    @contextmanager
    def search(self) -> Iterator[None]:
        with self._lock:
            self.count += 1
        try:
            yield
        finally:
            with self._lock:
                self.count -= 1


class HybridRetriever:
    """Answers queries over one set of indexes; safe to share across threads."""

    def __init__(
        self,
        *,
        dense_encoder: DenseEncoder | None,
        sparse_encoder: SparseEncoder | None,
        dense_store: DenseStore | None,
        sparse_store: SparseStore | None,
        lexical_store: LexicalStore | None,
        settings: RetrievalSettings | None = None,
        vocabulary: VocabularyIndex | None = None,
        graph: ToolGraph | None = None,
        reranker: Reranker | None = None,
        reformulator: LLMReformulator | None = None,
        nl_filter_settings: NLFilterSettings | None = None,
        context_settings: ContextTokenSettings | None = None,
        known_venues: Callable[[frozenset[str] | None], frozenset[str]] | None = None,
        filterable_fields: Callable[[frozenset[str] | None], Collection[str]] | None = None,
    ) -> None:
        """``known_venues`` and ``filterable_fields`` give, for a tenant scope (None: every
        tenant), the venues natural-language filters match and the fields filters may name:
        a query is parsed against its own tenants' documents only. Without ``known_venues`` the
        parser knows ``nl_filter_settings.known_venues``; without ``filterable_fields`` every
        field is assumed filterable."""
        self.settings = settings or RetrievalSettings()
        self._dense_encoder = dense_encoder
        self._lexical = lexical_store
        self._vocabulary = vocabulary
        self._graph = graph
        self._reranker = reranker
        self._reformulator = reformulator
        self._nl_settings = nl_filter_settings or self.settings.nl_filters
        self._context_settings = context_settings or self.settings.context_tokens
        self._known_venues = known_venues
        self._filterable_fields = filterable_fields
        # One Qdrant store may serve both dense and sparse search: close each store once.
        self._stores = list({id(s): s for s in (dense_store, sparse_store, lexical_store) if s is not None}.values())
        self._searches = strategy_searches(
            lexical_store=lexical_store,
            sparse_store=sparse_store,
            sparse_encoder=sparse_encoder,
            dense_store=dense_store,
            dense_encoder=dense_encoder,
        )
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(self._searches)), thread_name_prefix="retrieve")
        self._in_flight = _InFlight()  # shared with configured views, like the pool

    @property
    def available_strategies(self) -> list[Strategy]:
        return list(self._searches)

    @property
    def dense_encoder(self) -> DenseEncoder | None:
        """The query encoder as searches call it (behind its micro-batcher, when batching)."""
        return self._dense_encoder

    def search(
        self,
        query: str,
        top_k: int = 10,
        filters: Mapping[str, Any] | None = None,
        strategies: Sequence[Strategy] | None = None,
        **options: Any,
    ) -> RetrievalResult:
        """Shorthand for ``run(SearchRequest(...))``; ``options`` are the other request fields."""
        return self.run(
            SearchRequest(
                query=query,
                top_k=top_k,
                filters=dict(filters) if filters is not None else None,
                strategies=list(strategies) if strategies is not None else None,
                **options,
            )
        )

    def run(self, request: SearchRequest) -> RetrievalResult:
        with self._in_flight.search():
            return self._run(request)

    def _run(self, request: SearchRequest) -> RetrievalResult:
        trace = SearchTrace()
        started = time.perf_counter()
        plan, tags = self._plan(request, trace)
        wanted = plan.strategies
        candidates = self._retrieve_with_retries(plan, request)
        if self.settings.graph.enabled and self._graph is not None and self._lexical is not None:
            with trace.stage("graph"):
                candidates = expand_candidates(
                    candidates,
                    plan,
                    self._graph,
                    self._lexical,
                    self.settings.graph,
                    collapse_chunks=self.settings.collapse_chunks,
                )
        use_rerank = (self.settings.rerank.enabled if request.rerank is None else request.rerank) and not tags.no_rerank
        reranked = False
        if use_rerank and candidates:
            if self._reranker is None:
                raise ValueError("rerank was requested but no reranker is configured for this index")
            with trace.stage("rerank"):
                candidates = self._rerank(plan.query, candidates, trace)
            reranked = True
        trace.timings_ms["total_ms"] = (time.perf_counter() - started) * 1000
        logger.info("query %r: %s", request.query, trace.diagnostics)
        return RetrievalResult(
            query=request.query,
            hits=[c.scored_hit() for c in candidates[: request.top_k]],
            strategies=wanted,
            fusion=plan.fusion if len(wanted) > 1 else "none",
            reranked=reranked,
            refine=tags.refine,
            timings_ms=trace.timings_ms,
            diagnostics=trace.diagnostics,
        )

    @property
    def reranker(self) -> Reranker | None:
        return self._reranker

    def configured(self, settings: RetrievalSettings, reranker: Reranker | None = None) -> HybridRetriever:
        """The same indexes, models and threads answering with other settings (a learned
        configuration) and optionally another reranker; closing this retriever closes the view too."""
        view = copy.copy(self)
        view.settings = settings
        view._reranker = reranker or self._reranker
        return view

    def strategy_hits(
        self, request: SearchRequest
    ) -> tuple[dict[str, list[StoreHit]], Callable[[StoreHit], str], set[str]]:
        """What the first stage would fuse for ``request``, before fusion: each strategy's hits
        (``request.top_k`` deep, best first), the key hits collapse on, and the excluded ids.
        ``document_rankings`` over a prefix of these lists is exactly what a search with that
        candidate depth fuses, so a tuner can replay fusion settings without searching again."""
        plan, _ = self._plan(request, SearchTrace())
        plan.depth = request.top_k + len(plan.excluded)
        expand = self.settings.expansion.enabled if request.expand is None else request.expand
        terms = self._expansion_terms(plan.query, 1 if expand else 0, plan.tenants)
        return self._search_strategies(plan, plan.query, terms), self._collapse_key, plan.excluded

    def _plan(self, request: SearchRequest, trace: SearchTrace) -> tuple[SearchPlan, Any]:
        """Parse the query (tags, filters, tenant, more-like-this, context tokens) into a plan."""
        if not request.query or not request.query.strip():
            raise ValueError("query must be a non-empty string")
        wanted = list(request.strategies or self.settings.strategies)
        missing = [s for s in wanted if s not in self._searches]
        if missing:
            raise ValueError(
                f"strategies {', '.join(missing)} are not available; this index serves {', '.join(self._searches)}"
            )
        with trace.stage("parse"):
            tags = parse_control_tags(request.query)
            tenants = tenant_scope(request)
            semantic, filters = self._structured_query(tags.query, request, tenants, trace)
            excluded = set(tags.exclude_ids)
            semantic = self._more_like_this(semantic, filters, excluded, trace)
            tag_terms = query_context_tokens(request.context_files, request.context_metadata, self._context_settings)
        trace.diagnostics.update(
            query=semantic,
            excluded_ids=sorted(excluded),
            context_tokens=tag_terms,
            filters=[f.model_dump(exclude_none=True) for f in filters],
        )

        plan = SearchPlan(
            query=semantic,
            depth=max(request.top_k, self.settings.candidates_per_strategy) + len(excluded),
            filters=filters,
            tag_terms=tag_terms,
            excluded=excluded,
            strategies=wanted,
            fusion=request.fusion or self.settings.fusion.method,
            trace=trace,
            tenants=tenants,
        )
        return plan, tags

    # -- query understanding --------------------------------------------------------------------

    def _structured_query(
        self, query: str, request: SearchRequest, tenants: frozenset[str] | None, trace: SearchTrace
    ) -> tuple[str, list[MetadataFilter]]:
        """The semantic query left after NL filter phrases, and every filter that applies."""
        filters = parse_filters(request.filters)
        if tenants is not None:
            filters.append(MetadataFilter(field="tenant_id", any_of=sorted(tenants)))
        if not self.settings.natural_language_filters:
            return query, filters
        settings = self._nl_settings
        if self._known_venues is not None:
            settings = settings.model_copy(update={"known_venues": self._known_venues(tenants)})
        parsed = parse_nl_filters(query, settings)
        unsupported = (
            sorted(set(parsed.filters) - set(self._filterable_fields(tenants)))
            if self._filterable_fields is not None
            else []
        )
        if unsupported:
            # "in 2010" in a corpus without years is plain text: keep the whole query as typed.
            trace.diagnostics["nl_filters_ignored"] = {"phrases": parsed.phrases, "fields_not_in_index": unsupported}
            return query, filters
        trace.diagnostics["nl_filter_phrases"] = parsed.phrases
        if not parsed.query:
            raise ValueError(f"nothing is left to search in {query!r} once the filter phrases are taken out")
        return parsed.query, filters + parse_filters(parsed.filters)

    def _more_like_this(self, query: str, filters: list[MetadataFilter], excluded: set[str], trace: SearchTrace) -> str:
        """When the query is, or names, a document id, search with that document's title and text
        (plus the query's other words); the document itself is left out of the results."""
        if not self.settings.more_like_this or self._lexical is None:
            return query
        tokens = query.split()
        mentioned = [_mentioned_id(token) for token in tokens]
        found = self._lexical.fetch_documents(list(dict.fromkeys([query.strip(), *filter(None, mentioned)])), filters)
        if not found:
            return query
        source = found[0].payload
        excluded.add(source["doc_id"])
        trace.diagnostics["more_like_this"] = source["doc_id"]
        rest = [token for token, doc_id in zip(tokens, mentioned, strict=True) if doc_id != source["doc_id"]]
        if query.strip() == source["doc_id"]:
            rest = []
        return " ".join([*rest, source["title"], source["text"]]).strip()

    # -- first stage ----------------------------------------------------------------------------

    def _retrieve_with_retries(self, plan: SearchPlan, request: SearchRequest) -> list[Candidate]:
        """First-stage candidates; with few results, retry with broader vocabulary expansion."""
        expansion = self.settings.expansion
        expand = expansion.enabled if request.expand is None else request.expand
        level = 1 if expand else 0
        attempts = []
        while True:
            with plan.trace.stage("expansion"):
                terms = self._expansion_terms(plan.query, level, plan.tenants)
            candidates = self._first_stage(plan, terms, request)
            attempts.append({"level": level, "expansion_terms": terms, "results": len(candidates)})
            if (
                len(candidates) >= expansion.min_results
                or len(attempts) > expansion.max_retries
                or self._vocabulary is None
                or Strategy.BM25 not in plan.strategies
            ):
                break
            level += 1
        plan.trace.diagnostics["expansion"] = attempts
        return candidates

    def _expansion_terms(self, query: str, level: int, tenants: frozenset[str] | None) -> dict[str, float]:
        """Neighbour terms at an expansion level: 0 none, 1 as configured, each further level broader;
        only terms that documents of ``tenants`` hold, so that no other tenant's words show."""
        if level == 0 or self._vocabulary is None or self._dense_encoder is None:
            return {}
        expansion = self.settings.expansion
        return self._vocabulary.neighbours(
            query,
            self._dense_encoder,
            threshold=max(expansion.threshold - (level - 1) * expansion.broaden_step, 0.0),
            max_terms=expansion.max_terms * level,
            weight=expansion.weight,
            tenants=tenants,
        )

    def _first_stage(
        self, plan: SearchPlan, expansion_terms: dict[str, float], request: SearchRequest
    ) -> list[Candidate]:
        """The query, plus its reformulations fused by RRF when multi-query is on."""
        fused = self._search_and_fuse(plan, plan.query, expansion_terms)
        multi = self.settings.multi_query
        if not (multi.enabled if request.multi_query is None else request.multi_query):
            return fused
        with plan.trace.stage("multi_query"):
            variants = self._reformulations(plan, fused)
        runs = {"original": fused}
        for label, text, terms in variants:
            runs[label] = self._search_and_fuse(plan, text, terms)
        by_key: dict[str, Candidate] = {}
        for run in runs.values():
            for candidate in run:
                by_key.setdefault(candidate.key, candidate)
        aggregated = reciprocal_rank_fusion(
            {label: [c.key for c in run] for label, run in runs.items()}, k=self.settings.fusion.rrf_k
        )
        plan.trace.diagnostics["multi_query"] = {
            "reformulations": [
                {"label": label, "query": text, "expansion_terms": terms} for label, text, terms in variants
            ],
            "candidates": {label: len(run) for label, run in runs.items()},
        }
        return [by_key[key].rescored(score) for key, score in aggregated]

    def _reformulations(self, plan: SearchPlan, first_pass: list[Candidate]) -> list[tuple[str, str, dict[str, float]]]:
        """(label, text, lexical expansion terms) of each reformulation."""
        query = plan.query
        multi = self.settings.multi_query
        variants: list[tuple[str, str, dict[str, float]]] = []
        # Feedback terms are weighed by the scope's own documents (no other tenant's counts);
        # a vocabulary without per-tenant counts gives a scoped query none.
        doc_freq = self._vocabulary.doc_freq_in(plan.tenants) if self._vocabulary is not None else None
        if multi.pseudo_relevance_feedback and doc_freq is not None and first_pass:
            texts = [
                f"{c.hit.payload.get('title', '')} {c.hit.payload.get('text', '')}"
                for c in first_pass[: multi.feedback_docs]
            ]
            documents = max(self._lexical_count(plan.tenants), 1)
            feedback = feedback_terms(query, texts, doc_freq, documents, multi.feedback_terms)
            if feedback:
                variants.append(("prf", f"{query} {' '.join(feedback)}", {}))
        if multi.vocabulary_expansion:
            terms = self._expansion_terms(query, 1, plan.tenants)
            if terms:
                variants.append(("expansion", f"{query} {' '.join(terms)}", terms))
        if self._reformulator is not None:
            if plan.llm_reformulations is None:
                try:
                    plan.llm_reformulations = self._reformulator.reformulate(query, multi.llm_reformulations)
                except RuntimeError as exc:
                    plan.llm_reformulations = []
                    plan.trace.diagnostics["llm_error"] = str(exc)
                    logger.warning("%s; searching without LLM reformulations", exc)
            variants += [(f"llm{i}", text, {}) for i, text in enumerate(plan.llm_reformulations, start=1)]
        return variants

    def _lexical_count(self, tenants: frozenset[str] | None = None) -> int:
        """Chunks the lexical index holds (of ``tenants`` only, when given)."""
        if self._lexical is None:
            return 0
        return self._lexical.count() if tenants is None else self._lexical.count_tenants(tenants)

    def _search_and_fuse(self, plan: SearchPlan, query: str, expansion_terms: dict[str, float]) -> list[Candidate]:
        per_strategy = self._search_strategies(plan, query, expansion_terms)
        with plan.trace.stage("fusion"):
            candidates = self._fuse(per_strategy, plan)
        plan.trace.diagnostics["candidates"] = {name: len(hits) for name, hits in per_strategy.items()}
        return candidates

    def _search_strategies(
        self, plan: SearchPlan, query: str, expansion_terms: dict[str, float]
    ) -> dict[str, list[StoreHit]]:
        """Run the strategies in parallel, reusing what this request already ran. The last one runs
        in the calling thread, which would otherwise only wait: one thread hand-off less per search.
        A lone strategy of the only search in flight may encode its query on every core."""
        pending: list[tuple[Strategy, tuple[Strategy, str], dict[str, Any]]] = []
        per_strategy: dict[str, list[StoreHit]] = {}
        for name in plan.strategies:
            # Expansion and tags change only BM25: the other strategies' results are reused on retries.
            cache_key = (name, query if name != Strategy.BM25 else f"{query}\x00{sorted(expansion_terms.items())}")
            if cache_key in plan.cache:
                per_strategy[name] = plan.cache[cache_key]
            else:
                pending.append((name, cache_key, {}))
        args = (query, plan.depth, plan.filters, expansion_terms, plan.tag_terms)
        futures: list[Future[tuple[list[StoreHit], float]] | Done] = [
            self._pool.submit(timed, self._searches[name], *args, notes) for name, _, notes in pending[:-1]
        ]
        if pending:
            name, _, notes = pending[-1]
            with encoding_alone(len(pending) == 1 and self._in_flight.count == 1):
                futures.append(Done(timed(self._searches[name], *args, notes)))
        timings = plan.trace.timings_ms
        for (name, cache_key, notes), future in zip(pending, futures, strict=True):
            hits, elapsed = future.result()
            plan.cache[cache_key] = per_strategy[name] = hits
            timings[f"{name}_ms"] = timings.get(f"{name}_ms", 0.0) + elapsed
            if ENCODE_NOTE in notes:  # the strategy's query encoding: its wall time and its thread's CPU
                encode_ms, encode_cpu_ms = notes.pop(ENCODE_NOTE)
                timings[f"{name}_encode_ms"] = timings.get(f"{name}_encode_ms", 0.0) + encode_ms
                cpu = plan.trace.diagnostics.setdefault("encoder_cpu_ms", {})
                cpu[name] = cpu.get(name, 0.0) + encode_cpu_ms
            plan.trace.diagnostics.update(notes)
        return per_strategy

    @property
    def _collapse_key(self) -> Callable[[StoreHit], str]:
        """One hit per document, or per chunk when chunks are not collapsed. A document is its
        tenant's: two tenants' documents with the same id are two hits (``chunk_document``)."""
        if self.settings.collapse_chunks:
            return lambda h: chunk_document(h.chunk_id, h.doc_id)
        return lambda h: h.chunk_id

    def _fuse(self, per_strategy: Mapping[str, list[StoreHit]], plan: SearchPlan) -> list[Candidate]:
        rankings = document_rankings(per_strategy, self._collapse_key, plan.excluded)
        provenance: dict[str, dict[str, tuple[float, int]]] = {}
        best_hit: dict[str, tuple[int, StoreHit]] = {}
        for name, ranking in rankings.items():
            for rank, (item, hit) in enumerate(ranking, start=1):
                provenance.setdefault(item, {})[name] = (hit.score, rank)
                if item not in best_hit or rank < best_hit[item][0]:
                    best_hit[item] = (rank, hit)
        scored = {name: [(item, hit.score) for item, hit in ranking] for name, ranking in rankings.items()}
        fused = fuse_rankings(scored, plan.fusion, self.settings.fusion)
        return [Candidate(item, best_hit[item][1], score, provenance[item]) for item, score in fused]

    # -- graph and rerank -----------------------------------------------------------------------

    def _rerank(self, query: str, candidates: list[Candidate], trace: SearchTrace) -> list[Candidate]:
        """Cross-encoder scores for the head of the list; its best ``output`` lead, the rest keep their order."""
        assert self._reranker is not None
        rerank = self.settings.rerank
        head = candidates[: rerank.candidates]
        first_stage_scores = {c.key: c.score for c in head}
        passages = [f"{c.hit.payload.get('title', '')}\n{c.hit.payload.get('text', '')}".strip() for c in head]
        scores = self._reranker.score(query, passages).tolist()
        for rank, (candidate, score) in enumerate(zip(head, scores, strict=True), start=1):
            candidate.first_stage_rank = rank
            candidate.strategy_scores["rerank"] = (score, 0)
        by_rerank = sorted(head, key=lambda c: (-c.strategy_scores["rerank"][0], c.first_stage_rank))
        for rank, candidate in enumerate(by_rerank, start=1):
            candidate.strategy_scores["rerank"] = (candidate.strategy_scores["rerank"][0], rank)
        if rerank.blend_weight is not None:
            blended = blend_scores([c.score for c in head], scores, rerank.blend_weight)
            order = [c.rescored(b) for c, b in sorted(zip(head, blended, strict=True), key=lambda cb: -cb[1])]
        elif rerank.fuse_with_first_stage:
            fused = reciprocal_rank_fusion(
                {"first_stage": [c.key for c in head], "rerank": [c.key for c in by_rerank]},
                k=self.settings.fusion.rrf_k,
            )
            by_key = {c.key: c for c in head}
            order = [by_key[key].rescored(score) for key, score in fused]
        else:
            order = [c.rescored(c.strategy_scores["rerank"][0]) for c in by_rerank]
        leading = order[: rerank.output]
        lead_keys = {c.key for c in leading}
        rest = [c for c in candidates if c.key not in lead_keys]
        trace.diagnostics["rerank"] = {
            "model": self._reranker.model_name,
            "scored": len(head),
            # How far the reranker moved each leading hit: first-stage rank -> new rank.
            "moves": [
                {
                    "key": c.hit.doc_id if self.settings.collapse_chunks else c.hit.chunk_id,
                    "from": c.first_stage_rank,
                    "to": i,
                    "first_stage_score": round(first_stage_scores[c.key], 6),
                    "rerank_score": round(c.strategy_scores["rerank"][0], 4),
                }
                for i, c in enumerate(leading, start=1)
            ],
            "mean_abs_rank_change": round(
                sum(abs((c.first_stage_rank or i) - i) for i, c in enumerate(leading, start=1)) / max(len(leading), 1),
                3,
            ),
        }
        return leading + rest

    def __enter__(self) -> HybridRetriever:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._reformulator is not None:
            self._reformulator.close()
        for store in self._stores:
            store.close()


def _mentioned_id(token: str) -> str | None:
    """The document id a query token may name: ``doc:X`` / ``id:X``, or a token mixing digits with
    other characters (``P19-1001``); plain numbers and words are ordinary query text."""
    stripped = token.strip(",;()\"'")
    prefixed = _ID_PREFIX.match(stripped)
    if prefixed:
        return prefixed.group("id")
    return stripped if _ID_LIKE.match(stripped) else None

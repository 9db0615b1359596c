"""A catalog's retrieval configuration, learned from its gold queries by k-fold cross-validation.

The search space is small on purpose (the learner is judged on catalogs nobody here has seen):
the fusion method, a weight per strategy (0 leaves it out), the candidate depth, multi-query on
or off, and, when the deployment reranks, the cross-encoder blend weight.

* Fusion settings are searched by *replaying* fusion over each query's strategy hits, captured
  once at the deepest depth (``HybridRetriever.strategy_hits`` and the retriever's own
  ``document_rankings`` / ``fuse_rankings``): a grid over methods and depths, coordinate ascent
  over the weights. The replay leaves out what follows fusion (the graph walk, rerank).
* Multi-query and the blend weight change what is searched or scored, so they are judged by the
  retriever itself (cross-encoder scores cached per query and passage).
* A change from the deployment's configuration must gain ``min_gain`` nDCG@10 on the training
  queries, significantly (paired randomization test, p < ``significance``), without losing more
  than ``max_recall_drop`` recall@100: on a few dozen queries the best of many configurations
  is mostly noise, and noise must not move the configuration.

Every figure reported (each fold's held-out score, the cross-validated estimate ``tuned_cv``)
comes from the retriever answering held-out queries with the configuration learned without them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from retrieval_assets.core.embed.cache import content_hash
from retrieval_assets.core.evaluation.metrics import EVAL_DEPTH, latency_percentiles, score_run
from retrieval_assets.core.evaluation.significance import paired_difference, scores_of
from retrieval_assets.core.ingest.catalog import GoldSet
from retrieval_assets.core.models import FusionMethod, SearchRequest, StoreHit, Strategy
from retrieval_assets.core.retrieval.fusion import document_rankings, fuse_rankings
from retrieval_assets.core.retrieval.rerank.base import Reranker
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.settings import RetrievalSettings

Progress = Callable[[str], None]


class TuningSettings(BaseModel):
    """The search space and its guards."""

    folds: int = Field(5, ge=2, description="Cross-validation folds.")
    # With five folds each held-out fold then has at least ten queries, so one query moves a
    # fold's score by 0.1 at most.
    min_queries: int = Field(
        50, ge=2, description="Fewer judged queries than this keep the deployment's configuration."
    )
    methods: list[FusionMethod] = Field(
        default_factory=lambda: [FusionMethod.MINMAX, FusionMethod.ZSCORE, FusionMethod.RRF],
        description="Fusion methods tried.",
    )
    # Scale-free for every method, so a handful of ratios spans the space.
    weights: list[float] = Field(
        default_factory=lambda: [0.0, 0.25, 0.5, 1.0, 2.0], description="Relative strategy weights tried."
    )
    depths: list[int] = Field(
        default_factory=lambda: [100, 200], description="Candidates per strategy tried."
    )
    passes: int = Field(2, ge=1, description="Rounds of coordinate ascent over the strategies' weights.")
    min_gain: float = Field(0.005, ge=0.0, description="Training nDCG@10 a change must add.")
    significance: float = Field(
        0.05, gt=0.0, lt=1.0, description="Largest p-value on the training queries of a change's gain."
    )
    max_recall_drop: float = Field(0.005, ge=0.0, description="Training recall@100 a change may lose.")
    blend_weights: list[float] = Field(
        default_factory=lambda: [0.25, 0.5, 0.75], description="Rerank blend weights tried."
    )
    time_budget_s: float = Field(
        600.0, gt=0.0,
        description=(
            "Seconds the search may take; past them it keeps the best configuration found so far (and says so)."
        ),
    )


class RetrievalConfiguration(BaseModel):
    """The tuned part of ``RetrievalSettings``."""

    model_config = ConfigDict(frozen=True)

    fusion: FusionMethod
    weights: dict[str, float]  # strategy -> weight; a strategy weighted 0 is not searched
    candidates_per_strategy: int
    multi_query: bool
    rerank_blend: float | None = None  # None: the deployment's rerank order (or rerank off)

    @classmethod
    def of(cls, settings: RetrievalSettings) -> RetrievalConfiguration:
        return cls(
            fusion=settings.fusion.method,
            weights={
                Strategy(s).value: settings.fusion.weights.get(Strategy(s).value, 1.0) for s in settings.strategies
            },
            candidates_per_strategy=settings.candidates_per_strategy,
            multi_query=settings.multi_query.enabled,
            rerank_blend=settings.rerank.blend_weight,
        )

    @property
    def strategies(self) -> list[Strategy]:
        return [Strategy(name) for name, weight in self.weights.items() if weight > 0]

    @property
    def key(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True)

    def apply(self, settings: RetrievalSettings) -> RetrievalSettings:
        """``settings`` with this configuration in place of theirs."""
        return settings.model_copy(
            update={
                "strategies": self.strategies,
                "candidates_per_strategy": self.candidates_per_strategy,
                "fusion": settings.fusion.model_copy(
                    update={"method": self.fusion, "weights": {s: w for s, w in self.weights.items() if w > 0}}
                ),
                "multi_query": settings.multi_query.model_copy(update={"enabled": self.multi_query}),
                "rerank": settings.rerank.model_copy(update={"blend_weight": self.rerank_blend}),
            }
        )

    def changed(self, **update: Any) -> RetrievalConfiguration:
        return self.model_copy(update=update)

    def weighted(self, strategy: str, weight: float) -> RetrievalConfiguration:
        return self.changed(weights={**self.weights, strategy: weight})


class FoldResult(BaseModel):
    fold: int
    train_queries: int
    test_queries: int
    configuration: RetrievalConfiguration
    train_ndcg_at_10: float
    test_ndcg_at_10: float  # the configuration learned without these queries, on them
    test_default_ndcg_at_10: float  # the deployment's configuration on the same queries


class TuningResult(BaseModel):
    """What the learner chose, and the held-out evidence for it."""

    gold: str  # fingerprint of the gold queries it learned from
    queries: int
    default: RetrievalConfiguration
    configuration: RetrievalConfiguration  # what serves once the gate passes with it
    adopted: bool  # False: the deployment's configuration serves
    reason: str
    folds: list[FoldResult] = Field(default_factory=list)
    # Per held-out query: its metrics under the configuration learned on the other folds (tuned_cv).
    held_out: dict[str, dict[str, float]] = Field(default_factory=dict)
    default_scores: dict[str, dict[str, float]] = Field(default_factory=dict)
    stopped_early: bool = False
    seconds: float = 0.0

    def cross_validated(self) -> dict[str, float]:
        """``tuned_cv``: the summary of the held-out scores, with the spread across folds."""
        if not self.held_out:
            return {}
        queries = list(self.held_out)
        summary = {
            metric: round(_mean(self.held_out, queries, metric), 4) for metric in ("ndcg@10", "recall@100", "mrr@10")
        }
        latency = latency_percentiles([s["latency_ms"] for s in self.held_out.values()])
        fold_ndcg = [f.test_ndcg_at_10 for f in self.folds]
        return {
            **summary,
            **{k: round(v, 2) for k, v in latency.items()},
            "fold_ndcg@10_min": round(min(fold_ndcg), 4),
            "fold_ndcg@10_max": round(max(fold_ndcg), 4),
            "fold_ndcg@10_std": round(float(np.std(fold_ndcg)), 4),
        }

    def deployment_ndcg(self) -> float:
        """The deployment's configuration on the same held-out queries: what ``tuned_cv`` is compared with."""
        return _mean(self.default_scores, list(self.default_scores), "ndcg@10")


def gold_fingerprint(gold: GoldSet) -> str:
    return content_hash(json.dumps({"queries": gold.queries, "qrels": gold.qrels}, sort_keys=True))[:16]


def fold_of(query_ids: Iterable[str], folds: int) -> dict[str, int]:
    """A stable assignment of queries to folds: sorted by a hash of the id, dealt round-robin,
    so fold sizes differ by one at most and do not depend on the file's order."""
    ordered = sorted(query_ids, key=lambda qid: content_hash("fold", qid))
    return {qid: i % folds for i, qid in enumerate(ordered)}


class _CachedReranker(Reranker):
    """Each (query, passage) is scored once while blend weights are compared."""

    def __init__(self, inner: Reranker) -> None:
        self.model_name = inner.model_name
        self._inner = inner
        self._scores: dict[tuple[str, str], float] = {}

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(p for p in passages if (query, p) not in self._scores))
        if missing:
            for passage, value in zip(missing, self._inner.score(query, missing).tolist(), strict=True):
                self._scores[(query, passage)] = value
        return np.array([self._scores[(query, p)] for p in passages], dtype=np.float32)


class _Captured:
    """One query's strategy hits at the deepest depth, collapsed as the first stage collapses them.
    Each ranked item keeps the position of its first hit, so a shallower depth is a filter."""

    def __init__(self, hits: Mapping[str, Sequence[StoreHit]], key: Callable[[StoreHit], str], excluded: set[str]):
        self.excluded = len(excluded)
        position = {
            name: {id(hit): i for i, hit in enumerate(strategy_hits)} for name, strategy_hits in hits.items()
        }
        self.rankings = {
            name: [(item, hit.score, position[name][id(hit)], hit.doc_id) for item, hit in ranking]
            for name, ranking in document_rankings(hits, key, excluded).items()
        }

    def run(self, configuration: RetrievalConfiguration, base: RetrievalSettings) -> list[str]:
        # As the retriever searches: never fewer candidates than the results asked for.
        depth = max(configuration.candidates_per_strategy, EVAL_DEPTH) + self.excluded
        scored, doc_of = {}, {}
        for strategy in configuration.strategies:
            ranking = [entry for entry in self.rankings.get(strategy.value, []) if entry[2] < depth]
            scored[strategy.value] = [(item, score) for item, score, _, _ in ranking]
            doc_of.update({item: doc for item, _, _, doc in ranking})
        fusion = base.fusion.model_copy(update={"weights": configuration.weights})
        fused = fuse_rankings(scored, configuration.fusion, fusion)
        return [doc_of[item] for item, _ in fused[:EVAL_DEPTH]]


class ConfigurationLearner:
    """Learns one catalog's configuration; every evaluation is memoised per configuration and query,
    so folds share the work."""

    def __init__(
        self,
        retriever: HybridRetriever,
        gold: GoldSet,
        settings: TuningSettings | None = None,
        progress: Progress = lambda _: None,
        tenants: Sequence[str] | None = None,
    ) -> None:
        """``tenants``: the gold's scope (``scope.gold_scope``); every query is searched among those
        tenants' documents only, so other tenants' documents cannot sway what is learned."""
        self.settings = settings or TuningSettings()
        self._tenants = list(tenants) if tenants is not None else None
        self.base = retriever.settings
        self.default = RetrievalConfiguration.of(self.base)
        self._retriever = retriever
        self._reranker = _CachedReranker(retriever.reranker) if retriever.reranker is not None else None
        self._gold = gold
        self._qids = [qid for qid in gold.queries if qid in gold.qrels]
        self._progress = progress
        self._captured: dict[str, _Captured] = {}
        self._replayed: dict[str, dict[str, dict[str, float]]] = {}
        self._answered: dict[tuple[str, str], dict[str, float]] = {}
        self._deadline = float("inf")
        self.stopped_early = False

    # -- scores -----------------------------------------------------------------------------------

    def _strategies(self) -> list[str]:
        return [s.value for s in self._retriever.available_strategies]

    def _capture(self) -> None:
        depth = max([*self.settings.depths, self.default.candidates_per_strategy, EVAL_DEPTH])
        strategies = [Strategy(s) for s in self._strategies()]
        for done, qid in enumerate(self._qids, start=1):
            request = SearchRequest(
                query=self._gold.queries[qid], top_k=depth, strategies=strategies, tenants=self._tenants
            )
            self._captured[qid] = _Captured(*self._retriever.strategy_hits(request))
            if done % max(len(self._qids) // 4, 1) == 0:
                self._progress(f"captured strategy hits of {done}/{len(self._qids)} queries")

    def _replay(self, configuration: RetrievalConfiguration) -> dict[str, dict[str, float]]:
        key = configuration.key
        if key not in self._replayed:
            run = {qid: self._captured[qid].run(configuration, self.base) for qid in self._qids}
            self._replayed[key] = score_run(run, self._gold.qrels)
        return self._replayed[key]

    def answer(self, configuration: RetrievalConfiguration, qids: Sequence[str]) -> dict[str, dict[str, float]]:
        """Per-query metrics and latency of the retriever answering with ``configuration``."""
        view = self._retriever.configured(configuration.apply(self.base), reranker=self._reranker)
        key = configuration.key
        run: dict[str, list[str]] = {}
        latency: dict[str, float] = {}
        for qid in qids:
            if (key, qid) not in self._answered:
                started = time.perf_counter()
                hits = view.search(self._gold.queries[qid], top_k=EVAL_DEPTH, tenants=self._tenants).hits
                run[qid] = [hit.doc_id for hit in hits]
                latency[qid] = (time.perf_counter() - started) * 1000
        if run:  # scored in one pass, not one evaluator per query
            for qid, metrics in score_run(run, self._gold.qrels).items():
                self._answered[(key, qid)] = {**metrics, "latency_ms": latency[qid]}
        return {qid: self._answered[(key, qid)] for qid in qids}

    # -- search -----------------------------------------------------------------------------------

    def _value(self, scores: Mapping[str, Mapping[str, float]], qids: Sequence[str], recall_floor: float) -> float:
        ndcg, recall = _mean(scores, qids, "ndcg@10"), _mean(scores, qids, "recall@100")
        return ndcg if recall >= recall_floor else float("-inf")

    def _first_stage(self, qids: Sequence[str], recall_floor: float) -> RetrievalConfiguration:
        """The best fusion method, depth and weights on ``qids`` by replay."""
        best, best_value = self.default, self._value(self._replay(self.default), qids, recall_floor)
        for method in self.settings.methods:
            for depth in self.settings.depths:
                current = self.default.changed(fusion=method, candidates_per_strategy=depth)
                current_value = self._value(self._replay(current), qids, recall_floor)
                for _ in range(self.settings.passes):
                    for strategy in self._strategies():
                        for weight in self.settings.weights:
                            if time.monotonic() > self._deadline:
                                self.stopped_early = True
                                return best if best_value >= current_value else current
                            trial = current.weighted(strategy, weight)
                            if not trial.strategies or trial == current:
                                continue
                            value = self._value(self._replay(trial), qids, recall_floor)
                            if value > current_value:
                                current, current_value = trial, value
                if current_value > best_value:
                    best, best_value = current, current_value
        return best

    def learn(self, qids: Sequence[str]) -> tuple[RetrievalConfiguration, float]:
        """The configuration learned on ``qids`` and its training nDCG@10 (from the retriever)."""
        default_scores = self.answer(self.default, qids)
        recall_floor = _mean(default_scores, qids, "recall@100") - self.settings.max_recall_drop
        chosen = self._first_stage(qids, recall_floor)
        chosen_scores = self.answer(chosen, qids)
        if not self._better(chosen_scores, default_scores, qids, recall_floor):
            chosen, chosen_scores = self.default, default_scores
        toggled = chosen.changed(multi_query=not chosen.multi_query)
        toggled_scores = self.answer(toggled, qids)
        if self._better(toggled_scores, chosen_scores, qids, recall_floor):
            chosen, chosen_scores = toggled, toggled_scores
        if self._reranker is not None and self.base.rerank.enabled:
            # Rerank is the deployment's choice; the blend is picked among its orders, none favoured.
            for weight in [None, *self.settings.blend_weights]:
                trial = chosen.changed(rerank_blend=weight)
                trial_scores = self.answer(trial, qids)
                if _mean(trial_scores, qids, "ndcg@10") > _mean(chosen_scores, qids, "ndcg@10"):
                    chosen, chosen_scores = trial, trial_scores
        return chosen, _mean(chosen_scores, qids, "ndcg@10")

    def _better(self, scores: Mapping, than: Mapping, qids: Sequence[str], recall_floor: float) -> bool:
        gain = _mean(scores, qids, "ndcg@10") - _mean(than, qids, "ndcg@10")
        if gain < self.settings.min_gain or _mean(scores, qids, "recall@100") < recall_floor:
            return False
        difference = paired_difference(scores_of(scores, "ndcg@10"), scores_of(than, "ndcg@10"))
        return difference.p_value < self.settings.significance

    def run(self) -> TuningResult:
        """Cross-validate the learner, then learn on every query; the learned configuration is
        adopted only when its held-out estimate is at least the deployment's on the same queries."""
        started = time.monotonic()
        self._deadline = started + self.settings.time_budget_s
        common = {"gold": gold_fingerprint(self._gold), "queries": len(self._qids), "default": self.default}
        if len(self._qids) < self.settings.min_queries:
            return TuningResult(
                **common,
                configuration=self.default,
                adopted=False,
                reason=f"{len(self._qids)} judged queries, fewer than {self.settings.min_queries}: "
                "the deployment's configuration serves",
            )
        self._capture()
        folds = fold_of(self._qids, self.settings.folds)
        results: list[FoldResult] = []
        held_out: dict[str, dict[str, float]] = {}
        default_scores: dict[str, dict[str, float]] = {}
        for fold in range(self.settings.folds):
            test = [qid for qid in self._qids if folds[qid] == fold]
            train = [qid for qid in self._qids if folds[qid] != fold]
            configuration, train_ndcg = self.learn(train)
            tested, baseline = self.answer(configuration, test), self.answer(self.default, test)
            held_out |= tested
            default_scores |= baseline
            results.append(
                FoldResult(
                    fold=fold,
                    train_queries=len(train),
                    test_queries=len(test),
                    configuration=configuration,
                    train_ndcg_at_10=round(train_ndcg, 4),
                    test_ndcg_at_10=round(_mean(tested, test, "ndcg@10"), 4),
                    test_default_ndcg_at_10=round(_mean(baseline, test, "ndcg@10"), 4),
                )
            )
            self._progress(
                f"fold {fold + 1}/{self.settings.folds}: held-out nDCG@10 {results[-1].test_ndcg_at_10:.4f} "
                f"(deployment's configuration {results[-1].test_default_ndcg_at_10:.4f})"
            )
        configuration, _ = self.learn(self._qids)
        tuned, default = _mean(held_out, self._qids, "ndcg@10"), _mean(default_scores, self._qids, "ndcg@10")
        adopted = configuration != self.default and tuned >= default
        if configuration == self.default:
            reason = "no change gained enough on the gold queries: the deployment's configuration serves"
        elif adopted:
            reason = f"held-out nDCG@10 {tuned:.4f} against {default:.4f} for the deployment's configuration"
        else:
            reason = f"held-out nDCG@10 {tuned:.4f} is below the deployment's {default:.4f}: it serves instead"
        return TuningResult(
            **common,
            configuration=configuration if adopted else self.default,
            adopted=adopted,
            reason=reason,
            folds=results,
            held_out=held_out,
            default_scores=default_scores,
            stopped_early=self.stopped_early,
            seconds=round(time.monotonic() - started, 2),
        )


def _mean(scores: Mapping[str, Mapping[str, float]], qids: Sequence[str], metric: str) -> float:
    return float(np.mean([scores[qid][metric] for qid in qids])) if qids else 0.0

"""The configuration learner on a real index (real models, real engines): its replay of fusion
is what the retriever answers, its cross-validation never scores a query with a configuration
learned on it, its guards keep the deployment's configuration when nothing gains for sure, and
a configuration that does gain is adopted."""

from __future__ import annotations

import pytest

from retrieval_assets.core.evaluation.metrics import EVAL_DEPTH
from retrieval_assets.core.evaluation.tuning import (
    ConfigurationLearner,
    RetrievalConfiguration,
    TuningSettings,
    fold_of,
)
from retrieval_assets.core.ingest.catalog import GoldSet, load_gold
from retrieval_assets.core.models import FusionMethod
from retrieval_assets.core.retrieval.rerank.base import Reranker
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.defs.resources import CatalogResource
from retrieval_assets.runs import deployment_resources

QUICK = TuningSettings(folds=4, min_queries=10, depths=[10, 100], weights=[0.0, 0.5, 1.0, 2.0])


@pytest.fixture(scope="module")
def indexed(gold_build: dict):
    catalog = gold_build["catalog"]
    search = deployment_resources(gold_build["home"], CatalogResource(format="beir", path=str(catalog)))["search"]
    yield search.retriever(gold_build["version"].id), load_gold(catalog)
    search.close()


def _splade_only(retriever: HybridRetriever) -> HybridRetriever:
    """A deployment configured with its weakest strategy alone."""
    return retriever.configured(retriever.settings.model_copy(update={"strategies": ["splade"]}))


def test_the_replayed_fusion_is_what_the_retriever_answers(indexed) -> None:
    retriever, gold = indexed
    learner = ConfigurationLearner(retriever, gold, QUICK)
    learner._capture()
    default = learner.default
    configurations = [
        default,
        default.changed(fusion=FusionMethod.ZSCORE, weights={"bm25": 1.0, "dense": 2.0, "splade": 0.5}),
        default.changed(fusion=FusionMethod.RRF, weights={"bm25": 2.0, "dense": 0.5}, candidates_per_strategy=10),
        default.changed(fusion=FusionMethod.MINMAX, weights={"bm25": 0.0, "dense": 1.0, "splade": 1.0}),
        default.changed(weights={"splade": 1.0}),
    ]
    for configuration in configurations:
        view = retriever.configured(configuration.apply(retriever.settings))
        for qid, query in gold.queries.items():
            answered = [hit.doc_id for hit in view.search(query, top_k=EVAL_DEPTH).hits]
            assert learner._captured[qid].run(configuration, retriever.settings) == answered, (configuration, qid)


@pytest.fixture(scope="module")
def permissive(indexed):
    """The learner from a splade-only deployment, with guards that let any training gain through,
    so that the path to adoption runs on forty queries."""
    retriever, gold = indexed
    settings = QUICK.model_copy(update={"min_gain": 0.0, "significance": 0.99})
    learner = ConfigurationLearner(_splade_only(retriever), gold, settings)
    return learner, learner.run()


def test_each_held_out_query_is_scored_with_a_configuration_learned_without_it(indexed, permissive) -> None:
    _, gold = indexed
    learner, result = permissive
    folds = fold_of(gold.queries, learner.settings.folds)
    assert sorted(result.held_out) == sorted(gold.queries) and len(result.folds) == learner.settings.folds
    for fold in result.folds:
        test = [q for q in gold.queries if folds[q] == fold.fold]
        train = [q for q in gold.queries if folds[q] != fold.fold]
        assert (fold.test_queries, fold.train_queries) == (len(test), len(train))
        # Learning again on the training queries alone gives the fold's configuration...
        assert learner.learn(train)[0] == fold.configuration
        # ...and the held-out scores are that configuration's answers to the held-out queries.
        assert {q: result.held_out[q] for q in test} == learner.answer(fold.configuration, test)


def test_a_configuration_that_gains_is_adopted(permissive) -> None:
    _, result = permissive
    assert result.adopted, result.reason
    assert result.configuration != result.default and result.configuration.strategies != result.default.strategies
    cross_validated = result.cross_validated()
    deployment = sum(s["ndcg@10"] for s in result.default_scores.values()) / len(result.default_scores)
    assert cross_validated["ndcg@10"] >= deployment and "held-out nDCG@10" in result.reason
    assert set(cross_validated) >= {"ndcg@10", "recall@100", "mrr@10", "p95_ms", "fold_ndcg@10_std"}


def test_the_default_guards_keep_the_deployment_configuration_on_noise(indexed) -> None:
    retriever, gold = indexed
    result = ConfigurationLearner(retriever, gold, QUICK).run()
    # Forty easy queries: no change to the default hybrid gains significantly, in any fold.
    assert not result.adopted and result.configuration == result.default
    assert all(fold.configuration == result.default for fold in result.folds)
    assert result.cross_validated()["ndcg@10"] == pytest.approx(
        sum(s["ndcg@10"] for s in result.default_scores.values()) / len(result.default_scores), abs=1e-4
    )


def test_too_few_gold_queries_keep_the_deployment_configuration(indexed) -> None:
    retriever, gold = indexed
    few = GoldSet(queries=dict(list(gold.queries.items())[:5]), qrels=gold.qrels)
    result = ConfigurationLearner(retriever, few, TuningSettings()).run()
    assert not result.adopted and not result.folds and "5 judged queries, fewer than 50" in result.reason


def test_the_configuration_round_trips_into_retrieval_settings(indexed) -> None:
    retriever, _ = indexed
    learned = RetrievalConfiguration(
        fusion=FusionMethod.ZSCORE,
        weights={"bm25": 0.5, "dense": 1.0, "splade": 0.0},
        candidates_per_strategy=200,
        multi_query=True,
        rerank_blend=0.25,
    )
    settings = learned.apply(retriever.settings)
    assert [s.value for s in settings.strategies] == ["bm25", "dense"]
    assert settings.fusion.method == FusionMethod.ZSCORE and settings.fusion.weights == {"bm25": 0.5, "dense": 1.0}
    assert settings.candidates_per_strategy == 200 and settings.multi_query.enabled
    assert settings.rerank.blend_weight == 0.25
    assert RetrievalConfiguration.of(settings) == learned.changed(weights={"bm25": 0.5, "dense": 1.0})


def test_fold_assignment_is_stable_and_balanced() -> None:
    ids = [f"q{i}" for i in range(23)]
    folds = fold_of(ids, 5)
    assert folds == fold_of(list(reversed(ids)), 5)
    sizes = [list(folds.values()).count(f) for f in range(5)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 23


def _reranking(retriever: HybridRetriever, blend: float | None, reranker=None) -> HybridRetriever:
    rerank = retriever.settings.rerank.model_copy(update={"enabled": True, "blend_weight": blend})
    return retriever.configured(retriever.settings.model_copy(update={"rerank": rerank}), reranker=reranker)


def test_the_rerank_blend_spans_the_first_stage_and_the_cross_encoder(indexed) -> None:
    retriever, gold = indexed
    query = next(iter(gold.queries.values()))
    first_stage = [hit.doc_id for hit in retriever.search(query, top_k=10).hits]
    by_cross_encoder = [hit.doc_id for hit in _reranking(retriever, None).search(query, top_k=10).hits]
    assert by_cross_encoder != first_stage
    assert [hit.doc_id for hit in _reranking(retriever, 0.0).search(query, top_k=10).hits] == first_stage
    assert [hit.doc_id for hit in _reranking(retriever, 1.0).search(query, top_k=10).hits] == by_cross_encoder


class CountingReranker(Reranker):
    def __init__(self, inner: Reranker) -> None:
        self.model_name, self.inner, self.pairs = inner.model_name, inner, []

    def score(self, query, passages):
        self.pairs += [(query, passage) for passage in passages]
        return self.inner.score(query, passages)


def test_a_reranking_deployment_learns_its_blend_scoring_each_pair_once(indexed) -> None:
    retriever, gold = indexed
    few = GoldSet(queries=dict(list(gold.queries.items())[:6]), qrels=gold.qrels)
    counting = CountingReranker(retriever.reranker)
    settings = QUICK.model_copy(update={"folds": 2, "min_queries": 4, "weights": [0.0, 1.0], "depths": [100]})
    result = ConfigurationLearner(_reranking(retriever, None, counting), few, settings).run()
    assert {fold.configuration.rerank_blend for fold in result.folds} <= {None, *settings.blend_weights}
    assert counting.pairs and len(counting.pairs) == len(set(counting.pairs))

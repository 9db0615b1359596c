"""The learned configuration through Dagster: ``evaluation_job`` learns it (``retrieval_configuration``),
the gate judges the candidate with it, and the query resource serves with it only once the gate
passed with it; the document update job's setting takes the promoted version's configuration."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from dagster import DagsterInstance

from retrieval_assets.core.evaluation.tuning import RetrievalConfiguration
from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.defs.assets.evaluation import EVALUATED_VERSION_TAG
from retrieval_assets.defs.jobs import DOCUMENT_UPDATE_CONFIG, EVALUATION
from retrieval_assets.defs.resources import CatalogResource, SearchResource
from retrieval_assets.runs import deployment_resources, run_selection
from retrieval_assets_tests.builds import build_catalog
from retrieval_assets_tests.defs.tables import undescribed_columns

# Guards that let any training gain through, so that a change is learned from forty queries.
PERMISSIVE = {
    "folds": 4,
    "min_queries": 10,
    "depths": [100],
    "weights": [0.0, 1.0],
    "min_gain": 0.0,
    "significance": 0.99,
}


def _evaluate(home: Path, catalog: Path, version: str, instance: DagsterInstance, tuning: dict) -> dict:
    resources = deployment_resources(home, CatalogResource(format="beir", path=str(catalog)))
    # A deployment configured with its weakest strategy alone: there is something to learn.
    resources["search"] = SearchResource(
        storage=resources["storage"], models=resources["models"], strategies=["splade"]
    )
    run = run_selection(
        EVALUATION,
        resources,
        instance,
        tags={EVALUATED_VERSION_TAG: version},
        run_config={
            "ops": {
                "retrieval_evaluation": {"config": {"configurations": ["bm25"]}},
                "retrieval_configuration": {"config": tuning},
            }
        },
    )
    assert run.success, run.run_id
    metadata = {
        event.asset_key.path[-1]: {k: v.value for k, v in event.materialization.metadata.items()}
        for event in run.get_asset_materialization_events()
    }
    for check in run.get_asset_check_evaluations():
        metadata[check.check_name] = {k: v.value for k, v in check.metadata.items()}
    return metadata


@pytest.fixture(scope="module")
def deployment(gold_build: dict) -> dict:
    root, catalog, home, version = gold_build["root"], gold_build["catalog"], gold_build["home"], gold_build["version"]
    instance = DagsterInstance.ephemeral()
    metadata = _evaluate(home, catalog, version.id, instance, PERMISSIVE)
    return {
        "root": root,
        "home": home,
        "catalog": catalog,
        "version": version,
        "instance": instance,
        "metadata": metadata,
    }


def test_the_learned_configuration_is_evaluated_gated_and_promoted(deployment: dict) -> None:
    version, metadata = deployment["version"], deployment["metadata"]
    learned = version.learned_configuration()
    assert learned["adopted"], learned["reason"]
    shown = metadata["retrieval_configuration"]
    assert shown["adopted"] is True and shown["configuration"] and shown["tuned_cv/ndcg@10"] > 0
    assert len(shown["folds"].records) == 4
    assert "held_out_ndcg@10" in [column.name for column in shown["folds"].schema.columns]

    report = version.evaluation()
    assert report["served"] == "tuned" and report["served_configuration"] == learned["configuration"]
    assert {"tuned", "tuned_cv", "hybrid", "bm25"} <= set(report["runs"])
    assert report["gate"]["passed"] and len(report["per_query"]) == 40
    assert metadata["retrieval_evaluation"]["configuration"] == "tuned"
    versions = IndexVersions(deployment["home"] / "indexes")
    assert versions.promoted().id == version.id
    [row] = [row for row in versions.quality_history() if row["version"] == version.id]
    assert row["configuration"] == "tuned" and row["ndcg@10"] == report["runs"]["tuned"]["ndcg@10"]


def test_the_folds_and_configurations_tables_describe_every_column(deployment: dict) -> None:
    # The tables only a cross-validated configuration shows: its folds, and tuned_cv's columns.
    metadata = deployment["metadata"]
    assert "folds" in metadata["retrieval_configuration"]
    assert [column for asset, values in metadata.items() for column in undescribed_columns(values, asset)] == []


def test_serving_uses_the_configuration_the_gate_passed_with(deployment: dict) -> None:
    resources = deployment_resources(
        deployment["home"], CatalogResource(format="beir", path=str(deployment["catalog"]))
    )
    learned = RetrievalConfiguration.model_validate(deployment["version"].learned_configuration()["configuration"])
    for enabled, strategies in ((True, learned.strategies), (False, ["splade"])):
        search = SearchResource(
            storage=resources["storage"],
            models=resources["models"],
            strategies=["splade"],
            learned_configuration=enabled,
        )
        try:
            assert search.retriever().settings.strategies == strategies
            assert search.search("vitamin D and bone density").strategies == strategies
        finally:
            search.close()


def test_a_refused_version_does_not_serve_its_configuration(deployment: dict) -> None:
    version = deployment["version"]
    report = version.evaluation()
    assert version.served_configuration() == report["served_configuration"]
    version.write_evaluation({**report, "gate": {**report["gate"], "passed": False}})
    try:
        assert version.served_configuration() is None
    finally:
        version.write_evaluation(report)


def test_the_document_update_job_takes_the_promoted_configuration(deployment: dict) -> None:
    # Another candidate (one distractor fewer) judged with the document update job's setting.
    changed = deployment["root"] / "changed"
    shutil.copytree(deployment["catalog"], changed)
    lines = (changed / "corpus.jsonl").read_text().splitlines()
    (changed / "corpus.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    _, candidate = build_catalog(deployment["home"], changed, catalog_format="beir")
    assert candidate.id != deployment["version"].id
    tuning = {**PERMISSIVE, **DOCUMENT_UPDATE_CONFIG["ops"]["retrieval_configuration"]["config"]}
    metadata = _evaluate(deployment["home"], changed, candidate.id, deployment["instance"], tuning)
    learned = candidate.learned_configuration()
    assert learned["reused_from"] == deployment["version"].id and learned["reason"].startswith("reused from")
    assert learned["configuration"] == deployment["version"].learned_configuration()["configuration"]
    tuning_seconds = deployment["version"].learned_configuration()["seconds"]
    assert metadata["retrieval_configuration"]["tuning_seconds"] == tuning_seconds
    # The gate compared the candidate with the promoted version query by query, on the same gold queries.
    gate = metadata["promotion_gate"]
    assert gate["ci_low/ndcg@10"] <= gate["ci_high/ndcg@10"] and 0.0 <= gate["p_value/ndcg@10"] <= 1.0
    assert {"queries_worse/ndcg@10", "queries_better/ndcg@10", "p_value/recall@100"} <= set(gate)
    assert candidate.evaluation()["gate"]["comparison"]["ndcg@10"]["best_ever"] is not None

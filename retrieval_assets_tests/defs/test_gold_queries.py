"""Gold for a catalog nobody judged, through the product: a folder of Markdown notes without gold is
built and evaluated; known-item gold is generated, frozen, reused on the next evaluation, loses the
query of a deleted document, and names itself in the report and the quality history; the ``gold``
commands as a user runs them, and curated and generated gold both judged by the gate. And the
gold step alone: a build that loses half the documents retires no gold, an unreachable LLM falls back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from dagster import AssetSelection

from retrieval_assets.core.evaluation.gold.frozen import DELETED, GoldStore
from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.defs.resources import CatalogResource, MultiQueryConfig, SearchResource
from retrieval_assets.runs import build_index, deployment_resources, evaluate_version, materialized, run_selection
from retrieval_assets_tests.test_cli import _env, cli

TOPICS = {
    "glaciers": "Glaciers carve valleys as compacted snow flows downhill, grinding bedrock into moraine and "
    "leaving cirques, fjords and erratic boulders behind after the ice retreats.",
    "volcanoes": "Volcanoes erupt when magma rises through fissures; basaltic lava flows quietly while "
    "andesitic eruptions explode with pumice, ash columns and pyroclastic surges.",
    "monsoons": "Monsoons reverse seasonal winds over the Indian subcontinent, bringing torrential summer "
    "rainfall that farmers depend upon for rice paddies and reservoirs.",
    "tsunamis": "Tsunamis follow undersea earthquakes that displace seawater; the waves travel across oceans "
    "at jetliner speed and rise into towering surges near shallow coastlines.",
    "auroras": "Auroras glow when charged solar wind particles strike oxygen and nitrogen high in the "
    "atmosphere, painting green curtains across polar skies during geomagnetic storms.",
    "geysers": "Geysers spout boiling water periodically because groundwater heated by buried magma "
    "chambers builds pressure in narrow plumbing until steam bursts upward.",
    "deltas": "River deltas spread sediment into fan shaped wetlands where distributary channels braid "
    "through marshes, mangroves and fertile alluvial farmland near estuaries.",
    "dunes": "Desert dunes migrate as prevailing winds push quartz grains up gentle windward slopes before "
    "avalanching down steep slipfaces, forming barchan crescents and star shapes.",
    "coral": "Coral reefs grow from colonies of polyps secreting limestone skeletons, sheltering parrotfish, "
    "sponges and anemones in warm clear tropical lagoons threatened by bleaching.",
    "caves": "Limestone caves dissolve slowly under acidic groundwater, decorating chambers with stalactites, "
    "stalagmites and flowstone while underground rivers echo through passages.",
}


def _write_notes(root: Path, topics: dict[str, str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for topic, text in topics.items():
        (root / f"{topic}.md").write_text(f"# Notes on {topic}\n\n{text}\n")


def _evaluate(resources: dict[str, Any]) -> tuple[Any, str]:
    outcome = build_index(resources)
    assert outcome.success and outcome.candidate is not None, outcome.run.run_id
    version = outcome.candidate.version
    # Only the served configuration: the gate's, and the quickest.
    run = evaluate_version(resources, version, configurations=[])
    assert run.success, run.run_id
    return run, version


@pytest.fixture(scope="module")
def flow(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("gold")
    notes, home = tmp / "notes", tmp / "home"
    _write_notes(notes, TOPICS)
    catalog = CatalogResource(format="files", path=str(notes))
    resources = deployment_resources(home, catalog)
    first, first_version = _evaluate(resources)
    # The evaluation job's gold step once more, as the next evaluation runs it.
    again = run_selection(AssetSelection.assets("gold_queries"), resources)
    assert again.success, again.run_id
    store, key = GoldStore(home / "gold"), catalog.gold_key()
    frozen = store.current(key)
    assert frozen is not None
    # A document that made a query is deleted; the next build's evaluation retires its query.
    deleted_doc = sorted(frozen.query_doc.values())[0]
    [path] = [p for p in notes.iterdir() if p.name in deleted_doc or deleted_doc.endswith(p.name)]
    path.unlink()
    after, after_version = _evaluate(resources)
    return {
        "home": home,
        "catalog": catalog,
        "key": key,
        "store": store,
        "frozen": frozen,
        "first": first,
        "first_version": first_version,
        "again": again,
        "after": after,
        "after_version": after_version,
        "deleted_doc": deleted_doc,
    }


def test_a_catalog_without_gold_is_judged_on_generated_known_item_gold(flow: dict[str, Any]) -> None:
    frozen = flow["frozen"]
    assert frozen.kind == "known_item" and len(frozen.queries) == len(TOPICS)
    gold = materialized(flow["first"], "gold_queries")
    assert gold["kind"] == "known_item" and gold["size"] == len(TOPICS) and gold["drawn"] is True
    assert gold["fingerprint"] == frozen.fingerprint[:16] and gold["retired"] == 0
    assert "known-item simulation" in gold["method"] and sum(gold["query_sources"].values()) == len(TOPICS)
    evaluation = materialized(flow["first"], "retrieval_evaluation")
    assert evaluation["evaluated"] is True and evaluation["gold_kind"] == "known_item"
    assert evaluation["gold"] == frozen.fingerprint[:16] and evaluation["queries"] == len(TOPICS)

    report = IndexVersions(flow["home"] / "indexes").version(flow["first_version"]).evaluation()
    assert report["gold"] == frozen.fingerprint[:16] and report["gold_kind"] == "known_item"
    assert report["gate"]["passed"], report["gate"]
    # No configuration is learned from generated gold: it would learn its lexical bias.
    learned = materialized(flow["first"], "retrieval_configuration")
    assert learned["adopted"] is False and "no gold people judged" in learned["reason"]


def test_the_gold_is_frozen_and_reused(flow: dict[str, Any]) -> None:
    again = materialized(flow["again"], "gold_queries")
    assert again["drawn"] is False and again["fingerprint"] == flow["frozen"].fingerprint[:16]
    assert again["retired"] == 0 and again["age_days"] >= 0


def test_a_deleted_documents_query_is_retired(flow: dict[str, Any]) -> None:
    current = flow["store"].current(flow["key"])
    retired = [qid for qid, doc in flow["frozen"].query_doc.items() if doc == flow["deleted_doc"]]
    assert current.retired == {qid: DELETED for qid in retired}
    assert set(current.queries) == set(flow["frozen"].queries) - set(retired)
    assert [change.action for change in current.history] == ["retire"]
    gold = materialized(flow["after"], "gold_queries")
    assert gold["retired"] == len(retired) and gold["drawn"] is False
    report = IndexVersions(flow["home"] / "indexes").version(flow["after_version"]).evaluation()
    assert report["gold"] == current.fingerprint[:16] and len(report["per_query"]) == len(TOPICS) - len(retired)
    # The promoted version was judged before the retirement: the paired test still compares the two,
    # on the queries both were judged on.
    assert report["compared_with"] == flow["first_version"] and report["gate"]["passed"], report["gate"]
    assert report["gate"]["paired"]["ndcg@10"]["queries"] == len(TOPICS) - len(retired)


def test_the_quality_history_names_the_gold_and_tells_no_promotion_it_cannot_know(flow: dict[str, Any]) -> None:
    rows = IndexVersions(flow["home"] / "indexes").quality_history()
    assert {row["gold_kind"] for row in rows} == {"known_item"} and all(row["gold"] for row in rows)
    evaluation_table = materialized(flow["after"], "retrieval_evaluation")["quality_history"]
    columns = [column.name for column in evaluation_table.schema.columns]
    assert "gold" in columns and "gold_kind" in columns and "promoted" not in columns
    promotion_table = materialized(flow["after"], "promoted_index")["quality_history"]
    [row] = [r for r in promotion_table.records if r.data["version"] == flow["after_version"]]
    assert row.data["promoted"] is True


def test_gold_add_then_show_and_the_gate_judges_the_curated_gold(flow: dict[str, Any], tmp_path: Path) -> None:
    # Runs last: it gives the catalog curated gold, which the flow's evaluations had not.
    env = _env(flow["home"], tmp_path / "dagster")
    source = flow["catalog"].path
    [caves] = [doc for doc in flow["frozen"].query_doc.values() if "caves" in doc and doc != flow["deleted_doc"]]
    added = cli(env, "gold", "add", "where do stalactites grow", "--expect", caves, "--grade", "2", "--source", source)
    assert added.returncode == 0, added.stderr
    curated = flow["home"] / "gold" / flow["key"] / "curated.csv"
    assert curated.read_text().splitlines() == ["query,expected_id,grade", f"where do stalactites grow,{caves},2"]
    shown = cli(env, "gold", "show", "--source", source)
    assert shown.returncode == 0, shown.stderr
    assert "kind: curated" in shown.stdout and "size: 1 queries" in shown.stdout
    assert f"curated file {curated}" in shown.stdout
    # The generated gold stays, judged beside the curated gold.
    assert "generated (judged beside it)" in shown.stdout

    resources = deployment_resources(flow["home"], flow["catalog"])
    run = evaluate_version(resources, flow["after_version"], configurations=[])
    assert run.success, run.run_id
    report = IndexVersions(flow["home"] / "indexes").version(flow["after_version"]).evaluation()
    assert report["gold_kind"] == "curated" and len(report["per_query"]) == 1
    # The learner reads the curated gold (one query: too few to learn from).
    assert "1 judged queries, fewer than" in materialized(run, "retrieval_configuration")["reason"]
    beside = report["generated_gold"]
    assert beside["kind"] == "known_item" and beside["queries"] == len(TOPICS) - 1
    assert beside["runs"][report["served"]]["ndcg@10"] > 0
    assert materialized(run, "retrieval_evaluation")["generated_gold/ndcg@10"] == beside["runs"][report["served"]][
        "ndcg@10"
    ]



def test_a_promoted_version_judged_on_other_gold_is_measured_again_on_the_candidates(
    flow: dict[str, Any], tmp_path: Path
) -> None:
    # Runs after the curated gold test: the curated gold grows by a query, then a changed catalog is built.
    env = _env(flow["home"], tmp_path / "dagster")
    source = flow["catalog"].path
    [glaciers] = [doc for doc in flow["frozen"].query_doc.values() if "glaciers" in doc]
    added = cli(env, "gold", "add", "how ice carves valleys", "--expect", glaciers, "--source", source)
    assert added.returncode == 0, added.stderr
    promoted = IndexVersions(flow["home"] / "indexes").version(flow["after_version"])
    judged_before = promoted.evaluation()
    _write_notes(Path(source), {"lagoons": "Lagoons form behind barrier islands where tides wash through inlets."})
    _, version = _evaluate(deployment_resources(flow["home"], flow["catalog"]))
    report = IndexVersions(flow["home"] / "indexes").version(version).evaluation()
    assert len(report["per_query"]) == 2 and report["gold"] != judged_before["gold"]
    # The promoted version was judged on the one-query gold: its figures on the two-query gold are
    # measured again, so the drop margins and the paired test compare the same two queries.
    assert report["compared_with"] == flow["after_version"] and report["promoted_remeasured"] is True
    assert report["gate"]["paired"]["ndcg@10"]["queries"] == 2
    assert report["gate"]["comparison"]["ndcg@10"]["promoted"] is not None
    assert promoted.evaluation() == judged_before  # its own report stays as it was judged
    # The generated gold beside the curated gold gates too, against the promoted version on the same queries
    beside = report["generated_gold"]
    # (the promoted version's own report has its per-query scores on that generated gold: nothing re-measured).
    assert beside["gate"]["passed"] and beside["promoted_remeasured"] is False
    assert beside["gate"]["paired"]["ndcg@10"]["queries"] == beside["queries"] == len(beside["per_query"])
    assert set(beside["gate"]["comparison"]) == {"ndcg@10", "recall@100"}  # latency is judged once, above


def test_a_candidate_the_curated_gold_passes_is_refused_when_the_generated_gold_falls(flow: dict[str, Any]) -> None:
    # Runs last: half the notes go, none that the two curated queries expect.
    notes = Path(flow["catalog"].path)
    curated = (flow["home"] / "gold" / flow["key"] / "curated.csv").read_text()
    gone = [path for path in sorted(notes.iterdir()) if path.stem not in curated][:5]
    for path in gone:
        path.unlink()
    resources = deployment_resources(flow["home"], flow["catalog"])
    outcome = build_index(resources)
    assert outcome.candidate is not None, outcome.run.run_id
    version = outcome.candidate.version
    evaluate_version(resources, version, configurations=[])  # fails: the blocking gate refuses
    report = IndexVersions(flow["home"] / "indexes").version(version).evaluation()
    assert not report["gate"]["passed"]
    assert report["gate"]["reasons"] and all(r.startswith("generated gold of ") for r in report["gate"]["reasons"])
    assert report["generated_gold"]["gate"]["passed"] is False
    assert IndexVersions(flow["home"] / "indexes").promoted().id != version


# --- the gold step alone, on a cleaned documents artifact written here -------------------------


def _documents(topics: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "doc_id": [f"{topic}.md" for topic in topics],
            "title": [f"Notes on {topic}" for topic in topics],
            "text": list(topics.values()),
            "tenant_id": "default",
            "metadata": "{}",
        }
    )


def _gold_step(resources: dict[str, Any], documents: pd.DataFrame, **config: Any) -> dict[str, Any]:
    artifacts = Path(resources["storage"].artifacts_dir)
    artifacts.mkdir(parents=True, exist_ok=True)
    documents.to_parquet(artifacts / "cleaned_documents.parquet")
    run = run_selection(
        AssetSelection.assets("gold_queries"), resources, run_config={"ops": {"gold_queries": {"config": config}}}
    )
    assert run.success, run.run_id
    return materialized(run, "gold_queries")


def test_a_build_that_loses_half_the_documents_retires_no_gold(tmp_path: Path) -> None:
    catalog = CatalogResource(format="files", path=str(tmp_path))
    resources = deployment_resources(tmp_path / "home", catalog)
    drawn = _gold_step(resources, _documents(TOPICS))
    assert drawn["drawn"] is True and drawn["size"] == len(TOPICS)
    half = dict(list(TOPICS.items())[: len(TOPICS) // 2])
    kept = _gold_step(resources, _documents(half))
    # Half the queries lost their documents at once: a broken build, which the gate has to see.
    assert kept["fingerprint"] == drawn["fingerprint"] and kept["retired"] == 0
    assert "not retired" in kept["warnings"]
    # Redrawn on purpose, the gold holds the documents that are left.
    redrawn = _gold_step(resources, _documents(half), redraw=True, seed=7)
    assert redrawn["drawn"] is True and redrawn["size"] == len(half)
    store = GoldStore(tmp_path / "home" / "gold")
    assert [change.action for change in store.current(catalog.gold_key()).history] == ["redraw"]


def test_an_unreachable_llm_falls_back_to_known_item_queries(tmp_path: Path) -> None:
    catalog = CatalogResource(format="files", path=str(tmp_path))
    resources = deployment_resources(tmp_path / "home", catalog)
    # Port 9 (discard) refuses connections at once: every question fails.
    resources["search"] = SearchResource(
        storage=resources["storage"],
        models=resources["models"],
        multi_query=MultiQueryConfig(llm_base_url="http://127.0.0.1:9/v1"),
    )
    gold = _gold_step(resources, _documents(TOPICS))
    assert gold["kind"] == "known_item" and gold["size"] == len(TOPICS)
    assert "LLM question failed, known-item query kept" in gold["warnings"]
    assert "llm" not in gold["query_sources"]

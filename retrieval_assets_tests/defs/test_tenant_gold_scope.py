"""One writer must not hold everyone's updates: the gate judges the catalog's gold among its own
tenant's documents only.

Through the product's jobs on a tiny real catalog (five gold queries): a hostile tenant posts 200
look-alikes of the documents the gold judges relevant (exact and near copies of their text), the
document update job builds, evaluates and promotes the next version, and the default tenant's gold
figures are exactly what they were, in every configuration measured. When the default tenant posts
the same look-alikes itself, its own figures fall, the gate refuses, and the evaluation says so:
whose gold, its figures before and after, and how many documents that tenant posted since the
promoted version.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance

from retrieval_assets.core.ingest.inbox import InboxEntry, InboxOperation
from retrieval_assets.defs.jobs import WHOLE_BUILD
from retrieval_assets.defs.resources import CatalogResource
from retrieval_assets.runs import build_index, deployment_resources, evaluate_version, materialized, run_selection

HOSTILE = "mallory"
LOOK_ALIKES = 200
# Besides the default configuration (which the gate judges): the single strategies (BM25's collection
# statistics, SPLADE, dense), vocabulary expansion and multi-query (pseudo-relevance feedback).
MEASURED = ["bm25", "dense", "splade", "hybrid+expansion", "hybrid+multi_query"]
UPDATE_CONFIG = {
    "ops": {
        "retrieval_evaluation": {"config": {"configurations": MEASURED}},
        "retrieval_configuration": {"config": {"reuse_promoted": True}},
    }
}
QUALITY = ("ndcg@10", "recall@100", "mrr@10")


def _look_alikes(catalog: Path, tenant: str, prefix: str, sender: str) -> list[InboxEntry]:
    """``LOOK_ALIKES`` posts copying the text of the documents the gold judges relevant: exact
    copies, then copies with a word or two changed or added."""
    relevant = {line.split("\t")[1] for line in (catalog / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    corpus = [json.loads(line) for line in (catalog / "corpus.jsonl").read_text().splitlines()[:-1]]
    originals = [doc for doc in corpus if doc["_id"] in relevant]
    entries = []
    for n in range(LOOK_ALIKES):
        doc = originals[n % len(originals)]
        variant = n // len(originals)
        text = doc["text"] if variant == 0 else f"{doc['text']} Replicated finding {variant}."
        record = {"_id": f"{prefix}-{n}", "title": doc.get("title", ""), "text": text}
        entries.append(
            InboxEntry.new(
                InboxOperation.UPSERT, record["_id"], tenant, format="beir", record=record, sender=sender
            )
        )
    return entries


def _figures(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    return {name: {m: run[m] for m in QUALITY} for name, run in report["runs"].items()}


@pytest.fixture(scope="module")
def flow(tiny_beir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Promoted; then a hostile tenant's look-alikes (promoted); then the default tenant's own (refused)."""
    root = tmp_path_factory.mktemp("tenant_scope")
    catalog = root / "catalog"
    shutil.copytree(tiny_beir, catalog)
    resources = deployment_resources(root / "home", CatalogResource(format="beir", path=str(catalog)))
    versions, inbox = resources["storage"].versions(), resources["catalog"].inbox()
    instance = DagsterInstance.ephemeral()
    built = build_index(resources, instance)
    assert built.success
    assert evaluate_version(resources, built.candidate.version, instance, configurations=MEASURED).success
    first = versions.promoted()
    assert first is not None and first.id == built.candidate.version

    inbox.append(_look_alikes(catalog, HOSTILE, "hostile", sender="mallory-key"))
    hostile_run = run_selection(WHOLE_BUILD, resources, instance, run_config=UPDATE_CONFIG)
    assert hostile_run.success, [e.step_failure_data.error.message for e in hostile_run.all_events if e.is_step_failure]
    second = versions.promoted()
    # The look-alikes do reach the index: unscoped, a copy of a relevant document is found.
    query = next(iter(json.loads(line)["text"] for line in (catalog / "queries.jsonl").read_text().splitlines()))
    unscoped = [hit.tenant_id for hit in resources["search"].search(query, top_k=10, rerank=False).hits]
    resources["search"].close()

    inbox.append(_look_alikes(catalog, "default", "own", sender="alice-key"))
    own_run = run_selection(WHOLE_BUILD, resources, instance, run_config=UPDATE_CONFIG)
    third = [v for v in versions.sealed() if v.id not in {first.id, second.id}]
    return {
        "first": first,
        "second": second,
        "third": third,
        "hostile_run": hostile_run,
        "own_run": own_run,
        "unscoped_tenants": unscoped,
        "versions": versions,
    }


def test_a_hostile_tenants_look_alikes_leave_the_default_tenants_gate_figures_unchanged(flow) -> None:
    first, second = flow["first"], flow["second"]
    assert HOSTILE in flow["unscoped_tenants"], flow["unscoped_tenants"]  # the attack is real
    assert second.id != first.id  # a new version with the posts in it, promoted: nobody's updates are held
    before, after = first.evaluation(), second.evaluation()
    assert after["gate"]["passed"], after["gate"]["reasons"]
    assert after["gold_scope"] == ["default"]
    # Equal, not approximately: the default tenant's figures in every configuration measured, per query too.
    assert _figures(after) == _figures(before)
    assert after["per_query"] == before["per_query"]
    # The evaluation says who posted what since the promoted version, and that it is outside the gold's scope.
    assert after["posted_since_promoted"] == [
        {"tenant_id": HOSTILE, "sender": "mallory-key", "operation": "upsert", "documents": LOOK_ALIKES,
         "in_gold_scope": False}
    ]
    shown = materialized(flow["hostile_run"], "retrieval_evaluation")
    assert shown["gold_scope"] == "tenant default" and "gate_refusal" not in shown


def test_a_tenant_whose_own_posts_lower_its_gold_is_told_why(flow) -> None:
    [third] = flow["third"]
    report = third.evaluation()
    assert not report["gate"]["passed"]
    assert flow["versions"].promoted().id == flow["second"].id  # refused: serving stays
    comparison = report["gate"]["comparison"]["ndcg@10"]
    said = report["explanation"]
    assert said.startswith(
        f"gold of tenant default: nDCG@10 {comparison['promoted']:.4f} → {comparison['candidate']:.4f}"
    ), said
    assert f"documents posted by tenant default since the promoted version {flow['second'].id}: {LOOK_ALIKES}" in said
    assert "alice-key" in said
    assert all(reason.startswith("gold of tenant default: ") or "P95" in reason for reason in report["gate"]["reasons"])
    # The UI shows it: on the evaluation's materialization and on its promotion_gate check.
    shown = materialized(flow["own_run"], "retrieval_evaluation")
    assert shown["gate_refusal"] == said
    [check] = [c for c in flow["own_run"].get_asset_check_evaluations() if c.check_name == "promotion_gate"]
    assert not check.passed and check.metadata["why"].value == said
    refused = [e for e in flow["versions"].history() if e["event"] == "refused" and e["version"] == third.id]
    assert refused and refused[-1]["explanation"] == said and refused[-1]["gold_scope"] == ["default"]


def test_generated_gold_is_not_drawn_from_other_tenants_posts(tmp_path: Path) -> None:
    import pandas as pd

    from retrieval_assets.defs.assets.gold import _catalog_documents, catalog_tenants

    catalog = CatalogResource(format="beir", path=str(tmp_path / "catalog"), inbox_dir=str(tmp_path / "inbox"))
    (tmp_path / "inbox").mkdir()
    catalog.inbox().append([
        InboxEntry.new(InboxOperation.UPSERT, doc_id, tenant, format="beir", record={"_id": doc_id, "text": "x"})
        for doc_id, tenant in (("own-1", "default"), ("theirs-1", HOSTILE))
    ])
    frame = pd.DataFrame({"doc_id": ["d1", "own-1", "theirs-1"], "tenant_id": ["default", "default", HOSTILE]})
    assert catalog_tenants(catalog) == ["default"]
    assert list(_catalog_documents(frame, catalog)["doc_id"]) == ["d1", "own-1"]

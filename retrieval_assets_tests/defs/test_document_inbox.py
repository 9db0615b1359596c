"""Posted documents through the product's jobs on a tiny real catalog: the inbox sensor asks for
a build, document_update_job builds, evaluates and promotes it, the entries are archived with
their outcomes, and the served index answers with the new, changed and deleted documents. A
build killed while archiving takes every entry on the re-run, once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from dagster import DagsterInstance, build_sensor_context

from retrieval_assets.core.faults import FAULT_ENV, INBOX_FAULT_POINT
from retrieval_assets.core.ingest.inbox import (
    InboxEntry,
    InboxOperation,
    InboxOutcome,
    document_status,
)
from retrieval_assets.defs.jobs import DOCUMENT_UPDATE_CONFIG, WHOLE_BUILD
from retrieval_assets.defs.resources import CatalogResource
from retrieval_assets.defs.sensors import document_inbox_sensor
from retrieval_assets.runs import (
    build_index,
    deployment_resources,
    evaluate_version,
    run_selection,
)
from retrieval_assets_tests.forked import Zygote

NEW_TEXT = "Axolotl limb regeneration relies on positional memory in connective tissue fibroblasts."


def _upsert(doc_id: str, text: str, tenant: str = "default") -> InboxEntry:
    record = {"_id": doc_id, "title": "", "text": text}
    return InboxEntry.new(InboxOperation.UPSERT, doc_id, tenant, format="beir", record=record)


def _served_home(tiny_beir: Path, root: Path) -> tuple[dict, DagsterInstance, list[dict]]:
    catalog = root / "catalog"
    shutil.copytree(tiny_beir, catalog)
    resources = deployment_resources(root / "home", CatalogResource(format="beir", path=str(catalog)))
    instance = DagsterInstance.ephemeral()
    built = build_index(resources, instance)
    # The default configuration only: the gate judges it, and nothing here reads the others.
    assert evaluate_version(resources, built.candidate.version, instance, configurations=[]).success
    corpus = [json.loads(line) for line in (catalog / "corpus.jsonl").read_text().splitlines()[:-1]]
    return resources, instance, corpus


@pytest.fixture(scope="module")
def served(tiny_beir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """A home serving a promoted version of the tiny catalog, built once and copied per test."""
    root = tmp_path_factory.mktemp("served")
    _, _, corpus = _served_home(tiny_beir, root)
    return root, corpus


def _copy(served: tuple[Path, list[dict]], tmp_path: Path) -> tuple[dict, list[dict]]:
    root, corpus = served
    shutil.copytree(root, tmp_path, dirs_exist_ok=True)
    resources = deployment_resources(tmp_path / "home", CatalogResource(format="beir", path=str(tmp_path / "catalog")))
    return resources, corpus


def _failures(run) -> list[str]:
    return [event.step_failure_data.error.message for event in run.all_events if event.is_step_failure]


def _found(resources: dict, query: str, tenant: str = "default") -> list[str]:
    return [hit.doc_id for hit in resources["search"].search(query, top_k=5, tenant_id=tenant, rerank=False).hits]


def test_posted_documents_are_built_evaluated_promoted_and_archived(served, tmp_path: Path) -> None:
    resources, corpus = _copy(served, tmp_path)
    catalog, versions = resources["catalog"], resources["storage"].versions()
    before = versions.promoted()
    # Distractors only (the last documents are not judged), so the gate compares like with like.
    changed, deleted = corpus[-2], corpus[-1]
    entries = [
        _upsert("posted-1", NEW_TEXT),
        _upsert(changed["_id"], "Zebrafish heart regeneration after cryoinjury needs epicardial signalling."),
        InboxEntry.new(InboxOperation.DELETE, deleted["_id"], "default"),
        _upsert(corpus[0]["_id"], "Quokka burrows: acme's own document under the default tenant's id.", tenant="acme"),
    ]
    inbox = catalog.inbox()
    inbox.append(entries)

    instance = DagsterInstance.ephemeral()
    tick = document_inbox_sensor.evaluate_tick(build_sensor_context(instance=instance, resources={"catalog": catalog}))
    [request] = tick.run_requests
    assert request.tags["inbox_pending"] == "4"
    again = build_sensor_context(instance=instance, resources={"catalog": catalog}, cursor=tick.cursor)
    assert not document_inbox_sensor.evaluate_tick(again).run_requests  # requested already

    run = run_selection(WHOLE_BUILD, resources, instance, run_config=DOCUMENT_UPDATE_CONFIG)  # document_update_job
    assert run.success, _failures(run)
    promoted = versions.promoted()
    assert promoted.id != before.id
    assert inbox.pending() == []
    outcomes = {entry.doc_id: (entry.outcome, entry.reason, entry.version) for entry in inbox.archived()}
    assert outcomes == {
        "posted-1": (InboxOutcome.INDEXED, None, promoted.id),
        changed["_id"]: (InboxOutcome.INDEXED, None, promoted.id),
        deleted["_id"]: (InboxOutcome.DELETED, None, promoted.id),
        corpus[0]["_id"]: (InboxOutcome.INDEXED, None, promoted.id),  # acme's own, in acme's namespace
    }
    statuses = {e.doc_id: document_status(e, promoted).status for e in inbox.archived()}
    assert statuses == {
        "posted-1": "indexed",
        changed["_id"]: "indexed",
        deleted["_id"]: "deleted",
        corpus[0]["_id"]: "indexed",
    }

    assert _found(resources, "axolotl limb regeneration positional memory")[0] == "posted-1"
    assert _found(resources, "zebrafish heart cryoinjury epicardial")[0] == changed["_id"]
    assert deleted["_id"] not in _found(resources, deleted["title"] or deleted["text"][:200])
    assert _found(resources, "axolotl limb regeneration", tenant="acme") == [corpus[0]["_id"]]  # acme's only one
    assert _found(resources, "quokka burrows", tenant="acme") == [corpus[0]["_id"]]
    assert "Quokka" not in resources["search"].service.fetch_document(corpus[0]["_id"], "default").payload["text"]

    # The next build replays the archive: the posted document stays, nothing is taken twice.
    rebuilt = build_index(resources, instance)
    assert rebuilt.success, _failures(rebuilt.run)
    assert rebuilt.candidate.version == promoted.id and rebuilt.candidate.reused
    assert len(inbox.archived()) == len(entries)


def test_a_build_killed_while_archiving_takes_every_entry_on_the_rerun_once(
    served, tmp_path: Path, zygote: Zygote
) -> None:
    resources, _ = _copy(served, tmp_path)
    inbox = resources["catalog"].inbox()
    entries = [_upsert(f"posted-{n}", f"{NEW_TEXT} Variant {n}.") for n in range(3)]
    inbox.append(entries)
    child = zygote.run(_CHILD, str(tmp_path / "home"), str(tmp_path / "catalog"), env={FAULT_ENV: INBOX_FAULT_POINT})
    assert child.returncode == -9, f"not killed while archiving: exit {child.returncode}\n{child.output[-3000:]}"
    # Killed between writing the archive and rewriting pending: the receipts are in both files.
    assert {e.receipt for e in inbox.archived()} == {e.receipt for e in entries}
    assert inbox.pending() == []  # pending() already leaves archived receipts out

    inbox.append([late := _upsert("posted-late", "Posted while the build was down.")])
    rerun = build_index(resources)
    assert rerun.success, _failures(rerun.run)
    archived = [e.receipt for e in inbox.archived()]
    assert sorted(archived) == sorted([e.receipt for e in entries] + [late.receipt])  # each once
    assert inbox.pending() == []


_CHILD = """
import sys
from retrieval_assets.defs.resources import CatalogResource
from retrieval_assets.runs import build_index, deployment_resources
build_index(deployment_resources(sys.argv[1], CatalogResource(format="beir", path=sys.argv[2])))
"""

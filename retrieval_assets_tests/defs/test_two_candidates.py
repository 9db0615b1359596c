"""Two candidates built back to back into one home, evaluated in the opposite order: each
evaluation judges the version named in its run tag, not the IO manager's last ``index_version``
output. And the candidate sensor skips an unsealed version."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from dagster import (
    AssetKey,
    AssetMaterialization,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    build_sensor_context,
)

from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.defs.assets.evaluation import EVALUATED_VERSION_TAG, newer_candidate
from retrieval_assets.defs.jobs import EVALUATION
from retrieval_assets.defs.resources import CatalogResource, IndexStorageResource
from retrieval_assets.defs.sensors import candidate_evaluation_sensor
from retrieval_assets.runs import deployment_resources, evaluate_version, materialized, run_selection
from retrieval_assets_tests.builds import build_catalog


def _shrunk_copy(source: Path, target: Path, drop_last_docs: int) -> Path:
    """Another catalog (without the last few distractors) with the same gold queries."""
    shutil.copytree(source, target)
    lines = (source / "corpus.jsonl").read_text().splitlines()
    docs, broken = lines[:-1], lines[-1]
    (target / "corpus.jsonl").write_text("\n".join([*docs[:-drop_last_docs], broken]) + "\n")
    return target


def test_each_evaluation_judges_the_version_in_its_tag(tiny_beir, tmp_path):
    home = tmp_path / "home"
    catalogs = [tiny_beir, _shrunk_copy(tiny_beir, tmp_path / "tiny_beir_b", drop_last_docs=4)]
    resources = [deployment_resources(home, CatalogResource(format="beir", path=str(c))) for c in catalogs]
    first = build_catalog(home, catalogs[0], catalog_format="beir")[1].id
    second = build_catalog(home, catalogs[1], catalog_format="beir")[1].id
    assert first != second
    versions = IndexVersions(home / "indexes")

    # The IO manager's stored index_version record (what an untagged evaluation loads) is the second.
    record = json.loads((home / "artifacts" / "index_version.json").read_text())
    assert record["fields"]["version"] == second

    instance = DagsterInstance.ephemeral()
    # Second first, then the first; the default configuration only (what the gate judges): which
    # version a run judges does not depend on how many configurations it measures.
    run_second = evaluate_version(resources[1], second, instance, configurations=[])
    assert run_second.success, run_second.run_id
    report_second = versions.version(second).evaluation()
    assert report_second["version"] == second

    run_first = evaluate_version(resources[0], first, instance, configurations=[])
    assert run_first.dagster_run.tags[EVALUATED_VERSION_TAG] == first
    report_first = versions.version(first).evaluation()
    assert report_first is not None and report_first["version"] == first
    evaluated = materialized(run_first, "retrieval_evaluation")
    assert evaluated["version"] == first
    assert Path(evaluated["report_path"]).parent == versions.version(first).path
    # Judged against the promoted second version (the gate may refuse it: that is its verdict on the first).
    assert report_first["compared_with"] in (second, None)
    if report_first["gate"]["passed"]:
        assert materialized(run_first, "promoted_index")["version"] == first
        assert versions.promoted().id == first
    else:
        assert not materialized(run_first, "promoted_index")
        assert versions.promoted().id == second
    # The first run left the second version's report alone, although the IO manager still holds the second.
    assert versions.version(second).evaluation() == report_second
    assert json.loads((home / "artifacts" / "index_version.json").read_text())["fields"]["version"] == second

    # Without the tag, the evaluation judges the IO manager's record: the second version.
    untagged = run_selection(
        EVALUATION,
        resources[1],
        instance,
        run_config={"ops": {"retrieval_evaluation": {"config": {"configurations": ["hybrid"]}}}},
    )
    assert EVALUATED_VERSION_TAG not in untagged.dagster_run.tags
    assert materialized(untagged, "retrieval_evaluation")["version"] == second
    assert versions.version(first).evaluation() == report_first


def _tick(instance: DagsterInstance, home: Path):
    storage = IndexStorageResource(home=str(home))
    context = build_sensor_context(instance=instance, resources={"storage": storage})
    return candidate_evaluation_sensor.evaluate_tick(context)


def test_sensor_skips_an_unsealed_candidate(tmp_path):
    with DagsterInstance.ephemeral() as instance:
        instance.report_runless_asset_event(
            AssetMaterialization(AssetKey("index_version"), metadata={"version": "v-unsealed", "sealed": False})
        )
        tick = _tick(instance, tmp_path)
        assert not tick.run_requests
        assert tick.skip_message and "not sealed" in tick.skip_message and "v-unsealed" in tick.skip_message

    # The same event, sealed and not yet evaluated: the sensor asks for its evaluation.
    with DagsterInstance.ephemeral() as instance:
        instance.report_runless_asset_event(
            AssetMaterialization(AssetKey("index_version"), metadata={"version": "v-sealed", "sealed": True})
        )
        tick = _tick(instance, tmp_path)
        assert len(tick.run_requests) == 1
        assert tick.run_requests[0].tags[EVALUATED_VERSION_TAG] == "v-sealed"

        # A second build of the same version while its evaluation runs: asked once.
        instance.add_run(DagsterRun(job_name="evaluation_job", run_id="queued-evaluation",
                                    tags={EVALUATED_VERSION_TAG: "v-sealed"}, status=DagsterRunStatus.STARTED))
        instance.report_runless_asset_event(
            AssetMaterialization(AssetKey("index_version"), metadata={"version": "v-sealed", "sealed": True})
        )
        tick = _tick(instance, tmp_path)
        assert not tick.run_requests
        assert tick.skip_message == "candidate v-sealed is being evaluated already (run queued-evaluation)"


def test_a_candidate_superseded_by_a_later_sealed_build_is_not_the_newest():
    """What promoted_index asks before it promotes: an older build's evaluation that runs after a
    newer candidate was sealed must not undo it (on the production instance queued evaluations
    run in whatever order the pool lets them)."""
    with DagsterInstance.ephemeral() as instance:
        def sealed(version: str, is_sealed: bool = True) -> None:
            instance.report_runless_asset_event(
                AssetMaterialization(AssetKey("index_version"), metadata={"version": version, "sealed": is_sealed})
            )

        assert newer_candidate(instance, "v-a") is None  # no build recorded: nothing to compare with
        sealed("v-a")
        sealed("v-b", is_sealed=False)  # an unsealed build supersedes nothing
        assert newer_candidate(instance, "v-a") is None
        sealed("v-c")
        assert newer_candidate(instance, "v-a") == "v-c"
        assert newer_candidate(instance, "v-c") is None
        sealed("v-a")  # a build that reuses v-a (an edit undone) makes it the newest again
        assert newer_candidate(instance, "v-a") is None

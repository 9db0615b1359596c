"""The nightly flow under Dagster's real multiprocess executor on a real (SQLite) instance:
``index_build_job`` runs each step in its own process on a tiny catalog and seals a version; the
candidate sensor asks for that version's evaluation, and running it promotes the version.

The code location's catalog resource only has its default path, so the job is reconstructed in
each step process from this module, with its resources pointed by environment variables at the
tiny catalog and a temporary home.
"""

from __future__ import annotations

import os
import shutil

from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    Definitions,
    build_sensor_context,
    define_asset_job,
    execute_job,
    reconstructable,
)

from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.definitions import ASSETS
from retrieval_assets.defs.assets.evaluation import EVALUATED_VERSION_TAG
from retrieval_assets.defs.jobs import BUILD, EVALUATION
from retrieval_assets.defs.resources import CatalogResource
from retrieval_assets.defs.sensors import candidate_evaluation_sensor
from retrieval_assets.paths import PROJECT_ROOT
from retrieval_assets.runs import deployment_resources, run_selection
from retrieval_assets_tests.builds import GATE_ONLY

HOME_VAR = "RETRIEVAL_ASSETS_TEST_HOME"
CATALOG_VAR = "RETRIEVAL_ASSETS_TEST_CATALOG"


def _resources() -> dict:
    return deployment_resources(
        os.environ[HOME_VAR], CatalogResource(format="beir", path=os.environ[CATALOG_VAR])
    )


def nightly_build_job():
    """``index_build_job``'s selection over the product's assets, resolved in whichever process
    imports this (the test, then each step's process)."""
    defs = Definitions(
        assets=ASSETS,
        jobs=[define_asset_job("index_build_job", selection=BUILD)],
        resources=_resources(),
    )
    return defs.resolve_job_def("index_build_job")


def test_nightly_build_in_separate_processes_then_sensor_evaluation_promotes(tiny_beir, tmp_path, monkeypatch):
    home, dagster_home = tmp_path / "home", tmp_path / "dagster_home"
    dagster_home.mkdir()
    shutil.copy(PROJECT_ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
    monkeypatch.setenv(HOME_VAR, str(home))
    monkeypatch.setenv(CATALOG_VAR, str(tiny_beir))
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")

    with DagsterInstance.get() as instance:
        # forkserver preloading this module instead of the default spawn: each step's process still
        # starts without the test's state and reconstructs the job, but does not import Dagster and
        # the definitions anew (~7 s a step).
        executor = {"max_concurrent": 2, "start_method": {"forkserver": {"preload_modules": [__name__]}}}
        run_config = {"execution": {"config": {"multiprocess": executor}}}
        with execute_job(reconstructable(nightly_build_job), instance=instance, run_config=run_config) as result:
            assert result.success, [e.message for e in result.all_events if e.is_failure]
            run_id = result.run_id

        # The steps ran under the multiprocess executor, each in a process of its own.
        engine = [e.message or "" for e in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)]
        assert any("multiprocess executor" in message for message in engine), engine
        starts = instance.all_logs(run_id, of_type=DagsterEventType.STEP_START)
        assert len(starts) > 3
        step_pids = {entry.dagster_event.pid for entry in starts}
        assert None not in step_pids and os.getpid() not in step_pids
        assert len(step_pids) > 1, step_pids
        assert len(step_pids) == len({entry.step_key for entry in starts}), "one process per step"

        # A sealed version exists, and the build recorded it on index_version.
        versions = IndexVersions(home / "indexes")
        sealed = versions.sealed()
        assert len(sealed) == 1
        version = sealed[0].id
        materialization = instance.get_latest_materialization_event(AssetKey("index_version")).asset_materialization
        assert materialization.metadata["version"].value == version
        assert materialization.metadata["sealed"].value is True
        assert versions.promoted() is None

        # The candidate sensor asks for this version's evaluation ...
        resources = _resources()
        context = build_sensor_context(instance=instance, resources={"storage": resources["storage"]})
        tick = candidate_evaluation_sensor.evaluate_tick(context)
        assert len(tick.run_requests) == 1, tick.skip_message
        request = tick.run_requests[0]
        assert request.tags[EVALUATED_VERSION_TAG] == version

        # ... and running it (in process, on the same instance, with the request's tags) promotes it;
        # the default configuration only, which the gate judges (all of them rerank every gold query).
        evaluation = run_selection(EVALUATION, resources, instance, tags=request.tags, run_config=GATE_ONLY)
        assert evaluation.success, evaluation.run_id
        promoted = versions.promoted()
        assert promoted is not None and promoted.id == version
        assert versions.version(version).evaluation()["version"] == version

        # Evaluated now: a second tick for the same materialization asks for nothing more.
        again = candidate_evaluation_sensor.evaluate_tick(
            build_sensor_context(instance=instance, resources={"storage": resources["storage"]})
        )
        assert not again.run_requests

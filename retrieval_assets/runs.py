"""The product's jobs, run in this process on a Dagster instance.

The bench commands and the tests build and evaluate through these (``retrieval-assets run``
executes the jobs themselves): the same asset graph (``retrieval_assets.defs``) that scheduled and
UI-launched runs materialize, so no step of a build exists anywhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagster import (
    AssetKey,
    AssetSelection,
    DagsterEventType,
    DagsterInstance,
    Definitions,
    ExecuteInProcessResult,
    JobDefinition,
    define_asset_job,
)

from retrieval_assets.core.index.versions import CandidateRecord
from retrieval_assets.definitions import ASSETS
from retrieval_assets.defs.assets.evaluation import EVALUATED_VERSION_TAG
from retrieval_assets.defs.io_manager import stored_value
from retrieval_assets.defs.jobs import BUILD, EVALUATION
from retrieval_assets.defs.resources import (
    CatalogResource,
    ModelResource,
    code_location_resources,
)


def deployment_resources(
    home: str | Path, catalog: CatalogResource, models: ModelResource | None = None, **overrides: Any
) -> dict[str, Any]:
    """The code location's resources with artifacts and indexes under ``home`` and this catalog
    (embedded engines only: servers named in the environment are left alone)."""
    build = overrides.pop("build", None)
    return {
        **code_location_resources(str(home), catalog, models, build, environment=False),
        **overrides,
    }


# The name materialize() gives the job of a selection, kept so runs read the same in the UI.
SELECTION_JOB = "__ephemeral_asset_job__"


def run_job(
    job: JobDefinition,
    instance: DagsterInstance,
    run_config: Mapping[str, Any] | None = None,
    tags: Mapping[str, str] | None = None,
) -> ExecuteInProcessResult:
    """``job.execute_in_process(raise_on_error=False)``, holding no step's output in memory.

    Dagster's in-process API keeps every step's output value until its result is dropped, with
    no switch for it, so a build held all of its tables at once (raw catalog, cleaned documents,
    chunks, both embedding tables). This calls the function it wraps with capturing off (dagster
    is pinned; ``test_runs.py`` fails if outputs are held again). Values are read back from the
    IO manager's store (``stored_value``).
    """
    from dagster._core.definitions.job_base import InMemoryJob
    from dagster._core.execution.execute_in_process import core_execute_in_process

    return core_execute_in_process(
        run_config=dict(run_config or {}),
        job=InMemoryJob(job.as_ephemeral_job(resource_defs={}, input_values={})),
        instance=instance,
        output_capturing_enabled=False,
        raise_on_error=False,
        run_tags={**job.run_tags, **(tags or {})},
        asset_selection=frozenset(),
    )


def run_selection(
    selection: AssetSelection,
    resources: Mapping[str, Any],
    instance: DagsterInstance | None = None,
    tags: Mapping[str, str] | None = None,
    run_config: Mapping[str, Any] | None = None,
) -> ExecuteInProcessResult:
    """``selection`` materialized in this process, as ``dagster.materialize`` does, through ``run_job``."""
    defs = Definitions(
        jobs=[define_asset_job(SELECTION_JOB, selection=selection)], assets=ASSETS, resources=dict(resources)
    )
    return run_job(defs.resolve_job_def(SELECTION_JOB), instance or DagsterInstance.ephemeral(), run_config, tags)


@dataclass(frozen=True)
class BuildOutcome:
    """What one run of the build selection did, read from its own events."""

    run: ExecuteInProcessResult
    candidate: CandidateRecord | None  # None when the run failed before sealing
    documents: int
    quarantined: int
    chunks: int
    # Texts sent to each encoder: "dense", "sparse" and "vocabulary" terms.
    encoded: dict[str, int]
    # Wall seconds of each step (asset) of the run.
    step_seconds: dict[str, float]

    @property
    def success(self) -> bool:
        return self.run.success


def materialized(run: ExecuteInProcessResult, asset: str) -> dict[str, Any]:
    """The metadata values of ``asset``'s materialization in ``run`` ({} when it did not materialize)."""
    for event in run.get_asset_materialization_events():
        if event.asset_key == AssetKey(asset):
            return {key: value.value for key, value in event.materialization.metadata.items()}
    return {}


def step_seconds(run: ExecuteInProcessResult, instance: DagsterInstance) -> dict[str, float]:
    started: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for entry in instance.all_logs(run.run_id, of_type={DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS}):
        step, event = entry.step_key, entry.dagster_event
        if step is None or event is None:  # never for the step events asked for
            continue
        if event.event_type == DagsterEventType.STEP_START:
            started[step] = entry.timestamp
        elif step in started:
            seconds[step] = round(entry.timestamp - started[step], 3)
    return seconds


def build_index(resources: Mapping[str, Any], instance: DagsterInstance | None = None) -> BuildOutcome:
    """``index_build_job``'s selection: ingest, clean, chunk, embed what changed, write and seal a candidate."""
    instance = instance or DagsterInstance.ephemeral()
    run = run_selection(BUILD, resources, instance)
    sealed = materialized(run, "index_version")
    cleaned, chunks = materialized(run, "cleaned_documents"), materialized(run, "chunks")
    return BuildOutcome(
        run=run,
        candidate=stored_value(resources["storage"].artifacts_dir, "index_version") if sealed else None,
        documents=int(cleaned.get("documents", 0)),
        quarantined=int(cleaned.get("quarantined", 0)),
        chunks=int(chunks.get("chunks", 0)),
        encoded={
            "dense": int(materialized(run, "dense_embeddings").get("encoded", 0)),
            "sparse": int(materialized(run, "sparse_embeddings").get("encoded", 0)),
            "vocabulary": int(materialized(run, "vocabulary").get("terms_encoded", 0)),
        },
        step_seconds=step_seconds(run, instance),
    )


def evaluate_version(
    resources: Mapping[str, Any],
    version: str,
    instance: DagsterInstance | None = None,
    configurations: list[str] | None = None,
) -> ExecuteInProcessResult:
    """``evaluation_job``'s selection for ``version``, tagged as the candidate sensor tags it:
    evaluation (of ``configurations``, or all), the blocking promotion gate, and promotion when
    it passes."""
    config = {} if configurations is None else {"configurations": configurations}
    return run_selection(
        EVALUATION,
        resources,
        instance,
        tags={EVALUATED_VERSION_TAG: version},
        run_config={"ops": {"retrieval_evaluation": {"config": config}}},
    )

"""Sensors: evaluate each new candidate version; take in posted documents; register catalog
sources as partitions."""

import json
import time

from dagster import (
    AssetKey,
    DagsterRunStatus,
    DefaultSensorStatus,
    EventLogEntry,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    asset_sensor,
    sensor,
)

from retrieval_assets.defs.assets.evaluation import EVALUATED_VERSION_TAG
from retrieval_assets.defs.jobs import document_update_job, evaluation_job
from retrieval_assets.defs.partitions import CATALOG_SOURCES, catalog_sources
from retrieval_assets.defs.resources import CatalogResource, IndexStorageResource

UNFINISHED = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]
# A build requested for the same pending documents is requested again after this long (it failed
# or was cancelled); run retries cover crashes before that.
RE_REQUEST_SECONDS = 600


@asset_sensor(
    asset_key=AssetKey("index_version"),
    job=evaluation_job,
    minimum_interval_seconds=5,
    default_status=DefaultSensorStatus.RUNNING,
    description="Starts evaluation_job for every sealed candidate that is not served yet, unless its own run "
    "evaluates it (document_update_job).",
)
def candidate_evaluation_sensor(
    context: SensorEvaluationContext, asset_event: EventLogEntry, storage: IndexStorageResource
):
    materialization = asset_event.asset_materialization
    metadata = materialization.metadata if materialization else {}
    version_id, sealed = str(metadata["version"].value), metadata["sealed"].value
    if not sealed:
        return SkipReason(f"candidate {version_id} is not sealed (its backends disagree): nothing to evaluate")
    run = context.instance.get_run_by_id(asset_event.run_id)
    # A whole job run may leave asset_selection unset, so its name says it too.
    if run is not None and (
        run.job_name == document_update_job.name or AssetKey("retrieval_evaluation") in (run.asset_selection or set())
    ):
        return SkipReason(f"candidate {version_id} is evaluated by the run that built it ({run.job_name})")
    versions = storage.versions()
    promoted = versions.promoted()
    if promoted is not None and promoted.id == version_id:
        return SkipReason(
            f"candidate {version_id} is the promoted version already (an unchanged catalog rebuilds nothing)"
        )
    # Two builds that sealed the same version (launched together, or an unchanged catalog) ask once.
    pending = context.instance.get_runs(
        RunsFilter(job_name=evaluation_job.name, tags={EVALUATED_VERSION_TAG: version_id}, statuses=UNFINISHED),
        limit=1,
    )
    if pending:
        return SkipReason(f"candidate {version_id} is being evaluated already (run {pending[0].run_id})")
    # A reused version that is not served (an edit undone, a rollback) is judged again against what is served.
    return RunRequest(run_key=f"evaluate-{version_id}-{asset_event.run_id}", tags={EVALUATED_VERSION_TAG: version_id})


@sensor(
    job=document_update_job,
    minimum_interval_seconds=5,
    default_status=DefaultSensorStatus.RUNNING,
    description="Starts document_update_job when documents are pending in the inbox: at most one build per "
    "catalog.inbox_build_interval_seconds, at once past catalog.inbox_build_at_pending, never two at a time.",
)
def document_inbox_sensor(context: SensorEvaluationContext, catalog: CatalogResource):
    inbox = catalog.inbox()
    pending = inbox.pending() if inbox else []
    if not pending:
        return SkipReason("no document pending in the inbox")
    running = context.instance.get_runs(
        filters=RunsFilter(job_name=document_update_job.name, statuses=UNFINISHED), limit=1
    )
    if running:
        return SkipReason(f"{len(pending)} pending; build {running[0].run_id} is running, the next one takes them")
    cursor = json.loads(context.cursor) if context.cursor else {}
    waited = time.time() - cursor.get("requested_at", 0.0)
    newest = pending[-1].receipt
    if cursor.get("requested_through") == newest and waited < RE_REQUEST_SECONDS:
        return SkipReason(f"a build for these {len(pending)} pending documents was requested {waited:.0f} s ago")
    interval, at_pending = catalog.inbox_build_interval_seconds, catalog.inbox_build_at_pending
    if len(pending) < at_pending and waited < interval:
        return SkipReason(
            f"{len(pending)} pending; next build in {interval - waited:.0f} s "
            f"(at most one per {interval} s, at once at {at_pending} pending)"
        )
    context.update_cursor(json.dumps({"requested_through": newest, "requested_at": time.time()}))
    context.log.info(f"starting a build for {len(pending)} pending documents")
    return RunRequest(run_key=f"inbox-{newest}-{int(time.time())}", tags={"inbox_pending": str(len(pending))})


@sensor(
    minimum_interval_seconds=300,
    default_status=DefaultSensorStatus.RUNNING,
    description="Adds a catalog_sources partition for every configured or newly dropped-in catalog, and the inbox.",
)
def catalog_source_sensor(context: SensorEvaluationContext, catalog: CatalogResource):
    known = set(context.instance.get_dynamic_partitions(CATALOG_SOURCES))
    new = [name for name in catalog.sources() if name not in known]
    if not new:
        return SkipReason("no new catalog source")
    context.log.info(f"new catalog sources: {', '.join(new)}")
    return SensorResult(dynamic_partitions_requests=[catalog_sources.build_add_request(new)])

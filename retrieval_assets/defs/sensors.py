"""Sensors: evaluate each new candidate version; register catalog sources as partitions."""


from dagster import (
    AssetKey,
    DefaultSensorStatus,
    EventLogEntry,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    asset_sensor,
    sensor,
)

from retrieval_assets.defs.assets.evaluation import EVALUATED_VERSION_TAG
from retrieval_assets.defs.jobs import evaluation_job
from retrieval_assets.defs.partitions import catalog_sources
from retrieval_assets.defs.resources import CatalogResource, IndexStorageResource


@asset_sensor(
    asset_key=AssetKey("index_version"),
    job=evaluation_job,
    default_status=DefaultSensorStatus.RUNNING,
    description="Starts evaluation_job for every sealed candidate that has not been evaluated yet.",
)
def candidate_evaluation_sensor(
    context: SensorEvaluationContext, asset_event: EventLogEntry, storage: IndexStorageResource
):
    materialization = asset_event.asset_materialization
    metadata = materialization.metadata if materialization else {}
    version_id, sealed = metadata["version"].value, metadata["sealed"].value
    if not sealed:
        return SkipReason(f"candidate {version_id} is not sealed (its backends disagree): nothing to evaluate")
    if storage.versions().version(str(version_id)).evaluation() is not None:
        return SkipReason(f"candidate {version_id} was evaluated already (an unchanged catalog rebuilds nothing)")
    return RunRequest(run_key=f"evaluate-{version_id}-{asset_event.run_id}", tags={EVALUATED_VERSION_TAG: str(version_id)})


@sensor(
    minimum_interval_seconds=300,
    default_status=DefaultSensorStatus.RUNNING,
    description="Adds a catalog_sources partition for every configured or newly dropped-in catalog.",
)
def catalog_source_sensor(context: SensorEvaluationContext, catalog: CatalogResource):
    known = set(context.instance.get_dynamic_partitions(catalog_sources.name))
    new = [name for name in catalog.sources() if name not in known]
    if not new:
        return SkipReason("no new catalog source")
    context.log.info(f"new catalog sources: {', '.join(new)}")
    return SensorResult(dynamic_partitions_requests=[catalog_sources.build_add_request(new)])

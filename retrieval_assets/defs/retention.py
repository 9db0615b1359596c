"""Run retention: Dagster keeps every run and its event log forever (its ``retention`` setting
covers schedule and sensor ticks only), so on a nightly cadence the run storage grows without
bound. ``run_retention_job`` deletes finished runs older than ``keep_days``, except those that
hold an asset's latest materialization (with the checks that ran beside it): what the UI
shows as each asset's current state and lineage stays."""

from datetime import UTC, datetime, timedelta

from dagster import Config, DagsterRunStatus, OpExecutionContext, RunsFilter, job, op
from pydantic import Field

FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]


class RunRetentionConfig(Config):
    """How long ``run_retention_job`` keeps finished runs."""

    keep_days: float = Field(
        default=90, gt=0, description="Finished runs created longer ago than this are deleted with their event logs."
    )


@op
def purge_old_runs(context: OpExecutionContext, config: RunRetentionConfig) -> None:
    instance = context.instance
    cutoff = datetime.now(UTC) - timedelta(days=config.keep_days)
    keys = list(instance.get_asset_keys())
    current = {entry.run_id for entry in instance.get_latest_materialization_events(keys).values() if entry}
    old = instance.get_run_records(RunsFilter(statuses=FINISHED, created_before=cutoff))
    purged = kept = 0
    for run in old:
        if run.dagster_run.run_id in current:
            kept += 1
            continue
        instance.delete_run(run.dagster_run.run_id)
        purged += 1
    context.log.info(
        f"deleted {purged} run(s) created before {cutoff:%Y-%m-%d %H:%M} UTC with their event logs; "
        f"kept {kept} older run(s) that hold an asset's latest materialization"
    )


@job(description="Delete finished runs older than keep_days (90) with their event logs, keeping those that hold "
     "an asset's latest materialization.", tags={"dagster/max_retries": "0"})
def run_retention_job():
    purge_old_runs()

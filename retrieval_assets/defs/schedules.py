"""The nightly schedule: the incremental build; the candidate sensor takes it from there. A weekly
one keeps the run storage from growing without bound (run retention)."""

from dagster import DefaultScheduleStatus, ScheduleDefinition

from retrieval_assets.defs.jobs import index_build_job
from retrieval_assets.defs.retention import run_retention_job

nightly_index_build = ScheduleDefinition(
    name="nightly_index_build",
    job=index_build_job,
    cron_schedule="0 2 * * *",
    default_status=DefaultScheduleStatus.RUNNING,
    description="Nightly incremental build; the candidate sensor evaluates and promotes what it produces.",
)

weekly_run_retention = ScheduleDefinition(
    name="weekly_run_retention",
    job=run_retention_job,
    cron_schedule="0 4 * * 0",
    default_status=DefaultScheduleStatus.RUNNING,
    description="Deletes finished runs older than 90 days (run_retention_job), keeping those that hold an asset's "
    "latest materialization.",
)

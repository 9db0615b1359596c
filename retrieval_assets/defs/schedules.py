"""The nightly schedule: the incremental build; the candidate sensor takes it from there."""

from dagster import DefaultScheduleStatus, ScheduleDefinition

from retrieval_assets.defs.jobs import index_build_job

nightly_index_build = ScheduleDefinition(
    name="nightly_index_build",
    job=index_build_job,
    cron_schedule="0 2 * * *",
    default_status=DefaultScheduleStatus.RUNNING,
    description="Nightly incremental build; the candidate sensor evaluates and promotes what it produces.",
)

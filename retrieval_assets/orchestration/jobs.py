"""Jobs and schedules."""

from __future__ import annotations

from dagster import AssetSelection, DefaultScheduleStatus, ScheduleDefinition, define_asset_job

from retrieval_assets.orchestration.assets.evaluation import retrieval_evaluation

index_build_job = define_asset_job(
    "index_build_job",
    selection=AssetSelection.all(),
    description="Ingest, clean, chunk, embed, index, then evaluate: the whole graph.",
)

evaluation_job = define_asset_job(
    "evaluation_job",
    selection=AssetSelection.assets(retrieval_evaluation),
    description="Evaluate the current indexes against the gold queries.",
)

nightly_index_build = ScheduleDefinition(
    name="nightly_index_build",
    job=index_build_job,
    cron_schedule="0 2 * * *",
    default_status=DefaultScheduleStatus.STOPPED,
)

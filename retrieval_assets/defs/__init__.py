"""Thin Dagster layer over ``retrieval_assets.core``: assets, checks, resources, jobs, schedules."""

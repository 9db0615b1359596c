"""The Dagster layer through its own runs: builds, evaluation, promotion, sensors, secrets."""

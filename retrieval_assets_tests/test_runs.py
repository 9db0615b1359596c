"""runs.py: the product's jobs run in this process without holding their steps' outputs."""

import gc
import weakref
from pathlib import Path

import pandas as pd
from dagster import DagsterInstance, Definitions, asset, define_asset_job

from retrieval_assets.defs.io_manager import ParquetIOManager, stored_value
from retrieval_assets.runs import run_job


def _job_and_outputs(tmp_path: Path):
    made: list[weakref.ref[pd.DataFrame]] = []

    @asset(io_manager_key="parquet_io_manager")
    def table() -> pd.DataFrame:
        frame = pd.DataFrame({"x": range(3)})
        made.append(weakref.ref(frame))
        return frame

    @asset(io_manager_key="parquet_io_manager")
    def doubled(table: pd.DataFrame) -> pd.DataFrame:
        return table * 2

    defs = Definitions(
        assets=[table, doubled],
        jobs=[define_asset_job("both")],
        resources={"parquet_io_manager": ParquetIOManager(base_dir=str(tmp_path))},
    )
    return defs.resolve_job_def("both"), made


def test_run_job_drops_each_output_once_stored(tmp_path: Path) -> None:
    job, made = _job_and_outputs(tmp_path)
    result = run_job(job, DagsterInstance.ephemeral(), tags={"purpose": "test"})
    gc.collect()
    assert result.success and result.dagster_run.tags["purpose"] == "test"
    assert made[0]() is None  # a build's tables are not held until the run ends
    assert stored_value(tmp_path, "doubled")["x"].tolist() == [0, 2, 4]


def test_dagsters_execute_in_process_holds_every_output(tmp_path: Path) -> None:
    """Why run_job exists: with Dagster's own in-process API the first table is still alive."""
    job, made = _job_and_outputs(tmp_path)
    result = job.execute_in_process()
    gc.collect()
    assert result.success and made[0]() is not None

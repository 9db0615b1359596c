"""Stores every table-valued asset as one Parquet file, so any asset can be re-materialized alone."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from dagster import ConfigurableIOManager, InputContext, OutputContext

from retrieval_assets.core.tables import write_parquet


class ParquetIOManager(ConfigurableIOManager):
    base_dir: str

    def _path(self, context: OutputContext | InputContext) -> Path:
        return Path(self.base_dir, *context.asset_key.path).with_suffix(".parquet")

    def handle_output(self, context: OutputContext, obj: pd.DataFrame) -> None:
        path = write_parquet(obj, self._path(context))
        context.add_output_metadata({"path": str(path), "bytes": path.stat().st_size})

    def load_input(self, context: InputContext) -> pd.DataFrame:
        path = self._path(context)
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist: materialize {context.asset_key.to_user_string()} first")
        return pd.read_parquet(path)

"""Stores every table-valued asset as one Parquet file, and the small record-valued ones (frozen
dataclasses such as the candidate version) as JSON, so that any asset can be re-materialized alone.

An input declared with ``AssetIn(metadata={"columns": [...]})`` reads only those columns, and
one with ``{"dtype_backend": "pyarrow"}`` keeps them as Arrow arrays (``pd.read_parquet``)."""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path
from typing import Any

import pandas as pd
from dagster import ConfigurableIOManager, InputContext, OutputContext

from retrieval_assets.core.io.files import write_json
from retrieval_assets.core.io.tables import write_parquet


class ParquetIOManager(ConfigurableIOManager):
    base_dir: str

    def _path(self, context: OutputContext | InputContext, suffix: str) -> Path:
        return Path(self.base_dir, *context.asset_key.path).with_suffix(suffix)

    def handle_output(self, context: OutputContext, obj: pd.DataFrame | Any) -> None:
        if dataclasses.is_dataclass(obj):
            record = {"type": f"{type(obj).__module__}:{type(obj).__qualname__}", "fields": dataclasses.asdict(obj)}
            path = write_json(record, self._path(context, ".json"))
        else:
            path = write_parquet(obj, self._path(context, ".parquet"))
        context.add_output_metadata({"path": str(path), "bytes": path.stat().st_size})

    def load_input(self, context: InputContext) -> pd.DataFrame | Any:
        for suffix in (".parquet", ".json"):
            path = self._path(context, suffix)
            if path.exists():
                if suffix == ".parquet":
                    options = context.definition_metadata or {}
                    return pd.read_parquet(path, **{k: options[k] for k in ("columns", "dtype_backend") if k in options})
                record = json.loads(path.read_text())
                module, name = record["type"].split(":")
                return getattr(importlib.import_module(module), name)(**record["fields"])
        raise FileNotFoundError(
            f"{self._path(context, '.parquet')} does not exist: materialize {context.asset_key.to_user_string()} first"
        )

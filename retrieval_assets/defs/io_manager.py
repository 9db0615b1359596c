"""Stores every table-valued asset as one Parquet file, and the small record-valued ones (frozen
dataclasses such as the candidate version) as JSON, so that any asset can be re-materialized alone.

An input declared with ``AssetIn(metadata={"columns": [...]})`` reads only those columns, one
with ``{"dtype_backend": "pyarrow"}`` keeps them as Arrow arrays (``pd.read_parquet``), and one
with ``{"deferred": True}`` is a ``StoredTable`` that the step reads only if it needs it."""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
from dagster import ConfigurableIOManager, InputContext, OutputContext
from pydantic import Field

from retrieval_assets.core.io.files import write_json
from retrieval_assets.core.io.memory import return_freed_memory
from retrieval_assets.core.io.tables import read_parquet_rows, write_parquet


@dataclass(frozen=True)
class StoredTable:
    """An asset's stored table, not yet read: for a step that may not need it (the server build
    when no server is configured skips reading 104k ACL vectors, 0.8 s) or only a few of its
    rows (a delta build's upserted chunks)."""

    path: Path
    options: dict[str, Any]

    def read(self) -> pd.DataFrame:
        return pd.read_parquet(self.path, **self.options)

    def read_where(self, column: str, values: Collection[str]) -> pd.DataFrame:
        """Only the rows whose ``column`` holds one of ``values`` (``read_parquet_rows``)."""
        return read_parquet_rows(self.path, column, values, **self.options)

    def column(self, name: str) -> pd.Series:
        return pd.read_parquet(self.path, columns=[name])[name]

    def read_columns(self, names: Sequence[str]) -> pd.DataFrame:
        """These columns only (the input's own column selection left aside)."""
        return pd.read_parquet(self.path, **{**self.options, "columns": list(names)})

    @property
    def rows(self) -> int:
        """Its row count, from the file's footer."""
        return pq.read_metadata(self.path).num_rows


class ParquetIOManager(ConfigurableIOManager):
    """Every asset's value as ``{base_dir}/{asset key}.parquet`` (tables) or ``.json`` (records)."""

    base_dir: str = Field(description="Where asset values are stored: the storage home's artifacts folder.")

    def _path(self, context: OutputContext | InputContext, suffix: str) -> Path:
        return Path(self.base_dir, *context.asset_key.path).with_suffix(suffix)

    def handle_output(self, context: OutputContext, obj: pd.DataFrame | Any) -> None:
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            record = {"type": f"{type(obj).__module__}:{type(obj).__qualname__}", "fields": dataclasses.asdict(obj)}
            path = write_json(record, self._path(context, ".json"))
        else:
            path = write_parquet(obj, self._path(context, ".parquet"))
        context.add_output_metadata({"path": str(path), "bytes": path.stat().st_size})

    def load_input(self, context: InputContext) -> pd.DataFrame | Any:
        # A step's inputs load when the last step's values are gone: its peak goes back first.
        return_freed_memory()
        metadata = context.definition_metadata or {}
        options = {k: metadata[k] for k in ("columns", "dtype_backend") if k in metadata}
        return stored_value(self.base_dir, context.asset_key.path, options, deferred=bool(metadata.get("deferred")))


def stored_value(
    base_dir: str | Path, asset: str | Sequence[str], options: dict[str, Any] | None = None, deferred: bool = False
) -> Any:
    """The value ``ParquetIOManager`` stored for ``asset`` under ``base_dir``: its table (read with
    ``options``, or a ``StoredTable`` when ``deferred``) or its record. Runs hold no step's output
    in memory (``runs.run_job``), so whatever needs a value after a run reads it here."""
    stem = Path(base_dir, *([asset] if isinstance(asset, str) else asset))
    table = stem.with_suffix(".parquet")
    if table.exists():
        stored = StoredTable(table, options or {})
        return stored if deferred else stored.read()
    record_path = stem.with_suffix(".json")
    if record_path.exists():
        record = json.loads(record_path.read_text())
        module, name = record["type"].split(":")
        return getattr(importlib.import_module(module), name)(**record["fields"])
    name = "/".join([asset] if isinstance(asset, str) else asset)
    raise FileNotFoundError(f"{table} does not exist: materialize {name} first")

"""Stores every table-valued asset as one Parquet file (or, for a ``TableWrite``, a table of
several that a build extends: ``core.io.parted``), and the small record-valued ones (frozen
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
import pyarrow as pa
from dagster import ConfigurableIOManager, InputContext, OutputContext
from pydantic import Field

from retrieval_assets.core.io.files import write_json
from retrieval_assets.core.io.memory import return_freed_memory
from retrieval_assets.core.io.parted import PartedTable, TableWrite, open_table, table_path
from retrieval_assets.core.io.tables import write_parquet


@dataclass(frozen=True)
class StoredTable:
    """An asset's stored table, not yet read: for a step that may not need it (the server build
    when no server is configured skips reading 104k ACL vectors, 0.8 s) or only a few of its
    rows (a delta build's upserted chunks). One file, or a table a build extended
    (``core.io.parted``)."""

    table: PartedTable
    options: dict[str, Any]

    def read(self) -> pd.DataFrame:
        return self.table.read_pandas(self.options.get("columns"), self.options.get("dtype_backend"))

    def read_where(self, column: str, values: Collection[str]) -> pd.DataFrame:
        """Only the rows whose ``column`` holds one of ``values`` (``PartedTable.read_where``)."""
        return self._frame(self.table.read_where(column, values, self.options.get("columns")))

    def column(self, name: str) -> pd.Series:
        return self.table.read_pandas([name])[name]

    def read_columns(self, names: Sequence[str]) -> pd.DataFrame:
        """These columns only (the input's own column selection left aside)."""
        return self.table.read_pandas(names, self.options.get("dtype_backend"))

    def read_rows(self, names: Sequence[str], positions: Sequence[int] | None) -> pd.DataFrame:
        """These columns of the rows at ``positions``, in that order (None: every row)."""
        if positions is None:
            return self.read_columns(names)
        return self._frame(self.table.take(positions, names))

    def _frame(self, table: pa.Table) -> pd.DataFrame:
        return table.to_pandas(types_mapper=pd.ArrowDtype if self.options.get("dtype_backend") == "pyarrow" else None)

    @property
    def rows(self) -> int:
        """Its row count, from the files' footers."""
        return self.table.rows


class ParquetIOManager(ConfigurableIOManager):
    """Every asset's value as ``{base_dir}/{asset key}.parquet`` (tables) or ``.json`` (records)."""

    base_dir: str = Field(description="Where asset values are stored: the storage home's artifacts folder.")

    def _path(self, context: OutputContext | InputContext, suffix: str) -> Path:
        return Path(self.base_dir, *context.asset_key.path).with_suffix(suffix)

    def handle_output(self, context: OutputContext, obj: pd.DataFrame | Any) -> None:
        if isinstance(obj, TableWrite):
            path = obj.write(self._path(context, ""))
            held = sum(file.stat().st_size for file in table_path(path).paths)
            context.add_output_metadata({"path": str(path), "bytes": held})
            return
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
    table = open_table(stem)
    if table is not None:
        stored = StoredTable(table, options or {})
        return stored if deferred else stored.read()
    record_path = stem.with_suffix(".json")
    if record_path.exists():
        record = json.loads(record_path.read_text())
        module, name = record["type"].split(":")
        return getattr(importlib.import_module(module), name)(**record["fields"])
    name = "/".join([asset] if isinstance(asset, str) else asset)
    raise FileNotFoundError(f"{stem.with_suffix('.parquet')} does not exist: materialize {name} first")

"""The Parquet IO manager: what an input's ``AssetIn`` metadata asks for is what the step gets."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from dagster import AssetKey, build_input_context, build_output_context

from retrieval_assets.core.index.versions import CandidateRecord
from retrieval_assets.defs.io_manager import ParquetIOManager, StoredTable

FRAME = pd.DataFrame({"chunk_id": ["a#0", "b#0"], "doc_id": ["a", "b"], "embedding": [[0.5, 1.0], [1.5, 2.0]]})


@pytest.fixture
def manager(tmp_path) -> ParquetIOManager:
    manager = ParquetIOManager(base_dir=str(tmp_path))
    manager.handle_output(build_output_context(asset_key=AssetKey("dense_embeddings")), FRAME)
    return manager


def _load(manager: ParquetIOManager, **metadata: object) -> object:
    return manager.load_input(build_input_context(asset_key=AssetKey("dense_embeddings"), definition_metadata=metadata))


def test_an_input_reads_the_columns_and_backend_it_declares(manager) -> None:
    pd.testing.assert_frame_equal(_load(manager), FRAME)
    assert list(_load(manager, columns=["chunk_id"]).columns) == ["chunk_id"]
    arrow = _load(manager, dtype_backend="pyarrow")
    assert isinstance(arrow["embedding"].dtype, pd.ArrowDtype)
    assert pa.types.is_list(arrow["embedding"].dtype.pyarrow_dtype)


def test_a_deferred_input_is_read_only_when_asked(manager, tmp_path) -> None:
    table = _load(manager, deferred=True, columns=["chunk_id", "doc_id"])
    assert isinstance(table, StoredTable) and table.rows == 2
    (tmp_path / "dense_embeddings.parquet").unlink()  # nothing was read yet: the step would fail here
    with pytest.raises(FileNotFoundError):
        table.read()


def test_a_deferred_input_reads_what_it_declares(manager) -> None:
    table = _load(manager, deferred=True, columns=["chunk_id", "doc_id"])
    pd.testing.assert_frame_equal(table.read(), FRAME[["chunk_id", "doc_id"]])
    pd.testing.assert_frame_equal(
        table.read_where("chunk_id", ["b#0"]), FRAME[["chunk_id", "doc_id"]].iloc[1:].reset_index(drop=True)
    )
    assert table.column("chunk_id").tolist() == ["a#0", "b#0"]


def test_records_round_trip_and_a_missing_asset_says_what_to_materialize(tmp_path) -> None:
    manager = ParquetIOManager(base_dir=str(tmp_path))
    record = CandidateRecord(version="v-1", fingerprint="f", reused=False, settings_fingerprint="s")
    manager.handle_output(build_output_context(asset_key=AssetKey("index_candidate")), record)
    assert manager.load_input(build_input_context(asset_key=AssetKey("index_candidate"))) == record
    with pytest.raises(FileNotFoundError, match="materialize chunks first"):
        manager.load_input(build_input_context(asset_key=AssetKey("chunks")))

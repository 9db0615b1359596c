"""Content-addressed embeddings, so a re-run encodes only new or changed text.

A chunk's ``content_hash`` covers its text and the chunker config; the cache directory is
named after the encoder's fingerprint (model, dimension, truncation). Vectors are appended
as Parquet segments, each written atomically after one block of texts, which keeps memory
bounded by a block and lets a killed run resume from the segments it already wrote.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from retrieval_assets.core.embed.base import ProgressCallback
from retrieval_assets.core.faults import fault_point
from retrieval_assets.core.io.tables import write_parquet

KEY = "content_hash"
SEGMENT_GLOB = "segment-*.parquet"
# The fingerprint in words beside the segments, so a change of encoder can be explained.
FINGERPRINT_FILE = "FINGERPRINT"
# Texts per segment: one block of encoder work between two durable writes.
DEFAULT_BLOCK_ROWS = 2048
# More segments than this are merged into one at the end of a build.
MAX_SEGMENTS = 32

# Encodes a block of texts into a frame with one row per text and the value columns only,
# reporting (done, total) within the block.
BlockEncoder = Callable[[Sequence[str], ProgressCallback | None], pd.DataFrame]


def content_hash(*parts: str) -> str:
    """SHA-256 over the parts, NUL-separated so that ("ab", "c") and ("a", "bc") differ."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheStats:
    requested: int  # distinct content hashes asked for
    reused: int
    encoded: int


class EmbeddingCache:
    """Vectors of one encoder, keyed by content hash, under ``root / fingerprint-hash``."""

    def __init__(self, root: str | Path, fingerprint: str) -> None:
        self.fingerprint = fingerprint
        self.path = Path(root) / content_hash(fingerprint)[:16]

    def segments(self) -> list[Path]:
        return sorted(self.path.glob(SEGMENT_GLOB))

    def change_of_encoder(self) -> str | None:
        """Why nothing will be reused, when this encoder has no vectors yet but another one has:
        the usual reason is a changed model, graph or truncation (the fingerprint's parts)."""
        if self.segments():
            return None
        others = sorted(
            _recorded_fingerprint(folder)
            for folder in self.path.parent.glob("*")
            if folder != self.path and any(folder.glob(SEGMENT_GLOB))
        )
        if not others:
            return None
        return (
            f"the encoder changed: no vectors are cached for {self.fingerprint!r} yet, the cache holds vectors of "
            f"{', '.join(repr(other) for other in others)}; every chunk is encoded once"
        )

    def lookup(self, keys: Sequence[str] | pa.Array) -> pa.Table:
        """Cached rows for ``keys``, each key once, in no particular order, as Arrow: a million
        cached vectors turned into pandas rows of numpy arrays took seconds to make and to write
        back. Matched in Arrow: pandas' ``isin`` on Arrow strings looped in Python."""
        wanted = keys if isinstance(keys, pa.Array) else pa.array(list(set(keys)), type=pa.string())
        found = []
        for segment in self.segments():
            try:
                table = pq.read_table(segment)
            except FileNotFoundError:  # merged away by a concurrent compaction; its rows live on
                continue
            found.append(table.filter(pc.is_in(table.column(KEY), value_set=wanted)))
        if not found:
            return pa.table({KEY: pa.array([], type=pa.string())})
        table = pa.concat_tables(found, promote_options="permissive")
        held = table.column(KEY)
        distinct = pc.unique(held)
        if len(distinct) == len(held):
            return table
        # A key written twice (a re-run after a crash, parallel shard runs): its first row.
        return table.take(pc.index_in(distinct, value_set=held))

    def append(self, frame: pd.DataFrame) -> Path:
        # A unique name per writer: parallel shard runs append to one cache without locks.
        segment = write_parquet(frame, self.path / f"segment-{uuid.uuid4().hex}.parquet")
        fingerprint_file = self.path / FINGERPRINT_FILE
        if not fingerprint_file.exists():
            fingerprint_file.write_text(self.fingerprint, encoding="utf-8")  # same text from every writer
        return segment

    def compact(self, live_keys: Sequence[str] | pa.Array, max_segments: int = MAX_SEGMENTS) -> None:
        """Merge segments into one holding only ``live_keys`` once there are too many; vectors
        of removed or changed text go with it."""
        segments = self.segments()
        if len(segments) <= max_segments:
            return
        self.append(self.lookup(live_keys))
        for segment in segments:
            segment.unlink(missing_ok=True)


def _recorded_fingerprint(folder: Path) -> str:
    recorded = folder / FINGERPRINT_FILE
    if recorded.is_file():
        return recorded.read_text(encoding="utf-8")
    return f"{folder.name} (written before fingerprints were recorded)"


def encode_with_cache(
    keys: Sequence[str] | pa.Array,
    texts: Sequence[str],
    encode_block: BlockEncoder,
    cache: EmbeddingCache,
    *,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    progress: ProgressCallback | None = None,
) -> tuple[pa.Table, CacheStats]:
    """One row per key, in ``keys`` order, as an Arrow table: cached rows reused, the rest
    encoded block by block and appended to the cache before the next block starts. Only the
    texts of keys the cache lacks are read from ``texts``, which may make each on demand
    (``steps.ChunkTexts``)."""
    if len(keys) != len(texts):
        raise ValueError(f"{len(keys)} keys but {len(texts)} texts")
    ordered = keys if isinstance(keys, pa.Array) else pa.array(keys, type=pa.string())
    distinct = pc.unique(ordered)
    cached = cache.lookup(distinct)
    missing_keys = distinct.filter(pc.invert(pc.is_in(distinct, value_set=cached.column(KEY).combine_chunks())))
    missing = missing_keys.to_pylist()
    first_position = pc.index_in(missing_keys, value_set=ordered).to_numpy(zero_copy_only=False)
    blocks = [cached] if len(cached) else []
    for start in range(0, len(missing), block_rows):
        block_keys = missing[start : start + block_rows]
        in_block = None if progress is None else _offset(progress, start, len(missing))
        block_texts = [texts[int(position)] for position in first_position[start : start + block_rows]]
        encoded = encode_block(block_texts, in_block)
        if len(encoded) != len(block_keys):
            raise ValueError(f"encoder returned {len(encoded)} rows for {len(block_keys)} texts")
        encoded.insert(0, KEY, pd.Series(block_keys, dtype="string"))
        cache.append(encoded)
        fault_point("encode")
        blocks.append(_like(pa.Table.from_pandas(encoded, preserve_index=False), blocks))
    if not blocks:  # no keys: the encoder's columns, no rows
        empty = encode_block([], None)
        empty.insert(0, KEY, pd.Series([], dtype="string"))
        return pa.Table.from_pandas(empty, preserve_index=False), CacheStats(0, 0, 0)
    table = pa.concat_tables(blocks, promote_options="permissive") if len(blocks) > 1 else blocks[0]
    held = table.column(KEY).combine_chunks()
    stats = CacheStats(requested=len(distinct), reused=len(distinct) - len(missing), encoded=len(missing))
    return table.take(pc.index_in(ordered, value_set=held)), stats


def _like(table: pa.Table, blocks: list[pa.Table]) -> pa.Table:
    """``table`` in the first block's schema: lists read back from Parquet name their values
    ``element``, lists made from numpy arrays ``item``, and Arrow concatenates only equal types."""
    return table.cast(blocks[0].schema) if blocks else table


def _offset(progress: ProgressCallback, start: int, total: int) -> ProgressCallback:
    return lambda done, _block_total: progress(start + done, total)

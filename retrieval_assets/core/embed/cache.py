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
from retrieval_assets.core.io.tables import empty_frame, write_parquet

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

    def lookup(self, keys: Sequence[str]) -> pd.DataFrame:
        """Cached rows for ``keys`` (each at most once), in no particular order."""
        # Matched in Arrow, and only matching rows become pandas rows: pandas' ``isin`` on
        # Arrow strings looped in Python over the wanted keys, for every segment. The keys of
        # every segment are matched in one call: each call hashes all the wanted keys first.
        wanted = pa.array(set(keys), type=pa.large_string())
        segments = []
        for segment in self.segments():
            try:
                column = pq.read_table(segment, columns=[KEY]).column(KEY).cast(pa.large_string())
            except FileNotFoundError:  # merged away by a concurrent compaction; its rows live on
                continue
            segments.append((segment, column))
        every_key = pa.chunked_array([chunk for _, column in segments for chunk in column.chunks], pa.large_string())
        held = pc.is_in(every_key, value_set=wanted)
        found, start = [], 0
        for segment, column in segments:
            mask = held.slice(start, len(column))
            start += len(column)
            matching = pc.sum(mask).as_py() or 0
            if not matching:
                continue
            try:
                table = pq.read_table(segment)
            except FileNotFoundError:
                continue
            # A segment whose rows are all wanted is taken as it is: filtering copies every vector.
            found.append((table if matching == table.num_rows else table.filter(mask)).to_pandas())
        if not found:
            return empty_frame({KEY: "string"})
        return pd.concat(found, ignore_index=True).drop_duplicates(KEY)

    def append(self, frame: pd.DataFrame) -> Path:
        # A unique name per writer: parallel shard runs append to one cache without locks.
        segment = write_parquet(frame, self.path / f"segment-{uuid.uuid4().hex}.parquet")
        fingerprint_file = self.path / FINGERPRINT_FILE
        if not fingerprint_file.exists():
            fingerprint_file.write_text(self.fingerprint, encoding="utf-8")  # same text from every writer
        return segment

    def compact(self, live_keys: Sequence[str], max_segments: int = MAX_SEGMENTS) -> None:
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
    keys: Sequence[str],
    texts: Sequence[str],
    encode_block: BlockEncoder,
    cache: EmbeddingCache,
    *,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    progress: ProgressCallback | None = None,
) -> tuple[pd.DataFrame, CacheStats]:
    """One row per key, in ``keys`` order: cached rows reused, the rest encoded block by block
    and appended to the cache before the next block starts. Only the texts of keys the cache
    lacks are read from ``texts``, which may make each on demand (``steps.ChunkTexts``)."""
    if len(keys) != len(texts):
        raise ValueError(f"{len(keys)} keys but {len(texts)} texts")
    position_of = {key: position for position, key in enumerate(keys)}
    cached = cache.lookup(list(position_of))
    known = set(cached[KEY].tolist())
    missing = [key for key in position_of if key not in known]
    blocks = [cached]
    for start in range(0, len(missing), block_rows):
        block_keys = missing[start : start + block_rows]
        in_block = None if progress is None else _offset(progress, start, len(missing))
        encoded = encode_block([texts[position_of[key]] for key in block_keys], in_block)
        if len(encoded) != len(block_keys):
            raise ValueError(f"encoder returned {len(encoded)} rows for {len(block_keys)} texts")
        encoded.insert(0, KEY, pd.Series(block_keys, dtype="string"))
        cache.append(encoded)
        fault_point("encode")
        blocks.append(encoded)
    if not keys:
        blocks = [encode_block([], None).assign(**{KEY: pd.Series([], dtype="string")})]
    table = pd.concat(blocks, ignore_index=True) if len(blocks) > 1 else blocks[0]
    positions = pd.Index(table[KEY]).get_indexer(list(keys))
    stats = CacheStats(requested=len(position_of), reused=len(position_of) - len(missing), encoded=len(missing))
    return table.iloc[positions].reset_index(drop=True), stats


def _offset(progress: ProgressCallback, start: int, total: int) -> ProgressCallback:
    return lambda done, _block_total: progress(start + done, total)

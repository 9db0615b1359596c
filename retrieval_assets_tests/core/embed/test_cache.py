"""The content-addressed embedding cache on disk (no models): look-ups across segments, and
encoding only what the cache lacks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from retrieval_assets.core.embed.cache import KEY, EmbeddingCache, encode_with_cache
from retrieval_assets.core.embed.steps import ChunkTexts, DeferredChunkTexts


def _segment(keys: list[str], offset: float) -> pd.DataFrame:
    vectors = [np.full(3, offset + n, dtype=np.float32) for n in range(len(keys))]
    return pd.DataFrame({KEY: pd.Series(keys, dtype="string"), "embedding": vectors})


def test_lookup_finds_each_wanted_key_once_across_segments(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path, "model-a")
    assert cache.lookup(["a"]).empty
    cache.append(_segment(["a", "b", "c"], 0))
    cache.append(_segment(["c", "d"], 10))  # "c" again, as a re-run after a crash may write it
    found = cache.lookup(["d", "a", "c", "unknown"]).set_index(KEY)
    assert sorted(found.index) == ["a", "c", "d"]
    assert found["embedding"]["a"].tolist() == [0, 0, 0] and found["embedding"]["d"].tolist() == [11, 11, 11]
    assert found.index.dtype == "string" and found["embedding"]["a"].dtype == np.float32
    # Segments none of whose rows are wanted, all of them, and one keyed by Arrow's 32-bit strings.
    cache.append(_segment(["x", "y"], 20))
    cache.append(_segment(["e"], 30))
    narrow = pa.table({KEY: pa.array(["f", "z"], pa.string()), "embedding": [[40.0] * 3, [41.0] * 3]})
    pq.write_table(narrow, cache.path / "segment-narrow.parquet")
    found = cache.lookup(["a", "c", "d", "e", "f"]).set_index(KEY)
    assert sorted(found.index) == ["a", "c", "d", "e", "f"]
    assert found["embedding"]["e"].tolist() == [30, 30, 30] and found["embedding"]["f"].tolist() == [40, 40, 40]


def test_only_missing_texts_are_encoded_and_rows_follow_the_keys(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path, "model-a")
    cache.append(_segment(["a", "b"], 0))
    encoded: list[str] = []

    def encode(texts, _report):
        encoded.extend(texts)
        return pd.DataFrame({"embedding": [np.full(3, 100, dtype=np.float32) for _ in texts]})

    rows, stats = encode_with_cache(["c", "a", "c", "b"], ["text c", "text a", "text c", "text b"], encode, cache)
    assert encoded == ["text c"] and (stats.requested, stats.reused, stats.encoded) == (3, 2, 1)
    assert rows[KEY].tolist() == ["c", "a", "c", "b"]
    assert [vector[0] for vector in rows["embedding"]] == [100, 0, 100, 1]
    assert set(cache.lookup(["c"])[KEY]) == {"c"}  # appended for the next run


def test_a_changed_encoder_is_explained_once_before_it_encodes(tmp_path: Path) -> None:
    old = EmbeddingCache(tmp_path, "OnnxDenseEncoder|bge|dim=384|graph=as-shipped")
    assert old.change_of_encoder() is None  # a first build: nothing to explain
    old.append(_segment(["a"], 0))
    new = EmbeddingCache(tmp_path, "OnnxDenseEncoder|bge|dim=384|graph=dequantized-fp32")
    reason = new.change_of_encoder()
    assert reason is not None and "graph=as-shipped" in reason and "graph=dequantized-fp32" in reason
    new.append(_segment(["a"], 1))
    assert new.change_of_encoder() is None  # its own vectors exist now


def test_only_the_texts_of_missing_keys_are_made(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path, "model-a")
    cache.append(_segment(["a", "b"], 0))
    made: list[int] = []

    class Texts(ChunkTexts):
        def __getitem__(self, index):
            made.append(index)
            return super().__getitem__(index)

    texts = Texts(np.array(["T", "", "T"], dtype=object), np.array(["body a", "body c", "body b"], dtype=object))
    assert list(ChunkTexts(np.array(["T", ""], dtype=object), np.array(["x", "y"], dtype=object))) == ["T\nx", "y"]
    # A chunk table's own Arrow-backed columns, a missing title included, are read as they are.
    stored = pd.DataFrame({"title": ["T", None], "text": ["x", "y"]}, dtype="string")
    assert list(ChunkTexts(stored["title"].array, stored["text"].array)) == ["T\nx", "y"]

    def encode(block, _report):
        return pd.DataFrame({"embedding": [np.full(3, 100, dtype=np.float32) for _ in block]})

    rows, stats = encode_with_cache(["a", "c", "b"], texts, encode, cache)
    assert made == [1] and stats.encoded == 1 and rows[KEY].tolist() == ["a", "c", "b"]


def test_deferred_texts_are_read_only_when_a_chunk_is_encoded(tmp_path: Path) -> None:
    chunks = pd.DataFrame({"chunk_id": ["d#0", "d#1", "e#0"], "content_hash": ["h0", "h1", "h2"]})
    titles = pd.DataFrame({"title": ["T", "T", None], "text": ["zero", "one", "two"]}, dtype="string")
    reads: list[list[int] | None] = []

    def load(positions) -> pd.DataFrame:
        reads.append(None if positions is None else list(positions))
        return titles if positions is None else titles.iloc[list(positions)]

    def encode(texts, _report) -> pd.DataFrame:
        return pd.DataFrame({"embedding": [np.full(2, len(text), dtype=np.float32) for text in texts]})

    cache = EmbeddingCache(tmp_path, "model")
    cache.append(_segment(["h0", "h1", "h2"], 0))
    texts = DeferredChunkTexts(len(chunks), load)
    encode_with_cache(chunks["content_hash"].tolist(), texts, encode, cache)
    assert reads == []
    # One chunk the cache lacks: the texts are read once, and the right one is encoded.
    values, stats = encode_with_cache(["h0", "new"], DeferredChunkTexts(3, load).at([0, 2]), encode, cache)
    assert reads == [[0, 2]] and stats.encoded == 1  # the rows of the view only, not the table
    assert values["embedding"].iloc[1].tolist() == [3.0, 3.0]  # "two", its title missing

"""Partitions: catalog sources (dynamic, added by a sensor) times hash shards of their documents.

Only the embedding warm-up is partitioned. A backfill over these partitions fills the
content-addressed embedding cache shard by shard, in parallel under the multiprocess executor
(or k8s/celery in production); the unpartitioned whole build then finds every vector cached.
Keeping the rest of the graph unpartitioned is what lets one job materialize it as a whole.
"""

from __future__ import annotations

from dagster import DynamicPartitionsDefinition, MultiPartitionsDefinition, StaticPartitionsDefinition

from retrieval_assets.core.embed.cache import content_hash

SHARD_COUNT = 8

# The dynamic partitions' name, by which the instance stores their keys.
CATALOG_SOURCES = "catalog_sources"
catalog_sources = DynamicPartitionsDefinition(name=CATALOG_SOURCES)
hash_shards = StaticPartitionsDefinition([f"{shard:02d}" for shard in range(SHARD_COUNT)])
source_shards = MultiPartitionsDefinition({"source": catalog_sources, "shard": hash_shards})


def shard_of(doc_id: str, shards: int = SHARD_COUNT) -> str:
    """A document's shard: stable across runs and machines, and all chunks of a document together."""
    return f"{int(content_hash(doc_id)[:8], 16) % shards:02d}"

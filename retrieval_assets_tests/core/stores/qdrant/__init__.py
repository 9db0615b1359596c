"""Tests of the Qdrant adapters (embedded shard and server) and their shared filter translator."""

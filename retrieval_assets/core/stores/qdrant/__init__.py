"""Qdrant adapters: the embedded shard (qdrant-edge), the server store, and their shared filter translator."""

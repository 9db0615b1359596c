"""FAISS adapter: dense vectors in a flat or HNSW index, payloads beside it."""

"""FAISS adapter: dense vectors in a flat, IVF or HNSW index, payloads beside it."""

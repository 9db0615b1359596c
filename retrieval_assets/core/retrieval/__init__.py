"""Retrieval: the hybrid query pipeline, fusion, expansion, multi-query, rerank; opening versions for search."""

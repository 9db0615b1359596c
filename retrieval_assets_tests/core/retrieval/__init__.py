"""The query pipeline, rerank and tenant isolation."""

"""Rerank: the cross-encoder port and its adapters."""

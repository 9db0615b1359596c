"""Evaluation: retrieval metrics, the promotion gate and its paired statistics, learned configurations,
benchmark configurations."""

"""Evaluation: retrieval metrics, the promotion gate, benchmark configurations."""

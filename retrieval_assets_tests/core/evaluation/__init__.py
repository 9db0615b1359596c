"""Fusion and evaluation metrics."""

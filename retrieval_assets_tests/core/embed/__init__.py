"""Encoders and the embedding cache."""

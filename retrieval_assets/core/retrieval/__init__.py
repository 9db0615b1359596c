"""Retrieval: the hybrid query pipeline and its stages, and the search service over index versions."""

"""Tests of the FAISS dense store."""

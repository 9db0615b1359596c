"""Tests of the tantivy BM25 store."""

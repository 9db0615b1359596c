"""Ingest: catalog loading, cleaning with quarantine, chunking."""

"""Catalog loading, cleaning, quarantine and chunking."""

"""Pure-Python core: no Dagster import anywhere below this package.

Models, catalog loading, cleaning, chunking, encoders, index stores, retrieval and
evaluation live here; ``retrieval_assets.defs`` wraps them as Dagster assets.
"""

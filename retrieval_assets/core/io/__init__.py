"""Files and Parquet tables, written atomically; building many small objects at once."""

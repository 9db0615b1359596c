"""Files and Parquet tables, written atomically."""

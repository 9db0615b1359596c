"""File writes and copies, Parquet tables."""

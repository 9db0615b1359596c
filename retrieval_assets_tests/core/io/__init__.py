"""File writes and copies."""

"""Query parsing."""

"""The bench commands and load tools."""

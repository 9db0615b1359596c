"""Tests, laid out like the package they test."""

from pathlib import Path

TEST_DATA = Path(__file__).resolve().parent / "data"

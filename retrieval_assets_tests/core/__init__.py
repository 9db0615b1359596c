"""Unit tests of the core, one folder per stage, on real models and engines."""

"""Assets and their checks, one module per pipeline stage."""

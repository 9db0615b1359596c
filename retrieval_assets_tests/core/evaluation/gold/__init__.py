"""Generated gold: known-item sampling, LLM questions, the frozen store, curated files, agreement."""

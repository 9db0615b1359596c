"""Index: build steps, index versions and their promotion, vocabulary, tool graph, server indexes."""

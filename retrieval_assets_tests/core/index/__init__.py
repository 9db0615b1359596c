"""Index versions, the tool graph, server indexes."""

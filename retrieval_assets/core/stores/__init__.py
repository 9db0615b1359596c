"""Index stores: ports, filters, and one adapter per engine (FAISS, qdrant-edge, tantivy, Qdrant server, OpenSearch)."""

"""tantivy adapter: BM25 over chunks with metadata filters, embedded."""

"""OpenSearch adapter: the index mapping, the request bodies, the filter translator and the store."""

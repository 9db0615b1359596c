"""Tests of the OpenSearch adapter: mapping, request bodies, filters and the store."""

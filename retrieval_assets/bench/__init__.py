"""The bench commands and load tools: each measures what users run and prints its figures as JSON.

``beir`` (``retrieval-assets bench``) and ``incremental`` (``bench-incremental``) build and
evaluate through the product's own jobs; ``latency`` times queries per backend over one built
version; ``loadtest``, ``auth_overhead`` and ``document_flow`` drive the HTTP API. Every one
ends with its figures, and the machine they were measured on, as the last stdout line
(``report``).
"""

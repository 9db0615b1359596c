"""What each column of the tables in asset metadata means: the descriptions the Dagster UI shows
beside a table-valued asset's column schema and beside the columns of every preview table.

One meaning per name across tables; a table whose column means something else passes its own
description (``table_metadata`` / ``preview``'s ``descriptions``).
"""

from __future__ import annotations

COLUMN_DESCRIPTIONS: dict[str, str] = {
    # Catalog rows, documents, quarantine and inbox receipts (core/io/tables.py).
    "source": "The catalog source the row was read from: a catalog's name, or inbox.",
    "line_number": "The row's line in its source file, or its position among a folder's files or a table's rows; "
    "blank for a record that does not come from a source.",
    "raw": "The row as read: a catalog line decoded from UTF-8 (lossily when utf8_error), or the JSON record a "
    "file, table row or paper was read into (docs/sources.md).",
    "utf8_error": "Whether the row's bytes were not valid UTF-8.",
    "doc_id": "The document's id.",
    "title": "The document's title.",
    "text": "The cleaned text.",
    "tenant_id": "The tenant the record belongs to; a search sees its own tenants' records only.",
    "metadata": "The record's metadata fields, as JSON.",
    "structure": "A file's headings and pages: JSON spans (heading, page, length) covering its text; blank for "
    "records without structure.",
    "vectors": "Precomputed dense vectors the record carried (embedding:<model> fields), as JSON by model name; "
    "on a chunk, only when its document is that one chunk (else each model's name with null). Blank for none.",
    "reason": "Why the row was quarantined or the inbox entry rejected (a quarantine reason); blank otherwise.",
    "detail": "What exactly was wrong, for a person to read.",
    "receipt": "The inbox entry's receipt, as POST /documents returned it.",
    "operation": "What the inbox entry asked for: upsert or delete.",
    "outcome": "What this build did with the inbox entry: indexed, deleted or rejected.",
    # Chunks and embeddings.
    "chunk_id": "The chunk's id: {tenant}/{doc_id}#{n} (the tenant percent-encoded).",
    "ordinal": "The chunk's position in its document, from 0.",
    "section": "The document section the chunk was cut from.",
    "content_hash": "Hash of the chunk's text and chunking settings: its key in the embedding cache.",
    "embedding": "The dense vector.",
    "indices": "SPLADE vocabulary ids of the chunk's non-zero terms.",
    "values": "SPLADE weights of those terms, in the same order.",
    # Vocabulary (core/index/vocabulary.py).
    "term": "A term from document names, descriptions or keywords.",
    "doc_freq": "Documents holding the term.",
    "sources": "Where the term was seen: description, keyword, name.",
    "tenants": "The tenants the term was chosen for (by their own documents); a search expands only with its "
    "tenants' terms.",
    "tenant_doc_freq": "Documents of each of those tenants holding the term, in the same order.",
    # Knowledge graph (core/index/graph.py).
    "target": "The tool or domain node the edge points at.",
    "relation": "The edge's relation as the catalog names it (requires, alternative_to, ...), or in_domain.",
    "relations": "Tool-to-tool edges of the tool, in and out.",
    "domains": "Domain nodes the tool is linked to.",
    # Evaluation, the gate and the quality history.
    "configuration": "The retrieval configuration measured (tuned: the one learned for the version).",
    "version": "The index version.",
    "sealed_at": "When the version was sealed (UTC).",
    "chunks": "Chunks the version holds.",
    "gate": "The promotion gate's verdict: passed, refused or not evaluated.",
    "promoted": "The promoted version's value of the metric.",
    "metric": "The gated metric.",
    "candidate": "The candidate version's value.",
    "best_ever": "The best value any promoted version reached on the same gold queries.",
    "floor": "The least value the gate accepts.",
    "allowed_drop": "The largest fall below the promoted version the gate accepts.",
    "ci_low": "Lower end of the 95% bootstrap interval of the mean per-query difference from the promoted version.",
    "ci_high": "Upper end of the 95% bootstrap interval of the mean per-query difference from the promoted version.",
    "p_value": "Paired randomization p-value of the per-query difference from the promoted version.",
    "budget": "The largest P95 latency the gate accepts, in milliseconds.",
    "query_id": "The gold query.",
    "baseline": "The promoted version's nDCG@10 on the query.",
    "difference": "Candidate minus promoted nDCG@10 on the query.",
    "queries": "Gold queries in the bin.",
    "ndcg@10": "nDCG@10, mean over the gold queries (in a histogram: the bin).",
    "recall@100": "Recall@100, mean over the gold queries.",
    "mrr@10": "MRR@10, mean over the gold queries.",
    "p50_ms": "Median query latency, in milliseconds.",
    "p95_ms": "95th-percentile query latency, in milliseconds.",
    "fold_ndcg@10_min": "The lowest held-out nDCG@10 of a cross-validation fold.",
    "fold_ndcg@10_max": "The highest held-out nDCG@10 of a cross-validation fold.",
    "fold_ndcg@10_std": "Standard deviation of the folds' held-out nDCG@10.",
    # Cross-validation folds of the learned configuration.
    "fold": "The cross-validation fold, from 1.",
    "train_queries": "Gold queries the fold learned from.",
    "test_queries": "Gold queries held out to score the fold.",
    "train_ndcg@10": "nDCG@10 of the fold's configuration on its training queries.",
    "held_out_ndcg@10": "nDCG@10 of the fold's configuration on its held-out queries.",
    "deployment_ndcg@10": "nDCG@10 of the deployment's configuration on the same held-out queries.",
}

# The knowledge graph's edge table: ``source`` is where an edge starts, not a catalog source.
EDGE_DESCRIPTIONS = {"source": "The tool the edge starts at."}
# The quality history: one row per version, ``promoted`` is whether it serves now.
HISTORY_DESCRIPTIONS = {"promoted": "Whether the version serves queries now."}

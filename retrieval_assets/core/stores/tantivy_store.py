"""Tantivy lexical store: BM25 over ``title`` (boosted) and ``text`` with English stemming.

Schema: ``title`` and ``text`` use tantivy's ``en_stem`` analyzer; the identifier fields
(chunk_id, doc_id, tenant_id, section) and keyword metadata are raw-tokenised (exact match,
multi-valued for string lists); integer/float fields are indexed fast numeric fields and bool
fields indexed booleans, for term and range filters; the whole payload is stored as JSON.

User text never reaches tantivy's query parser: it runs through the same analyzer as the
index and becomes a disjunction of term queries, so query syntax (``C++ (foo) AND "bar``,
``title:x``) is just text. Filters are extra ``Must`` clauses scored zero, applied while
the engine collects the top-k.

Writes are visible to searches after ``finalize()`` (commit + reload). Only one writer may
exist per index (tantivy's lock file); it is opened lazily on the first ``add``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tantivy

from retrieval_assets.core.filters import FilterError, MetadataFilter
from retrieval_assets.core.models import StoreHit
from retrieval_assets.core.stores.base import (
    FULL_TEXT_PAYLOAD_FIELDS,
    KEYWORD_PAYLOAD_FIELDS,
    FieldType,
    LexicalStore,
    Payload,
    check_top_k,
    coerce_filter_values,
    prepare_index_dir,
    read_manifest,
    validate_field_types,
    validate_payloads,
    write_manifest,
)

INDEX_DIR = "index"
PAYLOAD_FIELD = "payload_json"
TEXT_TOKENIZER = "en_stem"
_NUMERIC_FIELD_TYPES = {"integer": tantivy.FieldType.Integer, "float": tantivy.FieldType.Float}


def _query_analyzer() -> tantivy.TextAnalyzer:
    """The pipeline tantivy registers as ``en_stem``, so query terms equal indexed terms."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


class TantivyLexicalStore(LexicalStore):
    """BM25 keyword search with exact metadata filters, on disk."""

    backend = "tantivy"

    def __init__(self, directory: Path, index: tantivy.Index, manifest: dict[str, Any]):
        """Use ``create`` or ``open``."""
        self.directory = directory
        self._index = index
        self._schema = index.schema
        self._manifest = manifest
        self.field_types: dict[str, FieldType] = manifest["field_types"]
        self.title_boost: float = manifest["title_boost"]
        self._writer_heap_bytes: int = manifest["writer_heap_bytes"]
        self._writer: tantivy.IndexWriter | None = None
        self._analyzer = _query_analyzer()

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        *,
        field_types: dict[str, FieldType] | None = None,
        title_boost: float = 2.0,
        writer_heap_bytes: int = 128_000_000,
        overwrite: bool = False,
    ) -> TantivyLexicalStore:
        """A new, empty index at ``path``; only fields in ``field_types`` (plus the identifier
        fields) can be filtered on."""
        types = validate_field_types(field_types)
        reserved = {*FULL_TEXT_PAYLOAD_FIELDS, PAYLOAD_FIELD}
        for field in types:
            if field in reserved or not tantivy.SchemaBuilder.is_valid_field_name(field) or "." in field:
                raise ValueError(f"{field!r} cannot be a tantivy filter field name")
        directory = prepare_index_dir(path, overwrite)
        (directory / INDEX_DIR).mkdir()
        index = tantivy.Index(_build_schema(types), path=str(directory / INDEX_DIR))
        manifest = {
            "backend": cls.backend,
            "format_version": 1,
            "count": 0,
            "field_types": types,
            "title_boost": title_boost,
            "tokenizer": TEXT_TOKENIZER,
            "writer_heap_bytes": writer_heap_bytes,
        }
        write_manifest(directory, manifest)
        return cls(directory, index, manifest)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> TantivyLexicalStore:
        """Open an existing index; several stores may read the same directory at once."""
        directory, manifest = read_manifest(path, cls.backend)
        return cls(directory, tantivy.Index.open(str(directory / INDEX_DIR)), manifest)

    # -- writes ------------------------------------------------------------------------------

    def add(self, payloads: Sequence[Payload]) -> None:
        """Index payloads; a chunk_id already present is replaced. Searchable after ``finalize``."""
        validate_payloads(payloads)
        writer = self._open_writer()
        for payload in payloads:
            # A delete applies to every earlier document, committed or not, so this replaces.
            writer.delete_documents_by_term("chunk_id", payload["chunk_id"])
            writer.add_document(self._document(payload))

    def finalize(self) -> None:
        """Commit pending writes and make them visible to searches."""
        if self._writer is None:
            return
        self._writer.commit()
        self._index.reload()
        self._manifest["count"] = self.count()
        write_manifest(self.directory, self._manifest)

    def close(self) -> None:
        """Commit pending writes and release the writer lock."""
        if self._writer is not None:
            self.finalize()
            self._writer.wait_merging_threads()  # consumes the writer and frees the lock
            self._writer = None

    # -- reads -------------------------------------------------------------------------------

    def count(self) -> int:
        return self._index.searcher().num_docs

    def chunk_ids(self) -> set[str]:
        searcher = self._index.searcher()
        if searcher.num_docs == 0:
            return set()
        hits = searcher.search(tantivy.Query.all_query(), limit=searcher.num_docs).hits
        return {searcher.doc(address).get_first("chunk_id") for _, address in hits}

    def search_text(
        self, query: str, top_k: int, filters: Sequence[MetadataFilter] = ()
    ) -> list[StoreHit]:
        check_top_k(top_k)
        text_query = self._text_query(query)
        if text_query is None:
            return []
        if filters:
            # Constant score 0: filters decide membership, BM25 alone decides the order.
            clauses = [(tantivy.Occur.Must, text_query)] + [
                (tantivy.Occur.Must, tantivy.Query.const_score_query(self._filter_query(flt), 0.0))
                for flt in filters
            ]
            text_query = tantivy.Query.boolean_query(clauses)
        searcher = self._index.searcher()
        hits = []
        for score, address in searcher.search(text_query, limit=top_k).hits:
            payload = json.loads(searcher.doc(address).get_first(PAYLOAD_FIELD))
            hits.append(StoreHit(chunk_id=payload["chunk_id"], score=score, payload=payload))
        return hits

    # -- internals ---------------------------------------------------------------------------

    def _text_query(self, text: str) -> tantivy.Query | None:
        """OR of the analysed terms over title (boosted) and text; None when no term is left."""
        terms = list(dict.fromkeys(self._analyzer.analyze(text)))
        if not terms:
            return None
        clauses = []
        for term in terms:
            title = tantivy.Query.term_query(self._schema, "title", term)
            clauses.append((tantivy.Occur.Should, tantivy.Query.boost_query(title, self.title_boost)))
            clauses.append((tantivy.Occur.Should, tantivy.Query.term_query(self._schema, "text", term)))
        return tantivy.Query.boolean_query(clauses)

    def _filter_query(self, flt: MetadataFilter) -> tantivy.Query:
        field_type = "keyword" if flt.field in KEYWORD_PAYLOAD_FIELDS else self.field_types.get(flt.field)
        if field_type is None:
            raise FilterError(
                f"{flt.field!r} is not a filter field of tantivy index {self.directory}; "
                f"declare it in field_types at create (filterable: {sorted(self.field_types)})"
            )
        if flt.any_of is not None:
            values = coerce_filter_values(flt, field_type)
            return tantivy.Query.term_set_query(self._schema, flt.field, values)
        if field_type not in _NUMERIC_FIELD_TYPES:
            raise FilterError(f"range filter on {flt.field!r}, a {field_type} field")
        lower, upper = flt.gte, flt.lte
        if field_type == "integer":
            # Integer fields want integer bounds; rounding inwards keeps the range inclusive.
            lower = None if lower is None else math.ceil(lower)
            upper = None if upper is None else math.floor(upper)
        return tantivy.Query.range_query(
            self._schema, flt.field, _NUMERIC_FIELD_TYPES[field_type], lower_bound=lower, upper_bound=upper
        )

    def _document(self, payload: Payload) -> tantivy.Document:
        doc = tantivy.Document()
        doc.add_text("title", str(payload["title"]))
        doc.add_text("text", str(payload["text"]))
        for field in KEYWORD_PAYLOAD_FIELDS:
            doc.add_text(field, str(payload[field]))
        for field, field_type in self.field_types.items():
            for value in _index_values(payload.get(field), field_type):
                if field_type == "keyword":
                    doc.add_text(field, value)
                elif field_type == "integer":
                    doc.add_integer(field, value)
                elif field_type == "float":
                    doc.add_float(field, value)
                else:
                    doc.add_boolean(field, value)
        doc.add_bytes(PAYLOAD_FIELD, json.dumps(payload, ensure_ascii=False).encode("utf-8"))
        return doc

    def _open_writer(self) -> tantivy.IndexWriter:
        if self._writer is None:
            try:
                self._writer = self._index.writer(heap_size=self._writer_heap_bytes)
            except Exception as exc:
                if "LockBusy" in str(exc):
                    raise RuntimeError(
                        f"tantivy index {self.directory} already has a writer (another store is adding to it)"
                    ) from exc
                raise
        return self._writer


def _build_schema(field_types: dict[str, FieldType]) -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    for field in FULL_TEXT_PAYLOAD_FIELDS:
        builder.add_text_field(field, stored=False, tokenizer_name=TEXT_TOKENIZER)
    for field in KEYWORD_PAYLOAD_FIELDS:
        builder.add_text_field(field, stored=True, tokenizer_name="raw", index_option="basic")
    for field, field_type in field_types.items():
        if field_type == "keyword":
            builder.add_text_field(field, stored=False, tokenizer_name="raw", index_option="basic")
        elif field_type == "integer":
            builder.add_integer_field(field, indexed=True, fast=True)
        elif field_type == "float":
            builder.add_float_field(field, indexed=True, fast=True)
        else:
            builder.add_boolean_field(field, indexed=True, fast=True)
    builder.add_bytes_field(PAYLOAD_FIELD, stored=True, indexed=False)
    return builder.build()


def _index_values(value: Any, field_type: FieldType) -> list[Any]:
    """The values of one payload field to index as ``field_type``; values that cannot be that
    type are left out (they stay in the stored payload, and no filter on the field matches
    them, as with ``MetadataFilter.matches``)."""
    if value is None:
        return []
    values = value if isinstance(value, (list, tuple)) else [value]
    if field_type == "keyword":
        return [str(v) for v in values]
    if field_type == "bool":
        return [v for v in values if isinstance(v, bool)]
    numbers: list[int | float] = []
    for v in values:
        if isinstance(v, bool):
            continue
        try:
            number = float(v)
        except (TypeError, ValueError):
            continue
        if field_type == "float":
            numbers.append(number)
        elif number.is_integer():
            numbers.append(v if isinstance(v, int) else int(number))
    return numbers

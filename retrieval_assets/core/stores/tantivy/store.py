"""Tantivy lexical store: BM25 over one ``content`` field (title + text), Lucene-style analysis.

Defaults follow Lucene's EnglishAnalyzer and Pyserini's "BM25 flat" BEIR baseline, not any one
dataset: title and text are indexed as one field (a separate title field with a 2x boost cost about
0.07 nDCG@10 on SciFact); tokens are lowercased, Lucene's 33 English stop words are dropped and
the rest Snowball-stemmed; a query term counts as often as it occurs in the query (Lucene adds
one clause per token). BM25's k1=1.2 and b=0.75 are fixed inside tantivy. The ``title`` field is
indexed as well, for an optional extra title boost.

The identifier fields (chunk_id, doc_id, tenant_id, section) and keyword metadata are
raw-tokenised (exact match, multi-valued for string lists); integer/float fields are indexed
fast numeric fields and bool fields indexed booleans, for term and range filters; the whole
payload is stored as JSON.

A hit's ids are read without its stored document: each document has a row number in the fast
field ``id_row``, and each tenant's index keeps the chunk and doc id of every row it was given in
``ids.arrow`` beside its segments (rows of deleted documents stay there until a rebuild). Reading
the stored document cost 10-17 us a hit on a million chunks (a BM25 search reads 100), and
holding every document's ids as Python objects, read from every stored document when the index
opened, took a serving process 1,038 MB there.

User text never reaches tantivy's query parser: it runs through the same analyzer as the
index and becomes a disjunction of term queries, so query syntax (``C++ (foo) AND "bar``,
``title:x``) is just text. Filters are extra ``Must`` clauses scored zero, applied while
the engine collects the top-k.

Per-tenant statistics. BM25 takes the document count, each term's document frequency and the
average field length from the whole index it searches, so in one index shared by tenants a
tenant's scores count every other tenant's documents: scoped to tenant alpha, an alpha-only word
scored 10.002 and a word that alpha shares with five beta documents 7.654, in the same alpha
document with the same term frequency, which let alpha count beta's documents holding a word
of its choice. The store directory therefore holds one tantivy index per tenant
(``index/<dir>/``, the tenant -> directory map in the manifest's ``tenant_dirs``; a directory
name is a hash of the tenant name, which may hold any character, behind a readable part). A
payload goes to its tenant's index. A search reads only the indexes of the tenants its
``tenant_id`` filters allow (no such filter: every tenant), each scored with its own statistics
and still filtered, and merges the hits by score, so a tenant's scores depend on its documents
alone and a single-tenant catalog scores as with one index.

An index of format 3 (one tantivy index, directly in ``index/``, for every tenant) still opens,
answers and takes writes as that one index spanning all tenants, with the BM25 statistics
shared as before (``shared_statistics`` is True, and opening it logs a warning), so versions
promoted before keep serving; a rebuild writes the current format.

Writes are visible to searches after ``finalize()`` (commit + reload); a batch that writes to
more than ``MAX_OPEN_WRITERS`` tenants commits the writers it closes on the way. Only one store
may write to a directory at a time (a ``writer.lock`` file held with ``flock``, besides each
index's own tantivy lock); writers are opened lazily on the first ``add``.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import heapq
import json
import logging
import math
import os
import re
import shutil
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from itertools import islice
from pathlib import Path
from typing import IO, Any, cast, get_args

import pyarrow as pa
import tantivy

from retrieval_assets.core.io.files import write_atomically
from retrieval_assets.core.models import StoreHit
from retrieval_assets.core.stores.base import (
    KEYWORD_PAYLOAD_FIELDS,
    TAG_SCORE,
    TAGS_FIELD,
    FieldType,
    LexicalStore,
    Payload,
    Stemmer,
    check_top_k,
    coerce_filter_values,
    index_values,
    metadata_field_names,
    parse_payload,
    prepare_index_dir,
    read_manifest,
    validate_field_types,
    validate_payloads,
    write_manifest,
)
from retrieval_assets.core.stores.filters import FilterError, MetadataFilter

logger = logging.getLogger(__name__)

# 1: separate title/text fields with tantivy's en_stem, no stop words; 2: metadata fields under
# their own names (dotted names impossible); 3: metadata fields under sanitised schema names;
# 4: one index per tenant, so BM25 statistics are the tenant's own; 5: row numbers in ``id_row``
# and each index's ids in ``ids.arrow``.
FORMAT_VERSION = 5
# Still read: an index per tenant without row numbers (a hit's ids come from its stored document).
UNNUMBERED_FORMAT_VERSION = 4
# Still read: one index for every tenant, BM25 statistics shared (see the module notes).
SHARED_INDEX_FORMAT_VERSION = 3
INDEX_DIR = "index"
WRITER_LOCK = "writer.lock"
# Writers open at once; one more commits and closes the least recently used, in the background
# (each holds indexing threads and a few MiB even when idle: 16 held 140 threads and 100 MiB).
MAX_OPEN_WRITERS = 8
# tantivy's least indexing heap per thread.
MIN_WRITER_HEAP_BYTES = 15_000_000
PAYLOAD_FIELD = "payload_json"
CONTENT_FIELD = "content"
ROW_FIELD = "id_row"
IDS_FILE = "ids.arrow"
# Large strings: one column of a tenant's ids may pass 2 GiB, the most a 32-bit offset can address.
_IDS_SCHEMA = pa.schema([("chunk_id", pa.large_string()), ("doc_id", pa.large_string())])
# The name schemas refer to, whatever the stemmer (an index records its stemmer in the manifest).
TEXT_TOKENIZER = "en_stem_stop"
_NUMERIC_FIELD_TYPES = {"integer": tantivy.FieldType.Integer, "float": tantivy.FieldType.Float}

# A hit of one index: that index, its searcher, score and address.
_Ranked = tuple["_Part", tantivy.Searcher, float, tantivy.DocAddress]


def _text_analyzer(stemmer: Stemmer) -> tantivy.TextAnalyzer:
    """Registered as ``TEXT_TOKENIZER`` for indexing and used on queries, so terms agree.

    tantivy's ``english`` stop list is Lucene's ``ENGLISH_STOP_WORDS_SET``; its stemmer is
    Snowball English (Porter2), within 0.001 nDCG@10 of Lucene's Porter on SciFact.
    """
    builder = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stopword("english"))
    )
    return (builder if stemmer == "none" else builder.filter(tantivy.Filter.stemmer(stemmer))).build()


@dataclass(eq=False)
class _Part:
    """One tantivy index of the store (a tenant's; in format 3 every tenant's), with its writer
    and, from format 5 on, the ids of its row numbers."""

    path: Path
    index: tantivy.Index
    # Row number -> (chunk_id, doc_id) as saved in ``ids.arrow``; None: an index without row numbers.
    ids: pa.Table | None = None
    writer: tantivy.IndexWriter | None = None
    # Written since the last ``finalize`` (its reader is reloaded then).
    dirty: bool = False
    # Chunk ids added since the last ``finalize``, committed early or not: what a delete must
    # reach besides what the reader shows.
    pending: set[str] = dataclasses.field(default_factory=set)
    # (chunk_id, doc_id) of the rows numbered since the last ``finalize``, after those of ``ids``.
    added: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def next_row(self, chunk_id: str, doc_id: str) -> int:
        """Number a new document's row, remembering its ids for ``ids.arrow``."""
        row = (0 if self.ids is None else self.ids.num_rows) + len(self.added)
        self.added.append((chunk_id, doc_id))
        return row

    def save_ids(self) -> None:
        """Write every row's ids, the added ones included, to a new ``ids.arrow`` (never in place:
        a delta's index may share the file with its base by a hard link)."""
        added = pa.table(
            {"chunk_id": [ids[0] for ids in self.added], "doc_id": [ids[1] for ids in self.added]}, schema=_IDS_SCHEMA
        )
        table = added if self.ids is None else pa.concat_tables([self.ids, added])
        table = table.combine_chunks()

        def write(tmp: Path) -> None:
            with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, _IDS_SCHEMA) as writer:
                writer.write_table(table)

        write_atomically(self.path / IDS_FILE, write)
        self.ids, self.added = table, []


class TantivyLexicalStore(LexicalStore):
    """BM25 keyword search with exact metadata filters, on disk, one index per tenant."""

    backend = "tantivy"

    def __init__(self, directory: Path, manifest: dict[str, Any]):
        """Use ``create`` or ``open``."""
        self.directory = directory
        self._manifest = manifest
        # Indexes written before the setting existed were stemmed in English.
        self.stemmer: Stemmer = manifest.get("stemmer", "english")
        self.field_types: dict[str, FieldType] = manifest["field_types"]
        # Metadata field -> tantivy field (catalog keys such as "relations.requires" are not valid names).
        self._schema_names: dict[str, str] = {**{f: f for f in KEYWORD_PAYLOAD_FIELDS}, **manifest["schema_names"]}
        self.title_boost: float = manifest["title_boost"]
        self._writer_heap_bytes: int = manifest["writer_heap_bytes"]
        # Format 3: one index for all tenants, their BM25 statistics shared.
        self.shared_statistics = manifest["format_version"] == SHARED_INDEX_FORMAT_VERSION
        # Format 5: documents carry row numbers (formats 3 and 4 are read from stored documents).
        self._numbered = manifest["format_version"] == FORMAT_VERSION
        # Tenant -> its index's directory under INDEX_DIR (formats 4 and 5).
        self._dirs: dict[str, str] = dict(manifest.get("tenant_dirs", {}))
        # Tenant (None: the one shared index of format 3) -> its index, in tenant order, replaced
        # whole when a tenant is added so that a search iterating it never sees it change.
        self._parts: dict[str | None, _Part]
        if self.shared_statistics:
            shared = self._open_index(directory / INDEX_DIR)
            self._schema = shared.schema
            self._parts = {None: _Part(directory / INDEX_DIR, shared)}
        else:
            self._parts = {
                tenant: self._open_part(directory / INDEX_DIR / name) for tenant, name in sorted(self._dirs.items())
            }
            # Queries name fields by their number in the schema: every tenant's index has the
            # schema of the first one made (the manifest's field order is not the one it was built in).
            schemas = [part.index.schema for part in self._parts.values()]
            self._schema = schemas[0] if schemas else _build_schema(self.field_types, manifest["schema_names"])
            if any(schema != self._schema for schema in schemas):
                raise ValueError(f"the tenant indexes of tantivy index {directory} differ in schema; rebuild it")
        # Tenants whose writers are open, least recently used first.
        self._writers: dict[str | None, None] = {}
        # Writers closed to make room, committing in the background until ``finalize``.
        self._closing: dict[str | None, Future[None]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._lock_file: IO[str] | None = None
        # True from ``create`` until the first ``add``.
        self._empty = False
        self._analyzer = _text_analyzer(self.stemmer)
        self._has_tags = self.field_types.get(TAGS_FIELD) == "keyword"
        # Filter fields each tenant's chunks have a value in (None: an index written before
        # this was recorded), so that a tenant is never told another tenant's field names.
        recorded = manifest.get("tenant_fields")
        self._tenant_fields = None if recorded is None else {t: set(f) for t, f in recorded.items()}

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        *,
        field_types: dict[str, FieldType] | None = None,
        title_boost: float = 0.0,
        stemmer: Stemmer = "english",
        writer_heap_bytes: int = 128_000_000,
        tenants: Collection[str] = (),
        overwrite: bool = False,
    ) -> TantivyLexicalStore:
        """A new, empty store at ``path``; only fields in ``field_types`` (plus the identifier
        fields) can be filtered on. Each tenant's index is made when its first chunk is added,
        or here for ``tenants`` (a build adding slices names every tenant first, as how many
        there are decides each writer's threads and heap).

        ``title_boost`` > 0 adds a title-only BM25 clause with that weight on top of ``content``
        (which holds the title already); 0 keeps the plain single-field BM25. ``stemmer`` is how
        the text fields are stemmed (``Stemmer``); queries are analysed the same way.
        """
        if not (math.isfinite(title_boost) and title_boost >= 0):
            raise ValueError(f"title_boost must be a finite number >= 0, got {title_boost}")
        if stemmer not in get_args(Stemmer):
            raise ValueError(f"stemmer must be one of {get_args(Stemmer)}, got {stemmer!r}")
        types = validate_field_types(field_types)
        schema_names = metadata_field_names(types)
        directory = prepare_index_dir(path, overwrite)
        (directory / INDEX_DIR).mkdir()
        manifest = {
            "backend": cls.backend,
            "format_version": FORMAT_VERSION,
            "count": 0,
            "field_types": types,
            "schema_names": schema_names,
            "title_boost": title_boost,
            "tokenizer": TEXT_TOKENIZER,
            "stemmer": stemmer,
            "writer_heap_bytes": writer_heap_bytes,
            "tenant_dirs": {},
            "tenant_fields": {},
        }
        write_manifest(directory, manifest)
        store = cls(directory, manifest)
        store._empty = True
        store._add_tenants(sorted(set(tenants)))
        return store

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> TantivyLexicalStore:
        """Open an existing store; several stores may read the same directory at once. A store
        of format 3 (one index for every tenant) opens as that one index, its BM25 statistics
        shared by the tenants as when it was built."""
        directory, manifest = read_manifest(path, cls.backend)
        version = manifest.get("format_version")
        if version not in (FORMAT_VERSION, UNNUMBERED_FORMAT_VERSION, SHARED_INDEX_FORMAT_VERSION):
            raise ValueError(
                f"tantivy index {directory} has format {version}, this code reads {FORMAT_VERSION} and "
                f"{UNNUMBERED_FORMAT_VERSION} (an index per tenant) and {SHARED_INDEX_FORMAT_VERSION} (one index "
                "for all tenants); rebuild the lexical index"
            )
        if version == SHARED_INDEX_FORMAT_VERSION:
            logger.warning(
                "tantivy index %s has format %s: one index for all tenants, whose BM25 statistics count "
                "every tenant's documents; a rebuild gives each tenant its own (format %s)",
                directory,
                version,
                FORMAT_VERSION,
            )
        return cls(directory, manifest)

    @classmethod
    def open_linked(
        cls, source: str | os.PathLike[str], target: str | os.PathLike[str], tenants: Collection[str]
    ) -> TantivyLexicalStore:
        """A new store at ``target`` (replacing what is there) holding ``tenants``' indexes of the
        store at ``source``, their files hard-linked instead of copied; any other tenant's index
        is made anew by its first ``add``. tantivy never changes a file once written (a commit
        writes new segment and delete files and renames a new ``meta.json`` into place, and
        garbage collection only unlinks), so writing to the new store leaves ``source`` as it was."""
        directory, manifest = read_manifest(source, cls.backend)
        if manifest["format_version"] != FORMAT_VERSION:
            raise ValueError(
                f"tantivy index {directory} has format {manifest['format_version']}: only format "
                f"{FORMAT_VERSION} (an index per tenant) can be linked tenant by tenant"
            )
        target_dir = prepare_index_dir(target, overwrite=True)
        (target_dir / INDEX_DIR).mkdir()
        dirs = {tenant: name for tenant, name in manifest["tenant_dirs"].items() if tenant in tenants}
        for name in dirs.values():
            _link_files(directory / INDEX_DIR / name, target_dir / INDEX_DIR / name)
        recorded = manifest.get("tenant_fields")
        linked = {
            **manifest,
            "tenant_dirs": dirs,
            "tenant_fields": None if recorded is None else {t: f for t, f in recorded.items() if t in dirs},
        }
        store = cls(target_dir, linked)
        linked["count"] = store.count()
        write_manifest(target_dir, linked)
        return store

    # -- writes ------------------------------------------------------------------------------

    def add(
        self, payloads: Sequence[Payload], encoded: Sequence[str | None] | None = None, *, new: bool = False
    ) -> None:
        """Index payloads, each in its tenant's index; a chunk_id already present (in any
        tenant's index) is replaced. Searchable after ``finalize``. ``encoded`` may give a
        payload's stored JSON text (None: encode it here), as a delta build has it for the
        chunks it keeps. ``new``: the caller vouches that no chunk of these is in the store
        yet (a build adding distinct chunks a slice at a time), so none is looked for."""
        validate_payloads(payloads)
        if encoded is not None and len(encoded) != len(payloads):
            raise ValueError(f"{len(payloads)} payloads but {len(encoded)} encoded payloads")
        self._lock_writes()
        if self._tenant_fields is not None:
            for payload in payloads:
                held = [name for name in self.field_types if payload.get(name) is not None]
                self._tenant_fields.setdefault(str(payload["tenant_id"]), set()).update(held)
        # The first batch into a new store has nothing to replace (its ids are distinct):
        # 104k deletes cost 0.3 s.
        replace, self._empty = not (self._empty or new), False
        if replace:
            # A delete applies to every earlier document, committed or not, so this replaces.
            self._delete_everywhere([payload["chunk_id"] for payload in payloads])
        texts: Sequence[str | None] = [None] * len(payloads) if encoded is None else encoded
        # Tenant by tenant, in the payloads' order within each: a writer is opened once per batch.
        batches: dict[str | None, list[tuple[Payload, str | None]]] = {}
        for payload, text in zip(payloads, texts, strict=True):
            key = None if self.shared_statistics else str(payload["tenant_id"])
            batches.setdefault(key, []).append((payload, text))
        # Every new tenant's index first: how many tenants there are decides the writers' threads.
        self._add_tenants([cast(str, key) for key in batches if key not in self._parts])
        for key, batch in batches.items():
            part = self._parts[key]
            writer = self._writer(key, part)
            for payload, text in batch:
                row = None if part.ids is None else part.next_row(payload["chunk_id"], payload["doc_id"])
                writer.add_document(self._document(payload, text, row))
            part.pending.update(payload["chunk_id"] for payload, _ in batch)

    def delete(self, chunk_ids: Iterable[str]) -> None:
        """Remove these chunks, from whichever tenant's index holds them (unknown ids are
        ignored); searchable after ``finalize``. Deleted documents stay in their index's BM25
        statistics (document frequencies, average length) until their segment is merged, which
        tantivy-py cannot ask for, so that tenant's scores drift from those of an index built
        without them: delta builds rebuild the lexical index instead."""
        self._lock_writes()
        self._delete_everywhere(chunk_ids)

    def finalize(self) -> None:
        """Commit pending writes and make them visible to searches."""
        written = [part for part in self._parts.values() if part.dirty]
        if not written:
            return
        for key in list(self._closing):
            self._closing.pop(key).result()
        # Ids before the commit: a document the reader shows always has its row's ids saved.
        self._in_parallel([part.save_ids for part in written if part.ids is not None])
        # Each commit writes and syncs its own files: 4 took a quarter of the time in parallel.
        self._in_parallel([part.writer.commit for part in written if part.writer is not None])
        for part in written:
            part.index.reload()
            part.pending.clear()
            part.dirty = False
        self._manifest["count"] = self.count()
        if not self.shared_statistics:
            self._manifest["tenant_dirs"] = dict(sorted(self._dirs.items()))
        if self._tenant_fields is not None:
            self._manifest["tenant_fields"] = {t: sorted(f) for t, f in sorted(self._tenant_fields.items())}
        write_manifest(self.directory, self._manifest)

    def close(self) -> None:
        """Commit pending writes and release the writer locks."""
        self.finalize()
        writers = [self._parts[key].writer for key in self._writers]
        for key in self._writers:
            self._parts[key].writer = None
        self._writers.clear()
        # wait_merging_threads consumes a writer and frees its index's lock.
        self._in_parallel([writer.wait_merging_threads for writer in writers if writer is not None])
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        if self._lock_file is not None:
            self._lock_file.close()  # releases the flock
            self._lock_file = None

    # -- reads -------------------------------------------------------------------------------

    def count(self) -> int:
        return sum(part.index.searcher().num_docs for part in self._parts.values())

    def count_tenants(self, tenants: Collection[str]) -> int:
        """Chunks of ``tenants`` (format 3: every tenant's, as its statistics are shared)."""
        if self.shared_statistics:
            return self.count()
        return sum(self._parts[t].index.searcher().num_docs for t in tenants if t in self._parts)

    def filter_fields(self, tenants: Collection[str] | None = None) -> dict[str, FieldType]:
        """Each filter field and its type (the identifiers are keywords); with ``tenants``, only
        fields some chunk of theirs has a value in (once added; deletes do not take a field away)."""
        keywords: dict[str, FieldType] = dict.fromkeys(KEYWORD_PAYLOAD_FIELDS, "keyword")
        if tenants is None:
            return {**keywords, **self.field_types}
        held = set().union(*(self._tenant_fields.get(t, set()) for t in tenants)) if self._tenant_fields else set()
        return {**keywords, **{name: kind for name, kind in self.field_types.items() if name in held}}

    def chunk_ids(self) -> set[str]:
        found: set[str] = set()
        for part in self._parts.values():
            searcher = part.index.searcher()
            if searcher.num_docs:
                hits = searcher.search(tantivy.Query.all_query(), limit=searcher.num_docs).hits
                found.update(chunk_id for chunk_id, _ in _ids_at(part, searcher, [address for _, address in hits]))
        return found

    def search_text(
        self,
        query: str,
        top_k: int,
        filters: Sequence[MetadataFilter] = (),
        *,
        expansion_terms: Mapping[str, float] | None = None,
        tag_terms: Sequence[str] = (),
    ) -> list[StoreHit]:
        """BM25 top-k chunks for ``query``, best first.

        ``expansion_terms`` maps extra words (vocabulary neighbours, feedback terms) to a weight
        in [0, 1]; each is analysed like the query and searched as an optional term with that
        weight as boost (an analysed term gets the highest weight any expansion word gives it,
        added to its query-word weight; weight 0 adds nothing). A query whose own words are all
        stop words or punctuation still searches with its expansion terms.

        ``tag_terms`` are exact values of the keyword payload field ``tags`` (``format:DICOM``):
        every distinct one a chunk carries adds ``TAG_SCORE``. Tags only reorder chunks that the
        words match, never add chunks of their own, and are ignored when the index has no
        ``tags`` keyword field. With no word or expansion term left the result is empty.

        Filters are ``Must`` clauses scored zero: only BM25 and tags order the hits, and
        nothing from expansion or tags widens the filtered set. Only the indexes of the
        tenants that the ``tenant_id`` filters allow are searched (all without one), each
        with its own BM25 statistics; their hits are merged by score (ties: tenant order).
        """
        check_top_k(top_k)
        weights = self._term_weights(query, expansion_terms or {})
        if not weights:
            return []
        clauses = [(tantivy.Occur.Must, self._text_query(weights))]
        if self._has_tags:
            for tag in dict.fromkeys(tag_terms):
                tag_query = tantivy.Query.term_query(self._schema, self._schema_names[TAGS_FIELD], tag)
                clauses.append((tantivy.Occur.Should, tantivy.Query.const_score_query(tag_query, TAG_SCORE)))
        search = self._with_filters(clauses, filters)
        ranked = self._top_k(search, top_k, self._searched(filters))
        # The stored document is read only if the hit is shown: most candidates are fused and dropped.
        return [
            StoreHit(chunk_id, score, doc_id=doc_id, load=partial(_payload_at, searcher, address))
            for (_, searcher, score, address), (chunk_id, doc_id) in zip(ranked, _hit_ids(ranked), strict=True)
        ]

    def fetch_documents(self, doc_ids: Sequence[str], filters: Sequence[MetadataFilter] = ()) -> list[StoreHit]:
        """The stored payload of each given document's first chunk (lowest ordinal of the
        ``{doc_id}#{ordinal}`` chunk id), when it passes ``filters``; in ``doc_ids`` order,
        each document once, score 0.0. Unknown and filtered-out ids are absent."""
        wanted = list(dict.fromkeys(doc_ids))
        if not wanted:
            return []
        by_id = [(tantivy.Occur.Must, self._any_term("doc_id", wanted))]
        query = self._with_filters(by_id, filters)
        first: dict[str, Payload] = {}
        for part in self._searched(filters):
            searcher = part.index.searcher()
            # Every chunk of the wanted documents, so the first one can be chosen.
            # SearchResult.count exists at runtime; tantivy's stub leaves it out.
            matching = searcher.search(query, limit=1, count=True).count or 0  # type: ignore[attr-defined]
            if matching == 0:
                continue
            for _, address in searcher.search(query, limit=matching).hits:
                payload = _payload_at(searcher, address)
                current = first.get(payload["doc_id"])
                if current is None or _chunk_order(payload["chunk_id"]) < _chunk_order(current["chunk_id"]):
                    first[payload["doc_id"]] = payload
        return [StoreHit(chunk_id=first[d]["chunk_id"], score=0.0, payload=first[d]) for d in wanted if d in first]

    # -- internals ---------------------------------------------------------------------------

    def _searched(self, filters: Sequence[MetadataFilter]) -> list[_Part]:
        """The indexes a search with ``filters`` reads: those of the tenants that every
        ``tenant_id`` filter allows (all tenants without one), in tenant order."""
        parts = self._parts
        if self.shared_statistics:
            return list(parts.values())
        scope: set[str] | None = None
        for flt in filters:
            if flt.field == "tenant_id" and flt.any_of is not None:
                allowed = {str(value) for value in coerce_filter_values(flt, "keyword")}
                scope = allowed if scope is None else scope & allowed
        if scope is None:
            return list(parts.values())
        return [parts[tenant] for tenant in sorted(scope) if tenant in parts]

    def _top_k(self, query: tantivy.Query, top_k: int, parts: list[_Part]) -> list[_Ranked]:
        """The best ``top_k`` hits of ``query`` over ``parts``, best first (ties: part order), each
        with its index and searcher."""
        found = []
        for part in parts:
            searcher = part.index.searcher()
            # count=False lets tantivy skip blocks that cannot reach the top k (20% faster on SciFact).
            hits = searcher.search(query, limit=top_k, count=False).hits
            if hits:
                found.append((part, searcher, hits))
        if len(found) == 1:
            part, searcher, hits = found[0]
            return [(part, searcher, score, address) for score, address in hits]
        # Merged lazily: of up to len(parts) x top_k hits, only the top k are taken.
        ranked = [_ranked(part, searcher, hits) for part, searcher, hits in found]
        return list(islice(heapq.merge(*ranked, key=_best_first), top_k))

    def _term_weights(self, query: str, expansion_terms: Mapping[str, float]) -> dict[str, float]:
        """Analysed term -> boost: query term frequency (as Lucene sums a clause per token),
        plus the best expansion weight of each expansion term."""
        weights: dict[str, float] = {term: float(n) for term, n in Counter(self._analyzer.analyze(query)).items()}
        expanded: dict[str, float] = {}
        for word, weight in expansion_terms.items():
            if not (math.isfinite(weight) and 0.0 <= weight <= 1.0):
                raise ValueError(f"expansion term {word!r}: weight must be in [0, 1], got {weight}")
            if weight == 0.0:
                continue
            for term in self._analyzer.analyze(word):
                expanded[term] = max(expanded.get(term, 0.0), weight)
        for term, weight in expanded.items():
            weights[term] = weights.get(term, 0.0) + weight
        return weights

    def _text_query(self, weights: Mapping[str, float]) -> tantivy.Query:
        """OR of the weighted terms over ``content`` (and ``title`` when boosted)."""
        fields = [(CONTENT_FIELD, 1.0)] + ([("title", self.title_boost)] if self.title_boost > 0 else [])
        clauses = []
        for term, weight in weights.items():
            for field, field_boost in fields:
                query = tantivy.Query.term_query(self._schema, field, term)
                boost = weight * field_boost
                if boost != 1.0:
                    query = tantivy.Query.boost_query(query, boost)
                clauses.append((tantivy.Occur.Should, query))
        return tantivy.Query.boolean_query(clauses)

    def _with_filters(
        self, clauses: list[tuple[tantivy.Occur, tantivy.Query]], filters: Sequence[MetadataFilter]
    ) -> tantivy.Query:
        """``clauses`` plus one ``Must`` per filter, scored zero: filters decide membership only."""
        filter_clauses = [
            (tantivy.Occur.Must, tantivy.Query.const_score_query(self._filter_query(flt), 0.0)) for flt in filters
        ]
        return tantivy.Query.boolean_query(clauses + filter_clauses)

    def _any_term(self, field: str, values: Sequence[Any]) -> tantivy.Query:
        """Documents whose ``field`` holds any of ``values``: a disjunction of term queries.
        tantivy's ``term_set_query`` cost 0.18 ms per search here whatever the values (measured
        on the bundled index), this 0.002 ms; every tenant-scoped and more-like-this search pays it."""
        return tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(self._schema, field, value)) for value in values]
        )

    def _filter_query(self, flt: MetadataFilter) -> tantivy.Query:
        field_type = "keyword" if flt.field in KEYWORD_PAYLOAD_FIELDS else self.field_types.get(flt.field)
        if field_type is None:
            raise FilterError(
                f"{flt.field!r} is not a filter field of this index (filterable: "
                f"{sorted({*KEYWORD_PAYLOAD_FIELDS, *self.field_types})})"
            )
        if flt.any_of is not None:
            values = coerce_filter_values(flt, field_type)
            return self._any_term(self._schema_names[flt.field], values)
        if field_type not in _NUMERIC_FIELD_TYPES:
            raise FilterError(f"range filter on {flt.field!r}, a {field_type} field")
        lower, upper = flt.gte, flt.lte
        if field_type == "integer":
            # Integer fields want integer bounds; rounding inwards keeps the range inclusive.
            lower = None if lower is None else math.ceil(lower)
            upper = None if upper is None else math.floor(upper)
        return tantivy.Query.range_query(
            self._schema,
            self._schema_names[flt.field],
            _NUMERIC_FIELD_TYPES[field_type],
            lower_bound=lower,
            upper_bound=upper,
        )

    def _document(self, payload: Payload, encoded: str | None = None, row: int | None = None) -> tantivy.Document:
        doc = tantivy.Document()
        if row is not None:
            doc.add_unsigned(ROW_FIELD, row)
        title, text = str(payload["title"]), str(payload["text"])
        doc.add_text(CONTENT_FIELD, f"{title}\n{text}")
        if self.title_boost > 0:  # only a title clause reads the title field
            doc.add_text("title", title)
        for field in KEYWORD_PAYLOAD_FIELDS:
            doc.add_text(field, str(payload[field]))
        for field, field_type in self.field_types.items():
            name = self._schema_names[field]
            for value in index_values(payload.get(field), field_type):
                if field_type == "keyword":
                    doc.add_text(name, value)
                elif field_type == "integer":
                    doc.add_integer(name, value)
                elif field_type == "float":
                    doc.add_float(name, value)
                else:
                    doc.add_boolean(name, value)
        doc.add_bytes(PAYLOAD_FIELD, (encoded or json.dumps(payload, ensure_ascii=False)).encode("utf-8"))
        return doc

    def _open_part(self, path: Path) -> _Part:
        if not self._numbered:
            return _Part(path, self._open_index(path))
        if not (path / IDS_FILE).is_file():
            raise FileNotFoundError(f"tantivy index {path} has no {IDS_FILE}: rebuild the lexical index")
        # Read whole: about 60 bytes a row, against 10-17 us a hit to read a stored document.
        with pa.OSFile(str(path / IDS_FILE)) as source:
            return _Part(path, self._open_index(path), ids=pa.ipc.open_file(source).read_all().cast(_IDS_SCHEMA))

    def _open_index(self, path: Path) -> tantivy.Index:
        index = tantivy.Index.open(str(path))
        # Custom analyzers are not persisted in the index: register before any writer exists.
        index.register_tokenizer(TEXT_TOKENIZER, _text_analyzer(self.stemmer))
        return index

    def _add_tenants(self, tenants: Collection[str]) -> None:
        """A new, empty index for each of these tenants' chunks; the manifest names them at
        ``finalize``. Made in parallel: each writes and syncs its files (16 took 0.20 s one
        after another, 0.04 s at once)."""
        if not tenants:
            return
        paths: dict[str, Path] = {}
        for tenant in tenants:
            name = _tenant_dir_name(tenant, {*self._dirs.values(), *(p.name for p in paths.values())})
            paths[tenant] = path = self.directory / INDEX_DIR / name
            if path.exists():
                shutil.rmtree(path)  # left by a writer that never finalized: no manifest names it
            path.mkdir(parents=True)
        indexes: dict[str, tantivy.Index] = {}

        def make(tenant: str) -> None:
            indexes[tenant] = tantivy.Index(self._schema, path=str(paths[tenant]))

        self._in_parallel([partial(make, tenant) for tenant in paths])
        for tenant, path in paths.items():
            indexes[tenant].register_tokenizer(TEXT_TOKENIZER, _text_analyzer(self.stemmer))
            self._dirs[tenant] = path.name
        ids = _IDS_SCHEMA.empty_table() if self._numbered else None
        added = {tenant: _Part(paths[tenant], indexes[tenant], ids=ids) for tenant in paths}
        self._parts = {t: self._parts.get(t) or added[t] for t in sorted(self._dirs)}

    def _delete_everywhere(self, chunk_ids: Iterable[str]) -> None:
        """Delete these chunks in every index that holds them, committed (as its reader shows)
        or added since the last ``finalize``; the other indexes are left alone."""
        wanted = list(dict.fromkeys(chunk_ids))
        if not wanted:
            return
        for key, part in self._parts.items():
            held = part.pending.intersection(wanted) | self._committed_chunks(part, wanted)
            if held:
                writer = self._writer(key, part)
                for chunk_id in sorted(held):
                    writer.delete_documents_by_term("chunk_id", chunk_id)

    def _committed_chunks(self, part: _Part, chunk_ids: list[str]) -> set[str]:
        searcher = part.index.searcher()
        if not searcher.num_docs:
            return set()
        query = tantivy.Query.term_set_query(self._schema, "chunk_id", chunk_ids)
        # SearchResult.count exists at runtime; tantivy's stub leaves it out.
        found = searcher.search(query, limit=1, count=True).count or 0  # type: ignore[attr-defined]
        if not found:
            return set()
        hits = searcher.search(query, limit=found).hits
        return {chunk_id for chunk_id, _ in _ids_at(part, searcher, [address for _, address in hits])}

    def _writer(self, key: str | None, part: _Part) -> tantivy.IndexWriter:
        """The writer of ``part`` (tenant ``key``), opened if need be; past ``MAX_OPEN_WRITERS``
        open writers the least recently used one is committed and closed in the background.

        A store of one tenant (or of format 3) writes as before: tantivy's threads (one segment
        each) and the whole heap. With several tenants each writer has one thread, so a tenant's
        index is one segment where a batch fits the heap (a search pays per segment and term: on
        SciFact in 16 tenants, one segment each rather than two more than halved an unscoped
        search), and a share of the heap, so that the open writers together keep to
        ``writer_heap_bytes``."""
        self._lock_writes()
        closing = self._closing.pop(key, None)
        if closing is not None:
            closing.result()
        if part.writer is None:
            while len(self._writers) >= MAX_OPEN_WRITERS:
                self._close_writer(next(iter(self._writers)))
            shared = len(self._parts) <= 1
            heap = self._writer_heap_bytes if shared else self._writer_heap_bytes // MAX_OPEN_WRITERS
            try:
                part.writer = part.index.writer(
                    heap_size=max(heap, MIN_WRITER_HEAP_BYTES), num_threads=0 if shared else 1
                )
            except Exception as exc:
                if "LockBusy" in str(exc):
                    raise RuntimeError(
                        f"tantivy index {part.path} already has a writer (another store is adding to it)"
                    ) from exc
                raise
        self._writers.pop(key, None)
        self._writers[key] = None  # most recently used last
        part.dirty = True
        return part.writer

    def _close_writer(self, key: str | None) -> None:
        """Commit ``key``'s writer and free its index's lock, in the background (``finalize``
        and a new writer for ``key`` wait for it); its index stays ``dirty`` until ``finalize``
        reloads it."""
        del self._writers[key]
        part = self._parts[key]
        writer, part.writer = part.writer, None
        if writer is not None:
            self._closing[key] = self._executor().submit(_commit_and_close, writer)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(MAX_OPEN_WRITERS, thread_name_prefix="tantivy-commit")
        return self._pool

    def _in_parallel(self, calls: Sequence[Callable[[], object]]) -> None:
        """Run ``calls`` at once (tantivy's commits, closes and index creation release the GIL);
        the first error is raised once all have ended."""
        if len(calls) == 1:
            calls[0]()
        elif calls:
            futures = [self._executor().submit(call) for call in calls]
            for future in futures:
                future.exception()
            for future in futures:
                future.result()

    def _lock_writes(self) -> None:
        """Hold the store's writer lock (until ``close``): one store writes to a directory at a
        time, whichever tenants it writes to."""
        if self._lock_file is not None:
            return
        handle = (self.directory / WRITER_LOCK).open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            handle.close()
            raise RuntimeError(
                f"tantivy index {self.directory} already has a writer (another store is adding to it)"
            ) from exc
        self._lock_file = handle


def _link_files(source: Path, target: Path) -> None:
    """Hard-link every file of one tantivy index into ``target`` (lock files excepted: each
    writer makes its own)."""
    target.mkdir(parents=True)
    for path in source.iterdir():
        if path.is_file() and not path.name.endswith(".lock"):
            os.link(path, target / path.name)


def _commit_and_close(writer: tantivy.IndexWriter) -> None:
    writer.commit()
    writer.wait_merging_threads()  # consumes the writer and frees its index's lock


def _tenant_dir_name(tenant: str, taken: Collection[str]) -> str:
    """The directory of a tenant's index: a tenant name may hold any character (``/``, ``..``,
    case that a case-insensitive file system folds), so a readable part of letters, digits,
    "_" and "-" is followed by a hash of the whole name."""
    readable = re.sub(r"[^a-z0-9_-]+", "_", tenant.lower())[:32]
    digest = hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    name, suffix = f"t_{readable}_{digest}", 2
    while name in taken:
        name, suffix = f"t_{readable}_{digest}_{suffix}", suffix + 1
    return name


def _ranked(part: _Part, searcher: tantivy.Searcher, hits: list[tuple[float, tantivy.DocAddress]]) -> Iterator[_Ranked]:
    for score, address in hits:
        yield part, searcher, score, address


def _hit_ids(ranked: Sequence[_Ranked]) -> list[tuple[str, str]]:
    """(chunk_id, doc_id) of each hit, in order: one row lookup per index searched."""
    if not ranked:
        return []
    first = ranked[0][0]
    if all(hit[0] is first for hit in ranked):  # one index (one tenant, or one that answered)
        return _ids_at(first, ranked[0][1], [hit[3] for hit in ranked])
    positions: dict[int, list[int]] = {}
    for position, hit in enumerate(ranked):
        positions.setdefault(id(hit[0]), []).append(position)
    found: list[tuple[str, str]] = [("", "")] * len(ranked)
    for held in positions.values():
        part, searcher = ranked[held[0]][0], ranked[held[0]][1]
        for position, ids in zip(held, _ids_at(part, searcher, [ranked[p][3] for p in held]), strict=True):
            found[position] = ids
    return found


def _ids_at(part: _Part, searcher: tantivy.Searcher, addresses: list[tantivy.DocAddress]) -> list[tuple[str, str]]:
    """(chunk_id, doc_id) of each document: by its row number where the index has them, else
    (formats 3 and 4) from its stored document."""
    if part.ids is None:
        docs = [searcher.doc(address) for address in addresses]
        # Every document is written with both ids as text (see ``_document``).
        return [(cast(str, doc.get_first("chunk_id")), cast(str, doc.get_first("doc_id"))) for doc in docs]
    rows = cast(list[int], searcher.fast_field_values(ROW_FIELD, addresses))
    ids, added = part.ids, part.added
    saved = ids.num_rows
    if max(rows, default=0) < saved:
        taken = ids.take(rows)
        return list(zip(taken.column(0).to_pylist(), taken.column(1).to_pylist(), strict=True))
    # A row past the saved ones was numbered since the last ``finalize``: a writer closed to make
    # room commits its documents, and the reader reloads, before their ids are saved.
    chunk_ids, doc_ids = ids.column(0), ids.column(1)
    return [(chunk_ids[row].as_py(), doc_ids[row].as_py()) if row < saved else added[row - saved] for row in rows]


def _best_first(hit: _Ranked) -> float:
    return -hit[2]


def _build_schema(field_types: dict[str, FieldType], schema_names: dict[str, str]) -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    for field in (CONTENT_FIELD, "title"):
        builder.add_text_field(field, stored=False, tokenizer_name=TEXT_TOKENIZER)
    for field in KEYWORD_PAYLOAD_FIELDS:
        builder.add_text_field(field, stored=True, tokenizer_name="raw", index_option="basic")
    for field, field_type in field_types.items():
        name = schema_names[field]
        if field_type == "keyword":
            builder.add_text_field(name, stored=False, tokenizer_name="raw", index_option="basic")
        elif field_type == "integer":
            builder.add_integer_field(name, indexed=True, fast=True)
        elif field_type == "float":
            builder.add_float_field(name, indexed=True, fast=True)
        else:
            builder.add_boolean_field(name, indexed=True, fast=True)
    builder.add_bytes_field(PAYLOAD_FIELD, stored=True, indexed=False)
    builder.add_unsigned_field(ROW_FIELD, stored=False, indexed=False, fast=True)
    return builder.build()


def _chunk_order(chunk_id: str) -> tuple[int, int, str]:
    """Sort key putting a document's chunks in ordinal order (``{doc_id}#{ordinal}``, numeric,
    so ``#10`` follows ``#2``); ids without an ordinal go last, by text."""
    _, sep, ordinal = chunk_id.rpartition("#")
    if sep and ordinal.isdigit():
        return 0, int(ordinal), chunk_id
    return 1, 0, chunk_id


def _payload_at(searcher: tantivy.Searcher, address: tantivy.DocAddress) -> Payload:
    # Every document is written with its payload as bytes (see ``TantivyLexicalStore._document``).
    return parse_payload(cast(bytes, searcher.doc(address).get_first(PAYLOAD_FIELD)))

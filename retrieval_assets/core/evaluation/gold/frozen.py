"""Generated gold, frozen: the same queries judge every build of a catalog until someone redraws them.

Regenerating gold for each build would move the yardstick with the corpus, and versions would no
longer be comparable (the gate compares a candidate with the promoted version and the best ever on
the same gold). So gold is drawn once per catalog and stored as
``<directory>/<catalog_key>/<fingerprint>.json``, a file never overwritten, with ``current.json``
naming the one in use. It changes only two ways, each recorded in the new file's ``history``:

* ``retire_missing``: queries whose documents were all deleted are retired ("document deleted"),
  and judgements of deleted duplicates are pruned; the gold otherwise stays as it was.
* ``redraw``: the explicit action that replaces the current gold; the old file stays.

``catalog_key`` is a stable key of one catalog (the caller's hash of its sources): gold never
crosses catalogs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from pathlib import Path

from retrieval_assets.core.evaluation.gold.model import GeneratedGold, GoldChange, now_iso
from retrieval_assets.core.io.files import write_atomically, write_json

CURRENT = "current.json"
DELETED = "document deleted"
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class GoldStoreError(ValueError):
    """A store action that would change frozen gold silently, or a catalog without gold."""


class GoldStore:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def _folder(self, catalog_key: str) -> Path:
        if not _KEY.fullmatch(catalog_key):
            raise ValueError(f"catalog key {catalog_key!r} is not a plain file name (letters, digits, . _ -)")
        return self.directory / catalog_key

    def path(self, catalog_key: str, fingerprint: str) -> Path:
        return self._folder(catalog_key) / f"{fingerprint}.json"

    def load(self, path: Path) -> GeneratedGold:
        return GeneratedGold.model_validate_json(path.read_bytes())

    def current(self, catalog_key: str) -> GeneratedGold | None:
        pointer = self._folder(catalog_key) / CURRENT
        if not pointer.exists():
            return None
        return self.load(self.path(catalog_key, json.loads(pointer.read_text())["fingerprint"]))

    def _write(self, catalog_key: str, gold: GeneratedGold) -> Path:
        """The gold's file (left as it is when it exists), then the pointer to it."""
        path = self.path(catalog_key, gold.fingerprint)
        if not path.exists():
            write_atomically(path, lambda tmp: tmp.write_text(gold.model_dump_json(indent=2)))
        write_json({"fingerprint": gold.fingerprint}, self._folder(catalog_key) / CURRENT)
        return path

    def freeze(self, catalog_key: str, gold: GeneratedGold) -> Path:
        """Store ``gold`` as the catalog's gold. Refused when the catalog has other gold already:
        read ``current`` first, and ``redraw`` to replace it."""
        existing = self.current(catalog_key)
        if existing is not None and existing.fingerprint != gold.fingerprint:
            raise GoldStoreError(
                f"catalog {catalog_key} has frozen gold {existing.fingerprint[:16]} already; redraw to replace it"
            )
        return self._write(catalog_key, gold)

    def redraw(self, catalog_key: str, gold: GeneratedGold, *, at: str | None = None) -> Path:
        """Make ``gold`` the catalog's gold in place of the current one, whose file stays."""
        existing = self.current(catalog_key)
        if existing is not None and existing.fingerprint != gold.fingerprint:
            change = GoldChange(
                action="redraw",
                at=at or now_iso(),
                from_fingerprint=existing.fingerprint,
                to_fingerprint=gold.fingerprint,
            )
            gold = gold.model_copy(update={"history": [*gold.history, change]})
        return self._write(catalog_key, gold)

    def retire_missing(
        self, catalog_key: str, existing_doc_ids: Collection[str], *, at: str | None = None
    ) -> GeneratedGold:
        """The current gold less what deleted documents took with them (doc ids are unique in a
        documents frame, whatever the tenant). Nothing is written when nothing was deleted."""
        gold = self.current(catalog_key)
        if gold is None:
            raise GoldStoreError(f"catalog {catalog_key} has no frozen gold")
        retired: dict[str, str] = {}
        pruned: dict[str, list[str]] = {}
        qrels: dict[str, dict[str, int]] = {}
        for qid, judged in gold.qrels.items():
            kept = {doc: grade for doc, grade in judged.items() if doc in existing_doc_ids}
            if not kept:
                retired[qid] = DELETED
                continue
            if len(kept) < len(judged):
                pruned[qid] = [doc for doc in judged if doc not in kept]
            qrels[qid] = kept
        if not retired and not pruned:
            return gold
        queries = {qid: text for qid, text in gold.queries.items() if qid in qrels}
        updated = gold.model_copy(update={"queries": queries, "qrels": qrels, "retired": {**gold.retired, **retired}})
        change = GoldChange(
            action="retire",
            at=at or now_iso(),
            from_fingerprint=gold.fingerprint,
            to_fingerprint=updated.fingerprint,
            retired=retired,
            pruned=pruned,
        )
        updated = updated.model_copy(update={"history": [*gold.history, change]})
        self._write(catalog_key, updated)
        return updated

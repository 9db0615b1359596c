"""Index versions: each build writes a candidate; a pointer file names the one that serves.

Layout under ``root``::

    versions/<version>/{faiss,qdrant,tantivy,vocabulary.parquet,vocabulary_counts.parquet,graph.parquet}
    versions/<version>/delta.json        a candidate built from a copy of another version: that base and the changes
    versions/<version>/chunks.parquet    chunk id, document and row hash of each chunk, what a later delta diffs against
    versions/<version>/version.json      written last: the version is complete ("sealed")
    versions/<version>/evaluation.json   the evaluation report and the promotion gate's verdict
    versions/<version>/retrieval_configuration.json   the configuration learned from the gold queries
    promoted.json                        the served version, replaced by an atomic rename
    history.jsonl                        every promotion, refusal and rollback, appended (a rollback to a
                                         version the gate refused only with force, recorded as forced)

A version's id comes from its build fingerprint (chunks, models, index settings), so a re-run
of an interrupted build writes the same version again instead of a second copy.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from retrieval_assets.core.faults import fault_point
from retrieval_assets.core.index.layout import IndexLayout
from retrieval_assets.core.io.files import write_json

VERSION_MANIFEST = "version.json"
EVALUATION_REPORT = "evaluation.json"
CONFIGURATION_REPORT = "retrieval_configuration.json"
POINTER = "promoted.json"
HISTORY = "history.jsonl"
DEFAULT_KEEP = 3


@dataclass(frozen=True)
class CandidateRecord:
    """The version a build writes, as ``index_candidate`` hands it to the index assets and
    ``index_version`` (with ``sealed``) hands it to the evaluation."""

    version: str
    fingerprint: str
    # A complete version with this fingerprint existed (nothing changed): nothing is rebuilt.
    reused: bool
    sealed: bool = False
    # The models and index settings alone (``build.settings_fingerprint``): a delta needs them unchanged.
    settings_fingerprint: str = ""
    # The version this candidate is built from by applying only the changed chunks (its plan is
    # the candidate's ``delta.json``); None: reused, or built in full.
    base_version: str | None = None
    # Why it is built this way: reused, delta, or why a delta was not possible.
    build_reason: str = ""

    @property
    def mode(self) -> str:
        if self.reused:
            return "reused"
        return f"delta from {self.base_version}" if self.base_version else "full"


class VersionError(RuntimeError):
    """A version that does not exist, is not complete, or cannot be rolled back to."""


class RefusedVersionError(VersionError):
    """A rollback to a version the promotion gate refused, asked for without ``force``."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class IndexVersion:
    id: str
    path: Path

    @property
    def layout(self) -> IndexLayout:
        return IndexLayout(self.path)

    @property
    def sealed(self) -> bool:
        return (self.path / VERSION_MANIFEST).is_file()

    def manifest(self) -> dict[str, Any]:
        if not self.sealed:
            raise VersionError(f"index version {self.id} is incomplete (no {VERSION_MANIFEST})")
        return json.loads((self.path / VERSION_MANIFEST).read_text())

    @property
    def delta_base(self) -> str | None:
        """The version an incomplete candidate is being built from (its delta plan names it)."""
        path = self.layout.delta_plan
        return None if self.sealed or not path.is_file() else json.loads(path.read_text())["base"]

    def evaluation(self) -> dict[str, Any] | None:
        return self._report(EVALUATION_REPORT)

    def write_evaluation(self, report: dict[str, Any]) -> Path:
        return self._write_report(EVALUATION_REPORT, report)

    def learned_configuration(self) -> dict[str, Any] | None:
        """The tuning report ``retrieval_configuration`` wrote for this version, if any."""
        return self._report(CONFIGURATION_REPORT)

    def write_learned_configuration(self, report: dict[str, Any]) -> Path:
        return self._write_report(CONFIGURATION_REPORT, report)

    def _report(self, name: str) -> dict[str, Any] | None:
        path = self.path / name
        return json.loads(path.read_text()) if path.is_file() else None

    def _write_report(self, name: str, report: dict[str, Any]) -> Path:
        path = self.path / name
        write_json(report, path)
        return path

    def gate_verdict(self) -> tuple[str, list[str]]:
        """The promotion gate's verdict on this version ("passed", "refused" or "not evaluated")
        and its reasons (empty unless refused)."""
        gate = (self.evaluation() or {}).get("gate")
        if not gate:
            return "not evaluated", []
        return ("passed", []) if gate.get("passed") else ("refused", [str(r) for r in gate.get("reasons") or []])

    def served_configuration(self) -> dict[str, Any] | None:
        """The learned configuration this version serves with: only one the promotion gate passed
        with (the evaluation report names it); None: the deployment's own settings."""
        report = self.evaluation() or {}
        if not (report.get("gate") or {}).get("passed"):
            return None
        return report.get("served_configuration")


class IndexVersions:
    """The versions of one deployment's indexes and which of them is promoted."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.versions_dir = self.root / "versions"
        self._pointer: tuple[tuple[int, int, int], dict[str, Any]] | None = None

    def version(self, version_id: str) -> IndexVersion:
        if not version_id or "/" in version_id or version_id.startswith("."):
            raise VersionError(f"not a version id: {version_id!r}")
        return IndexVersion(version_id, self.versions_dir / version_id)

    def candidate(self, fingerprint: str) -> IndexVersion:
        """The version a build with this fingerprint writes (existing and sealed when nothing changed)."""
        version = self.version(f"v-{fingerprint[:16]}")
        version.path.mkdir(parents=True, exist_ok=True)
        return version

    def seal(self, version: IndexVersion, fingerprint: str, **facts: Any) -> dict[str, Any]:
        manifest = {"version": version.id, "fingerprint": fingerprint, "sealed_at": _now(), **facts}
        write_json(manifest, version.path / VERSION_MANIFEST)
        return manifest

    def sealed(self) -> list[IndexVersion]:
        """Complete versions, oldest first."""
        if not self.versions_dir.is_dir():
            return []
        versions = [self.version(p.name) for p in self.versions_dir.iterdir() if p.is_dir()]
        return sorted((v for v in versions if v.sealed), key=lambda v: v.manifest()["sealed_at"])

    def promoted(self) -> IndexVersion | None:
        pointer = self.pointer()
        return self.version(pointer["version"]) if pointer else None

    def promote(self, version: IndexVersion, reason: str, **facts: Any) -> None:
        """Switch serving to ``version`` atomically and log it; readers see the old or the new pointer."""
        if not version.sealed:
            raise VersionError(f"cannot promote {version.id}: it is incomplete")
        previous = self.promoted()
        record = {
            "version": version.id,
            "previous": previous.id if previous else None,
            "promoted_at": _now(),
            "reason": reason,
            **facts,
        }
        fault_point("promote")
        write_json(record, self.root / POINTER)  # readers see the old pointer or the new one
        self.log("promoted", **record)

    def pointer(self) -> dict[str, Any] | None:
        """The promoted pointer, read again only when the file changed: ``promote`` renames a new
        file into place, so its inode changes. A search asks two or three times; a read cost
        about 20 us, a stat 1 us."""
        path = self.root / POINTER
        try:
            stat = path.stat()
        except FileNotFoundError:
            return None
        key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        cached = self._pointer
        if cached is None or cached[0] != key:
            cached = self._pointer = (key, json.loads(path.read_text()))
        return dict(cached[1])

    def rollback_target(self, to: str | None = None) -> IndexVersion:
        """``to``, or else the version that was promoted before the current one; complete."""
        pointer = self.pointer()
        target_id = to or (pointer or {}).get("previous")
        if not target_id:
            raise VersionError("no earlier promoted version to roll back to")
        target = self.version(target_id)
        if not target.sealed:
            raise VersionError(f"cannot roll back to {target_id}: it was pruned or never completed")
        return target

    @staticmethod
    def check_rollback(target: IndexVersion, force: bool = False) -> None:
        """Refuse (``RefusedVersionError``) a rollback to a version the promotion gate refused,
        unless ``force``: the message names the verdict and its reasons."""
        verdict, reasons = target.gate_verdict()
        if verdict == "refused" and not force:
            raise RefusedVersionError(
                f"the promotion gate refused {target.id} ({'; '.join(reasons) or 'no reason recorded'}); "
                "serving it anyway needs force, and is recorded as a forced rollback"
            )

    def rollback(
        self, to: str | None = None, *, force: bool = False, by: str | None = None, why: str | None = None
    ) -> IndexVersion:
        """Promote ``rollback_target(to)`` and log the rollback. A target the gate refused needs
        ``force``; such a rollback is recorded as forced, with who asked (``by``) and why."""
        target = self.rollback_target(to)
        self.check_rollback(target, force)
        current = self.promoted()
        previous = current.id if current else None
        verdict, reasons = target.gate_verdict()
        forced: dict[str, Any] = {}
        if verdict == "refused":
            # Recorded on the pointer, the promotion and the rollback alike: a refused version serves.
            forced = {"forced": True, "forced_by": by, "forced_why": why, "gate": verdict, "gate_reasons": reasons}
        reason = f"{'forced ' if forced else ''}rollback from {previous}"
        self.promote(target, reason=reason, **forced)
        self.log("rolled_back", version=target.id, previous=previous, **forced)
        return target

    def log(self, event: str, **facts: Any) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / HISTORY).open("a") as handle:
            handle.write(json.dumps({"event": event, "at": _now(), **facts}, sort_keys=True) + "\n")

    def history(self) -> Iterator[dict[str, Any]]:
        path = self.root / HISTORY
        if path.is_file():
            with path.open() as handle:
                yield from (json.loads(line) for line in handle if line.strip())

    def prune(self, keep: int = DEFAULT_KEEP, protect: tuple[str, ...] = ()) -> list[str]:
        """Delete sealed versions beyond the newest ``keep``; the promoted one, the one a rollback
        would return to, the base of every delta build still in progress, and ``protect`` stay."""
        pointer = self.pointer() or {}
        spared = {*protect, pointer.get("version"), pointer.get("previous"), *self._delta_bases()}
        sealed = self.sealed()
        removed = [v for v in sealed[: max(len(sealed) - keep, 0)] if v.id not in spared]
        for version in removed:
            # Unseal first: a half-deleted directory must never look like a complete version.
            (version.path / VERSION_MANIFEST).unlink()
            shutil.rmtree(version.path)
        return [v.id for v in removed]

    def _delta_bases(self) -> set[str]:
        """Versions that unsealed candidates copy their indexes from (a build in progress, or
        one that was interrupted and will be re-run)."""
        if not self.versions_dir.is_dir():
            return set()
        candidates = (self.version(p.name) for p in self.versions_dir.iterdir() if p.is_dir())
        return {base for candidate in candidates if (base := candidate.delta_base)}

    def best_promoted(self, gold: str) -> dict[str, float]:
        """The best value of each metric that any version promoted through the gate reached on
        the gold queries with fingerprint ``gold``: the floor a chain of small drops cannot pass."""
        best: dict[str, float] = {}
        for event in self.history():
            if event.get("event") == "promoted" and event.get("gold") == gold:
                for metric, value in (event.get("metrics") or {}).items():
                    if isinstance(value, int | float):
                        best[metric] = max(best.get(metric, value), value)
        return best

    def quality_history(self) -> list[dict[str, Any]]:
        """One row per complete version, oldest first: the metrics of the configuration it serves, the
        gate's verdict, the gold that judged it (fingerprint and kind) and whether it serves now."""
        promoted = self.promoted()
        forced = self.forced_rollbacks()
        rows = []
        for version in self.sealed():
            manifest, report = version.manifest(), version.evaluation() or {}
            metrics = (report.get("runs") or {}).get(report.get("served") or report.get("default"), {})
            gate = report.get("gate") or {}
            rows.append(
                {
                    "version": version.id,
                    "sealed_at": manifest["sealed_at"],
                    "chunks": manifest.get("chunks"),
                    # The configuration judged: "tuned" when a learned one was adopted for this version.
                    "configuration": report.get("served") or report.get("default"),
                    "ndcg@10": metrics.get("ndcg@10"),
                    "recall@100": metrics.get("recall@100"),
                    "p95_ms": metrics.get("p95_ms"),
                    "gate": "passed" if gate.get("passed") else ("refused" if gate else "not evaluated"),
                    # The gold that judged it; an evaluation from before gold kinds were recorded had the catalog's own.
                    "gold": report.get("gold"),
                    "gold_kind": report.get("gold_kind") or ("curated" if report.get("gold") else None),
                    # The tenants the gold was searched among (none recorded: every tenant, before scoping).
                    "gold_scope": ", ".join(report["gold_scope"]) if report.get("gold_scope") else None,
                    # A rollback that served the version although the gate refused it: when, who, why.
                    "forced_rollback": forced.get(version.id),
                    "promoted": promoted is not None and version.id == promoted.id,
                }
            )
        return rows

    def forced_rollbacks(self) -> dict[str, str]:
        """Each version the gate refused that a forced rollback served, with the last such rollback
        in words: when, by whom, why."""
        forced: dict[str, str] = {}
        for event in self.history():
            if event.get("event") == "rolled_back" and event.get("forced"):
                forced[event["version"]] = (
                    f"forced at {event.get('at')} by {event.get('forced_by') or '(unknown)'}: "
                    f"{event.get('forced_why') or '(no reason given)'}"
                )
        return forced

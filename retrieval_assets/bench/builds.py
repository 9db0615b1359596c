"""The bench's build step: a build run of the product's job that must seal a candidate."""

from __future__ import annotations

from dataclasses import dataclass, fields

from retrieval_assets.core.index.versions import CandidateRecord
from retrieval_assets.runs import BuildOutcome


class BenchmarkError(RuntimeError):
    """A build or evaluation run of the bench failed; its run log says why."""


@dataclass(frozen=True)
class SealedBuild(BuildOutcome):
    """A ``BuildOutcome`` whose run sealed its candidate (so ``candidate`` is never None)."""

    candidate: CandidateRecord


def sealed(outcome: BuildOutcome) -> SealedBuild:
    """``outcome``, once it is known to have sealed a candidate."""
    candidate = outcome.candidate
    if not outcome.success or candidate is None or not candidate.sealed:
        raise BenchmarkError(f"the build run {outcome.run.run_id} did not seal a candidate; see its log above")
    return SealedBuild(**{field.name: getattr(outcome, field.name) for field in fields(outcome)})

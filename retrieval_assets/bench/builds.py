"""The bench's build step: a build run of the product's job that must seal a candidate."""

from __future__ import annotations

from retrieval_assets.runs import BuildOutcome


class BenchmarkError(RuntimeError):
    """A build or evaluation run of the bench failed; its run log says why."""


def sealed(outcome: BuildOutcome) -> BuildOutcome:
    """``outcome``, once it is known to have sealed a candidate."""
    if not outcome.success or outcome.candidate is None or not outcome.candidate.sealed:
        raise BenchmarkError(f"the build run {outcome.run.run_id} did not seal a candidate; see its log above")
    return outcome

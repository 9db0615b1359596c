"""What the CLI prints: the run's progress and summary, search results, and its dependencies kept quiet.

``retrieval-assets run`` (``make demo``) is a newcomer's first command: it says what it is doing,
then what was built, how each configuration scored, the gate's verdict, what now serves and the
sample query's hits, without the libraries' own chatter (Dagster's DEBUG event lines, model
loading bars, beta warnings).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from retrieval_assets.core.models import RetrievalResult

if TYPE_CHECKING:
    import pandas as pd

# Dagster's console logger at WARNING: the run's events stay in the instance (the UI shows them),
# failures still print.
QUIET_RUN_CONFIG: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def quiet_dependencies() -> None:
    """Silence what the models' libraries print that says nothing to a user."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # torch, on SPLADE's max-pooling (core/embed/sparse.py): the API it uses is stable in practice.
    warnings.filterwarnings("ignore", message=r"index_reduce\(\) is in beta", category=UserWarning)
    # Dagster's notices that an API definitions.py uses is in preview or beta: for its developers.
    from dagster import BetaWarning, PreviewWarning

    warnings.filterwarnings("ignore", category=PreviewWarning)
    warnings.filterwarnings("ignore", category=BetaWarning)
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()  # "Loading weights" as each model loads
    logging.getLogger("sentence_transformers").setLevel(logging.WARNING)


def build_line(candidate: str, reused: bool, documents: int, quarantined: int, chunks: int) -> str:
    """What the build made: the candidate version, its documents and chunks."""
    if reused:
        return f"Built {candidate}: nothing changed since it was built, so it is reused"
    skipped = f", {quarantined} quarantined" if quarantined else ""
    return f"Built {candidate}: {documents} documents{skipped}, {chunks} chunks"


def evaluation_lines(candidate: str, report: Mapping[str, Any]) -> list[str]:
    """Each configuration's scores on the gold queries, the one that serves marked."""
    served = report.get("served") or report.get("default")
    lines = [f"Candidate {candidate}, each configuration's scores on the gold queries:"]
    for name, metrics in report.get("runs", {}).items():
        marker = " (served)" if name == served else ""
        lines.append(f"  {name}{marker}: " + ", ".join(f"{k}={v}" for k, v in metrics.items()))
    return lines


def verdict_line(report: Mapping[str, Any], promoted: str | None) -> str:
    """The promotion gate's verdict, and the version that serves now."""
    gate = report.get("gate", {})
    verdict = "passed" if gate.get("passed") else "REFUSED: " + "; ".join(gate.get("reasons", []))
    return f"Promotion gate: {verdict}. Serving: {promoted or 'nothing'}"


def result_lines(result: RetrievalResult) -> list[str]:
    """A search result: the query and how it ran, then each hit with its per-strategy ranks."""
    flags = [name for name, on in (("reranked", result.reranked), ("REFINE requested", result.refine)) if on]
    lines = [
        (
            f"query: {result.query!r}  strategies: {', '.join(result.strategies)}  fusion: {result.fusion}  "
            f"{' '.join(flags)}  ({result.timings_ms.get('total_ms', 0):.0f} ms)"
        )
    ]
    diagnostics = result.diagnostics
    for label, key in (("searched as", "query"), ("filters", "filters"), ("more like", "more_like_this"),
                       ("context tokens", "context_tokens"), ("excluded", "excluded_ids")):
        if diagnostics.get(key) and (key != "query" or diagnostics[key] != result.query):
            lines.append(f"  {label}: {diagnostics[key]}")
    for rank, hit in enumerate(result.hits, start=1):
        per_strategy = "  ".join(f"{name}#{s.rank}={s.score:.3f}" for name, s in hit.strategy_scores.items())
        title = hit.title or hit.text[:80]
        where = f"{hit.section}{_pages(hit.metadata)}"
        lines.append(f"{rank:>3}. {hit.score:.4f}  {hit.doc_id}  [{hit.chunk_id}, {where}]  {title[:90]}")
        lines.append(f"     {per_strategy}" + (f"  via graph: {' > '.join(hit.graph_path)}" if hit.graph_path else ""))
    return lines


def _pages(metadata: Mapping[str, Any]) -> str:
    """", p. 3" or ", pp. 3-4" for a hit in a paged file; "" otherwise."""
    first, last = metadata.get("page_start"), metadata.get("page_end")
    if first is None:
        return ""
    return f", p. {first}" if first == last else f", pp. {first}-{last}"


def failed_check_lines(run: Any) -> list[str]:
    """One line per asset check a run (``ExecuteInProcessResult``) failed: what it checks and what
    it found, so a stopped build names its reason."""
    lines = []
    for evaluation in run.get_asset_check_evaluations():
        if evaluation.passed:
            continue
        found = evaluation.description or ", ".join(
            f"{key} {getattr(value, 'value', value)}" for key, value in evaluation.metadata.items()
        )
        lines.append(f"check {evaluation.asset_key.to_user_string()}/{evaluation.check_name} failed: {found}")
    return lines


def sample_query(documents: pd.DataFrame, words: int = 8) -> str:
    """A query a build's documents (their titles and texts) answer: the first informative title,
    else the first words of the first document."""
    for title in documents["title"].dropna().head(100):
        if len(str(title).split()) >= 2:
            return str(title)
    return " ".join(str(documents["text"].iloc[0]).split()[:words]) if len(documents) else "search"

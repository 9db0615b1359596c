"""``bench --generated-gold``: judge the bench's configurations with known-item gold too.

On a dataset that has real gold, the configurations the bench evaluated are evaluated again on
known-item gold generated from the built candidate's cleaned documents (the function, seed and
size the ``gold_queries`` asset uses), through the same ``evaluate_configurations`` and the same
deployment settings as the evaluation asset. Kendall's tau-b between the two nDCG@10 columns says
whether the generated gold ranks the configurations as the real gold does (issue 30's agreement
check: tau >= 0.6 wanted).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from retrieval_assets.bench.report import tqdm_progress
from retrieval_assets.core.evaluation.benchmark import CONFIGURATIONS, evaluate_configurations
from retrieval_assets.core.evaluation.gold.agreement import kendall_tau, split_half_agreement
from retrieval_assets.core.evaluation.gold.known_item import generate_known_item_gold
from retrieval_assets.core.evaluation.tuning import RetrievalConfiguration
from retrieval_assets.defs.assets.evaluation import TUNED
from retrieval_assets.defs.assets.gold import DEFAULT_SEED, DEFAULT_SIZE, DOCUMENT_COLUMNS
from retrieval_assets.defs.resources import SearchResource


def measure_generated_gold(
    documents: pd.DataFrame,
    search: SearchResource,
    version: str,
    real_runs: Mapping[str, Mapping[str, float]],
    learned: Mapping[str, Any] | None = None,
    real_per_query: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, Any]:
    """The ``generated_gold`` figures: every configuration in ``real_runs`` (the real-gold
    evaluation's runs; ``tuned`` with the ``learned`` configuration, ``tuned_cv`` left out: it is
    not one configuration) measured on known-item gold drawn from ``documents``; with
    ``real_per_query`` (each configuration's nDCG@10 per real query), how far two halves of the
    real gold agree with each other, the ceiling the generated gold's tau is read against."""
    columns = [column for column in DOCUMENT_COLUMNS if column in documents]
    generated = generate_known_item_gold(documents[columns], seed=DEFAULT_SEED, size=DEFAULT_SIZE)
    if len(generated.queries) < 2:
        raise ValueError(f"generated gold has {len(generated.queries)} queries: {'; '.join(generated.warnings)}")
    gold = generated.as_gold_set()
    named = [name for name in real_runs if name in CONFIGURATIONS]
    try:
        # As ``retrieval_evaluation``: the deployment's settings, each configuration changing one thing.
        deployment = search.retriever(version).configured(search.retrieval_settings())
        reports = evaluate_configurations(
            deployment, gold, {name: CONFIGURATIONS[name] for name in named}, progress=tqdm_progress
        )
        if TUNED in real_runs and learned and learned.get("configuration"):
            tuned = RetrievalConfiguration.model_validate(learned["configuration"]).apply(deployment.settings)
            reports |= evaluate_configurations(deployment.configured(tuned), gold, {TUNED: {}}, progress=tqdm_progress)
    finally:
        search.close()
    generated_ndcg = {name: round(report.metrics["ndcg@10"], 4) for name, report in reports.items()}
    real_ndcg = {name: float(real_runs[name]["ndcg@10"]) for name in generated_ndcg}
    tau = kendall_tau(generated_ndcg, real_ndcg)
    available = real_per_query or {}
    scored = {name: available[name] for name in generated_ndcg if name in available}
    return {
        "queries": len(generated.queries),
        "fingerprint": generated.fingerprint[:16],
        "kind": generated.kind,
        "seed": generated.seed,
        "method": generated.method,
        "warnings": generated.warnings,
        "kendall_tau": None if math.isnan(tau) else round(tau, 4),
        "ndcg_at_10": generated_ndcg,
        "real_ndcg_at_10": real_ndcg,
        "real_split_half": _split_half(scored) if len(scored) == len(generated_ndcg) else None,
    }


def _split_half(per_query: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """The real gold's split-half agreement, or why there is none (too few queries, say): the
    bench's other figures are still worth reporting."""
    try:
        return dict(split_half_agreement(per_query))
    except ValueError as error:
        return {"error": str(error)}


def agreement_table(figures: Mapping[str, Any]) -> str:
    """Configuration, real and generated nDCG@10 (ordered by the real column), then tau."""
    generated, real = figures["ndcg_at_10"], figures["real_ndcg_at_10"]
    width = max(len("configuration"), *(len(name) for name in generated))
    lines = [f"{'configuration':<{width}}  real nDCG@10  generated nDCG@10"]
    for name in sorted(generated, key=lambda n: (-real[n], n)):
        lines.append(f"{name:<{width}}  {real[name]:>12.4f}  {generated[name]:>17.4f}")
    tau = figures["kendall_tau"]
    lines.append(
        f"Kendall's tau-b (generated vs real, {len(generated)} configurations, {figures['queries']} generated "
        f"queries): {'undefined (a column is constant)' if tau is None else f'{tau:.4f}'}"
    )
    halves = figures.get("real_split_half")
    if halves and "error" in halves:
        lines.append(f"real gold against itself: not measured ({halves['error']})")
    elif halves:
        lines.append(
            f"real gold against itself ({halves['splits']} random splits into halves of {halves['queries_per_half']} "
            f"queries): median tau-b {halves['median']:.4f} (quartiles {halves['q1']:.4f} to {halves['q3']:.4f}), "
            f"{halves['share_reaching_bar']:.0%} of splits reach {halves['bar']}"
        )
    return "\n".join(lines)

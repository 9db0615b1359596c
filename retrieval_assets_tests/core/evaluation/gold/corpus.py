"""Synthetic documents frames for the generated-gold tests."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

WORDS = [f"{stem}{i}" for stem in ("graph", "vector", "index", "token", "query", "model") for i in range(40)]


def documents(
    tenants: dict[str, int], *, seed: int = 0, words: int = 30, sources: tuple[str, ...] = ()
) -> pd.DataFrame:
    """``count`` documents per tenant, each ``words`` words long; even ones have an informative,
    unique title, odd ones a generic one; ``sources`` are dealt round-robin into the metadata."""
    rng = np.random.default_rng(seed)
    rows = []
    for tenant, count in tenants.items():
        for i in range(count):
            text = " ".join(rng.choice(WORDS, size=words).tolist()) + " and the of 2024"
            title = f"Notes on {tenant} {WORDS[i % len(WORDS)]} systems number{i}" if i % 2 == 0 else "Introduction"
            metadata = {"source": sources[i % len(sources)]} if sources else {}
            rows.append(
                {
                    "doc_id": f"{tenant}-{i:04d}",
                    "title": title,
                    "text": text,
                    "tenant_id": tenant,
                    "metadata": json.dumps(metadata),
                }
            )
    return pd.DataFrame(rows).astype("string")

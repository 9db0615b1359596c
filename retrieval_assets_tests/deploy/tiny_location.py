"""A code location for the deployment tests: the product's own definitions (jobs, sensors,
schedules, checks, executor) with the catalog and home taken from two environment variables, so
that the daemon, the run processes and the executor's workers, each loading this module, all build
the tiny catalog into the test's home."""

from __future__ import annotations

import os

from dagster import Definitions
from dagster_shared.record import copy

from retrieval_assets import definitions
from retrieval_assets.defs.resources import CatalogResource, PromotionGateResource
from retrieval_assets.runs import deployment_resources
from retrieval_assets_tests.deploy.production_instance import CATALOG_VAR, HOME_VAR


def _with_tiny_resources(product: Definitions) -> Definitions:
    # Built in a function: a second Definitions object at module scope would make the module ambiguous.
    resources = deployment_resources(
        os.environ[HOME_VAR],
        CatalogResource(format="beir", path=os.environ[CATALOG_VAR]),
        # Judged on a shared 2-core machine with the daemon, builds and workers beside it: the
        # flow is under test here, not the latency budget.
        gate=PromotionGateResource(p95_budget_ms=30_000),
    )
    return copy(product, resources={**(product.resources or {}), **resources})


defs = _with_tiny_resources(definitions.defs)

"""The code location's executor: Celery workers when a broker is configured, Dagster's default otherwise.

Where ``DAGSTER_CELERY_BROKER_URL`` is set when the definitions load (the compose stack sets it
for the Dagster services and the ``celery-worker`` service), every job without an executor of its
own runs each step as a task on a Celery worker (Redis broker; results in
``DAGSTER_CELERY_BACKEND_URL``, by default the broker). Unset, Dagster's default executor runs
the steps in processes of the run's own machine, as ``make dev`` does.

Why Celery and not Dask: dagster-celery's orchestration loop holds the instance's concurrency
pools (``index_writes``: two builds never write one version at once) and honours step retries;
dagster-dask runs each step on a worker without the instance's pool accounting, and its retries
are disabled. ``document_update_job`` keeps its in-process executor (one process loads the
models once for a small update).

The workers use the same settings through this module's ``app``:
``celery -A retrieval_assets.defs.executor worker --concurrency=1``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dagster import Definitions, ExecutorDefinition, definitions

BROKER_VAR = "DAGSTER_CELERY_BROKER_URL"
BACKEND_VAR = "DAGSTER_CELERY_BACKEND_URL"

# Longer than any step may run: Redis hands an unacknowledged task to another worker after this,
# even while the first still runs it. A worker that dies outright (not only its pool process)
# gives its task back after this long, or at once when it shuts down warm.
VISIBILITY_TIMEOUT_SECONDS = 12 * 3600

# The Celery app's settings, for the runs that send tasks and the workers that execute them.
# A step is acknowledged only once it finished (acks_late), and a worker whose pool process dies
# mid-step (OOM killer, SIGKILL) puts it back on the queue instead of failing it
# (reject_on_worker_lost): another worker, or the restarted process, runs it again. The
# embedding cache is content addressed and each step's writes are atomic, so running a step
# again after a kill is safe. One task reserved per process (prefetch 1): the shards of a
# backfill spread over idle workers instead of queueing behind a busy one.
CELERY_SETTINGS: dict[str, Any] = {
    "task_acks_late": True,
    "task_reject_on_worker_lost": True,
    "worker_prefetch_multiplier": 1,
    # A worker that loses the broker gives its running steps back (they could not be acknowledged).
    "worker_cancel_long_running_tasks_on_connection_loss": True,
    "broker_connection_retry_on_startup": True,
    # dagster-celery's own transport options (replaced as a whole by these), and the timeout above.
    "broker_transport_options": {
        "max_retries": 3,
        "interval_start": 0,
        "interval_step": 0.2,
        "interval_max": 0.5,
        "visibility_timeout": VISIBILITY_TIMEOUT_SECONDS,
    },
}


def celery_config(environ: Mapping[str, str] = os.environ) -> dict[str, Any] | None:
    """The Celery executor's config where ``environ`` names a broker, else None. Broker and
    backend are read from the environment when a run starts, so the URLs (and any password in
    them) never enter the run's stored config."""
    if not environ.get(BROKER_VAR):
        return None
    return {
        "broker": {"env": BROKER_VAR},
        "backend": {"env": BACKEND_VAR if environ.get(BACKEND_VAR) else BROKER_VAR},
        "config_source": CELERY_SETTINGS,
    }


def distributed_executor(environ: Mapping[str, str] = os.environ) -> ExecutorDefinition | None:
    """``celery_executor`` configured from ``environ``, or None (Dagster's default) without a broker."""
    config = celery_config(environ)
    if config is None:
        return None
    # Imported only here: dagster-celery is the `production` extra, not needed without a broker.
    from dagster_celery import celery_executor

    return celery_executor.configured(config, name="celery")


def worker_app(environ: Mapping[str, str] = os.environ) -> Any:
    """The Celery app a worker runs: dagster-celery's step task, with the executor's settings."""
    from dagster_celery.config import DEFAULT_CONFIG, dict_wrapper
    from dagster_celery.make_app import make_app
    from dagster_celery.tasks import create_task

    broker = environ.get(BROKER_VAR)
    if not broker:
        raise RuntimeError(f"a Celery worker needs {BROKER_VAR} (the broker the Dagster runs send steps to)")
    app = make_app(
        {
            "broker": broker,
            "backend": environ.get(BACKEND_VAR) or broker,
            "include": [],
            # dagster-celery's defaults under the executor's own settings, as the executor merges them.
            "config_source": dict_wrapper({**DEFAULT_CONFIG, **CELERY_SETTINGS}),
        }
    )
    create_task(app)
    return app


def __getattr__(name: str) -> Any:
    # `celery -A retrieval_assets.defs.executor` looks up `app`; built on demand, so loading the
    # code location (which imports this module) creates no Celery app.
    if name == "app":
        return worker_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@definitions
def executor() -> Definitions:
    return Definitions(executor=distributed_executor())

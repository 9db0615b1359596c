"""Default locations, overridable by configuration or environment."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
BUNDLED_DATA = PROJECT_ROOT / "data"
DEFAULT_CATALOG = BUNDLED_DATA / "scifact_mini"


def default_home() -> Path:
    """Where artifacts and indexes are written: ``$RETRIEVAL_ASSETS_HOME`` or ``./var``."""
    return Path(os.environ.get("RETRIEVAL_ASSETS_HOME", PROJECT_ROOT / "var"))

"""Asset code versions change with the code and settings defaults an asset runs, and only then,
and every process computes the same ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from retrieval_assets.definitions import defs
from retrieval_assets.defs.code_versions import asset_function, code_version

# A tiny project of its own: an asset, the core function it calls, the settings class its
# resource inherits, and a core module it does not use.
PROBE = {
    "probe/__init__.py": "",
    "probe/core/__init__.py": "",
    "probe/core/steps.py": "def scaled(value: int) -> int:\n    return 2 * value\n",
    "probe/core/unused.py": "def other() -> int:\n    return 1\n",
    "probe/core/settings.py": textwrap.dedent(
        """\
        from pydantic import BaseModel


        class SizeSettings(BaseModel):
            size: int = 8
        """
    ),
    "probe/assets.py": textwrap.dedent(
        """\
        from dagster import ConfigurableResource, asset

        from probe.core.settings import SizeSettings
        from probe.core.steps import scaled


        class SizeResource(ConfigurableResource, SizeSettings):
            pass


        @asset
        def numbers(size: SizeResource) -> list[int]:
            return [scaled(n) for n in range(size.size)]
        """
    ),
}


@pytest.fixture
def probe_version(tmp_path: Path) -> Iterator:
    """Computes the probe asset's code version with some of its files changed, each time from
    a fresh import in a folder of its own."""
    calls = iter(range(100))

    def version(**changes: tuple[str, str]) -> str:
        root = tmp_path / f"copy{next(calls)}"
        for name, text in PROBE.items():
            old, new = changes.get(name, ("", ""))
            assert old in text
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text.replace(old, new) if old else text)
        sys.path.insert(0, str(root))
        try:
            from probe.assets import numbers  # type: ignore[import-not-found]

            return code_version(asset_function(numbers), project="probe")
        finally:
            sys.path.remove(str(root))
            for module in [name for name in sys.modules if name == "probe" or name.startswith("probe.")]:
                del sys.modules[module]

    yield version


def test_the_same_code_has_the_same_version(probe_version) -> None:
    assert probe_version() == probe_version()


def test_the_version_changes_with_the_asset_source(probe_version) -> None:
    assert probe_version(**{"probe/assets.py": ("range(size.size)", "range(size.size + 1)")}) != probe_version()


def test_the_version_changes_with_a_core_module_it_calls(probe_version) -> None:
    assert probe_version(**{"probe/core/steps.py": ("2 * value", "3 * value")}) != probe_version()


def test_the_version_changes_with_a_settings_default(probe_version) -> None:
    assert probe_version(**{"probe/core/settings.py": ("size: int = 8", "size: int = 9")}) != probe_version()


def test_the_version_ignores_code_the_asset_does_not_use(probe_version) -> None:
    assert probe_version(**{"probe/core/unused.py": ("return 1", "return 2")}) == probe_version()


def _code_location_versions() -> dict[str, str | None]:
    graph = defs.resolve_asset_graph()
    return {key.to_user_string(): graph.get(key).code_version for key in graph.get_all_asset_keys()}


def test_every_asset_has_a_version_and_another_process_computes_the_same() -> None:
    versions = _code_location_versions()
    assert all(version and len(version) == 16 for version in versions.values()), versions
    # Another hash seed: set iteration order differs, the versions must not.
    script = (
        "import json; from retrieval_assets_tests.defs.test_code_versions import _code_location_versions; "
        "print(json.dumps(_code_location_versions()))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == versions

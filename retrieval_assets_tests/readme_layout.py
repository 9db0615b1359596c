"""The README's layout block, generated from the package tree and each module's docstring.

``python -m retrieval_assets_tests.readme_layout --write`` rewrites the block in README.md;
``test_readme_layout`` fails when the README and the tree disagree.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BEGIN, END = "<!-- layout:begin -->", "<!-- layout:end -->"
PACKAGES = ("retrieval_assets", "retrieval_assets_tests")
WIDTH = 100


def _summary(path: Path) -> str:
    """The docstring's first sentence."""
    docstring = " ".join((ast.get_docstring(ast.parse(path.read_text())) or "").split())
    return docstring.split(". ")[0].rstrip(".")


def _lines(folder: Path, depth: int) -> list[str]:
    lines = []
    indent = "  " * depth
    for entry in sorted(folder.iterdir(), key=lambda p: (p.is_dir(), p.name)):
        if entry.name.startswith(("_", ".")) or entry.name == "data":
            continue
        if entry.is_dir() and (entry / "__init__.py").is_file():
            name = f"{indent}{entry.name}/"
            lines.append(f"{name:<30} {_summary(entry / '__init__.py')}".rstrip())
            lines += _lines(entry, depth + 1)
        elif entry.suffix == ".py" and folder.name == "retrieval_assets":  # top-level modules: the entry points
            name = f"{indent}{entry.name}"
            lines.append(f"{name:<30} {_summary(entry)}".rstrip())
    return lines


def layout() -> str:
    lines = []
    for package in PACKAGES:
        lines.append(f"{package + '/':<30} {_summary(ROOT / package / '__init__.py')}".rstrip())
        lines += _lines(ROOT / package, 1)
    return "```\n" + "\n".join(lines) + "\n```"


def readme_with_layout(readme: str) -> str:
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    return readme[:start] + "\n" + layout() + "\n" + readme[end:]


if __name__ == "__main__":
    if "--write" in sys.argv:
        README.write_text(readme_with_layout(README.read_text()))
    else:
        print(layout())

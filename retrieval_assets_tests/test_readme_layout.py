"""The README's layout block is the tree as it is."""

from retrieval_assets_tests.readme_layout import README, readme_with_layout


def test_readme_layout_matches_the_tree() -> None:
    readme = README.read_text()
    assert readme == readme_with_layout(readme), "run: python -m retrieval_assets_tests.readme_layout --write"

"""Relative links in README.md and docs/*.md point at files (and headings) that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(md: Path) -> set:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces -> '-'."""
    out = set()
    for line in md.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_resolve(page):
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: broken link {target}"
        if anchor:
            assert anchor in anchors(dest), f"{page.name}: no heading #{anchor} in {dest.name}"


def test_readme_links_every_user_doc():
    readme = (ROOT / "README.md").read_text()
    for doc in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{doc.name}" in readme, f"README's Documentation line misses {doc.name}"


CITED_FILE = re.compile(r"\b([a-z_]+(?:/[a-z_]+)+\.py)\b")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_cited_source_files_exist(page):
    """A module cited as ``package/module.py`` exists (the protocol page cited moved files)."""
    missing = [p for p in sorted(set(CITED_FILE.findall(page.read_text())))
               if not (ROOT / p).exists()]
    assert missing == [], f"{page.name} cites files that do not exist: {missing}"

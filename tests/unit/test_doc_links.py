"""The documentation's links stay inside the repository or go to public sources (issue 29:
the README sent readers to ../shared/specs/, which is not in the repository)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
DOCS = [ROOT / "README.md", ROOT / "deploy" / "README.md",
        *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_relative_link_names_a_file_of_the_repository() -> None:
    broken = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a public URL or an anchor
            path = (doc.parent / target.split("#")[0]).resolve()
            if not path.is_relative_to(ROOT) or not path.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert broken == []


def test_the_readme_links_every_family_document() -> None:
    from banditflow.learners.registry import FAMILIES  # the built-in ones

    readme = (ROOT / "README.md").read_text()
    for name in FAMILIES:
        assert (ROOT / "docs" / "families" / f"{name}.md").exists()
        assert f"(docs/families/{name}.md)" in readme

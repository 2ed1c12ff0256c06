"""The README and docs/ link to each other: every relative link and anchor resolves, every page
in docs/ is linked from the README, and the README ends with its "## More" list of links."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", REPO / "tests" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def outside_fences(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation other than - and _ dropped, spaces to -."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", outside_fences(page.read_text()), flags=re.M):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(outside_fences(page.read_text()))
            if not re.match(r"[a-z]+:", t)]


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in links(page):
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_readme_links_every_page_in_docs_and_ends_with_more() -> None:
    readme = REPO / "README.md"
    linked = {(REPO / t.partition("#")[0]).resolve() for t in links(readme)}
    unlinked = [p.name for p in sorted((REPO / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not unlinked, f"docs not linked from README.md: {unlinked}"
    headings = re.findall(r"^## (.+)$", outside_fences(readme.read_text()), flags=re.M)
    assert headings[-1] == "More", headings

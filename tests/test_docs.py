"""The documentation's links: the README is the front door and docs/ holds a page per topic.

Where it sits: reads README.md and docs/*.md only (no imports from the project). A moved or renamed
file or heading breaks a link silently on GitHub; these tests name it.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")  # [text](target) and ![alt](target)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # a '#' comment in code is no heading
    return {slug(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]  # http:, mailto: are not checked


def test_every_relative_link_in_the_readme_and_docs_resolves():
    broken = []
    for page in PAGES:
        for target in links(page):
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_docs_page_is_reachable_from_the_readme():
    readme = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    seen, todo = set(), [p.resolve() for p in readme if p.suffix == ".md" and p.exists()]
    while todo:  # pages linked from the README, and pages linked from those
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        todo += [(page.parent / t.partition("#")[0]).resolve() for t in links(page) if t.partition("#")[0]]
        todo = [p for p in todo if p.suffix == ".md" and p.exists()]
    missing = [str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md") if p.resolve() not in seen]
    assert not missing, f"not reachable from README.md: {missing}"

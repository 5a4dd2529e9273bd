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


# --- the front door ---------------------------------------------------------------------------------

README = ROOT / "README.md"
HASH = re.compile(r"\b[0-9a-f]{7,40}\b")  # a commit hash: history goes to CHANGELOG.md


def prose(text: str) -> str:
    """The README's running text: no code, tables, headings or images."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    kept = [line for line in text.splitlines() if not re.match(r"\s*(\||#|!\[)", line)]
    return re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", "\n".join(kept))  # a link reads as its text


def sentences(text: str) -> list[str]:
    parts = re.split(r"(?<=[.!?:])\s+(?=[A-Z*`(\-])|\n\s*\n|\n- ", prose(text))
    return [p for p in (" ".join(p.split()) for p in parts) if len(p.split()) > 1]


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The rows of the first table under `## heading`, each a list of its cells, header skipped."""
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows[2:]]


def test_the_readme_reads_in_five_minutes():
    """At most 1,500 words, about 25 words a sentence, no table cell over 200 characters and no
    commit hash."""
    text = README.read_text()
    words = len(re.sub(r"```.*?```", "", text, flags=re.S).split())
    assert words <= 1500, f"README.md: {words} words"
    found = sentences(text)
    mean = sum(len(s.split()) for s in found) / len(found)
    assert mean <= 25, f"README.md: {mean:.1f} words a sentence"
    cells = [c for line in text.splitlines() if line.startswith("|") for c in line.split("|")]
    assert max(len(c.strip()) for c in cells) <= 200
    assert not HASH.findall(re.sub(r"```.*?```", "", text, flags=re.S)), HASH.findall(text)


def test_every_result_in_the_readme_is_the_figure_its_study_page_measured():
    """A figure lives where it was measured: each Results row's own figure appears, as written, on
    the page the row links to; so does the demo's output."""
    stale = []
    for cells in table_rows(README.read_text(), "Results"):
        claim, ours, study = cells[0], cells[1], cells[-1]
        page = ROOT / re.search(r"\]\(([^)#]+)", study).group(1)
        if ours not in page.read_text():
            stale.append(f"{claim}: {ours!r} is not on {page.relative_to(ROOT)}")
    assert not stale, "\n".join(stale)
    shown = re.search(r"^eval before: .*$", README.read_text(), flags=re.M).group(0)
    assert shown in (ROOT / "docs" / "tiny-demo.md").read_text()


def test_every_study_opens_with_its_verdict_in_at_most_five_lines():
    """A study is a lab notebook below and a verdict on top: what was asked, what was found, how sure."""
    long = []
    for page in sorted(p for p in (ROOT / "docs" / "studies").glob("*.md") if p.name != "README.md"):
        text = page.read_text().split("\n\n")
        first = next(p for p in text[1:] if not p.startswith("[Back"))
        if not first.startswith("**Verdict.**") or len(first.splitlines()) > 5:
            long.append(page.name)
    assert not long, f"no verdict of at most five lines on top: {long}"


GUIDES = sorted(p for p in (ROOT / "docs").glob("*.md"))  # docs/studies/ holds the lab notes
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def test_the_guides_carry_no_history_and_read_in_short_sentences():
    """A guide says how to use and learn: no dates or commit hashes in its prose (history lives in
    CHANGELOG.md and the studies), and about 25 words a sentence."""
    found = []
    for page in GUIDES:
        text = re.sub(r"`[^`\n]*`", "", prose(page.read_text()))
        history = DATE.findall(text) + [h for h in HASH.findall(text) if re.search(r"\d", h)]
        said = sentences(page.read_text())
        mean = sum(len(s.split()) for s in said) / max(len(said), 1)
        if history or mean > 25:
            found.append(f"{page.name}: {history[:3]} {mean:.1f} words a sentence")
    assert not found, "\n".join(found)

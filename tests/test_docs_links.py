"""Every relative link in the README and the pages of docs/ reaches a file of the repository, and every
`#anchor` a heading of its page, by GitHub's rules for a heading's anchor (github-slugger: lower case, every
character that is not a letter, a digit, a mark, `_`, `-` or a space dropped, each space a `-`, a repeated
anchor suffixed `-1`, `-2`, ...). Text only: no processes, no network."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])

FENCE = re.compile(r"^\s{0,3}(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) or ![alt](target), with an optional "title"; the text may hold a code span.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
LINE_ANCHOR = re.compile(r"^L\d+(-L\d+)?$")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it from the heading's rendered text."""
    text = CODE_SPAN.sub(lambda m: m.group(2).strip(), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text, not its target
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"(\*\*|__|\*)(.+?)\1", r"\2", text)  # emphasis
    kept = []
    for char in text.lower():
        category = unicodedata.category(char)
        if char in "-_ " or category[0] in "LNM" or category == "Pc":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


def outside_code(text: str):
    """(line number, line) of the page's lines outside fenced code blocks, with code spans blanked."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for number, line in outside_code(page.read_text()):
        for target in LINK.findall(line):
            if SCHEME.match(target):
                continue
            path_part, _, anchor = target.partition("#")
            where = f"{page.relative_to(REPO)}:{number}: {target}"
            dest = (page.parent / path_part).resolve() if path_part else page
            if not dest.is_relative_to(REPO):
                broken.append(f"{where} (outside the repository)")
            elif not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where} (no heading with that anchor)")
            elif anchor and dest.suffix != ".md" and not LINE_ANCHOR.match(anchor):
                broken.append(f"{where} (an anchor into a file that is not Markdown)")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_and_anchor_resolves(page):
    assert broken_links(page) == []


def test_the_readme_links_to_a_page_of_docs_for_each_of_its_sections():
    readme = (REPO / "README.md").read_text()
    sections = re.split(r"^## ", readme, flags=re.M)[1:]
    assert sections
    for section in sections:
        assert "](docs/" in section, section.splitlines()[0]


@pytest.mark.parametrize("heading, anchor", [
    # Anchors as GitHub renders them for headings of these pages.
    ("Live: `tracking.live=wandb|mlflow|tensorboard`", "live-trackinglivewandbmlflowtensorboard"),
    ("Export: `python -m evidence export`", "export-python--m-evidence-export"),
    ("Training–inference mismatch", "traininginference-mismatch"),
    ("Bundle payload (`data/`)", "bundle-payload-data"),
    ("Claims the sweep's own files vouch for (adversarial round 4, issue 33)",
     "claims-the-sweeps-own-files-vouch-for-adversarial-round-4-issue-33"),
    ("Seed 003 at toy scale (`experiment=stale_score_centering`)",
     "seed-003-at-toy-scale-experimentstale_score_centering"),
    ("A sized design: `seeds: {n: auto, min: 3, max: 10}`", "a-sized-design-seeds-n-auto-min-3-max-10"),
    ("**Bold** and [a link](x.md)", "bold-and-a-link"),
])
def test_slug_follows_githubs_rules(heading, anchor):
    assert slug(heading) == anchor


def test_a_repeated_heading_gets_a_numbered_anchor(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Notes\n\n## Notes\n\n```\n## not a heading\n```\n")
    assert anchors(page) == {"notes", "notes-1"}


def test_a_broken_link_and_a_missing_anchor_are_named(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    (tmp_path / "other.md").write_text("# Other page\n")
    page = tmp_path / "page.md"
    page.write_text("# Here\n[a](other.md#other-page) [b](missing.md) [c](other.md#nowhere) [d](#here)\n"
                    "`[e](in-code.md)` [f](https://example.org/x.md)\n```\n[g](fenced.md)\n```\n")
    assert broken_links(page) == ["page.md:2: missing.md (no such file)",
                                  "page.md:2: other.md#nowhere (no heading with that anchor)"]

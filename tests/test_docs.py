"""The documentation holds together (no server, no model: file reads only): the README stays short
and names the two commands, every docs page is linked from it, and every relative link in the
README and docs/*.md leads to a file that exists — and, with a #anchor, to a heading of that file,
as GitHub makes anchors from headings."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

pytestmark = pytest.mark.fast  # file reads only

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 200

_FENCE = re.compile(r"^ {0,3}(`{3,}(?=[^`]*$)|~{3,})")  # a backtick fence's info string holds no backtick
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) or ![alt](target), with an optional "title"; the text may hold one level of [brackets]
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks, as CommonMark reads fences: a fence closes
    with the same character, at least as many times, and nothing after it."""
    lines, fence = [], ""
    for line in path.read_text(encoding="utf-8").splitlines():
        opened = _FENCE.match(line)
        if fence:
            if opened and opened[1][0] == fence[0] and len(opened[1]) >= len(fence) and not line.strip(" `~"):
                fence = ""
            continue
        if opened:
            fence = opened[1]
            continue
        lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lowercased, every character but
    letters, digits, `_`, `-` and spaces dropped, spaces turned into `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor; a repeated one gets -1, -2… as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(path):
        if m := _HEADING.match(line):
            base = slug(m[2])
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    """Relative link targets in the file's prose (not in code): no URLs with a scheme."""
    targets = []
    for line in prose(path):
        for m in _LINK.finditer(_CODE_SPAN.sub("", line)):
            if not _SCHEME.match(m[1]):
                targets.append(m[1])
    return targets


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_readme_names_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert "scripts/serve" in text and "scripts/test" in text


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(README.parent / unquote(t.split("#")[0])).resolve() for t in links(README) if not t.startswith("#")}
    orphans = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not orphans, f"docs pages the README does not link to: {orphans}"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page: Path):
    broken = []
    for target in links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / unquote(file)).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and unquote(anchor).lower() not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {dest.name}")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("heading, anchor", [
    ("## Getting models: `localchat pull`", "getting-models-localchat-pull"),
    ("## A crash in llama.cpp stays in its worker", "a-crash-in-llamacpp-stays-in-its-worker"),
    ("## Measuring the schema → grammar converter", "measuring-the-schema--grammar-converter"),
    ("## Vision (and audio)", "vision-and-audio"),
    ("## `max_tokens` and more", "max_tokens-and-more"),
])
def test_anchors_follow_githubs_rules(heading: str, anchor: str):
    assert slug(_HEADING.match(heading)[2]) == anchor  # type: ignore[index]


def test_links_in_code_are_not_links(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("[a](a.md) `[b](b.md)`\n````text\n```python\n[c](c.md)\n```\n````\n[d](https://x.org) ![e](e.png)\n"
                    "```` ```json {} ``` ```` is inline code, not a fence: [f](f.md)\n")
    assert links(page) == ["a.md", "e.png", "f.md"]

"""Every relative link in README.md and docs/*.md points at a file that exists, and an anchor
(`page.md#section`) at a heading of that page, so moving or renaming a page cannot leave the
docs pointing nowhere."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# [text](target) outside code; images too. Targets with a scheme (https:, mailto:) are not ours.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(INLINE_CODE.sub("", line))
    return lines


def anchors(path: Path) -> set[str]:
    """Heading anchors as GitHub makes them: lower case, punctuation dropped, spaces to '-',
    and -1, -2, ... for repeated headings."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    problems = []
    name = page.relative_to(root)
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            if not dest.exists():
                problems.append(f"{name}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{name}: {target}: no heading #{anchor}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


def test_docs_pages_are_linked_from_the_readme() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    unlinked = [p.name for p in PAGES[1:] if f"(docs/{p.name}" not in readme]
    assert unlinked == []


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Real heading\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#real-heading) [gone](missing.md) [bad](b.md#nowhere) `[code](x.md)`\n"
        "```\n[fenced](y.md)\n```\n[web](https://example.org/x.md)\n"
    )
    assert broken_links(page, tmp_path) == [
        "a.md: missing.md: no such file",
        "a.md: b.md#nowhere: no heading #nowhere",
    ]

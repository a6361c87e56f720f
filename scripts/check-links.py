#!/usr/bin/env python3
"""Every relative link in the project's Markdown resolves: the file (or directory) exists, and a
#anchor names a heading of the target (GitHub's anchors: lower case, punctuation dropped, spaces to
hyphens, -1, -2... for repeats).

    scripts/check-links.py [GLOB...]     default: every *.md of the repository (README.md, docs/,
                                         deploy/, the crates' own), build and tool directories aside

Why: the README links into docs/ and deploy/, and the docs into each other and into the code; a
moved file or a renamed heading must fail the test command, not a reader. Links to other sites
(http:, https:, mailto:) are not fetched. Inline links `[text](target)`, images and reference
definitions `[name]: target` are read; code spans and fenced blocks are not links. Prints one line
per broken link (file:line: link: why) and exits 1 if there is any. Python 3 standard library only.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote

REPO = Path(__file__).resolve().parent.parent
DEFAULT = ["**/*.md"]
#: Not the project's own Markdown: build output, tool state and virtualenvs (.sluice/, .git/, ...).
SKIP = {"target", "node_modules"}
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+).*?\1")
# [text](target "title") and ![alt](target); the text may hold one level of brackets.
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def links(path: Path):
    """(line number, target) of every link outside code."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        text = CODE_SPAN.sub("", line)
        for match in INLINE.finditer(text):
            yield number, match.group(1)
        reference = REFERENCE.match(text)
        if reference:
            yield number, reference.group(1)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"`|\*|_(?=\w)|(?<=\w)_|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen, fenced = set(), {}, False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        heading = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not heading:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def problem(source: Path, target: str) -> str | None:
    if EXTERNAL.match(target):
        return None
    file_part, _, anchor = target.partition("#")
    resolved = (source.parent / unquote(file_part)).resolve() if file_part else source
    if file_part.startswith("/"):
        return "absolute path: make it relative to the file"
    if not resolved.exists():
        return f"no such file or directory ({resolved.relative_to(REPO) if resolved.is_relative_to(REPO) else resolved})"
    if not resolved.is_relative_to(REPO):
        return "points outside the repository"
    if anchor and resolved.suffix == ".md" and unquote(anchor).lower() not in anchors(resolved):
        return f"no heading with anchor #{anchor} in {resolved.relative_to(REPO)}"
    return None


def main() -> None:
    patterns = sys.argv[1:] or DEFAULT
    files = sorted(
        p
        for p in {p for pattern in patterns for p in REPO.glob(pattern) if p.is_file()}
        if not any(part in SKIP or part.startswith(".") for part in p.relative_to(REPO).parts[:-1])
    )
    broken, count = [], 0
    for path in files:
        for number, target in links(path):
            count += 1
            why = problem(path, target)
            if why:
                broken.append(f"{path.relative_to(REPO)}:{number}: {target}: {why}")
    if broken:
        print("\n".join(f"links: {b}" for b in broken), file=sys.stderr)
        raise SystemExit(f"links: {len(broken)} of {count} relative links broken (above)")
    print(f"links: {count} links in {len(files)} Markdown files, every relative one resolves (files and #anchors)")


if __name__ == "__main__":
    main()

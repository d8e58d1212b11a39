#!/usr/bin/env python3
"""Relative links in the project's Markdown that lead nowhere.

Checks every relative link in README.md, docs/**/*.md and crates/*/README.md
(or in the files given as arguments): inline links and images
(`[text](path)`, `[text](path#anchor)`, `[text](#anchor)`) and reference
definitions (`[name]: path`). The target must exist, relative to the file
that links to it; an anchor into a Markdown file must name one of its
headings, slugged the way GitHub slugs them (lowercase; punctuation other
than `-` and `_` dropped; spaces become `-`; a repeated heading gets `-1`,
`-2`, ...), or an explicit `<a name="...">`/`id="..."`. Links with a scheme
(`https:`, `mailto:`, ...) and links inside code are not checked.

Prints each broken link as `file:line: target (why)` and exits 1 if there
is one, 0 otherwise.

    scripts/check-links.py                 # the project's docs
    scripts/check-links.py docs/api.md     # just these files
"""

import re
import sys
import unicodedata
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
# `[text](target)` and `![alt](target)`; the target may be `<...>` and may be
# followed by a title. Nested brackets one level deep in the text.
INLINE = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)"
)
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
HTML_ANCHOR = re.compile(r"""<[^>]*\b(?:name|id)\s*=\s*["']([^"']+)["']""")
HTML_TAG = re.compile(r"<[^>]+>")


def default_files() -> list[Path]:
    files = [ROOT / "README.md"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    files += sorted(ROOT.glob("crates/*/README.md"))
    return [f for f in files if f.is_file()]


def strip_code_spans(line: str) -> str:
    """The line with each code span blanked out (same length, so columns hold)."""
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def prose_lines(text: str):
    """(line number, line) of every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        opening = FENCE.match(line)
        if fence is None:
            if opening:
                fence = opening.group(1)
                continue
            yield number, line
        elif opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
            if not line.strip()[len(opening.group(1)):].strip():
                fence = None


def heading_text(raw: str) -> str:
    """The text GitHub renders for a heading's source."""
    spans: list[str] = []

    def keep(match: re.Match) -> str:
        spans.append(match.group(2).strip())
        return f"\0{len(spans) - 1}\0"

    text = CODE_SPAN.sub(keep, raw)
    text = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", text)  # images: alt text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"\[([^\]]*)\]\[[^\]]*\]", r"\1", text)  # reference links
    text = HTML_TAG.sub("", text)
    text = text.replace("*", "")
    # `_` as emphasis (at a word's edge), not inside words like snake_case.
    text = re.sub(r"(?<![0-9A-Za-z])_+|_+(?![0-9A-Za-z])", "", text)
    return re.sub(r"\0(\d+)\0", lambda m: spans[int(m.group(1))], text)


def slug(text: str) -> str:
    """GitHub's anchor for a heading's rendered text (before de-duplication)."""
    kept = []
    for ch in text.strip().lower():
        category = unicodedata.category(ch)
        if ch in "-_" or ch == " ":
            kept.append(ch)
        elif category[0] in "LN" or category[0] == "M":
            kept.append(ch)
        # punctuation, symbols (emoji included) and other spaces are dropped
    return "".join(kept).replace(" ", "-")


def anchors_of(path: Path, cache: dict[Path, set[str]]) -> set[str]:
    if path in cache:
        return cache[path]
    text = path.read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    anchors: set[str] = set()

    def add(heading: str) -> None:
        base = slug(heading_text(heading))
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchors.add(base if count == 0 else f"{base}-{count}")

    previous: str | None = None
    previous_number = 0
    for number, line in prose_lines(text):
        for anchor in HTML_ANCHOR.findall(line):
            anchors.add(anchor)
        atx = ATX.match(line)
        setext = SETEXT.match(line)
        if atx:
            add(atx.group(2) or "")
            previous = None
            continue
        if (
            setext
            and previous is not None
            and previous.strip()
            and previous_number == number - 1
            and not ATX.match(previous)
            and not re.match(r"^ {0,3}([-*+]|\d+[.)])\s", previous)
            and not previous.lstrip().startswith(("|", ">"))
        ):
            add(previous.strip())
            previous = None
            continue
        previous, previous_number = line, number
    cache[path] = anchors
    return anchors


def targets(text: str):
    """(line number, target) of every link in the prose of `text`."""
    for number, line in prose_lines(text):
        prose = strip_code_spans(line)
        for match in INLINE.finditer(prose):
            yield number, match.group(1)
        reference = REFERENCE.match(prose)
        if reference:
            yield number, reference.group(1)


def display(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def check(file: Path, cache: dict[Path, set[str]]) -> list[str]:
    problems = []
    shown = display(file)
    for number, target in targets(file.read_text(encoding="utf-8")):
        target = target.strip()
        if target.startswith("<") and target.endswith(">"):
            target = target[1:-1]
        if not target or SCHEME.match(target) or target.startswith("//"):
            continue
        path_part, _, anchor = target.partition("#")
        path_part = unquote(path_part.split("?", 1)[0])
        if path_part.startswith("/"):
            destination = ROOT / path_part.lstrip("/")
        elif path_part:
            destination = (file.parent / path_part).resolve()
        else:
            destination = file
        if not destination.exists():
            problems.append(f"{shown}:{number}: {target} (no such file or directory)")
            continue
        if not anchor or destination.is_dir() or destination.suffix.lower() != ".md":
            continue
        if unquote(anchor) not in anchors_of(destination, cache):
            where = "this file" if destination == file else display(destination)
            problems.append(f"{shown}:{number}: {target} (no heading #{anchor} in {where})")
    return problems


def main(argv: list[str]) -> int:
    files = [Path(a).resolve() for a in argv] if argv else default_files()
    cache: dict[Path, set[str]] = {}
    problems = []
    for file in files:
        problems += check(file, cache)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} broken relative link(s) in {len(files)} file(s)", file=sys.stderr)
        return 1
    print(f"relative links: {len(files)} file(s), none broken")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

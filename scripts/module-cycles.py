#!/usr/bin/env python3
"""Import cycles between the modules of each crate.

Reads every crate's `src/` and records an edge A -> B when a file of module A
names `crate::B` (in a `use`, a `use` group such as `crate::{B, C::D}`, or a
path), or `super::B` from a submodule, at the
level of the crate's top modules and of each directory module's children.
Prints every cycle (strongly connected component of more than one module) and
exits 1 if there is one, 0 otherwise.

    scripts/module-cycles.py            # all crates
    scripts/module-cycles.py --report   # print, but exit 0
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# `crate::a::b`, `super::x`, and the start of a group: `crate::a::{b, c::d}`.
PATH = re.compile(r"\b(crate|super)((?:::[a-z_][a-z0-9_]*)*)(::\{)?")


def module_of(src: Path, file: Path) -> list[str]:
    """The module path of a source file: src/a/b.rs -> [a, b]; src/a/mod.rs -> [a]."""
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def strip_comments_and_tests(text: str) -> str:
    # Unit tests may reach anywhere; only the code that ships counts.
    cut = re.search(r"^#\[cfg\(test\)\]\s*\nmod tests", text, re.M)
    if cut:
        text = text[: cut.start()]
    text = re.sub(r"//[^\n]*", "", text)
    return text


def group_items(text: str, start: int) -> list[str]:
    """The top-level items of the `{...}` group whose `{` is just before `start`."""
    depth, current, items = 1, "", []
    i = start
    while i < len(text) and depth:
        ch = text[i]
        if ch == "{":
            depth += 1
            current += ch
        elif ch == "}":
            depth -= 1
            if depth:
                current += ch
        elif ch == "," and depth == 1:
            items.append(current.strip())
            current = ""
        else:
            current += ch
        i += 1
    if current.strip():
        items.append(current.strip())
    return items


def expand_group(prefix: list[str], items: list[str]) -> list[list[str]]:
    """Every path a `use` group names: `a::{b, c::{d, self}}` -> a::b, a::c::d, a::c."""
    out = []
    for item in items:
        if "{" in item:
            head, rest = item.split("{", 1)
            head_parts = [p for p in head.strip().rstrip(":").split("::") if p]
            out += expand_group(prefix + head_parts, group_items(rest, 0))
        else:
            parts = [p for p in item.split(" as ")[0].strip().split("::") if p]
            out.append(prefix if parts == ["self"] else prefix + parts)
    return out


def edges_of_crate(src: Path) -> dict[str, set[str]]:
    """Edges between sibling modules, keyed "parent::child" (parent "" for the crate root)."""
    edges: dict[str, set[str]] = {}
    modules = {tuple(module_of(src, f)) for f in src.rglob("*.rs")}
    for file in src.rglob("*.rs"):
        if "bin" in file.relative_to(src).parts[:1]:
            continue
        me = module_of(src, file)
        if not me:
            continue
        text = strip_comments_and_tests(file.read_text())
        for m in PATH.finditer(text):
            root, rest, group = m.group(1), m.group(2), m.group(3)
            base = [p for p in rest.split("::") if p]
            base = base if root == "crate" else me[:-1] + base
            paths = expand_group(base, group_items(text, m.end())) if group else [base]
            for path in paths:
                # The module a path names: its longest prefix that is a module.
                target = next(
                    (path[:k] for k in range(len(path), 0, -1) if tuple(path[:k]) in modules),
                    None,
                )
                if target is None:
                    continue
                # The edge between the two modules' ancestors that are siblings.
                common = 0
                while common < min(len(me), len(target)) and me[common] == target[common]:
                    common += 1
                if common >= len(me) or common >= len(target):
                    continue  # a module using its own descendant or ancestor
                a = "::".join(me[: common + 1])
                b = "::".join(target[: common + 1])
                edges.setdefault(a, set()).add(b)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    report_only = "--report" in sys.argv[1:]
    found = 0
    for manifest in sorted(ROOT.glob("crates/*/Cargo.toml")):
        crate = manifest.parent.name
        edges = edges_of_crate(manifest.parent / "src")
        for component in cycles(edges):
            found += 1
            links = [
                f"{a} -> {b}" for a in component for b in sorted(edges.get(a, ())) if b in component
            ]
            print(f"{crate}: cycle between {', '.join(component)} ({'; '.join(links)})")
    if found:
        print(f"{found} import cycle(s)")
        return 0 if report_only else 1
    print("no import cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main())

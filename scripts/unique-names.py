#!/usr/bin/env python3
"""One name, one thing: every type (struct, enum, trait, type alias) the
operator crate declares has a name no other of its types has, so a name
found in a log, a review or a search means one place.

    scripts/unique-names.py     # exit 1 and list the names declared twice
"""

import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "crates" / "dkv-operator" / "src"
DECLARATION = re.compile(
    r"^\s*(?:pub(?:\([a-z:]+\))?\s+)?(?:struct|enum|trait|type)\s+([A-Z][A-Za-z0-9]*)",
    re.M,
)


def main() -> int:
    places = defaultdict(list)
    for path in sorted(SRC.rglob("*.rs")):
        text = path.read_text()
        for match in DECLARATION.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            places[match.group(1)].append(f"{path.relative_to(ROOT)}:{line}")
    twice = {name: where for name, where in places.items() if len(where) > 1}
    for name, where in sorted(twice.items()):
        print(f"{name} is declared {len(where)} times: {', '.join(where)}")
    if twice:
        print("give each its own name, one that says what it owns", file=sys.stderr)
        return 1
    print(f"unique names: {len(places)} types in dkv-operator, each declared once")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The suite-wide secret scan (issue 8): searches what every test recorded.

Each test that ran the operator left in DIR (DKV_SECRET_SCAN_DIR, see
crates/dkv-test-support/src/secret_scan.rs):
  <test>.needles   values that must stay secret (private-key lines,
                   passwords, tokens, secret keys), one per line
  <test>.haystack  container logs, Events, and the objects dkv wrote
  <test>.operator.log  the operator's log at debug level
Every needle of every test is searched for in every haystack and log of the
whole run; so is the text "PRIVATE KEY". Prints what was scanned, and the
file and first characters of anything found; exits 1 if anything was found,
2 if there was nothing to scan.
"""

import pathlib
import sys


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: scan-secrets.py DIR", file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1])
    needles = set()
    for path in root.glob("*.needles"):
        needles.update(line for line in path.read_text().splitlines() if line)
    hay = sorted(root.glob("*.haystack")) + sorted(root.glob("*.operator.log"))
    if not hay or not needles:
        print(f"scan-secrets: nothing to scan in {root} "
              f"({len(hay)} haystacks, {len(needles)} needles)", file=sys.stderr)
        return 2
    found = []
    scanned = 0
    for path in hay:
        text = path.read_text(errors="replace")
        scanned += len(text)
        if "PRIVATE KEY" in text:
            found.append((path.name, "PRIVATE KEY"))
        for needle in needles:
            if needle in text:
                found.append((path.name, needle[:6] + "..."))
    tests = len({p.name.split(".")[0] for p in hay})
    print(f"scan-secrets: {tests} tests, {len(hay)} files, {scanned} bytes "
          f"searched for {len(needles)} secret values")
    for name, what in found:
        print(f"scan-secrets: FOUND {what} in {name}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

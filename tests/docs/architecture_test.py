#!/usr/bin/env python3
"""Keeps docs/ARCHITECTURE.md true: every path it names exists, and every
component it names (a CamelCase name in backticks, or Class::Method) is
declared in a header of the tree. Usage: architecture_test.py [REPO_ROOT]"""

import os
import re
import subprocess
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))
DOC = os.path.join(ROOT, "docs", "ARCHITECTURE.md")
IDENT = re.compile(r"^[A-Z][A-Za-z0-9]*(::[A-Z][A-Za-z0-9]*)?$")


def headers():
    out = subprocess.run(["git", "ls-files", "*.h"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.split()
    return "\n".join(open(os.path.join(ROOT, h), errors="replace").read()
                     for h in out)


def main():
    text = open(DOC).read()
    names = re.findall(r"`([^`\n]+)`", text)
    src = headers()
    bad, paths, comps = [], 0, 0
    for n in names:
        if "/" in n or re.search(r"\.(h|cc|cu|py|md|proto)$", n):
            paths += 1
            if not os.path.exists(os.path.join(ROOT, n.rstrip("/"))):
                bad.append("path %r does not exist" % n)
        elif IDENT.match(n):
            comps += 1
            cls, _, method = n.partition("::")
            if not re.search(r"\b(class|struct)\s+%s\b" % cls, src):
                bad.append("component %r is declared in no header" % cls)
            elif method and not re.search(r"\b%s\s*\(" % method, src):
                bad.append("%r: no %s( in any header" % (n, method))
    for b in bad:
        print("ARCHITECTURE.md: " + b)
    print("architecture_test: %d paths, %d components, %d missing" %
          (paths, comps, len(bad)))
    if paths < 20 or comps < 10:
        print("architecture_test: too few names found; is the doc's format "
              "still `name`?")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

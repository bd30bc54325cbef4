#!/usr/bin/env python3
"""The sizes that keep giftd and libgift changeable (issue 26), measured.

For every class of daemon/ and client/ its member functions (declared in
the class body, overloads counted apart), for every source file its lines,
and for every function its lines; test code is left out (``*_test.cc``,
``*_testutil.h``, ``test_*.py``, fakes). C++ is read with universal-ctags
(Debian's ``universal-ctags``), Python with the ``ast`` module.

  scripts/code_sizes.py            the largest units and the three measures
  scripts/code_sizes.py --check    the same; exit 1 when a measure is over
  scripts/code_sizes.py --all      every unit, not only the largest

Limits: a class <= 40 member functions, a file <= 600 lines, a function
<= 80 lines (--max-members, --max-file-lines, --max-function-lines).
"""

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRS = ("daemon", "client")
CPP = (".cc", ".h", ".cu", ".cuh")
# Thread-safety and export macros would otherwise read as declarations.
MACROS = (
    "ABSL_GUARDED_BY(x)=",
    "ABSL_PT_GUARDED_BY(x)=",
    "ABSL_EXCLUSIVE_LOCKS_REQUIRED(...)=",
    "ABSL_SHARED_LOCKS_REQUIRED(...)=",
    "ABSL_LOCKS_EXCLUDED(...)=",
    "ABSL_LOCK_RETURNED(x)=",
    "ABSL_NO_THREAD_SAFETY_ANALYSIS=",
    "ABSL_MUST_USE_RESULT=",
    "GIFT_EXPORT=",
    "__global__=",
    "__device__=",
    "__host__=",
)


def is_test(path):
    base = os.path.basename(path)
    return (base.endswith(("_test.cc", "_test.py", "_testutil.h",
                           "_testutil.cc")) or base.startswith(("test_", "fake_"))
            or "/tests/" in path or "/testing/" in path)


def sources():
    out = subprocess.run(["git", "ls-files", "--", *DIRS], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    return [p for p in out.split()
            if p.endswith(CPP + (".py",)) and not is_test(p)]


def cpp_tags(files):
    ctags = shutil.which("ctags") or shutil.which("universal-ctags")
    if ctags is None:
        sys.exit("code_sizes: universal-ctags is missing "
                 "(apt-get install universal-ctags)")
    cmd = [ctags, "--output-format=json", "--fields=+neKZS",
           "--kinds-C++=+p", "--language-force=C++", "-f", "-"]
    for m in MACROS:
        cmd += ["-D", m]
    res = subprocess.run(cmd + files, cwd=ROOT, check=True,
                         capture_output=True, text=True)
    return [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]


def measure_cpp(files):
    """(classes: {name: count}, functions: [(lines, where)])."""
    tags = cpp_tags(files)
    bodies = {}  # (path, scope) -> (line, end) of the class body
    for t in tags:
        if t["kind"] in ("class", "struct") and "end" in t:
            scope = t["name"] if "scope" not in t else t["scope"] + "::" + t["name"]
            bodies[(t["path"], scope)] = (t["line"], t["end"])
    members = {}
    functions = []
    for t in tags:
        if t["kind"] not in ("function", "prototype"):
            continue
        if t["kind"] == "function" and "end" in t:
            functions.append((t["end"] - t["line"] + 1,
                              "%s:%d %s" % (t["path"], t["line"], t["name"])))
        body = bodies.get((t["path"], t.get("scope", "")))
        if t.get("scopeKind") in ("class", "struct") and body and \
                body[0] <= t["line"] <= body[1]:
            key = "%s (%s)" % (t["scope"], t["path"])
            members.setdefault(key, set()).add(
                (t["name"], t.get("signature", ""), t["line"]))
    return {k: len(v) for k, v in members.items()}, functions


def measure_py(path):
    tree = ast.parse(open(os.path.join(ROOT, path)).read(), path)
    classes, functions = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            n = sum(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))
                    for b in node.body)
            classes["%s (%s)" % (node.name, path)] = n
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append((node.end_lineno - node.lineno + 1,
                              "%s:%d %s" % (path, node.lineno, node.name)))
    return classes, functions


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a unit is over its limit")
    ap.add_argument("--all", action="store_true", help="list every unit")
    ap.add_argument("--top", type=int, default=8,
                    help="units listed per measure (default 8)")
    ap.add_argument("--max-members", type=int, default=40)
    ap.add_argument("--max-file-lines", type=int, default=600)
    ap.add_argument("--max-function-lines", type=int, default=80)
    args = ap.parse_args()

    files = sources()
    cpp = [f for f in files if f.endswith(CPP)]
    classes, functions = measure_cpp(cpp)
    for f in files:
        if f.endswith(".py"):
            c, fn = measure_py(f)
            classes.update(c)
            functions += fn
    lines = [(sum(1 for _ in open(os.path.join(ROOT, f))), f) for f in files]

    over = 0
    for title, rows, limit in (
            ("member functions per class", [(n, k) for k, n in classes.items()],
             args.max_members),
            ("lines per source file", lines, args.max_file_lines),
            ("lines per function", functions, args.max_function_lines)):
        rows.sort(key=lambda r: -r[0])
        bad = [r for r in rows if r[0] > limit]
        over += len(bad)
        print("%s (limit %d): %d over, largest %d" %
              (title, limit, len(bad), rows[0][0] if rows else 0))
        shown = rows if args.all else rows[:max(args.top, len(bad))]
        for n, what in shown:
            print("  %s %5d  %s" % ("!" if n > limit else " ", n, what))
    print("code_sizes: %d files, %d classes, %d functions; %d over the limits"
          % (len(files), len(classes), len(functions), over))
    return 1 if (args.check and over) else 0


if __name__ == "__main__":
    sys.exit(main())

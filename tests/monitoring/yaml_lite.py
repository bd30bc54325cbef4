"""Reads the groups, rule names and expressions of a Prometheus rules file.

PyYAML is not among the project's dependencies; rules files are simple
enough: `- name:` starts a group, `- record:` / `- alert:` a rule, and
`expr:` is a plain scalar on its line or a folded (`>`) or literal (`|`)
block. Anything else is ignored. promtool (check rules) validates the full
file; this only has to find what to evaluate.
"""

import re


def _scalar(v):
    v = v.strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    return v


def load_rules(path):
    with open(path) as f:
        lines = f.read().splitlines()
    groups, rule, i = [], None, 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = re.match(r"^(\s*)(- )?(name|record|alert|expr):\s*(.*)$", line)
        if not m:
            continue
        key, value = m.group(3), m.group(4)
        if key == "name" and m.group(2):
            groups.append({"name": _scalar(value), "rules": []})
        elif key in ("record", "alert") and m.group(2):
            rule = {key: _scalar(value)}
            groups[-1]["rules"].append(rule)
        elif key == "expr" and rule is not None:
            if value.strip() in (">", "|", ">-", "|-"):
                indent = len(m.group(1))
                block = []
                while i < len(lines) and (
                        not lines[i].strip() or
                        len(lines[i]) - len(lines[i].lstrip()) > indent):
                    block.append(lines[i].strip())
                    i += 1
                sep = "\n" if value.strip().startswith("|") else " "
                rule["expr"] = sep.join(b for b in block if b)
            else:
                rule["expr"] = _scalar(value)
    return groups

"""Every PromQL expression the dashboards and rules ship, ready to evaluate.

Shared by check_dashboards.py (offline) and live_test.py (against a live
Prometheus). Each expression comes as an Expr: where it is from (for the
failure message), the text as written, and the query to run:

* Grafana variables: $job_id, $node, ... become ".*" (all values; every use
  is a regex matcher); $__rate_interval and $__interval become fixed
  windows (RATE_INTERVAL, INTERVAL).
* A variable's label_values(SELECTOR, LABEL) becomes
  count by (LABEL) (SELECTOR): data means the variable has values.
* An alert's expression gets `bool` after each top-level comparison, so that
  it returns its signal whether or not the alert would fire (whether it
  fires is rules_test.yml's business).
"""

import json
import re
from dataclasses import dataclass

import yaml_lite

RATE_INTERVAL = "10s"
# Wide enough for a short test run (the annotation looks for a plan epoch
# change within it).
INTERVAL = "5m"

COMPARISONS = ("==", "!=", ">=", "<=", ">", "<")


@dataclass
class Expr:
    where: str   # e.g. "gift-job.json panel 3 'Title' target A"
    text: str    # as written
    query: str   # what to evaluate


def substitute(expr):
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    expr = expr.replace("$__interval", INTERVAL)
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", ".*", expr)


def variables_used(text):
    """Grafana variables ($x or ${x}) in text, without the built-ins."""
    names = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", text))
    return {n for n in names if not n.startswith("__")}


def _scan(expr):
    """Yields (index, char, depth) outside string literals."""
    depth, quote, i = 0, None, 0
    while i < len(expr):
        c = expr[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "\"'`":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        else:
            yield i, c, depth
        i += 1


def with_bool(expr):
    """Inserts `bool` after every top-level comparison operator."""
    out, last, skip = [], 0, 0
    for i, c, depth in _scan(expr):
        if skip:
            skip -= 1
            continue
        if depth != 0:
            continue
        op = next((o for o in COMPARISONS if expr.startswith(o, i)), None)
        if op is None or (op in (">", "<") and expr.startswith("=", i - 1)):
            continue
        end = i + len(op)
        if re.match(r"\s*bool\b", expr[end:]):
            continue
        out.append(expr[last:end] + " bool")
        last = end
        skip = len(op) - 1
    out.append(expr[last:])
    return "".join(out)


def label_values_query(query):
    m = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)\s*",
                     query, re.S)
    if not m:
        return None
    return f"count by ({m.group(2)}) ({m.group(1)})"


def iter_panels(dashboard):
    for p in dashboard.get("panels", []):
        yield p
        yield from p.get("panels", [])  # collapsed rows hold their panels


def dashboard_exprs(name, dashboard):
    exprs = []
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else q
        lv = label_values_query(q)
        exprs.append(Expr(f"{name} variable ${v['name']}", q,
                          substitute(lv if lv else q)))
    for a in dashboard.get("annotations", {}).get("list", []):
        if a.get("expr"):
            exprs.append(Expr(f"{name} annotation '{a['name']}'", a["expr"],
                              substitute(a["expr"])))
    for p in iter_panels(dashboard):
        for t in p.get("targets", []):
            if t.get("expr"):
                exprs.append(Expr(
                    f"{name} panel {p['id']} '{p.get('title')}' target "
                    f"{t.get('refId')}", t["expr"], substitute(t["expr"])))
    return exprs


def rule_exprs(rules_path):
    exprs = []
    for g in yaml_lite.load_rules(rules_path):
        for r in g["rules"]:
            if "record" in r:
                exprs.append(Expr(f"rules.yml record {r['record']}",
                                  r["expr"], r["expr"]))
            else:
                exprs.append(Expr(f"rules.yml alert {r['alert']}", r["expr"],
                                  with_bool(r["expr"])))
    return exprs


def load_dashboard(path):
    with open(path) as f:
        return json.load(f)

#!/usr/bin/env python3
"""Structural check of the Grafana dashboards (offline, stdlib only).

  check_dashboards.py --source ROOT [--promtool PATH]

For dashboards/gift-job.json and dashboards/gift-node.json: the
${DS_PROMETHEUS} input and schemaVersion; unique panel ids; every panel
(except rows) has the datasource and at least one target with an expr;
every $variable used is defined; every expression parses (all of them are
written into one rules file that `promtool check rules` parses, when
promtool is installed); and every metric an expression names is created
somewhere in the daemon's sources (AddCounter/AddGauge/AddHistogram(r, "name")
or prometheus-cpp's BuildCounter().Name("name") under daemon/, and the process
collector's families), is a
recording rule of rules.yml, or is one Prometheus makes itself. Prints
every problem; exit 1 if any.
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promql_exprs  # noqa: E402

DASHBOARDS = ("gift-job.json", "gift-node.json")
DS = "${DS_PROMETHEUS}"
# Series Prometheus records for every target itself.
PROMETHEUS_OWN = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
                  "scrape_samples_post_metric_relabeling",
                  "scrape_series_added"}
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset", "inf", "nan", "le", "time", "vector",
    "scalar", "sum", "min", "max", "avg", "count", "group", "stddev",
    "stdvar", "topk", "bottomk", "quantile", "count_values"}


def defined_metrics(root):
    """Series names created by the daemon's metric registries."""
    names = set()
    pattern = re.compile(
        r'(?:Add(Counter|Gauge|Histogram)\(\s*\w+,\s*'
        r'|Build(Counter|Gauge|Histogram)\(\)\s*\.Name\(\s*'
        r'|family\(\s*)"([A-Za-z_:][\w:]*)"')
    for path in glob.glob(os.path.join(root, "daemon", "**", "*.cc"),
                          recursive=True):
        if path.endswith("_test.cc"):
            continue
        with open(path) as f:
            for added, built, name in pattern.findall(f.read()):
                names.add(name)
                if "Histogram" in (added, built):
                    names.update(name + s for s in ("_bucket", "_sum", "_count"))
    return names


def metric_names(query):
    """Identifiers in a query that name series (not functions or labels)."""
    q = re.sub(r'"(?:[^"\\]|\\.)*"', '""', query)
    q = re.sub(r"\{[^}]*\}", "{}", q)               # label matchers
    q = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)",
               r"\1", q)                           # label lists
    q = re.sub(r"\[[^\]]*\]", "", q)               # range selectors
    names = set()
    for m in re.finditer(r"[A-Za-z_:][\w:]*", q):
        word, rest = m.group(0), q[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in PROMQL_WORDS:
            continue
        names.add(word)
    return names


def check_dashboard(name, d, problems):
    def bad(msg):
        problems.append(f"{name}: {msg}")

    inputs = [i for i in d.get("__inputs", []) if i.get("name") == "DS_PROMETHEUS"]
    if not inputs or inputs[0].get("pluginId") != "prometheus":
        bad("no __inputs entry DS_PROMETHEUS of plugin prometheus")
    if d.get("schemaVersion", 0) < 39:
        bad(f"schemaVersion {d.get('schemaVersion')} < 39")
    if not d.get("uid") or not d.get("title"):
        bad("uid and title are required")
    defined = {v["name"] for v in d.get("templating", {}).get("list", [])}
    for v in d.get("templating", {}).get("list", []):
        if v.get("type") == "query" and v.get("datasource", {}).get("uid") != DS:
            bad(f"variable ${v['name']}: datasource is not {DS}")
    ids = {}
    for p in promql_exprs.iter_panels(d):
        pid = p.get("id")
        where = f"panel {pid} '{p.get('title')}'"
        if pid in ids:
            bad(f"{where}: id {pid} also used by '{ids[pid]}'")
        ids[pid] = p.get("title")
        if not p.get("gridPos"):
            bad(f"{where}: no gridPos")
        if p.get("type") == "row":
            continue
        if p.get("datasource", {}).get("uid") != DS:
            bad(f"{where}: datasource is not {DS}")
        targets = p.get("targets") or []
        if not targets:
            bad(f"{where}: no targets")
        for t in targets:
            if not t.get("expr"):
                bad(f"{where}: target {t.get('refId')} has no expr")
            if t.get("datasource", {}).get("uid") != DS:
                bad(f"{where}: target {t.get('refId')} datasource is not {DS}")
        if len({t.get("refId") for t in targets}) != len(targets):
            bad(f"{where}: duplicate refIds")
    for a in d.get("annotations", {}).get("list", []):
        if a.get("expr") and a.get("datasource", {}).get("uid") != DS:
            bad(f"annotation '{a.get('name')}': datasource is not {DS}")
    text = json.dumps(d)
    for v in sorted(promql_exprs.variables_used(text) - defined - {"DS_PROMETHEUS"}):
        bad(f"${v} is used but not defined")


def check_parse(exprs, promtool, problems):
    """promtool check rules parses every query (one recording rule each)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "exprs.yml")
        with open(path, "w") as f:
            f.write("groups:\n  - name: exprs\n    rules:\n")
            for i, e in enumerate(exprs):
                f.write(f"      - record: expr_{i}\n        expr: {json.dumps(e.query)}\n")
        r = subprocess.run([promtool, "check", "rules", path],
                           capture_output=True, text=True)
        if r.returncode != 0:
            out = r.stdout + r.stderr
            for i, e in enumerate(exprs):
                out = out.replace(f"expr_{i}", f"[{e.where}]")
            problems.append("promtool cannot parse:\n" + out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True, help="repository root")
    ap.add_argument("--promtool", default=shutil.which("promtool"))
    args = ap.parse_args()

    problems, exprs = [], []
    for name in DASHBOARDS:
        d = promql_exprs.load_dashboard(os.path.join(args.source, "dashboards", name))
        check_dashboard(name, d, problems)
        exprs += promql_exprs.dashboard_exprs(name, d)
    rules = os.path.join(args.source, "dashboards", "prometheus", "rules.yml")
    rule_exprs = promql_exprs.rule_exprs(rules)
    exprs += rule_exprs

    known = defined_metrics(args.source) | PROMETHEUS_OWN
    known |= {e.where.split()[-1] for e in rule_exprs if " record " in e.where}
    for e in exprs:
        for m in sorted(metric_names(e.query) - known):
            problems.append(f"{e.where}: metric {m} is not created in daemon/ "
                            f"(see dashboards/README.md, 'Metrics')")
    if args.promtool:
        check_parse(exprs, args.promtool, problems)
    else:
        print("promtool not installed: expressions not parsed")

    for p in problems:
        print("FAIL", p)
    print(f"{len(exprs)} expressions in {len(DASHBOARDS)} dashboards and "
          f"rules.yml; {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

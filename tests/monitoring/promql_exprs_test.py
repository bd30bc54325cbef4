#!/usr/bin/env python3
"""Unit tests of promql_exprs.py, yaml_lite.py and check_dashboards.py's
helpers (the pieces that decide what the live test evaluates)."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_dashboards  # noqa: E402
import promql_exprs as p  # noqa: E402
import yaml_lite  # noqa: E402


class WithBoolTest(unittest.TestCase):
    def test_top_level_comparisons_only(self):
        self.assertEqual(p.with_bool('a{x=~"y>1"} > 0.1'),
                         'a{x=~"y>1"} > bool 0.1')
        self.assertEqual(
            p.with_bool("a < 0 and on (l) max by (l) (b) == 1"),
            "a < bool 0 and on (l) max by (l) (b) == bool 1")
        self.assertEqual(p.with_bool("x >= on (n) group_left y"),
                         "x >= bool on (n) group_left y")
        self.assertEqual(p.with_bool("sum(rate(a[1m]) > 0)"),
                         "sum(rate(a[1m]) > 0)")
        self.assertEqual(p.with_bool("a != bool 1"), "a != bool 1")
        self.assertEqual(p.with_bool('up{job="giftd"} == 0'),
                         'up{job="giftd"} == bool 0')


class SubstituteTest(unittest.TestCase):
    def test_variables(self):
        self.assertEqual(
            p.substitute('rate(a{n=~"$node", r=~"${rank}"}[$__rate_interval])'),
            f'rate(a{{n=~".*", r=~".*"}}[{p.RATE_INTERVAL}])')
        self.assertEqual(p.variables_used('x $a ${b} $__interval'), {"a", "b"})
        self.assertEqual(
            p.label_values_query('label_values(m{j=~"$j"}, node)'),
            'count by (node) (m{j=~"$j"})')
        self.assertIsNone(p.label_values_query("query_result(up)"))


class MetricNamesTest(unittest.TestCase):
    def test_functions_labels_and_keywords_are_not_metrics(self):
        q = ('histogram_quantile(0.95, sum by (le, layer) (rate('
             'gift_x_bucket{a="b"}[5m]))) / on (job_id) group_left '
             'max without (rank) (gift_y) > bool 0 and time() - '
             'job_id:gift_z:rate1m')
        self.assertEqual(check_dashboards.metric_names(q),
                         {"gift_x_bucket", "gift_y", "job_id:gift_z:rate1m"})


class YamlLiteTest(unittest.TestCase):
    def test_rules(self):
        with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
            f.write("groups:\n  - name: g\n    rules:\n"
                    "      - record: a:b:c\n        expr: sum(x)\n"
                    "      - alert: A\n        expr: >\n"
                    "          a:b:c\n          > 1\n        for: 1m\n"
                    "        labels:\n          severity: x\n"
                    "      - alert: B\n        expr: 'up == 0'\n")
            f.flush()
            g = yaml_lite.load_rules(f.name)
        self.assertEqual(g, [{"name": "g", "rules": [
            {"record": "a:b:c", "expr": "sum(x)"},
            {"alert": "A", "expr": "a:b:c > 1"},
            {"alert": "B", "expr": "up == 0"}]}])


class DashboardCheckTest(unittest.TestCase):
    def test_finds_the_defects(self):
        ds = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
        d = {"__inputs": [{"name": "DS_PROMETHEUS", "pluginId": "prometheus"}],
             "schemaVersion": 39, "uid": "u", "title": "t",
             "templating": {"list": [{"name": "node", "type": "query",
                                      "datasource": ds, "query": "x"}]},
             "panels": [
                 {"id": 1, "type": "timeseries", "gridPos": {}, "datasource": ds,
                  "targets": [{"refId": "A", "datasource": ds,
                               "expr": 'a{n=~"$node", r=~"$rank"}'}]},
                 {"id": 1, "type": "timeseries", "gridPos": {"h": 1},
                  "datasource": {"uid": "other"}, "targets": []}]}
        problems = []
        check_dashboards.check_dashboard("d", d, problems)
        text = "\n".join(problems)
        self.assertIn("id 1 also used", text)
        self.assertIn("datasource is not", text)
        self.assertIn("no targets", text)
        self.assertIn("$rank is used but not defined", text)
        self.assertNotIn("$node", text)


if __name__ == "__main__":
    unittest.main()

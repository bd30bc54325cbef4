#!/usr/bin/env python3
"""Every dashboard and rule expression returns data from a live giftd.

  live_test.py --source ROOT --giftd BIN --giftctl BIN --rank-worker BIN
               [--prometheus BIN] [--seconds S] [--keep]

Starts giftd on free loopback ports (two daemons, leader and follower of
one job, when this giftd has the Peer flags; else one), ranks of
tests/daemon's rank_worker training on the committed gradients (2 per
node), pins one layer to the GIFT path (giftctl pin) so that GIFT-path
series exist, and a Prometheus server (scrape and rule evaluation every
second, dashboards/prometheus/rules.yml loaded) scraping the daemons. After
the run has been scraped for a while it evaluates every expression of
tests/monitoring/promql_exprs.py through /api/v1/query, retrying the empty
ones until --seconds pass, and prints every expression that never returned
data. Exit 0 all returned data, 1 some did not, 77 prometheus is not
installed (ctest: skipped). Everything started is stopped at the end.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promql_exprs  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
from free_port import free_port  # noqa: E402  (tests/free_port.py)

SKIP = 77
JOB = "monjob"
PIN_LAYER = "blocks.0.mlp.fc2"


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


class Procs:
    """Started processes, stopped (SIGTERM, then SIGKILL) in reverse order."""

    def __init__(self, tmp):
        self.tmp, self.procs = tmp, []

    def start(self, name, argv):
        log = open(os.path.join(self.tmp, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append((name, p, log))
        return p

    def log(self, name):
        with open(os.path.join(self.tmp, name + ".log")) as f:
            return f.read()

    def stop(self):
        for name, p, log in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            log.close()


def giftd_yaml(tmp, node, metrics_port, control_port):
    d = os.path.join(tmp, node)
    os.makedirs(d, exist_ok=True)
    socket_path = os.path.join(d, "agent.sock")
    path = os.path.join(d, "giftd.yaml")
    with open(path, "w") as f:
        f.write(f"""node: {node}
agent_socket: {socket_path}
control_address: 127.0.0.1:{control_port}
metrics_address: 127.0.0.1:{metrics_port}
shm_prefix: /giftmon-{os.getpid()}-{node}x
refresh_interval: 5
staleness_limit: 40
probe_interval: 2
audit_interval: 5
rank: 32
poll_interval_ms: 20
heartbeat_interval_ms: 200
rank_timeout_ms: 5000
log_level: info
selection:
  kind: top-k
  top_k: 5
  min_gain: 0.05
  window_steps: 20
""")
    return path, socket_path


def start_daemons(args, procs, tmp):
    help_text = subprocess.run([args.giftd, "--help"], capture_output=True,
                               text=True).stdout
    peers = "--peer-address" in help_text
    nodes = ["node0", "node1"] if peers else ["node0"]
    daemons = []
    token = os.path.join(tmp, "job.token")
    with open(token, "w") as f:
        f.write(os.urandom(16).hex())
    os.chmod(token, 0o600)
    peer_ports = [free_port() for _ in nodes]
    for i, node in enumerate(nodes):
        mport, cport = free_port(), free_port()
        cfg, sock = giftd_yaml(tmp, node, mport, cport)
        argv = [args.giftd, "--config", cfg]
        if peers:
            argv += [f"--job-id={JOB}", f"--peer-address=127.0.0.1:{peer_ports[i]}",
                     f"--leader-address=127.0.0.1:{peer_ports[0]}",
                     f"--job-token-file={token}"]
        p = procs.start(f"giftd-{node}", argv)
        daemons.append({"node": node, "metrics": mport, "control": cport,
                        "socket": sock, "proc": p})
    for d in daemons:
        deadline = time.monotonic() + 30
        while not os.path.exists(d["socket"]):
            if d["proc"].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"giftd {d['node']} did not start:\n" +
                                   procs.log(f"giftd-{d['node']}"))
            time.sleep(0.1)
    return daemons


def giftctl(args, d, *cmd):
    return subprocess.run([args.giftctl, "--address",
                           f"127.0.0.1:{d['control']}", *cmd],
                          capture_output=True, text=True, timeout=20)


def start_prometheus(args, procs, tmp, daemons):
    port = free_port()
    targets = ", ".join(f'"127.0.0.1:{d["metrics"]}"' for d in daemons)
    rules = os.path.join(args.source, "dashboards", "prometheus", "rules.yml")
    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - {rules}
scrape_configs:
  - job_name: giftd
    static_configs:
      - targets: [{targets}]
""")
    procs.start("prometheus", [
        args.prometheus, f"--config.file={cfg}",
        f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
        f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle",
        "--log.level=warn"])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            http_get(url + "/-/ready")
            return url
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError("prometheus did not start:\n" +
                                   procs.log("prometheus"))
            time.sleep(0.2)


def query(url, q):
    """The result list of an instant query; raises on an API error."""
    body = http_get(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": q}))
    j = json.loads(body)
    if j.get("status") != "success":
        raise RuntimeError(j.get("error", body))
    r = j["data"]["result"]
    return r if isinstance(r, list) else [r]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--giftd", required=True)
    ap.add_argument("--giftctl", required=True)
    ap.add_argument("--rank-worker", required=True)
    ap.add_argument("--prometheus", default=shutil.which("prometheus"))
    ap.add_argument("--seconds", type=float, default=60,
                    help="how long to retry expressions without data")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = ap.parse_args()
    if not args.prometheus:
        print("SKIPPED: prometheus is not installed "
              "(apt-get install prometheus; scripts/install-deps.sh)")
        return SKIP

    exprs = []
    for name in ("gift-job.json", "gift-node.json"):
        d = promql_exprs.load_dashboard(
            os.path.join(args.source, "dashboards", name))
        exprs += promql_exprs.dashboard_exprs(name, d)
    exprs += promql_exprs.rule_exprs(
        os.path.join(args.source, "dashboards", "prometheus", "rules.yml"))

    tmp = tempfile.mkdtemp(prefix="gift-monitoring-")
    procs = Procs(tmp)
    failed = []
    try:
        daemons = start_daemons(args, procs, tmp)
        print(f"giftd: {len(daemons)} node(s), metrics on " +
              ", ".join(str(d["metrics"]) for d in daemons), flush=True)
        url = start_prometheus(args, procs, tmp, daemons)
        print(f"prometheus: {url}", flush=True)
        per_node, world = 2, 2 * len(daemons)
        for i, d in enumerate(daemons):
            for r in range(i * per_node, (i + 1) * per_node):
                procs.start(f"rank{r}", [
                    args.rank_worker, f"--rank={r}", f"--world-size={world}",
                    f"--job={JOB}", f"--agent-socket={d['socket']}",
                    "--steps=100000", "--step-sleep-ms=30",
                    "--comm-timeout-s=60", "--audit-drift=1",
                    f"--report={os.path.join(tmp, f'rank{r}.jsonl')}"])
        # Pin one layer to the GIFT path once the ranks have registered its
        # name (the selector may pick more by itself).
        deadline = time.monotonic() + 60
        while True:
            r = giftctl(args, daemons[0], "pin", PIN_LAYER)
            if r.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"giftctl pin {PIN_LAYER}: {r.stderr}")
            time.sleep(0.5)
        # Until GIFT-path series are scraped, then long enough for the 10 s
        # rate windows and the rules' 1 m averages to have several samples.
        deadline = time.monotonic() + 90
        for q, what in (('gift_quantization_rel_l2{path="gift"}',
                         "GIFT-path RelL2"),
                        ('gift_layer_audit_rel_l2{path="gift"}',
                         "GIFT-path audit")):
            while not query(url, q):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no {what} series were scraped")
                time.sleep(1)
        # A plan change Prometheus sees (the first plans came before its
        # first scrape): the plan-epoch annotation needs one.
        r = giftctl(args, daemons[0], "set-interval", "6")
        if r.returncode != 0:
            raise RuntimeError(f"giftctl set-interval 6: {r.stderr}")
        time.sleep(15)

        pending = list(exprs)
        deadline = time.monotonic() + args.seconds
        while True:
            still = []
            for e in pending:
                try:
                    result = query(url, e.query)
                    error = None
                except (RuntimeError, OSError) as ex:
                    result, error = [], str(ex)
                if not result:
                    still.append((e, error))
            pending = [e for e, _ in still]
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(2)
        for e, error in still:
            failed.append(e)
            print(f"NO DATA  {e.where}\n  query: {e.query}" +
                  (f"\n  error: {error}" if error else ""))
        print(f"{len(exprs) - len(failed)} of {len(exprs)} expressions "
              f"returned data")
        if failed:
            print("giftd /metrics had these families:\n  " + "\n  ".join(
                sorted({l.split()[2] for l in http_get(
                    f"http://127.0.0.1:{daemons[-1]['metrics']}/metrics")
                    .splitlines() if l.startswith("# TYPE")})))
        try:
            urllib.request.urlopen(urllib.request.Request(
                url + "/-/quit", method="POST"), timeout=5).read()
        except OSError:
            pass
    except Exception as ex:  # noqa: BLE001  (the logs tell what went wrong)
        print(f"FAILED: {ex}")
        for name, _, _ in procs.procs:
            print(f"---- {name} log (tail)\n" + procs.log(name)[-3000:])
        failed.append(ex)
    finally:
        procs.stop()
        if args.keep or failed:
            print(f"(files kept in {tmp})")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

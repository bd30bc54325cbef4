#!/usr/bin/env bash
# make monitor: Prometheus with the shipped config and rules
# (dashboards/prometheus/prometheus.yml: giftd on 127.0.0.1:9464, the
# metrics address of `make demo`), in the foreground until Ctrl-C.
#
#   scripts/monitor.sh [--port 9090] [--data DIR]
#
# Run `make demo` in another terminal (before or after); Prometheus keeps
# scraping while giftd comes and goes. Data goes to a temporary directory
# removed on exit unless --data is given.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
port=9090
data=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --port) port="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "monitor.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if ! command -v prometheus >/dev/null; then
  echo "monitor.sh: prometheus is not installed (scripts/install-deps.sh or" \
       "apt-get install prometheus)" >&2
  exit 1
fi
if [[ -z "$data" ]]; then
  data="$(mktemp -d -t gift-prometheus-XXXXXX)"
  trap 'rm -rf "$data"' EXIT
fi

config="$here/dashboards/prometheus/prometheus.yml"
prometheus --config.file="$config" --storage.tsdb.path="$data" \
  --web.listen-address="127.0.0.1:$port" --web.enable-lifecycle \
  --log.level=warn &
pid=$!
stop() { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
trap 'stop; exit 0' INT TERM

for _ in $(seq 50); do
  curl -fsS "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { echo "monitor.sh: prometheus exited" >&2; exit 1; }
  sleep 0.2
done

cat <<MSG
Prometheus: http://127.0.0.1:$port  (scraping giftd at 127.0.0.1:9464;
  targets: http://127.0.0.1:$port/targets, alerts: http://127.0.0.1:$port/alerts)
Start the job in another terminal: make demo
(if port 9464 is busy, the demo moves giftd's metrics elsewhere and says so;
edit the target in $config then)

Grafana (yours; not shipped):
  1. Connections -> Data sources -> Add -> Prometheus, URL http://127.0.0.1:$port
  2. Dashboards -> New -> Import -> Upload dashboard JSON file:
       $here/dashboards/gift-job.json   (quantization, selection, factors, traffic)
       $here/dashboards/gift-node.json  (giftd health)
     and pick the Prometheus data source from step 1 for DS_PROMETHEUS.
Ctrl-C stops Prometheus.
MSG
wait "$pid"

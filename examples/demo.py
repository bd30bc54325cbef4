#!/usr/bin/env python3
"""`make demo`: the tiny Llama on 4 CPU ranks, four ways, same model,
batches and seeds:

  1. FP32 PyTorch DDP (the reference),
  2. Euclidean FP8 (train_tiny_llama.py --mode euclid --format e4m3: libgift's
     FP8 allreduce, no whitening, no error feedback, no giftd): what plain
     FP8 gives,
  3. Euclidean --format (default nvfp4) with error feedback: plain 4-bit
     communication at its best, the fair baseline of
  4. GIFT at --format (--mode gift beside a giftd: the layers giftd selects
     whitened, error feedback in whitened coordinates).

The headline is what a user decides on: held-out loss against FP32, bytes,
and whether GIFT's gap to FP32 is smaller than plain 4-bit's, read against
the seed noise of the README's multi-seed format study (docs/format_study.json;
one seed each here). The per-layer audit compares runs 3 and 4 (the same
format and the same error-feedback setting).

The first three do not depend on giftd: each is run once and cached under
--out, keyed by every setting and file that changes it (the example's code;
for the Euclidean runs also the built `gift` package). The quantized runs
audit every --audit-interval steps (an FP32 allreduce of the same local
gradients beside the quantized one: RelL2 of the applied gradient against
it) and measure their drift over windows of --window steps and every span of
them (train_tiny_llama.py --drift-window).
giftd is started with its default configuration except the audit interval
(other ports when the default ones are taken) and is polled (giftctl
layers) while the GIFT run trains, so that the reasons it gives — an audit
removal among them — are seen when they happen.

It prints the summary — loss of the four runs, bytes vs FP32, per layer GIFT
protected the audited error of Euclidean vs GIFT (per step, drift, worst
window) against the targets, the whole model, which layers giftd protected
and why, what the audit removed, the audit's cost — and writes a PNG figure
and the numbers (demo_report.json). --report-only prints the last report
again without training. Everything it starts is stopped when it ends, also
on Ctrl-C or an error.

    python3 examples/demo.py --build build [--steps 250] [--nproc 4]
"""

import argparse
import bisect
import functools
import hashlib
import json
import math
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "train_tiny_llama.py")
DEFAULT_CONTROL = "127.0.0.1:50151"
DEFAULT_METRICS = "127.0.0.1:9464"
LABELS = {"ddp": "FP32 DDP (reference)", "euclid": "Euclidean FP8",
          "gift": "GIFT"}
FORMATS = ("nvfp4", "mxfp4", "e4m3")
# The committed multi-seed format study (bench/python/format_study.py),
# quoted for the seed noise.
STUDY = os.path.join(os.path.dirname(HERE), "docs", "format_study.json")
# The study on a larger model (plain 4-bit's gap to FP32 largest there).
STUDY_MEDIUM = os.path.join(os.path.dirname(HERE), "docs",
                            "format_study_medium.json")
# The issues' targets, on every layer that stays on the GIFT path: audited
# per-step RelL2 <= 0.8x (FP8) or 0.65x (4 bits) and drift <= 0.5x the
# Euclidean figure at the same error-feedback setting; and no protected
# layer worse than Euclidean over any window.
TARGET_REL = {"e4m3": 0.8, "nvfp4": 0.65, "mxfp4": 0.65}
TARGET_DRIFT, TARGET_WINDOW = 0.5, 1.0


def run_labels(fmt):
    """The four runs: name -> (mode, label)."""
    f = fmt.upper() if fmt != "e4m3" else "FP8 (E4M3)"
    return {"reference": ("ddp", "FP32 DDP (reference)"),
            "euclid8": ("euclid", "Euclidean FP8"),
            "euclid": ("euclid", f"Euclidean {f} + EF"),
            "gift": ("gift", f"GIFT {f}")}
# giftd's reason for a layer the audit rule took off the GIFT path (then
# barred from it for a while); "the audit objects" (a pinned layer) is not
# a removal.
AUDIT_REMOVAL = re.compile(r"not selected: (audit: |barred by the audit)")


def parse_args():
    p = argparse.ArgumentParser(description="GIFT demo (make demo)")
    p.add_argument("--build", default="build", help="CMake build directory")
    p.add_argument("--out", default=None, help="default: BUILD/demo")
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--format", choices=FORMATS, default="nvfp4",
                   help="wire format of runs 3 and 4 (default nvfp4)")
    p.add_argument("--ffn", type=int, default=352,
                   help="MLP width (default 352: a multiple of 32, so "
                   "every layer takes every 4-bit format)")
    p.add_argument("--audit-interval", type=int, default=10,
                   help="steps between audit steps in the FP8 runs "
                   "(default 10: 24 audits in 250 steps)")
    p.add_argument("--window", type=int, default=50,
                   help="drift window, steps (default 50)")
    p.add_argument("--giftd-flag", action="append", default=[],
                   metavar="FLAG",
                   help="a flag for the GIFT run's giftd, repeatable "
                   "(e.g. --giftd-flag=--max-sketch-period=1)")
    p.add_argument("--fresh-reference", action="store_true",
                   help="rerun the FP32 and Euclidean runs even when cached")
    p.add_argument("--report-only", action="store_true",
                   help="no GIFT run: the report of the last one (under "
                   "--out) again, against the cached runs")
    return p.parse_args()


def port_free(address):
    host, port = address.rsplit(":", 1)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except OSError:
            return False
    return True


def free_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


class Giftd:
    """giftd in the background with its defaults (and `flags`); stopped by
    stop(). private: a socket in run_dir, a free control port, no metrics,
    its own node name and shm prefix (beside any other giftd;
    bench/python/plan_stability.py)."""

    def __init__(self, exe, ctl, run_dir, flags=(), private=False):
        self.ctl = ctl
        # giftd's and the clients' default (common/agent_socket.h), so that
        # giftctl and the ranks find this daemon without flags.
        self.socket = "/tmp/gift/agent.sock"
        self.control = DEFAULT_CONTROL
        self.metrics = DEFAULT_METRICS
        self.moved = []
        if private or os.path.exists(self.socket) or not port_free(
                self.control):
            self.socket = os.path.join(run_dir, "agent.sock")
            self.control = free_address()
            self.moved.append("agent socket and control port")
        if private:
            self.metrics = ""
            tag = f"ps{os.getpid()}x{self.control.rsplit(':', 1)[1]}"
            flags = [f"--node={tag}", f"--shm-prefix=/gift-{tag}", *flags]
        elif not port_free(self.metrics):
            self.metrics = free_address()
            self.moved.append("metrics port")
        os.makedirs(os.path.dirname(self.socket), exist_ok=True)
        self.log_path = os.path.join(run_dir, "giftd.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [exe, f"--agent-socket={self.socket}",
             f"--control-address={self.control}",
             f"--metrics-address={self.metrics}", *flags],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("giftd did not start:\n" +
                                   open(self.log_path).read())
            time.sleep(0.05)

    def giftctl(self, *args):
        r = subprocess.run([self.ctl, "--address", self.control, "--json",
                            *args], capture_output=True, text=True,
                           timeout=20)
        if r.returncode != 0:
            raise RuntimeError(f"giftctl {' '.join(args)}: {r.stderr}")
        return json.loads(r.stdout)

    def scrape(self):
        import urllib.request  # noqa: PLC0415
        with urllib.request.urlopen(f"http://{self.metrics}/metrics",
                                    timeout=10) as r:
            return r.read().decode()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class LayerPoller:
    """`giftctl layers` every `period` seconds in a thread while a run
    trains: each layer's selection and reason whenever they change."""

    def __init__(self, daemon, period=2.0):
        self.daemon, self.period = daemon, period
        self.changes = []  # {"time", "layer", "selected", "reason"}
        self.errors = 0
        self._last = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(self.period):
            self.poll()

    def poll(self):
        try:
            layers = self.daemon.giftctl("layers").get("layers", [])
        except Exception:  # noqa: BLE001 -- a missed poll is only a gap
            self.errors += 1
            return
        now = time.time()
        for l in layers:
            v = (bool(l.get("selected", False)), l.get("reason", ""))
            if self._last.get(l["name"]) != v:
                self._last[l["name"]] = v
                self.changes.append({"time": now, "layer": l["name"],
                                     "selected": v[0], "reason": v[1]})

    def stop(self):
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self.poll()


def run_training(args, mode, log, summary, env, extra=()):
    cmd = [sys.executable, TRAIN, "--mode", mode, "--nproc", str(args.nproc),
           "--steps", str(args.steps), "--log", log, "--summary", summary,
           "--label", LABELS[mode], *extra]
    # Own process group: Ctrl-C or an error here stops every rank.
    p = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        rc = p.wait()
    except BaseException:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
        raise
    if rc != 0:
        raise RuntimeError(f"training ({mode}) exited with {rc}")


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# The CPU extensions PyTorch picks its kernels by (and so the rounding of a
# run's sums): a build directory moved or shared between machines must not
# serve one machine's cached runs to another.
KERNEL_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw",
                "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile",
                "asimd", "sve")


@functools.lru_cache(maxsize=None)
def platform_key():
    """(machine, the CPU extensions above it has, the torch version); read
    once per process (format_study.py keys every run with it)."""
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    try:
        import torch  # noqa: PLC0415 -- Debian's has no distribution metadata
        torch_version = torch.__version__
    except ImportError:
        torch_version = "unknown"
    return (platform.machine(), tuple(sorted(flags & set(KERNEL_FLAGS))),
            torch_version)


def run_key(args, mode, extra, package=None):
    """What a giftd-free run depends on: its settings, the machine
    (platform_key), the example's code and (FP8 modes) the built gift
    package."""
    h = hashlib.sha256()
    h.update(json.dumps([args.nproc, args.steps]).encode())
    h.update(json.dumps(platform_key()).encode())
    if mode != "ddp":
        h.update(json.dumps([mode, list(extra)]).encode())
    for name in ("train_tiny_llama.py", "tiny_llama.py"):
        h.update(open(os.path.join(HERE, name), "rb").read())
    if package:
        for name in sorted(os.listdir(package)):
            f = os.path.join(package, name)
            if os.path.isfile(f) and name.endswith((".py", ".so")):
                h.update(name.encode())
                h.update(open(f, "rb").read())
    key = h.hexdigest()[:16]
    if mode == "ddp" and extra:  # a reference with arguments: them too
        key = hashlib.sha256(
            json.dumps([key, list(extra)]).encode()).hexdigest()[:16]
    return key


def cached_run(args, name, env, extra, package=None, n=0, unkeyed=()):
    """Runs `name` (run_labels) unless a run of the same key is cached;
    (log, summary). `unkeyed`: more arguments that do not change the run."""
    mode, label = run_labels(args.format)[name]
    key = run_key(args, mode, extra, package)
    log = os.path.join(args.out, f"{name}-{key}.jsonl")
    summary = os.path.join(args.out, f"{name}-{key}.json")
    if args.report_only and not os.path.exists(summary):
        # No run here: the newest cached one (the code changed since).
        import glob  # noqa: PLC0415
        found = sorted(glob.glob(os.path.join(args.out, f"{name}-*.json")),
                       key=os.path.getmtime)
        if not found:
            sys.exit(f"demo: --report-only: no cached {label} run "
                     f"in {args.out}")
        summary = found[-1]
        log = summary[:-len(".json")] + ".jsonl"
        print(f"demo: [{n}/4] {label} run from {summary} (not this "
              "code's key: it changed since)", flush=True)
        return log, summary
    if args.fresh_reference or not os.path.exists(summary):
        print(f"demo: [{n}/4] {label} run ({args.nproc} ranks, "
              f"{args.steps} steps; cached in {summary})", flush=True)
        run_training(args, mode, log + ".tmp", summary + ".tmp", env,
                     [*extra, *unkeyed, "--label", label])
        os.replace(log + ".tmp", log)
        os.replace(summary + ".tmp", summary)
    else:
        print(f"demo: [{n}/4] {label} run from {summary} "
              "(--fresh-reference reruns it)", flush=True)
    return log, summary


# ---- the analysis ----------------------------------------------------------

def mean(xs):
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else float("nan")


def ratio(a, b):
    return a / b if math.isfinite(a) and math.isfinite(b) and b > 0 \
        else float("nan")


def audits(log):
    """step -> {layer: audit} of a run's audit steps."""
    return {r["step"]: r["audit"]["layers"] for r in log if "audit" in r}


def model_rel(layers):
    """Whole-model audited RelL2 of one audit step: the RelL2 of the whole
    gradient, layers weighted by their applied gradient's squared norm (the
    FP32 average's, to the audit's own error); and the element-weighted mean
    of the layers' RelL2."""
    num = sum(l["rel_l2"] ** 2 * l["norm"] ** 2 for l in layers.values())
    den = sum(l["norm"] ** 2 for l in layers.values())
    n = sum(l["numel"] for l in layers.values())
    return (math.sqrt(num / den) if den > 0 else float("nan"),
            sum(l["rel_l2"] * l["numel"] for l in layers.values()) / n
            if n else float("nan"))


def gift_paths(log, name):
    """step -> path of `name` in a run."""
    return {r["step"]: r["layers"][name]["path"] for r in log
            if name in r.get("layers", {})}


def spans_of(summary):
    """The drift over every span of whole windows: {(first, last): fig}."""
    out = {}
    for k, v in (summary.get("drift_spans") or {}).items():
        a, b = k.split("-")
        out[(int(a), int(b))] = v
    return out


def windows_of(spans):
    """The single windows, in order: [(first, last)], each from a window's
    first step to the step before the next one's (the last: the run's)."""
    firsts = sorted({a for a, _ in spans})
    out = []
    for i, a in enumerate(firsts):
        b = (firsts[i + 1] - 1) if i + 1 < len(firsts) else max(
            b for _, b in spans)
        if (a, b) in spans:
            out.append((a, b))
    return out


def layer_row(name, eu_aud, gi_aud, gi_log, eu_spans, gi_spans, windows):
    """The audited figures of a protected layer, Euclidean vs GIFT."""
    paths = gift_paths(gi_log, name)
    on = sorted(s for s, p in paths.items() if p == "gift")
    entries = [s for s in on if paths.get(s - 1) != "gift"]
    last_step = max(paths) if paths else None
    # The probe steps' local round trip (one rank, no error feedback) while
    # on the GIFT path: what whitening alone does to the FP8 error.
    probes = [r["layers"][name] for r in gi_log
              if "probe_euclid" in r["layers"].get(name, {})
              and r["layers"][name]["path"] == "gift"]
    # Per step: the GIFT run's audits with the layer on the GIFT path, the
    # Euclidean run's of the same steps.
    both = [s for s in sorted(gi_aud) if s in eu_aud
            and name in gi_aud[s] and name in eu_aud[s]
            and gi_aud[s][name]["path"] == "gift"]
    e_rel = mean([eu_aud[s][name]["rel_l2"] for s in both])
    g_rel = mean([gi_aud[s][name]["rel_l2"] for s in both])
    # Drift: per whole window on the GIFT path, and over the longest span of
    # consecutive such windows; the whole run.
    full = [w for w in windows
            if all(paths.get(s) == "gift" for s in range(w[0], w[1] + 1))]
    best, cur = None, []
    for w in windows:
        if w in full:
            cur.append(w)
            if best is None or len(cur) > len(best):
                best = list(cur)
        else:
            cur = []
    span = (best[0][0], best[-1][1]) if best else None

    def drift(spans, key):
        v = spans.get(key, {}).get("layers", {}).get(name) if key else None
        return v if v is not None else float("nan")

    e_span, g_span = drift(eu_spans, span), drift(gi_spans, span)
    whole = (windows[0][0], windows[-1][1]) if windows else None
    e_run, g_run = drift(eu_spans, whole), drift(gi_spans, whole)
    # The worst window: RelL2 (its audits on the GIFT path) and drift (a
    # window wholly on the GIFT path), GIFT / Euclidean.
    worst_rel, worst_drift = (float("nan"), None), (float("nan"), None)
    for w in windows:
        ss = [s for s in both if w[0] <= s <= w[1]]
        if ss:
            r = ratio(mean([gi_aud[s][name]["rel_l2"] for s in ss]),
                      mean([eu_aud[s][name]["rel_l2"] for s in ss]))
            if math.isfinite(r) and not r <= worst_rel[0]:
                worst_rel = (r, w)
        if w in full:
            r = ratio(drift(gi_spans, w), drift(eu_spans, w))
            if math.isfinite(r) and not r <= worst_drift[0]:
                worst_drift = (r, w)
    return {
        "name": name, "gift_steps": len(on), "steps": len(gi_log),
        "entries": entries, "at_end": paths.get(last_step) == "gift",
        "probe_ratio": ratio(mean([p["probe_gift"] for p in probes]),
                             mean([p["probe_euclid"] for p in probes])),
        "first_gift": on[0] if on else None, "audits": len(both),
        "euclid": e_rel, "gift": g_rel, "rel_ratio": ratio(g_rel, e_rel),
        "span": span, "drift_euclid": e_span, "drift_gift": g_span,
        "drift_ratio": ratio(g_span, e_span),
        "run_drift_euclid": e_run, "run_drift_gift": g_run,
        "run_drift_ratio": ratio(g_run, e_run),
        "worst_rel": worst_rel[0], "worst_rel_window": worst_rel[1],
        "worst_drift": worst_drift[0], "worst_drift_window": worst_drift[1],
    }


def removals(changes, gift_log, gi_aud):
    """The audit's removals seen by the poller: layer, step, reason, and
    the layer's audited RelL2 on the GIFT path before (its last 3 audits)
    and on the Euclidean path after (its next 3)."""
    times = [r["time"] for r in gift_log]
    steps = [r["step"] for r in gift_log]
    seen, out = set(), []
    for c in changes:
        if not AUDIT_REMOVAL.search(c["reason"]):
            continue
        m = re.search(r"removal (\d+)", c["reason"])
        key = (c["layer"], m.group(1) if m else c["reason"])
        if key in seen:
            continue
        seen.add(key)
        i = bisect.bisect_right(times, c["time"]) - 1
        polled = steps[max(0, i)]
        paths = gift_paths(gift_log, c["layer"])
        # The step it left the GIFT path: the last gift -> euclid switch up
        # to a few steps after the poll saw the reason.
        left = [s for s in sorted(paths) if s <= polled + 5 and s > 0
                and paths[s] != "gift" and paths.get(s - 1) == "gift"]
        step = left[-1] if left else polled
        before = [gi_aud[s][c["layer"]] for s in sorted(gi_aud)
                  if s < step and c["layer"] in gi_aud[s]
                  and gi_aud[s][c["layer"]]["path"] == "gift"][-3:]
        after_steps = [s for s in sorted(gi_aud) if s >= step
                       and c["layer"] in gi_aud[s]
                       and gi_aud[s][c["layer"]]["path"] == "euclid"][:3]
        out.append({"layer": c["layer"], "step": step,
                    "reason": c["reason"],
                    "gift_before": mean([a["rel_l2"] for a in before]),
                    "euclid_after": mean([gi_aud[s][c["layer"]]["rel_l2"]
                                          for s in after_steps]),
                    "after_steps": after_steps})
    return out


def removal_change(rm, gi_aud):
    """What a removal did to the whole model's audited RelL2: over the
    layer's next Euclidean audits, the model's figure as audited minus the
    same with the layer's RelL2 put back to its GIFT-path figure."""
    diffs = []
    for s in rm["after_steps"]:
        layers = gi_aud[s]
        had = {**layers, rm["layer"]: {**layers[rm["layer"]],
                                       "rel_l2": rm["gift_before"]}}
        diffs.append(model_rel(layers)[0] - model_rel(had)[0])
    return mean(diffs)


def number(x):
    """A float from giftctl --json (protobuf writes NaN as "NaN")."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def beta_of(layer):
    """The β a layer's newest factor was built with (giftd --beta=auto
    picks it from the probes), and the probes' mean GIFT round-trip RelL2 of
    each grid β over the selector's window."""
    s = layer.get("settings", {})
    grid = [number(b) for b in layer.get("beta_grid", [])]
    rel = [number(x) for x in layer.get("beta_grid_rel_l2", [])]
    return {"beta": number(layer.get("factor_beta", 0)) or
            number(s.get("beta", 0)),
            "beta_auto": bool(s.get("beta_auto", False)),
            "beta_probes": int(number(layer.get("beta_probes", 0)) or 0),
            "beta_grid": dict(zip(grid, rel))}


def beta_text(r):
    if not r.get("beta"):
        return "β —"
    grid = ", ".join(f"{b:g}: {fmt(x)}" for b, x in r["beta_grid"].items())
    mode = "auto" if r.get("beta_auto") else "fixed"
    return (f"β {r['beta']:g} ({mode}; probe RelL2 by β over "
            f"{r['beta_probes']} grid probes: {grid or '—'})")


def analyse(args, ref, eu, gi, rs, es, gs, daemon_layers, changes):
    names = list(gi[-1].get("layers", {}))
    protected = [n for n in names
                 if any(r["layers"].get(n, {}).get("path") == "gift"
                        for r in gi)]
    eu_aud, gi_aud = audits(eu), audits(gi)
    eu_spans, gi_spans = spans_of(es), spans_of(gs)
    windows = windows_of(gi_spans)
    rows = [layer_row(n, eu_aud, gi_aud, gi, eu_spans, gi_spans, windows)
            for n in protected]
    by_name = {l["name"]: l for l in daemon_layers}
    rm = removals(changes, gi, gi_aud)
    removed = sorted({r["layer"] for r in rm})
    for r in rows:
        d = by_name.get(r["name"], {})
        r["reason"] = d.get("reason", "")
        r["selected"] = bool(d.get("selected", False))
        r.update(beta_of(d))
        r["removed_by_audit"] = r["name"] in removed
        # Stays on the GIFT path: on it at the end of the run (a layer that
        # left it, for the audit or the policy, is judged only per window).
        r["stays"] = r["at_end"]
        for key in ("worst_rel_window", "worst_drift_window"):
            w = r[key]
            r[key + "_entry"] = bool(w) and any(
                w[0] <= e <= w[1] for e in r["entries"])
        windows_seen = [x for x in (r["worst_rel"], r["worst_drift"])
                        if math.isfinite(x)]
        # What a target can be judged on: a layer that stayed on the GIFT
        # path with audits there (RelL2), with a whole window there (drift);
        # any protected layer with a window on the GIFT path.
        r["judged"] = [k for k, ok in (
            ("rel", r["stays"] and math.isfinite(r["rel_ratio"])),
            ("drift", r["stays"] and math.isfinite(r["drift_ratio"])),
            ("window", bool(windows_seen))) if ok]
        r["miss"] = [k for k, bad in (
            ("rel", r["rel_ratio"] > args.target_rel),
            ("drift", r["drift_ratio"] > TARGET_DRIFT),
            ("window", any(x > TARGET_WINDOW for x in windows_seen)))
            if bad and k in r["judged"]]
    common = sorted(set(eu_aud) & set(gi_aud))
    e_model = [model_rel(eu_aud[s]) for s in common]
    g_model = [model_rel(gi_aud[s]) for s in common]
    whole = (windows[0][0], windows[-1][1]) if windows else None
    model = {
        "audits": len(common),
        "tensors": len(gi_aud[common[0]]) if common else 0,
        "rel_euclid": mean([x[0] for x in e_model]),
        "rel_gift": mean([x[0] for x in g_model]),
        "elem_euclid": mean([x[1] for x in e_model]),
        "elem_gift": mean([x[1] for x in g_model]),
        "drift_euclid": eu_spans.get(whole, {}).get("model", float("nan")),
        "drift_gift": gi_spans.get(whole, {}).get("model", float("nan")),
        "window_drift_euclid": mean([eu_spans[w]["model"] for w in windows
                                     if w in eu_spans]),
        "window_drift_gift": mean([gi_spans[w]["model"] for w in windows]),
        "removals": len(rm), "removed_layers": removed,
        "removal_change": sum(removal_change(r, gi_aud) for r in rm)
        if rm else 0.0,
    }
    for k in ("rel", "elem", "drift", "window_drift"):
        model[k + "_ratio"] = ratio(model[k + "_gift"], model[k + "_euclid"])
    # The audit's cost (the GIFT run, rank 0).
    g = gs["gift"]
    audit_steps = [r for r in gi if "audit" in r]
    plain = sorted(r["seconds"] for r in gi[10:] if "audit" not in r)
    cost = {
        "interval": args.audit_interval, "audit_steps": g["audit_steps"],
        "seconds_per_audit": g["audit_seconds"] / max(1, g["audit_steps"]),
        "bytes_per_audit": g["bytes_audit"] / max(1, g["audit_steps"]),
        "step_seconds": mean([r["seconds"] for r in gi[10:]]),
        "audit_step_seconds": mean([r["seconds"] for r in audit_steps]),
        "plain_step_seconds": plain[len(plain) // 2] if plain else
        float("nan"),
    }
    cost["per_step_seconds"] = cost["seconds_per_audit"] / args.audit_interval
    return rows, model, rm, cost, windows


# ---- the report ------------------------------------------------------------

def fmt(x, spec=".4f"):
    return "—" if x is None or not math.isfinite(x) else format(x, spec)


def fmt_ratio(x, target):
    s = fmt(x, ".2f")
    return s + ("*" if math.isfinite(x) and x > target else " ")


def bytes_line(s):
    g = s["gift"]
    sent = g["bytes_euclid"] + g["bytes_gift"] + g["bytes_control"]
    return sent / g["steps"], sent / g["bytes_fp32_equivalent"]


def study_quote(fmt, path=STUDY):
    """What a committed multi-seed study says of this format: its
    setting, FP32's seed sd, and per run its paired Δ vs FP32 (mean, sd,
    outside the noise), with GIFT against Euclidean + EF ("gift_vs_ef");
    the study's paired comparisons where it has them (they pool earlier
    studies' seeds: format_study.py --pool); None when there is no study
    file."""
    try:
        with open(path) as f:
            st = json.load(f)
    except (OSError, ValueError):
        return None
    c = st.get("configs", {})
    out = {"setting": st.get("setting", ""),
           "seeds": st.get("settings", {}).get("seeds", []),
           "fp32_sd": (c.get("fp32", {}).get("val_loss") or [None, None])[1]}
    pairs = {(r.get("a"), r.get("b")): r for r in st.get("comparisons") or []}
    for key, conf in (("euclid8", "euclid-e4m3-ef-off"),
                      ("plain", f"euclid-{fmt}-ef-off"),
                      ("euclid", f"euclid-{fmt}-ef-on"), ("gift", f"gift-{fmt}")):
        if (conf, "fp32") in pairs:
            out[key] = pairs[(conf, "fp32")]
        elif conf in c:
            out[key] = c[conf]["diff_vs_fp32"]
    if (f"gift-{fmt}", f"euclid-{fmt}-ef-on") in pairs:
        out["gift_vs_ef"] = pairs[(f"gift-{fmt}", f"euclid-{fmt}-ef-on")]
    ns = [out[k].get("n") or 0 for k in ("plain", "euclid", "gift")
          if k in out]
    if ns:
        out["seeds_compared"] = max(ns)
    return out


def headline(args, every):
    """The decision's figures: per run the held-out loss, its gap to FP32
    and the bytes; whether GIFT's gap is smaller than plain 4-bit's with
    error feedback; the study's noise band."""
    ref = every["ddp"][1]["val_loss"]
    runs = {m: {"val_loss": s["val_loss"], "gap": s["val_loss"] - ref,
                "bytes_vs_fp32": 1.0 if m == "ddp" else bytes_line(s)[1]}
            for m, (_, s) in every.items()}
    g, e = runs["gift"]["gap"], runs["euclid"]["gap"]
    return {"runs": runs, "gift_gap_smaller": abs(g) < abs(e),
            "gap_ratio": ratio(abs(g), abs(e)),
            "study": study_quote(args.format),
            "study_medium": study_quote(args.format, STUDY_MEDIUM)}


def print_headline(args, head):
    labels = run_labels(args.format)
    names = (("ddp", labels["reference"][1]), ("euclid8", "Euclidean FP8"),
             ("euclid", labels["euclid"][1]), ("gift", labels["gift"][1]))
    r = head["runs"]
    print("  held-out loss (one seed each), its gap to FP32, bytes vs FP32:")
    for key, label in names:
        x = r[key]
        gap = "" if key == "ddp" else f"{x['gap']:+.4f}"
        print(f"    {label:28} {x['val_loss']:.4f} {gap:>8}   "
              f"{100 * x['bytes_vs_fp32']:5.1f}%")
    g, e = r["gift"]["gap"], r["euclid"]["gap"]
    fmt_name = args.format.upper()
    print(f"  GIFT {fmt_name}'s gap to FP32 {g:+.4f} is "
          f"{'smaller' if head['gift_gap_smaller'] else 'not smaller'} than "
          f"Euclidean {fmt_name} + EF's {e:+.4f} in this run, at "
          f"{100 * r['gift']['bytes_vs_fp32']:.1f}% of FP32's bytes.")
    if g < 0 and e < 0:
        print("  (both end below FP32 here: 'smaller' means closer to FP32, "
              "not better; this corpus overfits)")
    st = head["study"]
    if st is None:
        print(f"  (no study file {STUDY}: one seed says nothing about a "
              "difference; run bench/python/format_study.py)")
        return
    band = st.get("fp32_sd")
    print(f"  But one seed decides nothing: in the README's study "
          f"({len(st['seeds'])} seeds per configuration, paired by seed; "
          f"{st['setting'] or 'see docs/format_study.md'}) FP32's held-out "
          f"loss alone varies by ±{fmt(band)} (sd) between seeds.")
    for key, label in names[1:]:
        d = st.get(key)
        if d:
            print_study_row(label, d)
    print_medium_study(fmt_name, head.get("study_medium"))


def print_study_row(label, d):
    """One run's paired Δ vs FP32 in a study, and whether it is noise."""
    verdict = ("outside the seed noise" if d["significant"]
               else "inside the seed noise")
    print(f"    {label:28} study Δ vs FP32 {d['mean']:+.4f} ± "
          f"{d['sd']:.4f}  ({verdict})")


def print_medium_study(fmt_name, st):
    """The README's larger-model study, where plain 4-bit's gap to FP32 is
    largest, when it has this format's runs."""
    if not st or not all(k in st for k in ("plain", "euclid", "gift")):
        return
    plain, ef, gift = st["plain"], st["euclid"], st["gift"]
    seeds = st.get("seeds_compared") or len(st["seeds"])
    print(f"  On a larger model (the README's study, {seeds} seeds; "
          "docs/format_study_medium.md):")
    for label, d in ((f"Euclidean {fmt_name}, no EF", plain),
                     (f"Euclidean {fmt_name} + EF", ef),
                     (f"GIFT {fmt_name}", gift)):
        print_study_row(label, d)
    pair = st.get("gift_vs_ef")
    if pair and pair.get("mean") is not None:
        print(f"    GIFT − Euclidean {fmt_name} + EF, paired by seed: "
              f"{pair['mean']:+.4f} ± {pair['sd']:.4f} over {pair['n']} seeds "
              f"({'outside' if pair['significant'] else 'inside'} the seed "
              "noise)")
    g, p, e = gift["mean"], plain["mean"], ef["mean"]
    if p <= 0:
        return
    # Smaller than error feedback alone only where the paired difference
    # says so; without it, by the means.
    if pair and pair.get("significant") is not None:
        smaller = pair["significant"] and pair["mean"] < 0
    else:
        smaller = abs(g) < abs(e)
    print(f"    GIFT's gap is {g / p:.2f}x plain {fmt_name}'s and "
          f"{'smaller' if smaller else 'not smaller'} than with error "
          f"feedback alone ({g:+.4f} vs {e:+.4f})"
          + ("." if smaller else
             ": GIFT is no better than error feedback alone."))


def window_miss(r):
    """'name 1.24x RelL2 in steps 50-99 (entered the GIFT path there)'."""
    out = []
    for key, label in (("worst_rel", "RelL2"), ("worst_drift", "drift")):
        x, w = r[key], r[key + "_window"]
        if math.isfinite(x) and x > TARGET_WINDOW:
            out.append(f"{x:.3f}x {label} in steps {w[0]}-{w[1]}" +
                       (" (entered the GIFT path there)"
                        if r[key + "_window_entry"] else ""))
    return f"{r['name']} " + ", ".join(out)


def print_summary(args, runs, plain8, rows, model, rm, cost, daemon, head,
                  out_png):
    (ref, rs), (eu, es), (gi, gs) = runs
    k = max(1, args.steps // 10)
    last = [mean([r["loss"] for r in log[-k:]])
            for log, _ in (runs[0], plain8, runs[1], runs[2])]
    cfg = gs["config"]
    fp32 = gs["gift"]["bytes_fp32_equivalent"] / gs["gift"]["steps"]
    audit_bytes = gs["gift"]["bytes_audit"] / gs["gift"]["steps"]
    labels = run_labels(args.format)
    print()
    print(f"== GIFT demo: tiny Llama ({gs['parameters'] / 1e6:.2f} M "
          f"parameters, {cfg['layers']} blocks, d={cfg['dim']}, ffn "
          f"{args.ffn}) on {args.nproc} CPU ranks, {args.steps} steps, same "
          "batches and seeds ==")
    print_headline(args, head)
    print(f"  training loss, mean of the last {k} steps: " + "   ".join(
        f"{label} {x:.4f}" for label, x in zip(
            (labels[n][1] for n in ("reference", "euclid8", "euclid", "gift")),
            last)))
    print(f"  FP32 sends {fp32 / 1e6:.2f} MB per rank per step")
    what = ("the gradients and their running sums"
            if cost["bytes_per_audit"] > 1.5 * fp32 else "the gradients")
    print(f"  + the audit (measurement only): {audit_bytes / 1e6:.2f} MB per "
          f"step on average ({100 * audit_bytes / fp32:.1f}% of FP32: an "
          f"FP32 allreduce of {what} every {args.audit_interval} steps)")
    print(f"  audit cost: {1e3 * cost['seconds_per_audit']:.1f} ms and "
          f"{cost['bytes_per_audit'] / 1e6:.2f} MB per audit step "
          f"({cost['audit_steps']} audits; those steps took "
          f"{cost['audit_step_seconds']:.3f} s, the others "
          f"{cost['plain_step_seconds']:.3f} s median), i.e. "
          f"{1e3 * cost['per_step_seconds']:.1f} ms per training step "
          f"({100 * cost['per_step_seconds'] / cost['step_seconds']:.1f}% of "
          f"the mean {cost['step_seconds']:.3f} s step)")
    print(f"  giftd: refresh interval K = {daemon['refresh_interval']} steps, "
          f"rank r = {daemon['rank']}, audit interval "
          f"{daemon['audit_interval']}; {daemon['refreshes']} factor "
          f"refreshes, plan epoch {daemon['plan_epoch']}"
          + (f"; flags {' '.join(daemon['flags'])}" if daemon["flags"] else ""))
    print()
    w = args.window
    print(f"  Audited error of the {len(rows)} layers GIFT protected (on the "
          f"GIFT path at some step), {labels['euclid'][1]} vs "
          f"{labels['gift'][1]} (same format, both with error feedback); * "
          "misses a "
          "target")
    for line in textwrap.wrap(
            "RelL2 per step: mean of the audits with the layer on the GIFT "
            "path, the Euclidean run's at the same steps (target <= "
            f"{args.target_rel}x). Worst: the largest GIFT/Euclidean ratio of a "
            f"{w}-step window's audits on the GIFT path (target <= "
            f"{TARGET_WINDOW:.0f}x; e = the window the layer entered the GIFT "
            "path in). Probe: GIFT/Euclidean local round trip on probe "
            "steps (one rank's gradient, no error feedback).", 98):
        print("    " + line)
    print(f"  {'layer':18} {'steps on GIFT':>13} {'audits':>6}  "
          f"{'euclid':>7} {'gift':>7} {'ratio':>6}  {'worst':>6}  "
          f"{'probe':>5}")
    for r in rows:
        tag = ("  removed by the audit" if r["removed_by_audit"] else
               "" if r["at_end"] else "  left the GIFT path")
        e = "e" if r["worst_rel_window_entry"] else " "
        print(f"  {r['name']:18} {r['gift_steps']:>13} {r['audits']:>6}  "
              f"{fmt(r['euclid']):>7} {fmt(r['gift']):>7} "
              f"{fmt_ratio(r['rel_ratio'], args.target_rel if r['stays'] else 9e9):>6}"
              f"  {fmt_ratio(r['worst_rel'], TARGET_WINDOW):>5}{e}  "
              f"{fmt(r['probe_ratio'], '.2f'):>5}{tag}")
    print()
    for line in textwrap.wrap(
            "Drift: RelL2 of the running sum of the applied gradients against "
            "the FP32 one. GIFT span: the layer's longest run of whole "
            f"{w}-step windows on the GIFT path (target <= {TARGET_DRIFT}x); "
            f"{args.steps} steps: the whole run, in both runs dominated by "
            "the large early gradients, when every layer is still Euclidean "
            f"(identical runs until the first factors). Worst: the largest "
            f"ratio of a whole {w}-step window on the GIFT path (target <= "
            f"{TARGET_WINDOW:.0f}x).", 98):
        print("    " + line)
    print(f"  {'layer':18} {'GIFT span':>9}  {'euclid':>7} {'gift':>7} "
          f"{'ratio':>6}  {f'{args.steps} steps: euclid':>20} {'gift':>7} "
          f"{'ratio':>5}  {'worst':>6}")
    for r in rows:
        span = f"{r['span'][0]}-{r['span'][1]}" if r["span"] else "—"
        print(f"  {r['name']:18} {span:>9}  {fmt(r['drift_euclid']):>7} "
              f"{fmt(r['drift_gift']):>7} "
              f"{fmt_ratio(r['drift_ratio'], TARGET_DRIFT if r['stays'] else 9e9):>6}"
              f"  {fmt(r['run_drift_euclid']):>20} "
              f"{fmt(r['run_drift_gift']):>7} "
              f"{fmt(r['run_drift_ratio'], '.2f'):>5}  "
              f"{fmt_ratio(r['worst_drift'], TARGET_WINDOW):>6}")
    print()
    print(f"  whole model ({model['tensors']} tensors, {model['audits']} "
          f"audits): RelL2 per step euclid {fmt(model['rel_euclid'])}  GIFT "
          f"{fmt(model['rel_gift'])}  ({fmt(model['rel_ratio'], '.2f')}x)")
    print(f"    (layers weighted by their gradient's squared norm; "
          f"element-weighted mean {fmt(model['elem_euclid'])} vs "
          f"{fmt(model['elem_gift'])}, {fmt(model['elem_ratio'], '.2f')}x)")
    print(f"    drift over {args.steps} steps euclid "
          f"{fmt(model['drift_euclid'])}  GIFT {fmt(model['drift_gift'])}  "
          f"({fmt(model['drift_ratio'], '.2f')}x); mean over the {w}-step "
          f"windows {fmt(model['window_drift_euclid'])} vs "
          f"{fmt(model['window_drift_gift'])} "
          f"({fmt(model['window_drift_ratio'], '.2f')}x)")
    stay = [r for r in rows if r["stays"]]
    print()
    if not rows:
        print("  targets: GIFT protected no layer in this run")
    else:
        def verdict(key, label, pool):
            judged = [r for r in pool if key in r["judged"]]
            bad = [r for r in judged if key in r["miss"]]
            out = f"    {label}: {len(judged) - len(bad)}/{len(judged)} met"
            if len(judged) < len(pool):
                out += (f" ({len(pool) - len(judged)} not judged: no "
                        f"{'audit' if key == 'rel' else 'whole window'} on "
                        "the GIFT path)")
            if bad and key == "window":
                out += " — MISS " + "; ".join(window_miss(r) for r in bad)
            elif bad:
                out += " — MISS " + ", ".join(
                    f"{r['name']} {r[key + '_ratio']:.2f}x" for r in bad)
            print(out)
        print(f"  targets on the {len(stay)} layers on the GIFT path at the "
              "end of the run:")
        verdict("rel", f"per-step RelL2 <= {args.target_rel}x Euclidean", stay)
        verdict("drift", f"drift over the GIFT span <= {TARGET_DRIFT}x "
                "Euclidean", stay)
        print(f"  and on all {len(rows)} protected layers:")
        verdict("window", f"no {w}-step window worse than Euclidean", rows)
    print()
    if rm:
        print(f"  the audit removed {len(model['removed_layers'])} layer(s) "
              f"from the GIFT path ({len(rm)} removal(s)); the whole model's "
              f"audited RelL2 per step changed by "
              f"{model['removal_change']:+.5f} "
              f"({100 * model['removal_change'] / model['rel_gift']:+.2f}%; "
              "over the layer's next 3 audits, against the same with its "
              "RelL2 of its last 3 GIFT-path audits):")
        for r in rm:
            print(f"    {r['layer']} at step {r['step']}: GIFT "
                  f"{fmt(r['gift_before'])} -> Euclidean "
                  f"{fmt(r['euclid_after'])}; {r['reason']}")
    else:
        print("  the audit removed no layer from the GIFT path in this run "
              "(no giftd reason named an audit removal; model-wide change 0)")
    print()
    sel = [r for r in rows if r["selected"]]
    print(f"  giftd protected {len(rows)} of {len(gi[-1]['layers'])} layers "
          f"at some step ({len(sel)} at the end); its reasons at the end:")
    for r in rows:
        print(f"    {r['name']}: {r['reason']}")
        print(f"      {beta_text(r)}")
    print()
    print("  Live, while a job runs beside giftd:")
    print(f"    {args.ctl} --address {args.control} watch     "
          "# per-step telemetry")
    print(f"    {args.ctl} --address {args.control} layers    "
          "# selection, factors, audits (AUDIT/DRIFT)")
    print(f"    curl -s http://{args.metrics}/metrics | grep ^gift_layer_audit")
    print(f"  (this demo's giftd has stopped; start one with "
          f"{args.giftd_path} and run examples/train_tiny_llama.py)")
    print(f"  Figure: {out_png}")
    print(f"  Report: {args.out}/demo_report.json; logs: {args.out}/gift.jsonl,"
          f" {args.out}/giftd.log, {args.out}/gift_layers.jsonl")


def smooth(ys, k=9):
    out, acc = [], []
    for y in ys:
        acc.append(y)
        acc = acc[-k:]
        out.append(sum(acc) / len(acc))
    return out


def write_figure(path, runs, plain8, rows, windows, args):
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    (ref, _), (eu, es), (gi, gs) = runs
    fig, ax = plt.subplots(2, 2, figsize=(15, 9))
    ax = ax.ravel()
    labels = run_labels(args.format)
    for log, label, color in ((ref, "FP32 DDP", "black"),
                              (plain8[0], "Euclidean FP8", "tab:grey"),
                              (eu, labels["euclid"][1], "tab:blue"),
                              (gi, labels["gift"][1], "tab:red")):
        xs = [r["step"] for r in log]
        ax[0].plot(xs, [r["loss"] for r in log], color=color, alpha=0.15)
        ax[0].plot(xs, smooth([r["loss"] for r in log]), color=color,
                   label=label)
    ax[0].set(title="training loss (the four runs)", xlabel="step",
              ylabel="cross-entropy")
    ax[0].legend()
    shown = sorted(rows, key=lambda r: -r["gift_steps"])[:8]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    eu_aud, gi_aud = audits(eu), audits(gi)
    eu_spans, gi_spans = spans_of(es), spans_of(gs)
    for i, r in enumerate(shown):
        c, n = colors[i % len(colors)], r["name"]
        es_ = [s for s in sorted(eu_aud) if n in eu_aud[s]]
        ax[1].plot(es_, [eu_aud[s][n]["rel_l2"] for s in es_], "--",
                   color=c, lw=1)
        gs_ = [s for s in sorted(gi_aud) if n in gi_aud[s]]
        ax[1].plot(gs_, [gi_aud[s][n]["rel_l2"] for s in gs_], "-", color=c,
                   lw=1, label=n)
        on = [s for s in gs_ if gi_aud[s][n]["path"] == "gift"]
        ax[1].plot(on, [gi_aud[s][n]["rel_l2"] for s in on], "o", color=c,
                   ms=3)
        both = [s for s in on if s in eu_aud and n in eu_aud[s]]
        ax[2].plot(both, [gi_aud[s][n]["rel_l2"] / eu_aud[s][n]["rel_l2"]
                          for s in both], "-o", color=c, ms=3, label=n)
        ws = [w for w in windows if w in gi_spans and w in eu_spans]
        xs = [(a + b) / 2 for a, b in ws]
        ax[3].plot(xs, [eu_spans[w]["layers"][n] for w in ws], "--",
                   color=c, lw=1)
        ax[3].plot(xs, [gi_spans[w]["layers"][n] for w in ws], "-o",
                   color=c, ms=3, label=n)
    ax[1].set(title=f"audited RelL2 per step (every {args.audit_interval} "
              "steps; dashed: Euclidean run, solid: GIFT run, dots: on the "
              "GIFT path)", xlabel="step")
    ax[1].title.set_fontsize(9)
    ax[1].legend(fontsize=7)
    ax[2].axhline(1, color="grey", lw=0.5)
    ax[2].axhline(args.target_rel, color="tab:green", lw=0.8, ls=":",
                  label=f"target {args.target_rel}")
    ax[2].set(title="audited RelL2, GIFT / Euclidean (steps on the GIFT "
              "path)", xlabel="step", ylim=(0, None))
    ax[2].legend(fontsize=7)
    ax[3].set_yscale("log")
    ax[3].set(title=f"drift per {args.window}-step window (dashed: "
              "Euclidean run, solid: GIFT run)", xlabel="step (window centre)")
    ax[3].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def jsonable(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x


def train_all(args, env, pkg):
    """The four runs (the first three cached); their files and giftd's
    state at the end."""
    model = ["--ffn", str(args.ffn)]
    quantized = model + ["--audit-interval", str(args.audit_interval),
                         "--drift-window", str(args.window)]
    run_dir = tempfile.mkdtemp(prefix="gift-demo-")
    daemon = poller = None
    try:
        ref = cached_run(args, "reference", env, model, n=1)
        # No giftd: a socket nobody serves (not a daemon of someone else's).
        none = ["--agent-socket", os.path.join(run_dir, "none.sock")]
        e8 = cached_run(
            args, "euclid8", env,
            quantized + ["--format", "e4m3", "--error-feedback", "off"],
            package=os.path.join(pkg, "gift"), n=2, unkeyed=none)
        eu = cached_run(
            args, "euclid", env,
            quantized + ["--format", args.format, "--error-feedback", "on"],
            package=os.path.join(pkg, "gift"), n=3, unkeyed=none)
        if args.report_only:
            return ref, e8, eu
        daemon = Giftd(args.giftd_path, args.ctl, run_dir,
                       [f"--audit-interval={args.audit_interval}",
                        "--beta=auto", *args.giftd_flag])
        moved = (f" (default {' and '.join(daemon.moved)} busy: moved)"
                 if daemon.moved else "")
        print(f"demo: [4/4] GIFT {args.format} run beside giftd (default "
              f"configuration, audit interval {args.audit_interval}, beta "
              f"auto{''.join(', ' + f for f in args.giftd_flag)}): control "
              f"{daemon.control}, metrics http://{daemon.metrics}/metrics"
              f"{moved}", flush=True)
        poller = LayerPoller(daemon)
        log, summary = gift_files(args)
        run_training(args, "gift", log, summary, env,
                     quantized + ["--format", args.format, "--agent-socket",
                                  daemon.socket, "--job-id", "tiny-llama-demo",
                                  "--label", run_labels(args.format)["gift"][1]])
        poller.stop()
        state = {"control": daemon.control, "metrics": daemon.metrics,
                 "flags": list(args.giftd_flag),
                 "status": daemon.giftctl("status"),
                 "layers": daemon.giftctl("layers").get("layers", []),
                 "scraped": sum(1 for line in daemon.scrape().splitlines()
                                if line.startswith("gift_")),
                 "poll_errors": poller.errors}
    finally:
        if poller is not None:
            poller.stop()
        if daemon is not None:
            daemon.stop()
            shutil.copy(daemon.log_path, os.path.join(args.out, "giftd.log"))
        shutil.rmtree(run_dir, ignore_errors=True)
    with open(os.path.join(args.out, "gift_layers.jsonl"), "w") as f:
        for c in poller.changes:
            f.write(json.dumps(c) + "\n")
    with open(os.path.join(args.out, "giftd_state.json"), "w") as f:
        json.dump(state, f, indent=1)
    return ref, e8, eu


def gift_files(args):
    return (os.path.join(args.out, "gift.jsonl"),
            os.path.join(args.out, "gift.json"))


def main():
    args = parse_args()
    build = os.path.abspath(args.build)
    args.out = os.path.abspath(args.out or os.path.join(build, "demo"))
    os.makedirs(args.out, exist_ok=True)
    args.giftd_path = os.path.join(build, "daemon", "giftd")
    args.ctl = os.path.join(build, "tools", "giftctl", "giftctl")
    pkg = os.path.join(build, "python")
    for f in (args.giftd_path, args.ctl, os.path.join(pkg, "gift")):
        if not os.path.exists(f):
            sys.exit(f"demo: {f} is missing: build first (make build)")
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(
                   [pkg, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    args.target_rel = TARGET_REL[args.format]
    started = time.monotonic()
    (ref_log, ref_sum), (e8_log, e8_sum), (eu_log, eu_sum) = train_all(
        args, env, pkg)
    gift_log, gift_sum = gift_files(args)
    with open(os.path.join(args.out, "giftd_state.json")) as f:
        state = json.load(f)
    with open(os.path.join(args.out, "gift_layers.jsonl")) as f:
        changes = [json.loads(line) for line in f if line.strip()]
    args.control, args.metrics = state["control"], state["metrics"]

    print("demo: analysing", flush=True)
    runs = [(read_log(p), json.load(open(s))) for p, s in
            ((ref_log, ref_sum), (eu_log, eu_sum), (gift_log, gift_sum))]
    (ref, rs), (eu, es), (gi, gs) = runs
    plain8 = (read_log(e8_log), json.load(open(e8_sum)))
    rows, model, rm, cost, windows = analyse(args, ref, eu, gi, rs, es, gs,
                                             state["layers"], changes)
    png = os.path.join(args.out, "gift_demo.png")
    write_figure(png, runs, plain8, rows, windows, args)
    status = state["status"]
    daemon_info = {"refreshes": int(status.get("refreshes", 0)),
                   "plan_epoch": int(status.get("plan_epoch", 0)),
                   "refresh_interval": status.get("refresh_interval", 0),
                   "rank": status.get("rank", 0),
                   "audit_interval": status.get("audit_interval",
                                                args.audit_interval),
                   "flags": state.get("flags", [])}
    every = {"ddp": runs[0], "euclid8": plain8, "euclid": runs[1],
             "gift": runs[2]}
    head = headline(args, every)
    with open(os.path.join(args.out, "demo_report.json"), "w") as f:
        json.dump(jsonable({
            "steps": args.steps, "nproc": args.nproc, "format": args.format,
            "ffn": args.ffn, "headline": head,
            "audit_interval": args.audit_interval, "window": args.window,
            "loss_last": {m: mean([r["loss"] for r in log[-25:]])
                          for m, (log, _) in every.items()},
            "val_loss": {m: s["val_loss"] for m, (_, s) in every.items()},
            "bytes_vs_fp32": {m: bytes_line(s)[1] for m, (_, s) in
                              every.items() if m != "ddp"},
            "layers": rows, "model": model, "removals": rm, "cost": cost,
            "daemon": daemon_info, "poll_errors": state["poll_errors"]}), f,
            indent=1)
    print_summary(args, runs, plain8, rows, model, rm, cost, daemon_info,
                  head, png)
    print(f"  giftd served {state['scraped']} gift_* metric samples at the "
          f"end; demo took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()

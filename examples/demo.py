#!/usr/bin/env python3
"""`make demo`: the tiny Llama on 4 CPU ranks with giftd beside them.

Starts giftd (its default configuration; other ports when the default ones
are taken), trains examples/train_tiny_llama.py in GIFT mode, compares it
with the FP32 PyTorch DDP run of the same model and data (run once and
cached under --out, keyed by every setting that changes it), prints a
summary — loss vs FP32, bytes vs FP32, per-layer FP8 error and measured
gain, which layers giftd protected and why, where to look live — and writes
a PNG figure. Everything it starts is stopped when it ends, also on Ctrl-C
or an error.

    python3 examples/demo.py --build build [--steps 250] [--nproc 4]
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "train_tiny_llama.py")
DEFAULT_CONTROL = "127.0.0.1:50151"
DEFAULT_METRICS = "127.0.0.1:9464"


def parse_args():
    p = argparse.ArgumentParser(description="GIFT demo (make demo)")
    p.add_argument("--build", default="build", help="CMake build directory")
    p.add_argument("--out", default=None, help="default: BUILD/demo")
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--fresh-reference", action="store_true",
                   help="rerun the FP32 reference even when cached")
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
    """giftd in the background with its defaults; stopped by stop()."""

    def __init__(self, exe, ctl, run_dir):
        self.ctl = ctl
        self.socket = "/tmp/gift/agent.sock"
        self.control = DEFAULT_CONTROL
        self.metrics = DEFAULT_METRICS
        self.moved = []
        if os.path.exists(self.socket) or not port_free(self.control):
            self.socket = os.path.join(run_dir, "agent.sock")
            self.control = free_address()
            self.moved.append("agent socket and control port")
        if not port_free(self.metrics):
            self.metrics = free_address()
            self.moved.append("metrics port")
        os.makedirs(os.path.dirname(self.socket), exist_ok=True)
        self.log_path = os.path.join(run_dir, "giftd.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [exe, f"--agent-socket={self.socket}",
             f"--control-address={self.control}",
             f"--metrics-address={self.metrics}"],
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


def run_training(args, mode, log, summary, env, extra=()):
    cmd = [sys.executable, TRAIN, "--mode", mode, "--nproc", str(args.nproc),
           "--steps", str(args.steps), "--log", log, "--summary", summary,
           "--label", {"ddp": "FP32 DDP (reference)", "gift": "GIFT"}[mode],
           *extra]
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


def reference_key(args):
    """What the FP32 run depends on: the settings and the example's code."""
    h = hashlib.sha256()
    h.update(json.dumps([args.nproc, args.steps]).encode())
    for name in ("train_tiny_llama.py", "tiny_llama.py"):
        h.update(open(os.path.join(HERE, name), "rb").read())
    return h.hexdigest()[:16]


def mean(xs):
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else float("nan")


def layer_rows(gift_log, daemon_layers):
    """Per layer: steps on GIFT, probe RelL2 of both paths, gain, reason."""
    names = list(gift_log[-1].get("layers", {}))
    by_name = {l["name"]: l for l in daemon_layers}
    tail = gift_log[len(gift_log) // 2:]
    rows = []
    for name in names:
        recs = [r["layers"][name] for r in gift_log if name in r["layers"]]
        late = [r["layers"][name] for r in tail if name in r["layers"]]
        probes = [x for x in late if "probe_euclid" in x]
        eu = mean([x["probe_euclid"] for x in probes]) if probes else mean(
            [x["rel_l2"] for x in late if x["path"] == "euclid"])
        gi = mean([x["probe_gift"] for x in probes])
        d = by_name.get(name, {})
        hits = sum(x["upper"] + x["lower"] for x in late)
        n = sum(x["n"] for x in late)
        rows.append({
            "name": name,
            "gift_steps": sum(1 for x in recs if x["path"] == "gift"),
            "path": recs[-1]["path"],
            "euclid": eu, "gift": gi,
            "gain": 1 - gi / eu if probes and eu > 0 else float("nan"),
            "hits": hits / n if n else 0.0,
            "version": int(d.get("factor_version", -1)),  # int64: a string
            "refreshes": int(d.get("refreshes", 0)),
            "reason": d.get("reason", ""),
            "selected": bool(d.get("selected", False)),
        })
    return rows


def fmt(x, spec=".4f"):
    return "—" if not math.isfinite(x) else format(x, spec)


def print_summary(args, ref, ref_sum, gift, gift_sum, rows, daemon, out_png):
    w = args.nproc
    k = max(1, args.steps // 10)
    lr, lg = mean([r["loss"] for r in ref[-k:]]), mean(
        [r["loss"] for r in gift[-k:]])
    g = gift_sum["gift"]
    sent = g["bytes_euclid"] + g["bytes_gift"] + g["bytes_control"]
    fp32 = g["bytes_fp32_equivalent"]
    cfg = gift_sum["config"]
    print()
    print(f"== GIFT demo: tiny Llama ({gift_sum['parameters'] / 1e6:.2f} M "
          f"parameters, {cfg['layers']} blocks, d={cfg['dim']}) on {w} CPU "
          f"ranks, {args.steps} steps ==")
    print(f"  training loss, mean of the last {k} steps:  FP32 DDP "
          f"{lr:.4f}   GIFT {lg:.4f}   ({100 * (lg - lr) / lr:+.2f}%)")
    print(f"  held-out loss at the end:               FP32 DDP "
          f"{ref_sum['val_loss']:.4f}   GIFT {gift_sum['val_loss']:.4f}   "
          f"({100 * (gift_sum['val_loss'] - ref_sum['val_loss']) / ref_sum['val_loss']:+.2f}%)")
    print(f"  gradient bytes sent per rank per step:  FP32 "
          f"{fp32 / g['steps'] / 1e6:.2f} MB   GIFT {sent / g['steps'] / 1e6:.2f}"
          f" MB   ({100 * sent / fp32:.1f}% of FP32)")
    print(f"  giftd: {daemon['refreshes']} factor refreshes, plan epoch "
          f"{daemon['plan_epoch']}, refresh interval K = "
          f"{daemon['refresh_interval']} steps, rank r = {daemon['rank']}")
    print()
    print("  per-layer FP8 round-trip error (RelL2, second half of the run; "
          "probe steps where the layer had a factor), gain = 1 − gift/euclid")
    print(f"  {'layer':18} {'path':6} {'GIFT steps':>10} {'hits':>7} "
          f"{'euclid':>8} {'gift':>8} {'gain':>6} {'factor':>6}")
    for r in rows:
        print(f"  {r['name']:18} {r['path']:6} {r['gift_steps']:>10} "
              f"{100 * r['hits']:>6.2f}% {fmt(r['euclid']):>8} "
              f"{fmt(r['gift']):>8} {fmt(r['gain'], '+.2f'):>6} "
              f"{('v' + str(r['version'])) if r['version'] >= 0 else '—':>6}")
    sel = [r for r in rows if r["selected"]]
    print()
    if sel:
        print(f"  giftd protected {len(sel)} of {len(rows)} layers "
              "(hits = FP8 boundary hits per element; the selector ranks by "
              "them, then keeps a layer only while whitening measurably "
              "helps):")
        for r in sel:
            print(f"    {r['name']}: {r['reason']}")
    else:
        print("  giftd protected no layer in this run:")
    others = [r for r in rows if not r["selected"] and r["reason"]]
    for r in sorted(others, key=lambda r: -r["hits"])[:4]:
        print(f"    {r['name']}: {r['reason']}")
    print()
    print("  Live, while a job runs beside giftd:")
    print(f"    {args.ctl} --address {args.control} watch     "
          "# per-step telemetry")
    print(f"    {args.ctl} --address {args.control} layers    "
          "# selection and factors")
    print(f"    curl -s http://{args.metrics}/metrics | grep ^gift_")
    print(f"  (this demo's giftd has stopped; start one with "
          f"{args.giftd_path} and run examples/train_tiny_llama.py)")
    print(f"  Figure: {out_png}")
    print(f"  Logs:   {args.out}/gift.jsonl, {args.out}/giftd.log")


def smooth(ys, k=9):
    out, acc = [], []
    for y in ys:
        acc.append(y)
        acc = acc[-k:]
        out.append(sum(acc) / len(acc))
    return out


def write_figure(path, ref, gift, rows):
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    fig, ax = plt.subplots(1, 3, figsize=(16, 4.6))
    for log, label, color in ((ref, "FP32 DDP", "black"),
                              (gift, "GIFT (FP8)", "tab:red")):
        xs = [r["step"] for r in log]
        ax[0].plot(xs, [r["loss"] for r in log], color=color, alpha=0.2)
        ax[0].plot(xs, smooth([r["loss"] for r in log]), color=color,
                   label=label)
    ax[0].set(title="training loss", xlabel="step", ylabel="cross-entropy")
    ax[0].legend()
    shown = [r for r in rows if r["selected"]] or sorted(
        rows, key=lambda r: -r["hits"])[:3]
    shown = shown[:8]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, r in enumerate(shown):
        c = colors[i % len(colors)]
        pts = [(g["step"], g["layers"][r["name"]]) for g in gift
               if "probe_euclid" in g["layers"].get(r["name"], {})]
        if not pts:
            pts = [(g["step"], g["layers"][r["name"]]) for g in gift
                   if r["name"] in g["layers"]]
            ax[1].plot([s for s, _ in pts], [x["rel_l2"] for _, x in pts],
                       color=c, label=f"{r['name']} (path's RelL2)")
            continue
        xs = [s for s, _ in pts]
        ax[1].plot(xs, [x["probe_euclid"] for _, x in pts], "--", color=c)
        ax[1].plot(xs, [x["probe_gift"] for _, x in pts], "-", color=c,
                   label=r["name"])
        ax[2].plot(xs, [1 - x["probe_gift"] / x["probe_euclid"]
                        for _, x in pts], "-o", ms=3, color=c,
                   label=r["name"])
    ax[1].set(title="FP8 RelL2 per layer (dashed: Euclidean, solid: GIFT)",
              xlabel="step")
    ax[1].legend(fontsize=7)
    ax[2].axhline(0, color="grey", lw=0.5)
    ax[2].set(title="measured gain 1 − gift/euclid (probe steps)",
              xlabel="step")
    ax[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
    started = time.monotonic()

    key = reference_key(args)
    ref_log = os.path.join(args.out, f"reference-{key}.jsonl")
    ref_sum = os.path.join(args.out, f"reference-{key}.json")
    if args.fresh_reference or not os.path.exists(ref_sum):
        print(f"demo: FP32 reference run (PyTorch DDP, {args.nproc} ranks, "
              f"{args.steps} steps; cached in {ref_sum})", flush=True)
        run_training(args, "ddp", ref_log + ".tmp", ref_sum + ".tmp", env)
        os.replace(ref_log + ".tmp", ref_log)
        os.replace(ref_sum + ".tmp", ref_sum)
    else:
        print(f"demo: FP32 reference from {ref_sum} (--fresh-reference "
              "reruns it)")

    run_dir = tempfile.mkdtemp(prefix="gift-demo-")
    daemon = None
    try:
        daemon = Giftd(args.giftd_path, args.ctl, run_dir)
        args.control, args.metrics = daemon.control, daemon.metrics
        moved = (f" (default {' and '.join(daemon.moved)} busy: moved)"
                 if daemon.moved else "")
        print(f"demo: giftd started with its default configuration: control "
              f"{daemon.control}, metrics http://{daemon.metrics}/metrics"
              f"{moved}", flush=True)
        gift_log = os.path.join(args.out, "gift.jsonl")
        gift_sum = os.path.join(args.out, "gift.json")
        run_training(args, "gift", gift_log, gift_sum, env,
                     ["--agent-socket", daemon.socket, "--job-id",
                      "tiny-llama-demo"])
        status = daemon.giftctl("status")
        layers = daemon.giftctl("layers").get("layers", [])
        scraped = sum(1 for line in daemon.scrape().splitlines()
                      if line.startswith("gift_"))
    finally:
        if daemon is not None:
            daemon.stop()
            shutil.copy(daemon.log_path, os.path.join(args.out, "giftd.log"))
        shutil.rmtree(run_dir, ignore_errors=True)

    ref, gift = read_log(ref_log), read_log(gift_log)
    rs, gs = json.load(open(ref_sum)), json.load(open(gift_sum))
    rows = layer_rows(gift, layers)
    png = os.path.join(args.out, "gift_demo.png")
    write_figure(png, ref, gift, rows)
    daemon_info = {"refreshes": int(status.get("refreshes", 0)),
                   "plan_epoch": int(status.get("plan_epoch", 0)),
                   "refresh_interval": status.get("refresh_interval", 0),
                   "rank": status.get("rank", 0)}
    print_summary(args, ref, rs, gift, gs, rows, daemon_info, png)
    print(f"  giftd served {scraped} gift_* metric samples at the end; "
          f"demo took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()

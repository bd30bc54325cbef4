#!/usr/bin/python3
"""How often giftd changes the plan in a real job (issue: stable selection).

Starts giftd from a build (its own agent socket, control port and shm
prefix, metrics off, so it runs beside other giftds), trains a model beside
it in GIFT mode, and counts the plan epochs giftd emitted after a warm-up
step (default 100), per 1,000 steps. Models:

  demo  the tiny Llama of `make demo` (examples/train_tiny_llama.py,
        4 ranks by default, like the demo)
  gpt   the nanoGPT-style model of bench/python/gpt_train.py run unchanged
        the way a new user would (2 ranks, its default 6 x 320 model)

    python3 bench/python/plan_stability.py --build build [--model both]
        [--steps 300] [--giftd-arg=--selection.min-gain=0.05]... [--json F]

What it reads: giftd's log line of every epoch ("plan epoch N: <moves>",
with its time) and, every --poll seconds, `giftctl status` (the slowest
rank's step, the epoch) and `giftctl layers` (selection, gain, reason per
layer). An epoch's step is the slowest rank's step when it was logged
(interpolated between polls). Printed per run: plan changes after the
warm-up step and per 1,000 steps, every change with its step, the moves and
each moved layer's reason, and the final selected layers with their gains
(plus, per layer, the share of polls after the warm-up on the GIFT path and
the mean gain then).
"""

import argparse
import bisect
import datetime
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "examples"))
import demo  # noqa: E402  (examples/demo.py: its Giftd)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEMO_TRAIN = os.path.join(ROOT, "examples", "train_tiny_llama.py")
GPT_TRAIN = os.path.join(HERE, "gpt_train.py")
EPOCH_LINE = re.compile(r"^(\S+) I plan epoch (\d+): (.*)$")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build", help="CMake build directory")
    p.add_argument("--giftd", default=None, help="default: BUILD/daemon/giftd")
    p.add_argument("--giftctl", default=None,
                   help="default: BUILD/tools/giftctl/giftctl")
    p.add_argument("--python-path", default=None,
                   help="folder holding the gift package (default: "
                   "BUILD/python)")
    p.add_argument("--model", choices=("demo", "gpt", "both"), default="both")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--after", type=int, default=100,
                   help="count plan changes after this step (default 100)")
    p.add_argument("--demo-nproc", type=int, default=4)
    p.add_argument("--gpt-nproc", type=int, default=2)
    p.add_argument("--poll", type=float, default=0.25,
                   help="seconds between giftctl polls")
    p.add_argument("--giftd-arg", action="append", default=[],
                   help="extra giftd flag (repeatable), e.g. "
                   "--giftd-arg=--selection.min-gain=0.1")
    p.add_argument("--label", default="", help="printed with every run")
    p.add_argument("--json", default=None, help="write the runs here")
    p.add_argument("--keep", default=None,
                   help="copy each run's giftd log and training output here, "
                   "and every poll (MODEL-polls.jsonl: time, step, epoch, "
                   "giftctl layers)")
    a = p.parse_args(argv)
    if a.steps <= a.after:
        p.error("--steps must exceed --after")
    return a


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_time(stamp):
    """giftd's log time (2026-11-30T10:40:01.123Z, UTC) as epoch seconds."""
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


class Giftd(demo.Giftd):
    """demo.py's giftd on private ports and prefix, and its plan epochs."""

    def __init__(self, exe, ctl, run_dir, extra):
        super().__init__(exe, ctl, run_dir, extra, private=True)

    def epochs(self):
        """[(time, epoch, moves)] from the log."""
        out = []
        with open(self.log_path) as f:
            for line in f:
                m = EPOCH_LINE.match(line.rstrip("\n"))
                if m:
                    out.append((log_time(m.group(1)), int(m.group(2)),
                                m.group(3)))
        return out


class Poller(threading.Thread):
    """giftctl status + layers every `every` seconds until stopped."""

    def __init__(self, daemon, every):
        super().__init__(daemon=True)
        self.d, self.every = daemon, every
        self.polls = []  # (time, step, epoch, {layer: status})
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            t = time.time()
            try:
                st = self.d.giftctl("status")
                ls = self.d.giftctl("layers").get("layers", [])
            except (RuntimeError, subprocess.TimeoutExpired, ValueError):
                ls = None
            if ls is not None and int(st.get("ranks_registered", 0)) > 0:
                self.polls.append((t, int(st.get("step", 0)),
                                   int(st.get("plan_epoch", 0)),
                                   {l["name"]: l for l in ls}))
            self.halt.wait(max(0.0, self.every - (time.time() - t)))


def step_at(polls, t):
    """The slowest rank's step at time t, interpolated between polls."""
    times = [p[0] for p in polls]
    i = bisect.bisect_right(times, t)
    if i == 0:
        return polls[0][1] if polls else 0
    if i == len(polls):
        return polls[-1][1]
    (t0, s0), (t1, s1) = (polls[i - 1][0], polls[i - 1][1]), (polls[i][0],
                                                              polls[i][1])
    return s0 + (s1 - s0) * (t - t0) / max(1e-9, t1 - t0)


def reason_after(polls, t, layer):
    """The layer's reason at the first poll after time t."""
    for p in polls:
        if p[0] >= t and layer in p[3]:
            return p[3][layer].get("reason", "")
    return ""


def start_training(model, a, d, run_dir, env):
    """Popen(s) of the job's ranks; stdout/stderr to files in run_dir."""
    out = open(os.path.join(run_dir, "train.out"), "w")
    if model == "demo":
        cmd = [sys.executable, DEMO_TRAIN, "--mode", "gift", "--nproc",
               str(a.demo_nproc), "--steps", str(a.steps), "--agent-socket",
               d.socket, "--job-id", "plan-stability-demo", "--progress",
               "lines", "--eval-every", "0"]
        return [subprocess.Popen(cmd, env=env, stdout=out,
                                 stderr=subprocess.STDOUT,
                                 start_new_session=True)], out
    port = free_port()
    procs = []
    for r in range(a.gpt_nproc):
        e = dict(env, RANK=str(r), WORLD_SIZE=str(a.gpt_nproc),
                 LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(a.gpt_nproc),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                 GIFT_AGENT_SOCKET=d.socket,
                 GIFT_JOB_ID="plan-stability-gpt")
        cmd = [sys.executable, GPT_TRAIN, "--mode", "gift", "--steps",
               str(a.steps), "--iface", "lo"]
        procs.append(subprocess.Popen(
            cmd, env=e, stdout=out if r == 0 else subprocess.DEVNULL,
            stderr=subprocess.STDOUT, start_new_session=True))
    return procs, out


def stop_all(procs):
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def as_float(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def run_one(model, a, paths, env):
    run_dir = tempfile.mkdtemp(prefix=f"gift-planstab-{model}-")
    d = Giftd(paths["giftd"], paths["giftctl"], run_dir, a.giftd_arg)
    poller = Poller(d, a.poll)
    procs = []
    started = time.monotonic()
    try:
        poller.start()
        procs, out = start_training(model, a, d, run_dir, env)
        rcs = [p.wait() for p in procs]
        out.close()
        poller.halt.set()
        poller.join(30)
        final_layers = d.giftctl("layers").get("layers", [])
        status = d.giftctl("status")
    finally:
        poller.halt.set()
        stop_all(procs)
        d.stop()
    seconds = time.monotonic() - started
    if any(rcs):
        tail = open(os.path.join(run_dir, "train.out")).read()[-3000:]
        raise RuntimeError(f"{model}: training exited with {rcs}:\n{tail}")
    polls = poller.polls
    changes = []
    for t, epoch, moves in d.epochs():
        step = step_at(polls, t)
        items = []
        for mv in [m.strip() for m in moves.split(",") if m.strip()]:
            layer = mv.split(" ", 1)[0]
            items.append({"move": mv, "reason": reason_after(polls, t, layer)})
        changes.append({"epoch": epoch, "step": round(step, 1),
                        "moves": items})
    late = [c for c in changes if c["step"] > a.after]
    span = a.steps - a.after
    # Per layer over the polls after the warm-up: share on the GIFT path,
    # mean gain while measured.
    per_layer = {}
    for t, step, epoch, layers in polls:
        if step <= a.after:
            continue
        for name, l in layers.items():
            s = per_layer.setdefault(name, {"polls": 0, "selected": 0,
                                            "gains": []})
            s["polls"] += 1
            s["selected"] += bool(l.get("selected"))
            g = as_float(l.get("gain"))
            if finite(g):
                s["gains"].append(g)
    final = []
    for l in final_layers:
        name = l["name"]
        s = per_layer.get(name, {"polls": 0, "selected": 0, "gains": []})
        final.append({
            "name": name, "selected": bool(l.get("selected")),
            "candidate": bool(l.get("candidate")),
            "gain": as_float(l.get("gain")),
            "vulnerability": as_float(l.get("vulnerability")),
            "reason": l.get("reason", ""),
            "selected_share": s["selected"] / s["polls"] if s["polls"] else 0,
            "mean_gain": (sum(s["gains"]) / len(s["gains"])
                          if s["gains"] else float("nan"))})
    if a.keep:
        os.makedirs(a.keep, exist_ok=True)
        for f in ("giftd.log", "train.out"):
            shutil.copy(os.path.join(run_dir, f),
                        os.path.join(a.keep, f"{model}-{f}"))
        with open(os.path.join(a.keep, f"{model}-polls.jsonl"), "w") as f:
            for t, step, epoch, layers in polls:
                f.write(json.dumps({"time": t, "step": step, "epoch": epoch,
                                    "layers": layers}) + "\n")
    shutil.rmtree(run_dir, ignore_errors=True)
    return {"model": model, "label": a.label, "steps": a.steps,
            "after": a.after, "giftd_args": a.giftd_arg,
            "seconds": round(seconds, 1),
            "final_plan_epoch": int(status.get("plan_epoch", 0)),
            "plan_changes": len(changes), "plan_changes_after": len(late),
            "per_1000_steps_after": 1000.0 * len(late) / span,
            "changes": changes, "layers": final}


def fmt(x, spec="+.3f"):
    return format(x, spec) if finite(x) else "—"


def print_run(r):
    print(f"\n== {r['model']}{' (' + r['label'] + ')' if r['label'] else ''}"
          f": {r['steps']} steps in {r['seconds']:.0f} s; giftd args "
          f"{r['giftd_args'] or 'none'} ==")
    print(f"  plan changes: {r['plan_changes']} in all, "
          f"{r['plan_changes_after']} after step {r['after']} = "
          f"{r['per_1000_steps_after']:.1f} per 1,000 steps")
    for c in r["changes"]:
        mark = "*" if c["step"] > r["after"] else " "
        print(f"  {mark} epoch {c['epoch']:>3} at step {c['step']:>6.1f}:")
        for m in c["moves"]:
            why = f"  ({m['reason']})" if m["reason"] else ""
            print(f"        {m['move']}{why}")
    sel = [l for l in r["layers"] if l["selected"]]
    print(f"  final selected layers ({len(sel)}):")
    for l in sel:
        print(f"    {l['name']:24} gain {fmt(l['gain'])}  mean gain after "
              f"step {r['after']} {fmt(l['mean_gain'])}  on GIFT "
              f"{100 * l['selected_share']:.0f}% of the time: {l['reason']}")
    gaining = [l for l in r["layers"] if not l["selected"] and
               (l["selected_share"] > 0 or (finite(l["gain"]) and
                                            l["gain"] > 0))]
    if gaining:
        print("  not selected at the end (measured or on GIFT for a while):")
        for l in gaining:
            print(f"    {l['name']:24} gain {fmt(l['gain'])}  mean gain "
                  f"{fmt(l['mean_gain'])}  on GIFT "
                  f"{100 * l['selected_share']:.0f}%: {l['reason']}")


def main(argv=None):
    a = parse_args(argv)
    build = os.path.abspath(a.build)
    paths = {"giftd": a.giftd or os.path.join(build, "daemon", "giftd"),
             "giftctl": a.giftctl or os.path.join(build, "tools", "giftctl",
                                                  "giftctl"),
             "python": a.python_path or os.path.join(build, "python")}
    for k, f in paths.items():
        if not os.path.exists(f):
            sys.exit(f"plan_stability: {f} ({k}) is missing: build first")
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(
                   [paths["python"], os.environ.get("PYTHONPATH", "")]
               ).rstrip(os.pathsep))
    models = ["demo", "gpt"] if a.model == "both" else [a.model]
    runs = []
    for m in models:
        r = run_one(m, a, paths, env)
        print_run(r)
        sys.stdout.flush()
        runs.append(r)
    print()
    for r in runs:
        print(f"plan_stability: {r['model']}: {r['plan_changes_after']} plan "
              f"changes after step {r['after']} = "
              f"{r['per_1000_steps_after']:.1f} per 1,000 steps; selected "
              + ", ".join(f"{l['name']} ({fmt(l['gain'], '+.2f')})"
                          for l in r["layers"] if l["selected"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()

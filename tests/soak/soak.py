#!/usr/bin/python3
"""Fault soak: 4 ranks train (examples/train_tiny_llama.py, gift mode,
every rank's parameters compared after every step) beside a real giftd that
is, in turn, SIGSTOPped, SIGKILLed and restarted, SIGTERMed and restarted,
while a rank's shared memory is scribbled over with garbage (shm_scribble:
telemetry, sketch-window metadata, window counters). Passes when the job
exits 0 with every step done, the parameters identical on every rank after
every step (the training script's --check-identical), every logged loss
finite, and giftd answering (giftctl health) after each fault it survives.

  soak.py --build build [--seconds 120] [--out DIR]

`make soak` runs it for 15 minutes; `make test` runs the 2-minute version
(ctest soak_short). Bounded: every process has a timeout and is killed at
the end, on errors and on Ctrl-C. Exit 0 pass, 1 fail, 2 usage.
"""

import argparse
import glob
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
STEP_SECONDS = 0.35  # about, for 4 ranks of the tiny model on 2 cores


def log(msg):
    print(f"soak: {msg}", flush=True)


class Giftd:
    def __init__(self, args, tmp):
        self.exe = os.path.join(args.build, "daemon", "giftd")
        self.ctl = os.path.join(args.build, "tools", "giftctl", "giftctl")
        self.sock = os.path.join(tmp, "agent.sock")
        self.prefix = f"/giftsoak{os.getpid()}"
        self.control = f"127.0.0.1:{args.control_port}"
        self.log_path = os.path.join(tmp, "giftd.log")
        self.proc = None
        self.starts = 0

    def start(self):
        logf = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [self.exe, f"--agent-socket={self.sock}",
             f"--control-address={self.control}", "--metrics-address=",
             f"--shm-prefix={self.prefix}", "--refresh-interval=10",
             "--poll-interval-ms=20", "--heartbeat-interval-ms=100",
             "--refresh-threads=1"],
            stdout=logf, stderr=subprocess.STDOUT)
        self.starts += 1
        self.wait_healthy(30)

    def healthy(self):
        r = subprocess.run([self.ctl, "--address", self.control, "--timeout",
                            "2", "health"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=10)
        return r.returncode == 0

    def wait_healthy(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"giftd exited with {self.proc.returncode}"
                                   f":\n{tail(self.log_path)}")
            if self.healthy():
                return
            time.sleep(0.2)
        raise RuntimeError(f"giftd not healthy after {seconds} s:\n"
                           f"{tail(self.log_path)}")

    def signal(self, sig):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self):
        if self.proc is None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def control_blocks(self):
        return sorted(glob.glob(f"/dev/shm{self.prefix}-*-ctl"))


def tail(path, n=30):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def faults(args, daemon, rng):
    """The fault schedule: (name, action) pairs, cycled."""
    scribble = os.path.join(args.build, "tests", "soak", "shm_scribble")

    def stop_cont():
        daemon.signal(signal.SIGSTOP)
        time.sleep(rng.uniform(2, 5))
        daemon.signal(signal.SIGCONT)
        daemon.wait_healthy(30)

    def kill_restart():
        daemon.signal(signal.SIGKILL)
        daemon.proc.wait(10)
        time.sleep(rng.uniform(1, 4))
        daemon.start()

    def term_restart():
        daemon.stop()
        time.sleep(rng.uniform(0.5, 2))
        daemon.start()

    def garbage():
        blocks = daemon.control_blocks()
        if not blocks:
            return "no control block yet"
        name = "/" + os.path.basename(rng.choice(blocks))
        r = subprocess.run([scribble, name, str(rng.uniform(2, 5)),
                            str(rng.randrange(1 << 30))],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=30)
        daemon.wait_healthy(30)
        return r.stdout.strip()

    return [("SIGSTOP+SIGCONT giftd", stop_cont),
            ("garbage in a rank's shm", garbage),
            ("SIGKILL giftd, restart", kill_restart),
            ("garbage in a rank's shm", garbage),
            ("SIGTERM giftd, restart", term_restart)]


def check_log(path, steps):
    losses = []
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "loss" in rec:
                losses.append(rec["loss"])
    bad = [x for x in losses if not math.isfinite(x)]
    if bad:
        return f"{len(bad)} non-finite losses"
    if len(losses) < steps:
        return f"{len(losses)} of {steps} steps logged"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--gap", type=float, default=6, help="s between faults")
    ap.add_argument("--control-port", type=int, default=0,
                    help="giftd Control port (default: a free one)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.control_port == 0:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            args.control_port = s.getsockname()[1]
    rng = random.Random(args.seed)
    steps = max(20, int(args.seconds / STEP_SECONDS))
    tmp = args.out or tempfile.mkdtemp(prefix="gift-soak-")
    os.makedirs(tmp, exist_ok=True)
    daemon = Giftd(args, tmp)
    train = None
    failures = []
    done = []
    try:
        daemon.start()
        env = dict(os.environ, GIFT_AGENT_SOCKET=daemon.sock,
                   PYTHONPATH=os.pathsep.join(
                       [os.path.join(args.build, "python"),
                        os.path.join(ROOT, "examples")]),
                   OMP_NUM_THREADS="1")
        train_log = os.path.join(tmp, "train.jsonl")
        out = open(os.path.join(tmp, "train.out"), "w")
        train = subprocess.Popen(
            [PYTHON, os.path.join(ROOT, "examples", "train_tiny_llama.py"),
             "--nproc", "4", "--mode", "gift", "--steps", str(steps),
             "--check-identical", "--log", train_log, "--progress", "lines",
             "--eval-every", "0", "--agent-socket", daemon.sock],
            env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
        log(f"{steps} steps on 4 ranks, faults every {args.gap:.0f} s "
            f"(logs in {tmp})")
        schedule = faults(args, daemon, rng)
        deadline = time.monotonic() + args.seconds * 3 + 120
        k = 0
        time.sleep(args.gap)
        while train.poll() is None:
            if time.monotonic() > deadline:
                failures.append("training did not finish in time")
                break
            name, action = schedule[k % len(schedule)]
            k += 1
            try:
                note = action()
                done.append(name)
                log(f"fault {k}: {name}" + (f" ({note})" if note else ""))
            except Exception as e:  # noqa: BLE001 -- the daemon failed
                failures.append(f"{name}: {e}")
                break
            wait_until = time.monotonic() + args.gap
            while train.poll() is None and time.monotonic() < wait_until:
                time.sleep(0.2)
        code = train.wait(timeout=max(1, deadline - time.monotonic()))
        if code != 0:
            failures.append(f"training exited {code}:\n"
                            f"{tail(os.path.join(tmp, 'train.out'))}")
        else:
            bad = check_log(train_log, steps)
            if bad:
                failures.append(bad)
        if daemon.proc.poll() is not None:
            failures.append(f"giftd exited {daemon.proc.returncode}")
    except Exception as e:  # noqa: BLE001
        failures.append(str(e))
    finally:
        if train is not None and train.poll() is None:
            os.killpg(train.pid, signal.SIGKILL)
            train.wait(10)
        daemon.stop()
    log(f"{len(done)} faults ({', '.join(sorted(set(done)))}), "
        f"giftd started {daemon.starts} times")
    if failures:
        for f in failures:
            log(f"FAIL: {f}")
        log(f"giftd log tail:\n{tail(daemon.log_path)}")
        print("soak: 0 passed, 1 failed")
        return 1
    needed = {"SIGSTOP+SIGCONT giftd", "garbage in a rank's shm",
              "SIGKILL giftd, restart"}
    if not needed <= set(done):
        log(f"FAIL: the run ended before every fault ran "
            f"({sorted(needed - set(done))} missing)")
        print("soak: 0 passed, 1 failed")
        return 1
    with open(daemon.log_path, errors="replace") as f:
        text = f.read()
    seen = text.count("dropped what it wrote") + text.count("was malformed")
    if seen == 0:
        log("FAIL: giftd never reported the garbage (did shm_scribble write "
            "where the rank writes?)")
        print("soak: 0 passed, 1 failed")
        return 1
    log(f"giftd dropped or disconnected garbage {seen} times")
    log(f"pass: {steps} steps, parameters identical on every rank after "
        f"every step, every loss finite")
    print("soak: 1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

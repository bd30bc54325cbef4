#!/usr/bin/python3
"""Multi-host DDP benchmark (issue 12): a small GPT (gpt_train.py) on W
ranks, each in a network namespace of its own behind a rate-limited veth
(scripts/netns.sh: a "host" per rank, egress shaped like a NIC), with
PyTorch's plain FP32 DDP, its fp16 and PowerSGD hooks, and gift's FP8 hook
(euclid, and gift with one giftd per host).

For every egress rate (--rates, default 100mbit,1gbit,none) it makes the
namespaces once and runs the modes one after another on the same steps and
batches, --rounds times in turn (ddp, fp16, ..., gift, ddp, fp16, ...), so
that a slow moment of this shared machine spreads over all of them. Each
run is a torchrun-style job: RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR
(rank 0's address, 10.77.0.1) / MASTER_PORT set for `netns.sh exec R
gpt_train.py` (--launcher torchrun: one `torchrun --nnodes W --node_rank R`
per namespace instead), with GLOO_SOCKET_IFNAME=eth0.

gift mode: one giftd per namespace (per "host"), each with its own agent
socket (GIFT_AGENT_SOCKET of its rank), control on the namespace's
loopback, and the daemons peered into one job (DESIGN §4): job id, token
file, Peer service on 10.77.0.<r+1>:29152, leader rank 0's daemon
(GIFT_JOB_ID of every rank names the job). One standalone giftd per rank
would be W one-rank jobs of a W-rank allreduce: not a valid setup. giftd's
selector needs far more steps than these runs have to pick layers on its
own (measured gain on probe steps), so the layers matching --gift-pin (the
MLP output projections, the paper's fc2) are pinned with giftctl on the
leader once the ranks have declared them; with K = 4 their first factors
arrive within the warm-up and the timed steps whiten them (the table says
how many layers rank 0 whitened per timed step).

Reported per rate and mode: s/step (median over the timed steps of every
round; a step lasts as long as its slowest rank), the ratios to DDP FP32
and to the fp16 hook, the bytes a rank sent on its interface per step
(tx_bytes of eth0 over the timed steps: mode-agnostic, and on gift runs it
includes the giftd Peer traffic, which is also measured from the daemons'
TCP sockets and shown apart, and by message kind from each daemon's
gift_peer_bytes_total on its /metrics, 127.0.0.1:29153 in its namespace),
gift's own payload count (state.stats()),
the final loss, and the time to loss: the wall time (every step's slowest
rank, warm-up included) until the mode's loss, a trailing --ttl-window
mean of the ranks' mean, first reaches DDP FP32's at its last step
(interpolated within the crossing step; "not reached" with the final
excess when it does not). The modes see the same batches, so the losses
are paired; they separate only in long runs (--steps). The machine load
before each run goes into the JSON: do not publish figures taken while
builds ran.

Bounded: every subprocess has a timeout; a job whose rank fails is killed
after a grace period; the namespaces and daemons are removed at the end, on
Ctrl-C and on errors.

Usage: /usr/bin/python3 bench/python/multihost_bench.py --build BUILD
       [--rates 100mbit,1gbit,none] [--modes ddp,fp16,powersgd,euclid,gift]
       (powersgd@R: PowerSGD rank R, default 4)
       (a gift mode as MODE@MB, e.g. euclid@0 or gift@8: gift.init's
       piece_mb, side by side with the default; @0 = DDP's buckets whole;
       and/or MODE:FORMAT, e.g. gift:nvfp4: gift.init's wire format)
       [--steps 10] [--warmup 5] [--rounds 2] [--out DIR]
Writes DIR/multihost_bench.md and DIR/multihost_bench.json (DIR default
BUILD/bench-results). The defaults (3 rates x 5 modes x 2 rounds of 10
steps) take about 10 minutes on the 2-core machine; --rounds, --steps and
--warmup give more.
"""

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NETNS = os.path.join(ROOT, "scripts", "netns.sh")
GPT = os.path.join(HERE, "gpt_train.py")
PYTHON = "/usr/bin/python3"

MODES = ("ddp", "fp16", "powersgd", "euclid", "gift")
LABELS = {"ddp": "DDP FP32 (no hook)", "fp16": "torch fp16_compress_hook",
          "powersgd": "torch PowerSGD rank 4", "euclid": "gift euclid (FP8)",
          "gift": "gift gift (FP8 + giftd/host)"}


FORMATS = ("e4m3", "e5m2", "nvfp4", "mxfp4")


def split_mode(mode):
    """("euclid", "8") for "euclid@8": a gift mode with gift.init's
    piece_mb (gpt_train.py --gift-piece-mb; @0 = DDP's buckets whole, as
    before the pieces), side by side with the default; (mode, None) else.
    A gift mode may end in :FORMAT (gift.init's format, gpt_train.py
    --gift-format), e.g. gift:nvfp4 or euclid@0:mxfp4: see mode_format;
    and a gift or euclid mode in ~NAME, the flags of --variant NAME
    (variant; giftd's, or gpt_train.py's where rank:ARG)."""
    base, _, piece = variant(mode)[0].partition(":")[0].partition("@")
    return base, (piece or None)


def mode_format(mode):
    """"nvfp4" for "gift:nvfp4"; None (gift's default, e4m3) without one."""
    return variant(mode)[0].partition(":")[2] or None


def variant(mode):
    """("gift:nvfp4", "dense") for "gift:nvfp4~dense"; (mode, None) else."""
    rest, _, name = mode.partition("~")
    return rest, (name or None)


def variant_flags(a, mode, rank=False):
    """mode's --variant flags: giftd's, or (rank) gpt_train.py's, the
    rank:ARG ones without their prefix."""
    flags = a.variants.get(variant(mode)[1], [])
    if rank:
        return [f[len("rank:"):] for f in flags if f.startswith("rank:")]
    return [f for f in flags if not f.startswith("rank:")]


def label(mode):
    base, piece = split_mode(mode)
    text = LABELS[base]
    fmt = mode_format(mode)
    if fmt is not None:
        text = text.replace("FP8", fmt.upper())
    if base == "powersgd":
        return text if piece is None else f"torch PowerSGD rank {piece}"
    if variant(mode)[1] is not None:
        text += f" ~{variant(mode)[1]}"
    if piece is None:
        return text
    return text + (", DDP's buckets whole (piece_mb=0)"
                   if float(piece) == 0 else f", piece_mb={piece}")


# Below the kernel's ephemeral range (32768-60999 by default): a port in it
# can still be held, in the same namespace, by an outgoing connection of an
# earlier job's ranks (TIME_WAIT or closing), and giftd would then fail to
# listen ("Address already in use"; python_multihost failed so once).
CONTROL = "127.0.0.1:29151"  # every namespace has a loopback of its own
PEER_PORT = 29152
METRICS_PORT = 29153  # giftd's Prometheus endpoint, per namespace


def addr(rank):
    return f"10.77.0.{rank + 1}"


def sh(argv, timeout, check=True):
    """Runs argv with a deadline; returns its CompletedProcess."""
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: "
                           f"{r.stdout.strip()[-500:]}")
    return r


def kill_group(proc, sig=signal.SIGKILL):
    """Signals the session `proc` leads (we started it with its own)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass


def tail(path, n=25):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


# ------------------------------------------------------------ namespaces ---
class Namespaces:
    """W rank namespaces PREFIX-r<i> (scripts/netns.sh) at one egress rate."""

    def __init__(self, prefix, world):
        self.prefix = prefix
        self.world = world
        self.live = False

    def up(self, rate):
        self.down()
        sh([NETNS, "up", "-p", self.prefix, "-w", str(self.world), "-r", rate],
           timeout=60)
        self.live = True

    def down(self):
        sh([NETNS, "down", "-p", self.prefix], timeout=60, check=False)
        self.live = False

    def cmd(self, rank, argv):
        return [NETNS, "exec", "-p", self.prefix, str(rank)] + list(argv)


# ----------------------------------------------------------------- giftd ---
class Giftds:
    """One giftd per namespace, peered into one job led by rank 0's."""

    def __init__(self, ns, exe, ctl, tmp, job, flags, timeout):
        self.ns, self.ctl, self.procs, self.logs = ns, ctl, [], []
        self.timed_interval = 0  # K for the timed steps (0: keep)
        self.socks = [os.path.join(tmp, f"giftd{r}", "agent.sock")
                      for r in range(ns.world)]
        token = os.path.join(tmp, "job.token")
        fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(16))
        shm = f"/giftmh{os.getpid()}-{os.path.basename(tmp)}"
        try:
            for r in range(ns.world):
                d = os.path.dirname(self.socks[r])
                os.makedirs(d, exist_ok=True)
                cmd = [exe, f"--node=host{r}", f"--agent-socket={self.socks[r]}",
                       f"--control-address={CONTROL}",
                       f"--metrics-address=127.0.0.1:{METRICS_PORT}",
                       f"--shm-prefix={shm}-r{r}x", f"--job-id={job}",
                       f"--peer-address={addr(r)}:{PEER_PORT}",
                       f"--leader-address={addr(0)}:{PEER_PORT}",
                       f"--job-token-file={token}"] + list(flags)
                log = os.path.join(d, "giftd.log")
                self.logs.append(log)
                with open(log, "w") as lf:
                    self.procs.append(subprocess.Popen(
                        ns.cmd(r, cmd), stdout=lf, stderr=subprocess.STDOUT,
                        start_new_session=True))
            self.command = cmd
            self._wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self, timeout):
        deadline = time.monotonic() + timeout
        for r, p in enumerate(self.procs):
            while True:
                if p.poll() is not None:
                    raise RuntimeError(f"giftd of rank {r} exited "
                                       f"{p.returncode}:\n{tail(self.logs[r])}")
                ok = sh(self.ns.cmd(r, [self.ctl, "--address", CONTROL,
                                        "--timeout", "1", "health"]),
                        timeout=10, check=False).returncode == 0
                if ok and os.path.exists(self.socks[r]):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"giftd of rank {r} not SERVING after "
                                       f"{timeout} s:\n{tail(self.logs[r])}")
                time.sleep(0.2)

    def layers(self, rank=0):
        """giftctl --json layers of rank's daemon: the layer names, or []."""
        r = sh(self.ns.cmd(rank, [self.ctl, "--address", CONTROL, "--timeout",
                                  "2", "--json", "layers"]),
               timeout=10, check=False)
        if r.returncode != 0:
            return []
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            return []
        items = doc.get("layers", []) if isinstance(doc, dict) else doc
        return [l.get("name") for l in items
                if isinstance(l, dict) and l.get("name")]

    def pin_when_known(self, pattern, stop, timeout):
        """Pins (giftctl pin, on the leader) the layers whose names match
        `pattern` once the ranks have declared them; runs on a thread, so
        `stop` (an Event) ends it. Returns the record of what happened."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        rec = {"pattern": pattern, "pinned": [], "errors": []}
        self.pins = rec
        while not stop.is_set() and time.monotonic() < deadline:
            want = sorted(n for n in self.layers() if rx.fullmatch(n))
            if want:
                for n in want:
                    r = sh(self.ns.cmd(0, [self.ctl, "--address", CONTROL,
                                           "--timeout", "2", "pin", n]),
                           timeout=10, check=False)
                    if r.returncode == 0:
                        rec["pinned"].append(n)
                    else:
                        rec["errors"].append(f"{n}: {r.stdout.strip()[-200:]}")
                rec["after_s"] = timeout - (deadline - time.monotonic())
                if self.timed_interval and rec["pinned"]:
                    self._switch_interval(rec, stop, deadline)
                return rec
            stop.wait(0.3)
        rec["errors"].append("no layer matched before the run ended")
        return rec

    def _factor_versions(self, rank=0):
        r = sh(self.ns.cmd(rank, [self.ctl, "--address", CONTROL, "--timeout",
                                  "2", "--json", "layers"]),
               timeout=10, check=False)
        try:
            doc = json.loads(r.stdout) if r.returncode == 0 else {}
        except ValueError:
            doc = {}
        items = doc.get("layers", []) if isinstance(doc, dict) else doc
        return {l.get("name"): int(l.get("factor_version",
                                         l.get("factorVersion", -1)))
                for l in items if isinstance(l, dict)}

    def _switch_interval(self, rec, stop, deadline):
        """Once every pinned layer has a factor, K goes to the timed value
        (giftd's default 25): the short first windows only bring the
        factors; the timed steps run at production K."""
        while not stop.is_set() and time.monotonic() < deadline:
            v = self._factor_versions()
            if all(v.get(n, -1) >= 0 for n in rec["pinned"]):
                r = sh(self.ns.cmd(0, [self.ctl, "--address", CONTROL,
                                       "--timeout", "2", "set-interval",
                                       str(self.timed_interval)]),
                       timeout=10, check=False)
                rec["timed_interval"] = (self.timed_interval
                                         if r.returncode == 0 else None)
                if r.returncode != 0:
                    rec["errors"].append(f"set-interval: {r.stdout[-200:]}")
                return
            stop.wait(0.3)

    def peer_bytes(self):
        """Bytes each daemon sent on its Peer connections so far (tcp_info
        bytes_sent of the sockets to or from the Peer port), or None."""
        out = []
        for r in range(self.ns.world):
            f = f"( sport = :{PEER_PORT} or dport = :{PEER_PORT} )"
            res = sh(self.ns.cmd(r, ["ss", "-tinH", "state", "established",
                                     f]), timeout=10, check=False)
            if res.returncode != 0:
                return None
            out.append(sum(int(x) for x in
                           re.findall(r"bytes_sent:(\d+)", res.stdout)))
        return out

    def stop(self):
        for p in self.procs:
            kill_group(p, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_group(p)
                p.wait(5)

    def peer_bytes_by_kind(self):
        """Serialized Peer message bytes the daemons sent so far, summed
        over the daemons, by message kind (giftd's gift_peer_bytes_total
        {direction="sent"}, read from each one's /metrics), or None."""
        fetch = ("import sys, urllib.request; sys.stdout.write(urllib.request"
                 f".urlopen('http://127.0.0.1:{METRICS_PORT}/metrics', "
                 "timeout=5).read().decode())")
        pattern = re.compile(r'^gift_peer_bytes_total\{([^}]*)\} (\S+)$',
                             re.M)
        out = {}
        for r in range(self.ns.world):
            res = sh(self.ns.cmd(r, [sys.executable, "-c", fetch]),
                     timeout=15, check=False)
            if res.returncode != 0:
                return None
            for labels, value in pattern.findall(res.stdout):
                if 'direction="sent"' not in labels:
                    continue
                kind = re.search(r'kind="([^"]*)"', labels)
                if kind:
                    out[kind.group(1)] = out.get(kind.group(1), 0) + \
                        float(value)
        return out

    def log_tails(self, n=15):
        return {f"rank{r}": tail(l, n) for r, l in enumerate(self.logs)}


# ------------------------------------------------------------------ jobs ---
def rank_argv(a, mode, rank, port, out_json):
    base, piece = split_mode(mode)
    script = [GPT, "--mode", base, "--steps", str(a.steps),
              "--warmup", str(a.warmup), "--batch", str(a.batch),
              "--iface", "eth0", "--pg-timeout", str(a.pg_timeout)]
    if a.check_identical:
        script.append("--check-identical")
    if rank == 0:
        script += ["--json", out_json]
    else:
        script.append("--quiet")
    script += a.train_arg + variant_flags(a, mode, rank=True)
    if piece is not None:  # after --train-arg: the mode's own wins
        script += ["--powersgd-rank" if base == "powersgd"
                   else "--gift-piece-mb", piece]
    if mode_format(mode) is not None:
        script += ["--gift-format", mode_format(mode)]
    if a.launcher == "torchrun":
        # Debian's torch 1.13 torchrun needs --redirects/--tee (README).
        return [PYTHON, "-m", "torch.distributed.run", f"--nnodes={a.world}",
                f"--node_rank={rank}", "--nproc_per_node=1",
                f"--master_addr={addr(0)}", f"--master_port={port}",
                "--max_restarts=0", "--redirects", "1", "--tee", "1"] + script
    return [PYTHON] + script


def run_job(a, ns, mode, tmp, port, daemons):
    """One W-rank job; returns rank 0's JSON (plus the run's facts)."""
    out_json = os.path.join(tmp, f"{mode}.json")
    base = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                GLOO_SOCKET_IFNAME="eth0", PYTHONUNBUFFERED="1",
                # A rank that aborts prints every thread's Python stack.
                PYTHONFAULTHANDLER="1",
                PYTHONPATH=os.pathsep.join(
                    [os.path.join(a.build, "python")]
                    + [p for p in os.environ.get("PYTHONPATH", "").split(
                        os.pathsep) if p]))
    base.pop("GIFT_JOB_ID", None)
    procs, logs = [], []
    t0 = time.monotonic()
    try:
        for r in range(a.world):
            env = dict(base, WORLD_SIZE=str(a.world), MASTER_ADDR=addr(0),
                       MASTER_PORT=str(port))
            if a.launcher == "env":
                env.update(RANK=str(r), LOCAL_RANK="0", GROUP_RANK=str(r),
                           LOCAL_WORLD_SIZE="1")
            if daemons is not None:
                env.update(GIFT_AGENT_SOCKET=daemons.socks[r],
                           GIFT_JOB_ID=a.job_id)
            else:
                # No daemon here: a stray /tmp/gift/agent.sock must not count.
                env["GIFT_AGENT_SOCKET"] = os.path.join(tmp, "no-giftd.sock")
            log = os.path.join(tmp, f"{mode}.rank{r}.log")
            logs.append(log)
            with open(log, "w") as lf:
                procs.append(subprocess.Popen(
                    ns.cmd(r, rank_argv(a, mode, r, port, out_json)), env=env,
                    stdout=lf, stderr=subprocess.STDOUT, cwd=ROOT,
                    start_new_session=True))
        pinner = stop = None
        if daemons is not None and a.gift_pin:
            stop = threading.Event()
            pinner = threading.Thread(
                target=daemons.pin_when_known, daemon=True,
                args=(a.gift_pin, stop, a.timeout))
            pinner.start()
        failed = wait_ranks(procs, a.timeout, a.grace)
    finally:
        if pinner is not None:
            stop.set()
            pinner.join(15)
        for p in procs:
            kill_group(p)
            p.wait(10)
    wall = time.monotonic() - t0
    codes = [p.returncode for p in procs]
    error = None
    if failed or any(codes) or not os.path.exists(out_json):
        why = failed or f"exit codes {codes}"
        bad = next((i for i, c in enumerate(codes) if c), 0)
        error = f"{mode}: {why}; rank {bad} log:\n{tail(logs[bad])}"
        keep_logs(a, mode, logs)
        if not os.path.exists(out_json):
            raise RuntimeError(error)
    with open(out_json) as f:
        res = json.load(f)
    if error:  # rank 0 wrote its figures, yet the job failed: keep both
        res["error"] = error
    res["wall_seconds"] = wall
    if daemons is not None and a.gift_pin:
        res["gift_pins"] = getattr(daemons, "pins", None)
    res["rank0_log"] = tail(logs[0], 200)
    return res


def keep_logs(a, mode, logs):
    """Copies a failed run's rank logs to OUT/multihost_bench_logs/."""
    d = os.path.join(a.out, "multihost_bench_logs")
    os.makedirs(d, exist_ok=True)
    stamp = time.strftime("%H%M%S")
    for i, log in enumerate(logs):
        try:
            shutil.copy(log, os.path.join(d, f"{stamp}-{mode}-rank{i}.log"))
        except OSError:
            pass


def wait_ranks(procs, timeout, grace):
    """Waits for every rank; None when all ended, else why they were cut."""
    deadline = time.monotonic() + timeout
    first_fail = None
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if first_fail is None:
            bad = [i for i, p in enumerate(procs)
                   if p.poll() is not None and p.returncode != 0]
            if bad:
                first_fail = (now, bad[0], procs[bad[0]].returncode)
        if first_fail and now > first_fail[0] + grace:
            return (f"rank {first_fail[1]} exited {first_fail[2]}; the others "
                    f"were killed {grace:.0f} s later")
        if now > deadline:
            return f"still running after {timeout:.0f} s (killed)"
        time.sleep(0.2)
    return None


# --------------------------------------------------------------- summary ---
def merge(runs):
    """One mode's rounds at one rate: pooled timed steps."""
    ok = [r for r in runs if r.get("seconds_per_step")]
    out = {"rounds": len(runs),
           "rounds_ok": len([r for r in runs if "error" not in r]),
           "errors": [r["error"] for r in runs if "error" in r]}
    if not ok:
        return out
    secs = [s for r in ok for s in r.get("seconds_per_step", [])]
    out["seconds_per_step_median"] = statistics.median(secs) if secs else None
    out["seconds_per_step_min"] = min(secs) if secs else None
    out["timed_steps"] = len(secs)
    for key in ("wire_tx_bytes_per_rank_step", "giftd_peer_bytes_per_rank_step",
                "cpu_seconds_per_rank_step", "transform_seconds_per_rank_step"):
        v = [r[key] for r in ok if r.get(key) is not None]
        out[key] = statistics.mean(v) if v else None
    by_kind = [r["giftd_peer_sent_bytes_per_rank_step_by_kind"] for r in ok
               if r.get("giftd_peer_sent_bytes_per_rank_step_by_kind")]
    if by_kind:
        out["giftd_peer_sent_bytes_per_rank_step_by_kind"] = {
            k: statistics.mean(d.get(k, 0) for d in by_kind)
            for k in sorted({k for d in by_kind for k in d})}
    g = [r["gift_bytes_per_rank_step"] for r in ok
         if r.get("gift_bytes_per_rank_step")]
    if g:
        out["gift_payload_bytes_per_rank_step"] = statistics.mean(
            x["bytes_sent"] for x in g)
    out["final_loss"] = statistics.mean(r["loss"][-1] for r in ok)
    out["parameters"] = ok[0]["parameters"]
    out["fp32_ring_bytes_per_step"] = ok[0]["fp32_ring_bytes_per_step"]
    out["identical"] = all(r.get("identical", True) for r in ok)
    # Layers rank 0 whitened per timed step (gift: pinned ones once their
    # first factor arrived).
    whitened = [len(st["gift_path"]) for r in ok
                for st in r["ranks"][0]["steps"]
                if "gift_path" in st and st["step"] >= r["warmup"]]
    if whitened:
        out["gift_path_layers_mean_timed"] = statistics.mean(whitened)
    phases = phase_medians(ok)
    if phases:
        out["phase_seconds_median"] = phases
    layers = [l for r in ok for rk in r.get("ranks", [])
              for l in rk.get("gift_path_layers", [])]
    if any("gift_path_layers" in rk for r in ok for rk in r.get("ranks", [])):
        out["gift_path_layers"] = sorted(set(layers))
    return out


def phase_medians(runs):
    """Where the step goes: per timed step the slowest rank's forward pass,
    its backward pass with the wait for every bucket's result, and the rest
    (gradient clipping, the optimizer step); medians over the pooled timed
    steps of `runs`. None without gpt_train's phase times."""
    parts = {"forward": [], "backward": [], "rest": []}
    for r in runs:
        ranks = r.get("ranks") or []
        n = min((len(rk["steps"]) for rk in ranks), default=0)
        for i in range(r.get("warmup", 0), n):
            st = max((rk["steps"][i] for rk in ranks),
                     key=lambda x: x["seconds"])
            if "forward_seconds" not in st:
                return None
            parts["forward"].append(st["forward_seconds"])
            parts["backward"].append(st["backward_seconds"])
            parts["rest"].append(st["seconds"] - st["forward_seconds"]
                                 - st["backward_seconds"])
    if not parts["forward"]:
        return None
    return {k: statistics.median(v) for k, v in parts.items()}


def step_seconds(run):
    """Per step of a run, warm-up included, its slowest rank's seconds."""
    ranks = run.get("ranks") or []
    n = min((len(r["steps"]) for r in ranks), default=0)
    return [max(r["steps"][i]["seconds"] for r in ranks) for i in range(n)]


def trailing_mean(xs, k):
    """Per index i, the mean of xs over the last k entries up to i."""
    return [statistics.fmean(xs[max(0, i - k + 1):i + 1])
            for i in range(len(xs))]


def time_to_loss(run, target, k):
    """(seconds, steps) of training until the run's loss (the trailing
    k-step mean of the ranks' mean loss) first reaches target, linearly
    interpolated within the step that crosses it; None if it never does."""
    secs = step_seconds(run)
    loss = trailing_mean(run.get("loss", [])[:len(secs)], k)
    t, prev = 0.0, None
    for i, (dt, x) in enumerate(zip(secs, loss)):
        if x <= target:
            frac = 1.0 if prev is None or prev == x else (prev - target) / (
                prev - x)
            return t + frac * dt, i + frac
        t, prev = t + dt, x
    return None


def add_time_to_loss(summary, runs, k):
    """Per mode of one rate, the time to DDP FP32's loss at its last step
    (trailing k-step mean, mean over its rounds): median over the rounds
    that reach it, how many do, and the final loss against DDP's."""
    ref = [trailing_mean(r["loss"], k)[-1] for r in runs.get("ddp", [])
           if r.get("loss") and r.get("ranks")]
    if not ref:
        return
    target = statistics.mean(ref)
    for mode, rs in runs.items():
        rs = [r for r in rs if r.get("loss") and r.get("ranks")]
        hit = [x for x in (time_to_loss(r, target, k) for r in rs) if x]
        summary[mode]["time_to_ddp_loss"] = {
            "target": target, "window": k, "rounds": len(rs),
            "reached": len(hit),
            "seconds": statistics.median(h[0] for h in hit) if hit else None,
            "steps": statistics.median(h[1] for h in hit) if hit else None,
            "final_loss_minus_ddp": statistics.mean(
                trailing_mean(r["loss"], k)[-1] for r in rs) - target
            if rs else None}


def fmt(x, spec, scale=1.0):
    return "n/a" if x is None else format(x / scale, spec)


def ratio(x, ref):
    return f"{x / ref:.2f}×" if ref else "n/a"


def ttl_cell(t):
    """"41.2 s (step 37.5)", or "not reached (+0.0123)" with the final
    loss's excess over the target, "2/3 rounds" when only some reach it."""
    if not t:
        return "n/a"
    if t["seconds"] is None:
        return f"not reached ({t['final_loss_minus_ddp']:+.4f})"
    cell = f"{t['seconds']:.1f} s (step {t['steps']:.1f})"
    if t["reached"] < t["rounds"]:
        cell += f", {t['reached']}/{t['rounds']} rounds"
    return cell


def ttl_ratio(t, ref):
    return ratio(t["seconds"], ref) if t and t["seconds"] is not None \
        else "n/a"


def cpu_cell(r):
    """A rank's process CPU per timed step (all its threads), and of it the
    whitening pairs' wall time where the mode whitens."""
    cpu = r.get("cpu_seconds_per_rank_step")
    if cpu is None:
        return "n/a"
    t = r.get("transform_seconds_per_rank_step")
    return f"{cpu:.3f}" + (f" ({t:.3f})" if t else "")


def table(results, rates, modes):
    lines = ["| egress/rank | mode | s/step (median) | vs DDP FP32 | "
             "vs fp16 hook | wire MB/rank/step | of which giftd Peer | "
             "gift payload MB | GIFT-path layers | final loss | "
             "time to DDP's loss | vs DDP | rank CPU s/step (whitening) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for rate in rates:
        row = results.get(rate, {})
        ref = row.get("ddp", {}).get("seconds_per_step_median")
        f16 = row.get("fp16", {}).get("seconds_per_step_median")
        ttl_ref = row.get("ddp", {}).get("time_to_ddp_loss", {}).get(
            "seconds")
        for m in modes:
            r = row.get(m, {})
            s = r.get("seconds_per_step_median")
            if s is None:
                err = "; ".join(e.splitlines()[0][:160]
                                for e in r.get("errors", [])) or "not run"
                lines.append(f"| {rate} | {label(m)} | **failed**: {err} "
                             "| | | | | | | | | | |")
                continue
            name = label(m)
            if r.get("errors"):
                notes.append(f"{rate} {m}: " + "; ".join(
                    " / ".join(x.strip() for x in e.splitlines() if x.strip())
                    [:300] for e in r["errors"]))
                name += (f" (failed {len(r['errors'])} of {r['rounds']} "
                         f"rounds, note {len(notes)})")
            lines.append(
                f"| {rate} | {name} | {s:.3f} "
                f"| {ratio(s, ref)} | {ratio(s, f16)} "
                f"| {fmt(r.get('wire_tx_bytes_per_rank_step'), '.2f', 1e6)} "
                f"| {fmt(r.get('giftd_peer_bytes_per_rank_step'), '.3f', 1e6)} "
                f"| {fmt(r.get('gift_payload_bytes_per_rank_step'), '.2f', 1e6)} "
                f"| {fmt(r.get('gift_path_layers_mean_timed'), '.1f')} "
                f"| {fmt(r.get('final_loss'), '.4f')} "
                f"| {ttl_cell(r.get('time_to_ddp_loss'))} "
                f"| {ttl_ratio(r.get('time_to_ddp_loss'), ttl_ref)} "
                f"| {cpu_cell(r)} |")
    key = "giftd_peer_sent_bytes_per_rank_step_by_kind"
    kinds = [(rate, m, results[rate][m][key]) for rate in rates for m in modes
             if results.get(rate, {}).get(m, {}).get(key)]
    if kinds:
        lines += ["", "giftd Peer messages sent, by kind (serialized KB per "
                  "rank-step over the whole run, warm-up and its short "
                  "refresh interval included):"]
        for rate, m, k in kinds:
            lines.append(f"* {rate} {label(m)}: " + ", ".join(
                f"{name} {v / 1e3:.1f}" for name, v in
                sorted(k.items(), key=lambda kv: -kv[1]) if v > 0))
    phases = [(rate, m, results[rate][m]["phase_seconds_median"])
              for rate in rates for m in modes
              if results.get(rate, {}).get(m, {}).get("phase_seconds_median")]
    if phases:
        lines += ["", "Where the step goes (s; per timed step the slowest "
                  "rank's forward pass, its backward pass with the wait for "
                  "every bucket's result, and the rest: clipping and the "
                  "optimizer step; medians):"]
        for rate, m, ph in phases:
            lines.append(f"* {rate} {label(m)}: forward {ph['forward']:.3f}, "
                         f"backward + wait {ph['backward']:.3f}, "
                         f"rest {ph['rest']:.3f}")
    if notes:
        lines.append("")
        lines += [f"{i + 1}. {n}" for i, n in enumerate(notes)]
    return "\n".join(lines)


# ------------------------------------------------------------------ main ---
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="CMake build directory")
    ap.add_argument("--rates", default="100mbit,1gbit,none",
                    help="per-rank egress limits (tc rates, or none)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10,
                    help="steps per run, warm-up included (default 10)")
    ap.add_argument("--warmup", type=int, default=5,
                    help="steps before the timed ones (default 5: gift's "
                         "pinned layers get their first factors in them)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="times every mode runs at each rate, in turn")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--launcher", choices=("env", "torchrun"), default="env")
    ap.add_argument("--check-identical", action="store_true",
                    help="also compare the parameter digests every step")
    ap.add_argument("--train-arg", action="append", default=[],
                    help="extra gpt_train.py argument (repeatable)")
    ap.add_argument("--refresh-interval", type=int, default=4,
                    help="giftd factor refresh interval K (default 4: the "
                         "runs are short; giftd's own default is 25, with "
                         "~6x less Peer traffic)")
    ap.add_argument("--timed-refresh-interval", type=int, default=25,
                    help="K set with giftctl once the pinned layers have "
                         "their first factors (default 25, giftd's default; "
                         "0 keeps --refresh-interval for the whole run)")
    ap.add_argument("--gift-pin", default=r"h\.\d+\.mlp\.c_proj",
                    help="regex of layer names pinned onto the GIFT path "
                         "with giftctl once the ranks declared them (default: "
                         "the MLP output projections, the paper's fc2; '' "
                         "leaves the choice to giftd's selector, which needs "
                         "more steps than a short run has)")
    ap.add_argument("--giftd-flag", action="append", default=[],
                    help="extra giftd flag (repeatable). The daemons run at "
                         "giftd's defaults (poll 100 ms, heartbeat 1 s) but "
                         "for the refresh interval and one refresh thread; "
                         "--giftd-flag=--poll-interval-ms=20 makes them "
                         "poll 5x as often, at a measured cost")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=FLAG[,FLAG...]: giftd flags of the mode "
                         "gift~NAME (repeatable), side by side with plain "
                         "gift, e.g. --variant dense=--sketch-stride=1,"
                         "--max-sketch-period=1 --modes gift,gift~dense; a "
                         "FLAG rank:ARG is gpt_train.py's ARG instead (then "
                         "euclid~NAME too), e.g. --variant "
                         "big=rank:--bucket-cap-mb=100")
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds per run before its ranks are killed")
    ap.add_argument("--grace", type=float, default=15,
                    help="seconds the other ranks get after one failed")
    ap.add_argument("--pg-timeout", type=float, default=120,
                    help="gloo collective timeout in the ranks")
    ap.add_argument("--ttl-window", type=int, default=5,
                    help="time to loss: the loss is the trailing mean over "
                         "this many steps (default 5), the target DDP "
                         "FP32's at its last step")
    ap.add_argument("--out", default=None,
                    help="output folder (default BUILD/bench-results)")
    a = ap.parse_args(argv)
    a.build = os.path.abspath(a.build)
    a.rates = [r.strip() for r in a.rates.split(",") if r.strip()]
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    a.variants = {}
    for v in a.variant:
        name, eq, flags = v.partition("=")
        if not name or not eq:
            ap.error(f"--variant {v!r}: NAME=FLAG[,FLAG...]")
        a.variants[name] = [f for f in flags.split(",") if f]
    for m in a.modes:
        base, piece = split_mode(m)
        if base not in MODES:
            ap.error(f"unknown mode {m!r} ({', '.join(MODES)})")
        name = variant(m)[1]
        if name is not None and (
                name not in a.variants or base not in ("euclid", "gift") or
                (base == "euclid" and variant_flags(a, m))):
            ap.error(f"{m!r}: ~NAME goes with gift and a --variant NAME "
                     "(euclid~NAME with rank:ARG flags only)")
        if piece is not None and base == "powersgd":
            if not (piece.isdigit() and int(piece) >= 1):
                ap.error(f"{m!r}: powersgd@R takes a rank R >= 1")
        elif piece is not None:
            try:
                ok = base in ("euclid", "gift") and float(piece) >= 0
            except ValueError:
                ok = False
            if not ok:
                ap.error(f"{m!r}: @MB goes with euclid or gift, MB >= 0")
        fmt = mode_format(m)
        if fmt is not None and (base not in ("euclid", "gift")
                                or fmt not in FORMATS):
            ap.error(f"{m!r}: :FORMAT goes with euclid or gift, FORMAT one "
                     f"of {', '.join(FORMATS)}")
    if a.steps <= a.warmup:
        ap.error("--steps must exceed --warmup")
    if not 1 <= a.world <= 64:
        ap.error("--world must be 1..64")
    if a.ttl_window < 1:
        ap.error("--ttl-window must be >= 1")
    a.job_id = f"multihost-{os.getpid()}"
    a.out = os.path.abspath(a.out or os.path.join(a.build, "bench-results"))
    return a


def preflight(a):
    why = sh([NETNS, "check"], timeout=30, check=False)
    if why.returncode != 0:
        sys.exit(f"multihost_bench: network namespaces unavailable: "
                 f"{why.stdout.strip()}")
    bases = {split_mode(m)[0] for m in a.modes}
    if {"euclid", "gift"} & bases and not os.path.isfile(
            os.path.join(a.build, "python", "gift", "__init__.py")):
        sys.exit(f"multihost_bench: {a.build}/python/gift not built "
                 "(cmake --build BUILD --target gift_python)")
    giftd = os.path.join(a.build, "daemon", "giftd")
    ctl = os.path.join(a.build, "tools", "giftctl", "giftctl")
    if "gift" in bases and not (os.access(giftd, os.X_OK)
                                and os.access(ctl, os.X_OK)):
        sys.exit(f"multihost_bench: {giftd} or {ctl} not built")
    return giftd, ctl


def run_all(a, ns, giftd, ctl, tmp_root):
    results, raw = {}, []
    port = 29500
    for rate in a.rates:
        print(f"=== egress {rate} per rank: {a.world} namespaces ===",
              flush=True)
        ns.up(rate)
        runs = {m: [] for m in a.modes}
        for rnd in range(a.rounds):
            for mode in a.modes:
                port += 1
                tmp = tempfile.mkdtemp(prefix=f"{mode}-", dir=tmp_root)
                load = os.getloadavg()
                t0 = time.monotonic()
                rec = {"rate": rate, "mode": mode, "round": rnd,
                       "loadavg_before": load}
                daemons = None
                try:
                    if split_mode(mode)[0] == "gift":
                        daemons = Giftds(ns, giftd, ctl, tmp, a.job_id,
                                         [f"--refresh-interval="
                                          f"{a.refresh_interval}",
                                          "--refresh-threads=1"]
                                         + a.giftd_flag
                                         + variant_flags(a, mode), timeout=60)
                        daemons.timed_interval = a.timed_refresh_interval
                        rec["giftd_command"] = daemons.command
                    res = run_job(a, ns, mode, tmp, port, daemons)
                    if daemons is not None:
                        pb = daemons.peer_bytes()
                        if pb is not None:
                            res["giftd_peer_bytes"] = pb
                            res["giftd_peer_bytes_per_rank_step"] = (
                                sum(pb) / len(pb) / a.steps)
                        kinds = daemons.peer_bytes_by_kind()
                        if kinds is not None:
                            res["giftd_peer_sent_bytes_per_rank_step_by_kind"] \
                                = {k: v / ns.world / a.steps
                                   for k, v in sorted(kinds.items())}
                    rec.update(res)
                    msg = (f"{rec['seconds_per_step_median']:.3f} s/step, wire "
                           f"{rec.get('wire_tx_bytes_per_rank_step', 0) / 1e6:.2f}"
                           f" MB/rank/step, loss {rec['loss'][-1]:.4f}")
                    if rec.get("error"):
                        msg += "; BUT FAILED: " + rec["error"]
                except Exception as e:  # noqa: BLE001 -- a failed run is a row
                    rec["error"] = f"{type(e).__name__}: {e}"
                    if daemons is not None:
                        rec["giftd_log_tails"] = daemons.log_tails()
                    msg = "FAILED: " + rec["error"]
                finally:
                    if daemons is not None:
                        daemons.stop()
                print(f"  [{rate}] round {rnd + 1}/{a.rounds} {mode:8s} "
                      f"(load {load[0]:.2f}) {time.monotonic() - t0:5.1f} s: "
                      f"{msg}", flush=True)
                runs[mode].append(rec)
                raw.append(rec)
        ns.down()
        results[rate] = {m: merge(runs[m]) for m in a.modes}
        add_time_to_loss(results[rate], runs, a.ttl_window)
    return results, raw


def main(argv=None):
    a = parse_args(argv)
    giftd, ctl = preflight(a)
    out_dir = a.out
    os.makedirs(out_dir, exist_ok=True)
    # SIGTERM unwinds like Ctrl-C: the finally below removes everything.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sh([NETNS, "gc", "giftmh"], timeout=60, check=False)
    ns = Namespaces(f"giftmh{os.getpid()}", a.world)
    tmp_root = tempfile.mkdtemp(prefix="multihost-bench-")
    t_all = time.monotonic()
    try:
        results, raw = run_all(a, ns, giftd, ctl, tmp_root)
    finally:
        ns.down()
        shutil.rmtree(tmp_root, ignore_errors=True)
    total = time.monotonic() - t_all
    n = next((r["parameters"] for row in results.values()
              for r in row.values() if "parameters" in r), None)
    loads = [r["loadavg_before"][0] for r in raw]
    head = (f"# Multi-host DDP: {a.world} ranks, one network namespace each\n\n"
            f"gpt_train.py GPT ({n / 1e6 if n else 0:.2f} M parameters), batch "
            f"{a.batch} × 64 per rank, AdamW, gloo; {a.steps} steps per run "
            f"({a.warmup} warm-up), {a.rounds} round(s) per mode and rate, "
            f"modes interleaved. s/step: median of the timed steps of every "
            f"round (slowest rank per step). Wire: eth0 tx_bytes per rank per "
            f"step over the timed steps (FP32 ring: "
            f"{2 * (a.world - 1) / a.world * 4 * (n or 0) / 1e6:.2f} MB); gift "
            f"rows include the giftd Peer traffic (next column, its average "
            f"over the whole run). gift: one giftd per host, peered, refresh "
            f"interval {a.refresh_interval} until the pinned layers have "
            f"factors, then {a.timed_refresh_interval or a.refresh_interval}, "
            f"layers matching "
            f"`{a.gift_pin}` pinned (GIFT-path layers: mean over rank 0's "
            f"timed steps). Rank CPU: each rank process's CPU time (all "
            f"threads) per timed step, mean over ranks and rounds; in "
            f"brackets the wall time of its whitening pairs. "
            f"Load average before the runs: "
            f"{min(loads) if loads else 0:.2f}–{max(loads) if loads else 0:.2f}"
            f" (2-core machine). Run time {total:.0f} s.\n")
    md = head + "\n" + table(results, a.rates, a.modes) + "\n"
    print()
    print(md)
    with open(os.path.join(out_dir, "multihost_bench.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out_dir, "multihost_bench.json"), "w") as f:
        json.dump({"world_size": a.world, "steps": a.steps,
                   "warmup": a.warmup, "rounds": a.rounds, "batch": a.batch,
                   "rates": a.rates, "modes": a.modes,
                   "launcher": a.launcher,
                   "refresh_interval": a.refresh_interval,
                   "run_seconds": total, "summary": results, "runs": raw},
                  f, indent=1)
    print(f"multihost_bench: wrote {out_dir}/multihost_bench.md and "
          "multihost_bench.json")
    ok = all(r.get("rounds_ok") == r.get("rounds")
             for row in results.values() for r in row.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""GIFT's DDP comm hook side by side with PyTorch's own gradient-compression
hooks on the same model and data (issue 5).

Every method trains its own trajectory of the examples' TinyLlama (same
init, same batches) on W gloo ranks on this machine's CPUs, because
PowerSGD and GIFT carry error feedback from step to step. Methods:

  fp32          DDP's plain allreduce (torch's allreduce_hook): the reference
  fp16          torch fp16_compress_hook
  bf16          torch bf16_compress_hook (needs bf16 allreduce in the backend)
  powersgd1/4   torch powerSGD_hook, rank 1 / 4, error feedback + warm start
  gift-bf16     gift.comm_hook, mode bf16
  gift-euclid   gift.comm_hook, mode euclid (FP8, every layer Euclidean)
  gift-gift     gift.comm_hook, mode gift with a real giftd (started here)
  gift-fp32     gift.comm_hook, mode fp32 (not in the default list)

Measured per method, every step:
* RelL2 of the averaged gradient against the FP32 allreduce of the SAME
  local gradients: a wrapper around each hook clones the bucket before the
  inner hook runs, allreduces the clone in FP32 (÷W) with the original
  torch.distributed.all_reduce on a separate gloo group (not counted), and
  chains on the inner hook's future to accumulate ‖avg − ref‖² and ‖ref‖²,
  per parameter. RelL2 of a step = sqrt(Σ‖avg − ref‖² / Σ‖ref‖²).
* Bytes sent per rank: torch hooks, every all_reduce / all_gather they issue
  (torch.distributed functions patched inside the ranks), converted like a
  ring: allreduce 2(W−1)/W × payload, all_gather (W−1)/W × output; gift,
  the bytes libgift reports as actually sent (state.stats()).
* Training loss (mean over ranks), held-out loss at the end, step time.

Usage: /usr/bin/python3 bench/python/hooks_bench.py --build BUILD
       [--world-size 4] [--steps 100] [--methods fp32,fp16,...] [--out DIR]
Writes DIR/hooks_bench.md and DIR/hooks_bench.json (DIR default
BUILD/bench-results).
"""

import argparse
import json
import math
import os
import shutil
import signal
import socket as socketlib
import subprocess
import sys
import tempfile
import time
import traceback

# One thread per rank: W ranks share the machine's cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import \
    default_hooks, powerSGD_hook as psgd  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples"))

from tiny_llama import Config, Corpus, TinyLlama  # noqa: E402

DEFAULT_METHODS = ("fp32,fp16,bf16,powersgd1,powersgd4,"
                   "gift-bf16,gift-euclid,gift-gift")
ALL_METHODS = DEFAULT_METHODS.split(",") + ["gift-fp32"]
LABELS = {
    "fp32": "FP32 allreduce (torch default)",
    "fp16": "torch fp16_compress_hook",
    "bf16": "torch bf16_compress_hook",
    "powersgd1": "torch PowerSGD rank 1",
    "powersgd4": "torch PowerSGD rank 4",
    "gift-fp32": "gift mode fp32",
    "gift-bf16": "gift mode bf16",
    "gift-euclid": "gift mode euclid (FP8 E4M3)",
    "gift-gift": "gift mode gift (FP8 + giftd)",
}

# The originals, for the benchmark's own (uncounted) collectives.
_ORIG = {name: getattr(dist, name) for name in
         ("all_reduce", "all_gather", "all_gather_into_tensor",
          "_all_gather_base", "reduce_scatter", "broadcast")
         if hasattr(dist, name)}


# ---------------------------------------------------------------- ranks ----
class Counter:
    """Counts the payload of the torch.distributed collectives the hooks
    issue, as bytes a ring implementation sends per rank."""

    def __init__(self, world):
        self.world = world
        self.bytes = 0.0
        self.calls = 0
        self.by_op = {}

    def _add(self, op, nbytes, factor):
        self.bytes += nbytes * factor
        self.calls += 1
        self.by_op[op] = self.by_op.get(op, 0) + 1

    def install(self):
        w = self.world
        ring = 2.0 * (w - 1) / w
        gather = (w - 1.0) / w

        def nb(t):
            return t.numel() * t.element_size()

        def all_reduce(tensor, *a, **k):
            self._add("all_reduce", nb(tensor), ring)
            return _ORIG["all_reduce"](tensor, *a, **k)

        def all_gather(tensor_list, tensor, *a, **k):
            self._add("all_gather", nb(tensor) * w, gather)
            return _ORIG["all_gather"](tensor_list, tensor, *a, **k)

        def gather_base(name):
            def f(output, inp, *a, **k):
                self._add(name, nb(output), gather)
                return _ORIG[name](output, inp, *a, **k)
            return f

        def reduce_scatter(output, input_list, *a, **k):
            self._add("reduce_scatter", nb(output) * w, gather)
            return _ORIG["reduce_scatter"](output, input_list, *a, **k)

        def broadcast(tensor, *a, **k):
            self._add("broadcast", nb(tensor), 1.0)
            return _ORIG["broadcast"](tensor, *a, **k)

        dist.all_reduce = all_reduce
        dist.all_gather = all_gather
        for name in ("all_gather_into_tensor", "_all_gather_base"):
            if name in _ORIG:
                setattr(dist, name, gather_base(name))
        dist.reduce_scatter = reduce_scatter
        dist.broadcast = broadcast


class Measure:
    """Wraps a comm hook: FP32 reference allreduce of the same local bucket
    and per-parameter squared errors of the hook's averaged result."""

    def __init__(self, inner_hook, inner_state, ref_group, world, names):
        self.inner_hook = inner_hook
        self.inner_state = inner_state
        self.ref_group = ref_group
        self.world = world
        self.names = names          # id(param) -> (name, is 2-D)
        self.err2 = {}
        self.ref2 = {}
        self.seconds = 0.0          # time spent measuring (not the hook's)
        self.buckets = 0
        # Σ over the measured steps of (avg − ref) and of ref, per parameter:
        # error feedback (PowerSGD, GIFT) trades per-step error for a
        # bounded accumulated one.
        self.accumulate = False
        self.sum_diff = {}
        self.sum_ref = {}

    def reset(self):
        self.err2, self.ref2 = {}, {}
        self.seconds = 0.0
        self.buckets = 0

    def hook(self, bucket):
        t0 = time.perf_counter()
        buf = bucket.buffer()
        ref = buf.detach().clone()
        _ORIG["all_reduce"](ref, group=self.ref_group)
        ref.div_(self.world)
        slices, pos = [], 0
        for p in bucket.parameters():
            slices.append((self.names[id(p)][0], pos, p.numel()))
            pos += p.numel()
        self.buckets += 1
        self.seconds += time.perf_counter() - t0
        fut = self.inner_hook(self.inner_state, bucket)

        def check(f):
            t1 = time.perf_counter()
            out = f.value()
            if isinstance(out, (list, tuple)):
                out = out[0]
            diff = (out.detach().float() - ref)
            for name, at, n in slices:
                d, r = diff[at:at + n], ref[at:at + n]
                self.err2[name] = float(d.double().pow(2).sum())
                self.ref2[name] = float(r.double().pow(2).sum())
                if self.accumulate:
                    if name not in self.sum_diff:
                        self.sum_diff[name] = torch.zeros(n, dtype=torch.float64)
                        self.sum_ref[name] = torch.zeros(n, dtype=torch.float64)
                    self.sum_diff[name].add_(d.double())
                    self.sum_ref[name].add_(r.double())
            self.seconds += time.perf_counter() - t1
            return out

        return fut.then(check)


def _rank_main(rank, world, init_file, method, args, result_file):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}",
                            rank=rank, world_size=world)
    try:
        _train(rank, world, method, args, result_file)
    finally:
        dist.destroy_process_group()


def _train(rank, world, method, args, result_file):
    ref_group = dist.new_group(backend="gloo")
    cfg = Config(seq_len=args["seq_len"])
    model = TinyLlama(cfg, seed=0)
    data = Corpus(cfg.seq_len)
    names = {id(p): (n, p.dim() == 2) for n, p in model.named_parameters()}
    n_elem = sum(p.numel() for p in model.parameters() if p.requires_grad)
    # One DDP bucket for every method (the model is ~3.4 MB): PowerSGD's
    # callbacks issue collectives from gloo's threads, which with several
    # buckets may interleave differently on different ranks.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 256 << 20
    ddp = DDP(model, bucket_cap_mb=256)

    gift_state = None
    psgd_state = None
    if method == "fp32":
        inner, inner_state = default_hooks.allreduce_hook, None
    elif method == "fp16":
        inner, inner_state = default_hooks.fp16_compress_hook, None
    elif method == "bf16":
        inner, inner_state = default_hooks.bf16_compress_hook, None
    elif method.startswith("powersgd"):
        psgd_state = psgd.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=int(method[len("powersgd"):]),
            start_powerSGD_iter=args["psgd_start"],
            min_compression_rate=2, use_error_feedback=True,
            warm_start=True, orthogonalization_epsilon=1e-8, random_seed=0)
        inner, inner_state = psgd.powerSGD_hook, psgd_state
    elif method.startswith("gift-"):
        import gift
        mode = method[len("gift-"):]
        kw = {}
        if mode == "gift":
            kw = {"agent_socket": args["socket"], "job_id": "hooks-bench"}
        else:
            # No daemon for these modes (a stray /tmp/gift/agent.sock of
            # another run must not be picked up).
            # libgift's rendezvous folder goes under the run's temp dir.
            kw = {"agent_socket": os.path.join(args["tmp"], "no-daemon.sock"),
                  "store_dir": args["tmp"]}
        gift_state = gift.init(ddp, mode=mode,
                               probe_interval=args["probe_interval"], **kw)
        inner, inner_state = gift.comm_hook, gift_state
        if mode == "gift":
            deadline = time.monotonic() + 30
            while not gift_state.stats()["attachment"].get("attached"):
                if time.monotonic() > deadline:
                    raise RuntimeError("gift: not attached to giftd after 30 s: "
                                       f"{gift_state.stats()['attachment']}")
                time.sleep(0.02)
            dist.barrier(group=ref_group)
    else:
        raise ValueError(method)

    meas = Measure(inner, inner_state, ref_group, world, names)
    ddp.register_comm_hook(meas, Measure.hook)
    counter = Counter(world)
    counter.install()
    opt = torch.optim.AdamW(ddp.parameters(), lr=args["lr"])

    steps = []
    error = None
    prev_gift = None
    for step in range(args["steps"]):
        x, y = data.batch(step, rank, world, args["batch"])
        counter.bytes = 0.0
        meas.reset()
        meas.accumulate = step >= args["warmup"]
        t0 = time.perf_counter()
        try:
            opt.zero_grad(set_to_none=True)
            loss = ddp(x, y)
            loss.backward()
        except Exception as e:  # noqa: BLE001 -- reported in the table
            # DDP nests a callback's error: keep the innermost message.
            msg = str(e).splitlines()[0] if str(e) else ""
            inner = msg.rsplit("RuntimeError: ", 1)[-1]
            error = f"{type(e).__name__}: {inner[:200]}"
            break
        opt.step()
        seconds = time.perf_counter() - t0
        rec = {"step": step, "seconds": seconds,
               "measure_seconds": meas.seconds, "buckets": meas.buckets}
        if gift_state is not None:
            s = gift_state.stats()
            cur = {k: s[k] for k in ("bytes_euclid", "bytes_gift",
                                     "bytes_control")}
            if prev_gift is None:
                prev_gift = {k: 0 for k in cur}
            rec.update({k: cur[k] - prev_gift[k] for k in cur})
            rec["bytes"] = sum(cur[k] - prev_gift[k] for k in cur)
            prev_gift = cur
            t = gift_state.last_telemetry or {}
            rec["gift_layers"] = [l["name"] for l in t.get("layers", [])
                                  if l.get("path") == "gift"]
            rec["probes"] = {l["name"]: [l.get("probe_euclid_rel_l2"),
                                         l.get("probe_gift_rel_l2")]
                             for l in t.get("layers", []) if l.get("probed")}
        else:
            rec["bytes"] = counter.bytes
        lt = torch.tensor([loss.item()], dtype=torch.float64)
        _ORIG["all_reduce"](lt, group=ref_group)
        rec["loss"] = lt.item() / world
        rec["err2"] = dict(meas.err2)
        rec["ref2"] = dict(meas.ref2)
        steps.append(rec)
        if rank == 0 and args["progress"] and (step + 1) % 20 == 0:
            e = sum(rec["err2"].values())
            r = sum(rec["ref2"].values())
            print(f"  [{method}] step {step + 1}/{args['steps']} "
                  f"loss {rec['loss']:.3f} relL2 {math.sqrt(e / r):.3e}",
                  flush=True)

    # The same held-out batch for every method.
    with torch.no_grad():
        vx, vy = data.val_batch(64)
        val = float(model(vx, vy))
    cum = {name: [float(meas.sum_diff[name].pow(2).sum()),
                  float(meas.sum_ref[name].pow(2).sum())]
           for name in meas.sum_diff}
    out = {"rank": rank, "elements": n_elem, "steps": steps, "error": error,
           "cumulative": cum,
           "val_loss": val,
           "two_d": sorted(n for n, td in names.values() if td),
           "counted_ops": counter.by_op}
    if psgd_state is not None:
        out["powersgd_compression_rate"] = psgd_state.compression_stats()[0]
    if gift_state is not None:
        s = gift_state.stats()
        out["gift_attachment"] = {k: v for k, v in s["attachment"].items()
                                  if isinstance(v, (int, float, str, bool))}
        out["gift_plan_epoch"] = s["plan_epoch"]
        gift_state.remove_hooks()
    with open(result_file, "w") as f:
        json.dump(out, f)


# ---------------------------------------------------------------- parent ---
def _free_port():
    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _find(build, candidates):
    for c in candidates:
        p = os.path.join(build, c)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


class Giftd:
    def __init__(self, exe, tmp, refresh_interval, extra):
        self.sock = os.path.join(tmp, "agent.sock")
        self.log_path = os.path.join(tmp, "giftd.log")
        self.log = open(self.log_path, "w")
        cmd = [exe, f"--agent-socket={self.sock}",
               f"--control-address=127.0.0.1:{_free_port()}",
               "--metrics-address=", f"--shm-prefix=/gifthb-{os.getpid()}x",
               f"--refresh-interval={refresh_interval}",
               "--poll-interval-ms=20", "--heartbeat-interval-ms=100",
               "--refresh-threads=1"] + list(extra)
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("giftd did not start:\n" + self.tail())
            time.sleep(0.02)

    def tail(self, n=30):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _run_method(method, world, args, tmp, timeout):
    init_file = os.path.join(tmp, "init")
    files = [os.path.join(tmp, f"rank{r}.json") for r in range(world)]
    # start_processes gives every rank the same args: the trampoline names
    # the rank's result file.
    ctx = mp.start_processes(_trampoline,
                             args=(world, init_file, method, args, tmp),
                             nprocs=world, join=False, start_method="fork")
    deadline = time.monotonic() + timeout
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{method}: ranks still running after "
                                   f"{timeout} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
            p.join(5)
    return [json.load(open(f)) for f in files]


def _trampoline(rank, world, init_file, method, args, tmp):
    _rank_main(rank, world, init_file, method, args,
               os.path.join(tmp, f"rank{rank}.json"))


def _rel(e, r):
    return math.sqrt(e / r) if r > 0 else float("nan")


def _summarise(method, ranks, world, warmup, wall):
    r0 = ranks[0]
    steps = r0["steps"]
    n = r0["elements"]
    fp32_bytes = 2.0 * (world - 1) / world * 4 * n
    res = {"method": method, "label": LABELS[method], "error": r0["error"],
           "steps_done": len(steps), "elements": n,
           "fp32_bytes_per_step": fp32_bytes, "wall_seconds": wall,
           "counted_ops": r0.get("counted_ops")}
    for k in ("powersgd_compression_rate", "gift_attachment",
              "gift_plan_epoch"):
        if k in r0:
            res[k] = r0[k]
    if not steps:
        return res
    two_d = set(r0["two_d"])
    per_step, per_step_2d = [], []
    for s in steps:
        per_step.append(_rel(sum(s["err2"].values()), sum(s["ref2"].values())))
        per_step_2d.append(_rel(sum(v for k, v in s["err2"].items() if k in two_d),
                                sum(v for k, v in s["ref2"].items() if k in two_d)))
    use = [i for i in range(len(steps)) if i >= warmup] or list(range(len(steps)))
    res["rel_l2_per_step"] = per_step
    res["rel_l2_2d_per_step"] = per_step_2d
    res["rel_l2_mean"] = sum(per_step[i] for i in use) / len(use)
    res["rel_l2_2d_mean"] = sum(per_step_2d[i] for i in use) / len(use)
    res["rel_l2_last"] = per_step[-1]
    res["rel_l2_2d_last"] = per_step_2d[-1]
    layers = sorted(steps[0]["err2"])
    cum = r0.get("cumulative") or {}
    if cum:
        res["cum_rel_l2"] = _rel(sum(e for e, _ in cum.values()),
                                 sum(r for _, r in cum.values()))
        res["cum_rel_l2_2d"] = _rel(
            sum(e for k, (e, _) in cum.items() if k in two_d),
            sum(r for k, (_, r) in cum.items() if k in two_d))
        res["per_layer_cum_rel_l2"] = {k: _rel(e, r)
                                       for k, (e, r) in cum.items()}
    res["per_layer_rel_l2_mean"] = {
        name: sum(_rel(steps[i]["err2"][name], steps[i]["ref2"][name])
                  for i in use) / len(use) for name in layers}
    # Bytes: mean over ranks and over the measured steps.
    b = [sum(rk["steps"][i]["bytes"] for i in use if i < len(rk["steps"]))
         / len(use) for rk in ranks]
    res["bytes_per_step"] = sum(b) / len(b)
    res["bytes_ratio_fp32"] = res["bytes_per_step"] / fp32_bytes
    if "bytes_gift" in steps[0]:
        for k in ("bytes_euclid", "bytes_gift", "bytes_control"):
            res[k + "_per_step"] = sum(
                sum(rk["steps"][i][k] for i in use) / len(use)
                for rk in ranks) / len(ranks)
    res["losses"] = [s["loss"] for s in steps]
    tail = res["losses"][-10:]
    res["final_loss"] = sum(tail) / len(tail)
    res["val_loss"] = r0["val_loss"]
    # Step time: rank 0, median over the measured steps, without the time
    # the benchmark itself spent on its reference allreduce and errors.
    t = sorted(steps[i]["seconds"] - steps[i]["measure_seconds"] for i in use)
    res["step_seconds_median"] = t[len(t) // 2]
    if "gift_layers" in steps[0]:
        on = {}
        for i, s in enumerate(steps):
            for name in s["gift_layers"]:
                on.setdefault(name, []).append(i)
        res["gift_path_steps"] = on
        probes = {}
        for s in steps:
            for name, (e, g) in s.get("probes", {}).items():
                if e is not None and g is not None:
                    probes.setdefault(name, []).append((e, g))
        res["probe_rel_l2_mean"] = {
            k: [sum(x for x, _ in v) / len(v), sum(y for _, y in v) / len(v),
                len(v)] for k, v in probes.items()}
    return res


def _fmt(x, spec):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return format(x, spec)


def _table(results, world, steps, warmup):
    lines = [
        f"| method | avg-grad RelL2 vs FP32, mean steps {warmup}–{steps - 1} "
        "| RelL2 last step | RelL2 2-D weights (mean) "
        f"| RelL2 of the sum over steps {warmup}–{steps - 1} "
        "| bytes/step/rank "
        "| vs FP32 | final train loss | held-out loss | step time (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.get("error") and not r.get("rel_l2_per_step"):
            why = r["error"]
            if r["method"] == "bf16" and "Invalid scalar type" in why:
                why = (f"not supported here: torch {torch.__version__}'s gloo "
                       f"backend has no bfloat16 allreduce ({why})")
            lines.append(f"| {r['label']} | **failed**: {why} "
                         "| | | | | | | | |")
            continue
        note = f" (stopped at step {r['steps_done']}: {r['error']})" \
            if r.get("error") else ""
        lines.append(
            f"| {r['label']}{note} | {_fmt(r['rel_l2_mean'], '.3e')} "
            f"| {_fmt(r['rel_l2_last'], '.3e')} "
            f"| {_fmt(r['rel_l2_2d_mean'], '.3e')} "
            f"| {_fmt(r.get('cum_rel_l2'), '.3e')} "
            f"| {r['bytes_per_step'] / 1e6:.3f} MB "
            f"| {r['bytes_ratio_fp32'] * 100:.1f}% "
            f"| {_fmt(r['final_loss'], '.3f')} | {_fmt(r['val_loss'], '.3f')} "
            f"| {r['step_seconds_median'] * 1e3:.0f} |")
    return "\n".join(lines)


def _gift_notes(results):
    by = {r["method"]: r for r in results}
    g = by.get("gift-gift")
    if not g or not g.get("rel_l2_per_step"):
        return ""
    e = by.get("gift-euclid")
    out = ["", "Layers giftd put on the GIFT path in the gift run: steps on "
           "the path; measured per-step avg-grad RelL2 of the layer on those "
           "steps, gift run vs the same steps of the euclid run; RelL2 of "
           "the layer's averaged gradient summed over the measured steps "
           "(gift vs euclid); the client's local round-trip RelL2 on probe "
           "steps, Euclidean → GIFT (mean over the run's probes):", ""]
    on = g.get("gift_path_steps", {})
    if not on:
        out.append("* none: giftd selected no layer in this run.")
    for name, idx in sorted(on.items(), key=lambda kv: -len(kv[1])):
        # gift names a Linear layer by its module, torch by its parameter.
        pname = name if name in g["_steps"][0]["err2"] else name + ".weight"

        def rel(r):
            st = r["_steps"]
            v = [_rel(st[i]["err2"][pname], st[i]["ref2"][pname])
                 for i in idx if i < len(st)]
            return sum(v) / len(v) if v else float("nan")
        gr = rel(g)
        er = rel(e) if e and e.get("_steps") else float("nan")
        gc = g.get("per_layer_cum_rel_l2", {}).get(pname)
        ec = (e or {}).get("per_layer_cum_rel_l2", {}).get(pname)
        pr = g.get("probe_rel_l2_mean", {}).get(name)
        probe = (f"; probes {pr[0]:.3e} → {pr[1]:.3e} ({pr[2]} probes)"
                 if pr else "")
        out.append(f"* `{name}`: {len(idx)} steps (first {idx[0]}); "
                   f"per-step RelL2 gift {gr:.3e} vs euclid {_fmt(er, '.3e')}"
                   f"; RelL2 of the sum gift {_fmt(gc, '.3e')} vs euclid "
                   f"{_fmt(ec, '.3e')}{probe}")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="CMake build directory")
    ap.add_argument("--world-size", type=int, default=4)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10,
                    help="steps left out of the means (default 10)")
    ap.add_argument("--methods", default=DEFAULT_METHODS,
                    help=f"comma list of {','.join(ALL_METHODS)}")
    ap.add_argument("--out", default=None,
                    help="output folder (default BUILD/bench-results)")
    ap.add_argument("--batch", type=int, default=8, help="batch per rank")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--powersgd-start", type=int, default=2,
                    help="start_powerSGD_iter (2 is the least torch allows "
                         "with error feedback)")
    ap.add_argument("--refresh-interval", type=int, default=10,
                    help="giftd factor refresh interval K (steps)")
    ap.add_argument("--probe-interval", type=int, default=10,
                    help="steps between probe steps (giftd's, which its "
                         "ranks follow)")
    ap.add_argument("--giftd-flag", action="append", default=[],
                    help="extra giftd flag (repeatable)")
    ap.add_argument("--timeout", type=float, default=900,
                    help="seconds per method before its ranks are killed")
    args = ap.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the daemon, ranks and temp dirs go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    build = os.path.abspath(args.build)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m not in ALL_METHODS:
            ap.error(f"unknown method {m!r} (known: {', '.join(ALL_METHODS)})")
    if any(m.startswith("gift-") for m in methods):
        pydir = os.path.join(build, "python")
        if not os.path.isfile(os.path.join(pydir, "gift", "__init__.py")):
            sys.exit(f"hooks_bench: {pydir}/gift not built "
                     "(make gift_python)")
        sys.path.insert(0, pydir)
        import gift  # noqa: F401 -- imported once, before the fork
    giftd_exe = None
    if "gift-gift" in methods:
        giftd_exe = _find(build, ["daemon/giftd", "giftd", "bin/giftd"])
        if giftd_exe is None:
            sys.exit(f"hooks_bench: giftd not found under {build} (make giftd)")
    out_dir = os.path.abspath(args.out or os.path.join(build, "bench-results"))
    os.makedirs(out_dir, exist_ok=True)
    world = args.world_size

    results = []
    t_all = time.monotonic()
    for method in methods:
        tmp = tempfile.mkdtemp(prefix="hooks-bench-")
        daemon = None
        t0 = time.monotonic()
        print(f"hooks_bench: {method} ({LABELS[method]}), {world} ranks, "
              f"{args.steps} steps ...", flush=True)
        try:
            rargs = {"steps": args.steps, "batch": args.batch,
                     "seq_len": args.seq_len, "lr": args.lr,
                     "psgd_start": args.powersgd_start,
                     "probe_interval": args.probe_interval,
                     "warmup": args.warmup,
                     "socket": None, "tmp": tmp, "progress": True}
            if method == "gift-gift":
                # giftd's probe interval is the one its ranks probe at.
                daemon = Giftd(giftd_exe, tmp, args.refresh_interval,
                               [f"--probe-interval={args.probe_interval}"]
                               + args.giftd_flag)
                rargs["socket"] = daemon.sock
            ranks = _run_method(method, world, rargs, tmp, args.timeout)
            res = _summarise(method, ranks, world, args.warmup,
                             time.monotonic() - t0)
            res["_steps"] = ranks[0]["steps"]
            if daemon is not None:
                res["giftd_command"] = daemon.cmd
                res["giftd_log_tail"] = daemon.tail(60)
        except Exception as e:  # noqa: BLE001 -- one failed method is a row
            traceback.print_exc()
            res = {"method": method, "label": LABELS[method],
                   "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                   if str(e) else type(e).__name__}
            if daemon is not None:
                res["giftd_log_tail"] = daemon.tail()
        finally:
            if daemon is not None:
                daemon.stop()
            shutil.rmtree(tmp, ignore_errors=True)
        results.append(res)
        if res.get("rel_l2_per_step"):
            print(f"hooks_bench: {method}: RelL2 mean {res['rel_l2_mean']:.3e}, "
                  f"bytes {res['bytes_ratio_fp32'] * 100:.1f}% of FP32, "
                  f"loss {res['final_loss']:.3f}, "
                  f"{time.monotonic() - t0:.0f} s"
                  + (f" (stopped: {res['error']})" if res.get("error") else ""),
                  flush=True)
        else:
            print(f"hooks_bench: {method}: failed: {res.get('error')}",
                  flush=True)
    total = time.monotonic() - t_all

    n = next((r["elements"] for r in results if "elements" in r), None)
    head = (f"# DDP comm hooks: averaged-gradient fidelity and bytes\n\n"
            f"TinyLlama ({n} parameters), {world} gloo ranks on CPU, "
            f"{args.steps} steps, AdamW lr {args.lr:g}, batch {args.batch} × "
            f"{args.seq_len} per rank, one DDP bucket; every method trains "
            f"its own trajectory from the same init on the same batches. "
            f"RelL2 = ‖avg − FP32 allreduce of the same local gradients‖ / "
            f"‖FP32 allreduce‖ per step, mean over steps {args.warmup}–"
            f"{args.steps - 1}; RelL2 of the sum = ‖Σ(avg − ref)‖ / ‖Σ ref‖ "
            f"over the same steps (what error feedback, in PowerSGD and on "
            f"gift's GIFT path, keeps small). Bytes: sent per rank per step (torch hooks: "
            f"ring-equivalent of the collectives they issue; gift: bytes "
            f"libgift sent); FP32 = 2(W−1)/W × 4 × n. PowerSGD: error "
            f"feedback, warm start, start_powerSGD_iter={args.powersgd_start}, "
            f"min_compression_rate=2. giftd: refresh interval "
            f"{args.refresh_interval}, default selection. Final train loss: "
            f"mean of the last 10 steps. Step time: median of rank 0, minus "
            f"the benchmark's own reference allreduce; this machine is shared "
            f"and noisy. Run time {total:.0f} s.\n")
    table = _table(results, world, args.steps, args.warmup)
    notes = _gift_notes(results)
    md = head + "\n" + table + "\n" + notes + "\n"
    print()
    print(md)
    with open(os.path.join(out_dir, "hooks_bench.md"), "w") as f:
        f.write(md)
    for r in results:
        r.pop("_steps", None)
    with open(os.path.join(out_dir, "hooks_bench.json"), "w") as f:
        json.dump({"world_size": world, "steps": args.steps,
                   "warmup": args.warmup, "batch_per_rank": args.batch,
                   "seq_len": args.seq_len, "lr": args.lr,
                   "powersgd_start": args.powersgd_start,
                   "refresh_interval": args.refresh_interval,
                   "run_seconds": total, "results": results}, f, indent=1)
    print(f"hooks_bench: wrote {out_dir}/hooks_bench.md and hooks_bench.json")
    return 0 if all(r.get("rel_l2_per_step") or r["method"] == "bf16"
                    for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Trains the tiny Llama (tiny_llama.py) with DDP on N CPU ranks, with the
gradients exchanged by GIFT (or plain PyTorch DDP for comparison).

    # its own spawner (4 gloo ranks on this machine), FP8 + geometry:
    python3 examples/train_tiny_llama.py --nproc 4 --mode gift --steps 300
    # or under torchrun (RANK / WORLD_SIZE / MASTER_ADDR from the launcher):
    torchrun --nproc_per_node 4 examples/train_tiny_llama.py --mode gift

Modes: ddp (PyTorch's own FP32 allreduce, no GIFT code at all), fp32 and
bf16 (libgift's plain allreduce in that precision), euclid (FP8 without
geometry) and gift (FP8; the local giftd picks the layers to whiten and
refreshes their factors; without a giftd it runs Euclidean and keeps trying
to attach). PYTHONPATH must reach the `gift` package (build/python).

Rank 0 writes one JSON line per step to --log (loss, bytes, per-layer
telemetry) and a final --summary JSON; `make demo` (examples/demo.py) turns
them into the report and the figure. On audit steps (--audit-interval; an
attached giftd's own interval overrides it) the line also carries every
layer's audit: the RelL2 and cosine of the gradient applied against the
FP32 average of the same local gradients (and, with --audit-drift,
libgift's drift since the previous audit). --drift-window W measures the
drift in the script itself, over windows of W steps and every span of
them (DriftWindows, below). --check-identical compares a SHA-256 of every
rank's parameters after every step and stops the job on the first
difference. --checkpoint / --checkpoint-at / --resume save and restore the
model, the optimizer and GIFT's state (error-feedback residuals, factors,
plans). --format (e4m3, e5m2, nvfp4, mxfp4) and --error-feedback (auto: on
for the 4-bit formats; on, off) are gift.init's format and error_feedback
in modes euclid and gift. --eval-rows sets the size of the fixed held-out
set the loss is evaluated on (default 32 rows of --seq-len bytes).
"""

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_llama import CORPUS_DIR, Config, Corpus, TinyLlama  # noqa: E402

MODES = ("ddp", "fp32", "bf16", "euclid", "gift")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=MODES, default="gift")
    p.add_argument("--nproc", type=int, default=4,
                   help="ranks to spawn when not under torchrun (default 4)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=0,
                   help="MLP width; 0 = 8/3 dim rounded up to a multiple "
                   "of 8 (344 at dim 128: the w2 layers' d_in then takes "
                   "no 4-bit format, which needs a multiple of 16 / 32)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--corpus", default=CORPUS_DIR,
                   help="directory whose files are the training text (every "
                   "regular file, concatenated in name order; the last 5%% "
                   "is held out); default %(default)s")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--schedule", choices=("constant", "cosine"),
                   default="constant",
                   help="lr after the warmup: constant, or cosine decay to "
                   "a tenth of --lr at the last step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads per rank (default 1)")
    p.add_argument("--agent-socket", default=None,
                   help="giftd's Agent socket (default $GIFT_AGENT_SOCKET, "
                   "else /tmp/gift/agent.sock)")
    p.add_argument("--job-id", default=None)
    p.add_argument("--sketch-rows", type=int, default=256)
    p.add_argument("--probe-interval", type=int, default=10,
                   help="steps between probe steps (default 10; an "
                   "attached giftd's own interval overrides it)")
    p.add_argument("--audit-interval", type=int, default=100,
                   help="steps between audit steps (an FP32 allreduce "
                   "beside the FP8 one); 0 = none (default 100, libgift's)")
    p.add_argument("--audit-drift", action="store_true",
                   help="libgift's drift on audit steps too (gift.init "
                   "audit_drift=True: running sums on every step)")
    p.add_argument("--drift-window", type=int, default=0,
                   help="FP8 modes: drift of the applied gradients' running "
                   "sums vs FP32 over windows of this many steps and over "
                   "the whole run (one FP32 allreduce per window); 0 = off")
    p.add_argument("--format", default="e4m3",
                   choices=("e4m3", "e5m2", "nvfp4", "mxfp4"),
                   help="wire format of modes euclid and gift (gift.init "
                   "format=; in mode gift the job's default for giftd)")
    p.add_argument("--error-feedback", default="auto",
                   choices=("auto", "on", "off"),
                   help="Euclidean error feedback of modes euclid and gift "
                   "(gift.init error_feedback=: auto = on for 4-bit)")
    p.add_argument("--owner-release-cap", type=float, default=None,
                   help="modes euclid and gift: gift.init "
                   "owner_release_cap= (default gift's, 0.25; 0 = no cap)")
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-rows", type=int, default=32,
                   help="rows of the fixed held-out set the loss is "
                   "evaluated on (64 per forward pass)")
    p.add_argument("--log", default=None, help="per-step JSON lines (rank 0)")
    p.add_argument("--summary", default=None, help="final JSON (rank 0)")
    p.add_argument("--check-identical", action="store_true",
                   help="assert identical parameters on all ranks every step")
    p.add_argument("--checkpoint", default=None, help="checkpoint file")
    p.add_argument("--checkpoint-at", type=int, default=-1,
                   help="save --checkpoint after this step")
    p.add_argument("--resume", action="store_true",
                   help="start from --checkpoint")
    p.add_argument("--progress", choices=("auto", "bar", "lines", "none"),
                   default="auto")
    p.add_argument("--label", default=None, help="name in the progress bar")
    return p.parse_args(argv)


def model_config(args):
    return Config(dim=args.dim, layers=args.layers, heads=args.heads,
                  ffn=args.ffn or int(8 * args.dim / 3 + 7) // 8 * 8,
                  seq_len=args.seq_len)


def param_digest(model):
    """SHA-256 of the parameters' bytes: equal iff bitwise identical."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def assert_identical(model, step):
    mine = param_digest(model)
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    if any(d != mine for d in every):
        raise RuntimeError(f"step {step}: parameters differ across ranks "
                           f"({sorted(set(every))})")
    return mine


def gift_layers(model):
    """(gift layer name, parameter) in gift.init's naming: a 2-D nn.Linear
    weight is its module's name (blocks.0.attn.wq), any other parameter its
    own name (tok.weight)."""
    linear = {id(m.weight): name for name, m in model.named_modules()
              if isinstance(m, torch.nn.Linear)}
    return [(linear[id(p)] if id(p) in linear and p.dim() == 2 else name, p)
            for name, p in model.named_parameters() if p.requires_grad]


class DriftWindows:
    """The drift of the applied gradients over fixed windows of steps, and
    over every span of consecutive windows, measured by the script itself.

    Each rank sums its local gradients (what DDP hands the comm hook, before
    any quantization) and the applied ones (p.grad after the backward pass:
    the allreduce's result, the same on every rank). Averaging is linear, so
    the running sum of the per-step FP32 averages is the FP32 average of the
    ranks' local sums: one FP32 allreduce when a window closes gives it. Per
    layer, drift = ‖Σ applied − Σ FP32 avg‖ / ‖Σ FP32 avg‖ over the steps —
    libgift's audit_drift, over windows of our choosing instead of the steps
    between two audits ("model": the same RelL2 over every parameter at
    once). Rank 0 keeps each window's two sums (2 × 4 bytes per parameter
    and window) and at the end reports every span of consecutive windows,
    the whole run among them. The sums restart on --resume.
    """

    def __init__(self, model, window, keep):
        self.window, self.keep = window, keep
        self.layers = gift_layers(model)
        self.local = {id(p): torch.zeros_like(p) for _, p in self.layers}
        self.applied = {id(p): torch.zeros_like(p) for _, p in self.layers}
        self.first = None
        self.windows = []  # rank 0: (first, last, applied flat, FP32 flat)

    def wrap(self, inner):
        """A comm hook that adds the bucket's local gradients to the sums,
        then hands the bucket to `inner`."""
        def hook(state, bucket):
            with torch.no_grad():
                for p, g in zip(bucket.parameters(), bucket.gradients()):
                    self.local[id(p)].add_(g.view_as(p))
            return inner(state, bucket)
        return hook

    @torch.no_grad()
    def after_step(self, step):
        """After the backward pass of `step`; returns the figures of the
        window `step` closes (collective then), else None."""
        for _, p in self.layers:
            if p.grad is not None:
                self.applied[id(p)].add_(p.grad)
        if self.first is None:
            self.first = step
        if (step + 1) % self.window == 0:
            return self.close(step)
        return None

    def _flat(self, sums):
        return torch.cat([sums[id(p)].reshape(-1) for _, p in self.layers])

    def _figures(self, first, last, applied, ref):
        layers, err, norm, pos = {}, 0.0, 0.0, 0
        for name, p in self.layers:
            n = p.numel()
            e = (applied[pos:pos + n] - ref[pos:pos + n]).double().norm()
            r = ref[pos:pos + n].double().norm()
            pos += n
            e, r = e.item() ** 2, r.item() ** 2
            layers[name] = math.sqrt(e / r) if r > 0 else None
            err, norm = err + e, norm + r
        return {"first": first, "last": last, "steps": last + 1 - first,
                "layers": layers,
                "model": math.sqrt(err / norm) if norm > 0 else None}

    @torch.no_grad()
    def close(self, step):
        """Closes the open window at `step` (collective; None when empty)."""
        if self.first is None:
            return None
        ref = self._flat(self.local)
        dist.all_reduce(ref)
        ref /= dist.get_world_size()
        applied = self._flat(self.applied)
        out = self._figures(self.first, step, applied, ref)
        if self.keep:
            self.windows.append((self.first, step, applied, ref))
        for t in (*self.local.values(), *self.applied.values()):
            t.zero_()
        self.first = None
        return out

    @torch.no_grad()
    def spans(self, step):
        """Closes the open window (collective); rank 0: the drift over every
        span of consecutive windows, "FIRST-LAST" steps → figures."""
        self.close(step)
        out = {}
        for i, (first, _, applied, ref) in enumerate(self.windows):
            a, r = applied.clone(), ref.clone()
            for j in range(i, len(self.windows)):
                if j > i:
                    a += self.windows[j][2]
                    r += self.windows[j][3]
                last = self.windows[j][1]
                out[f"{first}-{last}"] = self._figures(first, last, a, r)
        return out


def format_options(args):
    """gift.init's format and error_feedback (modes euclid and gift)."""
    if args.mode not in ("euclid", "gift"):
        return {}
    out = {"format": args.format,
           "error_feedback": {"auto": None, "on": True,
                              "off": False}[args.error_feedback]}
    if args.owner_release_cap is not None:
        out["owner_release_cap"] = args.owner_release_cap
    return out


def lr_at(args, step):
    if step < args.warmup or args.schedule == "constant":
        return args.lr * min(1.0, (step + 1) / max(1, args.warmup))
    t = (step - args.warmup) / max(1, args.steps - 1 - args.warmup)
    return args.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, t))))


class Trainer:
    """One rank's model, optimizer, data and (unless mode ddp) GIFT state."""

    def __init__(self, args, rank, world):
        torch.set_num_threads(args.threads)
        self.args, self.rank, self.world = args, rank, world
        self.cfg = model_config(args)
        self.corpus = Corpus(self.cfg.seq_len, directory=args.corpus,
                             seed=args.seed)
        self.model = TinyLlama(self.cfg, seed=args.seed)
        self.ddp = DDP(self.model)
        self.gift = None
        self.drift = None
        self.window_drift = None  # the window closed by the last step
        if args.mode != "ddp":
            import gift  # noqa: PLC0415 -- only the GIFT modes need it
            self.gift = gift.init(self.ddp, mode=args.mode,
                                  **format_options(args),
                                  agent_socket=args.agent_socket,
                                  job_id=args.job_id,
                                  sketch_rows=args.sketch_rows,
                                  probe_interval=args.probe_interval,
                                  audit_interval=args.audit_interval,
                                  **({"audit_drift": True}
                                     if args.audit_drift else {}))
            hook = gift.comm_hook
            if args.drift_window > 0:
                self.drift = DriftWindows(self.model, args.drift_window,
                                          keep=rank == 0)
                hook = self.drift.wrap(hook)
            self.ddp.register_comm_hook(self.gift, hook)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=args.lr,
                                     betas=(0.9, 0.95), weight_decay=0.0)
        self.step = 0

    def train_step(self):
        """One optimizer step; returns the loss averaged over the ranks."""
        x, y = self.corpus.batch(self.step, self.rank, self.world,
                                 self.args.batch)
        for g in self.opt.param_groups:
            g["lr"] = lr_at(self.args, self.step)
        self.opt.zero_grad(set_to_none=True)
        loss = self.ddp(x, y)
        loss.backward()
        if self.drift is not None:
            self.window_drift = self.drift.after_step(self.step)
        self.opt.step()
        self.step += 1
        t = loss.detach().clone()
        dist.all_reduce(t)
        return t.item() / self.world

    @torch.no_grad()
    def val_loss(self):
        """The mean loss over the fixed held-out rows (--eval-rows)."""
        self.model.eval()
        x, y = self.corpus.val_batch(self.args.eval_rows)
        total = 0.0
        for i in range(0, len(x), 64):
            total += self.model(x[i:i + 64], y[i:i + 64]).item() * len(
                x[i:i + 64])
        self.model.train()
        return total / len(x)

    def state_dict(self):
        return {"step": self.step, "model": self.model.state_dict(),
                "opt": self.opt.state_dict(),
                "gift": self.gift.state_dict() if self.gift else None,
                "mode": self.args.mode, "world_size": self.world}

    def load_state_dict(self, s):
        if s["mode"] != self.args.mode or s["world_size"] != self.world:
            raise ValueError(f"checkpoint of mode {s['mode']} on "
                             f"{s['world_size']} ranks; this job is "
                             f"{self.args.mode} on {self.world}")
        self.model.load_state_dict(s["model"])
        self.opt.load_state_dict(s["opt"])
        if self.gift is not None:
            self.gift.load_state_dict(s["gift"])
        self.step = s["step"]

    def save(self, path):
        """Every rank writes path.rankR (GIFT state is per rank)."""
        tmp = f"{path}.rank{self.rank}.tmp"
        torch.save(self.state_dict(), tmp)
        os.replace(tmp, f"{path}.rank{self.rank}")

    def load(self, path):
        self.load_state_dict(torch.load(f"{path}.rank{self.rank}"))


def step_record(tr, loss, seconds):
    """The per-step log line (rank 0)."""
    rec = {"step": tr.step - 1, "loss": loss, "seconds": seconds,
           "time": time.time(), "lr": lr_at(tr.args, tr.step - 1)}
    if tr.gift is None:
        return rec
    t = tr.gift.last_telemetry
    rec.update({k: t[k] for k in ("plan_epoch", "probe_step", "bytes_euclid",
                                  "bytes_gift", "bytes_control",
                                  "transform_seconds")})
    linear = set(tr.model.linear_names())
    rec["layers"] = {
        l["name"]: {"path": l["path"], "v": l["factor_version"],
                    "rel_l2": l["rel_l2"],
                    "upper": l["upper"], "lower": l["lower"], "n": l["n"],
                    **({"probe_euclid": l["probe_euclid_rel_l2"],
                        "probe_gift": l["probe_gift_rel_l2"]}
                       if l["probed"] else {})}
        for l in t["layers"] if l["name"] in linear}
    if t["audit_step"]:
        # Every layer (also the 1-D ones, for whole-model figures), with its
        # element count and applied gradient's norm (the weights of a
        # model-wide RelL2).
        grads = {name: p.grad for name, p in gift_layers(tr.model)}
        rec["audit"] = {
            "seconds": t["audit_seconds"], "bytes": t["bytes_audit"],
            "layers": {
                l["name"]: {
                    "path": l["path"], "rel_l2": l["audit_rel_l2"],
                    "cosine": l["audit_cosine"],
                    "drift": l["audit_drift"] if l["drift_audited"] else None,
                    "drift_steps": l["drift_steps"],
                    "numel": grads[l["name"]].numel(),
                    "norm": grads[l["name"]].double().norm().item()}
                for l in t["layers"] if l["audited"]}}
    if tr.window_drift is not None:
        rec["drift_window"] = tr.window_drift
    return rec


class Progress:
    """A one-line progress bar on a terminal, periodic lines otherwise."""

    def __init__(self, kind, total, label):
        if kind == "auto":
            kind = "bar" if sys.stderr.isatty() else "lines"
        self.kind, self.total, self.label = kind, total, label
        self.start = time.monotonic()
        self.every = max(1, total // 10)

    def update(self, step, loss, extra):
        done = step + 1
        rate = (time.monotonic() - self.start) / max(1, done)
        text = (f"{self.label} step {done}/{self.total} loss {loss:.3f} "
                f"{extra}{rate:.2f} s/step")
        if self.kind == "bar":
            width = 24
            fill = width * done // self.total
            sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {text}")
            if done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif self.kind == "lines" and (done % self.every == 0
                                       or done == self.total):
            print(text, file=sys.stderr, flush=True)


def gift_extra(tr):
    if tr.gift is None:
        return ""
    s = tr.gift.stats()
    sent = s["bytes_euclid"] + s["bytes_gift"] + s["bytes_control"]
    ratio = sent / max(1, s["bytes_fp32_equivalent"])
    on = sum(1 for l in tr.gift.last_telemetry["layers"]
             if l["path"] == "gift")
    return f"| bytes {100 * ratio:.1f}% of fp32 | GIFT layers {on} | "


def run(rank, world, args):
    tr = Trainer(args, rank, world)
    if args.resume:
        tr.load(args.checkpoint)
    log = open(args.log, "a" if args.resume else "w") \
        if rank == 0 and args.log else None
    bar = Progress(args.progress if rank == 0 else "none",
                   args.steps, args.label or args.mode)
    digests = []
    spans = None
    try:
        while tr.step < args.steps:
            t0 = time.monotonic()
            loss = tr.train_step()
            seconds = time.monotonic() - t0
            if args.check_identical:
                digests.append(assert_identical(tr.model, tr.step - 1))
            if tr.step - 1 == args.checkpoint_at and args.checkpoint:
                tr.save(args.checkpoint)
            if rank != 0:
                continue
            rec = step_record(tr, loss, seconds)
            if args.check_identical:
                rec["digest"] = digests[-1]
            if args.eval_every and (tr.step % args.eval_every == 0
                                    or tr.step == args.steps):
                rec["val_loss"] = tr.val_loss()
            if log:
                log.write(json.dumps(rec) + "\n")
                log.flush()
            bar.update(tr.step - 1, loss, gift_extra(tr))
        if tr.drift is not None:
            spans = tr.drift.spans(tr.step - 1)  # collective
    finally:
        if log:
            log.close()
    if rank == 0 and args.summary:
        summary = {"mode": args.mode, "world_size": world,
                   "format": args.format,
                   "error_feedback": args.error_feedback,
                   "owner_release_cap": args.owner_release_cap,
                   "eval_rows": args.eval_rows,
                   "steps": tr.step, "config": vars(model_config(args)),
                   "parameters": sum(p.numel()
                                     for p in tr.model.parameters()),
                   "val_loss": tr.val_loss(),
                   "identical_steps": len(digests),
                   "audit_interval": args.audit_interval,
                   "drift_window": args.drift_window,
                   "drift_spans": spans,
                   "gift": tr.gift.stats() if tr.gift else None}
        with open(args.summary, "w") as f:
            json.dump(summary, f, indent=1, default=str)
    if tr.gift is not None:
        tr.gift.remove_hooks()


def _spawned(rank, world, init_file, args):
    dist.init_process_group("gloo", init_method=f"file://{init_file}",
                            rank=rank, world_size=world)
    try:
        run(rank, world, args)
    finally:
        dist.destroy_process_group()


def main(argv=None):
    args = parse_args(argv)
    if (args.resume or args.checkpoint_at >= 0) and not args.checkpoint:
        sys.exit("--resume and --checkpoint-at need --checkpoint")
    if args.mode not in ("euclid", "gift") and (
            args.format != "e4m3" or args.error_feedback != "auto"
            or args.owner_release_cap is not None):
        sys.exit("--format, --error-feedback and --owner-release-cap are "
                 "for modes euclid and gift")
    if args.eval_rows < 1:
        sys.exit("--eval-rows must be >= 1")
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun
        dist.init_process_group("gloo")
        try:
            run(dist.get_rank(), dist.get_world_size(), args)
        finally:
            dist.destroy_process_group()
        return
    with tempfile.TemporaryDirectory(prefix="gift-llama-") as d:
        # fork: the ranks inherit the imported torch (seconds per import).
        mp.start_processes(_spawned, nprocs=args.nproc, join=True,
                           args=(args.nproc, os.path.join(d, "init"), args),
                           start_method="fork")


if __name__ == "__main__":
    main()

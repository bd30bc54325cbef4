#!/usr/bin/python3
"""Generate real FP32 gradient / activation test data for GIFT (see DESIGN.md section 2).

Must be run with Debian's /usr/bin/python3 (torch 1.13 CPU + numpy); the pyenv `python3`
on PATH has neither. Example (this is what produced tests/data/):

    /usr/bin/python3 tools/gen_gradients.py --out tests/data

Trains a small Llama-style byte-level decoder (d_model 64, 2 blocks, 4 heads, RMSNorm, RoPE,
causal attention, SwiGLU MLP with fused fc1 = [gate; up] and fc2 = down projection) on the
license texts in /usr/share/common-licenses (ship with base-files on every Debian image).
Data parallelism is simulated: every step each of R = 4 workers draws its own micro-batch and
runs its own backward; the parameters are updated (AdamW) with the worker mean, as DDP does.

Forward/backward hooks on every fc1/fc2 nn.Linear capture the layer input a (rows x d_in) and
the output gradient delta (rows x d_out, the gradient of that worker's mean loss, so that the
worker's weight gradient is exactly delta^T a). Written (float32, C order, .npy):

  snap/stepSSS.<layer>.grad.npy    [R, d_out, d_in]  per-worker weight gradients
  snap/stepSSS.<layer>.A.npy       [d_in, d_in]      A = E[a a^T], mean over the rows of all R workers
  snap/stepSSS.<layer>.G.npy       [d_out, d_out]    G = E[delta delta^T], same rows
  snap/stepSSS.<layer>.Astale.npy  [d_in, d_in]      fc2 only: A at step SSS - 25
  snap/stepSSS.<layer>.acts.npy    [acts_rows, d_in] layer inputs sampled (seeded) from all rows
  run/<layer>.grad.npy             [T, R, d_out, d_in] consecutive steps start..start+T-1
  run/<layer>.A.npy                [d_in, d_in]      A at the run's first step
  manifest.json                    index of all of the above + config + per-step loss

Steps are 0-based: step s is the gradient computed at the parameters after s optimizer updates;
loss[s] is the mean over the R workers of their micro-batch loss at step s.
Output is deterministic for fixed arguments (fixed seeds, deterministic algorithms, 1 thread).
"""

import argparse
import hashlib
import json
import math
import os
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    sys.stderr.write("gen_gradients.py: %s\nRun it with Debian's /usr/bin/python3 "
                     "(torch + numpy), not the pyenv python3.\n" % e)
    sys.exit(2)

D_MODEL, N_LAYERS, N_HEADS, D_FF, VOCAB = 64, 2, 4, 128, 256
WORKERS = 4
MICRO_BATCH = 8
STALE_LAG = 25
CORPUS_DIR = "/usr/share/common-licenses"
RUN_LAYERS = ["blocks.0.mlp.fc2", "blocks.1.mlp.fc2"]


# ----------------------------------------------------------------------------- model
class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(seq_len, head_dim, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv)  # [T, hd/2]
    ang = torch.cat([ang, ang], dim=-1)                                  # [T, hd]
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):  # x [B, H, T, hd]
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
    return x * cos + rot * sin


class Attention(nn.Module):
    def __init__(self, d, n_heads):
        super().__init__()
        self.h = n_heads
        self.hd = d // n_heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, self.hd).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, D)
        return self.proj(y)


class SwiGLU(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.d_ff = d_ff
        self.fc1 = nn.Linear(d, 2 * d_ff, bias=False)  # fused [gate; up]
        self.fc2 = nn.Linear(d_ff, d, bias=False)      # down

    def forward(self, x):
        gate, up = self.fc1(x).split(self.d_ff, dim=-1)
        return self.fc2(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, d, n_heads, d_ff):
        super().__init__()
        self.norm1 = RMSNorm(d)
        self.attn = Attention(d, n_heads)
        self.norm2 = RMSNorm(d)
        self.mlp = SwiGLU(d, d_ff)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.norm1(x), cos, sin, mask)
        return x + self.mlp(self.norm2(x))


class Llama(nn.Module):
    def __init__(self, seq_len):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D_MODEL)
        self.blocks = nn.ModuleList([Block(D_MODEL, N_HEADS, D_FF) for _ in range(N_LAYERS)])
        self.norm = RMSNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB, bias=False)  # untied
        cos, sin = rope_tables(seq_len, D_MODEL // N_HEADS)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        mask = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
        for b in self.blocks:  # GPT-2/Llama-style scaled init of residual outputs
            nn.init.normal_(b.attn.proj.weight, std=0.02 / math.sqrt(2 * N_LAYERS))
            nn.init.normal_(b.mlp.fc2.weight, std=0.02 / math.sqrt(2 * N_LAYERS))

    def forward(self, idx):
        T = idx.shape[1]
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x, self.cos[:T], self.sin[:T], self.mask[:T, :T])
        return self.head(self.norm(x))


# ----------------------------------------------------------------------------- capture
class Capture:
    """Forward hook stores the layer input; a tensor hook on the output stores delta."""

    def __init__(self, model):
        self.active = False
        self.a, self.d = {}, {}
        self.layers = {}
        for name, mod in model.named_modules():
            if name.endswith("mlp.fc1") or name.endswith("mlp.fc2"):
                self.layers[name] = mod
                mod.register_forward_hook(self._fwd(name))

    def _fwd(self, name):
        def hook(mod, inp, out):
            if not self.active:
                return
            self.a[name] = inp[0].detach().reshape(-1, inp[0].shape[-1]).clone()

            def bwd(g):
                self.d[name] = g.detach().reshape(-1, g.shape[-1]).clone()
            out.register_hook(bwd)
        return hook

    def reset(self):
        self.a, self.d = {}, {}


# ----------------------------------------------------------------------------- helpers
def die(msg):
    sys.stderr.write("gen_gradients.py: error: %s\n" % msg)
    sys.exit(2)


def parse_steps(s):
    try:
        return sorted(set(int(x) for x in s.split(",") if x.strip() != ""))
    except ValueError:
        die("--snapshot-steps must be a comma separated list of integers, got %r" % s)


def load_corpus(corpus_dir):
    if not os.path.isdir(corpus_dir):
        die("corpus directory %s not found (expected the Debian license texts from base-files)"
            % corpus_dir)
    files = []
    for n in sorted(os.listdir(corpus_dir)):
        p = os.path.join(corpus_dir, n)
        if os.path.isfile(p) and not os.path.islink(p):  # symlinks (GPL -> GPL-3) are dups
            files.append(p)
    if not files:
        die("no corpus files found in %s" % corpus_dir)
    data = b"".join(open(p, "rb").read() for p in files)
    return files, data


def lr_at(step, steps, lr, warmup):
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * t)))


def save(out, rel, arr):
    arr = np.ascontiguousarray(np.asarray(arr, dtype=np.float32))
    path = os.path.join(out, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, arr, allow_pickle=False)
    return rel


def spectrum(A):
    ev = np.clip(np.linalg.eigvalsh(A.astype(np.float64))[::-1], 0.0, None)
    tr = ev.sum()
    p = ev / tr
    eff = math.exp(-(p[p > 0] * np.log(p[p > 0])).sum())  # entropy effective rank
    return ev, tr, eff, ev[0] / tr, ev[:min(32, len(ev))].sum() / tr


# ----------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(
        description="Train a tiny Llama-style model with 4 simulated data-parallel workers on "
                    "Debian license texts and dump per-worker FP32 gradients of the MLP layers, "
                    "activation covariances and activation samples for the GIFT tests. "
                    "Run with /usr/bin/python3 (needs torch + numpy).")
    ap.add_argument("--out", required=True, help="output directory (manifest.json, snap/, run/)")
    ap.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    ap.add_argument("--seed", type=int, default=1234, help="seed for init, data, sampling")
    ap.add_argument("--snapshot-steps", default="100,290",
                    help="comma-separated 0-based steps to snapshot all fc1/fc2 layers "
                         "(default 100,290)")
    ap.add_argument("--run-start", type=int, default=200,
                    help="first step of the consecutive-step run (default 200)")
    ap.add_argument("--run-steps", type=int, default=10, help="length of the run (default 10)")
    ap.add_argument("--acts-rows", type=int, default=512,
                    help="activation rows sampled per saved layer/step; 0 = none (default 512)")
    ap.add_argument("--acts-all-snapshots", default="fc2", choices=["none", "fc2", "all"],
                    help="which layers get activation samples at every snapshot step; every "
                         "layer always gets them at the last snapshot step (default fc2)")
    ap.add_argument("--seq-len", type=int, default=128, help="sequence length (default 128)")
    ap.add_argument("--lr", type=float, default=3e-3, help="peak AdamW lr (default 3e-3)")
    ap.add_argument("--warmup", type=int, default=30, help="linear warmup steps (default 30)")
    ap.add_argument("--corpus-dir", default=CORPUS_DIR,
                    help="directory of text files to train on (default %s)" % CORPUS_DIR)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = ap.parse_args()

    snaps = parse_steps(args.snapshot_steps)
    if args.steps <= 0:
        die("--steps must be positive")
    for s in snaps:
        if not 0 <= s < args.steps:
            die("snapshot step %d outside [0, %d)" % (s, args.steps))
    if args.run_steps < 1 or args.run_start < 0 or args.run_start + args.run_steps > args.steps:
        die("run %d..%d outside [0, %d)" % (args.run_start, args.run_start + args.run_steps - 1,
                                              args.steps))
    if args.acts_rows < 0 or args.acts_rows > WORKERS * MICRO_BATCH * args.seq_len:
        die("--acts-rows must be in [0, %d]" % (WORKERS * MICRO_BATCH * args.seq_len))
    if args.seq_len < 2:
        die("--seq-len must be >= 2")

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)

    files, data = load_corpus(args.corpus_dir)
    if len(data) < args.seq_len + 2:
        die("corpus too small (%d bytes)" % len(data))
    corpus = torch.tensor(np.frombuffer(data, dtype=np.uint8).astype(np.int64))
    print("corpus: %d files, %d bytes, sha256 %s" % (len(files), len(data),
                                                     hashlib.sha256(data).hexdigest()[:16]))

    model = Llama(args.seq_len)
    cap = Capture(model)
    layer_names = sorted(cap.layers)
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed + 1)  # data order
    rng = np.random.default_rng(args.seed + 2)          # activation row sampling

    os.makedirs(args.out, exist_ok=True)
    last_snap = snaps[-1] if snaps else None
    stale_steps = {s - STALE_LAG: s for s in snaps if s - STALE_LAG >= 0}
    run_range = range(args.run_start, args.run_start + args.run_steps)
    capture_steps = set(snaps) | set(stale_steps) | set(run_range)

    layers_meta = {}
    for n in layer_names:
        w = cap.layers[n].weight
        layers_meta[n] = {"kind": n.split(".")[-1], "d_out": int(w.shape[0]), "d_in": int(w.shape[1])}

    snapshots, stale_A, run_grads, run_A = [], {}, {n: [] for n in RUN_LAYERS}, {}
    losses = []
    max_check = 0.0
    t0 = time.time()
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        capturing = step in capture_steps
        cap.active = capturing
        acc = [torch.zeros_like(p) for p in params]
        wgrads = {n: [] for n in layer_names}   # per-worker weight grads
        acts = {n: [] for n in layer_names}
        dels = {n: [] for n in layer_names}
        step_loss = 0.0
        for r in range(WORKERS):
            starts = torch.randint(0, len(corpus) - args.seq_len - 1, (MICRO_BATCH,), generator=gen)
            batch = torch.stack([corpus[s:s + args.seq_len + 1] for s in starts.tolist()])
            x, y = batch[:, :-1], batch[:, 1:]
            cap.reset()
            model.zero_grad(set_to_none=True)
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
            loss.backward()
            step_loss += loss.item() / WORKERS
            for a, p in zip(acc, params):
                a.add_(p.grad)
            if capturing:
                for n in layer_names:
                    a_, d_ = cap.a[n], cap.d[n]
                    gw = cap.layers[n].weight.grad.detach().clone()
                    # consistency: per-worker grad must be delta^T a
                    err = ((d_.t() @ a_) - gw).norm() / gw.norm().clamp_min(1e-30)
                    max_check = max(max_check, float(err))
                    wgrads[n].append(gw)
                    acts[n].append(a_)
                    dels[n].append(d_)
        # DDP: all-reduce mean, then the optimizer step
        for a, p in zip(acc, params):
            p.grad = a / WORKERS
        opt.step()
        losses.append(step_loss)
        cap.active = False

        if capturing:
            allA = {n: torch.cat(acts[n]) for n in layer_names}
            def cov(m):
                return (m.t() @ m / m.shape[0]).numpy()
            if step in stale_steps:
                for n in layer_names:
                    if layers_meta[n]["kind"] == "fc2":
                        stale_A[(stale_steps[step], n)] = cov(allA[n])
            if step in run_range:
                for n in RUN_LAYERS:
                    run_grads[n].append(torch.stack(wgrads[n]).numpy())
                    if step == args.run_start:
                        run_A[n] = cov(allA[n])
            if step in snaps:
                for n in layer_names:
                    kind = layers_meta[n]["kind"]
                    base = "snap/step%03d.%s" % (step, n)
                    e = {"step": step, "layer": n,
                         "grad_workers": save(args.out, base + ".grad.npy",
                                              torch.stack(wgrads[n]).numpy()),
                         "a": save(args.out, base + ".A.npy", cov(allA[n])),
                         "g": save(args.out, base + ".G.npy", cov(torch.cat(dels[n]))),
                         "a_stale": None, "acts": None}
                    want_acts = args.acts_rows > 0 and (
                        step == last_snap or args.acts_all_snapshots == "all" or
                        (args.acts_all_snapshots == "fc2" and kind == "fc2"))
                    if want_acts:
                        rows = np.sort(rng.choice(allA[n].shape[0], args.acts_rows, replace=False))
                        e["acts"] = save(args.out, base + ".acts.npy", allA[n].numpy()[rows])
                    snapshots.append(e)
        if step % 25 == 0 or step == args.steps - 1:
            print("step %4d  loss %.4f  lr %.2e  elapsed %.1fs" %
                  (step, step_loss, opt.param_groups[0]["lr"], time.time() - t0), flush=True)

    # stale A are known only once the later snapshot is reached; write them now
    for e in snapshots:
        key = (e["step"], e["layer"])
        if key in stale_A:
            e["a_stale"] = save(args.out, "snap/step%03d.%s.Astale.npy" % key, stale_A[key])
    runs = []
    for n in RUN_LAYERS:
        runs.append({"layer": n, "start_step": args.run_start, "steps": args.run_steps,
                     "grad_workers": save(args.out, "run/%s.grad.npy" % n, np.stack(run_grads[n])),
                     "a": save(args.out, "run/%s.A.npy" % n, run_A[n]),
                     "acts": None})

    manifest = {
        "generator": "tools/gen_gradients.py", "version": 1, "seed": args.seed, "workers": WORKERS,
        "model": {"d_model": D_MODEL, "n_layers": N_LAYERS, "n_heads": N_HEADS, "d_ff": D_FF,
                  "vocab": VOCAB, "seq_len": args.seq_len, "micro_batch": MICRO_BATCH,
                  "steps": args.steps, "lr": args.lr},
        "corpus": files,
        "loss": [round(float(l), 6) for l in losses],
        "layers": layers_meta,
        "snapshots": snapshots,
        "runs": runs,
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")

    # ------------------------------------------------------------------ sanity self-check
    print("\ntrained %d steps in %.1fs; loss %.4f -> %.4f (mean of last 10: %.4f)" %
          (args.steps, time.time() - t0, losses[0], losses[-1], float(np.mean(losses[-10:]))))
    print("hook consistency max rel err |delta^T a - grad| / |grad| = %.2e" % max_check)
    print("%-5s %-18s %10s %10s %8s %8s %9s %9s" %
          ("step", "layer", "|g_mean|", "|g_w|avg", "effrank", "d_in", "top1/trA", "top32/trA"))
    for e in snapshots:
        g = np.load(os.path.join(args.out, e["grad_workers"]))
        A = np.load(os.path.join(args.out, e["a"]))
        _, _, eff, top1, top32 = spectrum(A)
        print("%-5d %-18s %10.3e %10.3e %8.2f %8d %9.3f %9.3f" %
              (e["step"], e["layer"], np.linalg.norm(g.mean(0)),
               float(np.mean([np.linalg.norm(w) for w in g])), eff, A.shape[0], top1, top32))
        if e["a_stale"]:
            As = np.load(os.path.join(args.out, e["a_stale"]))
            print("      %-18s stale-A (step %d) rel diff |A-As|/|A| = %.3f" %
                  ("", e["step"] - STALE_LAG, np.linalg.norm(A - As) / np.linalg.norm(A)))
    for r in runs:
        g = np.load(os.path.join(args.out, r["grad_workers"]))
        print("run %s steps %d..%d shape %s, |g_mean| per step %s" %
              (r["layer"], r["start_step"], r["start_step"] + r["steps"] - 1, list(g.shape),
               " ".join("%.2e" % np.linalg.norm(g[t].mean(0)) for t in range(g.shape[0]))))
    if not losses[-1] < losses[0] - 1.0:
        print("WARNING: loss did not go clearly down", file=sys.stderr)


if __name__ == "__main__":
    main()

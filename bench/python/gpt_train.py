#!/usr/bin/python3
"""A small GPT trained with PyTorch DDP on gloo, written the way a new user
would write it: torchrun-style environment, dist.init_process_group("gloo"),
DistributedDataParallel, AdamW, and one line to pick a gradient
communication hook. It knows nothing of the GIFT code beyond the three
lines of the README.

    # under torchrun (one process per host, or several on one host):
    torchrun --nnodes 4 --node_rank R --nproc_per_node 1 \\
        --master_addr 10.77.0.1 --master_port 29500 \\
        bench/python/gpt_train.py --mode gift --steps 20
    # or with the variables set by hand (what multihost_bench.py does):
    RANK=R WORLD_SIZE=4 LOCAL_RANK=0 MASTER_ADDR=10.77.0.1 MASTER_PORT=29500 \\
        bench/python/gpt_train.py --mode ddp

Model: nanoGPT-style decoder (token + learned position embedding, pre-LN
blocks of causal self-attention and a 4x GELU MLP, final LayerNorm, head
tied to the token embedding unless --untied), byte-level (vocab 256).
Default 6 layers, d = 320, 5 heads: 7.5 M parameters. Data: the bytes of
the text files in /usr/share/common-licenses; the batch of a step is a pure
function of (seed, step, rank), so every run sees the same data.

Modes (--mode):
  ddp       DDP's own FP32 allreduce (no hook)
  fp16      torch fp16_compress_hook
  powersgd  torch powerSGD_hook, rank --powersgd-rank (4), start_powerSGD_iter
            2 (its warm-up: plain allreduce before), error feedback, warm
            start; in ONE DDP bucket (with several, gloo aborts at the first
            compressed step, see train())
  euclid    gift.comm_hook, mode "euclid" (FP8, every layer Euclidean)
  gift      gift.comm_hook, mode "gift" (FP8 with the local giftd: its socket
            from $GIFT_AGENT_SOCKET, the job id from $GIFT_JOB_ID)

Measured: wall time of every step (zero_grad, forward, backward with the
gradient exchange, clip, optimizer step), the loss, and the bytes on the
wire from the interface counters of this rank's network interface
(/sys/class/net/IFACE/statistics/tx_bytes, IFACE = --iface, default
$GLOO_SOCKET_IFNAME or eth0) over the timed steps (after --warmup), so the
comparison does not depend on what a hook says it sent; gift modes also
report the payload bytes from state.stats(). --check-identical hashes all
parameters (SHA-256) after every step, all-gathers the digests and stops
with exit status 3 on the first difference. Rank 0 prints a progress line
per step and writes --json.
"""

import argparse
import datetime
import hashlib
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

MODES = ("ddp", "fp16", "powersgd", "euclid", "gift")
CORPUS = "/usr/share/common-licenses"


# ------------------------------------------------------------------ model ---
class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, block):
        super().__init__()
        assert d % heads == 0
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        # A plain attribute, not a buffer: DDP would broadcast a buffer
        # from rank 0 before every forward.
        self.mask = torch.tril(torch.ones(block, block, dtype=torch.bool))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, d, heads, block):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, block)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab=256, block=64, layers=6, d=320, heads=5,
                 tied=True):
        super().__init__()
        self.block = block
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.h = nn.ModuleList(Block(d, heads, block) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        if tied:
            self.lm_head.weight = self.wte.weight
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2's scaled residuals
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]),
                               targets.reshape(-1))


# ------------------------------------------------------------------- data ---
def load_corpus(folder=CORPUS):
    """The bytes of every regular file under `folder`, in name order."""
    parts = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for f in sorted(files):
            path = os.path.join(root, f)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as fh:
                    parts.append(fh.read())
    data = b"\n".join(parts)
    if len(data) < 4096:
        raise SystemExit(f"gpt_train: too little text under {folder}")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def batch(data, seed, step, rank, size, block):
    """Inputs and targets of (seed, step, rank): the same on every run."""
    key = hashlib.sha256(f"{seed}/{step}/{rank}".encode()).digest()
    g = torch.Generator().manual_seed(int.from_bytes(key[:8], "little"))
    ix = torch.randint(len(data) - block - 1, (size,), generator=g)
    x = torch.stack([data[i:i + block] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block] for i in ix])
    return x, y


# ---------------------------------------------------------------- helpers ---
def net_counters(iface):
    """(tx_bytes, rx_bytes) of `iface` in this network namespace, or None."""
    base = f"/sys/class/net/{iface}/statistics/"
    try:
        with open(base + "tx_bytes") as t, open(base + "rx_bytes") as r:
            return int(t.read()), int(r.read())
    except OSError:
        return None


def params_digest(module):
    h = hashlib.sha256()
    for _, p in module.named_parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.digest()


def digests_agree(module):
    """All ranks' SHA-256 of the parameters, and whether they are equal."""
    mine = torch.tensor(list(params_digest(module)), dtype=torch.uint8)
    got = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(got, mine)
    hexes = [bytes(g.tolist()).hex() for g in got]
    return hexes, len(set(hexes)) == 1


def gift_counters(state):
    """gift's own byte counters and its transform time (state.stats()):
    totals since init. bytes_sent is what this rank sent (gradients and
    control); the per-path totals come with it; bytes_vs_fp32 is a ratio,
    left out. transform_seconds: the whitening pairs' wall time."""
    s = state.stats()
    out = {k: v for k, v in s.items()
           if (k.startswith("bytes") and k != "bytes_vs_fp32"
               or k == "transform_seconds")
           and isinstance(v, (int, float)) and not isinstance(v, bool)}
    if "bytes_sent" not in out:  # an older gift: the sum of the paths
        out["bytes_sent"] = sum(out.get(k, 0) for k in
                                ("bytes_euclid", "bytes_gift", "bytes_control"))
    return out


def gift_path_layers(state):
    """The layers the last step sent on the GIFT path (state.stats())."""
    last = state.stats().get("last") or {}
    return sorted(str(l.get("name")) for l in last.get("layers") or []
                  if isinstance(l, dict) and l.get("path") == "gift")


def register_hook(ddp, mode, piece_mb=None, fmt=None, powersgd_rank=4):
    """Installs the mode's comm hook; returns (hook state, gift state)."""
    if mode == "ddp":
        return None, None
    if mode == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return None, None
    if mode == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        st = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=powersgd_rank,
            start_powerSGD_iter=2, use_error_feedback=True, warm_start=True)
        ddp.register_comm_hook(st, powerSGD_hook.powerSGD_hook)
        return st, None
    # The README's lines, nothing more (but for --gift-piece-mb and
    # --gift-format).
    import gift
    extra = {} if piece_mb is None else {"piece_mb": piece_mb}
    if fmt is not None:
        extra["format"] = fmt
    state = gift.init(ddp, mode=mode, **extra)
    ddp.register_comm_hook(state, gift.comm_hook)
    return state, state


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=MODES, default="ddp")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3,
                   help="steps before the timed ones (default 3: DDP's "
                        "bucket rebuild and PowerSGD's start are in them)")
    p.add_argument("--batch", type=int, default=4, help="sequences per rank")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=320)
    p.add_argument("--heads", type=int, default=5)
    p.add_argument("--untied", action="store_true",
                   help="a separate output head (default: tied to wte)")
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0,
                   help="clip the gradient norm (0: off)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int,
                   default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    p.add_argument("--iface", default=os.environ.get("GLOO_SOCKET_IFNAME")
                   or "eth0", help="interface whose counters are read")
    p.add_argument("--bucket-cap-mb", type=float, default=None,
                   help="DDP's bucket_cap_mb (default: DDP's own, 25); "
                        "not for powersgd, which runs one bucket")
    p.add_argument("--gift-piece-mb", type=float, default=None,
                   help="gift.init's piece_mb (default: gift's own, 4; 0 = "
                        "DDP's buckets whole, reduced when DDP hands them "
                        "over)")
    p.add_argument("--gift-format", default=None,
                   help="gift.init's format (e4m3, e5m2, nvfp4, mxfp4; "
                   "default: gift's own, e4m3)")
    p.add_argument("--powersgd-rank", type=int, default=4,
                   help="PowerSGD's matrix_approximation_rank (powersgd "
                   "mode; default 4)")
    p.add_argument("--pg-timeout", type=float, default=300,
                   help="seconds a collective may wait (default 300)")
    p.add_argument("--check-identical", action="store_true")
    p.add_argument("--json", default=None, help="rank 0 writes the run here")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    a = p.parse_args(argv)
    if a.steps <= a.warmup:
        p.error("--steps must exceed --warmup")
    if a.powersgd_rank < 1:
        p.error("--powersgd-rank must be >= 1")
    return a


# ------------------------------------------------------------------- main ---
def train(a, rank, world):
    torch.manual_seed(a.seed)  # the same initial model on every rank
    model = GPT(block=a.seq_len, layers=a.layers, d=a.d_model, heads=a.heads,
                tied=not a.untied)
    n_params = sum(p.numel() for p in model.parameters())
    if a.mode == "powersgd":
        # One bucket: with several, PowerSGD's second allreduce (issued from
        # a future callback on gloo's thread) of one bucket interleaves
        # differently with the next bucket's on different ranks, and gloo
        # aborts ("op.preamble.length <= op.nbytes", pair.cc) at the first
        # compressed step. DDP's first bucket is capped separately.
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 30
        ddp = DDP(model, bucket_cap_mb=1024)
    elif a.bucket_cap_mb is not None:
        ddp = DDP(model, bucket_cap_mb=a.bucket_cap_mb)
    else:
        ddp = DDP(model)
    _, gstate = register_hook(ddp, a.mode, a.gift_piece_mb, a.gift_format,
                              a.powersgd_rank)
    opt = torch.optim.AdamW(ddp.parameters(), lr=a.lr, betas=(0.9, 0.95),
                            weight_decay=a.weight_decay)
    data = load_corpus()
    if rank == 0 and not a.quiet:
        print(f"gpt_train: {a.mode}, {world} ranks, {n_params / 1e6:.2f} M "
              f"parameters, batch {a.batch}x{a.seq_len} per rank, "
              f"{a.steps} steps ({a.warmup} warm-up)", flush=True)

    steps, mismatch = [], None
    window = {}  # counters at the start of the timed steps
    for step in range(a.steps):
        if step == a.warmup:
            window = {"net": net_counters(a.iface), "t": time.perf_counter(),
                      "cpu": time.process_time(),
                      "gift": gift_counters(gstate) if gstate else None}
        x, y = batch(data, a.seed, step, rank, a.batch, a.seq_len)
        net0 = net_counters(a.iface)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ddp(x, y)
        t1 = time.perf_counter()
        loss.backward()  # returns once DDP has every bucket's result
        t2 = time.perf_counter()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(ddp.parameters(), a.grad_clip)
        opt.step()
        dt = time.perf_counter() - t0
        net1 = net_counters(a.iface)
        # forward / backward with the wait for the last bucket's result
        rec = {"step": step, "seconds": dt, "loss": float(loss),
               "forward_seconds": t1 - t0, "backward_seconds": t2 - t1}
        if net0 and net1:
            rec["tx_bytes"] = net1[0] - net0[0]
            rec["rx_bytes"] = net1[1] - net0[1]
        if gstate is not None:  # the layers this step whitened
            rec["gift_path"] = gift_path_layers(gstate)
        if a.check_identical:
            hexes, same = digests_agree(model)
            rec["sha256"] = hexes[rank]
            if not same:
                mismatch = {"step": step, "digests": hexes}
        steps.append(rec)
        if rank == 0 and not a.quiet:
            wire = (f" tx {rec['tx_bytes'] / 1e6:.2f} MB"
                    if "tx_bytes" in rec else "")
            if "gift_path" in rec:
                wire += f", {len(rec['gift_path'])} layers on the GIFT path"
            print(f"  [{a.mode}] step {step + 1}/{a.steps} loss(r0) "
                  f"{rec['loss']:.4f} {dt:.3f} s{wire}"
                  + (" params identical" if a.check_identical and not mismatch
                     else ""), flush=True)
        if mismatch:
            break
    # Every rank's sends of the last step have left once the others
    # answered a barrier; then the window closes.
    dist.barrier()
    end = {"net": net_counters(a.iface), "t": time.perf_counter(),
           "cpu": time.process_time(),
           "gift": gift_counters(gstate) if gstate else None}
    timed = [s for s in steps if s["step"] >= a.warmup]
    mine = {"rank": rank, "steps": steps,
            "netns_addr": os.environ.get("GIFT_NETNS_ADDR")}
    if window.get("net") and end["net"] and timed:
        mine["wire_tx_bytes_per_step"] = (end["net"][0] - window["net"][0]) \
            / len(timed)
        mine["wire_rx_bytes_per_step"] = (end["net"][1] - window["net"][1]) \
            / len(timed)
    if "cpu" in window and timed:
        # This rank's process CPU (every thread: torch, the hook's
        # communication thread, Gloo) per timed step.
        mine["cpu_seconds_per_step"] = (end["cpu"] - window["cpu"]) \
            / len(timed)
    if gstate is not None:
        if window.get("gift") is not None and timed:
            mine["gift_bytes_per_step"] = {
                k: (end["gift"][k] - window["gift"].get(k, 0)) / len(timed)
                for k in end["gift"]}
        s = gstate.stats()
        mine["gift_attachment"] = {
            k: v for k, v in (s.get("attachment") or {}).items()
            if isinstance(v, (int, float, str, bool))}
        mine["gift_plan_epoch"] = s.get("plan_epoch")
        for k in ("rendezvous", "endpoint"):  # how libgift met its peers
            if s.get(k) is not None:
                mine["gift_" + k] = s[k] if isinstance(
                    s[k], (str, int, float, bool, dict, list)) else str(s[k])
        mine["gift_path_layers"] = gift_path_layers(gstate)
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        report(a, world, n_params, everyone, mismatch)
    return mismatch


def report(a, world, n_params, ranks, mismatch):
    timed = [i for i, s in enumerate(ranks[0]["steps"]) if s["step"] >= a.warmup]
    # A step takes as long as its slowest rank.
    per_step = [max(r["steps"][i]["seconds"] for r in ranks) for i in timed]
    losses = [sum(r["steps"][i]["loss"] for r in ranks) / world
              for i in range(len(ranks[0]["steps"]))]
    out = {"mode": a.mode, "world_size": world, "parameters": n_params,
           "steps": a.steps, "warmup": a.warmup, "batch": a.batch,
           "seq_len": a.seq_len, "layers": a.layers, "d_model": a.d_model,
           "tied": not a.untied, "iface": a.iface,
           "fp32_ring_bytes_per_step": 2 * (world - 1) / world * 4 * n_params,
           "loss": losses, "ranks": ranks}
    if per_step:
        out["seconds_per_step_median"] = statistics.median(per_step)
        out["seconds_per_step"] = per_step
    wire = [r["wire_tx_bytes_per_step"] for r in ranks
            if "wire_tx_bytes_per_step" in r]
    if wire:
        out["wire_tx_bytes_per_rank_step"] = sum(wire) / len(wire)
    cpu = [r["cpu_seconds_per_step"] for r in ranks
           if "cpu_seconds_per_step" in r]
    if cpu:
        out["cpu_seconds_per_rank_step"] = sum(cpu) / len(cpu)
    gb = [r["gift_bytes_per_step"] for r in ranks if "gift_bytes_per_step" in r]
    if gb:
        out["gift_bytes_per_rank_step"] = {
            k: sum(g[k] for g in gb) / len(gb) for k in gb[0]
            if k.startswith("bytes")}
        ts = [g["transform_seconds"] for g in gb if "transform_seconds" in g]
        if ts:
            out["transform_seconds_per_rank_step"] = sum(ts) / len(ts)
    if a.check_identical:
        out["identical"] = mismatch is None
        out["mismatch"] = mismatch
    if not a.quiet:
        med = out.get("seconds_per_step_median")
        msg = f"gpt_train: {a.mode}: "
        msg += f"{med:.3f} s/step (median of {len(per_step)})" if med else "-"
        if wire:
            msg += f", wire {out['wire_tx_bytes_per_rank_step'] / 1e6:.2f} " \
                   "MB/rank/step"
        if gb:
            pay = out["gift_bytes_per_rank_step"]["bytes_sent"]
            msg += f", gift bytes_sent {pay / 1e6:.2f} MB/rank/step"
        msg += f", final loss {losses[-1]:.4f}"
        print(msg, flush=True)
        if mismatch:
            print(f"gpt_train: parameters differ across ranks after step "
                  f"{mismatch['step']}: {mismatch['digests']}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


def main(argv=None):
    a = parse_args(argv)
    torch.set_num_threads(max(1, a.threads))
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group(
        "gloo", timeout=datetime.timedelta(seconds=a.pg_timeout))
    try:
        mismatch = train(a, rank, world)
    finally:
        dist.destroy_process_group()
    return 3 if mismatch else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""DDP + gift against plain DDP on one GPU (bench/device/run.sh).

One NCCL rank (NCCL refuses two ranks on one device), a GPT-style model of
6 pre-norm transformer layers (d = 768, 12 heads, vocab 4096: ~50 M
parameters), batch 8 × 256 tokens, AdamW. Modes side by side, interleaved
in rounds: ddp (PyTorch's own allreduce), gift fp32 (libgift's plain
allreduce through the hook), gift euclid (two-phase FP8, pieces reduced
while the backward pass runs) and euclid@0 (DDP's buckets whole). Step time is
measured with CUDA events around forward + backward + optimizer step
(median over the timed steps); the ratio against ddp is the figure. With
one rank nothing crosses a network, so this measures the hook's own cost on
the device (casts, quantization kernels, the side stream), not the byte
saving. Prints one table; --json writes the numbers.

Usage: PYTHONPATH=build-device/python python3 bench/device/ddp_gift_gpu.py
"""

import argparse
import json
import statistics
import sys
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Gpt(nn.Module):
    def __init__(self, vocab=4096, d=768, heads=12, layers=6, ctx=256):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0,
                                           activation="gelu", batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(
            torch.full((ctx, ctx), float("-inf")), diagonal=1))

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        x = self.blocks(x, mask=self.mask[:t, :t])
        return self.head(self.norm(x))


def make(mode, gift):
    torch.manual_seed(0)
    model = Gpt().cuda()
    ddp = DDP(model, device_ids=[0])
    state = None
    if mode != "ddp":
        # "euclid@0": gift.init's piece_mb 0 (DDP's buckets whole, reduced
        # when DDP hands them over), beside the default pieces.
        base, _, piece = mode.partition("@")
        extra = {"piece_mb": float(piece)} if piece else {}
        state = gift.init(ddp, mode=base, backend="nccl",
                          agent_socket="/nonexistent/agent", **extra)
        ddp.register_comm_hook(state, gift.comm_hook)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    return ddp, opt, state


def step(ddp, opt, idx):
    opt.zero_grad(set_to_none=True)
    logits = ddp(idx[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                       idx[:, 1:].reshape(-1))
    loss.backward()
    opt.step()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20, help="timed steps per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("ddp_gift_gpu: no CUDA device; nothing to measure")
        return 0
    import gift
    torch.cuda.set_device(0)
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group("nccl", init_method=f"file://{d}/init",
                                rank=0, world_size=1)
        modes = ["ddp", "fp32", "euclid", "euclid@0"]
        runs = {}
        for m in modes:
            try:
                runs[m] = make(m, gift)
            except Exception as e:  # noqa: BLE001 -- report, go on
                print(f"{m}: cannot start: {e}")
        g = torch.Generator(device="cuda").manual_seed(1)
        idx = torch.randint(0, 4096, (8, 257), device="cuda", generator=g)
        times = {m: [] for m in runs}
        for m, (ddp, opt, _) in runs.items():
            for _ in range(args.warmup):
                step(ddp, opt, idx)
        torch.cuda.synchronize()
        for r in range(args.rounds):
            for m, (ddp, opt, _) in runs.items():
                for _ in range(args.steps):
                    a = torch.cuda.Event(enable_timing=True)
                    b = torch.cuda.Event(enable_timing=True)
                    a.record()
                    step(ddp, opt, idx)
                    b.record()
                    b.synchronize()
                    times[m].append(a.elapsed_time(b))
        base = statistics.median(times["ddp"]) if times.get("ddp") else None
        out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "params": sum(p.numel() for p in runs["ddp"][0].parameters())
               if "ddp" in runs else None, "modes": {}}
        print(f"DDP + gift vs DDP on {out['gpu']} (torch {out['torch']}, "
              f"{out['params']} parameters, batch 8 x 256)")
        print(f"{'mode':<8} {'ms/step':>9} {'p90':>9} {'vs ddp':>7}")
        for m, t in times.items():
            med = statistics.median(t)
            p90 = sorted(t)[int(0.9 * (len(t) - 1))]
            ratio = med / base if base else float("nan")
            out["modes"][m] = {"median_ms": med, "p90_ms": p90, "ratio": ratio}
            print(f"{m:<8} {med:9.2f} {p90:9.2f} {ratio:7.3f}")
        for m, (_, _, state) in runs.items():
            if state is not None:
                state.close()
        dist.destroy_process_group()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

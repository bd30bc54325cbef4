"""A small Llama-style decoder and a byte-level text corpus for the GIFT
examples, tests and benchmarks (no downloads: the corpus is the license
texts every Debian system ships in /usr/share/common-licenses).

    from tiny_llama import Config, TinyLlama, Corpus
    cfg = Config()                         # ~0.9 M parameters
    model = TinyLlama(cfg)
    data = Corpus(cfg.seq_len)
    x, y = data.batch(step, rank, world_size, batch_per_rank=8)

Model: token embedding, `layers` pre-norm blocks (RMSNorm, causal
multi-head attention with rotary position embeddings, SwiGLU MLP), a final
RMSNorm and an untied output projection. Every projection is an nn.Linear
without bias, named like Llama's (blocks.3.attn.wq, blocks.3.mlp.w2,
lm_head), so `gift.init` maps each to a layer of the same name.

Batches are a pure function of (seed, step): the global batch of a step is
the same for any world size, and rank r takes rows [r·B, (r+1)·B).
"""

import dataclasses
import glob
import math
import os

import torch
from torch import nn
from torch.nn import functional as F

CORPUS_DIR = "/usr/share/common-licenses"


@dataclasses.dataclass
class Config:
    vocab: int = 256        # bytes
    dim: int = 128
    layers: int = 4
    heads: int = 4
    ffn: int = 344          # SwiGLU hidden size (≈ 8/3 · dim)
    seq_len: int = 64
    rope_base: float = 10000.0


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) \
            * self.weight


def rotary(seq_len, head_dim, base):
    """cos, sin tables (seq_len × head_dim/2) of the rotary embedding."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(seq_len).float(), inv)
    return angles.cos(), angles.sin()


def apply_rotary(x, cos, sin):
    """x: batch × heads × seq × head_dim; rotates pairs (even, odd)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos),
                       dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads = cfg.heads
        self.head_dim = cfg.dim // cfg.heads
        self.wq = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        shape = (b, t, self.heads, self.head_dim)
        q = self.wq(x).view(shape).transpose(1, 2)
        k = self.wk(x).view(shape).transpose(1, 2)
        v = self.wv(x).view(shape).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.wo(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn, bias=False)  # gate
        self.w3 = nn.Linear(cfg.dim, cfg.ffn, bias=False)  # up
        self.w2 = nn.Linear(cfg.ffn, cfg.dim, bias=False)  # down

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.dim)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class TinyLlama(nn.Module):
    def __init__(self, cfg, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.dim)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        cos, sin = rotary(cfg.seq_len, cfg.dim // cfg.heads, cfg.rope_base)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02
                if name.endswith(("wo.weight", "w2.weight")):
                    std /= math.sqrt(2 * cfg.layers)  # GPT-2's residual scaling
                nn.init.normal_(p, std=std)

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        x = self.tok(idx)
        for block in self.blocks:
            x = block(x, self.cos[:t], self.sin[:t])
        logits = self.lm_head(self.norm(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               targets.reshape(-1))

    def linear_names(self):
        return [n for n, m in self.named_modules() if isinstance(m, nn.Linear)]


class Corpus:
    """Bytes of the license texts; 95% for training, the rest held out."""

    def __init__(self, seq_len, directory=CORPUS_DIR, seed=0):
        files = sorted({os.path.realpath(p)
                        for p in glob.glob(os.path.join(directory, "*"))
                        if os.path.isfile(p)})
        if not files:
            raise FileNotFoundError(
                f"no text in {directory} (Debian's base-files ships it)")
        raw = b"\n\n".join(open(p, "rb").read() for p in files)
        data = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()
        split = int(len(data) * 0.95)
        self.train, self.val = data[:split], data[split:]
        self.seq_len = seq_len
        self.seed = seed
        self.files = len(files)

    def _rows(self, data, starts):
        idx = starts[:, None] + torch.arange(self.seq_len + 1)[None, :]
        rows = data[idx]
        return rows[:, :-1], rows[:, 1:]

    def batch(self, step, rank, world_size, batch_per_rank):
        """This rank's (inputs, targets), each batch_per_rank × seq_len."""
        g = torch.Generator().manual_seed(self.seed * 1000003 + step)
        total = batch_per_rank * world_size
        starts = torch.randint(0, len(self.train) - self.seq_len - 1,
                               (total,), generator=g)
        mine = starts[rank * batch_per_rank:(rank + 1) * batch_per_rank]
        return self._rows(self.train, mine)

    def val_batch(self, rows):
        """A fixed held-out batch (the same on every rank and every call)."""
        stride = max(1, (len(self.val) - self.seq_len - 1) // rows)
        starts = torch.arange(rows) * stride
        return self._rows(self.val, starts)

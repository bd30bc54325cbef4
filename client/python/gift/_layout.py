"""How gift sees a model's gradients: layers, buckets and pieces.

Layout: the trainable parameters as libgift layers, in the order of
module.named_parameters(): nn.Linear weights 2-D layers named by the
module's qualified name, every other parameter a 1-D layer under its own
name. Bucket: a run of layers at offsets (one of DDP's buckets as libgift
sees it, or a piece of one). Pieces cuts runs of layers into pieces of at
most piece_mb MB of FP32 gradient and keeps the plan (pieces in order) of a
step whose DDP buckets are known.

    layout = Layout.of(module)
    pieces = Pieces(layout, piece_mb=4.0)
    plan = pieces.plan(ddp_bucket_layouts)

Thread safety: Layout is immutable after construction. Pieces and
BucketViews cache what they computed; a cache entry is written whole (one
dict assignment, atomic under the GIL), so the training thread and the
communication thread may both call them.
"""

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import nn

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# (layers, offsets, elements): what DDP's buckets of a step were.
BucketLayout = Tuple[Tuple[int, ...], Tuple[int, ...], int]


class Bucket:
    """A run of layers and their offsets in a flat buffer of `elements`."""

    __slots__ = ("key", "layers", "offsets", "elements")

    def __init__(self, key: Any, layers: Sequence[int],
                 offsets: Sequence[int], elements: int):
        self.key, self.layers = key, list(layers)
        self.offsets, self.elements = list(offsets), int(elements)

    def layout(self) -> BucketLayout:
        return (tuple(self.layers), tuple(self.offsets), self.elements)


class Plan(NamedTuple):
    """An armed step's pieces in order, and where each layer is in them:
    layer -> (piece index, offset in the piece)."""

    pieces: List[Bucket]
    where: Dict[int, Tuple[int, int]]


def dense_strides(t: torch.Tensor) -> Optional[Tuple[int, ...]]:
    """t's strides when its elements fill its memory without gaps or
    overlap (any dimension order: DDP then lays its gradient out in a bucket
    with these strides), else None (DDP lays it out row-major)."""
    expect = 1
    for d in sorted(range(t.dim()), key=t.stride):
        if t.size(d) == 1:
            continue
        if t.stride(d) != expect:
            return None
        expect *= t.size(d)
    return tuple(t.stride())


class Layout:
    """The libgift layers of a module (immutable)."""

    def __init__(self, layers, index, total, strides):
        self._layers = tuple(layers)   # (name, shape, offset)
        self._index = dict(index)      # id(parameter) -> layer
        self._total = int(total)
        self._sizes = tuple((s[0] * s[1]) if len(s) == 2 else s[0]
                            for _, s, _ in self._layers)
        self._strides = dict(strides)  # layer -> (shape, strides or None)

    @classmethod
    def of(cls, module: nn.Module) -> "Layout":
        """The layers of `module`'s trainable parameters; TypeError for a
        parameter gift cannot reduce."""
        linear = {}
        for name, m in module.named_modules():
            if isinstance(m, nn.Linear):
                linear[id(m.weight)] = (name or "weight", m)
        layers, index, strides, offset = [], {}, {}, 0
        for name, p in module.named_parameters():
            if not p.requires_grad:
                continue
            if p.dtype not in FLOAT_DTYPES:
                raise TypeError(
                    f"gift: parameter {name} is {p.dtype}; gift reduces "
                    "float32, bfloat16 and float16 gradients (convert the "
                    "parameter, or freeze it with requires_grad_(False))")
            n = p.numel()
            if id(p) in linear and p.dim() == 2:
                layer = linear[id(p)][0]
                shape = [p.shape[0], p.shape[1]]
            else:
                layer, shape = name, [n]
            strides[len(layers)] = (tuple(p.shape), dense_strides(p))
            index[id(p)] = len(layers)
            layers.append((layer, shape, offset))
            offset += n
        return cls(layers, index, offset, strides)

    @property
    def layers(self) -> Tuple[Tuple[str, List[int], int], ...]:
        """(name, shape, offset) per layer, as libgift's Session takes them."""
        return self._layers

    @property
    def names(self) -> Tuple[str, ...]:
        return tuple(n for n, _, _ in self._layers)

    @property
    def total(self) -> int:
        """Elements of all layers together."""
        return self._total

    def layer_of(self, param: torch.Tensor) -> Optional[int]:
        """`param`'s layer, or None (frozen, or not of this module)."""
        return self._index.get(id(param))

    def size(self, layer: int) -> int:
        return self._sizes[layer]

    def grad_view(self, work: torch.Tensor, layer: int,
                  offset: int) -> torch.Tensor:
        """The part of a flat buffer at `offset` for `layer`, shaped like
        its parameter and laid out as DDP lays it out in its buckets (the
        parameter's strides when dense, else row-major)."""
        shape, strides = self._strides[layer]
        if strides is not None:
            return work.as_strided(shape, strides, offset)
        return work[offset:offset + self._sizes[layer]].view(shape)


class BucketViews:
    """DDP's buckets (torch GradBuckets) as gift Buckets, cached: DDP
    rebuilds its buckets once, after the first iteration."""

    def __init__(self, layout: Layout):
        self._layout = layout
        self._views: Dict[Any, Bucket] = {}

    def of(self, bucket: Any) -> Bucket:
        params = bucket.parameters()
        key = (bucket.index(), tuple(id(p) for p in params))
        b = self._views.get(key)
        if b is not None:
            return b
        layers, offsets, pos = [], [], 0
        for p in params:
            i = self._layout.layer_of(p)
            if i is None:
                raise RuntimeError("gift: a DDP bucket holds a parameter that "
                                   "gift.init did not see (init with the same "
                                   "model DDP wraps)")
            layers.append(i)
            offsets.append(pos)
            pos += p.numel()
        if pos != bucket.buffer().numel():
            raise RuntimeError(f"gift: DDP bucket {bucket.index()} holds "
                               f"{bucket.buffer().numel()} elements, its "
                               f"parameters {pos}")
        b = Bucket(key, layers, offsets, pos)
        self._views[key] = b
        return b


class Pieces:
    """The pieces (libgift buckets) that runs of layers are cut into."""

    def __init__(self, layout: Layout, piece_elements: int):
        self._layout = layout
        self._piece_elements = int(piece_elements)
        self._cuts: Dict[Tuple[int, ...], List[Bucket]] = {}
        self._plans: Dict[Tuple[BucketLayout, ...], Plan] = {}

    @property
    def enabled(self) -> bool:
        """False with piece_mb 0: DDP's buckets are reduced whole."""
        return self._piece_elements > 0

    def of(self, layers: Tuple[int, ...]) -> List[Bucket]:
        """The pieces of a run of layers: consecutive layers of at most
        piece_mb MB of FP32 gradient each (a larger layer alone); the whole
        run when piece_mb is 0."""
        pieces = self._cuts.get(layers)
        if pieces is not None:
            return pieces
        size = self._layout.size
        pieces, run, n = [], [], 0
        for i in layers + (None,):
            s = size(i) if i is not None else 0
            if run and (i is None or (self._piece_elements > 0 and
                                      n + s > self._piece_elements)):
                offsets = [0]
                for j in run[:-1]:
                    offsets.append(offsets[-1] + size(j))
                pieces.append(Bucket(None, run, offsets, n))
                run, n = [], 0
            if i is not None:
                run.append(i)
                n += s
        self._cuts[layers] = pieces
        return pieces

    def plan(self, source: Tuple[BucketLayout, ...]) -> Plan:
        """The pieces of a step whose DDP buckets (layouts) are `source`."""
        plan = self._plans.get(source)
        if plan is None:
            pieces = [p for layers, _, _ in source
                      for p in self.of(tuple(layers))]
            where = {l: (k, off) for k, p in enumerate(pieces)
                     for l, off in zip(p.layers, p.offsets)}
            plan = Plan(pieces, where)
            self._plans = {source: plan}  # DDP's buckets change rarely
        return plan

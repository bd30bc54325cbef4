"""The messages the training path sends to the communication thread.

Typed (NamedTuple), never positional tuples; immutable once sent. The
tensors and futures they carry are handed over: the sender does not touch
them again until the bucket's future completes.
"""

from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

import torch

from gift._layout import Bucket, Plan


class GradSource(NamedTuple):
    """Where a layer's gradient is: a parameter's .grad (position None) or
    DDP's bucket at `position`; `event` (device only) was recorded on
    autograd's stream after it was written."""

    tensor: torch.Tensor
    position: Optional[int]
    event: Optional[Any]


class Forward(NamedTuple):
    """A forward pass will be followed by a synchronising backward: the
    step's pieces (`plan`), or None to reduce DDP's buckets as they come."""

    plan: Optional[Plan]


class PieceReady(NamedTuple):
    """All gradients of the armed step's piece `index` are there (handed
    over strictly in the plan's order)."""

    index: int
    piece: Bucket
    sources: Sequence[GradSource]


# After load_state_dict: the saved buckets inside one of DDP's, each with
# (position in DDP's bucket, offset in the saved one, elements) per layer.
Split = Optional[List[Tuple[Bucket, List[Tuple[int, int, int]]]]]


class BucketReady(NamedTuple):
    """DDP handed over a bucket: `future` completes with `buffer` reduced.
    `view` is None and `error` set when the hook failed before it knew the
    bucket; `last` is DDP's last bucket of the step."""

    view: Optional[Bucket]
    split: Split
    buffer: Optional[torch.Tensor]
    future: torch.futures.Future
    event: Optional[Any]
    last: bool
    error: Optional[BaseException]


class Stop(NamedTuple):
    """Ends the communication thread."""

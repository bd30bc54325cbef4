"""Every feature test of the torch version in one place.

gift runs on torch 1.13 and later: where a public API exists it is used,
else the private one of the older torch. Functions only; no state.
"""

import datetime
from typing import Any, Optional

import torch
import torch.distributed as dist

_DEFAULT_TIMEOUT_SECONDS = 1800.0  # PyTorch's default process group timeout


def global_rank(group: Any, group_rank: int) -> int:
    """The global rank of `group`'s rank `group_rank`."""
    if group is dist.group.WORLD:
        return group_rank
    get = getattr(dist, "get_global_rank", None)  # torch 1.13+ public
    if get is None:
        get = dist.distributed_c10d._get_global_rank
    return get(group, group_rank)


def default_store() -> Any:
    """The job's c10d store (torchrun's TCPStore), or None. torch has no
    public accessor for it."""
    get = getattr(dist.distributed_c10d, "_get_default_store", None)
    if get is None or not dist.is_initialized():
        return None
    try:
        return get()
    except (RuntimeError, ValueError):
        return None


def group_timeout(store: Any) -> float:
    """The process group's timeout in seconds (PyTorch's default 30 min)."""
    t = getattr(store, "timeout", None) if store is not None else None
    if isinstance(t, datetime.timedelta) and t.total_seconds() > 0:
        return t.total_seconds()
    default = getattr(dist, "default_pg_timeout", None) or getattr(
        dist.distributed_c10d, "default_pg_timeout", None)
    if isinstance(default, datetime.timedelta):
        return default.total_seconds()
    return _DEFAULT_TIMEOUT_SECONDS


def future(device: Optional[torch.device]) -> torch.futures.Future:
    """A future, aware of `device`'s streams where torch can (then DDP's
    consumer stream waits on the stream current when it completes)."""
    if device is None:
        return torch.futures.Future()
    try:
        return torch.futures.Future(devices=[device])
    except TypeError:  # torch without device-aware futures
        return torch.futures.Future()


def has_post_accumulate_grad_hook(param: torch.Tensor) -> bool:
    """torch 2.1+: Tensor.register_post_accumulate_grad_hook."""
    return hasattr(param, "register_post_accumulate_grad_hook")


def accumulate_grad_node(param: torch.Tensor) -> Any:
    """torch < 2.1: the AccumulateGrad node of `param` (keep it alive while
    a hook on it is wanted; DDP keeps it too)."""
    with torch.enable_grad():
        return param.view_as(param).grad_fn.next_functions[0][0]



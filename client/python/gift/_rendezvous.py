"""How a rank's libgift session finds its peers, agreed on by every rank.

Every rank must rendezvous the same way and in a fresh namespace: all
ranks use giftd when every rank sees its socket; rank 0 picks the job id, a
per-run key prefix and (only with store_dir, or without a c10d store) a
fresh folder, and broadcasts them. Without giftd the job's own c10d store
serves.

    group = default_group(process_group)
    r = rendezvous(group, rank, options)       # collective over `group`
    session = _gift.NativeRank(session_options(r, ...), layers, total)

Thread safety: collective; call on every rank of the group, from the
training thread.
"""

import logging
import os
import tempfile
import uuid
from typing import Any, Dict, NamedTuple, Optional

import torch
import torch.distributed as dist

from gift import _compat, _gift
from gift._options import Options

log = logging.getLogger("gift")


class Rendezvous(NamedTuple):
    """What every rank agreed on."""

    kind: str                 # "giftd", "folder", "torch.distributed store"
    job_id: str
    key_prefix: str
    store_dir: Optional[str]  # the fresh folder (kind "folder")
    store: Any                # the c10d store libgift uses, or None
    agent_socket: str
    timeout_seconds: float


def default_group(process_group: Any) -> Any:
    """`process_group`, else the world group when torch.distributed is
    initialised, else None (one rank)."""
    if process_group is None and dist.is_available() and dist.is_initialized():
        return dist.group.WORLD
    return process_group


def broadcast(obj: Any, group: Any) -> Any:
    """Rank 0's `obj` on every rank of `group` (no-op without a group)."""
    if group is None:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=_compat.global_rank(group, 0),
                               group=group)
    return box[0]


def all_true(flag: bool, group: Any) -> bool:
    """True on every rank iff `flag` is true on every rank of `group`."""
    if group is None:
        return flag
    # An NCCL group reduces device tensors only.
    device = ("cuda" if dist.get_backend(group) == dist.Backend.NCCL
              else "cpu")
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=group)
    return bool(t.item())


def _timeout(options: Options, store: Any, rank: int) -> float:
    if options.timeout_seconds is not None:
        return float(options.timeout_seconds)
    timeout = _compat.group_timeout(store)
    if rank == 0:
        log.info("gift: collective timeout %.0f s (the process group's; "
                 "pass timeout_seconds to change it)", timeout)
    return float(timeout)


def rendezvous(group: Any, rank: int, options: Options) -> Rendezvous:
    """Agrees with every rank of `group` on how to rendezvous (collective);
    rank 0 makes the fresh folder when one is used."""
    # The one default, libgift's (common/agent_socket.h).
    socket = options.agent_socket or _gift.default_agent_socket()
    store = _compat.default_store() if group is not None else None
    timeout = _timeout(options, store, rank)
    use_daemon = all_true(os.path.exists(socket), group)
    use_folder = not use_daemon and (options.store_dir is not None
                                     or store is None)
    shared = None
    if rank == 0:
        nonce = uuid.uuid4().hex[:12]
        folder = None
        if use_folder:
            base = (options.store_dir if options.store_dir is not None
                    else tempfile.gettempdir())
            os.makedirs(base, exist_ok=True)
            folder = tempfile.mkdtemp(prefix=f"gift-{nonce}-", dir=base)
        shared = (options.job_id or os.environ.get("GIFT_JOB_ID")
                  or f"gift-{nonce}", f"gift/run-{nonce}/", folder)
    job, prefix, folder = broadcast(shared, group)
    kind = ("giftd" if use_daemon else
            "folder" if use_folder else "torch.distributed store")
    return Rendezvous(kind, job, prefix, folder,
                      None if use_daemon or use_folder else store, socket,
                      timeout)


def session_options(r: Rendezvous, options: Options, rank: int,
                    world_size: int, device: torch.device) -> Dict[str, Any]:
    """The options of libgift's Session (gift._gift.NativeRank)."""
    return {
        "mode": options.mode, "backend": options.backend, "rank": rank,
        "device": device.index or 0,
        "world_size": world_size,
        "local_rank": int(os.environ.get("LOCAL_RANK", rank)),
        "daemon_store": r.kind == "giftd", "store_dir": r.store_dir,
        "store": r.store, "key_prefix": r.key_prefix,
        "agent_socket": r.agent_socket, "job_id": r.job_id,
        "probe_interval": int(options.probe_interval),
        "audit_interval": int(options.audit_interval),
        "audit_drift": bool(options.audit_drift),
        "timeout_seconds": r.timeout_seconds,
        "socket_ifname": options.socket_ifname,
        "format": options.format or "",
        "error_feedback": options.error_feedback_name,
        "owner_release_cap": float(options.owner_release_cap),
    }

"""GIFT for PyTorch DDP: FP8 gradient allreduce with geometry (libgift).

    import gift
    ddp = DistributedDataParallel(model)
    state = gift.init(ddp, mode="gift")          # attaches to the local giftd
    ddp.register_comm_hook(state, gift.comm_hook)
    ...                                           # train as usual
    torch.save({"model": ddp.state_dict(), "gift": state.state_dict()}, path)
    state.load_state_dict(torch.load(path)["gift"])   # on resume

Modes: "fp32" and "bf16" (plain allreduce in that precision), "euclid" (FP8
two-phase allreduce, every layer Euclidean, no daemon) and "gift" (FP8 with
the local giftd's plans and whitening factors; without a daemon it runs
Euclidean and keeps trying to attach).

How DDP's buckets are handled: libgift runs ONE bucket plan over ALL
trainable parameters (a flat float32 buffer in named_parameters() order, the
nn.Linear weights as 2-D layers named by their module's qualified name, every
other parameter 1-D under its own qualified name) and ONE allreduce per
iteration. The comm hook copies each GradBucket into the flat buffer at its
parameters' offsets and returns a pending future; when the last bucket of
the iteration arrives (bucket.is_last()), it runs the allreduce once, copies
the averaged gradients back into every bucket and completes all the futures.
DDP calls the hook in bucket order and waits on the futures only when the
backward pass ends, so this is correct; it holds through the single
first-iteration bucket and through DDP's bucket rebuild after it (buckets
are mapped parameter by parameter, so their layout does not matter). Why
one plan: the plan, the daemon's plan epochs, the per-step agreement and the
factors are per plan, and the daemon attachment declares the layers of one
plan; per-bucket plans would change with the rebuild and would need one
attachment each. The price: no overlap of communication with the backward
pass (a CPU hook runs synchronously anyway).

Thread safety: one GiftState per rank, used from the training thread.
"""

import os
import tempfile
import uuid

import torch
import torch.distributed as dist
from torch import nn

from gift import _gift

__all__ = ["init", "comm_hook", "GiftState", "MODES"]

MODES = ("fp32", "bf16", "euclid", "gift")
_STATE_VERSION = 1


def _broadcast(obj, group):
    """Rank 0's `obj` on every rank of `group` (no-op without a group)."""
    if group is None:
        return obj
    box = [obj]
    src = 0
    if group is not dist.group.WORLD:
        src = dist.distributed_c10d._get_global_rank(group, 0)
    dist.broadcast_object_list(box, src=src, group=group)
    return box[0]


def _all_true(flag, group):
    if group is None:
        return flag
    t = torch.tensor([1 if flag else 0], dtype=torch.int32)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=group)
    return bool(t.item())


def _layout(module):
    """(layers, offsets by parameter, total): the flat plan of `module`."""
    linear = {}
    for name, m in module.named_modules():
        if isinstance(m, nn.Linear):
            linear[id(m.weight)] = (name or "weight", m)
    layers, by_param, offset = [], {}, 0
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        if p.dtype != torch.float32:
            raise TypeError(f"gift: parameter {name} is {p.dtype}; float32 only")
        n = p.numel()
        if id(p) in linear:
            layer = linear[id(p)][0]
            shape = [p.shape[0], p.shape[1]]
        else:
            layer, shape = name, [n]
        layers.append((layer, shape, offset))
        by_param[id(p)] = (offset, n)
        offset += n
    return layers, by_param, offset


class GiftState:
    """Per-rank state: pass to ddp.register_comm_hook with gift.comm_hook."""

    def __init__(self, model, process_group=None, mode="gift", agent_socket=None,
                 job_id=None, sketch_rows=512, probe_interval=10,
                 store_dir=None, timeout_seconds=60.0, backend="gloo"):
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"gift: backend {backend!r} (gloo, nccl)")
        if mode not in MODES:
            raise ValueError(f"gift: unknown mode {mode!r} ({', '.join(MODES)})")
        module = getattr(model, "module", model)  # DDP wraps the model
        if process_group is None and dist.is_available() and dist.is_initialized():
            process_group = dist.group.WORLD
        self.group = process_group
        self.rank = dist.get_rank(process_group) if process_group else 0
        self.world_size = (dist.get_world_size(process_group)
                           if process_group else 1)
        self.mode = mode
        self.sketch_rows = max(1, int(sketch_rows))
        self._layers, self._by_param, self._total = _layout(module)
        self._module = module
        # nccl: the flat buffer lives on this rank's GPU and goes to libgift
        # as a device pointer; gloo: host memory (CUDA buckets are staged).
        self._device = (torch.device("cuda", torch.cuda.current_device())
                        if backend == "nccl" else torch.device("cpu"))
        self._flat = torch.zeros(self._total, dtype=torch.float32,
                                 device=self._device)
        self._pending = []
        self._filled = 0
        self.last_telemetry = None
        self._totals = {"steps": 0, "bytes_euclid": 0, "bytes_gift": 0,
                        "bytes_control": 0, "seconds": 0.0}
        socket = (agent_socket or os.environ.get("GIFT_AGENT_SOCKET")
                  or "/tmp/gift/agent.sock")
        # Every rank must rendezvous the same way and in a fresh namespace:
        # rank 0 picks the job id, a per-run key prefix and the store folder.
        use_daemon = _all_true(os.path.exists(socket), process_group)
        if use_daemon or store_dir is not None:
            base = store_dir
        else:
            base = tempfile.gettempdir()
        shared = None
        if self.rank == 0:
            nonce = uuid.uuid4().hex[:12]
            folder = None
            if not use_daemon:
                os.makedirs(base, exist_ok=True)
                folder = tempfile.mkdtemp(prefix=f"gift-{nonce}-", dir=base)
            shared = (job_id or os.environ.get("GIFT_JOB_ID")
                      or f"gift-{nonce}", f"run-{nonce}/", folder)
        job, prefix, folder = _broadcast(shared, process_group)
        self.job_id = job
        self._store_dir = folder
        options = {
            "mode": mode, "backend": backend, "rank": self.rank,
            "device": self._device.index or 0,
            "world_size": self.world_size,
            "local_rank": int(os.environ.get("LOCAL_RANK", self.rank)),
            "daemon_store": use_daemon, "store_dir": folder,
            "key_prefix": prefix, "agent_socket": socket, "job_id": job,
            "probe_interval": int(probe_interval),
            "timeout_seconds": float(timeout_seconds),
        }
        self.session = _gift.Session(options, self._layers, self._total)
        self._hooks = []
        if mode == "gift":
            self._register_forward_hooks(module)

    # ---- activation sketches (DESIGN §2) --------------------------------
    def _register_forward_hooks(self, module):
        for name, m in module.named_modules():
            if isinstance(m, nn.Linear) and m.weight.requires_grad:
                hook = self._make_sketch_hook(name or "weight", m.in_features)
                self._hooks.append(m.register_forward_hook(hook))

    def _make_sketch_hook(self, layer, d_in):
        def hook(module, inputs, output):
            if not (module.training and torch.is_grad_enabled()):
                return
            if not self.session.wants_sketch(layer):
                return
            x = inputs[0].detach().reshape(-1, d_in)
            rows = x.shape[0]
            if rows == 0:
                return
            n = min(rows, self.sketch_rows)
            x = x[::rows // n][:n].float().contiguous()  # fixed stride
            if x.is_cuda:
                torch.cuda.current_stream(x.device).synchronize()
                self.session.sketch_ptr(layer, x.data_ptr(), n)
            else:
                self.session.sketch(layer, x.numpy())
        return hook

    def remove_hooks(self):
        for h in self._hooks:
            h.remove()
        self._hooks = []

    # ---- the comm hook ----------------------------------------------------
    def _slices(self, bucket):
        """(flat offset, bucket offset, n) of each parameter of `bucket`."""
        out, pos = [], 0
        for p in bucket.parameters():
            at = self._by_param.get(id(p))
            if at is None:
                raise RuntimeError("gift: a DDP bucket holds a parameter that "
                                   "gift.init did not see (init with the same "
                                   "model DDP wraps)")
            out.append((at[0], pos, at[1]))
            pos += at[1]
        return out

    def _gather(self, bucket):
        buf = bucket.buffer()
        slices = self._slices(bucket)
        flat = self._flat
        for off, pos, n in slices:
            flat[off:off + n].copy_(buf[pos:pos + n])
            self._filled += n
        return buf, slices

    def _run(self):
        if self._filled != self._total:
            raise RuntimeError(f"gift: the iteration's buckets held {self._filled}"
                               f" of {self._total} gradient elements")
        if self._flat.is_cuda:
            torch.cuda.current_stream(self._flat.device).synchronize()
            t = self.session.step_ptr(self._flat.data_ptr())
        else:
            t = self.session.step(self._flat.numpy())
        self.last_telemetry = t
        self._totals["steps"] += 1
        for k in ("bytes_euclid", "bytes_gift", "bytes_control", "seconds"):
            self._totals[k] += t[k]

    def hook(self, bucket):
        fut = torch.futures.Future()
        last = False
        try:
            buf, slices = self._gather(bucket)
            self._pending.append((buf, slices, fut))
            last = bucket.is_last()
            if last:
                self._run()
        except Exception as e:  # noqa: BLE001 -- DDP raises it in its wait
            futs = [f for _, _, f in self._pending]
            if not any(f is fut for f in futs):
                futs.append(fut)
            self._pending, self._filled = [], 0
            for f in futs:
                f.set_exception(e)
            return fut
        if last:
            for b, sl, f in self._pending:
                for off, pos, n in sl:
                    b[pos:pos + n].copy_(self._flat[off:off + n])
                f.set_result(b)
            self._pending, self._filled = [], 0
        return fut

    # ---- stats and checkpoints -------------------------------------------
    def stats(self):
        """Totals since init, the last step's telemetry and the attachment."""
        s = dict(self._totals)
        s["mode"] = self.mode
        s["world_size"] = self.world_size
        s["elements"] = self._total
        w = self.world_size
        # A ring allreduce in FP32 sends 2 (W - 1) / W of the payload per rank.
        s["bytes_fp32_equivalent"] = (
            self._totals["steps"] * 2 * (w - 1) * self._total * 4 // w)
        s["plan_epoch"] = self.session.current_epoch()
        s["attachment"] = self.session.attachment_stats()
        s["last"] = self.last_telemetry
        return s

    def state_dict(self):
        """Residuals, factors, plans and step counter: plain picklable data."""
        return {"version": _STATE_VERSION, "mode": self.mode,
                "world_size": self.world_size, "rank": self.rank,
                "layers": [(n, list(s), o) for n, s, o in self._layers],
                "allreduce": self.session.export_state()}

    def load_state_dict(self, state):
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"gift: state version {state.get('version')}")
        mine = [(n, list(s), o) for n, s, o in self._layers]
        if state["mode"] != self.mode or state["world_size"] != self.world_size \
                or [tuple(x) for x in state["layers"]] != [tuple(x) for x in mine]:
            raise ValueError("gift: the state is of another mode, world size "
                             "or model layout")
        self.session.import_state(state["allreduce"])


def init(model, process_group=None, mode="gift", agent_socket=None, job_id=None,
         sketch_rows=512, probe_interval=10, store_dir=None,
         timeout_seconds=60.0, backend="gloo"):
    """Creates this rank's GiftState (collective over `process_group`).

    model: the DDP model or the module it wraps. process_group: default the
    world group (None and torch.distributed not initialised: one rank).
    agent_socket: giftd's Agent socket (default $GIFT_AGENT_SOCKET, else
    /tmp/gift/agent.sock); when every rank sees it, the communicator also
    rendezvouses through it; otherwise through a fresh folder under
    `store_dir` (default the temp dir; must be shared across hosts).
    job_id: the daemon's name for the job (default $GIFT_JOB_ID, which
    deploy/slurm/gift-srun sets, else a fresh id; a multi-node job's daemons
    serve one job id, so its ranks must use it).
    backend: "gloo" (host buffers; CUDA gradients are staged through the
    host) or "nccl" (a flat buffer on the current CUDA device, reduced in
    device memory by libgift's NCCL path; needs a CUDA build).
    """
    return GiftState(model, process_group, mode, agent_socket, job_id,
                     sketch_rows, probe_interval, store_dir, timeout_seconds,
                     backend)


def comm_hook(state, bucket):
    """DDP comm hook: ddp.register_comm_hook(state, gift.comm_hook)."""
    return state.hook(bucket)

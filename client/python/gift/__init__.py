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
Euclidean, says so once, and keeps trying to attach).

How it overlaps with the backward pass: gift does not wait for DDP to hand
over a bucket. It cuts the gradient into pieces of about `piece_mb` MB
(whole layers, in the order of DDP's buckets of the previous step, so the
same on every rank) and a piece is reduced by this rank's communication
thread, with libgift's own communicator, as soon as autograd has
accumulated its layers' gradients, while the backward pass computes the
next ones. DDP's buckets are large (25 MB by default): most of a model's
gradient sits in one, handed over only near the end of the backward pass.
The comm hook returns a pending future at once; it completes when every
piece of its bucket is reduced (the results copied into the bucket), and
DDP's wait at the end of backward finds them done. One step is one libgift
step: the agreement on plan epoch and factor versions runs once, with the
first piece; the last bucket closes the step (telemetry, the daemon's
windows). A step whose pieces are not known yet (the first, or one after
DDP's buckets changed) reduces DDP's buckets as DDP hands them over, cut
into the same pieces. No-sync passes (ddp.no_sync()) start nothing. On GPUs
(backend="nccl") the thread makes libgift's side stream wait on CUDA events
recorded on autograd's stream when a gradient was accumulated and when a
bucket was handed over, and completes the future (created with
devices=[...]) with that stream current, so DDP's consumer stream waits on
it and no host thread of the training path ever synchronises the device.

Layers: every trainable parameter of float32, bfloat16 or float16 (a
bucket of another float type is reduced in an FP32 copy, the FP8 codes and
the FP32 accumulation are the same); nn.Linear weights are 2-D layers named
by the module's qualified name (candidates for GIFT), every other parameter
a 1-D layer under its own name. Thread safety: one GiftState per rank.
"""

import atexit
import contextlib
import datetime
import logging
import os
import queue
import tempfile
import threading
import time
import uuid
import weakref

import torch
import torch.distributed as dist
from torch import nn

from gift import _gift
from gift._gift import GiftError

__all__ = ["init", "comm_hook", "GiftState", "GiftError", "MODES"]

MODES = ("fp32", "bf16", "euclid", "gift")
_STATE_VERSION = 2  # 2: overlapped buckets
_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
log = logging.getLogger("gift")
_LIVE = weakref.WeakSet()  # states to close before the interpreter exits


@atexit.register
def _close_all():
    # A training script rarely closes its state: stop the communication
    # threads and free libgift's sessions (their Gloo and daemon threads)
    # while the interpreter is whole, not during its finalisation.
    for state in list(_LIVE):
        state.close()


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
    # An NCCL group reduces device tensors only.
    device = ("cuda" if dist.get_backend(group) == dist.Backend.NCCL
              else "cpu")
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=group)
    return bool(t.item())


def _default_store():
    """The job's c10d store (torchrun's TCPStore), or None."""
    get = getattr(dist.distributed_c10d, "_get_default_store", None)
    if get is None or not dist.is_initialized():
        return None
    try:
        return get()
    except (RuntimeError, ValueError):
        return None


def _group_timeout(store):
    """The process group's timeout in seconds (PyTorch's default 30 min)."""
    t = getattr(store, "timeout", None) if store is not None else None
    if isinstance(t, datetime.timedelta) and t.total_seconds() > 0:
        return t.total_seconds()
    default = getattr(dist, "default_pg_timeout", None) or getattr(
        dist.distributed_c10d, "default_pg_timeout", None)
    if isinstance(default, datetime.timedelta):
        return default.total_seconds()
    return 1800.0


def _layout(module):
    """(layers, layer index by parameter, total): the plan of `module`."""
    linear = {}
    for name, m in module.named_modules():
        if isinstance(m, nn.Linear):
            linear[id(m.weight)] = (name or "weight", m)
    layers, index, offset = [], {}, 0
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        if p.dtype not in _FLOAT_DTYPES:
            raise TypeError(
                f"gift: parameter {name} is {p.dtype}; gift reduces float32, "
                "bfloat16 and float16 gradients (convert the parameter, or "
                "freeze it with requires_grad_(False))")
        n = p.numel()
        if id(p) in linear and p.dim() == 2:
            layer = linear[id(p)][0]
            shape = [p.shape[0], p.shape[1]]
        else:
            layer, shape = name, [n]
        index[id(p)] = len(layers)
        layers.append((layer, shape, offset))
        offset += n
    return layers, index, offset


class _Bucket:
    """One DDP bucket as libgift sees it: its layers and their offsets."""

    __slots__ = ("key", "layers", "offsets", "elements")

    def __init__(self, key, layers, offsets, elements):
        self.key, self.layers = key, list(layers)
        self.offsets, self.elements = list(offsets), int(elements)

    def layout(self):
        return (tuple(self.layers), tuple(self.offsets), self.elements)


class _Plan:
    """An armed step's pieces in order, and where each layer is in them."""

    __slots__ = ("pieces", "where")

    def __init__(self, pieces, where):
        self.pieces, self.where = pieces, where


def _dense_strides(t):
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


class GiftState:
    """Per-rank state: pass to ddp.register_comm_hook with gift.comm_hook."""

    def __init__(self, model, process_group=None, mode="gift", agent_socket=None,
                 job_id=None, sketch_rows=512, probe_interval=10,
                 store_dir=None, timeout_seconds=None, backend="gloo",
                 socket_ifname=None, audit_interval=100, audit_drift=False,
                 piece_mb=4.0):
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"gift: backend {backend!r} (gloo, nccl)")
        if mode not in MODES:
            raise ValueError(f"gift: unknown mode {mode!r} ({', '.join(MODES)})")
        module = getattr(model, "module", model)  # DDP wraps the model
        if process_group is None and dist.is_available() and dist.is_initialized():
            process_group = dist.group.WORLD
        # Neither the group nor the module is kept: a state that held the
        # group would keep torch's gloo threads alive after the script's
        # destroy_process_group(), into the interpreter's finalisation,
        # where they abort the process (terminate called without an active
        # exception) when they drop a tensor.
        self.rank = dist.get_rank(process_group) if process_group else 0
        self.world_size = (dist.get_world_size(process_group)
                           if process_group else 1)
        self.mode = mode
        self.sketch_rows = max(1, int(sketch_rows))
        self._layers, self._index, self._total = _layout(module)
        self._device = (torch.device("cuda", torch.cuda.current_device())
                        if backend == "nccl" else torch.device("cpu"))
        self.last_telemetry = None
        self._totals = {"steps": 0, "bytes_euclid": 0, "bytes_gift": 0,
                        "bytes_control": 0, "bytes_audit": 0, "audit_steps": 0,
                        "audit_seconds": 0.0, "seconds": 0.0}
        self._buckets = {}
        self._sizes = [(s[0] * s[1]) if len(s) == 2 else s[0]
                       for _, s, _ in self._layers]
        self._pinned = None       # the buckets of a loaded checkpoint
        piece_mb = float(piece_mb)
        if not 0 <= piece_mb < 2**30:
            raise ValueError(f"gift: piece_mb {piece_mb} (MB of FP32 gradient "
                             "per piece, >= 0; 0 = DDP's buckets whole)")
        self._piece_elements = int(piece_mb * 2**20) // 4
        self._cuts = {}           # layers -> their pieces
        self._plans = {}          # DDP's bucket layouts -> _Plan
        self._strides = {}        # layer -> (shape, strides or None)
        self._accumulators = []   # torch < 2.1: the hooked AccumulateGrad nodes
        self._hooked = False      # gift's comm hook has run
        self._sync = False        # the next backward pass synchronises
        # The armed step, kept by the thread that runs autograd's hooks (the
        # communication thread hears of a piece once it is complete: one
        # wake-up per piece, not per parameter).
        self._plan = None         # this step's pieces (_Plan), or None
        self._next_piece = 0      # the next piece to hand over
        self._avail = {}          # layer -> (tensor, position or None, event)
        self._fired = {}          # layer -> accumulations in this backward
        self._expected = {}       # layer -> accumulations in the previous one
        self._pinned_layouts = set()
        self._attached_logged = False
        socket = (agent_socket or os.environ.get("GIFT_AGENT_SOCKET")
                  or "/tmp/gift/agent.sock")
        store = _default_store() if process_group is not None else None
        if timeout_seconds is None:
            timeout_seconds = _group_timeout(store)
            if self.rank == 0:
                log.info("gift: collective timeout %.0f s (the process "
                         "group's; pass timeout_seconds to change it)",
                         timeout_seconds)
        self.timeout_seconds = float(timeout_seconds)
        # Every rank must rendezvous the same way and in a fresh namespace:
        # rank 0 picks the job id, a per-run key prefix and (only with
        # store_dir) a folder. Without giftd the job's own c10d store serves.
        use_daemon = _all_true(os.path.exists(socket), process_group)
        use_folder = not use_daemon and (store_dir is not None
                                         or store is None)
        shared = None
        if self.rank == 0:
            nonce = uuid.uuid4().hex[:12]
            folder = None
            if use_folder:
                base = store_dir if store_dir is not None else tempfile.gettempdir()
                os.makedirs(base, exist_ok=True)
                folder = tempfile.mkdtemp(prefix=f"gift-{nonce}-", dir=base)
            shared = (job_id or os.environ.get("GIFT_JOB_ID")
                      or f"gift-{nonce}", f"gift/run-{nonce}/", folder)
        job, prefix, folder = _broadcast(shared, process_group)
        self.job_id = job
        self._store_dir = folder
        self.rendezvous = ("giftd" if use_daemon else
                           "folder" if use_folder else "torch.distributed store")
        options = {
            "mode": mode, "backend": backend, "rank": self.rank,
            "device": self._device.index or 0,
            "world_size": self.world_size,
            "local_rank": int(os.environ.get("LOCAL_RANK", self.rank)),
            "daemon_store": use_daemon, "store_dir": folder,
            "store": None if use_daemon or use_folder else store,
            "key_prefix": prefix, "agent_socket": socket, "job_id": job,
            "probe_interval": int(probe_interval),
            "audit_interval": int(audit_interval),
            "audit_drift": bool(audit_drift),
            "timeout_seconds": self.timeout_seconds,
            "socket_ifname": socket_ifname,
        }
        self.session = _gift.Session(options, self._layers, self._total)
        self.agent_socket = socket
        if mode == "gift" and not use_daemon and self.rank == 0:
            log.warning(
                "gift: no giftd reachable at %s (on every rank): every layer "
                "goes Euclidean FP8 until one starts; retrying in the "
                "background (start giftd, or set GIFT_AGENT_SOCKET)", socket)
        self._hooks = []
        if mode == "gift":
            self._register_forward_hooks(module)
        self._comm = _CommThread(self)
        if (self._piece_elements > 0 and
                getattr(model, "require_backward_grad_sync", None) is not None):
            self._register_grad_hooks(model, module)
        _LIVE.add(self)

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
                self._sketch_device(layer, x, n)
            else:
                self.session.sketch(layer, x.numpy())
        return hook

    def _sketch_device(self, layer, x, n):
        stream = torch.cuda.current_stream(x.device)
        self.session.sketch_ptr(layer, x.data_ptr(), n, stream.cuda_stream)
        side = self.session.sketch_stream()
        if side:
            # The caching allocator must not hand x out again before the
            # sketch stream has read it.
            x.record_stream(torch.cuda.ExternalStream(side, device=x.device))

    def remove_hooks(self):
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self._accumulators = []

    # ---- the comm hook ----------------------------------------------------
    def _bucket(self, bucket):
        """The libgift view of `bucket` (cached; DDP rebuilds its buckets
        once, after the first iteration)."""
        params = bucket.parameters()
        key = (bucket.index(), tuple(id(p) for p in params))
        b = self._buckets.get(key)
        if b is not None:
            return b
        layers, offsets, pos = [], [], 0
        for p in params:
            i = self._index.get(id(p))
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
        b = _Bucket(key, layers, offsets, pos)
        self._buckets[key] = b
        return b

    def hook(self, bucket):
        cuda = self._device.type == "cuda"
        fut = _future(self._device if cuda else None)
        view = split = buf = event = error = None
        try:
            buf = bucket.buffer()
            if buf.is_cuda != cuda:
                raise RuntimeError(
                    f"gift: a {buf.device} gradient bucket with backend "
                    f"{'nccl' if cuda else 'gloo'} (use backend="
                    f"{'nccl' if buf.is_cuda else 'gloo'!r})")
            view = self._bucket(bucket)
            split = self._split(view)
            if cuda:
                event = torch.cuda.Event()
                event.record(torch.cuda.current_stream(buf.device))
        except Exception as e:  # noqa: BLE001 -- DDP raises it in its wait
            error = e
        self._hooked = True
        if view is not None and self._plan is not None:
            for layer, pos in zip(view.layers, view.offsets):
                self._avail.setdefault(layer, (buf, pos, event))
            self._hand_over_pieces()
        self._comm.submit(("bucket", view, split, buf, fut, event,
                           bucket.is_last(), error))
        return fut

    # ---- pieces: reduced while the backward pass computes ----------------
    def _pieces_of(self, layers):
        """The pieces (libgift buckets) of a run of layers: consecutive
        layers of at most piece_mb MB of FP32 gradient each (a larger layer
        alone); the whole run when piece_mb is 0."""
        pieces = self._cuts.get(layers)
        if pieces is None:
            pieces, run, n = [], [], 0
            for i in layers + (None,):
                size = self._sizes[i] if i is not None else 0
                if run and (i is None or (self._piece_elements > 0 and
                                          n + size > self._piece_elements)):
                    offsets = [0]
                    for j in run[:-1]:
                        offsets.append(offsets[-1] + self._sizes[j])
                    pieces.append(_Bucket(None, run, offsets, n))
                    run, n = [], 0
                if i is not None:
                    run.append(i)
                    n += size
            self._cuts[layers] = pieces
        return pieces

    def _plan_of(self, source):
        """The pieces of a step whose DDP buckets (layouts) are `source`."""
        plan = self._plans.get(source)
        if plan is None:
            pieces = [p for layers, _, _ in source for p in self._pieces_of(
                tuple(layers))]
            where = {l: (k, off) for k, p in enumerate(pieces)
                     for l, off in zip(p.layers, p.offsets)}
            plan = _Plan(pieces, where)
            self._plans = {source: plan}  # DDP's buckets change rarely
        return plan

    def _register_grad_hooks(self, ddp, module):
        """A forward pre-hook on DDP (is the next backward a synchronising
        one?) and a hook per parameter that says when autograd has
        accumulated its gradient (_grad_ready). remove_hooks() removes them
        with the sketch hooks: DDP's buckets are then reduced whole."""
        me = weakref.ref(self)

        def before_forward(mod, inputs):
            st = me()
            if st is not None:
                st._before_forward(mod)

        self._hooks.append(ddp.register_forward_pre_hook(before_forward))
        for p in module.parameters():
            i = self._index.get(id(p))
            if i is None:
                continue
            self._strides[i] = (tuple(p.shape), _dense_strides(p))
            if hasattr(p, "register_post_accumulate_grad_hook"):  # torch 2.1+
                def ready(param, i=i):
                    st = me()
                    if st is not None:
                        st._grad_ready(i, param.grad)
                self._hooks.append(p.register_post_accumulate_grad_hook(ready))
                continue
            # torch < 2.1: a post hook on the parameter's AccumulateGrad
            # node, which must be kept alive (DDP keeps it too).
            with torch.enable_grad():
                acc = p.view_as(p).grad_fn.next_functions[0][0]
            pref = weakref.ref(p)

            def accumulated(grad_inputs, grad_outputs, i=i, pref=pref):
                st, param = me(), pref()
                if st is not None and param is not None:
                    st._grad_ready(i, param.grad)
            self._accumulators.append(acc)
            self._hooks.append(acc.register_hook(accumulated))

    def _before_forward(self, ddp):
        # DDP prepares a synchronising backward pass exactly then (not in
        # no_sync(), not without autograd).
        self._sync = (torch.is_grad_enabled()
                      and bool(getattr(ddp, "require_backward_grad_sync", True)))
        if not self._sync:
            return
        plan = None
        # Pieces need gift's comm hook to be DDP's (it ran) and DDP's
        # buckets to be known: a loaded checkpoint's, or the last step's
        # when the step before had the same (DDP rebuilds its buckets after
        # the first iteration; until then they are in another order).
        comm = self._comm
        if self._hooked and (self._pinned or comm.last_buckets and
                             comm.last_buckets == comm.prev_buckets):
            source = ([b.layout() for b in self._pinned] if self._pinned
                      else comm.last_buckets)
            plan = self._plan_of(tuple(source))
        if self._fired:
            self._expected, self._fired = self._fired, {}
        self._plan, self._next_piece, self._avail = plan, 0, {}
        self._comm.submit(("forward", plan))

    def _grad_ready(self, layer, grad):
        """Autograd has accumulated `layer`'s gradient: it counts as there
        when accumulated as often as in the previous step (static graphs
        may accumulate a parameter several times)."""
        if not self._sync or grad is None:
            return
        n = self._fired.get(layer, 0) + 1
        self._fired[layer] = n
        plan = self._plan
        if (plan is None or layer not in plan.where or layer in self._avail
                or n != self._expected.get(layer)):
            return
        event = None
        if grad.is_cuda:
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(grad.device))
        self._avail[layer] = (grad, None, event)
        self._hand_over_pieces()

    def _hand_over_pieces(self):
        """Hands the armed step's complete pieces, in order, to the
        communication thread."""
        plan = self._plan
        while self._next_piece < len(plan.pieces):
            piece = plan.pieces[self._next_piece]
            if not all(l in self._avail for l in piece.layers):
                return
            self._comm.submit(("piece", self._next_piece, piece,
                               [self._avail[l] for l in piece.layers]))
            self._next_piece += 1
        self._avail = {}  # all handed over: hold no gradient longer

    def _grad_view(self, work, layer, offset):
        """The part of a piece's buffer for `layer`, shaped like its
        parameter and laid out as DDP lays it out in its buckets (the
        parameter's strides when dense, else row-major)."""
        shape, strides = self._strides[layer]
        if strides is not None:
            return work.as_strided(shape, strides, offset)
        return work[offset:offset + self._sizes[layer]].view(shape)

    def _split(self, view):
        """After load_state_dict: the checkpointed run's buckets, while DDP's
        differ (its single first-iteration bucket): [(bucket, [(position in
        DDP's bucket, offset in the saved one, n)])], so that the step is
        reduced exactly as the saved run would have reduced it. None: reduce
        DDP's bucket as it is (and forget the saved buckets once DDP's no
        longer contain them whole)."""
        pinned = self._pinned
        if pinned is None or view.layout() in self._pinned_layouts:
            return None
        pos = dict(zip(view.layers, view.offsets))
        parts = []
        for g in pinned:
            inside = [i in pos for i in g.layers]
            if all(inside):
                parts.append((g, [(pos[i], off, self._sizes[i])
                                  for i, off in zip(g.layers, g.offsets)]))
            elif any(inside):
                parts = None
                break
        if not parts or sum(len(g.layers) for g, _ in parts) != len(view.layers):
            self._pinned = None
            return None
        return parts

    def _finish_step(self, t):
        self.last_telemetry = t
        self._totals["steps"] += 1
        for k in ("bytes_euclid", "bytes_gift", "bytes_control", "bytes_audit",
                  "audit_seconds", "seconds"):
            self._totals[k] += t[k]
        self._totals["audit_steps"] += bool(t["audit_step"])
        if self.mode == "gift" and not self._attached_logged and self.rank == 0:
            a = self.session.attachment_stats()
            if a.get("attached"):
                self._attached_logged = True
                log.warning("gift: attached to giftd at %s (instance %s): "
                            "it now picks the layers to whiten",
                            self.agent_socket, a.get("daemon_instance", "?"))

    # ---- stats and checkpoints -------------------------------------------
    def stats(self):
        """Totals since init, the last step's telemetry and the attachment.

        Plain ratios first: bytes_sent (gradient, control and audit bytes
        this rank sent), bytes_fp32_equivalent (what a ring allreduce in FP32 sends for
        the same steps: 2 (W - 1) / W of the payload) and bytes_vs_fp32
        (their ratio; None before the first step)."""
        if self.session is None:
            return dict(self._closed_stats)
        s = dict(self._totals)
        s["mode"] = self.mode
        s["world_size"] = self.world_size
        s["elements"] = self._total
        w = self.world_size
        s["bytes_sent"] = (self._totals["bytes_euclid"]
                           + self._totals["bytes_gift"]
                           + self._totals["bytes_control"]
                           + self._totals["bytes_audit"])
        s["bytes_fp32_equivalent"] = (
            self._totals["steps"] * 2 * (w - 1) * self._total * 4 // w)
        s["bytes_vs_fp32"] = (s["bytes_sent"] / s["bytes_fp32_equivalent"]
                              if s["bytes_fp32_equivalent"] else None)
        s["plan_epoch"] = self.session.current_epoch()
        s["rendezvous"] = self.rendezvous
        s["endpoint"] = self.session.endpoint
        s["attachment"] = self.session.attachment_stats()
        s["last"] = self.last_telemetry
        return s

    def state_dict(self):
        """Residuals, factors, plans and step counter: plain picklable data."""
        self._comm.idle()
        return {"version": _STATE_VERSION, "mode": self.mode,
                "world_size": self.world_size, "rank": self.rank,
                "layers": [(n, list(s), o) for n, s, o in self._layers],
                "buckets": [list(b) for b in self._comm.last_buckets],
                "allreduce": self.session.export_state()}

    def load_state_dict(self, state):
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            got = state.get("version") if isinstance(state, dict) else type(state)
            raise ValueError(f"gift: state version {got} (this gift writes and "
                             f"reads version {_STATE_VERSION})")
        mine = [(n, list(s), o) for n, s, o in self._layers]
        theirs = [(n, list(s), o) for n, s, o in state["layers"]]
        differ = []
        if state["mode"] != self.mode:
            differ.append(f"mode {state['mode']!r} != {self.mode!r}")
        if state["world_size"] != self.world_size:
            differ.append(f"world size {state['world_size']} != "
                          f"{self.world_size}")
        if state.get("rank") != self.rank:
            differ.append(f"it is rank {state.get('rank')}'s state, this is "
                          f"rank {self.rank} (load each rank's own file)")
        if theirs != mine:
            names = {n for n, _, _ in mine}
            other = [n for n, _, _ in theirs if n not in names][:3]
            differ.append("model layout (" + (
                f"layers not in this model: {', '.join(other)}" if other else
                f"{len(theirs)} layers saved, {len(mine)} here, or other "
                "shapes/order") + ")")
        if differ:
            raise ValueError("gift: cannot load this state: " + "; ".join(differ))
        self._comm.idle()
        self.session.import_state(state["allreduce"])
        buckets = [_Bucket(None, l, o, e) for l, o, e in state.get("buckets", [])]
        self._pinned = buckets or None
        self._pinned_layouts = {b.layout() for b in buckets}
        self._comm.last_buckets = [b.layout() for b in buckets]

    def close(self):
        """Stops the communication thread, removes the forward hooks and
        frees the libgift session (deregisters from giftd). The state is
        unusable afterwards; called for every live state at exit."""
        if self.session is None:
            return
        self.remove_hooks()
        _LIVE.discard(self)
        if not self._comm.stop():
            return  # still inside a collective: the session must stay
        self._closed_stats = self.stats()
        self.session = None


def _future(device):
    if device is None:
        return torch.futures.Future()
    try:
        return torch.futures.Future(devices=[device])
    except TypeError:  # torch without device-aware futures
        return torch.futures.Future()


class _CommThread:
    """This rank's communication thread: reduces a step's pieces in order.

    Items arrive from the training path in program order: ("forward", plan)
    when a forward pass will be followed by a synchronising backward,
    ("piece", k, piece, sources) when all the gradients of the armed step's
    piece k are there (GiftState hands them over strictly in the plan's
    order, the same on every rank: a layer is there when autograd has
    accumulated it or DDP has handed over its bucket, whichever comes
    first), and ("bucket", ...) when DDP hands over a bucket. A bucket's
    future completes when the pieces of all its layers are done; layers no
    piece holds (DDP's buckets changed) are reduced after the last piece, in
    DDP's order. A step without a plan reduces each bucket when it arrives.
    The first reduction opens the libgift step (the agreement), the bucket
    DDP marks last closes it (telemetry) before its future completes. An
    error fails the bucket's future and every later one of the step; the
    step is still closed so the next one starts clean (the communicator may
    be broken: its error says so)."""

    def __init__(self, state):
        self._state = state
        self._queue = queue.SimpleQueue()
        self._open = False      # a libgift step is open
        self._error = None      # the open step's first error
        self._pending = 0       # submitted, not yet handled
        self._step_buckets = []  # the open step's bucket layouts
        self.last_buckets = []   # the last complete step's
        self.prev_buckets = []   # the step's before it
        self._plan = None       # the armed step's pieces (_Plan), or None
        self._next = 0          # the armed step's pieces done
        self._waiting = []      # DDP's buckets not yet completed, in order
        self._works = {}        # piece layers -> its host float32 buffer
        self._results = {}      # piece -> (its buffer, layers not copied)
        self._done = threading.Condition()
        self._sides = {}        # device index -> libgift's side stream
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"gift-comm-{state.rank}")
        self._thread.start()

    def submit(self, item):
        with self._done:
            self._pending += 1
        self._queue.put(item)

    def idle(self, timeout=None):
        """Waits until every submitted item is handled (checkpoints)."""
        limit = timeout if timeout is not None else self._state.timeout_seconds
        with self._done:
            if not self._done.wait_for(lambda: self._pending == 0, limit + 60):
                raise RuntimeError("gift: the communication thread did not "
                                   "finish the step in time")

    def stop(self):
        """Ends the thread; False if it is still busy after 30 s."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout=30)
        return not self._thread.is_alive()

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._handle(item)
            finally:
                with self._done:
                    self._pending -= 1
                    self._done.notify_all()

    def _handle(self, item):
        kind = item[0]
        if kind == "forward":
            self._forward(item[1])
        elif kind == "piece":
            _, k, piece, sources = item
            self._next = k + 1
            self._begin()
            if self._error is None:
                try:
                    self._reduce_piece(k, piece, sources)
                except Exception as e:  # noqa: BLE001
                    self._fail(e)
        else:
            if item[7] is not None:
                self._fail(item[7])
            self._waiting.append(item[1:])
        while self._waiting and self._can_finish(self._waiting[0][0]):
            self._finish(*self._waiting.pop(0))

    def _forward(self, plan):
        if self._open or self._waiting:
            # The previous backward pass stopped before DDP's last bucket
            # (it raised): fail what it left and close its step.
            self._fail(RuntimeError("gift: the previous backward pass did not "
                                    "hand over all of DDP's buckets"))
            for item in self._waiting:
                item[3].set_exception(self._error)
            self._waiting = []
            self._end()
        self._plan, self._next, self._results = plan, 0, {}

    def _fail(self, error):
        if self._error is None:
            self._error = error

    def _begin(self):
        if not self._open:
            self._open = True
            try:
                self._state.session.begin_step()
            except Exception as e:  # noqa: BLE001
                self._fail(e)

    def _end(self):
        self._open = False
        error, self._error = self._error, None
        buckets, self._step_buckets = self._step_buckets, []
        self._plan, self._next, self._results = None, 0, {}
        try:
            t = self._state.session.end_step()
        except Exception as e:  # noqa: BLE001
            return error or e
        if error is None:
            self.prev_buckets, self.last_buckets = self.last_buckets, buckets
            self._state._finish_step(t)
        return error

    def _can_finish(self, view):
        plan = self._plan
        if plan is None or view is None or self._error is not None:
            return True
        if self._next == len(plan.pieces):
            return True
        return all(l in plan.where and plan.where[l][0] < self._next
                   for l in view.layers)

    def _finish(self, view, split, buf, fut, event, last, _error):
        self._begin()
        if self._error is None:
            try:
                with self._on(buf.device, event):
                    self._complete(view, split, buf)
            except Exception as e:  # noqa: BLE001
                self._fail(e)
        error = self._end() if last else self._error
        if error is not None:
            fut.set_exception(error)
        elif event is not None:
            with self._on(buf.device):
                fut.set_result(buf)
        else:
            fut.set_result(buf)

    def _complete(self, view, split, buf):
        """Reduces what no piece held of DDP's bucket `view` and copies the
        pieces' results into it."""
        sizes = self._state._sizes
        parts = ([(g, [src for src, _, _ in copies]) for g, copies in split]
                 if split else [(view, view.offsets)])
        self._step_buckets.extend(g.layout() for g, _ in parts)
        plan = self._plan
        if plan is None:
            for g, positions in parts:
                self._reduce_run(g.layers, positions, buf)
            return
        rest = [(l, pos) for l, pos in zip(view.layers, view.offsets)
                if l not in plan.where]
        if rest:
            self._reduce_run([l for l, _ in rest], [p for _, p in rest], buf)
        for layer, pos in zip(view.layers, view.offsets):
            if layer in plan.where:
                k, off = plan.where[layer]
                work, left = self._results[k]
                n = sizes[layer]
                buf[pos:pos + n].copy_(work[off:off + n])
                if left > 1:
                    self._results[k] = (work, left - 1)
                else:  # all of the piece is in DDP's buckets: let it go
                    del self._results[k]

    def _reduce_run(self, layers, positions, buf):
        """Reduces the layers at `positions` of `buf` as their pieces: in
        place where a piece is a float32 run of buf, else in a copy."""
        sizes = self._state._sizes
        at = dict(zip(layers, positions))
        for piece in self._state._pieces_of(tuple(layers)):
            start = at[piece.layers[0]]
            if buf.dtype == torch.float32 and all(
                    at[l] == start + off
                    for l, off in zip(piece.layers, piece.offsets)):
                self._reduce_work(piece, buf[start:start + piece.elements])
                continue
            work = self._work(piece, buf.device)
            for l, off in zip(piece.layers, piece.offsets):
                work[off:off + sizes[l]].copy_(buf[at[l]:at[l] + sizes[l]])
            self._reduce_work(piece, work)
            for l, off in zip(piece.layers, piece.offsets):
                buf[at[l]:at[l] + sizes[l]].copy_(work[off:off + sizes[l]])

    def _reduce_piece(self, k, piece, sources):
        """Armed piece k: its layers' gradients (or DDP's bucket where it
        came first) into the piece's buffer, reduced there; the buffer is
        kept until its results are copied into DDP's buckets."""
        state = self._state
        device = sources[0][0].device
        with self._on(device) as side:
            work = self._work(piece, device)
            self._results[k] = (work, len(piece.layers))
            for l, off, (t, pos, event) in zip(piece.layers, piece.offsets,
                                               sources):
                if side is not None and event is not None:
                    side.wait_event(event)
                if pos is None:
                    if side is not None:
                        t.record_stream(side)
                    state._grad_view(work, l, off).copy_(t)
                else:
                    n = state._sizes[l]
                    work[off:off + n].copy_(t[pos:pos + n])
            self._reduce_work(piece, work)

    def _reduce_work(self, piece, work):
        s = self._state.session
        if work.is_cuda:
            s.reduce_bucket_ptr(piece.layers, piece.offsets, work.data_ptr(),
                                piece.elements)
        else:
            s.reduce_bucket(piece.layers, piece.offsets, work.numpy())

    def _work(self, piece, device):
        """A float32 buffer for `piece`: kept for the next steps on the host;
        on a device a new one from torch's caching allocator (on the side
        stream, current here), so that only the pieces in flight take
        device memory, not a second copy of every gradient."""
        if device.type == "cuda":
            return torch.empty(piece.elements, dtype=torch.float32,
                               device=device)
        key = tuple(piece.layers)
        w = self._works.get(key)
        if w is None:
            w = torch.empty(piece.elements, dtype=torch.float32)
            self._works[key] = w
        return w

    @contextlib.contextmanager
    def _on(self, device, event=None):
        """Host work as it is (yields None); device work on libgift's side
        stream (made to wait on `event`) with that stream current (yields
        it)."""
        if device.type != "cuda":
            yield None
            return
        with torch.cuda.device(device):
            side = self._sides.get(device.index)
            if side is None:
                side = torch.cuda.ExternalStream(self._state.session.stream(),
                                                 device=device)
                self._sides[device.index] = side
            with torch.cuda.stream(side):
                if event is not None:
                    side.wait_event(event)
                yield side


def init(model, process_group=None, mode="gift", agent_socket=None, job_id=None,
         sketch_rows=512, probe_interval=10, store_dir=None,
         timeout_seconds=None, backend="gloo", socket_ifname=None,
         audit_interval=100, audit_drift=False, piece_mb=4.0):
    """Creates this rank's GiftState (collective over `process_group`).

    model: the DDP model or the module it wraps. process_group: default the
    world group (None and torch.distributed not initialised: one rank).
    agent_socket: giftd's Agent socket (default $GIFT_AGENT_SOCKET, else
    /tmp/gift/agent.sock); when every rank sees it, libgift's communicator
    rendezvouses through giftd; otherwise through the job's own
    torch.distributed store (the one torchrun runs; nothing to share), or a
    fresh folder under `store_dir` when given (must be shared across hosts).
    job_id: the daemon's name for the job (default $GIFT_JOB_ID, which
    deploy/slurm/gift-srun sets, else a fresh id; a multi-node job's daemons
    serve one job id, so its ranks must use it).
    timeout_seconds: bound of the rendezvous and of every collective;
    default the process group's timeout (PyTorch's default is 30 min), so
    a rank waiting while rank 0 evaluates alone is not killed.
    backend: "gloo" (host buffers) or "nccl" (device buffers, reduced on
    libgift's side stream; needs a CUDA build).
    socket_ifname: the network interface libgift's Gloo listens on; default
    $GLOO_SOCKET_IFNAME, else $GIFT_SOCKET_IFNAME, else the interface that
    routes to $MASTER_ADDR, else the host name's address.
    audit_interval: every this many steps (modes euclid and gift) the step
    also runs an FP32 allreduce of the same gradients and reports, per
    layer, the error of what was applied against it (stats()["last"]
    layers' audit_rel_l2, audit_cosine, audit_drift; giftd's
    gift_layer_audit_* metrics); 0 = never. An attached giftd's
    audit_interval (giftctl set-audit-interval) overrides it.
    audit_drift: also the drift (audit_drift): the running sum of the
    applied gradients since the previous audit against the FP32 one. Costs
    8 bytes of memory per gradient element and two additions per element
    every step (on CPU ranks a large share of the step); default off.
    piece_mb: MB of FP32 gradient per piece (whole layers; default 4): each
    piece is reduced as soon as autograd has accumulated its gradients, so
    communication overlaps the backward pass even inside DDP's large
    buckets (needs the DDP model, not the module it wraps); 0 = reduce
    DDP's buckets whole, when DDP hands them over.
    """
    return GiftState(model, process_group, mode, agent_socket, job_id,
                     sketch_rows, probe_interval, store_dir, timeout_seconds,
                     backend, socket_ifname, audit_interval, audit_drift,
                     piece_mb)


def comm_hook(state, bucket):
    """DDP comm hook: ddp.register_comm_hook(state, gift.comm_hook)."""
    return state.hook(bucket)

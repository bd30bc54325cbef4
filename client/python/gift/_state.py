"""GiftState: one rank's gift, and gift.init / gift.comm_hook.

GiftState puts the parts together: the model's Layout, the rendezvous and
libgift's Session, the sketch hooks (mode "gift"), the communication
thread (CommThread), the overlap hooks (Overlap) and the statistics. Its
comm hook turns DDP's bucket into a BucketReady message and returns the
bucket's future at once.

    state = gift.init(ddp, mode="gift")
    ddp.register_comm_hook(state, gift.comm_hook)

Thread safety: one GiftState per rank, used from the training thread; the
communication thread writes the statistics (under their lock) and the
bucket layouts (CommThread's single-writer rule).
"""

import atexit
import dataclasses
import inspect
import logging
import warnings
import weakref
from typing import Any, Dict, Optional, Tuple

import torch
import torch.distributed as dist
from torch import nn

from gift import _compat, _gift, _rendezvous
from gift._checkpoint import PinnedBuckets, check_loadable, make_state_dict
from gift._comm import CommThread
from gift._layout import BucketLayout, BucketViews, Layout, Pieces
from gift._messages import BucketReady
from gift._options import Options
from gift._overlap import Overlap
from gift._sketch import register_sketch_hooks
from gift._stats import StepStats

log = logging.getLogger("gift")
_LIVE = weakref.WeakSet()  # states to close before the interpreter exits


@atexit.register
def _close_all():
    # A training script rarely closes its state: stop the communication
    # threads and free libgift's sessions (their Gloo and daemon threads)
    # while the interpreter is whole, not during its finalisation.
    for state in list(_LIVE):
        state.close()


class GiftState:
    """Per-rank state: pass to ddp.register_comm_hook with gift.comm_hook.
    Made by gift.init (see there for the options)."""

    def __init__(self, model: nn.Module, process_group: Any = None,
                 options: Optional[Options] = None):
        options = options if options is not None else Options()
        self._options = options
        module = getattr(model, "module", model)  # DDP wraps the model
        group = _rendezvous.default_group(process_group)
        # Neither the group nor the module is kept: a state that held the
        # group would keep torch's gloo threads alive after the script's
        # destroy_process_group(), into the interpreter's finalisation,
        # where they abort the process (terminate called without an active
        # exception) when they drop a tensor.
        self._rank = dist.get_rank(group) if group else 0
        self._world_size = dist.get_world_size(group) if group else 1
        self._layout = Layout.of(module)
        self._device = (torch.device("cuda", torch.cuda.current_device())
                        if options.backend == "nccl" else torch.device("cpu"))
        self._stats = StepStats()
        self._closed_stats: Optional[Dict[str, Any]] = None
        self._views = BucketViews(self._layout)
        self._pieces = Pieces(self._layout, options.piece_elements)
        self._pinned = PinnedBuckets([])  # the buckets of a loaded checkpoint
        self._hooked = False      # gift's comm hook has run
        self._attached_logged = False
        self._rdv = _rendezvous.rendezvous(group, self._rank, options)
        self._session = _gift.NativeRank(
            _rendezvous.session_options(self._rdv, options, self._rank,
                                        self._world_size, self._device),
            list(self._layout.layers), self._layout.total)
        self._rdv = self._rdv._replace(store=None)  # the session holds it
        self._format_fallbacks = tuple(self._session.format_fallbacks)
        self._warn_without_daemon()
        self._warn_format_fallbacks()
        self._hooks = []
        if options.mode == "gift":
            self._hooks += register_sketch_hooks(
                module, lambda: self._session, self.sketch_rows)
        self._comm = CommThread(self._rank, lambda: self._session,
                                self._layout, self._pieces,
                                self._rdv.timeout_seconds, self._step_done)
        self._overlap = Overlap(self._layout, self._pieces, self._comm.submit,
                                self._pieces_source)
        if (self._pieces.enabled and
                getattr(model, "require_backward_grad_sync", None) is not None):
            self._hooks += self._overlap.register(model, module)
        _LIVE.add(self)

    # ---- read-only properties --------------------------------------------
    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def mode(self) -> str:
        return self._options.mode

    @property
    def options(self) -> Options:
        """The options this state was made with."""
        return self._options

    @property
    def sketch_rows(self) -> int:
        return max(1, int(self._options.sketch_rows))

    @property
    def timeout_seconds(self) -> float:
        return self._rdv.timeout_seconds

    @property
    def job_id(self) -> str:
        return self._rdv.job_id

    @property
    def rendezvous(self) -> str:
        """"giftd", "folder" or "torch.distributed store"."""
        return self._rdv.kind

    @property
    def agent_socket(self) -> str:
        return self._rdv.agent_socket

    @property
    def session(self) -> Any:
        """libgift's Session (gift._gift.NativeRank); None once closed."""
        return self._session

    @property
    def layer_names(self) -> Tuple[str, ...]:
        """libgift's layer names, in layer order."""
        return self._layout.names

    @property
    def last_telemetry(self) -> Optional[Dict[str, Any]]:
        """The last complete step's telemetry, or None before the first."""
        return self._stats.last

    def _wrap_session(self, wrap) -> None:
        """Tests only: the session becomes wrap(session) (a proxy that
        records or injects failures). Call before the first step."""
        self._session = wrap(self._session)

    # ---- the comm hook ----------------------------------------------------
    def hook(self, bucket: dist.GradBucket) -> torch.futures.Future:
        """DDP's comm hook body (gift.comm_hook calls it)."""
        cuda = self._device.type == "cuda"
        fut = _compat.future(self._device if cuda else None)
        view = split = buf = event = error = None
        try:
            buf = bucket.buffer()
            if buf.is_cuda != cuda:
                raise RuntimeError(
                    f"gift: a {buf.device} gradient bucket with backend "
                    f"{'nccl' if cuda else 'gloo'} (use backend="
                    f"{'nccl' if buf.is_cuda else 'gloo'!r})")
            view = self._views.of(bucket)
            split = self._pinned.split(view, self._layout.size)
            if cuda:
                event = torch.cuda.Event()
                event.record(torch.cuda.current_stream(buf.device))
        except Exception as e:  # noqa: BLE001 -- DDP raises it in its wait
            error = e
        self._hooked = True
        if view is not None:
            self._overlap.bucket_ready(view, buf, event)
        self._comm.submit(BucketReady(view, split, buf, fut, event,
                                      bucket.is_last(), error))
        return fut

    def _pieces_source(self) -> Optional[Tuple[BucketLayout, ...]]:
        """DDP's buckets of the next step when known: pieces need gift's
        comm hook to be DDP's (it ran) and DDP's buckets to be known: a
        loaded checkpoint's, or the last step's when the step before had
        the same (DDP rebuilds its buckets after the first iteration; until
        then they are in another order)."""
        if not self._hooked:
            return None
        pinned = self._pinned.layouts()
        if pinned:
            return pinned
        last = self._comm.last_buckets
        if last and last == self._comm.prev_buckets:
            return tuple(last)
        return None

    def _step_done(self, telemetry: Dict[str, Any]) -> None:
        """The communication thread closed a step."""
        self._stats.record(telemetry)
        if (self.mode == "gift" and not self._attached_logged
                and self._rank == 0):
            a = self._session.attachment_stats()
            if a.get("attached"):
                self._attached_logged = True
                log.warning("gift: attached to giftd at %s (instance %s): "
                            "it now picks the layers to whiten",
                            self.agent_socket, a.get("daemon_instance", "?"))

    def _warn_without_daemon(self):
        if (self.mode == "gift" and self._rdv.kind != "giftd"
                and self._rank == 0):
            log.warning(
                "gift: no giftd reachable at %s (on every rank): every layer "
                "goes Euclidean FP8 until one starts; retrying in the "
                "background (start giftd, or set GIFT_AGENT_SOCKET)",
                self.agent_socket)

    def _warn_format_fallbacks(self):
        if self._format_fallbacks and self._rank == 0:
            warnings.warn(
                f"gift: format {self._options.format!r} does not fit "
                f"{len(self._format_fallbacks)} layer(s), which keep e4m3 "
                f"(a 4-bit block runs along a row: d_in must be a multiple "
                f"of it): {', '.join(self._format_fallbacks)}",
                UserWarning, stacklevel=3)

    # ---- hooks, stats, checkpoints and closing ----------------------------
    def remove_hooks(self) -> None:
        """Removes the sketch and overlap hooks: DDP's buckets are then
        reduced whole, when DDP hands them over."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self._overlap.release()

    def stats(self) -> Dict[str, Any]:
        """Totals since init, the last step's telemetry and the attachment.

        Plain ratios first: bytes_sent (gradient, control and audit bytes
        this rank sent), bytes_fp32_equivalent (what a ring allreduce in
        FP32 sends for the same steps: 2 (W - 1) / W of the payload) and
        bytes_vs_fp32 (their ratio; None before the first step). Then
        format, error_feedback (the options: "auto", "on", "off") and
        owner_release_cap,
        format_fallbacks (the layers that kept e4m3: their shape cannot
        take the format) and layer_wire: per layer the format of the last
        step's plan and wire_bytes, its codes and scales (a rank sends about
        2 (W - 1) / W of them per step, as bytes_fp32_equivalent counts 4
        bytes per element)."""
        session = self._session
        if session is None:
            return dict(self._closed_stats)
        return self._stats.summary(self.mode, self._world_size,
                                   self._layout.total, {
            "plan_epoch": session.current_epoch(),
            "rendezvous": self.rendezvous,
            "endpoint": session.endpoint,
            "attachment": session.attachment_stats(),
            "format": self._options.format,
            "error_feedback": self._options.error_feedback_name,
            "owner_release_cap": float(self._options.owner_release_cap),
            "format_fallbacks": self._format_fallbacks,
            "layer_wire": self._layer_wire(session)})

    def _layer_wire(self, session) -> Dict[str, Dict[str, Any]]:
        """Each layer's format and wire_bytes in the last step (the base
        plan's before the first)."""
        last = self._stats.last
        if last and last["layers"] and "format" in last["layers"][0]:
            return {l["name"]: {"format": l["format"],
                                "wire_bytes": l["wire_bytes"]}
                    for l in last["layers"]}
        return {name: {"format": f, "wire_bytes": b}
                for name, f, b in session.base_wire()}

    def state_dict(self) -> Dict[str, Any]:
        """Residuals, factors, plans and step counter: plain picklable data."""
        self._comm.idle()
        return make_state_dict(self.mode, self._world_size, self._rank,
                               self._layout, self._comm.last_buckets,
                               self._session, fmt=self._options.wire_format)

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores what state_dict() saved (this rank's own, same mode,
        format, world size and model layout; ValueError names what
        differs)."""
        check_loadable(state, self.mode, self._world_size, self._rank,
                       self._layout, fmt=self._options.wire_format)
        self._comm.idle()
        self._session.import_state(state["allreduce"])
        self._pinned = PinnedBuckets.of(state)
        self._comm.pin_buckets(self._pinned.saved_layouts())

    def close(self) -> bool:
        """Stops the communication thread, removes the hooks and frees the
        libgift session (deregisters from giftd). The state is unusable
        afterwards; called for every live state at exit. True when closed
        (or already); False, with a RuntimeWarning, when the thread is
        still inside a collective after 30 s: the session is then kept."""
        if self._session is None:
            return True
        self.remove_hooks()
        _LIVE.discard(self)
        if not self._comm.stop():
            warnings.warn("gift: the communication thread is still inside a "
                          "collective after 30 s; the libgift session stays "
                          "open", RuntimeWarning, stacklevel=2)
            return False
        self._closed_stats = self.stats()
        self._session = None
        return True


def init(model: nn.Module, process_group: Any = None,
         **options: Any) -> GiftState:
    """Creates this rank's GiftState (collective over `process_group`).

    model: the DDP model or the module it wraps. process_group: default the
    world group (None and torch.distributed not initialised: one rank).
    Every other argument is keyword-only, a field of gift.Options: mode
    ("gift"), agent_socket, job_id, sketch_rows (512), probe_interval (10),
    store_dir, timeout_seconds, backend ("gloo"), socket_ifname,
    audit_interval (100), audit_drift (False), piece_mb (4.0), format
    ("e4m3"; "e5m2", "nvfp4", "mxfp4": the wire format of every layer that
    can take it, the job's default in mode gift), error_feedback (None
    = auto, on for the 4-bit formats; True / False force it) and
    owner_release_cap (0.25; 0 = no cap); their
    meaning is in Options' docstring. ValueError for a wrong value,
    TypeError for an unknown name or a parameter gift cannot reduce.
    """
    return GiftState(model, process_group, Options(**options))


def _init_signature() -> inspect.Signature:
    """init's signature as help() and IDEs show it: Options' fields,
    keyword-only, with their defaults and types."""
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter("model", positional, annotation=nn.Module),
              inspect.Parameter("process_group", positional, default=None)]
    params += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                                 default=f.default, annotation=f.type)
               for f in dataclasses.fields(Options)]
    return inspect.Signature(params, return_annotation=GiftState)


init.__signature__ = _init_signature()


def comm_hook(state: GiftState,
              bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: ddp.register_comm_hook(state, gift.comm_hook). (DDP
    checks these two annotations: they must be exactly these.)"""
    return state.hook(bucket)

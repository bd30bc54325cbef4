"""Overlap with the backward pass: arming a step's pieces and handing each
to the communication thread as soon as its gradients are there.

A forward pre-hook on DDP says whether the next backward pass synchronises
(not in no_sync(), not without autograd) and arms the step with the pieces
of DDP's known buckets (`source()`: a loaded checkpoint's, or the last
step's when the step before had the same; None while unknown). A hook per
parameter says when autograd has accumulated its gradient: it counts as
there when accumulated as often as in the previous step (static graphs may
accumulate a parameter several times). DDP's hook hands over what is in a
bucket too (bucket_ready), whichever comes first. Complete pieces go to
`submit` strictly in the plan's order (the same on every rank): one wake-up
of the communication thread per piece, not per parameter.

    overlap = Overlap(layout, pieces, comm.submit, source)
    handles = overlap.register(ddp, module)   # hooks; remove them to stop

Thread safety: single-threaded; every method runs on the thread that runs
the forward pass and autograd's hooks (the training thread).
"""

import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

from gift import _compat
from gift._layout import Bucket, BucketLayout, Layout, Pieces, Plan
from gift._messages import Forward, GradSource, PieceReady


class Overlap:
    """The armed step's readiness (counts, sources) on the training side."""

    def __init__(self, layout: Layout, pieces: Pieces,
                 submit: Callable[[Any], None],
                 source: Callable[[], Optional[Tuple[BucketLayout, ...]]]):
        self._layout, self._pieces = layout, pieces
        self._submit, self._source = submit, source
        self._accumulators = []   # torch < 2.1: the hooked AccumulateGrad nodes
        self._sync = False        # the next backward pass synchronises
        self._plan: Optional[Plan] = None  # this step's pieces, or None
        self._next_piece = 0      # the next piece to hand over
        self._avail: Dict[int, GradSource] = {}  # layer -> its gradient
        self._fired: Dict[int, int] = {}     # layer -> accumulations now
        self._expected: Dict[int, int] = {}  # layer -> in the previous pass

    def register(self, ddp: nn.Module, module: nn.Module) -> List[Any]:
        """A forward pre-hook on DDP and a hook per trainable parameter of
        `module` (DDP's module); their handles. The hooks hold this object
        weakly."""
        me = weakref.ref(self)

        def before_forward(mod, inputs):
            o = me()
            if o is not None:
                o.before_forward(mod)

        handles = [ddp.register_forward_pre_hook(before_forward)]
        for p in module.parameters():
            i = self._layout.layer_of(p)
            if i is None:
                continue
            if _compat.has_post_accumulate_grad_hook(p):  # torch 2.1+
                def ready(param, i=i):
                    o = me()
                    if o is not None:
                        o.grad_ready(i, param.grad)
                handles.append(p.register_post_accumulate_grad_hook(ready))
                continue
            # torch < 2.1: a post hook on the parameter's AccumulateGrad
            # node, which must be kept alive (DDP keeps it too).
            acc = _compat.accumulate_grad_node(p)
            pref = weakref.ref(p)

            def accumulated(grad_inputs, grad_outputs, i=i, pref=pref):
                o, param = me(), pref()
                if o is not None and param is not None:
                    o.grad_ready(i, param.grad)
            self._accumulators.append(acc)
            handles.append(acc.register_hook(accumulated))
        return handles

    def release(self) -> None:
        """The hooks were removed: let the AccumulateGrad nodes go."""
        self._accumulators = []

    def before_forward(self, ddp: nn.Module) -> None:
        # DDP prepares a synchronising backward pass exactly then (not in
        # no_sync(), not without autograd).
        self._sync = (torch.is_grad_enabled()
                      and bool(getattr(ddp, "require_backward_grad_sync", True)))
        if not self._sync:
            return
        source = self._source()
        plan = self._pieces.plan(source) if source is not None else None
        if self._fired:
            self._expected, self._fired = self._fired, {}
        self._plan, self._next_piece, self._avail = plan, 0, {}
        self._submit(Forward(plan))

    def grad_ready(self, layer: int, grad: Optional[torch.Tensor]) -> None:
        """Autograd has accumulated `layer`'s gradient."""
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
        self._avail[layer] = GradSource(grad, None, event)
        self._hand_over()

    def bucket_ready(self, view: Bucket, buf: torch.Tensor,
                     event: Optional[Any]) -> None:
        """DDP handed over `view`'s bucket: its layers are there (where
        autograd's hooks have not said so yet)."""
        if self._plan is None:
            return
        for layer, pos in zip(view.layers, view.offsets):
            self._avail.setdefault(layer, GradSource(buf, pos, event))
        self._hand_over()

    def _hand_over(self):
        """Hands the armed step's complete pieces, in order, to the
        communication thread."""
        plan = self._plan
        while self._next_piece < len(plan.pieces):
            piece = plan.pieces[self._next_piece]
            if not all(l in self._avail for l in piece.layers):
                return
            self._submit(PieceReady(self._next_piece, piece,
                                    [self._avail[l] for l in piece.layers]))
            self._next_piece += 1
        self._avail = {}  # all handed over: hold no gradient longer

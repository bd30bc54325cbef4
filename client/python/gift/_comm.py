"""This rank's communication thread: reduces a step's pieces in order.

Messages (gift._messages) arrive from the training path in program order:
Forward(plan) when a forward pass will be followed by a synchronising
backward, PieceReady when all the gradients of the armed step's piece k are
there (handed over strictly in the plan's order, the same on every rank: a
layer is there when autograd has accumulated it or DDP has handed over its
bucket, whichever comes first), and BucketReady when DDP hands over a
bucket. A bucket's future completes when the pieces of all its layers are
done; layers no piece holds (DDP's buckets changed) are reduced after the
last piece, in DDP's order. A step without a plan reduces each bucket when
it arrives. The first reduction opens the libgift step (the agreement), the
bucket DDP marks last closes it (telemetry, handed to `on_step_end`) before
its future completes. An error fails the bucket's future and every later
one of the step; the step is still closed so the next one starts clean (the
communicator may be broken: its error says so).

    comm = CommThread(rank, lambda: session, layout, pieces, timeout, done)
    comm.submit(Forward(plan)); ...; comm.idle(); comm.stop()

Thread safety: submit, idle and stop from one thread (the training path);
everything else runs on the thread. last_buckets and prev_buckets have a
single writer, the thread, at the end of a step (before the step's last
future completes, so a reader after DDP's wait sees them); pin_buckets
writes them from outside only while the thread is idle (after idle()).
"""

import contextlib
import queue
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from gift._layout import Bucket, BucketLayout, Layout, Pieces, Plan
from gift._messages import BucketReady, Forward, PieceReady, Stop

_STOP_SECONDS = 30  # how long stop() waits for the thread


class CommThread:
    """The thread and the step it is reducing."""

    def __init__(self, rank: int, session: Callable[[], Any], layout: Layout,
                 pieces: Pieces, timeout_seconds: float,
                 on_step_end: Callable[[dict], None]):
        self._session, self._layout, self._pieces = session, layout, pieces
        self._timeout = timeout_seconds
        self._on_step_end = on_step_end
        self._queue = queue.SimpleQueue()
        self._open = False      # a libgift step is open
        self._error = None      # the open step's first error
        self._pending = 0       # submitted, not yet handled
        self._step_buckets = []  # the open step's bucket layouts
        self._last_buckets: List[BucketLayout] = []  # the last complete step's
        self._prev_buckets: List[BucketLayout] = []  # the step's before it
        self._plan: Optional[Plan] = None  # the armed step's pieces
        self._next = 0          # the armed step's pieces done
        self._waiting: List[BucketReady] = []  # DDP's buckets not completed
        self._works = {}        # piece layers -> its host float32 buffer
        self._results: Dict[int, Tuple[torch.Tensor, int]] = {}  # piece ->
        # (its buffer, layers not yet copied into DDP's buckets)
        self._done = threading.Condition()
        self._sides = {}        # device index -> libgift's side stream
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"gift-comm-{rank}")
        self._thread.start()

    @property
    def last_buckets(self) -> List[BucketLayout]:
        """The bucket layouts of the last complete step."""
        return self._last_buckets

    @property
    def prev_buckets(self) -> List[BucketLayout]:
        """The bucket layouts of the step before it."""
        return self._prev_buckets

    def pin_buckets(self, layouts: List[BucketLayout]) -> None:
        """A loaded checkpoint's buckets as the last step's (call only
        after idle(): the thread then writes nothing)."""
        self._last_buckets = list(layouts)

    def submit(self, item: Any) -> None:
        with self._done:
            self._pending += 1
        self._queue.put(item)

    def idle(self, timeout: Optional[float] = None) -> None:
        """Waits until every submitted item is handled (checkpoints)."""
        limit = timeout if timeout is not None else self._timeout
        with self._done:
            if not self._done.wait_for(lambda: self._pending == 0, limit + 60):
                raise RuntimeError("gift: the communication thread did not "
                                   "finish the step in time")

    def stop(self) -> bool:
        """Ends the thread; False if it is still busy after 30 s."""
        if self._thread.is_alive():
            self._queue.put(Stop())
            self._thread.join(timeout=_STOP_SECONDS)
        return not self._thread.is_alive()

    def _run(self):
        while True:
            item = self._queue.get()
            if isinstance(item, Stop):
                return
            try:
                self._handle(item)
            finally:
                with self._done:
                    self._pending -= 1
                    self._done.notify_all()

    def _handle(self, item):
        if isinstance(item, Forward):
            self._forward(item.plan)
        elif isinstance(item, PieceReady):
            self._next = item.index + 1
            self._begin()
            if self._error is None:
                try:
                    self._reduce_piece(item)
                except Exception as e:  # noqa: BLE001
                    self._fail(e)
        else:
            if item.error is not None:
                self._fail(item.error)
            self._waiting.append(item)
        while self._waiting and self._can_finish(self._waiting[0].view):
            self._finish(self._waiting.pop(0))

    def _forward(self, plan):
        if self._open or self._waiting:
            # The previous backward pass stopped before DDP's last bucket
            # (it raised): fail what it left and close its step.
            self._fail(RuntimeError("gift: the previous backward pass did not "
                                    "hand over all of DDP's buckets"))
            for item in self._waiting:
                item.future.set_exception(self._error)
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
                self._session().begin_step()
            except Exception as e:  # noqa: BLE001
                self._fail(e)

    def _end(self):
        self._open = False
        error, self._error = self._error, None
        buckets, self._step_buckets = self._step_buckets, []
        self._plan, self._next, self._results = None, 0, {}
        try:
            t = self._session().end_step()
        except Exception as e:  # noqa: BLE001
            return error or e
        if error is None:
            self._prev_buckets, self._last_buckets = self._last_buckets, buckets
            self._on_step_end(t)
        return error

    def _can_finish(self, view):
        plan = self._plan
        if plan is None or view is None or self._error is not None:
            return True
        if self._next == len(plan.pieces):
            return True
        return all(l in plan.where and plan.where[l][0] < self._next
                   for l in view.layers)

    def _finish(self, item: BucketReady):
        buf, fut, event = item.buffer, item.future, item.event
        self._begin()
        if self._error is None:
            try:
                with self._on(buf.device, event):
                    self._complete(item.view, item.split, buf)
            except Exception as e:  # noqa: BLE001
                self._fail(e)
        error = self._end() if item.last else self._error
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
        size = self._layout.size
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
                n = size(layer)
                buf[pos:pos + n].copy_(work[off:off + n])
                if left > 1:
                    self._results[k] = (work, left - 1)
                else:  # all of the piece is in DDP's buckets: let it go
                    del self._results[k]

    def _reduce_run(self, layers, positions, buf):
        """Reduces the layers at `positions` of `buf` as their pieces: in
        place where a piece is a float32 run of buf, else in a copy."""
        size = self._layout.size
        at = dict(zip(layers, positions))
        for piece in self._pieces.of(tuple(layers)):
            start = at[piece.layers[0]]
            if buf.dtype == torch.float32 and all(
                    at[l] == start + off
                    for l, off in zip(piece.layers, piece.offsets)):
                self._reduce_work(piece, buf[start:start + piece.elements])
                continue
            work = self._work(piece, buf.device)
            for l, off in zip(piece.layers, piece.offsets):
                work[off:off + size(l)].copy_(buf[at[l]:at[l] + size(l)])
            self._reduce_work(piece, work)
            for l, off in zip(piece.layers, piece.offsets):
                buf[at[l]:at[l] + size(l)].copy_(work[off:off + size(l)])

    def _reduce_piece(self, item: PieceReady):
        """Armed piece k: its layers' gradients (or DDP's bucket where it
        came first) into the piece's buffer, reduced there; the buffer is
        kept until its results are copied into DDP's buckets."""
        piece, sources = item.piece, item.sources
        device = sources[0].tensor.device
        with self._on(device) as side:
            work = self._work(piece, device)
            self._results[item.index] = (work, len(piece.layers))
            for l, off, src in zip(piece.layers, piece.offsets, sources):
                t = src.tensor
                if side is not None and src.event is not None:
                    side.wait_event(src.event)
                if src.position is None:
                    if side is not None:
                        t.record_stream(side)
                    self._layout.grad_view(work, l, off).copy_(t)
                else:
                    n, pos = self._layout.size(l), src.position
                    work[off:off + n].copy_(t[pos:pos + n])
            self._reduce_work(piece, work)

    def _reduce_work(self, piece: Bucket, work: torch.Tensor):
        s = self._session()
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
                side = torch.cuda.ExternalStream(self._session().stream(),
                                                 device=device)
                self._sides[device.index] = side
            with torch.cuda.stream(side):
                if event is not None:
                    side.wait_event(event)
                yield side

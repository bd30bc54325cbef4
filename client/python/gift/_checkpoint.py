"""gift's part of a checkpoint: what state_dict() writes, what
load_state_dict() checks, and the saved run's buckets a resumed run
reduces by until DDP's own buckets contain them whole.

    sd = make_state_dict(mode, world_size, rank, layout, buckets, session,
                         fmt="nvfp4")
    check_loadable(sd, mode, world_size, rank, layout, fmt="nvfp4")
    pinned = PinnedBuckets.of(sd)

Thread safety: functions are pure; PinnedBuckets is used by the training
thread only (the comm hook and the forward pre-hook).
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

from gift._layout import Bucket, BucketLayout, Layout
from gift._messages import Split

STATE_VERSION = 2  # 2: overlapped buckets


def make_state_dict(mode: str, world_size: int, rank: int, layout: Layout,
                    buckets: List[BucketLayout], session: Any,
                    fmt: str = "e4m3") -> dict:
    """Residuals, factors, plans and step counter: plain picklable data.
    fmt: gift.init's format (the saved plans carry each layer's)."""
    return {"version": STATE_VERSION, "mode": mode, "format": fmt,
            "world_size": world_size, "rank": rank,
            "layers": [(n, list(s), o) for n, s, o in layout.layers],
            "buckets": [list(b) for b in buckets],
            "allreduce": session.export_state()}


def check_loadable(state: Any, mode: str, world_size: int, rank: int,
                   layout: Layout, fmt: str = "e4m3") -> None:
    """ValueError naming everything in `state` that does not fit here (a
    state saved before formats existed was e4m3)."""
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        got = state.get("version") if isinstance(state, dict) else type(state)
        raise ValueError(f"gift: state version {got} (this gift writes and "
                         f"reads version {STATE_VERSION})")
    mine = [(n, list(s), o) for n, s, o in layout.layers]
    theirs = [(n, list(s), o) for n, s, o in state["layers"]]
    differ = []
    if state["mode"] != mode:
        differ.append(f"mode {state['mode']!r} != {mode!r}")
    if state.get("format", "e4m3") != fmt:
        differ.append(f"format {state.get('format', 'e4m3')!r} != {fmt!r}")
    if state["world_size"] != world_size:
        differ.append(f"world size {state['world_size']} != {world_size}")
    if state.get("rank") != rank:
        differ.append(f"it is rank {state.get('rank')}'s state, this is "
                      f"rank {rank} (load each rank's own file)")
    if theirs != mine:
        names = {n for n, _, _ in mine}
        other = [n for n, _, _ in theirs if n not in names][:3]
        differ.append("model layout (" + (
            f"layers not in this model: {', '.join(other)}" if other else
            f"{len(theirs)} layers saved, {len(mine)} here, or other "
            "shapes/order") + ")")
    if differ:
        raise ValueError("gift: cannot load this state: " + "; ".join(differ))


class PinnedBuckets:
    """The checkpointed run's buckets, kept while DDP's differ (its single
    first-iteration bucket), so that a resumed step is reduced exactly as
    the saved run would have reduced it."""

    def __init__(self, buckets: List[Bucket]):
        self._saved = list(buckets)
        self._buckets: Optional[List[Bucket]] = self._saved or None
        self._layouts = {b.layout() for b in buckets}

    @classmethod
    def of(cls, state: Optional[Dict[str, Any]]) -> "PinnedBuckets":
        """A loaded state's buckets (none for None)."""
        saved = state.get("buckets", []) if state is not None else []
        return cls([Bucket(None, l, o, e) for l, o, e in saved])

    def layouts(self) -> Optional[Tuple[BucketLayout, ...]]:
        """The saved buckets' layouts while they are kept, else None."""
        if self._buckets is None:
            return None
        return tuple(b.layout() for b in self._buckets)

    def saved_layouts(self) -> List[BucketLayout]:
        """Every saved bucket's layout, in the saved order (kept or not)."""
        return [b.layout() for b in self._saved]

    def split(self, view: Bucket, size: Callable[[int], int]) -> Split:
        """[(saved bucket, [(position in DDP's bucket `view`, offset in the
        saved one, n)])], or None: reduce DDP's bucket as it is (and forget
        the saved buckets once DDP's no longer contain them whole)."""
        pinned = self._buckets
        if pinned is None or view.layout() in self._layouts:
            return None
        pos = dict(zip(view.layers, view.offsets))
        parts = []
        for g in pinned:
            inside = [i in pos for i in g.layers]
            if all(inside):
                parts.append((g, [(pos[i], off, size(i))
                                  for i, off in zip(g.layers, g.offsets)]))
            elif any(inside):
                parts = None
                break
        if not parts or sum(len(g.layers) for g, _ in parts) != len(view.layers):
            self._buckets = None
            return None
        return parts

"""Totals since init and the last step's telemetry, for GiftState.stats().

    stats = StepStats()
    stats.record(telemetry)            # the communication thread, per step
    stats.summary(mode, world_size, elements, {})   # any thread

Thread safety: record() runs on the communication thread, the readers on
the training thread (or any other); a lock guards the totals and the last
telemetry, so a reader sees whole steps only.
"""

import threading
from typing import Any, Dict, Optional

_SUMMED = ("bytes_euclid", "bytes_gift", "bytes_control", "bytes_audit",
           "audit_seconds", "transform_seconds", "seconds")


class StepStats:
    """What the steps so far cost and what the last one reported."""

    def __init__(self):
        self._lock = threading.Lock()
        self._totals = {"steps": 0, "bytes_euclid": 0, "bytes_gift": 0,
                        "bytes_control": 0, "bytes_audit": 0,
                        "audit_steps": 0, "audit_seconds": 0.0,
                        "transform_seconds": 0.0, "seconds": 0.0}
        self._last: Optional[Dict[str, Any]] = None

    def record(self, t: Dict[str, Any]) -> None:
        """A completed step's telemetry (libgift's end_step)."""
        with self._lock:
            self._last = t
            self._totals["steps"] += 1
            for k in _SUMMED:
                self._totals[k] += t[k]
            self._totals["audit_steps"] += bool(t["audit_step"])

    @property
    def last(self) -> Optional[Dict[str, Any]]:
        """The last complete step's telemetry, or None before the first."""
        with self._lock:
            return self._last

    def summary(self, mode: str, world_size: int, elements: int,
                extra: Dict[str, Any]) -> Dict[str, Any]:
        """The totals and the plain ratios: bytes_sent (gradient, control
        and audit bytes this rank sent), bytes_fp32_equivalent (what a ring
        allreduce in FP32 sends for the same steps: 2 (W - 1) / W of the
        payload) and bytes_vs_fp32 (their ratio; None before the first
        step); then `extra`, and "last", the last step's telemetry."""
        with self._lock:
            totals, last = dict(self._totals), self._last
        s = dict(totals)
        s["mode"] = mode
        s["world_size"] = world_size
        s["elements"] = elements
        w = world_size
        s["bytes_sent"] = (totals["bytes_euclid"] + totals["bytes_gift"]
                           + totals["bytes_control"] + totals["bytes_audit"])
        s["bytes_fp32_equivalent"] = (
            totals["steps"] * 2 * (w - 1) * elements * 4 // w)
        s["bytes_vs_fp32"] = (s["bytes_sent"] / s["bytes_fp32_equivalent"]
                              if s["bytes_fp32_equivalent"] else None)
        s.update(extra)
        s["last"] = last
        return s

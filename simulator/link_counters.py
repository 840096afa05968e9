"""The trace's link bandwidth counters (``memory`` / ``"<link> GB/s"``), written from the bytes
each link carried.

A link's allocated (nominal) rate overstates what it carried in a segment where a transfer
delivers its last byte part-way through a cycle: the transfer keeps its allocation until the
whole cycle it completes at (simulator/links.py, *Accounting*). A counter written from the
allocation therefore integrated to more bytes than the link carried (FLCE's example on atlas-a2:
L2 +2.2%) and could show a rate above the highest one the link reached. So the counter is
written from :meth:`Link.bandwidth_series`, the carried step function, whose integral is the
link's ``bytes_carried``.

That rate is known only once a segment closes, so the counters are written when the host
stops the device (the end of ``Device._advance``: a synchronize, a host wait), up to that
cycle. Only the part of the history a later write cannot change is written: everything up to
the open segment, or up to now when the link is idle. An untraced device makes none of this.
"""
from __future__ import annotations

import numpy as np

from opsim.simulator.links import Link
from opsim.traces.trace import Trace

__all__ = ["LinkCounters"]


class LinkCounters:
    """Writes each link's carried rate in GB/s into ``trace`` as a step-function counter, one
    point per change of rate, incrementally: :meth:`record` continues where the last call
    stopped, so a long-lived runtime that folds its link history after each synchronize
    (``Link.forget_history``) loses no point."""

    def __init__(self, trace: Trace, clock_hz: float) -> None:
        self.trace = trace
        self.clock_hz = clock_hz
        # per link: the cycle up to which its counter is written, and the rate written last
        self._cursor: dict[str, tuple[int, float]] = {}

    def record(self, links: dict[str, Link], now: int) -> None:
        """Write the counters of ``links`` up to cycle ``now`` (as far as their rates are known)."""
        scale = self.clock_hz / 1e9          # bytes/cycle -> GB/s
        for name, link in links.items():
            times, rates = link.bandwidth_series()
            if not len(times):
                continue
            cursor, last = self._cursor.get(name, (0, 0.0))
            open_since = link.open_since
            known = now if open_since is None else open_since
            if open_since is not None:
                # the open segment's entry is its allocation, not yet what it carried
                keep = times < open_since
                times, rates = times[keep], rates[keep]
            # from the step that holds at the cursor (a step written before may have grown:
            # a segment that closes with the same rate merges into it)
            first = max(int(np.searchsorted(times, cursor, side="right")) - 1, 0)
            series = f"{name} GB/s"
            for i in range(first, len(times)):
                rate = float(rates[i])
                if rate != last:
                    self.trace.add_counter("memory", series, max(int(times[i]), cursor), rate * scale)
                    last = rate
            self._cursor[name] = (max(known, cursor), last)

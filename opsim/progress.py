"""The progress line ``opsim run`` shows on a terminal while a long run simulates.

``opsim.run(progress=...)`` calls its callback with the simulated cycle about every quarter
second of wall time (simulator/progress.py). :class:`RunProgress` is such a callback: from one
second into the run it writes, on one line of stderr, the cycles simulated so far, their share of
the estimate mode's total for the same call (docs/estimate.md: mean error within 3% on the
example studies) and the wall time. The estimate is computed at the first line it shows, so a
short run costs nothing; where it fails, the line shows cycles and time only.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

_UNKNOWN = -1


def _cycles(n: int) -> str:
    """1234567 -> '1.23 M' (cycles)."""
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return str(n)


class RunProgress:
    """A callback for ``opsim.run(progress=...)`` that keeps one status line on ``stream``.

    ``estimate_total`` returns the estimate mode's cycles for the call (called once, at the first
    line shown; an exception or None leaves the total out). :meth:`close` clears the line.
    """

    def __init__(self, estimate_total: Callable[[], int | None], *, stream: TextIO | None = None,
                 delay_s: float = 1.0) -> None:
        self.estimate_total = estimate_total
        self.stream = stream if stream is not None else sys.stderr
        self.delay_s = delay_s
        self.start = time.perf_counter()
        self.total = _UNKNOWN           # not asked yet
        self.width = 0                  # of the line shown (0: none shown)

    def __call__(self, cycle: int) -> None:
        elapsed = time.perf_counter() - self.start
        if elapsed < self.delay_s:
            return
        if self.total == _UNKNOWN:
            try:
                self.total = int(self.estimate_total() or 0)
            except Exception:           # no estimate for this call: show cycles and time
                self.total = 0
        text = f"opsim: simulated {_cycles(cycle)} cycles"
        if self.total > 0:
            # the estimate is within a few percent, not exact: never show 100% before the end
            share = min(99, int(100 * cycle / self.total))
            text += f" of ~{_cycles(self.total)} estimated ({share}%)"
        text += f", {elapsed:.0f} s"
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)

    def close(self) -> None:
        """Clear the status line, if one was shown."""
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


class SweepProgress:
    """The status line of a sweep on a terminal when tqdm (the "progress" extra) is absent.

    It takes the calls the sweep makes on a tqdm bar (``update``, ``set_postfix``, ``close``) and
    keeps one line on ``stream``: ``study NAME: 12/240 points, 3 failed, 5 s``, redrawn at most
    every ``every_s`` seconds and at the last point; :meth:`close` clears it for the summary.
    """

    def __init__(self, total: int, desc: str, *, stream: TextIO | None = None,
                 every_s: float = 0.25) -> None:
        self.total = total
        self.desc = desc
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = every_s
        self.start = time.perf_counter()
        self.shown_at = -every_s        # draw at the first point
        self.done = 0
        self.failed: int | None = None
        self.width = 0

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter() - self.start
        if now - self.shown_at < self.every_s and self.done < self.total:
            return
        self.shown_at = now
        text = f"{self.desc}: {self.done}/{self.total} points"
        if self.failed is not None:
            text += f", {self.failed} failed"
        text += f", {now:.0f} s"
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)

    def set_postfix(self, failed: int | None = None, refresh: bool = True) -> None:
        """Take the failed count (shown from the next redraw, as tqdm with refresh=False)."""
        self.failed = failed

    def close(self) -> None:
        """Clear the status line, if one was shown."""
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0

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

"""Progress of a long simulation: a callback the device calls from its event loop, about every
quarter of a second of wall time, with the simulated cycle it has reached.

A long run (the exact FLCE schedule, a timing-mode call of 2^30 elements) simulates for a minute
or more; a caller that shows progress needs to hear from the event loop meanwhile. The ticker is
one extra SimPy event now and then, at a simulated time chosen so that ticks come about
``period_s`` apart in wall time. It reads the clock and calls the report; it changes no state of
the machine, so every other event keeps its order (SimPy orders same-time events by when they
were scheduled, and a tick schedules nothing else) and results, cycles and traces are those of a
run without it. A tick is never later than the latest event pending when it is scheduled, and
re-arms only while other events are pending, so a machine that runs dry (its work done, or
deadlocked) stops at the same cycle as without it; :meth:`ProgressTicker.disarm` takes a
pending tick off the queue when the device stops running.
"""
from __future__ import annotations

import time
import warnings
from heapq import heapify, heappush
from typing import Callable

import simpy
from simpy.events import NORMAL, Event

# simulated cycles between ticks: the first guess, and the bounds of the adaptation
FIRST_CYCLES = 1 << 12
MIN_CYCLES = 1 << 8
MAX_CYCLES = 1 << 40


class ProgressTicker:
    """Calls ``report(cycle)`` about every ``period_s`` seconds of wall time while the device's
    event loop runs (:meth:`arm` before running it, :meth:`disarm` after). A report that raises
    is warned about (RuntimeWarning) and the ticker stops for good; the run goes on."""

    __slots__ = ("env", "report", "period_s", "cycles", "armed", "failed", "_last_tick",
                 "_last_report")

    def __init__(self, env: simpy.Environment, report: Callable[[int], None], *,
                 period_s: float = 0.25) -> None:
        self.env = env
        self.report = report
        self.period_s = period_s
        self.cycles = FIRST_CYCLES      # simulated cycles to the next tick (adapted per tick)
        self.armed: Event | None = None     # the pending tick
        self.failed = False                 # the report raised: no more ticks
        now = time.perf_counter()
        self._last_tick = now
        self._last_report = now

    def arm(self) -> None:
        """Schedule the next tick, unless one is scheduled already or nothing else is."""
        env = self.env
        queue = env._queue
        if self.armed is not None or self.failed or not queue:
            return
        # no later than the latest pending event: if the machine then runs dry, the clock stops
        # where it would have stopped without the tick
        at = min(env._now + self.cycles, max(entry[0] for entry in queue))
        tick = self.armed = Event(env)
        tick._ok = True
        tick._value = None
        tick.callbacks = [self._tick]
        # env.schedule(tick, NORMAL, at - now), as an entry of SimPy's queue
        heappush(queue, (at, NORMAL, next(env._eid), tick))

    def disarm(self) -> None:
        """Take the pending tick, if any, off SimPy's queue (the device stopped running: a
        later run arms its own, and a callback replaced meanwhile is not called)."""
        tick = self.armed
        if tick is None:
            return
        self.armed = None
        queue = self.env._queue
        for i, entry in enumerate(queue):
            if entry[3] is tick:
                queue[i] = queue[-1]
                queue.pop()
                heapify(queue)
                break

    def _tick(self, _event: Event) -> None:
        self.armed = None
        wall = time.perf_counter()
        spent = wall - self._last_tick
        self._last_tick = wall
        # aim the next tick at period_s of wall time from now: the simulated rate varies
        # along a run (warm-up, tails), so the interval follows it by factors of 2 at most
        if spent < self.period_s / 2:
            self.cycles = min(self.cycles * 2, MAX_CYCLES)
        elif spent > self.period_s * 2:
            self.cycles = max(self.cycles // 2, MIN_CYCLES)
        if wall - self._last_report >= self.period_s:
            self._last_report = wall
            try:
                self.report(int(self.env.now))
            except Exception as exc:
                # a failing display must not fail the simulation it only watches
                self.failed = True
                warnings.warn(f"the progress callback raised {type(exc).__name__}: {exc}; "
                              f"no further progress reports from this device", RuntimeWarning,
                              stacklevel=1)
                return
        self.arm()

"""SimPy's event loop with ``Environment.step`` inline.

``Environment.run`` calls the Python method ``step`` once per event (about 66,000 of them in a
timing-mode MSE backward at 2^24 elements, 40,000 in a 256 x 4096 x 4096 FLCE schedule).
:func:`run` is ``Environment.run`` with the body of ``step`` in its loop: the same events
processed in the same order with the same callbacks, the same ``until`` handling (a number is
an URGENT event at that time; an event's later callbacks are put back for the next run, as
SimPy does) and the same errors, one Python call fewer per event.

While ``step`` is replaced, on the class or on the environment (a benchmark that counts events
wraps it), both loops call it instead, so what the wrapper counts stays true.
"""
from __future__ import annotations

from heapq import heappop
from typing import Any

from simpy.core import EmptySchedule, Environment, StopSimulation
from simpy.events import URGENT, Event, EventPriority

_STEP = Environment.step


def step_is_wrapped(env: Environment) -> bool:
    """Whether ``step`` is not SimPy's own (wrapped or replaced, on the class or on this
    environment itself): then the loops call it."""
    return type(env).step is not _STEP or "step" in getattr(env, "__dict__", ())


def resume_later(env: Environment, event: Event, callbacks: list, stopped: Any) -> None:
    """What ``step`` does when a callback stops the simulation: the callbacks after the one
    that stopped (``stopped``) run when the simulation resumes."""
    event.callbacks = callbacks[callbacks.index(stopped) + 1:]
    env.schedule(event, EventPriority(-1))


def failure(event: Event) -> BaseException:
    """What ``step`` raises for a failed event nobody handled: a copy of its exception, caused
    by it (the environment crashes)."""
    exc = type(event._value)(*event._value.args)
    exc.__cause__ = event._value
    return exc


def run(env: Environment, until: Any = None) -> Any:
    """``env.run(until)``: process events until ``until`` (an event, or a time) or none is left."""
    if step_is_wrapped(env):
        return env.run(until=until)
    if until is not None:
        if not isinstance(until, Event):
            # Assume that *until* is a number: an event before all regular ones at that time
            at = until if isinstance(until, int) else float(until)
            if at <= env.now:
                raise ValueError(f"until ({at}) must be greater than the current simulation time")
            until = Event(env)
            until._ok = True
            until._value = None
            env.schedule(until, URGENT, at - env.now)
        elif until.callbacks is None:
            return until.value                       # already processed
        until.callbacks.append(StopSimulation.callback)
    try:
        while True:
            # Environment.step
            try:
                env._now, _, _, event = heappop(env._queue)
            except IndexError:
                raise EmptySchedule from None
            callbacks, event.callbacks = event.callbacks, None   # type: ignore[assignment]
            try:
                for callback in callbacks:
                    callback(event)
            except StopSimulation:
                resume_later(env, event, callbacks, callback)
                raise
            if not event._ok and not hasattr(event, "_defused"):
                raise failure(event)
    except StopSimulation as exc:
        return exc.args[0]                           # == until.value
    except EmptySchedule:
        if until is not None:
            assert not until.triggered
            raise RuntimeError(f'No scheduled events left but "until" event was not triggered: {until}') from None
    return None

"""``asc.lib.runtime`` as a kernel launch needs it: ``current_stream()``.

Every launch of opsim.asc runs on its own fresh simulated device and stream, so the stream
object a kernel is launched with only has to exist.
"""
from __future__ import annotations


class Stream:
    """A placeholder for the launch's stream (the simulator creates the real one)."""

    def __repr__(self) -> str:
        return "asc.lib.runtime.Stream(simulated)"


_CURRENT = Stream()


def current_stream() -> Stream:
    return _CURRENT


def synchronize() -> None:
    """Launches complete before they return; nothing to wait for."""

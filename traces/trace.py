"""The trace data model: columnar storage of slices, counters and flows.

Events are appended to typed ``array.array`` columns while the simulation runs (a few hundred
nanoseconds each, no per-event dicts) and turned into numpy arrays on demand. Names, tracks and
argument strings are interned. Time is integer device cycles; exporters convert to µs.

Levels: ``off`` records nothing, ``launch`` records launches and blocks, ``tile`` adds one slice
per pipe per tile (instructions of the same tile on the same pipe are merged), ``instruction``
records every instruction.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import numpy as np

LEVELS = ("off", "launch", "tile", "instruction")

# Thread order inside a core process, the vendor simulator's rows first.
PIPE_ORDER = ("SCALAR", "MTE2", "MTE1", "CUBE", "FIXP", "VECTOR", "MTE3", "DMA", "FLOWCTRL")


def level_index(level: str) -> int:
    try:
        return LEVELS.index(level)
    except ValueError:
        raise ValueError(f"trace level {level!r} is not one of {', '.join(LEVELS)}") from None


@dataclass(frozen=True)
class Slice:
    """One slice, as returned by :meth:`Trace.slices` (a row view, for tests and tools)."""

    process: str
    thread: str
    name: str
    start: int
    end: int
    elements: int
    nbytes: int
    tile: int
    addr: int
    detail: str


class Trace:
    """Columnar trace of one simulated run."""

    def __init__(self, level: str = "instruction", clock_hz: float = 1e9,
                 metadata: Mapping[str, Any] | None = None) -> None:
        self.level = level
        self._level = level_index(level)
        self.clock_hz = float(clock_hz)
        self.metadata: dict[str, Any] = dict(metadata or {})
        self._strings: list[str] = []
        self._string_ids: dict[str, int] = {}
        self._tracks: list[tuple[int, int]] = []          # (process string id, thread string id)
        self._track_ids: dict[tuple[str, str], int] = {}
        # slices
        self.s_track = array("i")
        self.s_name = array("i")
        self.s_start = array("q")
        self.s_end = array("q")
        self.s_elements = array("q")
        self.s_bytes = array("q")
        self.s_tile = array("i")
        self.s_addr = array("q")
        self.s_detail = array("i")
        # counters: (counter track id, time, value)
        self.c_track = array("i")
        self.c_time = array("q")
        self.c_value = array("d")
        self._counter_tracks: list[tuple[int, int]] = []   # (process id, series name id)
        self._counter_ids: dict[tuple[str, str], int] = {}
        # flows: from slice index to slice index
        self.f_from = array("q")
        self.f_to = array("q")
        self.f_name = array("i")

    # -- recording -------------------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        return self._level > 0

    def records(self, level: str) -> bool:
        return self._level >= LEVELS.index(level)

    def intern(self, s: str) -> int:
        i = self._string_ids.get(s)
        if i is None:
            i = len(self._strings)
            self._strings.append(s)
            self._string_ids[s] = i
        return i

    def string(self, i: int) -> str:
        return self._strings[i]

    def track(self, process: str, thread: str) -> int:
        key = (process, thread)
        t = self._track_ids.get(key)
        if t is None:
            t = len(self._tracks)
            self._tracks.append((self.intern(process), self.intern(thread)))
            self._track_ids[key] = t
        return t

    def add_slice(self, track: int, name: str, start: int, end: int, *, elements: int = 0,
                  nbytes: int = 0, tile: int = -1, addr: int = -1, detail: str = "") -> int:
        """Append a slice on ``track``; returns its index (for flows)."""
        self.s_track.append(track)
        self.s_name.append(self.intern(name))
        self.s_start.append(start)
        self.s_end.append(end)
        self.s_elements.append(elements)
        self.s_bytes.append(nbytes)
        self.s_tile.append(tile)
        self.s_addr.append(addr)
        self.s_detail.append(self.intern(detail) if detail else -1)
        return len(self.s_track) - 1

    def extend_slice(self, index: int, end: int, *, elements: int = 0, nbytes: int = 0) -> None:
        """Grow the last slice of a track (tile level merges a tile's instructions)."""
        self.s_end[index] = end
        self.s_elements[index] += elements
        self.s_bytes[index] += nbytes

    def add_counter(self, process: str, series: str, time: int, value: float) -> None:
        key = (process, series)
        c = self._counter_ids.get(key)
        if c is None:
            c = len(self._counter_tracks)
            self._counter_tracks.append((self.intern(process), self.intern(series)))
            self._counter_ids[key] = c
        self.c_track.append(c)
        self.c_time.append(time)
        self.c_value.append(float(value))

    def add_flow(self, from_slice: int, to_slice: int, name: str = "flag") -> None:
        self.f_from.append(from_slice)
        self.f_to.append(to_slice)
        self.f_name.append(self.intern(name))

    # -- reading ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.s_track)

    @property
    def processes(self) -> list[str]:
        seen: dict[str, None] = {}
        for p, _ in self._tracks:
            seen.setdefault(self._strings[p], None)
        for p, _ in self._counter_tracks:
            seen.setdefault(self._strings[p], None)
        return list(seen)

    def track_names(self, t: int) -> tuple[str, str]:
        p, th = self._tracks[t]
        return self._strings[p], self._strings[th]

    @property
    def tracks(self) -> list[tuple[str, str]]:
        return [self.track_names(t) for t in range(len(self._tracks))]

    def columns(self) -> dict[str, np.ndarray]:
        """The slice columns as numpy arrays (no copies of the strings)."""
        return {
            "track": np.frombuffer(self.s_track, dtype=np.int32) if len(self) else np.zeros(0, np.int32),
            "name": np.asarray(self.s_name, dtype=np.int32),
            "start": np.asarray(self.s_start, dtype=np.int64),
            "end": np.asarray(self.s_end, dtype=np.int64),
            "elements": np.asarray(self.s_elements, dtype=np.int64),
            "bytes": np.asarray(self.s_bytes, dtype=np.int64),
            "tile": np.asarray(self.s_tile, dtype=np.int32),
            "addr": np.asarray(self.s_addr, dtype=np.int64),
            "detail": np.asarray(self.s_detail, dtype=np.int32),
        }

    def slices(self, process: str | None = None, thread: str | None = None) -> Iterator[Slice]:
        for i in range(len(self)):
            p, th = self.track_names(self.s_track[i])
            if (process is None or p == process) and (thread is None or th == thread):
                d = self.s_detail[i]
                yield Slice(p, th, self._strings[self.s_name[i]], self.s_start[i], self.s_end[i],
                            self.s_elements[i], self.s_bytes[i], self.s_tile[i], self.s_addr[i],
                            self._strings[d] if d >= 0 else "")

    def counters(self) -> Iterator[tuple[str, str, int, float]]:
        for i in range(len(self.c_track)):
            p, s = self._counter_tracks[self.c_track[i]]
            yield self._strings[p], self._strings[s], self.c_time[i], self.c_value[i]

    def flows(self) -> Iterator[tuple[int, int, str]]:
        for i in range(len(self.f_from)):
            yield self.f_from[i], self.f_to[i], self._strings[self.f_name[i]]

    def cycles_to_us(self, cycles: float) -> float:
        return cycles * 1e6 / self.clock_hz

    def memory_bytes(self) -> int:
        """Host bytes held by the columns (for the trace-memory benchmark)."""
        cols = (self.s_track, self.s_name, self.s_start, self.s_end, self.s_elements, self.s_bytes,
                self.s_tile, self.s_addr, self.s_detail, self.c_track, self.c_time, self.c_value,
                self.f_from, self.f_to, self.f_name)
        return sum(c.itemsize * len(c) for c in cols)

    def to_chrome_json(self, path: str | None = None) -> dict:
        """Export as Chrome Trace Event JSON (see :mod:`traces.chrome`); writes ``path`` if given."""
        from traces.chrome import to_chrome
        return to_chrome(self, path)

"""The trace data model: columnar storage of slices, counters and flows.

Events are appended to typed ``array.array`` columns while the simulation runs (nine appends
and two dictionary look-ups per slice, no per-event dicts: 56 bytes per slice, 20 per counter
point, 20 per flow) and turned into numpy arrays on demand. Names, tracks and argument strings
are interned. Time is integer device cycles; exporters convert to µs.

Levels: ``off`` records nothing, ``launch`` records launches (a ``host`` process, one thread per
stream) and blocks (a ``BLOCK`` row per core), ``tile`` adds one slice per pipe per tile
(instructions of the same tile on the same pipe are merged), flag hand-offs between tiles as
flows and the counters (link bandwidth, L2 hit rate, UB occupancy), ``instruction`` records
every busy instruction with its flows. ``instruction`` is ``opsim.run``'s default: an
``add_slice`` costs about 1 µs of CPU and a whole run at instruction level about 3 µs per recorded
event, some 10% of the run (``benchmarks/trace_export.py`` measures both).

Views and exports live in their own modules: :mod:`traces.chrome` (Chrome JSON in the vendor's
layout), :mod:`traces.loader` (JSON back to a Trace), :mod:`traces.perfetto` (protobuf),
:mod:`traces.summary`, :mod:`traces.plots`, :mod:`traces.report` (HTML), :mod:`traces.schema`
(structural checks of an exported file).
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass
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
        self._flow_names: dict[tuple[int, int], int] = {}

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
        """Append a slice on ``track``; returns its index (for flows).

        The simulator calls this once per busy instruction, so it is kept to nine typed appends
        and two dictionary look-ups (benchmarks/trace_export.py measures it).
        """
        ids = self._string_ids
        nid = ids.get(name)
        if nid is None:
            nid = self.intern(name)
        did = -1
        if detail:
            known = ids.get(detail)
            did = known if known is not None else self.intern(detail)
        col = self.s_track
        col.append(track)
        self.s_name.append(nid)
        self.s_start.append(start)
        self.s_end.append(end)
        self.s_elements.append(elements)
        self.s_bytes.append(nbytes)
        self.s_tile.append(tile)
        self.s_addr.append(addr)
        self.s_detail.append(did)
        return len(col) - 1

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

    def add_flow(self, from_slice: int, to_slice: int, name: str | None = None) -> None:
        """A flow arrow from slice ``from_slice`` to slice ``to_slice`` (a flag hand-off).

        Without a name the flow is named after the two pipes, e.g. ``MTE2->VECTOR`` (data ready)
        or ``VECTOR->MTE2`` (buffer free), which is what a reader of the trace wants to see.
        """
        if name is None:
            key = (self.s_track[from_slice], self.s_track[to_slice])
            nid = self._flow_names.get(key)
            if nid is None:
                nid = self.intern(f"{self._strings[self._tracks[key[0]][1]]}->"
                                  f"{self._strings[self._tracks[key[1]][1]]}")
                self._flow_names[key] = nid
        else:
            nid = self.intern(name)
        self.f_from.append(from_slice)
        self.f_to.append(to_slice)
        self.f_name.append(nid)

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

    def run_window(self) -> tuple[int, int]:
        """(first, last) cycle of the run: the host launch rows if there are any, else all slices."""
        if not len(self):
            return 0, 0
        host = [t for t, (p, _) in enumerate(self._tracks) if self._strings[p] == "host"]
        start = np.asarray(self.s_start, dtype=np.int64)
        end = np.asarray(self.s_end, dtype=np.int64)
        if host:
            sel = np.isin(np.asarray(self.s_track, dtype=np.int32), host)
            if sel.any():
                return int(start[sel].min()), int(max(end.max(), end[sel].max()))
        return int(start.min()), int(end.max())

    # -- exports and views (each in its own module) ------------------------------------------------
    def to_chrome_json(self, path: str | None = None) -> dict | None:
        """Chrome Trace Event JSON in the vendor's layout (see :mod:`traces.chrome`).

        Without ``path`` the document is returned as a dict; with ``path`` it is streamed to the
        file (``.gz`` compresses) and nothing is returned, so a large trace never exists twice.
        """
        from opsim.traces.chrome import to_chrome, write_chrome
        if path is None:
            return to_chrome(self)
        write_chrome(self, path)
        return None

    def to_perfetto(self, path: str | None = None) -> bytes:
        """Perfetto TrackEvent protobuf (needs the ``perfetto`` extra); writes ``path`` if given."""
        from opsim.traces.perfetto import to_perfetto
        return to_perfetto(self, path)

    @classmethod
    def load(cls, path_or_doc: Any) -> "Trace":
        """Read a trace written by :meth:`to_chrome_json` (a path, ``.gz`` path or parsed dict)."""
        from opsim.traces.loader import load_chrome
        return load_chrome(path_or_doc)

    def summary(self) -> Any:
        """Per-pipe busy %, link bandwidth, UB peak and the bound (:class:`traces.summary.Summary`)."""
        from opsim.traces.summary import summarize
        return summarize(self)

    def plot(self, kind: str = "timeline", path: str | None = None, **options: Any) -> Any:
        """A matplotlib picture of the trace (timeline, bandwidth, utilisation, roofline)."""
        from opsim.traces.plots import plot
        return plot(self, kind, path, **options)

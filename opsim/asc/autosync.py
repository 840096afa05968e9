"""The flags pyasc's compiler inserts for a kernel written with ``asc.LocalTensorAuto``.

pyasc has a third way to synchronise the pipes of a core, besides hand-placed
``set_flag``/``wait_flag`` and the TQue framework: a kernel that creates its local tensors
with ``asc.LocalTensorAuto`` (or is decorated ``@asc.jit(insert_sync=True)``) is compiled with
an insert-sync pass, which puts a flag between two instructions of different pipes wherever the
second touches bytes the first touched and at least one of them writes (read after write,
write after read, write after write). Without those flags the pipes of the core run ahead of
each other and the kernel reads stale data.

opsim does the same while the kernel's Python runs: :class:`AutoSync` sees every instruction
of the block before it is handed to the dispatcher, keeps, per memory (the core's UB, L1, …
and GM), which pipe last wrote each byte range and which pipes have read it since, and emits a
``SetFlag(producer, consumer)`` / ``WaitFlag(producer, consumer)`` pair in front of an
instruction that depends on another pipe's earlier work. The set goes where the dependent
instruction is issued, not right after the instruction it depends on (the front-end cannot
reach back into instructions already handed over), so it also waits for whatever the producer
pipe issued in between: never less ordering than needed, sometimes a little more. A pair is
left out when the consumer pipe is already ordered after that work (an earlier pair, directly
or through a third pipe).
"""
from __future__ import annotations

from typing import Any

from opsim.simulator.isa import SetFlag, WaitFlag


class _Span:
    """A byte range of one memory: its last writer (pipe, sequence number) and its readers since."""

    __slots__ = ("lo", "hi", "writer", "readers")

    def __init__(self, lo: int, hi: int, writer: tuple[str, int] | None, readers: dict[str, int]) -> None:
        self.lo, self.hi, self.writer, self.readers = lo, hi, writer, readers

    def cut(self, lo: int, hi: int) -> "_Span":
        return _Span(lo, hi, self.writer, dict(self.readers))


class AutoSync:
    """Inserts the flag pairs between the pipes of one block (one core) of a launch."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.issued: dict[str, int] = {}                 # pipe -> instructions issued to it so far
        # (consumer, producer) -> how many of the producer's instructions the consumer is
        # ordered after (by a flag pair, directly or through another pipe)
        self.ordered: dict[tuple[str, str], int] = {}
        self.spans: dict[str, list[_Span]] = {}          # memory -> sorted, disjoint spans
        self.events: dict[tuple[str, str], int] = {}     # (producer, consumer) -> its event id
        self.pairs = 0                                   # flag pairs inserted (for the tests)

    def before(self, instr: Any) -> list[Any]:
        """The flag instructions to issue before ``instr``; records ``instr``'s accesses."""
        pipe = instr.pipe
        seq = self.issued.get(pipe, 0) + 1
        self.issued[pipe] = seq
        accesses = instr.accesses(None)
        if not accesses:
            return []
        need: dict[str, int] = {}
        for memory, addr, nbytes, write in accesses:
            if nbytes <= 0:
                continue
            for span in self._overlapping(memory, addr, addr + nbytes):
                w = span.writer
                if w is not None and w[0] != pipe and w[1] > need.get(w[0], 0):
                    need[w[0]] = w[1]                    # read/write after another pipe's write
                if write:
                    for q, s in span.readers.items():
                        if q != pipe and s > need.get(q, 0):
                            need[q] = s                  # write after another pipe's read
        flags: list[Any] = []
        for producer in sorted(need):
            if self.ordered.get((pipe, producer), 0) >= need[producer]:
                continue
            key = (producer, pipe)
            event = self.events.get(key)
            if event is None:
                event = self.events[key] = self.state.reserved_event(producer, pipe)
            flags.append(SetFlag(producer, pipe, event))
            flags.append(WaitFlag(producer, pipe, event))
            self.pairs += 1
            # the set runs after every instruction the producer has been given so far, and
            # after everything those were ordered after
            self.ordered[(pipe, producer)] = self.issued.get(producer, 0)
            for (consumer, other), n in list(self.ordered.items()):
                if consumer == producer and other != pipe and n > self.ordered.get((pipe, other), 0):
                    self.ordered[(pipe, other)] = n
        for memory, addr, nbytes, write in accesses:
            if nbytes > 0:
                self._record(memory, addr, addr + nbytes, pipe, seq, write)
        return flags

    # -- the span map of one memory ------------------------------------------------------------
    def _overlapping(self, memory: str, lo: int, hi: int) -> list[_Span]:
        spans = self.spans.get(memory)
        if not spans:
            return []
        i = self._first(spans, lo)
        out = []
        while i < len(spans) and spans[i].lo < hi:
            if spans[i].hi > lo:
                out.append(spans[i])
            i += 1
        return out

    @staticmethod
    def _first(spans: list[_Span], lo: int) -> int:
        a, b = 0, len(spans)
        while a < b:                     # the first span whose end is past lo
            m = (a + b) // 2
            if spans[m].hi <= lo:
                a = m + 1
            else:
                b = m
        return a

    def _record(self, memory: str, lo: int, hi: int, pipe: str, seq: int, write: bool) -> None:
        spans = self.spans.setdefault(memory, [])
        a = self._first(spans, lo)
        b = a
        while b < len(spans) and spans[b].lo < hi:
            b += 1
        new: list[_Span] = []
        cursor = lo
        for s in spans[a:b]:
            if s.lo < lo:
                new.append(s.cut(s.lo, lo))              # the part before the access keeps its history
            if s.lo > cursor:
                new.append(_Span(cursor, s.lo, None, {}))   # a gap the access covers
            mid = s.cut(max(s.lo, lo), min(s.hi, hi))
            new.append(mid)
            cursor = mid.hi
            if s.hi > hi:
                new.append(s.cut(hi, s.hi))
        if cursor < hi:
            new.append(_Span(cursor, hi, None, {}))
        for s in new:
            if lo <= s.lo and s.hi <= hi:
                if write:
                    s.writer, s.readers = (pipe, seq), {}
                else:
                    s.readers[pipe] = seq
        spans[a:b] = new

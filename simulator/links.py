"""Fluid fair-share memory links in integer-cycle SimPy time.

A DMA transfer moves bytes over one or more shared physical links (HBM, DDR, an L2 port, ...).
Rather than simulating bytes or bursts, every link is a *fluid* server: all transfers in flight
share its bandwidth, and the sharing is recomputed only when the set of moving transfers changes
(a transfer starts moving bytes or finishes).  Between two such moments every rate is constant.
A run therefore costs two recomputes per transfer.  Transfers with the same base rate, pool and
links always get the same rate, so a recompute works on these rate classes (usually two or
three: loads, stores, L2 hits) and touches individual transfers only when they start or finish.
The cost never grows with cycles or bytes.

Rates
-----
Each transfer has a *demand*, the most it could use on its own::

    demand = base_rate + pool.capacity / (active transfers in that pool)

The pool term reproduces Huawei's calibrated MTE2 load model (docs/sources.md#mte-load-store): each of *n*
cores loading concurrently gets ``a + b/n`` bytes/cycle (a = 9.9074, b = 15.896 on 910B).  We
read that as a guaranteed per-transfer rate ``a`` plus a bonus pool ``b`` split equally among
the transfers using it.

Demands are then reconciled with link capacities by max-min fair progressive filling
("water-filling"): all unfrozen transfers rise together; a transfer freezes when it reaches its
demand or when one of its links saturates; capacity a frozen transfer does not use stays
available to the others.

Time
----
Time is integer cycles.  A transfer first pays ``startup`` cycles of latency during which it
is invisible to the bandwidth model, then it becomes *active*.  It completes at the first
integer cycle at or after its last byte arrives, and keeps its share of the links (and its
place in the pool count) until that cycle.  Because every start and every completion happens
on an integer cycle, every recompute does too.

Accounting
----------
Each link records its aggregate rate as piecewise-constant segments with integer boundaries.
A segment stays open while the link's allocated rate and its set of transfers stay the same.
The rate stored for a closed segment is the bytes actually carried in it divided by its
length.  This differs from the allocated (nominal) rate only in a segment where a transfer
delivers its last byte part-way through a cycle: the transfer still holds its allocation until
the integer completion cycle, but carries no more bytes, so the stored rate is lower than the
allocation.  Storing the carried rate keeps ``sum(rate * duration) == bytes_carried``
(conservation), and it can never exceed the allocation, which never exceeds capacity.
"""

from __future__ import annotations

import heapq
import math
import operator
from array import array
from collections import deque
from dataclasses import dataclass
from heapq import heappush
from typing import Any, Callable, Sequence

import numpy as np
import simpy
from simpy.events import NORMAL as _NORMAL, PENDING as _PENDING

__all__ = ["Link", "Pool", "LinkNetwork", "TransferRecord"]

# Remaining bytes at or below max(_ABS_TOL, _REL_TOL * nbytes) count as delivered.  The tolerance
# is far larger than float rounding in the running subtraction (about 1e-16 relative per step)
# and far smaller than one byte.  So rounding can neither add a cycle nor leave a negative
# remainder.
_REL_TOL = 1e-9
_ABS_TOL = 1e-6
# Relative slack used to decide that a link's fair share equals the current fill level.
_LEVEL_SLACK = 1e-12
# A rate class moves the origin of its per-member byte counter back to 0 once the counter
# reaches this many bytes.  Remainders are differences against the counter, so the counter must
# stay small for their rounding (about 1e-16 of it per recompute) to stay far below _ABS_TOL.
_REBASE = 2.0 ** 16
# Adjacent closed segments whose carried rates agree this closely are merged.  The merge adds
# their bytes, not their rates, so it costs no conservation.
_MERGE_REL = 1e-9

OnChange = Callable[[int, dict[str, float]], None]


@dataclass(frozen=True, slots=True)   # slots: one per transfer, and built a little faster
class TransferRecord:
    """What a completed transfer reports.

    ``issue`` is the cycle ``transfer()`` was called.  ``start = issue + startup`` is when
    it began moving bytes.  ``end`` is the completion cycle.
    """

    tag: Any        # (Any, not object: mypyc's dataclass support looks names up at run time)
    nbytes: int
    issue: int
    start: int
    end: int

    @property
    def duration(self) -> int:
        """Cycles from issue to completion, startup latency included."""
        return self.end - self.issue

    def __reduce__(self) -> tuple:
        # pickled and copied through the constructor: compiled, the dataclass's own way would
        # assign to a frozen field
        return (TransferRecord, (self.tag, self.nbytes, self.issue, self.start, self.end))


def _check_capacity(kind: str, name: Any, capacity: Any, *, allow_zero: bool) -> float:
    try:
        cap = float(capacity)
    except (TypeError, ValueError):
        raise TypeError(f"{kind} {name!r}: capacity must be a number, got {capacity!r}") from None
    ok = math.isfinite(cap) and (cap >= 0.0 if allow_zero else cap > 0.0)
    if not ok:
        need = "finite and >= 0" if allow_zero else "finite and > 0"
        raise ValueError(f"{kind} {name!r}: capacity must be {need}, got {capacity!r}")
    return cap


_INF = math.inf
# Module-level aliases: _recompute finds them with a cached global load instead of binding
# three attribute look-ups per call.
_ceil = math.ceil
_heappop = heapq.heappop


def _checked(nbytes: Any, base_rate: Any, startup: Any) -> tuple[int, float, int]:
    """``transfer``'s arguments converted and checked: (nbytes, base_rate, startup)."""
    try:
        nb = operator.index(nbytes)
    except TypeError:
        raise TypeError(f"nbytes must be an integer, got {nbytes!r}") from None
    if nb < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
    try:
        base = float(base_rate)
    except (TypeError, ValueError):
        raise TypeError(f"base_rate must be a number, got {base_rate!r}") from None
    if not (math.isfinite(base) and base > 0.0):
        raise ValueError(f"base_rate must be finite and > 0, got {base_rate!r}")
    try:
        st = operator.index(startup)
    except TypeError:
        raise TypeError(f"startup must be an integer number of cycles, got {startup!r}") from None
    if st < 0:
        raise ValueError(f"startup must be >= 0, got {startup!r}")
    return nb, base, st


class Link:
    """A shared physical link, ``capacity`` bytes per cycle, shared max-min fairly.

    Create links with :meth:`LinkNetwork.add_link`.  Statistics:

    * ``bytes_carried``: total bytes carried so far.  Bytes are credited at each recompute,
      so a transfer still in flight is counted up to the last recompute.
    * ``rate``: the aggregate rate allocated right now (nominal).
    * ``active``: number of active transfers crossing the link.
    * ``rate_segments`` / :meth:`bandwidth_series` / :meth:`peak_rate`: the aggregate rate over
      time (see the module docstring for how the carried rate differs from the nominal rate).
    """

    def __init__(self, name: Any, capacity: Any) -> None:
        self.name = name
        self.capacity = _check_capacity("link", name, capacity, allow_zero=False)
        self.bytes_carried: float = 0.0
        self.rate: float = 0.0
        self.active: int = 0
        # Unclamped sum of the allocated rates of the transfers on the link.  Bytes are credited
        # from it, so it must be the exact sum, not the value clamped for reporting.
        self._alloc: float = 0.0
        # Closed history as a step function in typed arrays (16 bytes per step).  Python lists
        # of ints and floats would cost about 100 bytes per step, and a busy link can record
        # one step per recompute, i.e. millions per run.  Step i covers
        # [_times[i], _times[i+1]) (the last one ends at _end) and carried _bytes[i].  Idle gaps
        # are steps with 0 bytes.  Bytes are stored instead of rates so that merging steps
        # stays exact.
        self._times = array("q")
        self._bytes = array("d")
        self._end: int = 0
        # The open segment, if any: started at _open_start, carried _open_bytes so far.
        self._open_start: int | None = None
        self._open_bytes: float = 0.0
        # What forget_history folded away: the steps before history_start, their highest
        # carried rate and their bytes (a long-lived runtime keeps aggregates, not every step).
        self.history_start: int = 0
        self.bytes_forgotten: float = 0.0
        self._peak_forgotten: float = 0.0
        # Scratch of LinkNetwork._recompute: the recompute that last shared this link out
        # (_stamp) and last started or finished a transfer on it (_touched), and the aggregate
        # rate the sharing found (_share_sum).
        self._stamp: int = -1
        self._touched: int = -1
        self._share_sum: float = 0.0
        self._left: float = 0.0         # and, while it fills (_fill), the capacity left,
        self._unfrozen: int = 0         # the transfers not frozen yet,
        self._saturated: bool = False   # and whether the link saturated in this round

    def __repr__(self) -> str:
        return f"Link({self.name!r}, capacity={self.capacity:g}, rate={self.rate:g})"

    # -- segment bookkeeping (called by LinkNetwork only) ------------------------------------

    def _close(self, now: int) -> None:
        """Close the open segment at ``now``, merging it into the previous one if the rates match."""
        start = self._open_start
        if start is None:
            return
        self._open_start = None
        nbytes = self._open_bytes
        self._open_bytes = 0.0
        if now <= start:
            # Zero-length segment (two recomputes in one cycle): no time passed, so no bytes.
            return
        times = self._times
        if times:
            end = self._end
            if end == start:
                prev = self._bytes[-1]
                if prev > 0.0 and math.isclose(nbytes / (now - start), prev / (start - times[-1]),
                                               rel_tol=_MERGE_REL, abs_tol=0.0):
                    self._bytes[-1] = prev + nbytes
                    self._end = now
                    return
            else:
                times.append(end)  # idle gap since the last segment
                self._bytes.append(0.0)
        times.append(start)
        self._bytes.append(nbytes)
        self._end = now

    def _open(self, now: int) -> None:
        self._open_start = now
        self._open_bytes = 0.0

    def forget_history(self, before: Any) -> None:
        """Fold the closed steps that end at or before cycle ``before`` into aggregates
        (``history_start``, ``bytes_forgotten`` and the peak), so a device that keeps running
        holds a bounded history.  ``bytes_carried`` and :meth:`peak_rate` are unchanged; the
        series and segments then start at ``history_start``.  The last closed step is always
        kept: the next segment may still merge into it, exactly as if nothing was folded."""
        times = self._times
        n = len(times) - 1                  # candidates: every closed step but the last
        if n <= 0:
            return
        # step i covers [times[i], times[i + 1]): k = how many of the candidates end by ``before``
        ends = np.array(times[1:n + 1], dtype=np.int64)
        k = int(np.searchsorted(ends, before, side="right"))
        if k <= 0:
            return
        nbytes = np.array(self._bytes[:k], dtype=np.float64)
        edges = np.array(times[:k + 1], dtype=np.int64)
        rates = np.minimum(nbytes / np.diff(edges), self.capacity)     # as _closed_steps computes them
        self._peak_forgotten = max(self._peak_forgotten, float(rates.max()))
        self.bytes_forgotten += float(nbytes.sum())
        self.history_start = int(times[k])
        del times[:k]
        del self._bytes[:k]

    # -- statistics ---------------------------------------------------------------------------

    def _closed_steps(self) -> tuple[np.ndarray, np.ndarray]:
        """Closed history as (times with the final end appended, carried rate per step)."""
        times = np.frombuffer(self._times, dtype=np.int64).copy() if self._times else np.zeros(0, np.int64)
        if not len(times):
            return times, np.zeros(0)
        edges = np.append(times, self._end)
        rates = np.frombuffer(self._bytes, dtype=np.float64) / np.diff(edges)
        # The clamp only removes float rounding (a completing transfer may be credited up to
        # its ~1e-9 relative tolerance more than rate x time).  That is far below the 1e-6
        # conservation tolerance, and it keeps "rate <= capacity" exact for observers.
        return edges, np.minimum(rates, self.capacity)

    @property
    def rate_segments(self) -> list[tuple[int, int | None, float]]:
        """``(start, end, rate)`` for each segment in which the link carried traffic.

        Closed segments give the carried rate.  The open segment, if any, comes last, with
        ``end = None`` and the rate allocated now.  Idle stretches have no segment.
        """
        edges, rates = self._closed_steps()
        out: list[tuple[int, int | None, float]] = [
            (int(edges[i]), int(edges[i + 1]), float(rates[i]))
            for i in range(len(rates)) if self._bytes[i] > 0.0
        ]
        if self._open_start is not None:
            out.append((self._open_start, None, self.rate))
        return out

    def bandwidth_series(self) -> tuple[np.ndarray, np.ndarray]:
        """Step function of the aggregate rate: ``(times, rates)``.

        ``rates[i]`` holds on ``[times[i], times[i+1])``.  Before ``times[0]`` the rate is 0.
        Idle gaps appear as explicit 0 entries, and equal consecutive rates are merged.  When no
        segment is open, the last entry is ``(end of last traffic, 0.0)``, so
        ``sum(rates[:-1] * diff(times))`` equals ``bytes_carried`` (minus ``bytes_forgotten``
        once :meth:`forget_history` has folded the steps before ``history_start``).
        """
        edges, rates = self._closed_steps()
        rates = np.append(rates, 0.0) if len(edges) else rates
        if self._open_start is not None:
            if len(edges) and edges[-1] == self._open_start:
                edges, rates = edges[:-1], rates[:-1]
            edges = np.append(edges, self._open_start).astype(np.int64)
            rates = np.append(rates, self.rate)
        if len(rates) > 1:
            keep = np.empty(len(rates), dtype=bool)
            keep[0] = True
            keep[1:] = rates[1:] != rates[:-1]
            edges, rates = edges[keep], rates[keep]
        return edges.astype(np.int64), rates.astype(np.float64)

    @property
    def open_since(self) -> int | None:
        """Start cycle of the open segment (transfers are crossing the link now), or None while
        the link is idle: the carried rate from then on is not known until the segment closes."""
        return self._open_start

    def peak_rate(self) -> float:
        """Highest aggregate rate seen: carried rate of closed segments, allocated rate of the open one."""
        _, rates = self._closed_steps()
        peak = max(float(rates.max()) if len(rates) else 0.0, self._peak_forgotten)
        if self._open_start is not None:
            peak = max(peak, self.rate)
        return peak


class Pool:
    """A bonus-bandwidth pool: ``capacity`` bytes/cycle split equally among its active transfers.

    Create pools with :meth:`LinkNetwork.add_pool`.  ``active`` is the number of transfers that
    share the pool now.  ``bytes_carried`` counts the bytes of those transfers, at the whole
    transfer rate, not only the pool part.
    """

    def __init__(self, name: Any, capacity: Any) -> None:
        self.name = name
        self.capacity = _check_capacity("pool", name, capacity, allow_zero=True)
        self.active: int = 0
        self.bytes_carried: float = 0.0
        self._alloc: float = 0.0  # sum of the rates of its active transfers
        # The recompute that last shared out the pool (scratch of LinkNetwork._recompute).
        self._stamp: int = -1

    def __repr__(self) -> str:
        return f"Pool({self.name!r}, capacity={self.capacity:g}, active={self.active})"


class _Completion(simpy.Event):
    """The event of a transfer (:class:`_Transfer`) or of a joined completion (:class:`_Join`).
    ``parent`` is the join it is part of, if any (the join holds no reference to its parts,
    so joining makes no reference cycle: the garbage collector would have to find each one)."""

    def __init__(self, env: Any = None) -> None:
        # simpy.Event.__init__ sets these two, inline.  (The default: see _new_event.)
        self.env = env
        self.callbacks = []
        self.parent: _Join | None = None


class _Transfer(_Completion):
    """Mutable state of one transfer inside the network, and the event :meth:`LinkNetwork.transfer`
    returns (one object per transfer, not two; not part of the API).  Made by
    :meth:`LinkNetwork._start` only, which sets the fields of a pending transfer (without an
    ``__init__`` frame); the admission in :meth:`LinkNetwork._recompute` sets the others:

    ``seq`` (issue order), ``tag``, ``nbytes``, ``issue`` (cycle), ``start`` (cycle its startup
    ends), ``key`` ((base rate, pool, links): its rate class), ``done``; once admitted,
    ``threshold`` (the class's ``served`` at which its last byte has arrived), ``rank``
    (activation order) and ``cls`` (its class while active).

    Its event succeeds with ``None``: the device's DMAs, which start here through
    :meth:`LinkNetwork._start`, are waited on by pipes that never read the value, and a
    :class:`TransferRecord` per transfer was the costliest line of a completion.  The transfers
    of the public :meth:`LinkNetwork.transfer` are :class:`_RecordedTransfer` and succeed with
    their record.
    """

    __slots__ = ("seq", "tag", "nbytes", "issue", "start", "key",
                 "threshold", "rank", "done", "cls")
    seq: int
    tag: object
    nbytes: int
    issue: int
    start: int
    key: tuple
    threshold: float
    rank: int
    done: bool
    cls: _Class | None


class _RecordedTransfer(_Transfer):
    """A transfer of :meth:`LinkNetwork.transfer`: its event succeeds with its
    :class:`TransferRecord` (the type tells it apart, with no field to set per transfer)."""

    __slots__ = ()


class _WakeUp(simpy.Event):
    """The timer of a wake-up of :class:`LinkNetwork` (not part of the API): what
    ``env.timeout(delay)`` makes, already triggered with the value None, with ``callback``."""

    # triggered already, with the value None: the same for every wake-up (never set per instance)
    _value = None
    _ok = True
    gen: int        # the network's wake-up generation it was made for: only the newest acts

    def __init__(self, env: Any = None, callback: Any = None) -> None:
        # what simpy.Timeout.__init__ sets per instance, inline: one is made per recompute
        self.env = env
        self.callbacks = [callback]


# Compiled by mypyc (simulator/native.py), this module's __file__ is its extension module.
_COMPILED = not __file__.endswith(".py")


def _made(cls: Any) -> Any:
    return cls()


# An event without its __init__ call, whose fields the caller sets: object.__new__ in Python (an
# __init__ frame per transfer and wake-up saved).  Compiled, the classes have a C-level
# constructor that object.__new__ refuses, and their __init__ costs next to nothing: the
# constructor with its defaults (the caller still sets every field).
_new_event: Callable[[Any], Any] = _made if _COMPILED else object.__new__


class _Join(_Completion):
    """A completion of several transfers or joins (:meth:`LinkNetwork.all_of`), not part of the API.

    It reproduces where ``simpy.AllOf`` puts its event in SimPy's order, with fewer events.
    Events due now are processed in the order they are scheduled, so the child scheduled last
    is the one an ``AllOf`` would see last.  The ``AllOf`` is scheduled when that child is
    processed, and is processed itself after what was already queued.  So only the last child
    needs an event (its processing schedules this join's event, at the very place the
    ``AllOf`` was scheduled); a child that is not last only counts down ``remaining`` when it
    would have been scheduled, and triggers nothing.
    """

    def __init__(self, env: Any = None, remaining: int = 0) -> None:
        super().__init__(env)
        self.remaining = remaining

    def fire(self, _event: simpy.Event) -> None:
        """The last child was processed: this join is scheduled now."""
        _scheduled(self, None)


def _scheduled(event: _Completion, value: object) -> None:
    """``event`` would be scheduled now: schedule it if it is not part of a join, or if it is
    the last child of its join (whose ``fire`` is then its callback)."""
    parent = event.parent
    if parent is None:
        event.succeed(value)
        return
    parent.remaining -= 1
    if not parent.remaining:
        event.succeed(value)


class _Class:
    """The active transfers that share one (base rate, pool, links) triple (not part of the API).

    Such transfers always get the same demand and, under max-min fair filling, the same rate.
    So the class is allocated as one unit with a multiplicity, and it tracks progress once for
    all its members: ``served`` is the number of bytes each member has received since the
    class's origin, and a member admitted when ``served`` was s finishes when ``served``
    reaches ``s + nbytes``.  ``heap`` holds ``(s + nbytes - tol, seq, transfer)``: the head is
    the next member to finish, and a recompute touches only the members that finish.
    """

    __slots__ = ("base", "pool", "links", "link", "n", "served", "heap", "order", "first", "demand",
                 "rate", "pred", "kid", "key")

    def __init__(self, key: tuple) -> None:
        # ``key`` is (base rate, pool, links).  Typed as a bare tuple: mypyc unboxes a tuple of
        # fixed length and boxes it again on the way out, a new object, and the id is the key.
        self.base, self.pool, self.links = key
        # The only link of a one-link route (every DMA route of a device), else None: the
        # recompute's per-transfer and per-class steps update it without a loop (and its
        # iterator) over ``links``.
        self.link: Link | None = self.links[0] if len(self.links) == 1 else None
        self.key: tuple = key      # held, so that kid stays this key's id while the class is kept idle
        self.kid = id(key)  # its key in LinkNetwork._classes
        self.n = 0  # active members
        self.served = 0.0
        self.heap: list[tuple[float, int, _Transfer]] = []
        # Members in activation order.  Finished ones are dropped lazily from the front (and by
        # a compaction when they pile up), so order[0] is the earliest active member.
        self.order: deque[_Transfer] = deque()
        self.first = 0  # activation rank of order[0], the earliest active member (sort key)
        self.demand = 0.0
        self.rate = 0.0
        # The completion prediction of the last recompute: ceil((key - served) / rate) for the
        # heap head's key then.  ``served``, ``rate`` and the heap stay as they were until the
        # next recompute (only a recompute admits, retires or rebases), so that recompute's
        # head is the one predicted for, and it reuses the prediction.
        self.pred = 0

    def rebase(self) -> None:
        """Move the origin of ``served`` to now, so it stays small and precise on long runs."""
        s = self.served
        self.served = 0.0
        heap = [(k - s, q, t) for k, q, t in self.heap]
        for _, _, t in heap:
            t.threshold -= s
        heapq.heapify(heap)  # equal shifts keep the order, up to ties created by rounding
        self.heap = heap


#: Sort key of a rate class: the activation rank of its earliest active member.
_first_rank = operator.attrgetter("first")
#: Sort key of transfers: issue order.
_seq = operator.attrgetter("seq")
#: Sort key of active transfers: activation order.
_rank = operator.attrgetter("rank")


class LinkNetwork:
    """The set of links and pools of one simulated device, plus the transfers in flight.

    One manager drives all transfers.  It keeps a single pending SimPy timeout for the next
    interesting cycle: the earliest predicted completion, or the earliest end of a startup
    latency.  A generation counter makes superseded timeouts no-ops.  So the event count is
    O(transfers), independent of sizes and durations.

    A DMA made of several transfers (an L2-hit part on the L2 link and an HBM-miss part, plus
    the HBM write of the dirty lines it evicts) waits on :meth:`all_of`, which completes where
    ``simpy.AllOf`` would with one or two SimPy events fewer (see :class:`_Join`).

    Active transfers with the same (base rate, pool, links) form a rate class (see
    :class:`_Class`).  Allocation works on classes, and a recompute costs
    O(classes x path length + finishing and starting transfers x log(active)), not
    O(active transfers).
    """

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.links: dict[str, Link] = {}
        self.pools: dict[str, Pool] = {}
        #: Called after a recompute with ``(now, {link name: allocated aggregate rate})`` for the
        #: links whose allocated rate changed (a link that went idle reports 0.0).  It is not
        #: called when no link rate changed.  Allocated rates can differ from the carried rates of
        #: ``Link.bandwidth_series`` in a completion cycle (see the module docstring).
        self._on_change: OnChange | None = None
        #: Set (after ``on_change``) when ``on_change`` never triggers a SimPy event (a recorder):
        #: a recompute may then schedule a join's event without the relay event of its last leg
        #: (see _Join). Setting ``on_change`` clears it.
        self.on_change_passive: bool = False
        #: Number of transfers completed so far, and number of rate recomputes (a cheap probe
        #: to check that recomputes happen only at starts and completions).
        self.completed: int = 0
        self.recompute_count: int = 0

        self._classes: dict[int, _Class] = {}  # rate classes with active members, by id of their key
        # Classes that lost their last member, by id of their key, taken back when a transfer of
        # their key is admitted again (a class is made once per route, not once per busy
        # period).  An idle class is empty: no members, an empty heap and activation order.
        self._idle: dict[int, _Class] = {}
        self._pending: list[tuple[int, int, _Transfer]] = []  # heap of (start, seq, transfer)
        self._seq = 0
        self._rank = 0
        self._gen = 0
        self._wake_at: int | None = None
        self._last = self._now()  # cycle of the last recompute; rates are valid since then
        # Links and pools with active transfers, in the order step 4 of _recompute found them.
        self._busy: list[Link] = []
        self._busy_pools: list[Pool] = []
        # The classes of _classes in the order of their earliest active member (see _first_rank),
        # kept up to date instead of sorted at every recompute.
        self._ordered: list[_Class] = []
        # Numbers each recompute, so that a link or pool can be marked as seen in this one
        # (Link._stamp, Link._touched, Pool._stamp) without a set or dict built per recompute.
        self._stamp = 0
        # (base rate, pool, links) keys already validated, each to itself: a transfer carries
        # the stored tuple, so that its rate class is found by the tuple's id (hashing a nested
        # tuple at every admission cost more than the lookup)
        self._keys: dict[tuple, tuple] = {}

    # -- construction -------------------------------------------------------------------------

    def add_link(self, name: Any, capacity: Any) -> Link:
        """Create a link of ``capacity`` bytes/cycle (> 0).  Names are unique per network."""
        if name in self.links:
            raise ValueError(f"link {name!r} already exists")
        link = Link(name, capacity)
        self.links[name] = link
        return link

    def add_pool(self, name: Any, capacity: Any) -> Pool:
        """Create a bonus pool of ``capacity`` bytes/cycle (>= 0).  Names are unique per network."""
        if name in self.pools:
            raise ValueError(f"pool {name!r} already exists")
        pool = Pool(name, capacity)
        self.pools[name] = pool
        return pool

    # -- transfers ----------------------------------------------------------------------------

    def transfer(self, nbytes: Any, *, base_rate: Any, links: Sequence[Any] = (),
                 pool: Any = None, startup: Any = 0, tag: object = None) -> simpy.Event:
        """Start moving ``nbytes`` over ``links``.  Returns an event that succeeds with a
        :class:`TransferRecord` when the transfer completes.

        ``base_rate`` (> 0) is the transfer's own rate limit without the pool bonus.  ``pool``,
        if given, adds an equal share of the pool's capacity.  ``startup`` is a latency in whole
        cycles before any byte moves.  A zero-byte transfer completes right after its startup.
        """
        # The usual types are accepted at once (this runs once per transfer); anything else
        # goes through the conversions and checks, which name the bad value.  (The arguments
        # are annotated Any: compiled, this module would refuse any other type with mypyc's
        # own TypeError before these checks could name it.)
        if type(nbytes) is int and nbytes >= 0 and type(base_rate) is float and 0.0 < base_rate < _INF \
                and type(startup) is int and startup >= 0:
            nb, base, st = nbytes, base_rate, startup
        else:
            nb, base, st = _checked(nbytes, base_rate, startup)
        return self._start(nb, self._route(base, links, pool), st, tag, _RecordedTransfer)

    def _route(self, base_rate: float, links: Sequence[Any], pool: Any) -> tuple:
        """The rate-class key ``(base rate, pool, links)`` of a transfer, checked: the stored
        tuple, the same object for every transfer of that class (its rate class is found by the
        key's id; hashing a nested tuple at every admission cost more than the lookup).
        ``base_rate`` is a checked float (see :meth:`transfer`).  The device gets the keys of
        its usual routes once (Device._gm_transfer) and starts its transfers with
        :meth:`_start`, without these look-ups."""
        path = tuple(links)
        # a bare tuple, one object: mypyc would keep a tuple of known length unboxed and box it
        # anew at each use, and the rate class is found by this object's id
        key: tuple = (base_rate, pool, path)
        try:
            known = self._keys.get(key)
        except TypeError:  # an unhashable stand-in for a link: refused below, with its name
            known = None
        if known is not None:
            return known
        link: Any
        for link in path:
            if not isinstance(link, Link) or self.links.get(link.name) is not link:
                raise ValueError(f"{link!r} is not a link of this network")
        if len(set(map(id, path))) != len(path):
            raise ValueError(f"a transfer may cross each link once, got {[l.name for l in path]}")
        if pool is not None and (not isinstance(pool, Pool) or self.pools.get(pool.name) is not pool):
            raise ValueError(f"{pool!r} is not a pool of this network")
        # links and pools are never removed, so a route checked once stays valid (a device
        # uses a handful of routes for thousands of transfers)
        self._keys[key] = key
        return key

    def _start(self, nbytes: int, key: tuple, startup: int, tag: object,
               kind: type[_Transfer] = _Transfer) -> _Completion:
        """:meth:`transfer` of checked arguments: ``nbytes`` and ``startup`` ints >= 0, ``key``
        from :meth:`_route`.  Its event succeeds with ``None`` (``kind`` :class:`_Transfer`, what
        the device's DMAs need) or with a :class:`TransferRecord` (:class:`_RecordedTransfer`)."""
        env = self.env
        now = env._now                  # simpy.Environment.now without the property call
        if type(now) is not int:
            now = self._now()
        seq = self._seq
        self._seq = seq + 1
        start = now + startup
        # the transfer and its event, made field by field (no __init__ frame: one per transfer)
        t = _new_event(kind)
        t.env = env
        t.callbacks = []
        t.parent = None
        t.seq = seq
        t.tag = tag
        t.nbytes = nbytes
        t.issue = now
        t.start = start
        t.key = key
        t.done = False
        # threshold, rank and cls are set at admission (nothing reads them before: a zero-byte
        # transfer is never admitted and finishes with only ``cls`` set, to None)
        # A startup of 0 also goes through the heap and a zero-delay wake-up.  All transfers
        # that start in one cycle are then activated by one recompute.
        heappush(self._pending, (start, seq, t))
        wake_at = self._wake_at
        if wake_at is None or wake_at > start:
            self._schedule(start, now)
        return t

    @property
    def on_change(self) -> OnChange | None:
        return self._on_change

    @on_change.setter
    def on_change(self, fn: OnChange | None) -> None:
        self._on_change = fn
        self.on_change_passive = False   # a new callback is not known to be passive

    def all_of(self, events: Sequence[simpy.Event]) -> simpy.Event:
        """One event that succeeds once every one of ``events`` has: ``simpy.AllOf(env, events)``
        with fewer SimPy events.

        The returned event is processed at exactly the place in SimPy's order where the
        ``AllOf`` would be, so a process waiting on it resumes at the same moment, in the same
        order with other processes, as it would with the ``AllOf``.  Only the child completed
        last gets an event of its own (see :class:`_Join`): a DMA split into an L2-hit and an
        HBM-miss transfer costs two events instead of three.  Its value is ``None``.

        ``events`` are events of :meth:`transfer` or of :meth:`all_of` of this network that are
        pending and have no callbacks yet; once joined, wait on the join, not on them (only the
        last one to complete may still succeed, with the value ``None``, to relay it).  An event
        joined already is refused (ValueError): a second join of it would never fire.  For any
        other event the result is a plain ``simpy.AllOf``.
        """
        env = self.env
        legs: list[_Completion] = []
        for ev in events:
            if not isinstance(ev, _Completion):
                return simpy.AllOf(env, events)
            if ev.parent is not None:
                raise ValueError("all_of: an event of this network is joined already; wait on its join")
            if ev.env is not env or ev.callbacks or ev._value is not _PENDING:   # (not ev.triggered)
                return simpy.AllOf(env, events)
            legs.append(ev)
        n = len(legs)
        if not n or (legs[0] is legs[1] if n == 2 else len(set(map(id, legs))) != n):
            return simpy.AllOf(env, events)      # nothing to wait for, or an event twice
        join = _Join(env, len(legs))
        fire = join.fire
        for ev in legs:
            ev.parent = join
            ev.callbacks.append(fire)
        return join

    def _join(self, first: _Completion, second: _Completion) -> _Join:
        """:meth:`all_of` of two distinct events of this network (:meth:`_start` or
        :meth:`_join`) that nothing has joined or waited on yet: what a device's DMA of two
        parts just started asks for, without the checks."""
        join = _new_event(_Join)         # _Join(env, 2) without the two __init__ frames
        join.env = self.env
        join.callbacks = []
        join.parent = None
        join.remaining = 2
        fire = join.fire
        first.parent = join
        first.callbacks.append(fire)
        second.parent = join
        second.callbacks.append(fire)
        return join

    @property
    def _active(self) -> dict[int, _Transfer]:
        """The active transfers by seq, in activation order.  Built when asked (the statistics
        below, the fast-forward's shift), not kept up to date: a dict insert and delete per
        transfer cost more than every question asked of it in a run."""
        members = [t for c in self._classes.values() for t in c.order if not t.done]
        members.sort(key=_rank)
        return {t.seq: t for t in members}

    def active_count(self) -> int:
        """Transfers currently moving bytes (startup paid, not yet completed)."""
        return sum(c.n for c in self._classes.values())

    def pending_count(self) -> int:
        """Transfers still paying their startup latency."""
        return len(self._pending)

    def active_rates(self) -> list[tuple[object, float]]:
        """``(tag, allocated rate)`` of each active transfer, in activation order."""
        rates = []
        for t in self._active.values():
            assert t.cls is not None    # an active transfer belongs to its class
            rates.append((t.tag, t.cls.rate))
        return rates

    # -- internals ----------------------------------------------------------------------------

    def _now(self) -> int:
        now = self.env.now
        if type(now) is int:  # the usual case, checked first (called several times per transfer)
            return now
        if now != int(now):
            raise ValueError(f"LinkNetwork needs integer simulation time, env.now = {now!r}")
        return int(now)

    def _schedule(self, when: int, now: int) -> None:
        """Wake up at ``when``.  Callers checked that no wake-up at or before it is due; the one
        due later, if any, is superseded (its generation is old, so it is a no-op when it fires).
        ``now`` is the current cycle."""
        self._gen = gen = self._gen + 1
        self._wake_at = when

        def wake(_ev: simpy.Event, gen: int = gen, net: LinkNetwork = self) -> None:
            # the wake-up itself, inline (it runs once per recompute).  Its generation and the
            # network are defaults, not closure cells: one tuple per wake-up instead of two
            # cells and a tuple
            if gen == net._gen:
                net._wake_at = None
                now = net.env._now      # simpy.Environment.now without the property call
                net._recompute(now if type(now) is int else net._now())
        # env.timeout(when - now) with the wake-up as its callback, inline: the same queue entry
        # (time, NORMAL priority, next event id) that Timeout.__init__ and env.schedule make
        env = self.env
        timer = _new_event(_WakeUp)     # _WakeUp(env, wake) without the __init__ frame
        timer.env = env
        timer.callbacks = [wake]
        timer.gen = gen                 # which wake-up it is (the fast-forward asks)
        heappush(env._queue, (env._now + (when - now), _NORMAL, next(env._eid), timer))

    def _recompute(self, now: int) -> None:
        """Advance all transfers to ``now``, retire finished ones, admit started ones, re-share."""
        self.recompute_count += 1
        elapsed = now - self._last
        # The same number as a float, for the products below: float * int converts the int
        # with PyLong_AsDouble, as float() does, so the products are the same bits, and a
        # float * float product takes the interpreter's specialised path.
        span = float(elapsed)
        self._last = now
        self._stamp = stamp = self._stamp + 1
        finished: list[_Transfer] = []
        # A link on which a transfer finishes or starts gets ``_touched = stamp``: its open
        # segment must close now even if its rate stays the same.  A segment then covers one
        # set of transfers, and the shortfall of a transfer finishing mid-cycle is charged to
        # the segment it finished in, not averaged over a longer span.

        # 1. Credit bytes moved since the last recompute.  Per link and pool this is the
        #    aggregate rate times the elapsed time.  Each finished transfer then corrects it
        #    by the difference between what it had left and what its rate would have moved.
        if elapsed > 0:
            for link in self._busy:
                moved = link._alloc * span
                link._open_bytes += moved
                link.bytes_carried += moved
            for pool in self._busy_pools:
                pool.bytes_carried += pool._alloc * span

        # 2. Advance each class and retire its members that are done: those whose remainder is
        #    within tolerance, or whose completion cycle predicted at the last recompute has
        #    come.  Both tests are monotone in the heap key, so the done members are a prefix
        #    of the heap.  The prediction is the one step 4 made from the state of the last
        #    recompute (``served``, ``rate`` and the heap have not changed since): kept for the
        #    head (pred), redone the same way for the next keys.
        #    Classes go in creation order (the order of _classes): the corrections of classes
        #    sharing a link are added to it in that order.
        classes = self._classes
        ordered = self._ordered
        emptied: list[_Class] | None = None     # the classes that lost their last member
        resort = False                  # an earliest active member finished: reorder classes
        c: _Class | None                # a class; step 3 looks one up by key
        for c in classes.values():
            s_last = c.served
            c.served = s = s_last + c.rate * span
            key = c.heap[0][0]                  # never empty: the class has members
            if key <= s or (elapsed > 0 and c.pred <= elapsed):
                heap = c.heap
                rate = c.rate
                fix = 0.0
                k = 0
                while True:
                    t = _heappop(heap)[2]
                    # Credit exactly what was left (it is <= 0 if the last byte arrived before
                    # now), so each transfer's credits add up to nbytes.
                    fix += t.threshold - s
                    t.done = True
                    finished.append(t)
                    k += 1
                    if not heap:
                        break
                    key = heap[0][0]
                    if not (key <= s or (elapsed > 0 and _ceil((key - s_last) / rate) <= elapsed)):
                        break
                c.n = n = c.n - k
                for link in c.links:
                    link._open_bytes += fix
                    link.bytes_carried += fix
                    link._touched = stamp
                    link.active -= k
                if c.pool is not None:
                    c.pool.bytes_carried += fix
                    c.pool.active -= k
                if not n:
                    if emptied is None:
                        emptied = [c]
                    else:
                        emptied.append(c)
                    continue
                # Drop the finished members from the front of the activation order (and
                # compact it when they pile up behind active ones).
                order = c.order
                if order[0].done:
                    resort = True
                    order.popleft()
                    while order[0].done:
                        order.popleft()
                    c.first = order[0].rank
                if len(order) > 2 * n + 32:
                    c.order = deque([t for t in order if not t.done])
            if s >= _REBASE:
                c.rebase()
        if emptied:
            idle = self._idle
            for c in emptied:
                del classes[c.kid]
                ordered.remove(c)
                c.order.clear()         # its finished members (the heap is empty already)
                idle[c.kid] = c

        # 3. Admit transfers whose startup has elapsed.  Zero-byte ones finish immediately.  A
        #    new class comes last in ``ordered``: its first member is the latest activated.
        pending = self._pending
        if pending and pending[0][0] <= now:
            rank = self._rank
            while True:
                t = _heappop(pending)[2]
                if t.nbytes:
                    c = classes.get(id(t.key))
                    if c is None:
                        # the idle class of this key (it holds the key, so the id is the key's),
                        # back at its origin, or a new one; step 4 sets its demand, rate, pred
                        kid = id(t.key)
                        c = self._idle.pop(kid, None)
                        if c is None:
                            c = _Class(t.key)
                        else:
                            c.served = 0.0
                        classes[kid] = c
                        c.first = rank
                        ordered.append(c)
                    t.cls = c
                    t.rank = rank
                    rank += 1
                    nb = t.nbytes
                    t.threshold = threshold = c.served + nb
                    # the remainder that counts as delivered: max(_ABS_TOL, _REL_TOL * nbytes),
                    # without the call (computed here, once, not kept on the transfer)
                    tol = _REL_TOL * nb
                    heappush(c.heap, (threshold - (tol if tol > _ABS_TOL else _ABS_TOL), t.seq, t))
                    c.order.append(t)
                    c.n += 1
                    one = c.link
                    if one is not None:         # a one-link route, without the loop (_Class.link)
                        one._touched = stamp
                        one.active += 1
                    else:
                        for link in c.links:
                            link._touched = stamp
                            link.active += 1
                    if c.pool is not None:
                        c.pool.active += 1
                else:
                    finished.append(t)
                if not (pending and pending[0][0] <= now):
                    break
            self._rank = rank

        # 4. Re-share bandwidth.  Classes go in the order of their earliest active member, so
        #    links and pools appear in the order in which active transfers first use them.
        #    (``active`` of each link and pool, its number of active transfers, was kept up to
        #    date by steps 2 and 3.)  The pass over the classes sets the demands and, at once,
        #    the usual outcome: every class runs at its demand (no link is asked for more than
        #    its capacity: calibrated per-core rates sit below the HBM cap).  Per link,
        #    _share_sum adds up the demands; per pool, _alloc adds up the rates; each is marked
        #    with ``_stamp = stamp``.  In the same pass, step 6's completion prediction from that
        #    rate (redone below if a link is oversubscribed and _fill lowers the rates).
        if resort and len(ordered) > 1:
            ordered.sort(key=_first_rank)
        links: list[Link] = []
        pools: list[Pool] = []
        linkless = False
        soonest: int | None = None      # the fewest cycles to a completion
        for c in ordered:
            p = c.pool
            if p is None:
                c.rate = c.demand = d = c.base
                dm = d * c.n
            else:
                c.rate = c.demand = d = c.base + p.capacity / p.active
                dm = d * c.n
                if p._stamp != stamp:
                    p._stamp = stamp
                    p._alloc = dm           # 0.0 + dm
                    pools.append(p)
                else:
                    p._alloc += dm
            # 6. (in advance) A class's next completion is its heap head: the first integer
            #    cycle by which the head's remainder is within tolerance.  The key already has
            #    the tolerance subtracted, which absorbs rounding error that would add a cycle.
            c.pred = cycles = _ceil((c.heap[0][0] - c.served) / d)
            if soonest is None or cycles < soonest:
                soonest = cycles
            one = c.link
            if one is not None:         # a one-link route, without the loop below (_Class.link)
                if one._stamp != stamp:
                    one._stamp = stamp
                    one._share_sum = dm
                    links.append(one)
                else:
                    one._share_sum += dm
                continue
            if not c.links:
                linkless = True         # nothing to share with
                continue
            for link in c.links:
                if link._stamp != stamp:
                    link._stamp = stamp
                    link._share_sum = dm
                    links.append(link)
                else:
                    link._share_sum += dm
        for link in links:
            if link._share_sum > link.capacity:
                self._fill(ordered, links, pools)
                soonest = None
                for c in ordered:
                    # a class the filling left at its demand keeps the prediction made from it
                    # above (the same quotient of the same floats)
                    rate = c.rate
                    if rate != c.demand:
                        c.pred = _ceil((c.heap[0][0] - c.served) / rate)
                    cycles = c.pred
                    if soonest is None or cycles < soonest:
                        soonest = cycles
                break
        else:
            if linkless and pools:
                # The pools' sums went in class order: redo them in the documented order.
                self._pool_sums(ordered, pools, with_links=True)

        # 5. Segment bookkeeping.  A link's segment stays open while its rate and its set of
        #    transfers are unchanged.  So a closed segment's carried rate equals the nominal
        #    rate, except in a segment where a transfer finished mid-cycle.  ``changed`` (the
        #    links whose rate changed, for on_change) is only built when someone listens.
        #    A link or pool can only have gone idle (be busy before and not now) if a class
        #    emptied in step 2.
        changed: dict[str, float] | None = None if self._on_change is None else {}
        if emptied:
            for link in self._busy:
                if link._stamp != stamp:
                    if link._open_start is not None:
                        link._close(now)
                    link._alloc = 0.0
                    link.rate = 0.0
                    if changed is not None:
                        changed[link.name] = 0.0
            for pool in self._busy_pools:
                if pool._stamp != stamp:
                    pool._alloc = 0.0
        for link in links:
            rate = link._share_sum
            if rate != link._alloc:
                link._alloc = rate
                # Water-filling keeps the sum within float rounding of capacity; report
                # it clamped so that "rate <= capacity" holds exactly for observers.
                link.rate = rate if rate < link.capacity else link.capacity
                if changed is not None:
                    changed[link.name] = link.rate
            elif link._touched != stamp and link._open_start is not None:
                continue
            start = link._open_start
            if start is not None and start < now:
                # Link._close(now), inline (once per segment; a segment of no length carried
                # nothing and leaves no step)
                nbytes = link._open_bytes
                times = link._times
                steps = link._bytes
                if not times:
                    times.append(start)
                    steps.append(nbytes)
                elif link._end != start:
                    times.append(link._end)     # idle gap since the last segment
                    steps.append(0.0)
                    times.append(start)
                    steps.append(nbytes)
                else:
                    prev = steps[-1]
                    # math.isclose(a, b, rel_tol=_MERGE_REL, abs_tol=0.0), inline (once per
                    # segment): b > 0 and a are finite, so it is |a - b| <= _MERGE_REL * |a| or
                    # <= _MERGE_REL * b, i.e. <= _MERGE_REL * max(|a|, b) (rounding is monotone)
                    if prev > 0.0:
                        a = nbytes / (now - start)
                        b = prev / (start - times[-1])
                        diff = a - b
                        if diff < 0.0:
                            diff = -diff
                        absa = a if a >= 0.0 else -a
                        merge = diff <= _MERGE_REL * (absa if absa > b else b)
                    else:
                        merge = False
                    if merge:
                        steps[-1] = prev + nbytes
                    else:
                        times.append(start)
                        steps.append(nbytes)
                link._end = now
            link._open_start = now
            link._open_bytes = 0.0
        self._busy = links
        self._busy_pools = pools

        # 6. Wake at the earliest completion (predicted in step 4) or startup end.
        next_wake: int | None = pending[0][0] if pending else None
        if soonest is not None:
            due = now + (soonest if soonest > 1 else 1)     # at least one cycle on
            if next_wake is None or due < next_wake:
                next_wake = due
        if next_wake is not None:
            wake_at = self._wake_at
            if wake_at is None or wake_at > next_wake:
                self._schedule(next_wake, now)

        # 7. Report.  Event callbacks run later in the SimPy loop, so the state is already
        #    consistent if they issue new transfers.
        nfinished = len(finished)
        self.completed += nfinished
        if nfinished == 2:
            # sort(key=_seq) of two, without the key list and calls (the usual case of several)
            first, second = finished
            if first.seq > second.seq:
                finished = [second, first]
        elif nfinished > 2:
            finished.sort(key=_seq)
        elif nfinished and (parent := finished[0].parent) is not None:
            # The last leg of a join would be the only event due now: nothing can run between
            # its relay event and the join's, so the join is scheduled at once (see _Join).
            queue = self.env._queue
            if not (queue and queue[0][0] <= now) and (not changed or self.on_change_passive):
                finished[0].cls = None
                parent.remaining -= 1
                if not parent.remaining:
                    if parent.parent is None and parent._value is _PENDING:
                        # parent.succeed(None), inline: the queue entry env.schedule makes
                        env = self.env
                        parent._ok = True
                        parent._value = None
                        heappush(queue, (env._now, _NORMAL, next(env._eid), parent))
                    else:
                        _scheduled(parent, None)
                finished = []
        if finished:
            # event.succeed(value), inline: the queue entry env.schedule(event) makes
            env = self.env
            queue = env._queue
            eid = env._eid
            for t in finished:
                t.cls = None
                parent = t.parent
                if parent is None:
                    value: TransferRecord | None = TransferRecord(t.tag, t.nbytes, t.issue, t.start, now) \
                        if type(t) is _RecordedTransfer else None
                else:                   # a leg of a join: only the last one relays (_scheduled)
                    parent.remaining -= 1
                    if parent.remaining:
                        continue
                    value = None
                if t._value is not _PENDING:
                    raise RuntimeError(f"{t} has already been triggered")
                t._ok = True
                t._value = value
                heappush(queue, (env._now, _NORMAL, next(eid), t))
        if changed and self._on_change is not None:
            self._on_change(now, changed)

    def _fill(self, classes: list[_Class], links: list[Link], pools: list[Pool]) -> None:
        """Lower the rates of ``classes`` to max-min fair progressive filling, because a link of
        ``links`` is asked for more than its capacity.  Step 4 of :meth:`_recompute` has set
        each class's ``demand`` and found the links and pools the classes use (in the order of
        ``classes``); this sets each class's ``rate``, the aggregate rates of the links
        (``_share_sum``) and of the pools (``_alloc``).

        All unfrozen transfers share one fill level.  Each round raises the level to the
        smallest of (a) the smallest unfrozen demand and (b) each link's remaining capacity
        divided by its unfrozen transfers.  Then it freezes the transfers that reached their
        demand and all transfers on the links that saturated.  The transfers of a class have
        the same demand and links, so they always freeze together at the same rate: the
        filling runs over classes, each counted with its number of members.  Each round
        freezes at least one class.

        A pool's rate adds up, from 0.0, first the rates of its classes that cross no link (in
        the order of ``classes``), then those of the others as they freeze.
        """
        # _pool_sums(classes, pools, with_links=False), inline, in the same pass that finds the
        # classes to fill and their smallest demand (``low``; a link is oversubscribed, so
        # some class crosses a link and ``unfrozen`` is not empty)
        for p in pools:
            p._alloc = 0.0
        unfrozen: list[_Class] = []
        low = _INF
        for c in classes:
            if c.links:
                unfrozen.append(c)
                if c.demand < low:
                    low = c.demand
            elif c.pool is not None:
                c.pool._alloc += c.rate * c.n

        # Progressive filling.  Per link: capacity left (_left), unfrozen transfers
        # (_unfrozen), saturated in this round (_saturated); _share_sum now adds up the rates.
        for link in links:
            link._left = link.capacity
            link._unfrozen = link.active
            link._share_sum = 0.0
        while unfrozen:
            level = low
            for link in links:
                n = link._unfrozen
                if n and link._left < level * n:
                    level = link._left / n
            thresh = level * (1.0 + _LEVEL_SLACK)
            for link in links:
                n = link._unfrozen
                link._saturated = n > 0 and link._left <= thresh * n
            still: list[_Class] = []
            low = _INF          # of the classes still unfrozen, found as they stay (min() as well)
            for c in unfrozen:
                d = c.demand
                if d <= thresh:
                    rate = d if d < level else level
                else:
                    for link in c.links:        # frozen if one of its links saturated
                        if link._saturated:
                            break
                    else:
                        still.append(c)
                        if d < low:
                            low = d
                        continue
                    rate = level
                c.rate = rate
                m = c.n
                total = rate * m
                for link in c.links:
                    link._left -= total
                    link._unfrozen -= m
                    link._share_sum += total
                if c.pool is not None:
                    c.pool._alloc += total
            unfrozen = still

    @staticmethod
    def _pool_sums(classes: list[_Class], pools: list[Pool], *, with_links: bool) -> None:
        """Set each pool's ``_alloc`` to 0.0 plus the rates of its classes that cross no link,
        then (``with_links``) plus those of the others, each in the order of ``classes``."""
        for p in pools:
            p._alloc = 0.0
        for c in classes:
            if not c.links and c.pool is not None:
                c.pool._alloc += c.rate * c.n
        if with_links:
            for c in classes:
                if c.links and c.pool is not None:
                    c.pool._alloc += c.rate * c.n

"""Simulated memories: regions of address space, their allocators and their lazily backed bytes.

A device's memories are :class:`Region` objects grouped in :class:`AddressSpace` objects
(docs/sources.md#design-memories-s3): Ascend GM/HBM, UB, L1, L0A/B/C; DSP DDR, SMC/GSM, private L2/AM.
Each region has a backing policy:

``"allocation"``
    Bytes exist only inside live allocations (Ascend GM via ``aclrtMalloc``, UB via
    ``TQue::InitBuffer``).  Any access outside a live allocation faults, naming the cause:
    unallocated, use after free, or out of bounds of the allocation it starts in.
``"flat"``
    Small on-chip memory: every address of the region is accessible; allocation is bookkeeping.
``"sparse"``
    Bare-metal DSP memory: any address in the region may be used without allocating.  Bytes are
    backed on first write in 4 KiB granules, and the total backed must stay within
    ``capacity`` (a program that scribbles over more memory than the part has fails loudly).

Bytes are never backed for a whole region up front -- a 64 GiB HBM region costs nothing until
written -- and are zero when first backed.  Real hardware returns whatever was there before;
the simulator returns zeros so runs are deterministic.

Hot path: every simulated instruction calls :meth:`Region.view`.  It costs two bisects over
sorted start addresses (allocation, then backing segment) and one numpy slice; no copies, no
Python loops over bytes.

View lifetime: a view is a window into a host numpy array.  In regions whose backing can grow
("sparse", and any region or allocation larger than ``DENSE_LIMIT``) a later write that joins
two backing segments moves their bytes into a new array, and views taken *before* that write no
longer alias the memory.  Take all views an instruction needs before writing through any of
them (writes then land in the current backing), or call :meth:`Region.ensure_backed` first.
``Region.backing_generation`` changes whenever that can have happened.

Host copies without copying: ``write(..., share=True)`` of a whole, fresh allocation keeps the
host's array itself as the allocation's bytes (read-only; the first device write into the
allocation copies it, so the host's array is never modified; read views taken before that
first write keep showing the host's bytes, so in a shared allocation take the write views first,
or call :meth:`Region.ensure_backed`), and ``read(..., copy=False)`` hands back a view.
``opsim.run`` uses both: its device lives only for the call, and a 64 MiB copy into fresh host
pages costs more than the operator it feeds.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import weakref
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from opsim.simulator.errors import CapacityError, MemoryFault

__all__ = [
    "Backing",
    "PAGE",
    "DENSE_LIMIT",
    "align_up",
    "align_down",
    "Allocation",
    "Region",
    "AddressSpace",
    "TypedWindow",
]

Backing = Literal["allocation", "flat", "sparse"]

# Granule of sparse backing and of digest blocks.  4 KiB keeps fragmentation and per-segment
# bookkeeping low while a stray write still backs little memory.
PAGE = 4096

# Ranges up to this size (an allocation, a flat region) are backed by one array covering the
# whole range on first write: its zeros are fresh pages (_zeros), so untouched ones cost the
# host nothing, and one segment means views never move.  Larger ranges are backed page-wise
# like sparse memory, because a single huge mapping can be refused by the host's overcommit
# policy.
DENSE_LIMIT = 64 << 20

# Cap on speculative host-side growth when segments merge (see _SegmentStore._ensure).
_MAX_RESERVE = 256 << 20

_U8 = np.uint8

# Bound on a region's cache of typed views (Region.typed_view); a kernel uses a few dozen.
_MAX_VIEWS = 4096


# Backings of _MMAP_MIN bytes or more are fresh anonymous memory (mmap), not np.zeros. np.zeros
# is calloc, and calloc hands out zero pages without touching them only while they come
# straight from the kernel: glibc raises its mmap threshold to the size of each large block
# freed (up to 32 MiB), so from the second run of a process on, every UB, L1 and output backing
# came from reused heap memory that calloc clears byte by byte -- each core's whole UB (48 x
# 192 KiB on Atlas A2) and the operator's output, used or not: 10-26 MB of memset per MSE
# backward run (callgrind, 2^20 and 2^22 fp32). Fresh pages are zeroed by the kernel when first
# touched, so the bytes a kernel never touches cost nothing, as DENSE_LIMIT above assumes.
# Smaller backings stay np.zeros (a system call costs more than clearing them).
_MMAP_MIN = 64 << 10

# The kernel would back a large mapping with transparent huge pages where its policy is
# "always" (numpy's own arrays of 4 MiB or more ask for them with madvise). The backing of a
# large allocation -- an operator's output -- is fresh memory written once, and on the
# project's machines (a VM) its 2 MiB pages cost ~8 ms of system time each to fault in when the
# host has taken the freed memory back: 0.22-0.27 s for a 64 MiB output (3 runs of 3, MSE
# backward fp32 2^24), against ~0.01 s system (~0.06 s user) in 4 KiB pages. So large backings
# ask for ordinary pages (where the platform has the advice).
_THP_MIN = 4 << 20
_NO_HUGEPAGE = getattr(mmap, "MADV_NOHUGEPAGE", None)
# private mappings (POSIX; Windows' anonymous mappings take no flags): Python's default is
# MAP_SHARED, which a forked child (a multiprocessing worker) would share with the parent, and
# whose pages are allocated even when only read (a private mapping reads the zero page)
_PRIVATE = {"flags": mmap.MAP_PRIVATE} if hasattr(mmap, "MAP_PRIVATE") else {}


def _zeros(nbytes: int) -> np.ndarray:
    """A writable uint8 array of ``nbytes`` zeros: np.zeros for small backings, fresh
    anonymous memory in ordinary pages for the rest (see ``_MMAP_MIN`` above)."""
    if nbytes < _MMAP_MIN:
        return np.zeros(nbytes, _U8)
    m = mmap.mmap(-1, nbytes, **_PRIVATE)
    if _NO_HUGEPAGE is not None and nbytes >= _THP_MIN:
        try:
            m.madvise(_NO_HUGEPAGE)
        except OSError:       # a kernel without transparent huge pages: nothing to advise
            pass
    # the array keeps the mapping alive (its base); unmapped when the last view is gone
    return np.frombuffer(m, _U8)


def align_up(x: int, a: int) -> int:
    """Smallest multiple of ``a`` that is >= ``x`` (``a`` > 0, need not be a power of two)."""
    return -(-x // a) * a


def align_down(x: int, a: int) -> int:
    """Largest multiple of ``a`` that is <= ``x``."""
    return (x // a) * a


# ---------------------------------------------------------------------------------------------
# Backing store: sorted, disjoint, contiguous segments created on demand.
# ---------------------------------------------------------------------------------------------


class _Segment:
    """Backed bytes [start, end) held in ``data[: end - start]``.

    ``data`` may be longer than ``end - start``: the tail is a zero-filled host-side reserve so
    that sequential writes can extend the segment in place instead of copying it each time.
    The reserve never reaches the next segment's start and is not part of the simulated memory
    (capacity, digest and views ignore it).
    """

    __slots__ = ("start", "end", "data")

    def __init__(self, start: int, end: int, data: np.ndarray) -> None:
        self.start = start
        self.end = end
        self.data = data


class _SegmentStore:
    """Lazily backed bytes of the address range [lo, hi).

    ``granule=None`` backs the whole range with one array on first write (dense); otherwise
    segments are cut at multiples of ``granule`` in *absolute* addresses, so the same bytes end
    up on the same boundaries however they were written (the digest relies on that).
    """

    __slots__ = ("lo", "hi", "granule", "capacity", "owner", "backed", "generation", "shared",
                 "_starts", "_segs", "windows")

    def __init__(self, lo: int, hi: int, granule: int | None, capacity: int | None,
                 owner: str) -> None:
        self.lo = lo
        self.hi = hi
        self.granule = granule
        self.capacity = capacity  # limit on backed bytes, None = unlimited
        self.owner = owner  # region name, for CapacityError
        self.backed = 0  # bytes of simulated memory backed (segment extents, not host reserve)
        self.generation = 0  # bumped whenever segment arrays are replaced (views may be stale)
        # True while the one segment is a read-only host array lent by share(): copied on the
        # first write, so the host's bytes are never modified
        self.shared = False
        self._starts: list[int] = []
        self._segs: list[_Segment] = []
        # the TypedWindows given out on these bytes (weakly: a window dies with its tensor),
        # retired when the allocation is freed or its region reset
        self.windows: "weakref.WeakSet[TypedWindow] | None" = None

    def view(self, addr: int, nbytes: int, write: bool) -> np.ndarray:
        """Contiguous uint8 view of [addr, addr+nbytes); the range is already checked."""
        end = addr + nbytes
        i = bisect_right(self._starts, addr) - 1
        if i >= 0:
            seg = self._segs[i]
            if end <= seg.end:
                if write and self.shared:
                    self._unshare()
                off = addr - seg.start
                return seg.data[off:off + nbytes]
        if not write:
            # Reading never creates backing: timing runs may read huge inputs never written.
            return self._read_unbacked(addr, end)
        seg = self._ensure(addr, end)
        off = addr - seg.start
        return seg.data[off:off + nbytes]

    def _read_unbacked(self, addr: int, end: int) -> np.ndarray:
        """Read-only copy of a range that is not wholly inside one segment (zeros where unbacked)."""
        out = np.zeros(end - addr, _U8)
        k = max(bisect_right(self._starts, addr) - 1, 0)
        for seg in self._segs[k:]:
            if seg.start >= end:
                break
            lo, hi = max(addr, seg.start), min(end, seg.end)
            if lo < hi:
                out[lo - addr:hi - addr] = seg.data[lo - seg.start:hi - seg.start]
        out.flags.writeable = False
        return out

    def share(self, data: np.ndarray) -> bool:
        """Back the whole range with the host bytes ``data`` themselves, without copying them.

        Only a store with nothing backed yet, and ``data`` exactly its size, can share; returns
        whether it did.  The bytes are held read-only and copied on the first write into the
        store (copy on write), so ``data`` is never modified; the caller must not modify it
        either while the memory lives.
        """
        if self._segs or data.size != self.hi - self.lo or data.ndim != 1:
            return False
        if self.capacity is not None and data.size > self.capacity:
            return False
        lent = data.view()
        lent.flags.writeable = False
        self._segs = [_Segment(self.lo, self.hi, lent)]
        self._starts = [self.lo]
        self.backed = data.size
        self.shared = True
        return True

    def _unshare(self) -> None:
        """Replace the lent host bytes by a private copy before the first write. Read views taken
        before this keep reading the host's bytes and no longer alias the memory (the module
        docstring: take write views first); ``generation`` changes to say so."""
        seg = self._segs[0]
        seg.data = seg.data.copy()
        self.shared = False
        self.generation += 1

    def _ensure(self, addr: int, end: int) -> _Segment:
        """Back [addr, end) with one segment, merging every segment it touches or overlaps."""
        if self.shared:
            self._unshare()
        g = self.granule
        if g is None:
            ga, gb = self.lo, self.hi
        else:
            ga, gb = max(self.lo, align_down(addr, g)), min(self.hi, align_up(end, g))
        starts, segs = self._starts, self._segs
        k0 = bisect_right(starts, ga) - 1
        if k0 < 0 or segs[k0].end < ga:
            k0 += 1  # segment k0 ends before ga without touching it
        k1 = bisect_right(starts, gb)  # segments starting at or before gb touch/overlap
        touched = segs[k0:k1]
        new_lo = min(ga, touched[0].start) if touched else ga
        new_hi = max(gb, touched[-1].end) if touched else gb
        grow = (new_hi - new_lo) - sum(s.end - s.start for s in touched)
        if self.capacity is not None and self.backed + grow > self.capacity:
            raise CapacityError(
                f"{self.owner}: backing {end - addr} B at {addr:#x} would exceed the region's "
                f"capacity (counted in {g or self.hi - self.lo} B granules)",
                buffer=self.owner, needed=self.backed + grow, available=self.capacity,
                address=addr,
            )
        # Cheapest case, and the common one for sequential writes: grow into the reserve.
        if len(touched) == 1:
            s = touched[0]
            if s.start == new_lo and new_hi <= s.start + len(s.data):
                s.end = new_hi
                self.backed += grow
                return s
        # A left neighbour's reserve may reach into the new segment: cut it back (a slice, so
        # views of the neighbour stay valid).
        if k0 > 0:
            left = segs[k0 - 1]
            if left.start + len(left.data) > new_lo:
                left.data = left.data[:new_lo - left.start]
        if touched:
            # Merging means the memory is being filled contiguously; reserve room to grow
            # geometrically so n sequential writes cost O(n) copying, not O(n^2).
            limit = starts[k1] if k1 < len(starts) else self.hi
            extra = min(new_hi - new_lo, _MAX_RESERVE)
            reserve_end = min(limit, new_hi + extra)
        else:
            reserve_end = new_hi
        data = _zeros(reserve_end - new_lo)
        for s in touched:
            data[s.start - new_lo:s.end - new_lo] = s.data[:s.end - s.start]
        seg = _Segment(new_lo, new_hi, data)
        segs[k0:k1] = [seg]
        starts[k0:k1] = [new_lo]
        self.backed += grow
        if touched:
            self.generation += 1
        return seg

    def pieces(self) -> Iterator[tuple[int, np.ndarray]]:
        """(start address, bytes) of every backed segment, in address order."""
        for s in self._segs:
            yield s.start, s.data[:s.end - s.start]


class TypedWindow:
    """A typed view of a whole range of one allocation, for a caller that slices the same range
    again and again (a GlobalTensor: every tile's DataCopy reads or writes a slice of it), so a
    slice costs one numpy slice instead of the two bisects of :meth:`Region.typed_view`.

    The window aliases the memory while :meth:`valid` holds: the allocation is live (a free or
    a reset drops its store) and its segment still holds the same array (the copy on first
    write of a shared allocation replaces it). Callers check that inline on their hot path as
    ``w.alloc._store is w.store and w.seg.data is w.data``. ``writable`` says whether writing
    through it is legal (not a read-only allocation or region, not a host array lent by
    ``share``); a write that is not goes through :meth:`Region.view`, which unshares or faults.
    ``array`` None: the allocation is backed page-wise and has no window (see Region.window).
    """

    __slots__ = ("array", "count", "alloc", "store", "seg", "data", "writable", "__weakref__")

    def __init__(self, array: np.ndarray | None, alloc: "Allocation", store: _SegmentStore,
                 seg: _Segment, data: np.ndarray | None, writable: bool) -> None:
        self.array, self.alloc, self.store, self.seg, self.data = array, alloc, store, seg, data
        self.count = 0 if array is None else array.size     # elements
        self.writable = writable

    def valid(self) -> bool:
        return self.alloc._store is self.store and self.seg.data is self.data

    def retire(self) -> None:
        """Let go of the memory: its allocation was freed or its region reset. A window lives
        as long as the GlobalTensor that asked for it (a launch's arguments outlive the call);
        holding the array would keep freed device memory alive with it. Never valid again
        (the allocation's store is None, never the sentinel)."""
        self.array = self.data = None
        self.count = 0
        self.store = _RETIRED       # type: ignore[assignment]
        self.seg = _NO_SEGMENT
        self.writable = False


# the segment of a window without array: its data (None) never changes
_NO_SEGMENT = _Segment(0, 0, np.zeros(0, _U8))
_NO_SEGMENT.data = None  # type: ignore[assignment]
# the store of a retired window: no allocation has it
_RETIRED = object()


def _retire_windows(store: _SegmentStore | None) -> None:
    if store is not None and store.windows is not None:
        for w in list(store.windows):
            w.retire()
        store.windows = None


# ---------------------------------------------------------------------------------------------
# Allocations and regions
# ---------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Allocation:
    """One allocation in a :class:`Region`.

    ``nbytes`` is what was asked for and is the limit of legal accesses; ``size`` is what the
    allocator reserved (``nbytes`` rounded up to the region's alignment), which is what counts
    against capacity.  Touching the padding between ``nbytes`` and ``size`` is an
    out-of-bounds fault: on hardware it would pass silently and read garbage, which is exactly
    the kind of kernel bug the simulator exists to catch.
    """

    addr: int
    nbytes: int
    name: str = ""
    alive: bool = True
    size: int = 0
    read_only: bool = False
    # Backing bytes ("allocation" regions only); dropped on free.
    _store: _SegmentStore | None = field(default=None, repr=False)

    @property
    def end(self) -> int:
        """One past the last legal byte."""
        return self.addr + self.nbytes

    def describe(self) -> str:
        label = f" '{self.name}'" if self.name else ""
        return f"allocation{label} {self.addr:#x}+{self.nbytes}"


# A window that is valid for good and has no array: what a caller keeps for a range that never
# has one (GlobalTensor: a strided view, memory that is not an allocation's)
NO_WINDOW = TypedWindow(None, Allocation(0, 0, alive=False), None, _NO_SEGMENT, None, False)  # type: ignore[arg-type]


class Region:
    """A named range of simulated address space with an allocator and lazily backed bytes.

    Args:
        name: e.g. ``"GM"``, ``"UB"``, ``"L1"``, ``"DDR"``, ``"SMC"``, ``"PRIVATE"``.
        base, size: the address range [base, base + size).
        alignment: required alignment of allocations (and, passed by callers to ``check``, of
            DMA addresses); 32 on Ascend.
        capacity: bytes that can actually be backed; defaults to ``size``.  Bounds allocated
            bytes (all backings) and backed bytes ("sparse", counted in 4 KiB granules).
        backing: ``"allocation"``, ``"flat"`` or ``"sparse"`` (see the module docstring).
        kind: free text, e.g. ``"HBM"``, ``"on-chip"``.
        read_only: writes anywhere in the region fault.
    """

    def __init__(
        self,
        name: str,
        base: int,
        size: int,
        *,
        alignment: int = 32,
        capacity: int | None = None,
        backing: Backing = "allocation",
        kind: str = "",
        read_only: bool = False,
    ) -> None:
        if base < 0 or size <= 0:
            raise ValueError(f"region {name}: need base >= 0 and size > 0, got {base:#x}+{size}")
        if alignment <= 0:
            raise ValueError(f"region {name}: alignment must be positive, got {alignment}")
        if backing not in ("allocation", "flat", "sparse"):
            raise ValueError(f"region {name}: unknown backing {backing!r}")
        capacity = size if capacity is None else capacity
        if not 0 <= capacity <= size:
            raise ValueError(f"region {name}: capacity {capacity} not in [0, size={size}]")
        self.name = name
        self.kind = kind
        self.base = base
        self.size = size
        self.end = base + size  # attribute, not property: read on every access
        self.alignment = alignment
        self.capacity = capacity
        self.backing: Backing = backing
        self.read_only = read_only
        self._init_state()
        self.peak_allocated_bytes = 0
        # Called with allocated_bytes after every allocate/free/reset when set (the trace's
        # occupancy counter); allocations happen per buffer, not per access, so this is cheap.
        self.observer: Callable[[int], None] | None = None

    def _init_state(self) -> None:
        # Free list: sorted, coalesced, disjoint [start, end) blocks of address space.
        self._free: list[list[int]] = [[self.base, self.end]]
        # Live allocations, parallel lists sorted by address, for O(log n) lookup.
        self._alloc_starts: list[int] = []
        self._allocs: list[Allocation] = []
        # Freed allocations by address (most recently freed last), so a fault can say
        # "use after free" rather than "unallocated".  Bounded by distinct addresses.
        self._freed: dict[int, Allocation] = {}
        self.allocated_bytes = 0
        self._store: _SegmentStore | None = None
        # (addr, nbytes, numpy dtype) -> typed view, for "flat" regions backed densely (see
        # typed_view): their one array never moves until reset, which starts a new dict.  Read
        # by hot callers (LocalTensor.array) before they call typed_view; written only here.
        self.views: dict[tuple[int, int, np.dtype], np.ndarray] = {}
        if self.backing == "sparse":
            self._store = _SegmentStore(self.base, self.end, PAGE, self.capacity, self.name)
        elif self.backing == "flat":
            granule = None if self.size <= DENSE_LIMIT else PAGE
            self._store = _SegmentStore(self.base, self.end, granule, None, self.name)

    def __repr__(self) -> str:
        return (f"Region({self.name!r}, base={self.base:#x}, size={self.size:#x}, "
                f"backing={self.backing!r}, alignment={self.alignment}, "
                f"capacity={self.capacity})")

    # -- allocator ---------------------------------------------------------------------------

    def allocate(self, nbytes: int, align: int | None = None, name: str = "", *,
                 read_only: bool = False) -> Allocation:
        """Reserve ``nbytes`` (rounded up to the region alignment) by aligned first fit.

        ``align`` adds an address alignment on top of the region's own.  A zero-byte
        allocation still reserves one alignment unit so its address is unique.
        Raises :class:`CapacityError` when no free block fits or capacity would be exceeded;
        ``available`` is then the largest allocation that would have succeeded.
        """
        if nbytes < 0:
            raise ValueError(f"{self.name}: cannot allocate a negative size ({nbytes})")
        addr_align = self.alignment if align is None else math.lcm(self.alignment, align)
        size = align_up(max(nbytes, 1), self.alignment)
        room = self.capacity - self.allocated_bytes
        index = -1
        if size <= room:
            for i, (start, end) in enumerate(self._free):
                if align_up(start, addr_align) + size <= end:
                    index = i
                    break
        if index < 0:
            label = f" '{name}'" if name else ""
            raise CapacityError(
                f"{self.name}: cannot allocate{label} {nbytes} B ({size} B reserved); "
                f"{self.allocated_bytes} of {self.capacity} B allocated",
                buffer=self.name, needed=nbytes,
                available=min(self._largest_free(addr_align), max(room, 0)),
            )
        start, end = self._free[index]
        addr = align_up(start, addr_align)
        # Split the free block into what lies before and after the allocation.
        rest = [blk for blk in ([start, addr], [addr + size, end]) if blk[0] < blk[1]]
        self._free[index:index + 1] = rest
        alloc = Allocation(addr, nbytes, name, True, size, read_only)
        if self.backing == "allocation":
            granule = None if nbytes <= DENSE_LIMIT else PAGE
            alloc._store = _SegmentStore(addr, addr + nbytes, granule, None, self.name)
        i = bisect_right(self._alloc_starts, addr)
        self._alloc_starts.insert(i, addr)
        self._allocs.insert(i, alloc)
        self.allocated_bytes += size
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        if self.observer is not None:
            self.observer(self.allocated_bytes)
        return alloc

    def _largest_free(self, addr_align: int) -> int:
        best = 0
        for start, end in self._free:
            best = max(best, end - align_up(start, addr_align))
        return align_down(best, self.alignment) if best > 0 else 0

    def free(self, addr: int) -> None:
        """Free the allocation starting at ``addr``; its bytes are discarded.

        Freeing an address that is not the start of a live allocation is a
        :class:`MemoryFault` ("double free" if it was freed before, else "invalid free").
        """
        i = bisect_right(self._alloc_starts, addr) - 1
        if i < 0 or self._alloc_starts[i] != addr:
            if addr in self._freed:
                raise MemoryFault(
                    f"{self.name}: double free of {self._freed[addr].describe()}",
                    address=addr)
            raise MemoryFault(
                f"{self.name}: invalid free: {addr:#x} is not the start of a live allocation",
                address=addr)
        alloc = self._allocs.pop(i)
        del self._alloc_starts[i]
        self._retire(alloc)
        self._release(alloc.addr, alloc.addr + alloc.size)
        if self.observer is not None:
            self.observer(self.allocated_bytes)

    def _retire(self, alloc: Allocation) -> None:
        alloc.alive = False
        _retire_windows(alloc._store)
        alloc._store = None
        self.allocated_bytes -= alloc.size
        self._freed.pop(alloc.addr, None)
        self._freed[alloc.addr] = alloc

    def _release(self, start: int, end: int) -> None:
        """Return [start, end) to the free list, coalescing with its neighbours."""
        free = self._free
        i = bisect_right(free, [start, end])
        if i > 0 and free[i - 1][1] == start:
            i -= 1
            free[i][1] = end
        else:
            free.insert(i, [start, end])
        if i + 1 < len(free) and free[i + 1][0] == free[i][1]:
            free[i][1] = free[i + 1][1]
            del free[i + 1]

    def reset(self) -> None:
        """Free every allocation and discard all backed bytes (the next block reuses the
        memory).  ``peak_allocated_bytes`` is kept: it is a statistic of the whole run."""
        allocs = self._allocs
        self._init_state()
        for alloc in allocs:  # after _init_state so the freed records survive
            alloc.alive = False
            _retire_windows(alloc._store)
            alloc._store = None
            self._freed[alloc.addr] = alloc
        if self.observer is not None:
            self.observer(self.allocated_bytes)

    @property
    def allocations(self) -> tuple[Allocation, ...]:
        """Live allocations in address order."""
        return tuple(self._allocs)

    def allocation_at(self, addr: int) -> Allocation | None:
        """The live allocation whose reserved range contains ``addr``, if any."""
        i = bisect_right(self._alloc_starts, addr) - 1
        if i >= 0:
            alloc = self._allocs[i]
            if addr < alloc.addr + alloc.size:
                return alloc
        return None

    # -- access ------------------------------------------------------------------------------

    def _locate(self, addr: int, nbytes: int, write: bool, align: int) -> _SegmentStore | None:
        """Check an access; return the store that backs it (None for an empty access)."""
        if addr < self.base or addr + nbytes > self.end or nbytes < 0:
            raise MemoryFault(self._outside(addr, nbytes, write), address=addr)
        if align > 1 and addr % align:
            raise MemoryFault(
                f"{self.name}: misaligned {_verb(write)} of {nbytes} B: address {addr:#x} is "
                f"not {align}-B aligned (off by {addr % align})", address=addr)
        if write and self.read_only:
            raise MemoryFault(f"{self.name}: write of {nbytes} B to read-only region",
                              address=addr)
        if nbytes == 0:
            return None
        if self.backing != "allocation":
            return self._store
        i = bisect_right(self._alloc_starts, addr) - 1
        if i >= 0:
            alloc = self._allocs[i]
            if addr < alloc.addr + alloc.size:
                if addr + nbytes > alloc.addr + alloc.nbytes:
                    over = addr + nbytes - (alloc.addr + alloc.nbytes)
                    raise MemoryFault(
                        f"{self.name}: out of bounds: {_verb(write)} of {nbytes} B runs {over} B "
                        f"beyond {alloc.describe()}", address=addr)
                if write and alloc.read_only:
                    raise MemoryFault(
                        f"{self.name}: write of {nbytes} B to read-only {alloc.describe()}",
                        address=addr)
                return alloc._store
        raise MemoryFault(self._unallocated(addr, nbytes, write), address=addr)

    def _outside(self, addr: int, nbytes: int, write: bool) -> str:
        if nbytes < 0:
            return f"{self.name}: negative access length {nbytes}"
        return (f"{self.name}: {_verb(write)} of {nbytes} B at {addr:#x} is outside the region "
                f"[{self.base:#x}, {self.end:#x})")

    def _unallocated(self, addr: int, nbytes: int, write: bool) -> str:
        # Error path only, so a linear scan of the freed records is fine.
        for old in reversed(self._freed.values()):
            if old.addr <= addr < old.addr + max(old.size, 1):
                return (f"{self.name}: use after free: {_verb(write)} of {nbytes} B in freed "
                        f"{old.describe()}")
        hint = ""
        i = bisect_right(self._alloc_starts, addr) - 1
        if i >= 0:  # most faults here are off-by-one past a buffer: name that buffer
            prev = self._allocs[i]
            hint = f" ({addr - prev.end} B past the end of {prev.describe()})"
        return f"{self.name}: {_verb(write)} of {nbytes} B of unallocated memory{hint}"

    def check(self, addr: int, nbytes: int, *, write: bool, align: int = 1) -> None:
        """Raise :class:`MemoryFault` unless [addr, addr+nbytes) may be accessed.

        Faults: outside the region, ``addr % align != 0``, write to read-only memory, and for
        "allocation" backing: not inside one live allocation.
        """
        self._locate(addr, nbytes, write, align)

    def view(self, addr: int, nbytes: int, *, write: bool = False, align: int = 1) -> np.ndarray:
        """Zero-copy uint8 view of [addr, addr+nbytes) after :meth:`check`.

        With ``write=True`` the range is backed first and the view is writable.  With
        ``write=False`` a range that is not backed yet is not backed by the read: the result is
        then a read-only array of zeros (or of the bytes backed so far), so writing through a
        view taken for reading fails loudly instead of being lost.  See the module docstring
        for how long a view stays valid.
        """
        store = self._locate(addr, nbytes, write, align)
        if store is None:
            return np.zeros(0, _U8)
        return store.view(addr, nbytes, write)

    def typed_view(self, addr: int, nbytes: int, np_dtype: np.dtype, *, write: bool = False) -> np.ndarray:
        """``view(addr, nbytes, write=write).view(np_dtype)``, with the common case -- a backed
        range of one segment, in bounds (of a live allocation for "allocation" backing) --
        checked and sliced in this one call: the numerics of every instruction take two to four
        of these.  Everything else, faults included, goes through :meth:`view`.

        Views of a writable "flat" region backed by one dense array (a core's UB, L1, L0*) are
        cached: any in-range address is legal there and the array never moves until
        :meth:`reset` (which drops the cache), so the same buffer of the next tile costs one dict
        lookup (``views``, which a caller may consult first).  A cached view is writable, as
        the uncached one of backed memory is."""
        store = self._store
        if store is not None:                  # "flat" / "sparse": any in-range address
            key = (addr, nbytes, np_dtype)
            hit = self.views.get(key)
            if hit is not None:                # cached only when legal to read and write
                return hit
            if (nbytes > 0 and self.base <= addr and addr + nbytes <= self.end
                    and not self.read_only and not store.shared):
                i = bisect_right(store._starts, addr) - 1
                if i >= 0:
                    seg = store._segs[i]
                    if addr + nbytes <= seg.end:
                        off = addr - seg.start
                        view = seg.data[off:off + nbytes].view(np_dtype)
                        if store.granule is None:   # dense: the one array of the whole region
                            views = self.views
                            if len(views) >= _MAX_VIEWS:
                                views.clear()
                            views[key] = view
                        return view
        elif nbytes > 0:
            i = bisect_right(self._alloc_starts, addr) - 1
            if i >= 0:
                alloc = self._allocs[i]
                if addr + nbytes <= alloc.addr + alloc.nbytes and not (
                        write and (alloc.read_only or self.read_only)):
                    astore = alloc._store
                    if astore is not None and not (write and astore.shared):
                        i = bisect_right(astore._starts, addr) - 1
                        if i >= 0:
                            seg = astore._segs[i]
                            if addr + nbytes <= seg.end:
                                off = addr - seg.start
                                return seg.data[off:off + nbytes].view(np_dtype)
        return self.view(addr, nbytes, write=write).view(np_dtype)

    def window(self, addr: int, nbytes: int, np_dtype: np.dtype) -> "TypedWindow | None":
        """A :class:`TypedWindow` on [addr, addr+nbytes) of one live, densely backed allocation,
        or None while there is none to give (nothing backed yet, not one allocation, not an
        "allocation" region). A window whose ``array`` is None says the range lies in an
        allocation that will never have one (backed page-wise, above ``DENSE_LIMIT``): the
        caller need not ask again while it is valid."""
        if self.backing != "allocation" or nbytes <= 0:
            return None
        i = bisect_right(self._alloc_starts, addr) - 1
        if i < 0:
            return None
        alloc = self._allocs[i]
        store = alloc._store
        if store is None or addr + nbytes > alloc.addr + alloc.nbytes:
            return None
        if store.granule is not None:
            w = TypedWindow(None, alloc, store, _NO_SEGMENT, None, False)
        else:
            if not store._segs:
                return None
            seg = store._segs[0]        # dense: one segment, the whole allocation
            if not (seg.start <= addr and addr + nbytes <= seg.end):
                return None
            data = seg.data
            off = addr - seg.start
            writable = not (alloc.read_only or self.read_only or store.shared)
            w = TypedWindow(data[off:off + nbytes].view(np_dtype), alloc, store, seg, data, writable)
        if store.windows is None:
            store.windows = weakref.WeakSet()
        store.windows.add(w)
        return w

    def ensure_backed(self, addr: int, nbytes: int) -> None:
        """Back [addr, addr+nbytes) now, so views taken afterwards stay valid together."""
        self.view(addr, nbytes, write=True)

    def read(self, addr: int, nbytes: int, *, align: int = 1, copy: bool = True) -> np.ndarray:
        """A copy of the bytes [addr, addr+nbytes) as a writable uint8 array.

        ``copy=False`` skips the copy for a host that is done with the memory (the end of a
        run): the result may then be a view of the memory itself (later device writes show in
        it, writing to it changes the memory) and may be read-only.
        """
        v = self.view(addr, nbytes, align=align)
        return v.copy() if copy else v

    def write(self, addr: int, data: bytes | bytearray | memoryview | np.ndarray, *,
              align: int = 1, share: bool = False) -> None:
        """Store ``data`` (bytes-like or a numpy array of any dtype, as raw bytes) at ``addr``.

        ``share=True`` lets a write that fills a whole, not yet backed allocation keep ``data``
        itself as the allocation's bytes instead of copying them (see
        :meth:`_SegmentStore.share`: copied on the device's first write, so ``data`` is never
        modified; the caller must not modify it while the memory lives).  Anything else is an
        ordinary copying write.
        """
        src = _as_bytes(data)
        if share and self.backing == "allocation":
            store = self._locate(addr, src.size, True, align)
            if store is not None and store.lo == addr and store.share(src):
                return
        self.view(addr, src.size, write=True, align=align)[:] = src

    # -- statistics --------------------------------------------------------------------------

    @property
    def backed_bytes(self) -> int:
        """Bytes of simulated memory backed by host memory (laziness is observable here)."""
        if self._store is not None:
            return self._store.backed
        return sum(a._store.backed for a in self._allocs if a._store is not None)

    @property
    def backing_generation(self) -> int:
        """Changes whenever backing arrays were replaced, i.e. older views may be stale."""
        if self._store is not None:
            return self._store.generation
        return sum(a._store.generation for a in self._allocs if a._store is not None)

    def backed_pieces(self) -> Iterator[tuple[int, np.ndarray]]:
        """(address, bytes) of every backed range in address order (no copies)."""
        if self._store is not None:
            yield from self._store.pieces()
            return
        for alloc in self._allocs:
            if alloc._store is not None:
                yield from alloc._store.pieces()


def _verb(write: bool) -> str:
    return "write" if write else "read"


def _as_bytes(data: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(_U8)
    return np.frombuffer(data, dtype=_U8)


# ---------------------------------------------------------------------------------------------
# Address spaces
# ---------------------------------------------------------------------------------------------


class AddressSpace:
    """Non-overlapping regions addressed together (e.g. a device's global map, or one core's
    local map).  Accesses are routed to the one region that contains the whole range."""

    def __init__(self, regions: Iterable[Region] = (), name: str = "") -> None:
        self.name = name
        self._bases: list[int] = []
        self._regions: list[Region] = []
        for region in regions:
            self.add(region)

    def add(self, region: Region) -> Region:
        """Add a region; ``ValueError`` naming both if it overlaps one already present."""
        i = bisect_right(self._bases, region.base)
        for other in self._regions[max(i - 1, 0):i + 1]:
            if region.base < other.end and other.base < region.end:
                raise ValueError(
                    f"region {region.name} [{region.base:#x}, {region.end:#x}) overlaps region "
                    f"{other.name} [{other.base:#x}, {other.end:#x})")
        self._bases.insert(i, region.base)
        self._regions.insert(i, region)
        return region

    @property
    def regions(self) -> tuple[Region, ...]:
        """Regions in address order."""
        return tuple(self._regions)

    def __iter__(self) -> Iterator[Region]:
        return iter(tuple(self._regions))

    def region(self, name: str) -> Region:
        """The region called ``name`` (KeyError if none)."""
        for region in self._regions:
            if region.name == name:
                return region
        raise KeyError(f"no region named {name!r} in address space {self.name or '(unnamed)'}")

    def region_of(self, addr: int, nbytes: int = 1) -> Region:
        """The region containing all of [addr, addr+nbytes); MemoryFault "unmapped" if none."""
        i = bisect_right(self._bases, addr) - 1
        if i >= 0:
            region = self._regions[i]
            if addr + max(nbytes, 1) <= region.end:
                return region
            if addr < region.end:
                raise MemoryFault(
                    f"unmapped address: {nbytes} B at {addr:#x} runs past the end of region "
                    f"{region.name} [{region.base:#x}, {region.end:#x})", address=addr)
        raise MemoryFault(f"unmapped address: {addr:#x} is in no region", address=addr)

    def check(self, addr: int, nbytes: int, *, write: bool, align: int = 1) -> None:
        self.region_of(addr, nbytes).check(addr, nbytes, write=write, align=align)

    def view(self, addr: int, nbytes: int, *, write: bool = False, align: int = 1) -> np.ndarray:
        return self.region_of(addr, nbytes).view(addr, nbytes, write=write, align=align)

    def read(self, addr: int, nbytes: int, *, align: int = 1, copy: bool = True) -> np.ndarray:
        return self.region_of(addr, nbytes).read(addr, nbytes, align=align, copy=copy)

    def write(self, addr: int, data: bytes | bytearray | memoryview | np.ndarray, *,
              align: int = 1, share: bool = False) -> None:
        src = _as_bytes(data)
        self.region_of(addr, src.size).write(addr, src, align=align, share=share)

    def snapshot_digest(self, exclude: Sequence[tuple[int, int]] = ()) -> str:
        """sha256 (hex) of the memory contents outside the ``exclude`` ranges (addr, nbytes).

        The digest is over contents, not over how they are stored: never-written bytes count
        as zeros whether or not they are backed, so backing created by a faulting call, or
        segments merging, do not change it.  Every non-zero 4 KiB block (on the absolute
        address grid, cut at backing boundaries) is hashed with its address, so moving data
        changes the digest.  Cost is proportional to the backed bytes.  Allocation tables are
        not part of it -- only bytes.
        """
        return _digest(
            (piece for region in self._regions for piece in region.backed_pieces()), exclude)


def _merge_ranges(exclude: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
    spans = sorted((a, a + n) for a, n in exclude if n > 0)
    los: list[int] = []
    his: list[int] = []
    for a, b in spans:
        if his and a <= his[-1]:
            his[-1] = max(his[-1], b)
        else:
            los.append(a)
            his.append(b)
    return los, his


def _digest(pieces: Iterable[tuple[int, np.ndarray]], exclude: Sequence[tuple[int, int]]) -> str:
    # Two streams, so that neither depends on how blocks were grouped into pieces: the tags
    # (address, length) of all non-zero blocks in address order, and their bytes.  The tags
    # say how to split the bytes, so together they identify the contents exactly.
    tags = hashlib.sha256(b"opsim-memory-digest-v1")
    body = hashlib.sha256()
    ex_lo, ex_hi = _merge_ranges(exclude)
    for start, data in pieces:
        end = start + data.size
        if end == start:
            continue
        k = max(bisect_right(ex_lo, start) - 1, 0)
        copied = False
        while k < len(ex_lo) and ex_lo[k] < end:
            a, b = max(ex_lo[k], start), min(ex_hi[k], end)
            if a < b:
                if not copied:  # never modify the memory itself
                    data, copied = data.copy(), True
                data[a - start:b - start] = 0
            k += 1
        inner = np.arange(align_up(start, PAGE), end, PAGE, dtype=np.int64)
        edges = inner if inner.size and inner[0] == start else np.concatenate(([start], inner))
        offsets = edges - start
        nonzero = np.maximum.reduceat(data, offsets) > 0
        if not nonzero.any():
            continue
        lengths = np.diff(np.append(edges, end))
        tags.update(np.stack([edges[nonzero], lengths[nonzero]], axis=1).astype("<u8").tobytes())
        # Hash the bytes of each run of consecutive non-zero blocks in one call.
        flags = np.concatenate(([False], nonzero, [False])).astype(np.int8)
        change = np.flatnonzero(np.diff(flags))
        bounds = np.append(offsets, data.size)
        for r0, r1 in zip(change[0::2], change[1::2]):
            body.update(data[bounds[r0]:bounds[r1]].data)
    return hashlib.sha256(tags.digest() + body.digest()).hexdigest()


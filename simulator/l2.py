"""The Ascend L2 as an LRU cache over fixed-size chunks of GM.

Reads of resident chunks are hits (served by the L2 link at the L2 rate); the rest are misses
(served by HBM) and fill the cache. Writes allocate (write-through to HBM, so the bandwidth a
store costs is HBM bandwidth, but a later read of the data hits). Host copies (aclrtMemcpy) do
not pass through the AI-core L2. Chunk size and policy are assumptions in the device file.
"""
from __future__ import annotations

from collections import OrderedDict


class L2Cache:
    def __init__(self, size: int, chunk: int) -> None:
        if chunk <= 0 or size < chunk:
            raise ValueError(f"L2 size {size} and chunk {chunk} must satisfy 0 < chunk <= size")
        self.chunk = chunk
        self.capacity_chunks = size // chunk
        self._lru: OrderedDict[int, None] = OrderedDict()
        self.hit_bytes = 0
        self.miss_bytes = 0

    def access(self, addr: int, nbytes: int, *, write: bool) -> int:
        """Touch [addr, addr+nbytes); return how many of the bytes were resident (hits)."""
        if nbytes <= 0:
            return 0
        c = self.chunk
        first, last = addr // c, (addr + nbytes - 1) // c
        lru = self._lru
        hit = 0
        for ch in range(first, last + 1):
            lo = max(addr, ch * c)
            hi = min(addr + nbytes, (ch + 1) * c)
            if ch in lru:
                lru.move_to_end(ch)
                hit += hi - lo
            else:
                lru[ch] = None
                if len(lru) > self.capacity_chunks:
                    lru.popitem(last=False)
        if write:
            return 0
        self.hit_bytes += hit
        self.miss_bytes += nbytes - hit
        return hit

    def invalidate(self, addr: int, nbytes: int) -> None:
        """Drop chunks of [addr, addr+nbytes) (host writes and frees make cached copies stale)."""
        if nbytes <= 0:
            return
        c = self.chunk
        for ch in range(addr // c, (addr + nbytes - 1) // c + 1):
            self._lru.pop(ch, None)

    @property
    def hit_rate(self) -> float:
        total = self.hit_bytes + self.miss_bytes
        return self.hit_bytes / total if total else 0.0

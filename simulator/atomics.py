"""Atomic-add commits to GM, and the order of simultaneous ones.

An atomic-add DMA (``SetAtomicAdd`` + ``DataCopy``/``DataCopyPad`` to GM) adds its payload into
GM at the simulated moment the transfer completes (docs/sources.md#design-memories-s3). When several cores' atomic adds
complete in the *same* cycle, the hardware's order among them is not specified — that is where
the non-determinism of scatter-add operators such as aclnnEmbeddingDenseBackward comes from
(docs/sources.md#scatter-add-order: fp32 addition is not associative, so the order changes the bits).

:class:`AtomicCommitter` models exactly that: every atomic add that completes in a cycle is
collected, and a zero-delay event scheduled after them applies the whole batch in an order
drawn from the device's seeded generator. So

- commits in different cycles are applied in time order, whatever the seed;
- commits in the same cycle are applied in a seed-dependent order: the same seed gives the same
  bits, different seeds may give different fp32 sums;
- a batch of one commit draws nothing from the generator, so runs that never have simultaneous
  commits do not depend on the seed at all.

The deferred event is scheduled when the first commit of the cycle arrives, i.e. before the
completions that follow from it (block ends, stream markers), so every commit of a run is
applied before ``Device.synchronize`` returns.
"""
from __future__ import annotations

from typing import Iterable, Protocol

import numpy as np
import simpy

class AtomicTarget(Protocol):
    """The GM side of an atomic DMA (``simulator.tile.GlobalSlice``)."""

    def atomic_add(self, values: np.ndarray) -> None: ...


class AtomicCommitter:
    """Applies atomic-add DMA payloads to GM; same-cycle payloads in a seeded order."""

    def __init__(self, env: simpy.Environment, rng: np.random.Generator) -> None:
        self.env = env
        self.rng = rng
        self._pending: list[tuple[AtomicTarget, np.ndarray]] = []
        self._scheduled = False
        self.commits = 0             # atomic adds applied so far
        self.batches = 0             # cycles in which at least one was applied
        self.simultaneous = 0        # commits that shared their cycle with another one

    def commit(self, dst: AtomicTarget, values: np.ndarray) -> None:
        """Queue ``dst += values`` for the end of the current cycle's completions.

        ``values`` is copied: the UB buffer it came from may be rewritten in the same cycle once
        the DMA's completion releases it.
        """
        self._pending.append((dst, np.array(values, copy=True)))
        if not self._scheduled:
            self._scheduled = True
            ev = self.env.event()
            ev.callbacks.append(self._apply)
            ev.succeed()  # zero delay: processed after the events already due this cycle

    @property
    def pending(self) -> int:
        return len(self._pending)

    def _apply(self, _event: simpy.Event) -> None:
        batch, self._pending = self._pending, []
        self._scheduled = False
        order: Iterable[int]
        if len(batch) > 1:
            order = self.rng.permutation(len(batch))
            self.simultaneous += len(batch)
        else:
            order = range(len(batch))
        for i in order:
            dst, values = batch[i]
            dst.atomic_add(values)
        self.commits += len(batch)
        self.batches += 1

"""``RunStats``: the statistics of one run (``RunResult.stats``), as a typed dictionary.

A ``TypedDict`` rather than a class: ``res.stats["bound"]``, ``res.stats.get(...)``,
``dict(res.stats)`` and ``json.dumps(res.stats)`` keep working for every caller, while type
checkers and editors know each key and its type. Not every key is present in every mode:
``numeric`` runs carry only ``mode``; an empty call carries ``empty`` and ``block_dim``; the
estimate adds ``estimate_model`` / ``estimate_notes`` (and, per operator, ``estimate_phases``
or ``launch_cycles``); ``l2_hit_rate`` exists on parts with an L2.
"""
from __future__ import annotations

from typing import Any, NotRequired, TypedDict

__all__ = ["RunStats", "LinkStats"]


class LinkStats(TypedDict):
    """Bytes and rates of one shared memory link (HBM/DDR, L2, a DMA pool) over the run."""

    bytes: int
    window_bytes: float                # of those, the bytes carried within the run's window
    achieved_GBps: float
    peak_GBps: float
    utilisation: float
    max_rate_GBps: NotRequired[float]  # the highest carried rate; the estimate has no rate history


class RunStats(TypedDict, total=False):
    """What ``opsim.run`` measured (simulator) or derived (estimate); see opsim.api.collect_stats."""

    mode: str                          # "numeric" only: no timing was run
    empty: bool                        # the call had no work (an empty operand)
    cycles: int                        # device cycles from the first launch's issue to the last end
    time_us: float
    clock_hz: float
    block_dim: int | None
    tile_length: int | None
    buffer_num: int | None
    bytes_read: int                    # GM bytes read / written by the kernels
    bytes_written: int
    bandwidth_GBps: float              # the HBM/DDR link's achieved rate (bytes it carried / time)
    peak_bandwidth_GBps: float
    l2_bandwidth_GBps: float | None    # the L2 link's achieved rate (None: no L2)
    gm_link: str                       # name of the main-memory link: "HBM" or "DDR"
    link_bytes: dict[str, int]         # by the link that carried them: "HBM read", "HBM write" (a
                                       # write-back L2: evicted dirty lines), "L2 read", "L2 write"
    on_chip_bytes: dict[str, int]      # "L1->L0A", "L1->L0B", "UB->UB" moves
    launch_gap_cycles: int             # launch.gap paid by launches queued behind another
    links: dict[str, LinkStats]
    kernel_type: str                   # opsim.asc: the launch's unit ("vector", "cube", "mix")
    sanitizer: Any                     # opsim.asc: the sanitizer report, when it ran
    pipe_busy: dict[str, int]          # per pipe: busy cycles on its busiest core
    pipe_busy_total: dict[str, int]    # per pipe: busy cycles summed over cores
    pipe_utilisation: dict[str, float]
    per_core: dict[str, dict[str, int]]
    ub_peak_bytes: int
    local_memory: str                  # what ub_peak_bytes measures: "UB", or "private memory" (DSP)
    workspace_bytes: int
    gm_footprint_bytes: int
    launches: int
    launch_overhead_cycles: int
    instructions: int
    issue_starved: dict[str, int]
    fast_forward: dict[str, Any]       # rounds/cycles/instructions the fast-forward skipped, or why not
    bound: str                         # "memory" | "vector" | "cube" | "launch" | ...
    bound_reason: str
    l2_hit_rate: float
    estimate_model: str
    estimate_notes: str
    estimate_phases: tuple[Any, ...]
    launch_cycles: tuple[tuple[str, int], ...]


def local_memory_name(spec: Any) -> str:
    """What a core's local memory is called on ``spec`` (a DeviceSpec): a DSP core's is its
    private memory, an AI core's the UB (``RunStats["local_memory"]``)."""
    return "private memory" if spec.family == "dsp" else "UB"

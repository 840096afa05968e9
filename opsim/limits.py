"""Host-side limits of opsim: how much host memory one call may take, how big a study may be.

Both are checked before any work starts, so an impossible request is refused in milliseconds
with the numbers instead of exhausting the host. The defaults can be changed for a deliberate
experiment with environment variables (a size accepts a K/M/G/T suffix, powers of 1024):

- ``OPSIM_HOST_MEMORY_BUDGET``: bytes of host memory a full- or numeric-mode call may need for
  its data (default: the smaller of 16 GiB and half the physical memory). Timing and estimate
  modes hold no data and are not limited by it.
- ``OPSIM_MAX_STUDY_POINTS``: points of one study (default 1,000,000), checked when the study
  is loaded, before any point is enumerated.

Device files have their own plausibility limits (:mod:`opsim.devices.limits`).
"""
from __future__ import annotations

import os
from typing import Any, Mapping

__all__ = ["host_memory_budget", "max_study_points", "check_host_memory", "HostMemoryError", "parse_bytes"]

_GIB = 1 << 30
_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class HostMemoryError(MemoryError, ValueError):
    """A call would need more host memory than the budget; the message has the numbers.

    A ``ValueError`` (the request is too big for this host) and a ``MemoryError``."""


def parse_bytes(text: str) -> int:
    """``"8G"`` -> 8589934592; plain integers are bytes."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _SUFFIX and not t[-1:].isdigit() else ""
    number = t[:-1] if unit else t
    try:
        value = int(float(number) * _SUFFIX[unit])
    except ValueError:
        raise ValueError(f"{text!r} is not a byte count (e.g. 8589934592 or 8G)") from None
    if value <= 0:
        raise ValueError(f"{text!r} must be > 0 bytes")
    return value


def _physical_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # not POSIX
        return None


def host_memory_budget() -> int:
    """Bytes of host memory one call may use for its data (see the module docstring)."""
    text = os.environ.get("OPSIM_HOST_MEMORY_BUDGET")
    if text and text.strip():
        try:
            return parse_bytes(text)
        except ValueError as exc:
            raise ValueError(f"environment variable OPSIM_HOST_MEMORY_BUDGET: {exc}") from None
    phys = _physical_memory()
    return min(16 * _GIB, phys // 2) if phys else 16 * _GIB


def max_study_points() -> int:
    text = os.environ.get("OPSIM_MAX_STUDY_POINTS")
    if text and text.strip():
        try:
            value = int(float(text))
        except ValueError:
            raise ValueError(f"environment variable OPSIM_MAX_STUDY_POINTS={text!r} must be an integer") from None
        if value > 0:
            return value
        raise ValueError(f"environment variable OPSIM_MAX_STUDY_POINTS={text!r} must be > 0")
    return 1_000_000


def _fmt(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def check_host_memory(op: str, mode: str, descs: Mapping[str, Any], outputs: Mapping[str, Any],
                      workspace: int = 0) -> int:
    """Refuse, with the numbers, a call whose data would not fit the host memory budget.

    The need counted: in full mode the device copy of every operand and output, the
    workspace, and the host copy of every output read back; in numeric mode the outputs the
    golden computes, twice (a result and one temporary of the same size). Returns the need.
    """
    def nbytes(d: Any) -> int:
        return int(d.nbytes) if d is not None else 0

    out_names = set(outputs)
    in_bytes = sum(nbytes(d) for n, d in descs.items() if n not in out_names)
    out_bytes = sum(nbytes(d) for d in outputs.values())
    if mode == "full":
        need = in_bytes + 2 * out_bytes + int(workspace)
        parts = f"operands {_fmt(in_bytes)}, outputs {_fmt(out_bytes)} x 2, workspace {_fmt(int(workspace))}"
    else:
        need = 2 * out_bytes
        parts = f"outputs {_fmt(out_bytes)} x 2"
    budget = host_memory_budget()
    if need > budget:
        shapes = ", ".join(f"{n} {'x'.join(map(str, d.shape)) or 'scalar'}" for n, d in outputs.items()
                           if d is not None)
        raise HostMemoryError(
            f"{op} in {mode} mode needs about {_fmt(need)} of host memory ({parts}; {shapes}), over the "
            f"budget of {_fmt(budget)}. Use mode='timing' or 'estimate' (no data), or raise the "
            f"budget with the environment variable OPSIM_HOST_MEMORY_BUDGET (e.g. 64G)")
    return need

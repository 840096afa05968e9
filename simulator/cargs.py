"""Argument checks shared by the C-style runtimes (acl, hthread) and their libraries.

A C function sees integers and pointers; Python callers can pass anything. These helpers say
whether a value is what the C parameter would hold, so that the runtimes can answer a wrong
argument with a status code instead of a coercion (``int(1.5)``) or a traceback.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["is_int", "core_mask_problem", "host_bytes", "host_destination", "int_tuple"]


def is_int(value: Any) -> bool:
    """An integer argument as C would take it: int or numpy integer, never bool or float."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def core_mask_problem(mask: Any, cores: int, kind: str, device: str, *, param: str = "core_mask") -> str | None:
    """Why ``mask`` cannot select among ``cores`` ``kind`` cores of ``device`` (bit i = core i),
    or None when it can.

    The one check behind every core mask (aclnn tiling overrides, DSP calls, Device.launch,
    hthread groups), so that they agree: a numpy integer is an integer, a bool or a whole float
    is not (True would run as mask 1, 3.0 as 3). Each caller raises the message with its own
    status code or error type."""
    full = (1 << cores) - 1
    allowed = f"allowed: 0x1..{full:#x}"
    if not is_int(mask):
        return f"{param} {mask!r} is not an integer; {allowed} (bit i = core i of the {cores} {kind} cores of {device})"
    if mask == 0:
        return f"{param} 0x0 selects no core; {allowed} (bit i = core i of the {cores} {kind} cores of {device})"
    if mask < 0 or mask >> cores:
        # a negative mask has every high bit set (two's complement)
        return f"{param} {int(mask):#x} selects cores beyond the {cores} {kind} cores of {device}; {allowed} " \
               f"(bit i = core i)"
    return None


def host_bytes(buf: Any) -> np.ndarray | None:
    """The bytes of a host buffer (a numpy array of plain data, bytes, bytearray or memoryview)
    as a flat uint8 array, or None when ``buf`` is not one."""
    if isinstance(buf, (bytes, bytearray, memoryview)):
        try:
            return np.frombuffer(buf, dtype=np.uint8)
        except (TypeError, ValueError):
            return None
    if isinstance(buf, np.ndarray) and not buf.dtype.hasobject:
        return np.ascontiguousarray(buf).reshape(-1).view(np.uint8)
    return None


def host_destination(buf: Any) -> np.ndarray | None:
    """A host destination written in place: a writable C-contiguous numpy array of plain data
    (a strided array would be copied by reshape and the write lost), as flat uint8; else None."""
    if isinstance(buf, np.ndarray) and not buf.dtype.hasobject and buf.flags.writeable and \
            buf.flags.c_contiguous:
        return buf.reshape(-1).view(np.uint8)
    return None


def int_tuple(values: Any) -> tuple[int, ...] | None:
    """A list of C int64 values as a tuple of ints, or None when it is not one."""
    if isinstance(values, (str, bytes)) or not (isinstance(values, Sequence) or
                                                (isinstance(values, np.ndarray) and values.ndim == 1)):
        return None
    out = tuple(values)
    if not all(is_int(v) and -2 ** 63 <= v < 2 ** 63 for v in out):
        return None
    return tuple(int(v) for v in out)

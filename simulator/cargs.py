"""Argument checks shared by the C-style runtimes (acl, hthread) and their libraries.

A C function sees integers and pointers; Python callers can pass anything. These helpers say
whether a value is what the C parameter would hold, so that the runtimes can answer a wrong
argument with a status code instead of a coercion (``int(1.5)``) or a traceback.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["is_int", "host_bytes", "host_destination", "int_tuple"]


def is_int(value: Any) -> bool:
    """An integer argument as C would take it: int or numpy integer, never bool or float."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


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

"""``asc.language.core.dtype``: ``DataType`` and ``KnownTypes`` (the dtypes by name, as pyasc
programs spell them for struct fields: ``KnownTypes.int32``)."""
from __future__ import annotations

from opsim.asc import dtype as _dt
from opsim.asc.dtype import DataType


class KnownTypes:
    """The data types opsim models, by pyasc's names."""

    float16 = half = _dt.float16
    float32 = float_ = _dt.float32
    bfloat16 = _dt.bfloat16
    float64 = double = _dt.float64
    int8 = _dt.int8
    int16 = _dt.int16
    int32 = int_ = _dt.int32
    int64 = _dt.int64
    uint8 = _dt.uint8
    bool_ = _dt.bool_


__all__ = ["DataType", "KnownTypes"]

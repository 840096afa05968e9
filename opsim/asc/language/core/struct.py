"""``asc.language.core.struct``: kernel parameter structures (a tiling passed as one argument).

A pyasc program declares ``class TileConfig(Struct)`` with ``tile_length = Field(dtype=
KnownTypes.int32, default=0)`` and nested ``block = StructField(BlockConfig)``, builds it on the
host (keyword arguments or attribute assignment) and passes it to the kernel, which reads
``config.tile.tile_length``. On opsim the kernel is Python, so the structure is passed as it is:
each field holds a host number (an integer field an ``int``, a floating one a ``float``).
"""
from __future__ import annotations

from typing import Any

from opsim.asc.dtype import DataType, of


class Field:
    """A scalar field of a :class:`Struct`: its data type and default value."""

    def __init__(self, dtype: Any = None, default: Any = 0) -> None:
        self.dtype: DataType | None = of(dtype) if dtype is not None else None
        self.default = default
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def convert(self, value: Any) -> Any:
        if self.dtype is None or isinstance(value, bool):
            return value
        try:
            return float(value) if self.dtype.sim.is_float else int(value)
        except (TypeError, ValueError):
            raise TypeError(f"Struct field {self.name} is {self.dtype}; got {value!r}") from None

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return obj.__dict__.get(self.name, self.convert(self.default))

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.name] = self.convert(value)


class StructField:
    """A nested :class:`Struct` field (a fresh default instance unless one is given)."""

    def __init__(self, struct: type, default: Any = None) -> None:
        self.struct, self.default = struct, default
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        if self.name not in obj.__dict__:
            obj.__dict__[self.name] = self.default if self.default is not None else self.struct()
        return obj.__dict__[self.name]

    def __set__(self, obj: Any, value: Any) -> None:
        if not isinstance(value, self.struct):
            raise TypeError(f"Struct field {self.name} is a {self.struct.__name__}; got {type(value).__name__}")
        obj.__dict__[self.name] = value


class Struct:
    """Base of a kernel parameter structure: ``Config(field=value, ...)``."""

    def __init__(self, **values: Any) -> None:
        fields = self.fields()
        for name, value in values.items():
            if name not in fields:
                raise TypeError(f"{type(self).__name__} has no field {name!r}; its fields: {', '.join(fields)}")
            setattr(self, name, value)

    @classmethod
    def fields(cls) -> list[str]:
        return [n for k in reversed(cls.__mro__) for n, v in vars(k).items() if isinstance(v, (Field, StructField))]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.fields())})"


__all__ = ["Field", "Struct", "StructField"]

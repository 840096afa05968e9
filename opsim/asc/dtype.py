"""pyasc data types (``asc.float16``, ``x.dtype.sizeof()``) over the simulator's dtypes."""
from __future__ import annotations

from typing import Any

from opsim.simulator import numerics as nx


class DataType:
    """A kernel data type: ``.sizeof()`` in bytes, compares equal to the simulator dtype."""

    __slots__ = ("sim",)

    def __init__(self, sim: nx.DType) -> None:
        self.sim = sim

    def sizeof(self) -> int:
        return self.sim.itemsize

    @property
    def name(self) -> str:
        return self.sim.name

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DataType):
            return self.sim == other.sim
        if isinstance(other, nx.DType):
            return self.sim == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.sim)

    def __repr__(self) -> str:
        return f"asc.{_PYASC_NAMES.get(self.sim.name, self.sim.name)}"


float16 = half = DataType(nx.FP16)
float32 = float_ = DataType(nx.FP32)
bfloat16 = DataType(nx.BF16)
float64 = double = DataType(nx.FP64)
int8 = DataType(nx.INT8)
int16 = DataType(nx.INT16)
int32 = int_ = DataType(nx.INT32)
int64 = DataType(nx.INT64)
uint8 = DataType(nx.UINT8)
bool_ = DataType(nx.BOOL)

_PYASC_NAMES = {"fp16": "float16", "fp32": "float32", "bf16": "bfloat16", "fp64": "float64"}


def sim_dtype(x: Any) -> nx.DType:
    """The simulator dtype of a DataType, numpy dtype, name or torch dtype."""
    if isinstance(x, DataType):
        return x.sim
    if isinstance(x, nx.DType):
        return x
    if type(x).__module__ == "torch" or str(x).startswith("torch."):
        return nx.dtype(str(x).rsplit(".", 1)[-1])
    return nx.dtype(x)


def of(x: Any) -> DataType:
    return x if isinstance(x, DataType) else DataType(sim_dtype(x))

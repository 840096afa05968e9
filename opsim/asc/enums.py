"""pyasc enumerations (same names and values as ``asc.language.core.enums``) and the pipe
names they map to in the simulator."""
from __future__ import annotations

from enum import IntEnum


class TPosition(IntEnum):
    GM = 0
    A1 = 1
    A2 = 2
    B1 = 3
    B2 = 4
    C1 = 5
    C2 = 6
    CO1 = 7
    CO2 = 8
    VECIN = 9
    VECOUT = 10
    VECCALC = 11


class HardEvent(IntEnum):
    MTE2_MTE1 = 0
    MTE1_MTE2 = 1
    MTE1_M = 2
    M_MTE1 = 3
    MTE2_V = 4
    V_MTE2 = 5
    MTE3_V = 6
    V_MTE3 = 7
    M_V = 8
    V_M = 9
    V_V = 10
    MTE3_MTE1 = 11
    MTE1_MTE3 = 12
    MTE1_V = 13
    MTE2_M = 14
    M_MTE2 = 15
    V_MTE1 = 16
    M_FIX = 17
    FIX_M = 18
    MTE3_MTE2 = 19
    MTE2_MTE3 = 20
    S_V = 21
    V_S = 22
    S_MTE2 = 23
    MTE2_S = 24
    S_MTE3 = 25
    MTE3_S = 26
    MTE2_FIX = 27
    FIX_MTE2 = 28
    FIX_S = 29
    M_S = 30
    FIX_MTE3 = 31
    MTE1_FIX = 32
    FIX_MTE1 = 33
    FIX_FIX = 34


class PipeID(IntEnum):
    PIPE_S = 0
    PIPE_V = 1
    PIPE_M = 2
    PIPE_MTE1 = 3
    PIPE_MTE2 = 4
    PIPE_MTE3 = 5
    PIPE_ALL = 6
    PIPE_MTE4 = 7
    PIPE_MTE5 = 8
    PIPE_V2 = 9
    PIPE_FIX = 10


class RoundMode(IntEnum):
    CAST_NONE = 0
    CAST_RINT = 1
    CAST_FLOOR = 2
    CAST_CEIL = 3
    CAST_ROUND = 4
    CAST_TRUNC = 5
    CAST_ODD = 6


class CMPMODE(IntEnum):
    LT = 0
    GT = 1
    EQ = 2
    LE = 3
    GE = 4
    NE = 5


class SELMODE(IntEnum):
    VSEL_CMPMASK_SPR = 0
    VSEL_TENSOR_SCALAR_MODE = 1
    VSEL_TENSOR_TENSOR_MODE = 2


SelMode = SELMODE


class CubeFormat(IntEnum):
    ND = 0
    NZ = 1


class ReduceOrder(IntEnum):
    ORDER_VALUE_INDEX = 0
    ORDER_INDEX_VALUE = 1
    ORDER_ONLY_VALUE = 2
    ORDER_ONLY_INDEX = 3


class MaskMode(IntEnum):
    NORMAL = 0
    COUNTER = 1


# HardEvent / PipeID spelling -> simulator pipe name
PIPE_OF = {"MTE1": "MTE1", "MTE2": "MTE2", "MTE3": "MTE3", "V": "VECTOR", "M": "CUBE", "FIX": "FIXP",
           "S": "SCALAR"}
PIPE_OF_ID = {PipeID.PIPE_S: "SCALAR", PipeID.PIPE_V: "VECTOR", PipeID.PIPE_M: "CUBE",
              PipeID.PIPE_MTE1: "MTE1", PipeID.PIPE_MTE2: "MTE2", PipeID.PIPE_MTE3: "MTE3",
              PipeID.PIPE_FIX: "FIXP"}

ROUND_MODE_NAME = {RoundMode.CAST_NONE: "none", RoundMode.CAST_RINT: "rint", RoundMode.CAST_FLOOR: "floor",
                   RoundMode.CAST_CEIL: "ceil", RoundMode.CAST_ROUND: "round", RoundMode.CAST_TRUNC: "trunc",
                   RoundMode.CAST_ODD: "odd"}


def event_pipes(event: HardEvent) -> tuple[str, str]:
    """(source pipe, destination pipe) of a HardEvent, e.g. MTE2_V -> ("MTE2", "VECTOR")."""
    src, dst = HardEvent(event).name.split("_")
    return PIPE_OF[src], PIPE_OF[dst]

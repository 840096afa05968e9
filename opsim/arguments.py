"""Checks of the Python entry points' own arguments (``opsim.run``, ``opsim.TensorSpec``).

The operator's documented checks (``OpDef.validate``) answer with an :class:`OpError` carrying
the aclnn status code. Everything before them -- the mode, the device, the seed, the mappings
of tiling and device overrides, what an operand is -- has no device status code, so a wrong
value is a ``TypeError`` (wrong kind of value) or ``ValueError`` (right kind, not allowed) whose
message names the parameter, the value and what is allowed. Nothing is coerced: ``1.5`` is not
taken as ``1`` and ``None`` is not a seed.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from opsim.devices.spec import DeviceSpec
from opsim.simulator.cargs import is_int  # one definition: int or numpy integer, never bool

__all__ = ["check_choice", "check_seed", "check_mapping", "check_device", "check_dims", "check_operand",
           "is_int"]


def check_choice(param: str, value: Any, allowed: Sequence[str]) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{param} must be a string, one of {', '.join(allowed)}; got {type(value).__name__} "
                        f"{_show(value)}")
    if value not in allowed:
        raise ValueError(f"{param} {value!r} is not one of {', '.join(allowed)}")
    return value


def check_seed(seed: Any) -> int:
    """A run is reproducible only from an explicit integer seed (None would draw from the OS)."""
    if not is_int(seed):
        raise TypeError(f"seed must be an integer >= 0 (runs are deterministic per seed); got "
                        f"{type(seed).__name__} {_show(seed)}")
    if seed < 0:
        raise ValueError(f"seed {int(seed)} must be >= 0")
    return int(seed)


def check_mapping(param: str, value: Any, example: str) -> dict[str, Any] | None:
    """None or a mapping with string keys, copied (the caller's dict is never changed)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"{param} must be a mapping such as {example} (or None); got {type(value).__name__} "
                        f"{_show(value)}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise TypeError(f"{param} keys must be strings such as {example}; got {_show(bad[0])}")
    return dict(value)


def check_device(device: Any) -> None:
    if not isinstance(device, (str, DeviceSpec)):
        raise TypeError(f"device must be a catalogue name such as 'atlas-a2', a device file path or a "
                        f"DeviceSpec; got {type(device).__name__} {_show(device)}")


def check_dims(param: str, shape: Any) -> tuple[int, ...]:
    """A shape: a sequence of integers >= 0 (a bare integer is not a shape)."""
    if isinstance(shape, (str, bytes)) or not (isinstance(shape, Sequence) or
                                               (isinstance(shape, np.ndarray) and shape.ndim == 1)):
        raise TypeError(f"{param} must be a sequence of integers >= 0 such as (64, 4096); got "
                        f"{type(shape).__name__} {_show(shape)}")
    dims = tuple(shape)
    for i, d in enumerate(dims):
        if not is_int(d):
            raise TypeError(f"{param}[{i}] is {type(d).__name__} {_show(d)}; every dimension must be an "
                            f"integer >= 0")
        if d < 0:
            raise ValueError(f"{param}[{i}] is {int(d)}; every dimension must be >= 0")
    out = tuple(int(d) for d in dims)
    if math.prod(out) >= 2 ** 63:
        raise ValueError(f"{param} {list(out)} has {math.prod(out)} elements; at most 2**63 - 1 are addressable")
    return out


def check_operand(op: str, name: str, value: Any, shape_only_ok: bool, mode: str) -> None:
    """An operand is a numpy array of plain data, or (timing / estimate) a TensorSpec."""
    from opsim.api import TensorSpec   # the class lives with the API it belongs to
    from opsim.kernels.common import TensorDesc
    if isinstance(value, np.generic):   # a numpy scalar is a 0-d operand
        value = np.asarray(value)
    if isinstance(value, (TensorSpec, TensorDesc)):
        if not shape_only_ok:
            raise TypeError(f"{op}: operand {name} is a TensorSpec (shape only); {mode} mode needs data "
                            f"— use mode='timing' or 'estimate' for shape-only runs")
        return
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{op}: operand {name} must be a numpy array"
                        f"{' or an opsim.TensorSpec' if shape_only_ok else ''}; got {type(value).__name__}")
    if value.dtype.hasobject or value.dtype.kind in "cUSMm":
        raise TypeError(f"{op}: operand {name} has numpy dtype {value.dtype}; operands hold numbers "
                        f"(float32, float16, bfloat16, integers or bool)")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

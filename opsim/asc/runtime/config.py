"""``asc.runtime.config``: the backend a pyasc program selects. On opsim every backend runs on
the simulated device chosen with ``opsim.asc.set_device`` (default atlas-a2)."""
from __future__ import annotations

from enum import Enum


class Backend(str, Enum):
    NPU = "NPU"
    Model = "Model"
    CPU = "CPU"


class Platform(str, Enum):
    Ascend910B = "Ascend910B"


_PLATFORM = [Backend.Model]


def set_platform(backend: Backend | str, *args: object, **kwargs: object) -> None:
    _PLATFORM[0] = Backend(backend)


def get_platform() -> Backend:
    return _PLATFORM[0]

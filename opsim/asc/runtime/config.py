"""``asc.runtime.config``: the backend, SoC and kernel type a pyasc program selects.

On opsim every backend runs on the simulated device chosen with ``opsim.asc.set_device``
(default atlas-a2); ``set_platform(backend, soc_version)`` with a SoC of the device catalogue
chooses that device (``Platform.Ascend910B1`` -> atlas-a2-910b1, ``Ascend910_9391`` ->
atlas-a3), and a SoC the catalogue has no device for is refused, naming the ones it has.
"""
from __future__ import annotations

from enum import Enum


class Backend(str, Enum):
    NPU = "NPU"
    Model = "Model"
    CPU = "CPU"


class Platform(str, Enum):
    """pyasc's SoC versions (and ``Ascend910B``, the compile platform, as atlas-a2)."""

    Ascend910B = "Ascend910B"
    Ascend910B1 = "Ascend910B1"
    Ascend910B2 = "Ascend910B2"
    Ascend910B2C = "Ascend910B2C"
    Ascend910B3 = "Ascend910B3"
    Ascend910B4 = "Ascend910B4"
    Ascend910B4_1 = "Ascend910B4-1"
    Ascend910_9362 = "Ascend910_9362"
    Ascend910_9372 = "Ascend910_9372"
    Ascend910_9381 = "Ascend910_9381"
    Ascend910_9382 = "Ascend910_9382"
    Ascend910_9391 = "Ascend910_9391"
    Ascend910_9392 = "Ascend910_9392"


class KernelType(Enum):
    """pyasc's ``@asc.jit(kernel_type=...)``: which cores the kernel runs on."""

    AIV_ONLY = 0
    AIC_ONLY = 1
    MIX_AIV_HARD_SYNC = 2
    MIX_AIC_HARD_SYNC = 3
    MIX_AIV_1_0 = 4
    MIX_AIC_1_0 = 5
    MIX_AIC_1_1 = 6
    MIX_AIC_1_2 = 7

    @property
    def kind(self) -> str:
        """opsim's launch kind: vector cores only, cube cores only, or cube + vector groups."""
        if self in (KernelType.AIV_ONLY, KernelType.MIX_AIV_HARD_SYNC, KernelType.MIX_AIV_1_0):
            return "vector"
        if self in (KernelType.AIC_ONLY, KernelType.MIX_AIC_HARD_SYNC, KernelType.MIX_AIC_1_0):
            return "cube"
        return "mix"


_PLATFORM = [Backend.Model]


def _device_of(soc: str) -> str:
    """The catalogue device whose SoC is ``soc``."""
    from opsim import api
    if soc == Platform.Ascend910B.value:
        return "atlas-a2"
    socs: dict[str, str] = {}
    for name in api.devices():
        spec = api.device_spec(name)
        if spec.family == "ascend" and spec.soc:
            socs.setdefault(spec.soc, name)
    if soc not in socs:
        raise ValueError(f"set_platform soc_version {soc!r}: opsim has no device for this SoC; the catalogue's "
                         f"Ascend SoCs are {', '.join(sorted(socs))} (or choose a device with asc.set_device)")
    return socs[soc]


def set_platform(backend: Backend | str, soc_version: Platform | str | None = None, *args: object,
                 **kwargs: object) -> None:
    """Select the backend (every backend is the simulator) and, with ``soc_version``, the
    simulated device of that SoC for later launches."""
    b = Backend(backend)
    if soc_version is not None:
        from opsim.asc.jit import set_device
        soc = soc_version.value if isinstance(soc_version, Platform) else str(soc_version)
        set_device(_device_of(soc))
    _PLATFORM[0] = b


def get_platform() -> Backend:
    return _PLATFORM[0]

"""opsim: an Ascend-style operator simulator and emulator.

>>> import opsim
>>> res = opsim.run("mse_loss_backward", device="atlas-a2", grad_output=g, self=x, target=y, reduction="mean")
>>> res.outputs["out"], res.cycles, res.stats["bound"]
"""
from opsim.kernels.common import OpError
from opsim import devices  # the subpackage; callable: opsim.devices() lists the catalogue
from opsim.api import RunResult, TensorSpec, device_spec, operators, run
from opsim.custom import register_operator
from opsim.stats import RunStats
from opsim.sweep import sweep  # the function; the module stays importable as `from opsim.sweep import ...`
from opsim.simulator.errors import (CapacityError, DeadlockError, MemoryFault, QueueError, SimulatorError,
                              UnsupportedInstruction)

__all__ = ["run", "register_operator", "sweep", "devices", "device_spec", "operators", "RunResult", "RunStats",
           "TensorSpec", "OpError",
           "SimulatorError", "MemoryFault", "CapacityError", "QueueError", "UnsupportedInstruction",
           "DeadlockError"]

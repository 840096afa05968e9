"""opsim.asc — the pyasc programming interface on the simulated machine (docs/sources.md#pyasc-api).

A kernel written for pyasc (``import asc``) runs on opsim when its imports change to::

    import opsim.asc as asc
    import opsim.asc.lib.runtime as rt
    import opsim.asc.runtime.config as config

``kernel[block_dim, rt.current_stream()](x, y, z, n)`` copies the host arrays into a fresh
simulated device (``asc.set_device("atlas-a2")`` by default), runs the blocks through the
simulator's pipes, copies the arrays the kernel wrote back in place and returns a result with
``cycles``, ``time_us``, ``stats`` and ``trace`` (as ``opsim.run`` does). Every API call becomes
the simulator instruction it stands for, with the kernel's source line attached; anything not
modelled raises ``UnsupportedInstruction`` naming the call and the line. See
docs/writing-kernels.md.
"""
from __future__ import annotations

import builtins as _builtins

from opsim.asc import adv, lib, runtime
from opsim.asc.basic import (abs, add, adds, axpy, brcb, cast, compare, compare_scalar, copy, data_copy,
                             data_copy_pad, div, duplicate, exp, leaky_relu, ln, max, maxs, min, mins, mul, muls,
                             reciprocal, reduce_max, reduce_min, reduce_sum, relu, rsqrt, select, sqrt, sub,
                             transpose, whole_reduce_max, whole_reduce_min, whole_reduce_sum)
from opsim.asc.cube import fixpipe, load_data, mmad, set_sys_workspace, get_sys_workspace
from opsim.asc.dtype import (DataType, bfloat16, bool_, double, float16, float32, float64, float_, half,
                             int8, int16, int32, int64, int_, uint8)
from opsim.asc.enums import (CMPMODE, SELMODE, CubeFormat, HardEvent, MaskMode, PipeID, ReduceOrder, RoundMode,
                             SelMode, TPosition)
from opsim.asc.fwk import TBuf, TPipe, TQue, TQueBind
from opsim.asc.jit import ConstExpr, JitFunction, KernelResult, get_device, jit, set_device
from opsim.asc.sync import (ascend_is_aic, ascend_is_aiv, cross_core_set_flag, cross_core_wait_flag,
                            data_sync_barrier, get_block_idx, get_block_num, get_sub_block_idx,
                            get_sub_block_num, pipe_barrier, set_atomic_add, set_atomic_none, set_flag,
                            sync_all, wait_flag)
from opsim.asc.tensor import GlobalAddress, GlobalTensor, LocalTensor, LocalTensorAuto
from opsim.asc.types import (BinaryRepeatParams, BrcbRepeatParams, CopyRepeatParams, DataCopyCO12DstParams,
                             DataCopyExtParams, DataCopyPadExtParams, DataCopyPadParams, DataCopyParams,
                             FixpipeParamsV220, LoadData2DParams, MmadParams, Nd2NzParams, UnaryRepeatParams)
from opsim.simulator.errors import UnsupportedInstruction

# asc.property(asc.DEFAULT_C0_SIZE) and friends: platform constants
DEFAULT_C0_SIZE = "DEFAULT_C0_SIZE"
ONE_BLK_SIZE = "ONE_BLK_SIZE"
TOTAL_L0C_SIZE = "TOTAL_L0C_SIZE"
TOTAL_L1_SIZE = "TOTAL_L1_SIZE"


def property(prop: str) -> int:  # noqa: A001 - pyasc's name
    """A platform constant: 32 B C0/block sizes, L0C and L1 capacities of the device."""
    if prop in (DEFAULT_C0_SIZE, ONE_BLK_SIZE):
        return 32
    from opsim.asc import _core
    spec = _core.current().launch.device.spec if _core.in_kernel() else None
    if spec is None:
        from opsim.api import device_spec
        spec = device_spec(get_device())
    if prop in (TOTAL_L0C_SIZE, TOTAL_L1_SIZE):
        buf = spec.l0c if prop == TOTAL_L0C_SIZE else spec.l1
        if buf is None:
            raise ValueError(f"platform property {prop!r}: {spec.name} has no cube unit (no L0C/L1)")
        return buf.size
    raise ValueError(f"unknown platform property {prop!r}")


def ceildiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def static_range(*args: int) -> "_builtins.range":
    return _builtins.range(*args)


# pyasc's asc.range compiles to a device loop; here the kernel is Python, so it is Python's range
range = static_range  # noqa: A001


def printf(fmt: str, *args: object) -> None:
    """``printf`` from a kernel: printed when the block's program reaches it (host values only;
    a device scalar from get_value has no value before it executes)."""
    from opsim.asc import _core
    prefix = ""
    if _core.in_kernel():
        st = _core.current()
        prefix = f"[{st.core.name} block {st.ctx.block_idx}] "
    try:
        text = fmt % args if args else fmt
    except TypeError:
        text = " ".join([fmt, *map(str, args)])
    print(prefix + text, end="" if text.endswith("\n") else "\n")


def dump_tensor(*args: object, **kwargs: object) -> None:
    from opsim.asc import _core
    raise _core.unsupported("dump_tensor", "read the result arrays after the launch, or the trace")


def __getattr__(name: str) -> object:
    # a pyasc API opsim does not model: say so, naming the kernel line (opsim.asc.pyasc_names)
    from opsim.asc.pyasc_names import BASIC, refuse     # (not `from opsim.asc import`: that calls this)
    if name in BASIC:
        raise refuse("asc", name, BASIC)
    raise AttributeError(f"module 'opsim.asc' has no attribute {name!r}")


__all__ = [n for n in dir() if not n.startswith("_")]

"""The ACL host API of the seeds' calling examples, on a simulated device.

The calls keep their C names and argument order; out-parameters come back first in a tuple
with the status code last, as in pyACL (``ptr, ret = rt.aclrtMalloc(size, policy)``). Every call
returns a status code and never raises across this boundary; the message behind a failure is
available from ``aclGetRecentErrMsg()``.

State lives in an :class:`AclRuntime` object (one per simulated host process), not in module
globals: ``rt = AclRuntime("atlas-a2"); rt.aclInit(); rt.aclrtSetDevice(0); ...``.

``aclrtMemcpy`` host↔device copies are timed on the product's host link (``[host]`` of the
device file): the host waits that long while queued device work runs on, and the bytes move
when the copy ends, so a copy that fails -- a refused address, or device work that faults while
the copy holds the host -- moves no byte. opsim keeps a fault of device work until
``aclrtResetDevice`` (its model: it releases the device and the fault), so synchronizing and
host↔device copies return ``ACL_ERROR_RT_AICORE_EXCEPTION`` from then on and copy nothing.

Handles belong to their runtime and to the device they were made on: a tensor, stream or
executor of another ``AclRuntime``, or one made before ``aclFinalize`` / ``aclrtResetDevice``
(each ``aclrtSetDevice`` that builds a device starts a new *generation*), or a tensor whose
memory was freed with ``aclrtFree``, is refused with ``ACL_ERROR_INVALID_PARAM`` (aclnn:
161002) and nothing is touched, so a stale handle can never write into the memory of a new owner.
"""
from __future__ import annotations

import functools
from collections import deque
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

import opsim.devices as _devices
from opsim.devices.spec import DeviceSpec
from opsim.simulator import numerics as nx
from opsim.simulator.cargs import host_bytes, host_destination, int_tuple, is_int
from opsim.simulator.device import Device, Stream
from opsim.simulator.errors import SimulatorError
from opsim.simulator.tile import GlobalTensor, contiguous_strides
from opsim.simulator.profile import Profiler, launch_records
from opsim.traces.tables import write_tables
from opsim.traces.trace import Trace

log = logging.getLogger("opsim.acl")

# Status codes (docs/sources.md#aclnn-status-codes and #acl-runtime-codes)
ACL_SUCCESS = 0
ACL_ERROR_INVALID_PARAM = 100000
ACL_ERROR_UNINITIALIZE = 100001
ACL_ERROR_REPEAT_INITIALIZE = 100002
ACL_ERROR_REPEAT_FINALIZE = 100037
ACL_ERROR_BAD_ALLOC = 200000
ACL_ERROR_MEMORY_ADDRESS_UNALIGNED = 200003
ACL_ERROR_RT_PARAM_INVALID = 107000
ACL_ERROR_RT_INVALID_DEVICEID = 107001
ACL_ERROR_RT_AICORE_EXCEPTION = 507015

# aclrtMemcpyKind (docs/sources.md#acl-enums)
ACL_MEMCPY_HOST_TO_HOST = 0
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2
ACL_MEMCPY_DEVICE_TO_DEVICE = 3
# aclrtMemMallocPolicy (docs/sources.md#acl-enums): a page policy, optionally or-ed with a
# bandwidth flag; opsim has one kind of device memory, so every policy allocates the same way
ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_MEM_MALLOC_HUGE_ONLY = 1
ACL_MEM_MALLOC_NORMAL_ONLY = 2
ACL_MEM_TYPE_LOW_BAND_WIDTH = 0x0100
ACL_MEM_TYPE_HIGH_BAND_WIDTH = 0x1000
ACL_OPT_DETERMINISTIC = 0
ACL_FORMAT_ND = 2

# aclDataType values (docs/sources.md#acl-enums), re-exported so callers write ACL_FLOAT as in C
ACL_FLOAT = nx.AclDataType.ACL_FLOAT
ACL_FLOAT16 = nx.AclDataType.ACL_FLOAT16
ACL_BF16 = nx.AclDataType.ACL_BF16
ACL_INT8 = nx.AclDataType.ACL_INT8
ACL_INT32 = nx.AclDataType.ACL_INT32
ACL_INT64 = nx.AclDataType.ACL_INT64
ACL_UINT8 = nx.AclDataType.ACL_UINT8
ACL_BOOL = nx.AclDataType.ACL_BOOL
ACL_DOUBLE = nx.AclDataType.ACL_DOUBLE


# a long-lived runtime keeps only the recent messages (aclGetRecentErrMsg needs the last one)
ERRORS_KEPT = 64
HOST_COPIES_KEPT = 64          # recent host copies kept in AclRuntime.host_copies (flat memory)


def _boundary(out_params: int = 0) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Keep a C-style call from raising: an unexpected exception (a wrong argument type, say)
    becomes ACL_ERROR_INVALID_PARAM with the message in the error log. ``out_params``: how many
    out-values precede the status code in the call's return tuple (they come back as None)."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(self: "AclRuntime", *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - nothing may cross the C boundary
                code = self.fail(ACL_ERROR_INVALID_PARAM, f"{fn.__name__}: invalid argument: "
                                                          f"{type(exc).__name__}: {exc}")
                return ((None,) * out_params + (code,)) if out_params else code
        return call
    return wrap


def _null_on_error(fn: Callable[..., Any]) -> Callable[..., Any]:
    """aclCreateTensor returns nullptr on failure: an unexpected exception becomes None."""
    @functools.wraps(fn)
    def call(self: "AclRuntime", *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            self.fail(ACL_ERROR_INVALID_PARAM, f"{fn.__name__}: invalid argument: {type(exc).__name__}: {exc}")
            return None
    return call


@dataclass
class AclTensor:
    """aclTensor: a view (shape, strides, offset in elements) of device storage."""

    runtime: "AclRuntime"
    view_shape: tuple[int, ...]
    dtype: nx.DType
    strides: tuple[int, ...]
    offset: int
    format: int
    storage_shape: tuple[int, ...]
    addr: int
    destroyed: bool = False
    generation: int = 0            # the runtime's device generation when the tensor was made
    allocation: Any = field(default=None, repr=False, compare=False)  # aclrtMalloc block of addr

    @property
    def numel(self) -> int:
        return int(np.prod(self.view_shape, dtype=np.int64))

    @property
    def is_contiguous(self) -> bool:
        return self.strides == contiguous_strides(self.view_shape)

    def global_tensor(self) -> GlobalTensor:
        device = self.runtime.device
        assert device is not None       # the runtime checked the handle (a live device) first
        return GlobalTensor(device, self.addr, self.dtype, self.view_shape, self.strides,
                            self.offset)


@dataclass
class AclStream:
    stream: Stream
    destroyed: bool = False
    runtime: Any = field(default=None, repr=False, compare=False)
    generation: int = 0


@dataclass
class AclRuntime:
    """A simulated host process talking to one simulated device."""

    device_name: str | DeviceSpec = "atlas-a2"
    trace_level: str = "instruction"
    seed: int = 0
    functional: bool = True
    initialized: bool = False
    finalized: bool = False        # aclFinalize succeeded and no aclInit came since
    device: Device | None = None
    trace: Trace | None = None
    deterministic: bool = False
    errors: list[str] = field(default_factory=list)
    _allocs: dict[int, int] = field(default_factory=dict)
    # profile=True collects the profiler tables (op_summary, per core, hot spots) of every launch,
    # as running under msprof would; off by default so a long-lived runtime keeps flat memory.
    # source_lines also stamps instructions with their kernel source line (code_exe)
    profile: bool = False
    source_lines: bool = False
    profiler: Profiler | None = None
    _records: list = field(default_factory=list)       # records of launches already pruned
    _record_tail: list = field(default_factory=list)   # last pruned launch per stream (wait times)
    # (kind, bytes, start cycle, end cycle) of the most recent host<->device copies, timed on the
    # host link; host_copy_count / host_copy_cycles count all of them
    host_copies: deque = field(default_factory=lambda: deque(maxlen=HOST_COPIES_KEPT))
    host_copy_count: int = 0
    host_copy_cycles: int = 0
    # bumped each time aclrtSetDevice builds a device: handles of an older one are stale
    generation: int = 0

    # -- errors --------------------------------------------------------------------------------
    def fail(self, code: int, message: str) -> int:
        self.errors.append(message)
        if len(self.errors) > 2 * ERRORS_KEPT:
            del self.errors[:-ERRORS_KEPT]
        log.warning("[%d] %s", code, message)
        return code

    # -- handles -------------------------------------------------------------------------------
    def tensor_problem(self, tensor: Any, name: str = "tensor", *, destroyed_ok: bool = False) -> str | None:
        """Why ``tensor`` may not be used with this runtime now, or None when it may
        (``destroyed_ok``: an executor keeps what GetWorkspaceSize saw of a tensor destroyed since)."""
        if not isinstance(tensor, AclTensor):
            return f"{name} is a {type(tensor).__name__}, not an aclTensor from aclCreateTensor"
        if tensor.runtime is not self:
            return f"{name} was created by another AclRuntime"
        if tensor.destroyed and not destroyed_ok:
            return f"{name} was destroyed (aclDestroyTensor)"
        if self.device is None or tensor.generation != self.generation:
            return (f"{name} was created on a device that has since been released (aclrtResetDevice or "
                    f"aclFinalize); create it again")
        if self.device.gm.allocation_at(tensor.addr) is not tensor.allocation:
            return (f"{name}'s tensorData {tensor.addr:#x} was freed (aclrtFree) after the tensor was "
                    f"created; the memory may belong to another buffer now")
        return None

    def stream_problem(self, stream: Any, name: str = "stream") -> str | None:
        """Why ``stream`` may not be used with this runtime now, or None when it may."""
        if not isinstance(stream, AclStream):
            return f"{name} is a {type(stream).__name__}, not a stream from aclrtCreateStream"
        if stream.runtime is not self:
            return f"{name} was created by another AclRuntime"
        if stream.destroyed:
            return f"{name} was destroyed (aclrtDestroyStream)"
        if self.device is None or stream.generation != self.generation:
            return (f"{name} was created on a device that has since been released (aclrtResetDevice or "
                    f"aclFinalize)")
        return None

    def allocation_problem(self, addr: Any, nbytes: int, name: str) -> str | None:
        """Why [addr, addr + nbytes) is not inside one live aclrtMalloc allocation, or None."""
        if not is_int(addr) or addr <= 0:
            return f"{name} {addr!r} is not a device address from aclrtMalloc"
        alloc = self.device.gm.allocation_at(int(addr)) if self.device is not None else None
        if alloc is None or alloc.addr not in self._allocs:
            return f"{name} {int(addr):#x} is not inside a live aclrtMalloc allocation of this runtime"
        if int(addr) + nbytes > alloc.addr + alloc.nbytes:
            return (f"{name} {int(addr):#x}+{nbytes} runs past the end of its allocation "
                    f"{alloc.addr:#x}+{alloc.nbytes}")
        return None

    def aclGetRecentErrMsg(self) -> str:
        return self.errors[-1] if self.errors else ""

    @property
    def spec(self) -> DeviceSpec:
        assert self.device is not None  # asked only of an initialised runtime (a device is set)
        return self.device.spec

    # -- init / device -------------------------------------------------------------------------
    @_boundary()
    def aclInit(self, config_path: str | None = None) -> int:
        if self.initialized:
            return self.fail(ACL_ERROR_REPEAT_INITIALIZE, "aclInit: already initialized")
        self.initialized, self.finalized = True, False
        return ACL_SUCCESS

    @_boundary()
    def aclFinalize(self) -> int:
        if not self.initialized:
            if self.finalized:      # CANN: a repeated aclFinalize (docs/sources.md#acl-runtime-codes)
                return self.fail(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize: already finalized; call "
                                                            "aclInit before finalizing again")
            return self.fail(ACL_ERROR_UNINITIALIZE, "aclFinalize: aclInit was not called")
        self.initialized, self.finalized = False, True
        if self.device is not None:
            self.device.close()
        self.device = None
        self.trace = None
        self._allocs.clear()
        self.errors[:-ERRORS_KEPT] = []
        return ACL_SUCCESS

    @_boundary()
    def aclrtSetDevice(self, device_id: int) -> int:
        if not self.initialized:
            return self.fail(ACL_ERROR_UNINITIALIZE, "aclrtSetDevice: call aclInit first")
        if not is_int(device_id) or device_id != 0:
            return self.fail(ACL_ERROR_RT_INVALID_DEVICEID,
                             f"aclrtSetDevice: device id {device_id!r} is invalid; the simulator has one device, id 0")
        if self.device is None:
            try:
                spec = (self.device_name if isinstance(self.device_name, DeviceSpec)
                        else _devices.load(self.device_name))
            except Exception as exc:  # a bad device file must not escape as a traceback
                return self.fail(ACL_ERROR_INVALID_PARAM, f"aclrtSetDevice: {exc}")
            if self.trace_level != "off":
                self.trace = Trace(self.trace_level, spec.clock_hz, metadata={"device": spec.name})
            self.device = Device(spec, trace=self.trace, functional=self.functional, seed=self.seed)
            self.profiler = None
            self._records, self._record_tail = [], []
            if self.profile or self.source_lines:
                self.profiler = Profiler()
                self.device.observers.append(self.profiler)
                self.device.source_lines = self.source_lines
            self.generation += 1
        return ACL_SUCCESS

    # -- profiler tables (not part of ACL: what msprof would collect from this process) ---------
    def launch_records(self) -> list:
        """What every finished kernel launch did so far (traces.tables.LaunchRecord)."""
        if self.device is None:
            return []
        return self._records + launch_records(self.device, self.profiler)

    @_boundary()
    def write_tables(self, path: str) -> int:
        """Write the op_summary CSV of every finished launch (one row per kernel launch) to
        ``path`` and the per-core and hot-spot tables beside it (docs/profiling.md); returns a
        status code like the ACL calls."""
        if self.device is None:
            return self.fail(ACL_ERROR_RT_INVALID_DEVICEID, "write_tables: no device set; call aclrtSetDevice(0)")
        if self.profiler is None:
            return self.fail(ACL_ERROR_INVALID_PARAM, "write_tables: the runtime was not profiling; "
                                                      "create it with AclRuntime(..., profile=True)")
        try:
            write_tables(self.launch_records(), path, self.device.spec.gm.kind)
        except OSError as exc:
            return self.fail(ACL_ERROR_INVALID_PARAM, f"write_tables: cannot write {path}: {exc}")
        return ACL_SUCCESS

    @_boundary()
    def aclrtResetDevice(self, device_id: int) -> int:
        """Release the device and everything on it (memory, streams, tensors, a fault): the next
        aclrtSetDevice starts a fresh device, and handles of this one are refused from now on."""
        if self.device is None or not is_int(device_id) or device_id != 0:
            return self.fail(ACL_ERROR_RT_INVALID_DEVICEID, f"aclrtResetDevice: device {device_id!r} is not set")
        self.device.close()              # its host memory goes back now, not at a later collection
        self.device = None
        self._allocs.clear()
        return ACL_SUCCESS

    @_boundary()
    def aclrtCtxSetSysParamOpt(self, opt: int, value: int) -> int:
        if not is_int(opt) or opt != ACL_OPT_DETERMINISTIC:
            return self.fail(ACL_ERROR_INVALID_PARAM, f"aclrtCtxSetSysParamOpt: option {opt!r} is not supported "
                                                      f"(only ACL_OPT_DETERMINISTIC = 0)")
        if not is_int(value):
            return self.fail(ACL_ERROR_INVALID_PARAM, f"aclrtCtxSetSysParamOpt: value {value!r} must be an "
                                                      f"integer (0 off, non-zero on)")
        self.deterministic = bool(value)
        return ACL_SUCCESS

    def _need_device(self, call: str) -> int:
        if self.device is None:
            return self.fail(ACL_ERROR_RT_INVALID_DEVICEID, f"{call}: no device set; call aclrtSetDevice(0)")
        return ACL_SUCCESS

    # -- streams -------------------------------------------------------------------------------
    @_boundary(1)
    def aclrtCreateStream(self) -> tuple[AclStream | None, int]:
        if (ret := self._need_device("aclrtCreateStream")) != ACL_SUCCESS:
            return None, ret
        assert self.device is not None  # _need_device checked it
        return AclStream(self.device.create_stream(), runtime=self,
                         generation=self.generation), ACL_SUCCESS

    @_boundary()
    def aclrtDestroyStream(self, stream: AclStream) -> int:
        if (why := self.stream_problem(stream)) is not None:
            return self.fail(ACL_ERROR_INVALID_PARAM, f"aclrtDestroyStream: {why}")
        stream.destroyed = True
        # the device forgets the stream once its work is done (here, or after a later synchronize)
        stream.stream.destroyed = True
        if self.device is not None:
            self.device.release_stream(stream.stream)
        return ACL_SUCCESS

    @_boundary()
    def aclrtSynchronizeStream(self, stream: AclStream) -> int:
        if (ret := self._need_device("aclrtSynchronizeStream")) != ACL_SUCCESS:
            return ret
        if (why := self.stream_problem(stream)) is not None:
            return self.fail(ACL_ERROR_INVALID_PARAM, f"aclrtSynchronizeStream: {why}")
        assert self.device is not None  # _need_device checked it
        try:
            self.device.synchronize(stream.stream)
        except SimulatorError as exc:
            return self.fail(ACL_ERROR_RT_AICORE_EXCEPTION, f"aclrtSynchronizeStream: {exc}")
        self._forget_finished()
        return ACL_SUCCESS

    @_boundary()
    def aclrtSynchronizeDevice(self) -> int:
        """Run until every stream of the device, destroyed ones included, has finished its work."""
        if (ret := self._need_device("aclrtSynchronizeDevice")) != ACL_SUCCESS:
            return ret
        assert self.device is not None  # _need_device checked it
        try:
            self.device.synchronize()
        except SimulatorError as exc:
            return self.fail(ACL_ERROR_RT_AICORE_EXCEPTION, f"aclrtSynchronizeDevice: {exc}")
        self._forget_finished()
        return ACL_SUCCESS

    def _forget_finished(self) -> None:
        """A long-lived runtime keeps constant memory: finished launches are dropped from the
        device's and streams' lists (each executor keeps its own in ``executor.launches``)."""
        dev = self.device
        assert dev is not None
        finished = [ln for ln in dev.launches if ln.end >= 0]
        if self.profiler is not None and finished:
            # keep what the tables need before the launches go; the tail (the last pruned launch
            # of each stream) gives the first new launch its wait after its predecessor
            tail = self._record_tail
            self._records.extend(launch_records(dev, self.profiler, tail + finished)[len(tail):])
            self.profiler.forget(finished)
            last: dict[Any, Any] = {}
            for ln in tail + finished:
                last[ln.stream] = ln
            self._record_tail = list(last.values())
        dev.launches[:] = [ln for ln in dev.launches if ln.end < 0]
        for s in dev.streams:
            s.launches[:] = [ln for ln in s.launches if ln.end < 0]
        for s in [s for s in dev.streams if s.destroyed]:
            dev.release_stream(s)
        # the runtime reports no link bandwidth series (opsim.run does, on a device of its own):
        # fold the closed link history into totals and peaks rather than keep every rate step
        dev.forget_link_history()

    # -- memory --------------------------------------------------------------------------------
    @_boundary(1)
    def aclrtMalloc(self, size: int, policy: int = ACL_MEM_MALLOC_HUGE_FIRST) -> tuple[int, int]:
        if (ret := self._need_device("aclrtMalloc")) != ACL_SUCCESS:
            return 0, ret
        if not is_int(size) or size <= 0:
            return 0, self.fail(ACL_ERROR_INVALID_PARAM, f"aclrtMalloc: size {size!r} must be a positive byte count")
        if not is_int(policy):
            # any integer is a policy: CANN picks the page size from the size for one outside the enum
            return 0, self.fail(ACL_ERROR_INVALID_PARAM,
                                f"aclrtMalloc: policy {policy!r} must be an aclrtMemMallocPolicy integer "
                                f"(ACL_MEM_MALLOC_HUGE_FIRST = 0, HUGE_ONLY = 1, NORMAL_ONLY = 2, optionally "
                                f"or-ed with ACL_MEM_TYPE_LOW_BAND_WIDTH = 0x100 or HIGH_BAND_WIDTH = 0x1000)")
        assert self.device is not None  # _need_device checked it
        try:
            addr = self.device.malloc(int(size))
        except SimulatorError as exc:
            return 0, self.fail(ACL_ERROR_BAD_ALLOC, f"aclrtMalloc: {size} B: {exc}")
        self._allocs[addr] = int(size)
        return addr, ACL_SUCCESS

    @_boundary()
    def aclrtFree(self, ptr: int) -> int:
        if (ret := self._need_device("aclrtFree")) != ACL_SUCCESS:
            return ret
        if not is_int(ptr) or int(ptr) not in self._allocs:
            shown = f"{int(ptr):#x}" if is_int(ptr) else repr(ptr)
            return self.fail(ACL_ERROR_INVALID_PARAM, f"aclrtFree: {shown} is not a live address from aclrtMalloc")
        ptr = int(ptr)
        assert self.device is not None  # _need_device checked it
        self.device.free(ptr)
        del self._allocs[ptr]
        return ACL_SUCCESS

    @_boundary()
    def aclrtMemcpy(self, dst: Any, dst_max: int, src: Any, count: int, kind: int) -> int:
        """Copy ``count`` bytes. Host buffers are numpy arrays of plain data (a destination must
        be writable and C-contiguous) or, for a source, bytes. Every argument is checked before
        a byte moves, so a refused copy writes nothing."""
        if (ret := self._need_device("aclrtMemcpy")) != ACL_SUCCESS:
            return ret
        for name, value in (("destMax", dst_max), ("count", count)):
            if not is_int(value) or value < 0:
                return self.fail(ACL_ERROR_INVALID_PARAM,
                                 f"aclrtMemcpy: {name} {value!r} must be a byte count >= 0")
        if not is_int(kind) or not 0 <= kind <= 3:
            return self.fail(ACL_ERROR_INVALID_PARAM, f"aclrtMemcpy: kind {kind!r} is not 0..3 "
                                                      f"(host-to-host, host-to-device, device-to-host, "
                                                      f"device-to-device)")
        count, kind = int(count), int(kind)
        if count > dst_max:
            return self.fail(ACL_ERROR_INVALID_PARAM, f"aclrtMemcpy: count {count} exceeds destMax {dst_max}")
        dev = self.device
        assert dev is not None
        src_host = kind in (ACL_MEMCPY_HOST_TO_HOST, ACL_MEMCPY_HOST_TO_DEVICE)
        dst_host = kind in (ACL_MEMCPY_HOST_TO_HOST, ACL_MEMCPY_DEVICE_TO_HOST)
        data = out = None
        if src_host:
            data = host_bytes(src)
            if data is None:
                return self.fail(ACL_ERROR_INVALID_PARAM, f"aclrtMemcpy: the host source is a "
                                                          f"{type(src).__name__}; it must be a numpy array of "
                                                          f"plain data or bytes")
            if data.size < count:
                return self.fail(ACL_ERROR_INVALID_PARAM,
                                 f"aclrtMemcpy: host source has {data.size} B, count is {count}")
        elif not is_int(src) or src < 0:
            return self.fail(ACL_ERROR_INVALID_PARAM, f"aclrtMemcpy: the device source {src!r} is not an address")
        if dst_host:
            out = host_destination(dst)
            if out is None:
                return self.fail(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy: host destination must be a writable, "
                                                          "C-contiguous numpy array of plain data")
            if out.size < count:
                return self.fail(ACL_ERROR_INVALID_PARAM,
                                 f"aclrtMemcpy: host destination has {out.size} B, count is {count}")
        elif not is_int(dst) or dst < 0:
            return self.fail(ACL_ERROR_INVALID_PARAM, f"aclrtMemcpy: the device destination {dst!r} is not an "
                                                      f"address")
        if count == 0:
            return ACL_SUCCESS
        # every device range is checked before time passes or a byte moves
        try:
            if not src_host:
                dev.check_global(int(src), count, write=False)
            if not dst_host:
                dev.check_global(int(dst), count, write=True)
        except SimulatorError as exc:
            return self.fail(ACL_ERROR_INVALID_PARAM, f"aclrtMemcpy: {exc}")
        if kind in (ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST):
            if dev.faulted is not None:     # kept until aclrtResetDevice: nothing is copied
                return self.fail(ACL_ERROR_RT_AICORE_EXCEPTION,
                                 f"aclrtMemcpy: device work faulted earlier, nothing was copied (aclrtResetDevice "
                                 f"releases the device and the fault): {dev.faulted}")
            try:
                self._time_host_copy("H2D" if kind == ACL_MEMCPY_HOST_TO_DEVICE else "D2H", int(count))
            except SimulatorError as exc:   # work queued on a stream faulted while the copy held the host
                return self.fail(ACL_ERROR_RT_AICORE_EXCEPTION,
                                 f"aclrtMemcpy: device work faulted during the copy, nothing was copied: {exc}")
        # the bytes move when the copy ends (a synchronous copy: the host sees them on return)
        if kind == ACL_MEMCPY_HOST_TO_DEVICE:
            assert data is not None     # a host source: checked above
            dev.write(int(dst), data[:count])
        elif kind == ACL_MEMCPY_DEVICE_TO_HOST:
            assert out is not None      # a host destination: checked above
            out[:count] = dev.read(int(src), count, copy=False)   # one copy, into the host's array
        elif kind == ACL_MEMCPY_DEVICE_TO_DEVICE:
            dev.write(int(dst), dev.read(int(src), count))       # read first: overlapping ranges move
        else:
            assert data is not None and out is not None   # host to host: both checked above
            out[:count] = data[:count]
        return ACL_SUCCESS

    def _time_host_copy(self, kind: str, nbytes: int) -> None:
        """A synchronous copy holds the host for latency + bytes / rate of the device's host
        link (``[host]`` of the device file); simulated time advances by that much, so kernels
        already queued keep running meanwhile. Devices without a host link copy in no time."""
        dev = self.device
        assert dev is not None          # called by aclrtMemcpy, on a live device, before the bytes move
        link = dev.spec.host
        if link is None or nbytes <= 0:
            return
        clk = dev.spec.clock_hz
        cycles = int(round(link.latency_us * 1e-6 * clk)) + -(-nbytes * clk // int(link.bandwidth))
        t0 = dev.now
        dev.run_until(t0 + cycles)
        self.host_copies.append((kind, nbytes, t0, t0 + cycles))
        self.host_copy_count += 1
        self.host_copy_cycles += cycles
        tr = dev.trace
        if tr is not None and tr.enabled:
            tr.add_slice(tr.track("host", f"{link.kind} copies"), f"aclrtMemcpy {kind}", t0, t0 + cycles,
                         detail=f"{nbytes} B")

    @property
    def elapsed_cycles(self) -> int:
        """Simulated cycles since aclrtSetDevice: kernels, launch costs and host copies."""
        return self.device.now if self.device is not None else 0

    # -- tensors -------------------------------------------------------------------------------
    @_null_on_error
    def aclCreateTensor(self, view_dims: Sequence[int], data_type: Any, stride: Sequence[int] | None,
                        offset: int, fmt: int, storage_dims: Sequence[int] | None,
                        tensor_data: int) -> AclTensor | None:
        """Returns None on failure (as the C API returns nullptr); the reason is in the error log."""
        if self.device is None:
            self.fail(ACL_ERROR_RT_INVALID_DEVICEID, "aclCreateTensor: no device set")
            return None
        try:
            dt = nx.dtype(data_type)
        except ValueError as exc:
            self.fail(ACL_ERROR_INVALID_PARAM, f"aclCreateTensor: dataType: {exc}")
            return None
        view = int_tuple(view_dims)
        if view is None or any(d < 0 for d in view):
            self.fail(ACL_ERROR_INVALID_PARAM, f"aclCreateTensor: viewDims {view_dims!r} must be a list of integers "
                                               f">= 0")
            return None
        strides = int_tuple(stride) if stride is not None else contiguous_strides(view)
        if strides is None or len(strides) != len(view):
            self.fail(ACL_ERROR_INVALID_PARAM,
                      f"aclCreateTensor: stride {stride!r} must be a list of {len(view)} integers (one per "
                      f"viewDims entry)")
            return None
        storage = int_tuple(storage_dims) if storage_dims is not None else view
        if storage is None or any(d < 0 for d in storage):
            self.fail(ACL_ERROR_INVALID_PARAM, f"aclCreateTensor: storageDims {storage_dims!r} must be a list of "
                                               f"integers >= 0")
            return None
        for name, value in (("offset", offset), ("format", fmt), ("tensorData", tensor_data)):
            if not is_int(value) or (name != "format" and value < 0):
                self.fail(ACL_ERROR_INVALID_PARAM, f"aclCreateTensor: {name} {value!r} must be an integer"
                                                   f"{'' if name == 'format' else ' >= 0'}")
                return None
        offset, tensor_data = int(offset), int(tensor_data)
        if tensor_data % 32:
            self.fail(ACL_ERROR_MEMORY_ADDRESS_UNALIGNED,
                      f"aclCreateTensor: tensorData {tensor_data:#x} is not 32 B aligned")
            return None
        if math.prod(view):
            # the lowest and highest storage element the view reaches (strides may be negative)
            first = offset + sum((d - 1) * s for d, s in zip(view, strides) if s < 0)
            last = offset + sum((d - 1) * s for d, s in zip(view, strides) if s > 0)
            if first < 0 or last >= math.prod(storage):
                self.fail(ACL_ERROR_INVALID_PARAM,
                          f"aclCreateTensor: view {list(view)} with strides {list(strides)} and offset {offset} "
                          f"reaches elements {first}..{last}, beyond storage {list(storage)}")
                return None
        alloc = self.device.gm.allocation_at(tensor_data)
        return AclTensor(self, view, dt, strides, offset, int(fmt), storage, tensor_data,
                         generation=self.generation, allocation=alloc)

    @_boundary()
    def aclDestroyTensor(self, tensor: AclTensor | None) -> int:
        if tensor is None:
            return self.fail(ACL_ERROR_INVALID_PARAM, "aclDestroyTensor: tensor is null")
        if not isinstance(tensor, AclTensor) or tensor.runtime is not self or tensor.destroyed:
            why = self.tensor_problem(tensor) or "tensor is not a live tensor of this runtime"
            return self.fail(ACL_ERROR_INVALID_PARAM, f"aclDestroyTensor: {why}")
        # destroying a tensor of a released device frees only the host object, as in C
        tensor.destroyed = True
        return ACL_SUCCESS


"""The DSP host runtime (NUDT hthread, as MindSpore Lite's DSP backend uses it), on a simulated
FT78NE or MT7004.

What it mirrors (docs/sources.md#dsp-host-runtime, #hthread):

- ``hthread_dev_open(cluster)`` / ``hthread_dev_close(cluster)``; one cluster, id 0;
- ``hthread_dat_load(cluster, library)``: the operator library (``dsp_lib.dat``); here a mapping
  from kernel name to kernel (a generator function ``kernel(ctx, *args)``);
- ``hthread_malloc(cluster, nbytes, flags)``: shared DDR the host can address;
  ``host_tlsf_malloc(cluster, core_id, mem_type, nbytes)``: MindSpore Lite's ``HostTlsfMalloc``
  with ``MemType`` SMC = 0, DDR = 1, DDR36BIT = 2, L2 = 3 (L2 = the private memory of
  ``core_id``); ``hthread_free``;
- ``hthread_mem_write`` / ``hthread_mem_read`` (and ``host_mem_copy``, MindSpore Lite's
  ``HostMemCopy`` with direction 0 = host→device, 1 = device→host): bytes at a device address.
  Memory is bare-metal address space: any address inside a window may be written without an
  allocation (the seed's examples do exactly that); the memory model enforces each region's
  capacity. Private memory is per core at the same addresses, so private accesses name the core;
- ``hthread_group_masked_create(cluster, pmask, func, n_scalar, n_ptr, args)``: one thread per
  set bit of ``pmask`` (thread count = popcount, docs/sources.md#hthread), then ``hthread_group_exec``,
  ``hthread_group_wait``, ``hthread_group_destroy``; ``hthread_group_create(cluster, nthreads,
  ...)`` takes the lowest ``nthreads`` cores; ``launch_group`` / ``wait_group`` /
  ``destroy_group`` are MindSpore Lite's ``LaunchGroup`` / ``WaitGroup`` / ``DestroyGroup``.

Every call returns a status code (first the out-values, the status last, as in ``acl.py``) and
never raises; the message behind a failure is ``get_recent_err_msg()``. No hthread status enum
is published, so the codes below are the simulator's own (assumption): 0 success, negative
values for failures. A kernel that faults leaves the device faulted, as hardware does after an
exception: close and reopen it to continue.

Host copies are functional but not timed: the simulator times kernels, not the host link.
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

import opsim.devices as _devices
from opsim.devices.spec import DeviceSpec
from opsim.simulator.cargs import core_mask_problem, host_bytes, host_destination, is_int
from opsim.simulator.device import Device, Launch, Stream
from opsim.simulator.errors import CapacityError, SimulatorError
from opsim.simulator.memory import Region
from opsim.traces.trace import Trace

log = logging.getLogger("opsim.hthread")

Kernel = Callable[..., Iterator[Any]]

# Status codes (assumption: hthread's own enum is not public).
HT_SUCCESS = 0
HT_ERROR_NOT_OPEN = -1          # cluster not opened (or not 0), or the device has faulted
HT_ERROR_INVALID_PARAM = -2     # a malformed argument (size, flags, mem type, direction, count)
HT_ERROR_BAD_ALLOC = -3         # the memory cannot hold the allocation
HT_ERROR_BAD_ADDRESS = -4       # an address outside every window, or in no allocation to free
HT_ERROR_CORE_MASK = -5         # a mask of 0, or with bits beyond the cluster's cores
HT_ERROR_GROUP = -6             # unknown group id, or a call in the wrong group state
HT_ERROR_KERNEL_FAULT = -7      # the kernel faulted on the device while running

# hthread_malloc access flags (docs/sources.md#hthread): read-only, write-only, read-write.
HT_MEM_RO = 0
HT_MEM_WO = 1
HT_MEM_RW = 2

# Allocation alignment (assumption: the TLSF allocator's granule is not public; 64 B keeps
# every allocation aligned for any element type and DMA burst).
ALLOC_ALIGN = 64


# a long-lived runtime keeps only the recent messages (get_recent_err_msg needs the last one)
ERRORS_KEPT = 64


def _boundary(*on_error: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Keep a C-style call from raising: an unexpected exception becomes HT_ERROR_INVALID_PARAM
    with the message in the error log. ``on_error``: the out-values that precede the status in
    the call's return tuple (e.g. ``0`` for an address, ``-1`` for a group id)."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(self: "HThread", *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - nothing may cross the C boundary
                code = self.fail(HT_ERROR_INVALID_PARAM, f"{fn.__name__}: invalid argument: "
                                                         f"{type(exc).__name__}: {exc}")
                return (*on_error, code) if on_error else code
        return call
    return wrap


class MemType(IntEnum):
    """MindSpore Lite ``enum class MemType : char { SMC, DDR, DDR36BIT, L2 }`` (docs/sources.md#dsp-host-runtime)."""

    SMC = 0
    DDR = 1
    DDR36BIT = 2     # 36-bit extended DDR addressing is not modelled: same window as DDR
    L2 = 3           # the private memory of one core


class HostMemCopyDirection(IntEnum):
    HOST_TO_DEVICE = 0
    DEVICE_TO_HOST = 1


@dataclass
class Group:
    """A thread group: a kernel on the cores of ``mask``, one thread per core."""

    gid: int
    mask: int
    func: Kernel
    args: tuple
    name: str
    state: str = "created"          # created -> running -> done | failed
    stream: Stream | None = None
    launch: Launch | None = None

    @property
    def cycles(self) -> int:
        """Device cycles from the launch to the last thread's end (-1 before it finished)."""
        return self.launch.cycles if self.launch is not None and self.launch.end >= 0 else -1


@dataclass
class HThread:
    """A simulated host process driving one DSP cluster through hthread."""

    device_name: str | DeviceSpec = "ft78ne"
    trace_level: str = "instruction"
    seed: int = 0
    functional: bool = True
    device: Device | None = None
    trace: Trace | None = None
    errors: list[str] = field(default_factory=list)
    groups: dict[int, Group] = field(default_factory=dict)
    library: dict[str, Kernel] = field(default_factory=dict)
    _next_gid: int = 1

    # -- errors --------------------------------------------------------------------------------
    def fail(self, code: int, message: str) -> int:
        self.errors.append(message)
        if len(self.errors) > 2 * ERRORS_KEPT:
            del self.errors[:-ERRORS_KEPT]
        log.warning("[%d] %s", code, message)
        return code

    def get_recent_err_msg(self) -> str:
        return self.errors[-1] if self.errors else ""

    @property
    def spec(self) -> DeviceSpec:
        assert self.device is not None  # asked only of an initialised runtime (a device is set)
        return self.device.spec

    def _need(self, call: str, cluster_id: int) -> int:
        if not is_int(cluster_id) or cluster_id != 0:
            return self.fail(HT_ERROR_NOT_OPEN, f"{call}: cluster id {cluster_id!r} is invalid; the "
                                                f"simulator has one cluster, id 0")
        if self.device is None:
            return self.fail(HT_ERROR_NOT_OPEN, f"{call}: cluster 0 is not open; call hthread_dev_open(0)")
        return HT_SUCCESS

    # -- device --------------------------------------------------------------------------------
    @_boundary()
    def hthread_dev_open(self, cluster_id: int = 0) -> int:
        """Open the cluster: builds a fresh simulated device (memory starts as zeros)."""
        if not is_int(cluster_id) or cluster_id != 0:
            return self.fail(HT_ERROR_NOT_OPEN, f"hthread_dev_open: cluster id {cluster_id!r} is invalid; "
                                                f"the simulator has one cluster, id 0")
        if self.device is not None:
            return HT_SUCCESS
        try:
            spec = (self.device_name if isinstance(self.device_name, DeviceSpec)
                    else _devices.load(self.device_name))
        except Exception as exc:  # a bad device file must not escape as a traceback
            return self.fail(HT_ERROR_INVALID_PARAM, f"hthread_dev_open: {exc}")
        if spec.family != "dsp":
            return self.fail(HT_ERROR_INVALID_PARAM,
                             f"hthread_dev_open: {spec.name} is not a DSP (family {spec.family}); "
                             f"hthread drives the FT78NE / MT7004 DSPs")
        if self.trace_level != "off":
            self.trace = Trace(self.trace_level, spec.clock_hz, metadata={"device": spec.name})
        self.device = Device(spec, trace=self.trace, functional=self.functional, seed=self.seed)
        return HT_SUCCESS

    @_boundary()
    def hthread_dev_close(self, cluster_id: int = 0) -> int:
        if (ret := self._need("hthread_dev_close", cluster_id)) != HT_SUCCESS:
            return ret
        if self.device is not None:
            self.device.close()          # its host memory goes back now, not at a later collection
        self.device = None
        self.groups.clear()
        return HT_SUCCESS

    @_boundary()
    def hthread_dat_load(self, cluster_id: int, library: Mapping[str, Kernel]) -> int:
        """Load an operator library: kernel name -> kernel generator function."""
        if (ret := self._need("hthread_dat_load", cluster_id)) != HT_SUCCESS:
            return ret
        if not isinstance(library, Mapping) or not all(callable(f) for f in library.values()):
            return self.fail(HT_ERROR_INVALID_PARAM,
                             "hthread_dat_load: library must map kernel names to kernel functions")
        self.library.update(library)
        return HT_SUCCESS

    @property
    def core_count(self) -> int:
        assert self.device is not None  # asked only of an initialised runtime (a device is set)
        return len(self.device.cores["dsp"])

    # -- memory --------------------------------------------------------------------------------
    def private_region(self, core_id: int) -> Region:
        """The private memory ("L2") of DSP core ``core_id``."""
        assert self.device is not None  # asked only of an initialised runtime (a device is set)
        return self.device.cores["dsp"][core_id].memories["PRIVATE"]

    def _region_for(self, call: str, addr: int, nbytes: int, core_id: int) -> tuple[Region | None, int]:
        """The region holding [addr, addr + nbytes): shared windows by address, the private
        window of ``core_id``; (None, status) when there is none."""
        dev = self.device
        assert dev is not None
        if not isinstance(addr, (int, np.integer)) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
            return None, self.fail(HT_ERROR_INVALID_PARAM,
                                   f"{call}: address {addr!r} and size {nbytes!r} must be integers, size >= 0")
        addr, nbytes = int(addr), int(nbytes)
        shared = [dev.gm] + ([dev.smc] if getattr(dev, "smc", None) is not None else [])
        for region in shared:
            if region.base <= addr and addr + nbytes <= region.end:
                return region, HT_SUCCESS
        priv = self.spec.private
        assert priv is not None         # required of every DSP spec (devices/spec.py)
        if priv.base <= addr and addr + nbytes <= priv.base + priv.window:
            if not is_int(core_id) or not 0 <= core_id < self.core_count:
                return None, self.fail(
                    HT_ERROR_INVALID_PARAM,
                    f"{call}: {addr:#x} is in the private memory window, which every core has at the "
                    f"same addresses; core_id {core_id!r} must name a core 0..{self.core_count - 1}")
            return self.private_region(int(core_id)), HT_SUCCESS
        windows = ", ".join(f"{r.name} [{r.base:#x}, {r.end:#x})" for r in shared)
        return None, self.fail(
            HT_ERROR_BAD_ADDRESS,
            f"{call}: {nbytes} B at {addr:#x} is not inside one memory window of {self.spec.name}: "
            f"{windows}, private [{priv.base:#x}, {priv.base + priv.window:#x}) per core")

    @_boundary(0)
    def hthread_malloc(self, cluster_id: int, nbytes: int, flags: int = HT_MEM_RW) -> tuple[int, int]:
        """Shared DDR the host can also address (hthread_malloc); returns (address, status)."""
        if not is_int(flags) or flags not in (HT_MEM_RO, HT_MEM_WO, HT_MEM_RW):
            return 0, self.fail(HT_ERROR_INVALID_PARAM,
                                f"hthread_malloc: flags {flags!r} must be HT_MEM_RO (0), HT_MEM_WO (1) or "
                                f"HT_MEM_RW (2)")
        return self.host_tlsf_malloc(cluster_id, -1, MemType.DDR, nbytes, call="hthread_malloc")

    @_boundary(0)
    def host_tlsf_malloc(self, cluster_id: int, core_id: int, mem_type: int, nbytes: int, *,
                         call: str = "host_tlsf_malloc") -> tuple[int, int]:
        """Allocate ``nbytes`` of ``mem_type`` (SMC, DDR, DDR36BIT, or L2 of ``core_id``)."""
        if (ret := self._need(call, cluster_id)) != HT_SUCCESS:
            return 0, ret
        try:
            if not is_int(mem_type):
                raise ValueError(mem_type)
            mt = MemType(mem_type)
        except ValueError:
            return 0, self.fail(HT_ERROR_INVALID_PARAM,
                                f"{call}: mem_type {mem_type!r} is not SMC (0), DDR (1), DDR36BIT (2) or L2 (3)")
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
            return 0, self.fail(HT_ERROR_INVALID_PARAM, f"{call}: size {nbytes!r} must be a positive byte count")
        dev = self.device
        assert dev is not None
        region: Region | None
        if mt == MemType.L2:
            if not is_int(core_id) or not 0 <= core_id < self.core_count:
                return 0, self.fail(HT_ERROR_INVALID_PARAM,
                                    f"{call}: core_id {core_id!r} must name a core 0..{self.core_count - 1} "
                                    f"for L2 (private) memory")
            region = self.private_region(int(core_id))
        elif mt == MemType.SMC:
            region = getattr(dev, "smc", None)
            if region is None:
                return 0, self.fail(HT_ERROR_INVALID_PARAM, f"{call}: {self.spec.name} has no SMC")
        else:
            region = dev.gm
        try:
            return region.allocate(int(nbytes), align=ALLOC_ALIGN, name=f"{mt.name}").addr, HT_SUCCESS
        except SimulatorError as exc:
            return 0, self.fail(HT_ERROR_BAD_ALLOC, f"{call}: {int(nbytes)} B of {mt.name}: {exc}")

    @_boundary()
    def hthread_free(self, cluster_id: int, addr: int, core_id: int = -1) -> int:
        """Free an allocation (private memory names its core)."""
        if (ret := self._need("hthread_free", cluster_id)) != HT_SUCCESS:
            return ret
        region, ret = self._region_for("hthread_free", addr, 0, core_id)
        if region is None:
            return ret
        try:
            region.free(int(addr))
        except SimulatorError as exc:
            return self.fail(HT_ERROR_BAD_ADDRESS, f"hthread_free: {exc}")
        return HT_SUCCESS

    @_boundary()
    def hthread_mem_write(self, cluster_id: int, addr: int, data: Any, core_id: int = -1) -> int:
        """Copy host bytes (a numpy array of any dtype, or bytes) to the device at ``addr``."""
        if (ret := self._need("hthread_mem_write", cluster_id)) != HT_SUCCESS:
            return ret
        buf = host_bytes(data)
        if buf is None:
            return self.fail(HT_ERROR_INVALID_PARAM, f"hthread_mem_write: data must be a numpy array of plain data "
                                                     f"or bytes, got {type(data).__name__}")
        region, ret = self._region_for("hthread_mem_write", addr, buf.size, core_id)
        if region is None:
            return ret
        try:
            region.write(int(addr), buf)
        except SimulatorError as exc:
            return self.fail(HT_ERROR_BAD_ALLOC if isinstance(exc, CapacityError) else HT_ERROR_BAD_ADDRESS,
                             f"hthread_mem_write: {exc}")
        return HT_SUCCESS

    @_boundary(None)
    def hthread_mem_read(self, cluster_id: int, addr: int, nbytes: int,
                         core_id: int = -1) -> tuple[np.ndarray | None, int]:
        """Copy ``nbytes`` at ``addr`` from the device; returns (uint8 array, status)."""
        if (ret := self._need("hthread_mem_read", cluster_id)) != HT_SUCCESS:
            return None, ret
        region, ret = self._region_for("hthread_mem_read", addr, nbytes, core_id)
        if region is None:
            return None, ret
        try:
            return region.read(int(addr), int(nbytes)), HT_SUCCESS
        except SimulatorError as exc:
            return None, self.fail(HT_ERROR_BAD_ADDRESS, f"hthread_mem_read: {exc}")

    @_boundary()
    def host_mem_copy(self, cluster_id: int, host: np.ndarray, dev_addr: int, nbytes: int,
                      direction: int, core_id: int = -1) -> int:
        """MindSpore Lite HostMemCopy: direction 0 host→device, 1 device→host (into ``host``)."""
        if not is_int(nbytes) or nbytes < 0:
            return self.fail(HT_ERROR_INVALID_PARAM, f"host_mem_copy: nbytes {nbytes!r} must be a byte count >= 0")
        given = direction
        if not is_int(direction):
            direction = -1          # reported below with the value the caller gave
        if direction == HostMemCopyDirection.HOST_TO_DEVICE:
            buf = host_bytes(host)
            if buf is None:
                return self.fail(HT_ERROR_INVALID_PARAM, f"host_mem_copy: the host source is a "
                                                         f"{type(host).__name__}; it must be a numpy array of "
                                                         f"plain data or bytes")
            if buf.size < nbytes:
                return self.fail(HT_ERROR_INVALID_PARAM,
                                 f"host_mem_copy: host buffer has {buf.size} B, nbytes is {nbytes}")
            return self.hthread_mem_write(cluster_id, dev_addr, buf[:nbytes], core_id)
        if direction == HostMemCopyDirection.DEVICE_TO_HOST:
            out = host_destination(host)
            if out is None:
                return self.fail(HT_ERROR_INVALID_PARAM, "host_mem_copy: the host destination must be a writable "
                                                         "contiguous numpy array of plain data")
            if out.size < nbytes:
                return self.fail(HT_ERROR_INVALID_PARAM,
                                 f"host_mem_copy: host buffer has {out.size} B, nbytes is {nbytes}")
            data, ret = self.hthread_mem_read(cluster_id, dev_addr, nbytes, core_id)
            if ret == HT_SUCCESS:
                out[:nbytes] = data
            return ret
        return self.fail(HT_ERROR_INVALID_PARAM,
                         f"host_mem_copy: direction {given!r} must be 0 (host to device) or 1 (device to host)")

    # -- thread groups -------------------------------------------------------------------------
    @_boundary(-1)
    def hthread_group_masked_create(self, cluster_id: int, pmask: int, func: Kernel | str, n_scalar: int,
                                    n_ptr: int, args: Sequence[Any], *, name: str | None = None) -> tuple[int, int]:
        """A group of popcount(pmask) threads, thread i on the i-th set bit's core; (gid, status)."""
        call = "hthread_group_masked_create"
        if (ret := self._need(call, cluster_id)) != HT_SUCCESS:
            return -1, ret
        if name is not None and not isinstance(name, str):
            return -1, self.fail(HT_ERROR_INVALID_PARAM, f"{call}: name {name!r} must be a string or None")
        problem = core_mask_problem(pmask, self.core_count, "DSP", self.spec.name, param="pmask")
        if problem:
            return -1, self.fail(HT_ERROR_CORE_MASK, f"{call}: {problem}")
        if isinstance(func, str):
            kernel = self.library.get(func)
            if kernel is None:
                return -1, self.fail(HT_ERROR_INVALID_PARAM,
                                     f"{call}: no kernel named {func!r} is loaded (hthread_dat_load); loaded: "
                                     f"{', '.join(sorted(self.library)) or 'none'}")
            label = name or func
        elif callable(func):
            kernel, label = func, name or str(getattr(func, "__name__", "kernel"))
        else:
            return -1, self.fail(HT_ERROR_INVALID_PARAM, f"{call}: func {func!r} is not a kernel")
        arg_tuple = _arg_tuple(args)
        if arg_tuple is None:
            return -1, self.fail(HT_ERROR_INVALID_PARAM, f"{call}: args must be a sequence of kernel "
                                                         f"arguments (a list or tuple)")
        if not is_int(n_scalar) or not is_int(n_ptr) or n_scalar < 0 or n_ptr < 0 or \
                n_scalar + n_ptr != len(arg_tuple):
            return -1, self.fail(HT_ERROR_INVALID_PARAM,
                                 f"{call}: n_scalar {n_scalar} + n_ptr {n_ptr} must equal the {len(arg_tuple)} "
                                 f"arguments given")
        gid = self._next_gid
        self._next_gid += 1
        self.groups[gid] = Group(gid, int(pmask), kernel, arg_tuple, label)
        return gid, HT_SUCCESS

    @_boundary(-1)
    def hthread_group_create(self, cluster_id: int, nthreads: int, func: Kernel | str, n_scalar: int,
                             n_ptr: int, args: Sequence[Any], *, name: str | None = None) -> tuple[int, int]:
        """A group of ``nthreads`` threads on cores 0..nthreads-1."""
        if (ret := self._need("hthread_group_create", cluster_id)) != HT_SUCCESS:
            return -1, ret
        if isinstance(nthreads, bool) or not isinstance(nthreads, (int, np.integer)) or \
                not 1 <= nthreads <= self.core_count:
            return -1, self.fail(HT_ERROR_CORE_MASK, f"hthread_group_create: nthreads {nthreads!r} must be "
                                                     f"1..{self.core_count}")
        return self.hthread_group_masked_create(cluster_id, (1 << int(nthreads)) - 1, func, n_scalar, n_ptr,
                                                args, name=name)

    def _group(self, call: str, gid: int, state: str | None) -> Group | None:
        g = self.groups.get(int(gid)) if is_int(gid) else None
        if g is None:
            self.fail(HT_ERROR_GROUP, f"{call}: no thread group with id {gid!r}")
            return None
        if state is not None and g.state != state:
            self.fail(HT_ERROR_GROUP, f"{call}: group {gid} is {g.state}; expected {state}")
            return None
        return g

    @_boundary()
    def hthread_group_exec(self, gid: int) -> int:
        """Start the group's threads (the launch is queued; time advances in ``wait``)."""
        if self.device is None:
            return self.fail(HT_ERROR_NOT_OPEN, "hthread_group_exec: cluster 0 is not open")
        g = self._group("hthread_group_exec", gid, "created")
        if g is None:
            return HT_ERROR_GROUP
        g.stream = self.device.create_stream()
        try:
            g.launch = self.device.launch(g.stream, g.func, g.mask.bit_count(), *g.args, unit="dsp",
                                          core_mask=g.mask, name=g.name)
        except SimulatorError as exc:
            g.state = "failed"
            return self.fail(HT_ERROR_CORE_MASK, f"hthread_group_exec: {exc}")
        g.state = "running"
        return HT_SUCCESS

    @_boundary()
    def hthread_group_wait(self, gid: int) -> int:
        """Run simulated time until every thread of the group has finished."""
        if self.device is None:
            return self.fail(HT_ERROR_NOT_OPEN, "hthread_group_wait: cluster 0 is not open")
        g = self._group("hthread_group_wait", gid, None)
        if g is None:
            return HT_ERROR_GROUP
        if g.state == "done":
            return HT_SUCCESS
        if g.state != "running":
            return self.fail(HT_ERROR_GROUP, f"hthread_group_wait: group {gid} is {g.state}; exec it first")
        try:
            self.device.synchronize(g.stream)
        except SimulatorError as exc:
            g.state = "failed"
            return self.fail(HT_ERROR_KERNEL_FAULT, f"hthread_group_wait: group {gid} ({g.name}): {exc}")
        g.state = "done"
        # a long-lived runtime keeps constant memory: the group keeps its launch (cycles), the
        # device forgets the stream and folds the closed link history into totals and peaks
        # (the trace, when one is kept, grows by design)
        assert g.stream is not None      # set by hthread_group_exec, which made it "running"
        self.device.release_stream(g.stream)
        self.device.forget_link_history()
        return HT_SUCCESS

    @_boundary()
    def hthread_group_destroy(self, gid: int) -> int:
        g = self._group("hthread_group_destroy", gid, None)
        if g is None:
            return HT_ERROR_GROUP
        if g.state == "running":
            return self.fail(HT_ERROR_GROUP, f"hthread_group_destroy: group {gid} is still running; wait first")
        del self.groups[gid]
        return HT_SUCCESS

    # -- MindSpore Lite spellings --------------------------------------------------------------
    @_boundary(-1)
    def launch_group(self, cluster_id: int, core_mask: int, func: Kernel | str, args: Sequence[Any], *,
                     name: str | None = None) -> tuple[int, int]:
        """LaunchGroup: create a group on ``core_mask`` and start it; returns (gid, status)."""
        n_ptr = len(listed) if (listed := _arg_tuple(args)) is not None else 0
        gid, ret = self.hthread_group_masked_create(cluster_id, core_mask, func, 0, n_ptr, args, name=name)
        if ret != HT_SUCCESS:
            return -1, ret
        ret = self.hthread_group_exec(gid)
        return (gid, ret) if ret == HT_SUCCESS else (-1, ret)

    @_boundary()
    def wait_group(self, gid: int) -> int:
        return self.hthread_group_wait(gid)

    @_boundary()
    def destroy_group(self, gid: int) -> int:
        return self.hthread_group_destroy(gid)


def _arg_tuple(args: Any) -> tuple | None:
    """Kernel arguments as a tuple, or None when ``args`` is not a list/tuple (or 1-D array)."""
    if isinstance(args, (list, tuple)) or (isinstance(args, np.ndarray) and args.ndim == 1):
        return tuple(args)
    return None

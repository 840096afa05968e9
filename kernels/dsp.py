"""DSP binarycrossentropygrad on FT78NE (fp32) and MT7004 (fp16, fp32): the ``fp_``/``hp_``
``binarycrossentropygrad_s``/``_p`` library functions and the ``binarycrossentropygrad`` OpDef.

Seed: seeds/dsp_binarycrossentropygrad.txt. Semantics (docs/sources.md#dsp-bce-semantics; where
the seed is silent, docs/sources.md#dsp-bce-seed-readings):

    dx = dL' · w · (x − y) / (x(1 − x) + ε),   ε = 1e-12 (the seed's "+ ε", not a max)

computed in fp32 in the nnacl order ``value = w·(x − y) / den``, ``dx = value · dL'``, with
``den = x·(1 − x) + ε`` and ``1 − x`` formed as ``(−1)·x + 1``. Reduction 0: ``dL' = dloss[i]``;
1: ``dL' = dloss[0] / N`` (an fp32 divide, N converted to fp32 as C does); 2: ``dL' = dloss[0]``
(reduction codes). ``weight_defined = 0``: w = 1 and the weight pointer is never read (A-D9).
``hp_`` (half): inputs are converted to fp32 (exact), the chain runs in fp32 and the result is
rounded once (RNE) to half — an assumption: the vendor library is closed, and this is what the
other half-precision kernels of the project do (docs/sources.md#design-numerics-s4).

Storage (docs/sources.md#dsp-storage): ``_s`` takes DDR/SMC pointers and a ``core_mask``; ``input_size`` is
split over the cores of the mask in 32-element-aligned chunks (thread i takes the i-th chunk on
the i-th set bit), each core DMAs its chunk tile by tile into its private memory, computes and
DMAs dx back. ``_p`` runs on one core whose private memory already holds every operand: no DDR
traffic. The seed runs ``_p`` on the core that calls it; here that is core 0 unless ``core=`` says
otherwise (the opsim OpDef takes a one-bit ``core_mask`` for it).

The library's working buffers (DMA staging, fp32 scratch, the scalar dL') live in a fixed
working area at the top of each core's private window: by default the top half of the private
capacity (assumption; the real library's layout is not public). ``_p`` operands must not lie
in it. Both storage kinds launch through hthread as MindSpore Lite does (``LaunchGroup`` with a
core mask), so both pay the launch overhead (A-D4).

Status codes: no DSP status enum is published, so the library returns :class:`DspStatus`
(0 success, negative codes per failure class); every failure message names the parameter, the
value and what is allowed. Checks run in this order, and all of them before anything is written,
so a rejected call changes no memory: device/dtype support → input_size → reduction →
weight_defined → core_mask (or core) → pointers (input_x, input_y, weight, dloss, dx: null,
alignment, window, dx overlapping an input) → private-memory capacity.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Callable, Generator, Iterator, Mapping

import numpy as np

from opsim.devices.spec import DeviceSpec
from opsim.kernels.common import OpDef, OpError, TensorDesc, plain_overrides, popcount, reduction_code
from opsim.simulator import numerics as nx
from opsim.simulator.errors import CapacityError
from opsim.simulator.cargs import core_mask_problem, is_int
from opsim.simulator.hthread import HT_SUCCESS, HThread
from opsim.simulator.isa import Adds, Cast, DataCopyPad, Div, Mul, Muls, ScalarCompute, Sub
from opsim.simulator.memory import PAGE, align_down, align_up
from opsim.simulator.tile import GlobalTensor, KernelContext, LocalTensor, elementwise_pipeline

log = logging.getLogger("opsim.dsp")

NAME = "binarycrossentropygrad"
EPSILON = 1e-12
PRODUCTS = ("ft78ne", "mt7004")
# Seed notes: FT78NE supports fp32; MT7004 supports fp16 and fp32.
SUPPORTED_DTYPES = {"ft78ne": ("fp32",), "mt7004": ("fp16", "fp32")}
PREFIX_DTYPE = {"fp": "fp32", "hp": "fp16"}
ALIGN_ELEMENTS = 32              # chunk and tile granule (64 B of fp16, 128 B of fp32)
INT_MAX = 2 ** 31 - 1            # input_size is a C int
OVERRIDE_KEYS = ("tile_length", "buffer_num", "work_area")


class DspStatus(IntEnum):
    """Status codes of the DSP library functions (the simulator's own; assumption)."""

    SUCCESS = 0
    ERR_INPUT_SIZE = -1          # input_size <= 0 or too large; an operand's element count disagrees
    ERR_REDUCTION = -2           # reduction not 0, 1, 2
    ERR_POINTER = -3             # null, misaligned, outside its memory window, or dx aliasing an input
    ERR_CORE_MASK = -4           # core_mask of 0 or beyond the device's cores; bad _p core
    ERR_UNSUPPORTED = -5         # dtype not supported on this device (hp_ on FT78NE), or not a DSP
    ERR_CAPACITY = -6            # operands plus working area do not fit a core's private memory
    ERR_RUNTIME = -7             # device not open, or a fault while the kernel ran
    ERR_INVALID_ARGUMENT = -8    # any other bad argument (weight_defined, storage, tiling overrides)


def _err(code: DspStatus, message: str) -> OpError:
    return OpError(int(code), message)


def supported_dtypes(spec: DeviceSpec) -> tuple[str, ...]:
    return SUPPORTED_DTYPES.get(spec.series, ())


# ---------------------------------------------------------------------------------------------
# checks shared by the library functions and the OpDef
# ---------------------------------------------------------------------------------------------

def _check_device_dtype(spec: DeviceSpec, dtype: str) -> None:
    if spec.family != "dsp" or spec.series not in PRODUCTS:
        raise _err(DspStatus.ERR_UNSUPPORTED,
                   f"{NAME} runs on the FT78NE and MT7004 DSPs; device {spec.name} ({spec.product}) is not one")
    allowed = supported_dtypes(spec)
    if dtype not in allowed:
        names = {"fp32": "fp32 (fp_ functions)", "fp16": "fp16 / half (hp_ functions)"}
        raise _err(DspStatus.ERR_UNSUPPORTED,
                   f"dtype {names.get(dtype, dtype)} is not supported on {spec.soc} ({spec.name}); "
                   f"it supports {', '.join(names[a] for a in allowed)}")


def _check_size(input_size: Any) -> int:
    if isinstance(input_size, bool) or not isinstance(input_size, (int, np.integer)) or \
            not 1 <= input_size <= INT_MAX:
        raise _err(DspStatus.ERR_INPUT_SIZE,
                   f"input_size is {input_size!r}; it must be an element count 1..{INT_MAX}")
    return int(input_size)


def _check_reduction(reduction: Any) -> int:
    if isinstance(reduction, str):
        try:
            return reduction_code(reduction)
        except OpError:
            pass
    elif not isinstance(reduction, bool) and isinstance(reduction, (int, np.integer)) and 0 <= reduction <= 2:
        return int(reduction)
    raise _err(DspStatus.ERR_REDUCTION,
               f"reduction is {reduction!r}; allowed: 0 (none: dloss per element), 1 (mean: dloss[0]/N), "
               f"2 (sum: dloss[0])")


def _check_core_mask(spec: DeviceSpec, core_mask: Any) -> int:
    problem = core_mask_problem(core_mask, spec.cores.dsp, "DSP", spec.name)
    if problem:
        raise _err(DspStatus.ERR_CORE_MASK, problem)
    return int(core_mask)


def _check_core(spec: DeviceSpec, core: Any) -> int:
    n = spec.cores.dsp
    if isinstance(core, bool) or not isinstance(core, (int, np.integer)) or not 0 <= core < n:
        raise _err(DspStatus.ERR_CORE_MASK,
                   f"core {core!r} (the core whose private memory holds the _p operands) must be 0..{n - 1} "
                   f"on {spec.soc}")
    return int(core)


# ---------------------------------------------------------------------------------------------
# plan
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DspTiling:
    """How one call is split: threads, chunks, tiles and the private-memory working area."""

    storage: str              # "shared" (_s) | "private" (_p)
    dtype: str                # "fp32" | "fp16"
    total: int                # input_size
    reduction: int
    weight_defined: bool
    core_mask: int            # cores that run a thread (one bit for _p)
    block_dim: int            # threads = popcount(core_mask)
    chunk: int                # elements per thread (the last one takes what is left)
    tile_length: int          # elements per tile
    buffer_num: int           # 1 or 2 (double-buffered DMA staging; 1 for _p)
    work_base: int            # the library's working area in each core's private memory
    work_bytes: int
    work_used: int            # bytes of it one thread uses
    n_inputs: int             # streamed operands: x, y (+ weight) (+ dloss when reduction is none)

    def core_range(self, block: int) -> tuple[int, int]:
        start = block * self.chunk
        return start, max(0, min(self.total, start + self.chunk) - start)

    @property
    def active_threads(self) -> int:
        return -(-self.total // self.chunk)


def _layout_bytes(storage: str, half: bool, n_inputs: int, tile: int, buffer_num: int, item: int) -> int:
    """Working-area bytes of one thread, in the order the kernels allocate them (32 B aligned)."""
    total = 2 * 32                                     # dloss[0] as loaded, dL' in fp32
    total += (3 if half else 1) * align_up(tile, 8) * 4   # fp32 scratch: den (+ x, y casts for half)
    if storage == "shared":
        slot = align_up(tile * item, 32)
        total += buffer_num * n_inputs * slot          # VECIN: all inputs of a tile in one buffer
        total += buffer_num * align_up(tile * item, 32)   # VECOUT
    return total


def work_area(spec: DeviceSpec, overrides: Mapping[str, Any] | None = None) -> tuple[int, int]:
    """(base, bytes) of the library's working area: the top of each core's private window."""
    p = spec.private
    assert p is not None                # required of every DSP spec (devices/spec.py)
    nbytes = (overrides or {}).get("work_area", align_down(p.capacity // 2, PAGE))
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes % PAGE or \
            not PAGE <= nbytes <= align_down(p.capacity, PAGE):
        raise _err(DspStatus.ERR_INVALID_ARGUMENT,
                   f"work_area {nbytes!r} must be a multiple of {PAGE} B between {PAGE} and the private "
                   f"capacity {p.capacity} B of {spec.name}")
    return p.base + p.window - nbytes, nbytes


def plan_call(spec: DeviceSpec, *, storage: str, dtype: str, total: int, reduction: int,
              weight_defined: bool, core_mask: int, overrides: Mapping[str, Any] | None = None) -> DspTiling:
    """The tiling of one call (pure): chunks per thread, the largest tile that fits the working
    area, double buffering when a thread has more than one tile."""
    ov = plain_overrides(overrides)
    unknown = set(ov) - set(OVERRIDE_KEYS)
    if unknown:
        raise _err(DspStatus.ERR_INVALID_ARGUMENT,
                   f"unknown tiling override(s) {sorted(unknown)}; allowed: {', '.join(OVERRIDE_KEYS)}")
    base, nbytes = work_area(spec, ov)
    half = dtype == "fp16"
    item = nx.dtype(dtype).itemsize
    n_inputs = 2 + int(weight_defined) + int(reduction == 0)
    threads = popcount(core_mask)
    chunk = align_up(-(-total // threads), ALIGN_ELEMENTS) if storage == "shared" else total
    need = align_up(chunk, ALIGN_ELEMENTS)

    def fits(tile: int, buffers: int) -> bool:
        return _layout_bytes(storage, half, n_inputs, tile, buffers, item) <= nbytes

    def largest(buffers: int) -> int:
        per = _layout_bytes(storage, half, n_inputs, ALIGN_ELEMENTS, buffers, item) // ALIGN_ELEMENTS
        tile = max(ALIGN_ELEMENTS, align_down(nbytes // max(per, 1), ALIGN_ELEMENTS))
        while tile > ALIGN_ELEMENTS and not fits(tile, buffers):
            tile -= ALIGN_ELEMENTS
        return tile

    buffer_num = ov.get("buffer_num")
    if buffer_num is not None and (isinstance(buffer_num, bool) or not isinstance(buffer_num, int)
                                   or buffer_num not in (1, 2)):
        raise _err(DspStatus.ERR_INVALID_ARGUMENT, f"buffer_num {buffer_num!r} must be 1 or 2")
    if storage == "private":
        buffer_num = 1
    elif buffer_num is None:
        # a chunk that fits runs as one single-buffered tile: its compute is then not hidden under
        # DMA, which can make a call slower with one more core (README, known limits)
        buffer_num = 1 if need <= largest(1) else 2
    if "tile_length" in ov:
        tile = ov["tile_length"]
        if isinstance(tile, bool) or not isinstance(tile, int) or tile <= 0 or tile % ALIGN_ELEMENTS:
            raise _err(DspStatus.ERR_INVALID_ARGUMENT,
                       f"tile_length {tile!r} must be a positive multiple of {ALIGN_ELEMENTS} elements")
    else:
        tile = min(largest(buffer_num), need)
    used = _layout_bytes(storage, half, n_inputs, tile, buffer_num, item)
    if used > nbytes:
        raise _err(DspStatus.ERR_CAPACITY,
                   f"tile_length {tile} needs {used} B of working area per core ({buffer_num} buffer(s), "
                   f"{n_inputs} streamed operand(s) of {dtype}); the working area has {nbytes} B")
    return DspTiling(storage, dtype, total, reduction, bool(weight_defined), core_mask, threads, chunk,
                     tile, buffer_num, base, nbytes, used, n_inputs)


def _pages(ranges: list[tuple[int, int]]) -> int:
    """Distinct 4 KiB pages touched by the (addr, nbytes) ranges: what sparse memory backs."""
    spans = sorted((a // PAGE, (a + n - 1) // PAGE) for a, n in ranges if n > 0)
    count, hi = 0, -1
    for lo, top in spans:
        if top <= hi:
            continue
        count += top - max(lo, hi + 1) + 1
        hi = top
    return count


def _private_need(tiling: DspTiling, ranges: list[tuple[int, int]]) -> int:
    """Bytes of private memory a _p call touches: the pages of its operands and working buffers."""
    return (_pages(ranges) + _pages([(tiling.work_base, tiling.work_used)])) * PAGE


def _check_private_capacity(spec: DeviceSpec, tiling: DspTiling, ranges: list[tuple[int, int]], core: int,
                            size: str, layout: str, need_at: Callable[[int], int]) -> None:
    """Refuse (ERR_CAPACITY) a _p call whose operands and working buffers do not fit the core's
    private memory, naming ``size`` (what sets the element count) and its value, the bytes needed
    and the capacity, and the largest count that fits with the operands laid out as ``layout``
    says; ``need_at(n)``: the bytes the same call needs with ``n`` elements."""
    assert spec.private is not None     # required of every DSP spec (devices/spec.py)
    cap = spec.private.capacity
    need = _private_need(tiling, ranges)
    if need <= cap:
        return
    lo, hi = 0, tiling.total - 1        # the need never shrinks as the count grows: bisect
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if need_at(mid) <= cap else (lo, mid - 1)
    fits = f"the largest {size} that fits is {lo}" if lo else f"no {size} fits"
    raise _err(DspStatus.ERR_CAPACITY,
               f"{size} {tiling.total}: the _p operands ({_pages(ranges)} pages of {PAGE} B) and the library's "
               f"working buffers ({tiling.work_used} B) need {need} B of dsp.core{core}'s private memory; its "
               f"capacity is {cap} B; {fits} ({layout})")


# ---------------------------------------------------------------------------------------------
# kernels (one thread each)
# ---------------------------------------------------------------------------------------------

def _compute(half: bool, weight_defined: bool, dloss_per_element: bool, scratch: list[LocalTensor],
             scalar: LocalTensor | None):
    """One tile: the seed's formula in the nnacl order, fp32, shared by _s and _p."""

    def compute(ctx: KernelContext, ins: list[LocalTensor], o: LocalTensor, n: int) -> Iterator[Any]:
        x, y = ins[0], ins[1]
        w = ins[2] if weight_defined else None
        dl = ins[-1] if dloss_per_element else None
        if not half:
            den = scratch[0][:n]
            yield Muls(den, x, scalar=-1.0, count=n)       # (−1)·x
            yield Adds(den, den, scalar=1.0, count=n)      # 1 − x
            yield Mul(den, x, den, count=n)                # x(1 − x)
            yield Adds(den, den, scalar=EPSILON, count=n)  # + ε
            yield Sub(o, x, y, count=n)                    # x − y
            if w is not None:
                yield Mul(o, w, o, count=n)                # w·(x − y)
            yield Div(o, o, den, count=n)
            if dl is not None:
                yield Mul(o, o, dl, count=n)               # · dloss[i]
            else:
                yield Muls(o, o, scalar=scalar, count=n)   # · dL' (dloss[0]/N or dloss[0])
            return
        xf, yf, den = (s[:n] for s in scratch)
        yield Cast(xf, x, "none", n)
        yield Muls(den, xf, scalar=-1.0, count=n)
        yield Adds(den, den, scalar=1.0, count=n)
        yield Mul(den, xf, den, count=n)
        yield Adds(den, den, scalar=EPSILON, count=n)
        yield Cast(yf, y, "none", n)
        yield Sub(xf, xf, yf, count=n)
        if w is not None:
            yield Cast(yf, w, "none", n)
            yield Mul(xf, yf, xf, count=n)
        yield Div(xf, xf, den, count=n)
        if dl is not None:
            yield Cast(yf, dl, "none", n)
            yield Mul(xf, xf, yf, count=n)
        else:
            yield Muls(xf, xf, scalar=scalar, count=n)
        yield Cast(o, xf, "rint", n)                       # the one rounding to half

    return compute


def _scratch(ctx: KernelContext, tiling: DspTiling) -> list[LocalTensor]:
    n = align_up(tiling.tile_length, 8)
    k = 3 if tiling.dtype == "fp16" else 1
    buf = ctx.tbuf(4 * n * k, nx.FP32)
    return [buf[i * n:(i + 1) * n] for i in range(k)]


def _scalar_dloss(ctx: KernelContext, tiling: DspTiling, loaded: LocalTensor) -> Generator[Any, Any, LocalTensor]:
    """dL' in fp32 on the scalar unit from dloss[0] (in local memory): dloss[0] / (float)N for
    mean, dloss[0] for sum; then handed to the vector unit (SCALAR -> VECTOR flag)."""
    s = ctx.tbuf(32, nx.FP32)[0:1]
    yield ScalarCompute(s, loaded, "div" if tiling.reduction == 1 else None, float(tiling.total))
    eid = ctx.next_event_id("SCALAR", "VECTOR")
    ctx.emit_set("SCALAR", "VECTOR", eid)
    ctx.emit_wait("SCALAR", "VECTOR", eid)
    return s


def kernel_s(ctx: KernelContext, tiling: DspTiling, x: GlobalTensor, y: GlobalTensor, w: GlobalTensor | None,
             dloss: GlobalTensor, dx: GlobalTensor) -> Iterator[Any]:
    """Shared storage: this thread's chunk, DDR/SMC → private memory → compute → DDR/SMC."""
    start, length = tiling.core_range(ctx.block_idx)
    if length <= 0:
        return
    ctx.use_work_area("PRIVATE", tiling.work_base, tiling.work_bytes)
    dt = nx.dtype(tiling.dtype)
    scalar = None
    loaded = None
    if tiling.reduction != 0:
        loaded = ctx.tbuf(32, dt)[0:1]
        yield DataCopyPad(loaded, dloss[0:1], 1)           # each core reads dloss[0] itself
        eid = ctx.next_event_id("DMA", "SCALAR")
        ctx.emit_set("DMA", "SCALAR", eid)
        ctx.emit_wait("DMA", "SCALAR", eid)
    scratch = _scratch(ctx, tiling)
    if loaded is not None:
        scalar = yield from _scalar_dloss(ctx, tiling, loaded)
    # weight_defined is set exactly when a weight is given (plan_call)
    inputs = [x, y] + ([w] if tiling.weight_defined and w is not None else []) + \
        ([dloss] if tiling.reduction == 0 else [])
    compute = _compute(tiling.dtype == "fp16", tiling.weight_defined, tiling.reduction == 0, scratch, scalar)
    yield from elementwise_pipeline(ctx, inputs=inputs, output=dx, start=start, length=length,
                                    tile_length=tiling.tile_length, buffer_num=tiling.buffer_num,
                                    compute=compute)


def kernel_p(ctx: KernelContext, tiling: DspTiling, x: int, y: int, w: int | None, dloss: int,
             dx: int) -> Iterator[Any]:
    """Private storage: operands already in this core's private memory; vector work only."""
    ctx.use_work_area("PRIVATE", tiling.work_base, tiling.work_bytes)
    dt = nx.dtype(tiling.dtype)
    item = dt.itemsize

    def at(addr: int, off: int, n: int) -> LocalTensor:
        return ctx.local_at(addr + off * item, dt, n, "PRIVATE")

    scratch = _scratch(ctx, tiling)
    scalar = None
    if tiling.reduction != 0:
        scalar = yield from _scalar_dloss(ctx, tiling, at(dloss, 0, 1))
    compute = _compute(tiling.dtype == "fp16", tiling.weight_defined, tiling.reduction == 0, scratch, scalar)
    tile, total = tiling.tile_length, tiling.total
    for t in ctx.tiles(-(-total // tile)):
        ctx.tile = t
        off = t * tile
        n = min(tile, total - off)
        ins = [at(x, off, n), at(y, off, n)]
        if tiling.weight_defined and w is not None:   # the one implies the other (plan_call)
            ins.append(at(w, off, n))
        if tiling.reduction == 0:
            ins.append(at(dloss, off, n))
        yield from compute(ctx, ins, at(dx, off, n), n)


def _launch_args(device: Any, tiling: DspTiling, addrs: Mapping[str, int | None]) -> tuple:
    """Kernel arguments for the addresses of input_x, input_y, weight, dloss, dx."""
    if tiling.storage == "private":
        return (tiling, addrs["input_x"], addrs["input_y"], addrs.get("weight"), addrs["dloss"], addrs["dx"])
    dt = nx.dtype(tiling.dtype)
    n = tiling.total

    def flat(addr: int | None, count: int) -> GlobalTensor | None:
        return None if addr is None else GlobalTensor.contiguous(device, addr, dt, (count,))

    return (tiling, flat(addrs["input_x"], n), flat(addrs["input_y"], n),
            flat(addrs.get("weight") if tiling.weight_defined else None, n),
            flat(addrs["dloss"], n if tiling.reduction == 0 else 1), flat(addrs["dx"], n))


def kernel_name(tiling: DspTiling) -> str:
    """MindSpore Lite's ``<prefix>_<op>_<suffix>`` naming (docs/sources.md#dsp-host-runtime)."""
    return f"{'hp' if tiling.dtype == 'fp16' else 'fp'}_binarycrossentropygrad_" \
           f"{'p' if tiling.storage == 'private' else 's'}"


def _cores(tiling: DspTiling) -> list[int]:
    return [i for i in range(tiling.core_mask.bit_length()) if tiling.core_mask >> i & 1]


def reserve_backing(device: Any, tiling: DspTiling, private_ranges: list[tuple[int, int]]) -> None:
    """Back, before launching, every private page the call will touch (the working area of each
    core with work, and the _p operands): backing adds zeros, which changes no memory contents,
    and a private memory that cannot hold them is refused now instead of faulting half-way."""
    cores = _cores(tiling)[:tiling.active_threads]
    for c in cores:
        region = device.cores["dsp"][c].memories["PRIVATE"]
        try:
            for addr, nbytes in [(tiling.work_base, tiling.work_used)] + (
                    private_ranges if tiling.storage == "private" else []):
                region.ensure_backed(addr, nbytes)
        except CapacityError as exc:
            raise _err(DspStatus.ERR_CAPACITY,
                       f"dsp.core{c}'s private memory cannot hold the call's operands and working buffers: "
                       f"{exc.reason} ({exc.needed} B needed, capacity {exc.available} B)") from None


# ---------------------------------------------------------------------------------------------
# the library functions (seed signatures), bound to a hthread runtime
# ---------------------------------------------------------------------------------------------

POINTERS = ("input_x", "input_y", "weight", "dloss", "dx")


class DspLibrary:
    """The DSP operator library (``dsp_lib.dat``) bound to a :class:`HThread` runtime.

    ``lib = DspLibrary(rt)`` then ``lib.fp_binarycrossentropygrad_s(1024, 1, 0xA0000000, ...)``
    exactly as the seed's C example. Each function validates, launches through hthread, waits
    (the C functions return when done) and returns a :class:`DspStatus` code; the message of a
    failure is ``rt.get_recent_err_msg()``. ``last_group`` is the finished hthread group.
    """

    def __init__(self, rt: HThread, cluster_id: int = 0) -> None:
        self.rt = rt
        self.cluster_id = cluster_id
        self.last_group: Any = None
        self.last_tiling: DspTiling | None = None

    # shared storage
    def fp_binarycrossentropygrad_s(self, input_size: int, reduction: int, input_x: int, input_y: int,
                                    weight: int, dloss: int, dx: int, weight_defined: int, core_mask: int) -> int:
        return self._call("fp", "shared", input_size, reduction, input_x, input_y, weight, dloss, dx,
                          weight_defined, core_mask=core_mask)

    def hp_binarycrossentropygrad_s(self, input_size: int, reduction: int, input_x: int, input_y: int,
                                    weight: int, dloss: int, dx: int, weight_defined: int, core_mask: int) -> int:
        return self._call("hp", "shared", input_size, reduction, input_x, input_y, weight, dloss, dx,
                          weight_defined, core_mask=core_mask)

    # private storage: runs on ``core`` (the calling core; 0 by default)
    def fp_binarycrossentropygrad_p(self, input_size: int, reduction: int, input_x: int, input_y: int,
                                    weight: int, dloss: int, dx: int, weight_defined: int, *, core: int = 0) -> int:
        return self._call("fp", "private", input_size, reduction, input_x, input_y, weight, dloss, dx,
                          weight_defined, core=core)

    def hp_binarycrossentropygrad_p(self, input_size: int, reduction: int, input_x: int, input_y: int,
                                    weight: int, dloss: int, dx: int, weight_defined: int, *, core: int = 0) -> int:
        return self._call("hp", "private", input_size, reduction, input_x, input_y, weight, dloss, dx,
                          weight_defined, core=core)

    def _call(self, prefix: str, storage: str, input_size: Any, reduction: Any, input_x: Any, input_y: Any,
              weight: Any, dloss: Any, dx: Any, weight_defined: Any, *, core_mask: Any = None,
              core: Any = 0) -> int:
        fn = f"{prefix}_binarycrossentropygrad_{'s' if storage == 'shared' else 'p'}"
        rt = self.rt
        if not isinstance(rt, HThread):
            # no runtime to keep the message in: log it (a null runtime is the C null handle)
            log.warning("[%d] %s: the library is bound to %r, not an hthread runtime (HThread)",
                        int(DspStatus.ERR_RUNTIME), fn, rt)
            return int(DspStatus.ERR_RUNTIME)
        try:
            device = rt.device
            if device is None or not is_int(self.cluster_id) or self.cluster_id != 0:
                raise _err(DspStatus.ERR_RUNTIME, f"cluster {self.cluster_id} is not open; call "
                                                  f"hthread_dev_open(0) first")
            spec = device.spec
            ptrs = {"input_x": input_x, "input_y": input_y, "weight": weight, "dloss": dloss, "dx": dx}
            tiling, ranges, mask = check_call(spec, prefix=prefix, storage=storage, input_size=input_size,
                                              reduction=reduction, pointers=ptrs, weight_defined=weight_defined,
                                              core_mask=core_mask, core=core)
            if device.functional:
                reserve_backing(device, tiling, ranges)
            args = _launch_args(device, tiling, ptrs)
            gid, ret = rt.hthread_group_masked_create(self.cluster_id, mask, kernel_p if storage == "private"
                                                      else kernel_s, 1, len(args) - 1, args, name=fn)
            if ret == HT_SUCCESS:
                ret = rt.hthread_group_exec(gid)
            if ret == HT_SUCCESS:
                ret = rt.hthread_group_wait(gid)
            if ret != HT_SUCCESS:
                raise _err(DspStatus.ERR_RUNTIME, rt.get_recent_err_msg())
            self.last_group = rt.groups.get(gid)
            self.last_tiling = tiling
            rt.hthread_group_destroy(gid)
            return int(DspStatus.SUCCESS)
        except OpError as exc:
            rt.fail(exc.code, f"{fn}: {exc.message}")
            return exc.code
        except Exception as exc:  # never let a Python traceback cross the C-style boundary
            rt.fail(int(DspStatus.ERR_RUNTIME), f"{fn}: internal error: {type(exc).__name__}: {exc}")
            return int(DspStatus.ERR_RUNTIME)


def check_call(spec: DeviceSpec, *, prefix: str, storage: str, input_size: Any, reduction: Any,
               pointers: Mapping[str, Any], weight_defined: Any, core_mask: Any = None,
               core: Any = 0) -> tuple[DspTiling, list[tuple[int, int]], int]:
    """The library functions' checks in the documented order; returns (tiling, the _p operand
    ranges, the launch mask) or raises OpError with a DspStatus code."""
    dtype = PREFIX_DTYPE[prefix]
    _check_device_dtype(spec, dtype)
    n = _check_size(input_size)
    red = _check_reduction(reduction)
    if isinstance(weight_defined, bool) or not isinstance(weight_defined, (int, np.integer)):
        raise _err(DspStatus.ERR_INVALID_ARGUMENT,
                   f"weight_defined is {weight_defined!r}; it must be an int (0: no weight, non-zero: weight given)")
    wd = bool(weight_defined)
    if storage == "shared":
        mask = _check_core_mask(spec, core_mask)
        cidx = -1
    else:
        cidx = _check_core(spec, core)
        mask = 1 << cidx
    item = nx.dtype(dtype).itemsize

    def sizes_of(count: int) -> dict[str, int]:
        return {"input_x": count, "input_y": count, "weight": count, "dloss": count if red == 0 else 1, "dx": count}

    def tiling_of(count: int) -> DspTiling:
        return plan_call(spec, storage=storage, dtype=dtype, total=count, reduction=red, weight_defined=wd,
                         core_mask=mask)

    sizes = sizes_of(n)
    tiling = tiling_of(n)
    windows = _windows(spec, storage, tiling, cidx)
    assert spec.private is not None     # required of every DSP spec (devices/spec.py)
    align = max(item, spec.gm.alignment if storage == "shared" else spec.private.alignment)
    allowed = " or ".join(f"{label} [{lo:#x}, {hi:#x})" for label, lo, hi in windows)
    ranges: dict[str, tuple[int, int]] = {}
    for name in POINTERS:
        if name == "weight" and not wd:
            continue                            # weight_defined = 0: the pointer is never read
        addr = pointers[name]
        nbytes = sizes[name] * item
        # what a valid pointer is: said by every pointer message, so a null or non-address one too
        count = f"{sizes[name]} element{'' if sizes[name] == 1 else 's'}"
        where = f"it must be the address of {count} of {dtype} in {allowed}"
        if addr is None or (isinstance(addr, (int, np.integer)) and not isinstance(addr, bool) and addr == 0):
            extra = " (weight_defined is non-zero, so weight must be given)" if name == "weight" else ""
            raise _err(DspStatus.ERR_POINTER, f"{name} is a null pointer{extra}; {where}")
        if isinstance(addr, bool) or not isinstance(addr, (int, np.integer)) or addr < 0:
            raise _err(DspStatus.ERR_POINTER, f"{name} is {addr!r}, not a device address; {where}")
        addr = int(addr)
        if addr % align:
            raise _err(DspStatus.ERR_POINTER,
                       f"{name} {addr:#x} is not {align}-byte aligned (off by {addr % align}); "
                       f"{'half' if item == 2 else 'float'} operands need {align}-byte alignment")
        if not any(lo <= addr and addr + nbytes <= hi for _, lo, hi in windows):
            raise _err(DspStatus.ERR_POINTER,
                       f"{name} [{addr:#x}, {addr + nbytes:#x}) ({sizes[name]} elements of {dtype}) is outside "
                       f"{allowed}")
        ranges[name] = (addr, nbytes)
    out_lo, out_n = ranges["dx"]
    for name, (lo, nb) in ranges.items():
        if name != "dx" and lo < out_lo + out_n and out_lo < lo + nb:
            raise _err(DspStatus.ERR_POINTER,
                       f"dx [{out_lo:#x}, {out_lo + out_n:#x}) overlaps {name} [{lo:#x}, {lo + nb:#x}); "
                       f"the output must not alias an input")
    private_ranges = list(ranges.values()) if storage == "private" else []
    if storage == "private":
        def need_at(count: int) -> int:
            return _private_need(tiling_of(count), [(ranges[k][0], c * item) for k, c in sizes_of(count).items()
                                                    if k in ranges])
        _check_private_capacity(spec, tiling, private_ranges, cidx, "input_size",
                                "with the operands at these addresses", need_at)
    return tiling, private_ranges, mask


def _windows(spec: DeviceSpec, storage: str, tiling: DspTiling, core: int) -> list[tuple[str, int, int]]:
    if storage == "shared":
        out = [("DDR", spec.gm.base, spec.gm.base + spec.gm.window)]
        if spec.smc is not None:
            out.append(("SMC", spec.smc.base, spec.smc.base + spec.smc.window))
        return out
    assert spec.private is not None     # required of every DSP spec (devices/spec.py)
    return [(f"dsp.core{core}'s private memory (below the library's working area at {tiling.work_base:#x})",
             spec.private.base, tiling.work_base)]


# Module-level spellings with the runtime first, for callers that do not keep a DspLibrary.
def fp_binarycrossentropygrad_s(rt: HThread, input_size: int, reduction: int, input_x: int, input_y: int,
                                weight: int, dloss: int, dx: int, weight_defined: int, core_mask: int) -> int:
    return DspLibrary(rt).fp_binarycrossentropygrad_s(input_size, reduction, input_x, input_y, weight, dloss,
                                                      dx, weight_defined, core_mask)


def hp_binarycrossentropygrad_s(rt: HThread, input_size: int, reduction: int, input_x: int, input_y: int,
                                weight: int, dloss: int, dx: int, weight_defined: int, core_mask: int) -> int:
    return DspLibrary(rt).hp_binarycrossentropygrad_s(input_size, reduction, input_x, input_y, weight, dloss,
                                                      dx, weight_defined, core_mask)


def fp_binarycrossentropygrad_p(rt: HThread, input_size: int, reduction: int, input_x: int, input_y: int,
                                weight: int, dloss: int, dx: int, weight_defined: int, *, core: int = 0) -> int:
    return DspLibrary(rt).fp_binarycrossentropygrad_p(input_size, reduction, input_x, input_y, weight, dloss,
                                                      dx, weight_defined, core=core)


def hp_binarycrossentropygrad_p(rt: HThread, input_size: int, reduction: int, input_x: int, input_y: int,
                                weight: int, dloss: int, dx: int, weight_defined: int, *, core: int = 0) -> int:
    return DspLibrary(rt).hp_binarycrossentropygrad_p(input_size, reduction, input_x, input_y, weight, dloss,
                                                      dx, weight_defined, core=core)


# ---------------------------------------------------------------------------------------------
# the OpDef: opsim.run("binarycrossentropygrad", device="mt7004", storage=..., core_mask=..., ...)
# ---------------------------------------------------------------------------------------------

def _storage(attrs: Mapping[str, Any]) -> str:
    storage = attrs.get("storage", "shared")
    if not isinstance(storage, str) or storage not in ("shared", "private"):
        raise _err(DspStatus.ERR_INVALID_ARGUMENT,
                   f"storage is {storage!r}; allowed: 'shared' (_s, DDR/SMC) or 'private' (_p, one core's memory)")
    return storage


def _mask_of(spec: DeviceSpec, attrs: Mapping[str, Any], storage: str) -> int:
    mask = attrs.get("core_mask")
    if storage == "shared":
        return _check_core_mask(spec, (1 << spec.cores.dsp) - 1 if mask is None else mask)
    if mask is None:
        return 0x1
    mask = _check_core_mask(spec, mask)
    if popcount(mask) != 1:
        raise _err(DspStatus.ERR_CORE_MASK,
                   f"core_mask {mask:#x} selects {popcount(mask)} cores; private storage (_p) runs on one core "
                   f"(one bit: the core whose private memory holds the operands)")
    return mask


def validate(spec: DeviceSpec, t: Mapping[str, TensorDesc | None], attrs: Mapping[str, Any]) -> dict[str, TensorDesc]:
    x, y, w, dl, dx = (t.get(k) for k in POINTERS)
    for name, d in (("input_x", x), ("input_y", y), ("dloss", dl), ("dx", dx)):
        if d is None:
            raise _err(DspStatus.ERR_POINTER, f"{name} is a null pointer; it is required")
    assert x is not None and dl is not None   # checked just above
    _check_device_dtype(spec, x.dtype.name)
    for name, d in (("input_y", y), ("weight", w), ("dloss", dl), ("dx", dx)):
        if d is not None and d.dtype != x.dtype:
            raise _err(DspStatus.ERR_UNSUPPORTED,
                       f"{name} has dtype {d.dtype}; every operand must have input_x's dtype {x.dtype}")
    n = _check_size(x.numel)
    red = _check_reduction(attrs.get("reduction", 1))
    for name, d in (("input_y", y), ("weight", w), ("dx", dx)):
        if d is not None and d.numel != n:
            raise _err(DspStatus.ERR_INPUT_SIZE,
                       f"{name} has {d.numel} elements; it must have input_size = {n} (input_x's count)")
    if (red == 0 and dl.numel != n) or dl.numel < 1:
        need = f"input_size = {n} (reduction 0: one per element)" if red == 0 else "at least 1 (dloss[0] is used)"
        raise _err(DspStatus.ERR_INPUT_SIZE, f"dloss has {dl.numel} elements; it must have {need}")
    storage = _storage(attrs)
    _mask_of(spec, attrs, storage)
    return {"dx": TensorDesc(tuple(x.shape), x.dtype)}


def plan(spec: DeviceSpec, t: Mapping[str, TensorDesc], attrs: Mapping[str, Any],
         overrides: Mapping[str, Any] | None = None) -> DspTiling:
    storage = _storage(attrs)
    mask = _mask_of(spec, attrs, storage)
    x = t["input_x"]
    red = _check_reduction(attrs.get("reduction", 1))
    def tiling_of(count: int) -> DspTiling:
        return plan_call(spec, storage=storage, dtype=x.dtype.name, total=count, reduction=red,
                         weight_defined=t.get("weight") is not None, core_mask=mask, overrides=overrides)

    tiling = tiling_of(x.numel)
    if storage == "private":
        assert spec.private is not None  # required of every DSP spec (devices/spec.py)
        base, item = spec.private.base, x.dtype.itemsize

        def laid_out(count: int) -> list[tuple[int, int]]:
            # place() below lays the operands out contiguously from the window base
            counts = [count if d.numel == x.numel else d.numel for k in POINTERS if (d := t.get(k)) is not None]
            return [(base, sum(align_up(c * item, 64) for c in counts))]

        _check_private_capacity(spec, tiling, laid_out(x.numel), mask.bit_length() - 1, "input_x size",
                                "the operands laid out back to back from the window base",
                                lambda count: _private_need(tiling_of(count), laid_out(count)))
    return tiling


def place(device: Any, t: Mapping[str, TensorDesc | None], attrs: Mapping[str, Any]) -> dict[str, tuple[int, Any]]:
    """Private storage: every operand in the private memory of the core of ``core_mask``."""
    storage = _storage(attrs)
    if storage != "private":
        return {}
    core = _mask_of(device.spec, attrs, storage).bit_length() - 1
    region = device.cores["dsp"][core].memories["PRIVATE"]
    return {k: (region.allocate(d.nbytes, align=64, name=k).addr, region)
            for k in POINTERS if (d := t.get(k)) is not None}


def launch(device: Any, stream: Any, tensors: Mapping[str, GlobalTensor], tiling: DspTiling,
           attrs: Mapping[str, Any]) -> list:
    addrs = {k: (tensors[k].addr if tensors.get(k) is not None else None) for k in POINTERS}
    if device.functional:
        ranges = [(tensors[k].addr, tensors[k].numel * tensors[k].dtype.itemsize)
                  for k in POINTERS if tensors.get(k) is not None]
        reserve_backing(device, tiling, ranges)
    args = _launch_args(device, tiling, addrs)
    kernel = kernel_p if tiling.storage == "private" else kernel_s
    return [device.launch(stream, kernel, tiling.block_dim, *args, unit="dsp", core_mask=tiling.core_mask,
                          name=kernel_name(tiling))]


# ---------------------------------------------------------------------------------------------
# golden: plain numpy in the kernel's op order, written independently of the simulator
# ---------------------------------------------------------------------------------------------

def golden(a: Mapping[str, np.ndarray | None], attrs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    x = np.asarray(a["input_x"])
    dt = x.dtype
    f32 = np.float32
    xf = x.reshape(-1).astype(f32)
    yf = np.asarray(a["input_y"]).reshape(-1).astype(f32)
    dl = np.asarray(a["dloss"]).reshape(-1).astype(f32)
    w = a.get("weight")
    red = reduction_code(attrs.get("reduction", 1))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        den = xf * f32(-1.0)
        den = den + f32(1.0)
        den = xf * den
        den = den + f32(EPSILON)
        r = xf - yf
        if w is not None:
            r = np.asarray(w).reshape(-1).astype(f32) * r
        r = r / den
        if red == 0:
            r = r * dl
        else:
            s = dl[0] / f32(xf.size) if red == 1 else dl[0]
            r = r * f32(s)
        out = r.astype(dt)
    return {"dx": out.reshape(x.shape)}


def truth(a: Mapping[str, np.ndarray | None], attrs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """fp64 reference of the seed's formula for the precision standard."""
    x = np.asarray(a["input_x"]).reshape(-1).astype(np.float64)
    y = np.asarray(a["input_y"]).reshape(-1).astype(np.float64)
    dl = np.asarray(a["dloss"]).reshape(-1).astype(np.float64)
    w = np.asarray(a["weight"]).reshape(-1).astype(np.float64) if a.get("weight") is not None else 1.0
    red = reduction_code(attrs.get("reduction", 1))
    scale = dl if red == 0 else (dl[0] / x.size if red == 1 else dl[0])
    r = scale * w * (x - y) / (x * (1.0 - x) + EPSILON)
    return {"dx": r.reshape(np.shape(np.asarray(a["input_x"])))}


def infer(spec: DeviceSpec, t: Mapping[str, TensorDesc | None],
          attrs: Mapping[str, Any]) -> dict[str, TensorDesc | None]:
    x = t.get("input_x")
    return {"dx": TensorDesc(tuple(x.shape), x.dtype) if x is not None else None}


def _dloss_shape(size: int | tuple[int, ...], reduction: int | str) -> tuple[int, ...]:
    """dloss of the recipe: one per element for reduction none (0), else one element."""
    per_element = reduction in (0, "none")
    return ((size,) if isinstance(size, int) else tuple(size)) if per_element else (1,)


def example(rng: np.random.Generator, spec: DeviceSpec, dtype: str = "fp32", size: int = 1024,
            reduction: int | str = 1) -> dict[str, Any]:
    dt = nx.dtype(dtype).np_dtype
    return {"input_x": rng.uniform(0.01, 0.99, size).astype(np.float32).astype(dt),
            "input_y": rng.uniform(0.0, 1.0, size).astype(np.float32).astype(dt),
            "weight": rng.uniform(0.5, 2.0, size).astype(np.float32).astype(dt),
            "dloss": rng.uniform(0.5, 2.0, _dloss_shape(size, reduction)).astype(np.float32).astype(dt),
            "reduction": reduction}


def example_shapes(spec: DeviceSpec, dtype: str = "fp32", size: int | tuple[int, ...] = 1024,
                   reduction: int | str = 1) -> dict[str, Any]:
    """``example`` without data: input_x, input_y and weight of ``size`` elements (or shape), a
    one-element dloss (one per element with reduction none)."""
    shape = (size,) if isinstance(size, int) else tuple(size)
    return {"input_x": (shape, dtype), "input_y": (shape, dtype), "weight": (shape, dtype),
            "dloss": (_dloss_shape(size, reduction), dtype), "reduction": reduction}


OP = OpDef(
    name=NAME,
    inputs=("input_x", "input_y", "dloss"),
    outputs=("dx",),
    attrs={"reduction": 1, "storage": "shared", "core_mask": None},
    products=PRODUCTS,
    validate=validate,
    plan=plan,
    launch=launch,
    golden=golden,
    example=example,
    infer=infer,
    optional=("weight",),
    dtypes=supported_dtypes,
    summary="DSP BCE gradient: dloss * w * (x - y) / (x(1 - x) + 1e-12), shared (_s) or private (_p) storage",
    place=place,
    example_shapes=example_shapes,
    tiling_keys=OVERRIDE_KEYS,
)

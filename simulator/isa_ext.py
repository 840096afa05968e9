"""Instructions added for the pyasc front-end (opsim.asc): activations, Axpy, Transpose, Brcb,
compare/select, reductions and a padded GM->UB copy.

They subclass the instruction classes of simulator/isa.py, so they share the pipe, the cost
model (``cycles = k·N + b`` from the device's ``[vector.cost]`` table; the entries and their
sources are in the device files), the dtype checks and the numerics convention (widen to fp32,
one operation, round once to the destination dtype). Each lists the memory it touches
(``accesses``) for the sanitizer.

Numeric conventions that the public documentation leaves open are fixed here and documented:

- ``Rsqrt`` is ``1 / sqrt(x)`` in fp32 (two fp32 roundings), then one rounding to the dtype.
- ``LeakyRelu`` is ``x if x >= 0 else x * alpha`` (alpha rounded to the dtype first).
- ``Axpy`` rounds ``src * scalar`` to dst's dtype, then ``+ dst`` (two roundings, as Muls then
  Add).
- Sums (``ReduceSum``, ``WholeReduceSum``) accumulate in fp32 pairwise: the elements, padded
  with -0.0 (the additive identity) to a power of two, are added in adjacent pairs
  ``a[2i] + a[2i+1]`` level by level (a binary tree), and the result is rounded once to the
  dtype. ``ReduceSum`` applies the tree over each 256-byte repeat first and then over the repeat
  sums, as the instruction reduces one repeat at a time.
- Compare writes one bit per element into a uint8 mask, element ``i`` in bit ``i % 8`` of byte
  ``i // 8`` (LSB first); Select reads such a mask.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np

from opsim.simulator import numerics as nx
from opsim.simulator.cube import (CrossCoreSetFlag, CrossCoreWaitFlag, CubeInstruction, GmMatrix, _fit,
                                  _need_region, align16, cube_load_model, nz_bytes)
from opsim.simulator.errors import MemoryFault, SimulatorError, UnsupportedInstruction
from opsim.simulator.isa import DataCopyPad, VectorOp, _require_compute, _vector_cycles
from opsim.simulator.tile import LocalTensor

if TYPE_CHECKING:  # pragma: no cover
    from opsim.simulator.core import Pipe

Access = tuple[str, int, int, bool]


def local_access(t: LocalTensor, nbytes: int, write: bool) -> Access:
    return (f"{t.core.name}/{t.region.name}", t.addr, int(nbytes), write)


def _vector_accesses(self: VectorOp, pipe: "Pipe | None" = None) -> tuple[Access, ...]:
    n = self.count
    acc = [local_access(self.dst, n * self.dst.dtype.itemsize, True)]
    acc += [local_access(s, n * s.dtype.itemsize, False) for s in self.srcs]
    if isinstance(self.scalar, LocalTensor):
        acc.append(local_access(self.scalar, self.scalar.dtype.itemsize, False))
    return tuple(acc)


# ---------------------------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------------------------

def _relu(a, out=None):
    return np.maximum(a, np.float32(0.0), out=out)


def _rsqrt(a, out=None):
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.divide(np.float32(1.0), np.sqrt(a))
    if out is not None:
        out[...] = r
        return out
    return r


def _leaky_relu(a, alpha, out=None):
    r = np.where(a >= 0, a, a * np.float32(alpha)).astype(np.float32, copy=False)
    if out is not None:
        out[...] = r
        return out
    return r


class Relu(VectorOp):
    """dst = max(src, 0)."""

    __slots__ = ()
    name = "Relu"
    fn = staticmethod(_relu)
    accesses = _vector_accesses


class Rsqrt(VectorOp):
    """dst = 1 / sqrt(src) (fp32: two roundings, see the module docstring)."""

    __slots__ = ()
    name = "Rsqrt"
    fn = staticmethod(_rsqrt)
    accesses = _vector_accesses


class LeakyRelu(VectorOp):
    """dst = src if src >= 0 else src * scalar."""

    __slots__ = ()
    name = "LeakyRelu"
    fn = staticmethod(_leaky_relu)
    accesses = _vector_accesses


# ---------------------------------------------------------------------------------------------
# Multiply-accumulate
# ---------------------------------------------------------------------------------------------

# (src dtype, dst dtype) pairs Axpy computes in: the precision combinations the Ascend C Axpy
# page lists for the A2/A3 parts (docs/sources.md#axpy)
AXPY_DTYPES = (("fp16", "fp16"), ("fp32", "fp32"), ("fp16", "fp32"))


class Axpy(VectorOp):
    """``Axpy(dst, src, scalar, count)``: dst[i] = src[i] * scalar + dst[i]; ``dst`` is read
    and written (an accumulator). src and the scalar have one dtype, dst that dtype or, in the
    mixed form, fp32 with fp16 src. The product is rounded to dst's dtype, then the sum (the
    Muls-then-Add order; docs/writing-kernels.md §6 on how the instruction's own rounding is
    documented). Costed by the ``Axpy`` entry in dst's dtype (one repeat covers 256 B of dst)."""

    __slots__ = ()
    name = "Axpy"

    def __init__(self, dst: LocalTensor, src: LocalTensor, scalar: float | LocalTensor, count: int) -> None:
        super().__init__(dst, src, scalar=scalar, count=count)

    def issue(self, pipe: "Pipe") -> int:
        src, dst = self.srcs[0], self.dst
        if (src.dtype.name, dst.dtype.name) not in AXPY_DTYPES:
            raise UnsupportedInstruction(
                f"Axpy with src {src.dtype} and dst {dst.dtype}: it computes in src/dst "
                + ", ".join(f"{a}/{b}" for a, b in AXPY_DTYPES), dtype=dst.dtype.name)
        _require_compute(pipe, "Axpy", src.dtype)
        _require_compute(pipe, "Axpy", dst.dtype)
        n = self.count
        dst.check(n, write=True)
        src.check(n, write=False)
        if isinstance(self.scalar, LocalTensor):
            if self.scalar.dtype != src.dtype:
                raise SimulatorError(f"Axpy scalar operand is {self.scalar.dtype}, src is {src.dtype}; "
                                     f"the scalar has src's type")
            self.scalar.check_scalar()
        return _vector_cycles(pipe, "Axpy", dst.dtype.name, n)

    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        n = self.count
        src, dst = self.srcs[0], self.dst
        a = nx.to_f32(src.array(n))
        if isinstance(self.scalar, LocalTensor):
            s = np.float32(nx.to_f32(self.scalar.array(1))[0])
        else:
            s = np.float32(nx.const(cast(float, self.scalar), src.dtype))   # the scalar has src's type
        # the Muls step: fp16 x fp16 is exact in fp32, so the one rounding is to dst's dtype
        product = a * s
        out = dst.array(n)
        if dst.dtype == nx.FP32:
            np.add(product, out, out=out)
            return
        product = nx.to_f32(nx.round_to(product, dst.dtype))
        nx.cast_into(out, product + nx.to_f32(out), dst.dtype, "rint")     # the Add step

    def accesses(self, pipe: "Pipe") -> tuple[Access, ...]:
        # dst is an accumulator: read, then written
        return (local_access(self.dst, self.count * self.dst.dtype.itemsize, False),) + _vector_accesses(self)


# ---------------------------------------------------------------------------------------------
# Transpose
# ---------------------------------------------------------------------------------------------

# the dtypes of the basic 16x16 Transpose (docs/sources.md#transpose): uint16_t, int16_t, half;
# opsim has no uint16
TRANSPOSE_DTYPES = ("fp16", "int16")


class Transpose(VectorOp):
    """``Transpose(dst, src)``: the 16 x 16 matrix of 16-bit elements at src, transposed into dst
    (dst[16*j + i] = src[16*i + j]); no mask, no repeat. dst may be src (in place). Costed by the
    ``Transpose`` entry for 256 elements."""

    __slots__ = ()
    name = "Transpose"
    SIDE = 16

    def __init__(self, dst: LocalTensor, src: LocalTensor) -> None:
        super().__init__(dst, src, count=self.SIDE * self.SIDE)

    def issue(self, pipe: "Pipe") -> int:
        src, dst = self.srcs[0], self.dst
        if dst.dtype != src.dtype:
            raise SimulatorError(f"Transpose mixes {src.dtype} and {dst.dtype}; the two have one dtype")
        if dst.dtype.name not in TRANSPOSE_DTYPES:
            raise UnsupportedInstruction(f"Transpose of {dst.dtype}: it moves 16-bit elements, "
                                         f"{', '.join(TRANSPOSE_DTYPES)}", dtype=dst.dtype.name)
        dst.check(self.count, write=True)
        src.check(self.count, write=False)
        return _vector_cycles(pipe, "Transpose", "fp16", self.count)

    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        k = self.SIDE
        # a copy first: dst may be src
        t = self.srcs[0].array(k * k).reshape(k, k).T.copy()
        self.dst.array(k * k)[...] = t.reshape(-1)

    accesses = _vector_accesses


# ---------------------------------------------------------------------------------------------
# Brcb
# ---------------------------------------------------------------------------------------------

# the dtypes of Brcb on the Atlas A2/A3 parts (docs/sources.md#brcb): int16_t, uint16_t, int32_t,
# uint32_t, half, bfloat16_t, float; opsim has no uint16/uint32
BRCB_DTYPES = ("fp16", "bf16", "fp32", "int16", "int32")


def brcb_cost_dtype(dt: nx.DType) -> str:
    """The ``Brcb`` cost entry a dtype takes: the move prices bytes, so b16 types the fp16
    entry and b32 types the fp32 one (docs/sources.md#brcb)."""
    return "fp16" if dt.itemsize == 2 else "fp32"


class Brcb(VectorOp):
    """``Brcb(dst, src, repeatTime, {1, 8})``: each repeat takes 8 consecutive elements of src
    and fills one 32 B block of dst with each (dst[b * E + j] = src[b] for E = 32 B / element
    size), the 8 blocks one after another and the repeats too (the default strides: dst block
    stride 1 -- 0 means 1 -- and repeat stride 8 blocks). Pure data movement, bit for bit; src
    and dst may not overlap. ``count`` is the dst elements written (repeat x 256 B), the N of
    the ``Brcb`` cost entry."""

    __slots__ = ("repeat",)
    name = "Brcb"
    BLOCKS = 8          # blocks of dst, so elements of src, per repeat

    def __init__(self, dst: LocalTensor, src: LocalTensor, repeat: int) -> None:
        self.repeat = int(repeat)
        super().__init__(dst, src, count=self.repeat * self.BLOCKS * (32 // dst.dtype.itemsize))

    @property
    def src_count(self) -> int:
        return self.repeat * self.BLOCKS

    def issue(self, pipe: "Pipe") -> int:
        src, dst = self.srcs[0], self.dst
        if dst.dtype != src.dtype:
            raise SimulatorError(f"Brcb mixes {src.dtype} and {dst.dtype}; dst and src have one dtype")
        if dst.dtype.name not in BRCB_DTYPES:
            raise UnsupportedInstruction(f"Brcb of {dst.dtype}: it moves 16- or 32-bit elements, "
                                         f"{', '.join(BRCB_DTYPES)}", dtype=dst.dtype.name)
        dst.check(self.count, write=True)
        src.check(self.src_count, write=False)
        if overlaps(dst, self.count, src, self.src_count):
            raise SimulatorError(f"Brcb src {src!r} and dst {dst!r} overlap; the instruction does not "
                                 f"support src and dst in one memory range")
        return _vector_cycles(pipe, "Brcb", brcb_cost_dtype(dst.dtype), self.count)

    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional or not self.repeat:
            return
        src, dst = self.srcs[0], self.dst
        per_block = 32 // dst.dtype.itemsize
        # a broadcast assignment within one dtype: the bits move unchanged (NaN payloads too)
        dst.array(self.count).reshape(self.src_count, per_block)[...] = src.array(self.src_count)[:, None]

    def accesses(self, pipe: "Pipe") -> tuple[Access, ...]:
        src = self.srcs[0]
        return (local_access(self.dst, self.count * self.dst.dtype.itemsize, True),
                local_access(src, self.src_count * src.dtype.itemsize, False))


def overlaps(a: LocalTensor, a_count: int, b: LocalTensor, b_count: int) -> bool:
    """Whether the first ``a_count`` elements of a and ``b_count`` of b share a byte."""
    if a.memory_name != b.memory_name:
        return False
    a_end, b_end = a.addr + a_count * a.dtype.itemsize, b.addr + b_count * b.dtype.itemsize
    return a.addr < b_end and b.addr < a_end


# ---------------------------------------------------------------------------------------------
# Compare and select
# ---------------------------------------------------------------------------------------------

CMP_FNS = {"LT": np.less, "GT": np.greater, "EQ": np.equal, "LE": np.less_equal, "GE": np.greater_equal,
           "NE": np.not_equal}


def _check_mask(mask: LocalTensor, n: int, what: str, write: bool) -> int:
    nbytes = -(-n // 8)
    if mask.dtype.itemsize * mask.count < nbytes:
        raise MemoryFault(f"{what} mask of {mask.count} x {mask.dtype} is smaller than the {nbytes} B "
                          f"{n} elements need", address=mask.addr)
    mask.region.check(mask.addr, nbytes, write=write)
    return nbytes


class Compare(VectorOp):
    """``Compare(dst_mask, src0, src1|scalar, mode, count)``: bit i of the uint8 ``dst`` mask =
    src0[i] <mode> src1[i] (or the scalar). Costed by the CompareScalar / Compare entries."""

    __slots__ = ("mode",)
    name = "Compare"

    def __init__(self, dst: LocalTensor, src0: LocalTensor, src1: LocalTensor | None, mode: str,
                 count: int, scalar: float | LocalTensor | None = None) -> None:
        srcs = (src0,) if src1 is None else (src0, src1)
        super().__init__(dst, *srcs, scalar=scalar, count=count)
        if mode not in CMP_FNS:
            raise SimulatorError(f"Compare mode {mode!r} is not one of {', '.join(CMP_FNS)}")
        self.mode = mode

    def issue(self, pipe: "Pipe") -> int:
        src0 = self.srcs[0]
        dt = src0.dtype
        for s in self.srcs:
            if s.dtype != dt:
                raise SimulatorError(f"Compare mixes {s.dtype} and {dt}; Cast first")
        _require_compute(pipe, "Compare", dt)
        n = self.count
        for s in self.srcs:
            s.check(n, write=False)
        _check_mask(self.dst, n, "Compare", write=True)
        if isinstance(self.scalar, LocalTensor):
            self.scalar.check_scalar()
        op = "CompareScalar" if len(self.srcs) == 1 else "Compare"
        return _vector_cycles(pipe, op, dt.name, n)

    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        n = self.count
        dt = self.srcs[0].dtype
        a = nx.to_f32(self.srcs[0].array(n))
        b: np.ndarray | np.floating
        if len(self.srcs) == 2:
            b = nx.to_f32(self.srcs[1].array(n))
        elif isinstance(self.scalar, LocalTensor):
            b = np.float32(nx.to_f32(self.scalar.array(1))[0])
        else:
            b = np.float32(nx.const(cast(float, self.scalar), dt))   # one source: a scalar
        bits = CMP_FNS[self.mode](a, b)
        packed = np.packbits(bits, bitorder="little")
        self.dst.reinterpret(nx.UINT8).array(packed.size)[...] = packed

    def accesses(self, pipe: "Pipe") -> tuple[Access, ...]:
        n = self.count
        acc = [local_access(self.dst, -(-n // 8), True)]
        acc += [local_access(s, n * s.dtype.itemsize, False) for s in self.srcs]
        return tuple(acc)

    def describe(self) -> str:
        return f"Compare({self.mode}, {self.count} x {self.srcs[0].dtype})"

    def trace_args(self) -> tuple[int, int, int, str]:
        return self.count, 0, self.dst.addr, f"{self.mode} {self.srcs[0].dtype}"


class Select(VectorOp):
    """``Select(dst, mask, src0, src1|scalar, count)``: dst[i] = src0[i] if bit i of ``mask``
    else src1[i] (or the scalar)."""

    __slots__ = ("mask",)
    name = "Select"

    def __init__(self, dst: LocalTensor, mask: LocalTensor, src0: LocalTensor, src1: LocalTensor | None,
                 count: int, scalar: float | LocalTensor | None = None) -> None:
        srcs = (src0,) if src1 is None else (src0, src1)
        super().__init__(dst, *srcs, scalar=scalar, count=count)
        self.mask = mask

    def issue(self, pipe: "Pipe") -> int:
        cycles = super().issue(pipe)       # dtype, compute and bounds checks, the Select cost
        _check_mask(self.mask, self.count, "Select", write=False)
        return cycles

    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        n = self.count
        dt = self.dst.dtype
        nbytes = -(-n // 8)
        bits = np.unpackbits(self.mask.reinterpret(nx.UINT8).array(nbytes), bitorder="little")[:n].astype(bool)
        a = self.srcs[0].array(n)
        b: np.ndarray | np.generic
        if len(self.srcs) == 2:
            b = self.srcs[1].array(n)
        elif isinstance(self.scalar, LocalTensor):
            b = self.scalar.array(1)[0]
        else:
            b = nx.const(cast(float, self.scalar), dt)   # one source: a scalar
        self.dst.array(n)[...] = np.where(bits, a, b)

    def accesses(self, pipe: "Pipe") -> tuple[Access, ...]:
        return _vector_accesses(self) + (local_access(self.mask, -(-self.count // 8), False),)


# ---------------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------------

def tree_sum(x: np.ndarray) -> np.float32:
    """fp32 pairwise sum: pad to a power of two with -0.0, add adjacent pairs level by level.

    -0.0 is the additive identity of IEEE addition (x + -0.0 is x for every x, +0.0 included),
    so the padding changes nothing; +0.0 padding would turn a sum of negative zeros into +0.0
    whenever the count is not a power of two."""
    a = np.asarray(x, dtype=np.float32)
    if a.size == 0:
        return np.float32(0.0)
    size = 1 << (a.size - 1).bit_length()
    if size != a.size:
        a = np.concatenate([a, np.full(size - a.size, -0.0, dtype=np.float32)])
    while a.size > 1:
        a = a[0::2] + a[1::2]
    return np.float32(a[0])


def repeat_tree_sum(x: np.ndarray, per_repeat: int) -> np.float32:
    """The ReduceSum order: a tree sum within each 256 B repeat, then over the repeat sums."""
    a = np.asarray(x, dtype=np.float32)
    if a.size <= per_repeat:
        return tree_sum(a)
    sums = np.array([tree_sum(a[i:i + per_repeat]) for i in range(0, a.size, per_repeat)], dtype=np.float32)
    return repeat_tree_sum(sums, per_repeat)


class ReduceOp(VectorOp):
    """``ReduceSum/ReduceMax/ReduceMin(dst, src, work, count)``: dst[0] = reduction of src[:count]
    (fp32 accumulation, one rounding). ``work`` is the scratch the API requires (pyasc's
    ``shared_tmp_buffer``): it must hold at least :meth:`work_elements` elements -- Ascend C's
    documented minimum, docs/sources.md#reduce-work -- and lie inside its memory, or the call
    faults; what the API writes into it is not modelled (no bytes, no race or read checks)."""

    __slots__ = ("work",)
    kind: ClassVar[str] = "sum"
    # elements the first round writes per repeat: a sum; a max/min writes its value and index
    outputs_per_repeat: ClassVar[int] = 1

    def __init__(self, dst: LocalTensor, src: LocalTensor, work: LocalTensor | None, count: int) -> None:
        super().__init__(dst, src, count=count)
        self.work = work

    def issue(self, pipe: "Pipe") -> int:
        src = self.srcs[0]
        dt = self.dst.dtype
        if src.dtype != dt:
            raise SimulatorError(f"{self.name} mixes {src.dtype} and {dt}")
        _require_compute(pipe, self.name, dt)
        src.check(self.count, write=False)
        self.dst.check(1, write=True)
        self._check_work()
        return _vector_cycles(pipe, self.name, dt.name, self.count)

    def work_elements(self) -> int:
        """The least ``work`` Ascend C documents for this call, in elements of the operands'
        dtype: the first round's outputs -- ``count / elementsPerRepeat`` repeats of 256 B (C
        division; 1 below one repeat), times :attr:`outputs_per_repeat` -- rounded up to whole
        32 B blocks. Later rounds reuse that space."""
        item = self.dst.dtype.itemsize
        per_repeat, per_block = 256 // item, 32 // item
        first = max(1, self.count // per_repeat) * self.outputs_per_repeat
        return -(-first // per_block) * per_block

    def _check_work(self) -> None:
        work = self.work
        if work is None:        # a front-end that passes no scratch: nothing to check
            return
        dt = self.dst.dtype
        need = self.work_elements()
        need_bytes = need * dt.itemsize
        if work.count * work.dtype.itemsize < need_bytes:
            repeats = max(1, self.count // (256 // dt.itemsize))
            each = "1 result" if self.outputs_per_repeat == 1 else f"{self.outputs_per_repeat} results"
            raise MemoryFault(f"{self.name}'s work (shared_tmp_buffer) {work!r} holds {work.count} elements; "
                              f"{self.count} {dt} elements need at least {need} ({need_bytes} B: {repeats} "
                              f"repeat(s) of 256 B, {each} each, rounded up to a multiple of 32 B -- the minimum "
                              f"Ascend C documents for {self.name})", address=work.addr)
        work.check(-(-need_bytes // work.dtype.itemsize), write=True)

    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        n = self.count
        dt = self.dst.dtype
        a = nx.to_f32(self.srcs[0].array(n))
        if self.kind == "sum":
            v = repeat_tree_sum(a, max(1, 256 // dt.itemsize))
        elif self.kind == "max":
            v = np.float32(a.max())
        else:
            v = np.float32(a.min())
        self.dst.array(1)[...] = v if dt == nx.FP32 else nx.round_to(np.asarray([v], dtype=np.float32), dt)

    def accesses(self, pipe: "Pipe") -> tuple[Access, ...]:
        src = self.srcs[0]
        return (local_access(self.dst, self.dst.dtype.itemsize, True),
                local_access(src, self.count * src.dtype.itemsize, False))

    def describe(self) -> str:
        return f"{self.name}({self.count} x {self.dst.dtype})"


class ReduceSum(ReduceOp):
    __slots__ = ()
    name = "ReduceSum"
    kind = "sum"


class ReduceMax(ReduceOp):
    __slots__ = ()
    name = "ReduceMax"
    kind = "max"
    outputs_per_repeat = 2


class ReduceMin(ReduceOp):
    __slots__ = ()
    name = "ReduceMin"
    kind = "min"
    outputs_per_repeat = 2


class WholeReduce(VectorOp):
    """``WholeReduceSum/Max/Min(dst, src, mask, repeat, dst_rep_stride, 1, src_rep_stride)``:
    for each of ``repeat`` repeats, reduce the first ``mask`` elements of the repeat (which
    starts ``src_rep_stride`` 32 B blocks after the previous one) into dst[r * dst_rep_stride]
    (elements). Max/min with ``with_index`` also store the element's index within the repeat,
    its integer bits in the dtype's width, after the value (ReduceOrder.ORDER_VALUE_INDEX)."""

    __slots__ = ("mask", "repeat", "dst_rep_stride", "src_rep_stride", "with_index")
    kind: ClassVar[str] = "sum"

    def __init__(self, dst: LocalTensor, src: LocalTensor, mask: int, repeat: int, dst_rep_stride: int,
                 src_rep_stride: int, with_index: bool = False) -> None:
        super().__init__(dst, src, count=int(mask) * int(repeat))
        self.mask, self.repeat = int(mask), int(repeat)
        self.dst_rep_stride, self.src_rep_stride = int(dst_rep_stride), int(src_rep_stride)
        self.with_index = bool(with_index)

    def _spans(self) -> tuple[int, int]:
        """(src elements, dst elements) the instruction touches."""
        dt = self.dst.dtype
        step = self.src_rep_stride * 32 // dt.itemsize
        src_n = (self.repeat - 1) * step + self.mask
        width = 2 if self.with_index else 1
        dst_n = (self.repeat - 1) * self.dst_rep_stride + width
        return src_n, dst_n

    def issue(self, pipe: "Pipe") -> int:
        src = self.srcs[0]
        dt = self.dst.dtype
        if src.dtype != dt:
            raise SimulatorError(f"{self.name} mixes {src.dtype} and {dt}")
        _require_compute(pipe, self.name, dt)
        per = 256 // dt.itemsize
        if not 1 <= self.mask <= per:
            raise SimulatorError(f"{self.name} mask {self.mask} is not in 1..{per} for {dt}")
        src_n, dst_n = self._spans()
        src.check(src_n, write=False)
        self.dst.check(dst_n, write=True)
        return _vector_cycles(pipe, self.name, dt.name, self.mask * self.repeat)

    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        dt = self.dst.dtype
        src_n, dst_n = self._spans()
        step = self.src_rep_stride * 32 // dt.itemsize
        a = nx.to_f32(self.srcs[0].array(src_n))
        out = self.dst.array(dst_n)
        for r in range(self.repeat):
            seg = a[r * step:r * step + self.mask]
            if self.kind == "sum":
                v = tree_sum(seg)
            elif self.kind == "max":
                idx = int(np.argmax(seg))
                v = seg[idx]
            else:
                idx = int(np.argmin(seg))
                v = seg[idx]
            val = v if dt == nx.FP32 else nx.round_to(np.asarray([v], dtype=np.float32), dt)[0]
            out[r * self.dst_rep_stride] = val
            if self.with_index and self.kind != "sum":
                bits = np.asarray([idx], dtype=np.uint32 if dt.itemsize == 4 else np.uint16)
                out[r * self.dst_rep_stride + 1:r * self.dst_rep_stride + 2] = bits.view(dt.np_dtype)

    def accesses(self, pipe: "Pipe") -> tuple[Access, ...]:
        src_n, dst_n = self._spans()
        return (local_access(self.dst, dst_n * self.dst.dtype.itemsize, True),
                local_access(self.srcs[0], src_n * self.srcs[0].dtype.itemsize, False))

    def describe(self) -> str:
        return f"{self.name}(mask {self.mask}, repeat {self.repeat}, {self.dst.dtype})"


class WholeReduceSum(WholeReduce):
    __slots__ = ()
    name = "WholeReduceSum"
    kind = "sum"


class WholeReduceMax(WholeReduce):
    __slots__ = ()
    name = "WholeReduceMax"
    kind = "max"


class WholeReduceMin(WholeReduce):
    __slots__ = ()
    name = "WholeReduceMin"
    kind = "min"


# ---------------------------------------------------------------------------------------------
# Data movement
# ---------------------------------------------------------------------------------------------

class DataCopyPadValue(DataCopyPad):
    """``DataCopyPad`` GM -> UB with ``isPad``: after the ``count`` elements, ``right`` elements
    of the destination are filled with ``value`` (in the destination dtype) up to the 32 B block."""

    __slots__ = ("right", "value")

    def __init__(self, dst: LocalTensor, src: Any, count: int, right: int, value: float) -> None:
        super().__init__(dst, src, count)
        self.right, self.value = int(right), value

    def issue(self, pipe: "Pipe") -> Any:
        local = self.local
        if self.count + self.right > local.count:
            raise MemoryFault(f"DataCopyPad of {self.count} + {self.right} padding elements overruns "
                              f"{local!r}", address=local.addr)
        local.region.check(local.addr, (self.count + self.right) * local.dtype.itemsize, write=True)
        return super().issue(pipe)

    def complete(self, pipe: "Pipe") -> None:
        super().complete(pipe)
        if pipe.core.device.functional and self.right:
            arr = self.local.array(self.count + self.right)
            arr[self.count:] = nx.const(self.value, self.local.dtype)

    def accesses(self, pipe: "Pipe") -> tuple[Access, ...]:
        lo, hi = self.glob.byte_range(self.count)
        item = self.local.dtype.itemsize
        return (("GM", lo, hi - lo, False), local_access(self.local, (self.count + self.right) * item, True))




# ---------------------------------------------------------------------------------------------
# Cube: fractal-level LoadData (L1 -> L0A/L0B), the bias of a matmul tile
# ---------------------------------------------------------------------------------------------


FRACTAL_BYTES = 512     # one 16 x 32 B fractal (16 x 16 fp16/bf16)


class LoadData2D(CubeInstruction):
    """``LoadData(dst, src, LoadData2DParams)`` L1 -> L0A/L0B on MTE1, fractal by fractal: for
    i in 0..repeat-1 the 512 B fractal ``start + i * src_stride`` of ``src`` goes to position
    ``i`` (plus ``i * dst_gap`` fractals of gap) of ``dst``, transposed within the fractal if
    ``transpose`` (16-bit types). Costs bytes / rates.l1_to_l0a|b plus mte1.startup, as the
    matrix-level LoadData."""

    __slots__ = ("dst", "src", "start", "count", "src_stride", "dst_gap", "transpose")
    pipe = "MTE1"
    name = "LoadData"

    def __init__(self, dst: LocalTensor, src: LocalTensor, start: int, count: int, src_stride: int,
                 dst_gap: int = 0, transpose: bool = False) -> None:
        super().__init__(1)
        self.dst, self.src = dst, src
        self.start, self.count, self.src_stride = int(start), int(count), int(src_stride)
        self.dst_gap, self.transpose = int(dst_gap), bool(transpose)

    def _extent(self) -> tuple[int, int]:
        """(src bytes from src.addr, dst bytes from dst.addr) the instruction touches."""
        last_src = self.start + (self.count - 1) * self.src_stride
        return (last_src + 1) * FRACTAL_BYTES, (self.count + (self.count - 1) * self.dst_gap) * FRACTAL_BYTES

    def issue(self, pipe: "Pipe") -> int:
        _need_region(self.src, ("L1",), "LoadData source")
        _need_region(self.dst, ("L0A", "L0B"), "LoadData destination")
        if self.count < 1:
            raise SimulatorError(f"LoadData with repeat_times {self.count}")
        if self.transpose and self.src.dtype.itemsize != 2:
            raise UnsupportedInstruction(f"LoadData with transpose of {self.src.dtype} fractals "
                                         f"(modelled for 16-bit types)", dtype=self.src.dtype.name)
        src_b, dst_b = self._extent()
        for t, nb, w in ((self.src, src_b, False), (self.dst, dst_b, True)):
            if nb > t.count * t.dtype.itemsize:
                raise MemoryFault(f"LoadData touches {nb} B of {t!r}", address=t.addr)
            t.region.check(t.addr, nb, write=w)
        spec = pipe.core.device.spec
        to_a = self.dst.region.name == "L0A"
        rate = (spec.rates.l1_to_l0a if to_a else spec.rates.l1_to_l0b) or (
            spec.mte1.base if spec.mte1 is not None else 0.0)
        if rate <= 0:
            raise UnsupportedInstruction(f"{spec.name} has no L1->{self.dst.region.name} rate")
        startup = spec.mte1.startup if spec.mte1 is not None else 0
        # Pipe.head_cycles only while the head is pending (it returns 0 after), as the other
        # issue paths do: a call fewer per instruction
        return -(-self.count * FRACTAL_BYTES // int(rate)) + startup + (pipe.head_cycles() if pipe.head_pending else 0)

    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        src_b, dst_b = self._extent()
        s = self.src.reinterpret(nx.UINT8).array(src_b)
        d = self.dst.reinterpret(nx.UINT8).array(dst_b)
        for i in range(self.count):
            a = (self.start + i * self.src_stride) * FRACTAL_BYTES
            frac = s[a:a + FRACTAL_BYTES]
            if self.transpose:
                frac = frac.view(np.uint16).reshape(16, 16).T.copy().view(np.uint8).reshape(-1)
            o = i * (1 + self.dst_gap) * FRACTAL_BYTES
            d[o:o + FRACTAL_BYTES] = frac

    def accesses(self, pipe: "Pipe") -> tuple[Access, ...]:
        src_b, dst_b = self._extent()
        return (local_access(self.dst, dst_b, True), local_access(self.src, src_b, False))

    def describe(self) -> str:
        return (f"LoadData(L1->{self.dst.region.name}, {self.count} fractals from {self.start} stride "
                f"{self.src_stride}{', transpose' if self.transpose else ''})")

    def trace_args(self) -> tuple[int, int, int, str]:
        return 0, self.count * FRACTAL_BYTES, self.dst.addr, f"L1->{self.dst.region.name} {self.count} fractals"


class BiasFill(CubeInstruction):
    """The bias of a matmul tile: ``n`` fp32 values from GM broadcast over the ``m`` rows of an
    L0C tile (NZ), which the tile's Mmads then accumulate into. Ascend C moves the bias GM -> L1
    -> bias table and Mmad adds it; here that path is one GM read on MTE2 at the cube core's
    load rate (assumption: the bias-table hop is not timed)."""

    __slots__ = ("c", "bias", "c0", "m", "n")
    pipe = "MTE2"
    name = "BiasFill"

    def __init__(self, c: LocalTensor, bias: GmMatrix, c0: int, m: int, n: int) -> None:
        super().__init__(1)
        self.c, self.bias, self.c0, self.m, self.n = c, bias, int(c0), int(m), int(n)

    def issue(self, pipe: "Pipe") -> Any:
        _need_region(self.c, ("L0C",), "bias destination")
        if self.c.dtype != nx.FP32 or self.bias.dtype != nx.FP32:
            raise SimulatorError(f"the matmul bias and L0C are fp32, got {self.bias.dtype} -> {self.c.dtype}")
        _fit(self.c, nz_bytes(self.m, self.n, 4), f"bias of a {self.m} x {self.n} tile")
        self.c.check(nz_bytes(self.m, self.n, 4) // 4, write=True)
        self.bias._check_block(0, 1, self.c0, self.n)
        device = pipe.core.device
        lo, hi = self.bias.span(0, 1, self.c0, self.n)
        device.check_global(lo, hi - lo, write=False)
        return device.gm_transfer(pipe, lo, self.n * 4, write=False, model=cube_load_model(device.spec),
                                  startup_extra=pipe.head_cycles(self.n * 4) if pipe.head_pending else 0)

    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        row = self.bias.read(0, 1, self.c0, self.n)[0].astype(np.float32)
        m16, n16 = align16(self.m), align16(self.n)
        full = np.zeros((m16, n16), np.float32)
        full[:self.m, :self.n] = row
        self.c.array(m16 * n16)[...] = full.reshape(m16, n16 // 16, 16).transpose(1, 0, 2).reshape(-1)

    def accesses(self, pipe: "Pipe") -> tuple[Access, ...]:
        lo, hi = self.bias.span(0, 1, self.c0, self.n)
        return (("GM", lo, hi - lo, False), local_access(self.c, nz_bytes(self.m, self.n, 4), True))

    def describe(self) -> str:
        return f"BiasFill({self.m} x {self.n} fp32)"

    def trace_args(self) -> tuple[int, int, int, str]:
        return self.m * self.n, self.n * 4, self.bias.span(0, 1, self.c0, 1)[0], "GM->L0C bias"


# ---------------------------------------------------------------------------------------------
# Matmul client/server messages of mixed kernels (asc.adv.Matmul on AIV, served by the AIC)
# ---------------------------------------------------------------------------------------------

class KfcSetFlag(CrossCoreSetFlag):
    """A hand-off of the Matmul message channel between a vector core (client) and its cube core
    (server): ``channel`` ("req", "ready", "free", "done") and the vector core ``sub``; its own
    keys, so it never meets the kernel's cross-core flag ids."""

    __slots__ = ("channel", "sub")
    name = "KfcSetFlag"

    def __init__(self, channel: str, sub: int, pipe: str) -> None:
        super().__init__(0, 2, pipe)
        self.channel, self.sub = channel, int(sub)

    def complete(self, pipe: "Pipe") -> None:
        pipe.core.device.cross_flags.set(self.sync_keys(pipe)[0], pipe.last_slice)

    def sync_keys(self, pipe: "Pipe") -> list[tuple]:
        launch = pipe.core.launch
        assert launch is not None       # instructions run inside a launch
        group = launch.roles[pipe.core.name][0]
        return [(id(launch), group, "kfc", self.channel, self.sub)]

    def describe(self) -> str:
        return f"KfcSetFlag<{self._pipe}>({self.channel}, aiv {self.sub})"


class KfcWaitFlag(CrossCoreWaitFlag):
    __slots__ = ("channel", "sub")
    name = "KfcWaitFlag"

    def __init__(self, channel: str, sub: int, pipe: str) -> None:
        super().__init__(0, 2, pipe)
        self.channel, self.sub = channel, int(sub)

    def issue(self, pipe: "Pipe") -> Any:
        launch = pipe.core.launch
        assert launch is not None       # instructions run inside a launch
        group = launch.roles[pipe.core.name][0]
        self._key = (id(launch), group, "kfc", self.channel, self.sub)
        return pipe.core.device.cross_flags.wait(self._key, pipe.core.name + self._pipe, 1)

    def sync_need(self, pipe: "Pipe") -> tuple[tuple, int] | None:
        if self._key is None:
            return None
        return self._key, pipe.core.device.cross_flags._done.get((self._key, pipe.core.name + self._pipe), 1)

    def describe(self) -> str:
        return f"KfcWaitFlag<{self._pipe}>({self.channel}, aiv {self.sub})"


class KfcPoll(CrossCoreWaitFlag):
    """The cube core's scalar unit polling its Matmul message queue: completes once a message is
    there (``mailbox.event()``: a SimPy event that a vector core's request succeeds)."""

    __slots__ = ("mailbox",)
    pipe = "SCALAR"
    name = "KfcPoll"

    def __init__(self, mailbox: Any) -> None:
        super().__init__(0, 2, "SCALAR")
        self.mailbox = mailbox

    def issue(self, pipe: "Pipe") -> Any:
        return self.mailbox.event(pipe.core.env)

    def trace_sync(self, pipe: "Pipe") -> None:
        pass

    def sync_need(self, pipe: "Pipe") -> None:
        return None          # scheduling only: the data hand-offs are the Kfc flags

    def describe(self) -> str:
        return "KfcPoll(matmul messages)"


class DataCopyPad2D(DataCopyPad):
    """``DataCopyPad`` of ``blocks`` rows of ``run`` elements (DataCopyExtParams.blockCount > 1):
    the GM side is the strided view of the GlobalSlice; in UB each row starts 32 B aligned,
    ``pitch`` elements after the previous one (the row rounded up to 32 B plus the UB gap), as
    the hardware lays the rows out. One instruction, one transfer of blocks x run elements."""

    __slots__ = ("blocks", "run", "pitch")

    def __init__(self, dst: Any, src: Any, blocks: int, run: int, pitch: int) -> None:
        super().__init__(dst, src, int(blocks) * int(run))
        self.blocks, self.run, self.pitch = int(blocks), int(run), int(pitch)

    def _span(self) -> int:
        return (self.blocks - 1) * self.pitch + self.run

    def issue(self, pipe: "Pipe") -> Any:
        local = self.local
        span = self._span()
        if span > local.count:
            raise MemoryFault(f"DataCopyPad of {self.blocks} rows of {self.run} (UB pitch {self.pitch}) needs "
                              f"{span} elements of {local!r}", address=local.addr)
        local.check(span, write=not self._to_gm)
        return super().issue(pipe)

    def _rows(self) -> np.ndarray:
        arr = self.local.array(self.blocks * self.pitch if self.pitch >= self.run else self._span())
        return np.lib.stride_tricks.as_strided(arr, shape=(self.blocks, self.run),
                                               strides=(self.pitch * arr.itemsize, arr.itemsize))

    def complete(self, pipe: "Pipe") -> None:
        core = pipe.core
        if not core.device.functional:
            return
        if self._to_gm:
            values = np.ascontiguousarray(self._rows()).reshape(-1)
            if self._atomic:
                core.device.atomics.commit(self.glob, values)
            else:
                self.glob.write(values)
        else:
            self._rows()[...] = self.glob.read(self.count).reshape(self.blocks, self.run)

    def accesses(self, pipe: "Pipe") -> tuple[Access, ...]:
        glob, local = self.glob, self.local
        item = local.dtype.itemsize
        out = [(f"{local.core.name}/{local.region.name}", local.addr + r * self.pitch * item, self.run * item,
                not self._to_gm) for r in range(self.blocks)]
        out.extend((glob.memory_name(), a, n, self._to_gm) for a, n in glob.byte_runs(self.count))
        return tuple(out)

    def describe(self) -> str:
        d = "local->GM" if self._to_gm else "GM->local"
        return f"DataCopyPad({d}, {self.blocks} x {self.run} x {self.local.dtype}, UB pitch {self.pitch})"

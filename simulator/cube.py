"""Cube-core instructions and the synchronisation of mixed AIC/AIV kernels.

A cube core (AIC) moves a block of a matrix GM -> L1 on MTE2 (``CopyGmToL1``; ND sources are
converted to NZ on the way, as Ascend C's DataCopy with Nd2NzParams does), L1 -> L0A/L0B on MTE1
(``LoadData``), multiplies 16x16x16 fractals on CUBE (``Mmad``: fp16/bf16 in, fp32 accumulated
in L0C, overwrite or accumulate) and writes L0C -> GM on FIXP (``Fixpipe``, rounding once to the
output dtype). The vector side of a mixed kernel writes the matrices the cube reads in NZ
(``CopyUbToNz`` on MTE3). ``CrossCoreSetFlag`` / ``CrossCoreWaitFlag`` order a cube core and
its vector cores (the device-level table is :class:`simulator.device.CrossCoreFlags`).

Layouts (16 is the fractal edge for fp16/bf16: INI DtypeMKN 16x16x16, docs/sources.md#soc-a2-a3):

- ND: row-major rows x cols (row and column strides in elements).
- NZ (FRACTAL_NZ; GM workspaces, L1, L0C): 16-column blocks outermost; inside a block the rows
  (padded to a multiple of 16) in order, 16 contiguous elements each. Element (r, c) of an R x C
  matrix sits at (c // 16) * R16 * 16 + r * 16 + c % 16 with R16 = ceil(R / 16) * 16.
- L0A (zZ): the fractals of the m x k left matrix row-major over (m1, k1), each row-major.
- L0B (nZ): the fractals of the k x n right matrix row-major over (k1, n1), each column-major
  (n0 outer, k0 inner).

Padding elements written to L1/L0 are zero; ``Mmad`` reads exactly the m x k and k x n it is
given and ``Fixpipe`` writes exactly m x n, so padding never reaches a result.

Timing: a GM -> L1 load misses L2 at the per-AI-core ``rates.gm_read`` (INI ddr_read_rate,
assumption A-3 that these rates are per AIC) on the HBM link and hits at ``rates.l2_read`` on
the L2 link, with the calibrated MTE2 start-up; ``LoadData`` costs bytes / rate
(``rates.l1_to_l0a`` = 512 or ``rates.l1_to_l0b`` = 256 B/cycle) plus ``mte1.startup``; ``Mmad``
costs the padded fractal MACs / ``cube.macs_per_cycle[dtype]``; ``Fixpipe`` writes at
``fixp.base`` on the HBM link (allocating in L2, as every store does).

Coarse instructions (timing only): ``repeat`` > 1 makes one instruction stand for ``repeat``
back-to-back instructions on the same buffers. The extent along K it is given is the total of
the repeats; each repeat's tile must fit the buffer; the pipe is busy for the sum of the
repeats' costs. A huge timing run then needs far fewer simulation events; such a launch may
also sample the L2 (``Device.launch(l2_sample=P)``, simulator/l2.py).
Numeric (full-mode) runs use ``repeat = 1`` and show the L2 every run.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from opsim.devices.spec import DmaModel
from opsim.simulator import numerics as nx
from opsim.simulator.errors import CapacityError, MemoryFault, SimulatorError, UnsupportedInstruction
from opsim.simulator.isa import Instruction, data_only
from opsim.simulator.tile import GlobalTensor, LocalTensor

if TYPE_CHECKING:  # pragma: no cover
    from opsim.simulator.core import Pipe
    from opsim.simulator.device import Device

FRACTAL = 16


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def align16(x: int) -> int:
    """Round up to a whole number of 16-element fractal edges."""
    return -(-x // FRACTAL) * FRACTAL


def nz_bytes(rows: int, cols: int, itemsize: int) -> int:
    """Bytes of an NZ (or zZ/nZ) image of a rows x cols matrix, padding included."""
    # align16 inline: every cube instruction's issue calls this several times
    return -(-rows // FRACTAL) * FRACTAL * (-(-cols // FRACTAL) * FRACTAL) * itemsize


# ---------------------------------------------------------------------------------------------
# Layout conversions (numpy; used by the numeric effects and by tests)
# ---------------------------------------------------------------------------------------------

def nd_to_nz(mat: np.ndarray) -> np.ndarray:
    """An R x C matrix as its NZ image [C16/16, R16, 16] (flattened order), zero padded."""
    r, c = mat.shape
    pad = np.zeros((align16(r), align16(c)), dtype=mat.dtype)
    pad[:r, :c] = mat
    return pad.reshape(align16(r), align16(c) // FRACTAL, FRACTAL).transpose(1, 0, 2)


def nz_to_nd(img: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The rows x cols matrix held in an NZ image (any shape with the right element count)."""
    r16, c16 = align16(rows), align16(cols)
    blocks = np.asarray(img).reshape(c16 // FRACTAL, r16, FRACTAL)
    return blocks.transpose(1, 0, 2).reshape(r16, c16)[:rows, :cols]


def _to_zz(mat: np.ndarray) -> np.ndarray:
    """L0A layout of an m x k matrix: fractals row-major over (m1, k1), each row-major."""
    m, k = mat.shape
    pad = np.zeros((align16(m), align16(k)), dtype=mat.dtype)
    pad[:m, :k] = mat
    m1, k1 = align16(m) // FRACTAL, align16(k) // FRACTAL
    return pad.reshape(m1, FRACTAL, k1, FRACTAL).transpose(0, 2, 1, 3)


def _from_zz(flat: np.ndarray, m: int, k: int) -> np.ndarray:
    m1, k1 = align16(m) // FRACTAL, align16(k) // FRACTAL
    return flat.reshape(m1, k1, FRACTAL, FRACTAL).transpose(0, 2, 1, 3).reshape(m1 * 16, k1 * 16)[:m, :k]


def _to_nz_l0b(mat: np.ndarray) -> np.ndarray:
    """L0B layout of a k x n matrix: fractals row-major over (k1, n1), each column-major."""
    k, n = mat.shape
    pad = np.zeros((align16(k), align16(n)), dtype=mat.dtype)
    pad[:k, :n] = mat
    k1, n1 = align16(k) // FRACTAL, align16(n) // FRACTAL
    return pad.reshape(k1, FRACTAL, n1, FRACTAL).transpose(0, 2, 3, 1)


def _from_nz_l0b(flat: np.ndarray, k: int, n: int) -> np.ndarray:
    k1, n1 = align16(k) // FRACTAL, align16(n) // FRACTAL
    return flat.reshape(k1, n1, FRACTAL, FRACTAL).transpose(0, 3, 1, 2).reshape(k1 * 16, n1 * 16)[:k, :n]


# ---------------------------------------------------------------------------------------------
# A matrix in GM as the cube sees it
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GmMatrix:
    """A 2-D matrix in GM: ND (row-major, with element strides) or NZ (FRACTAL_NZ).

    ``addr`` is the byte address of the storage, ``offset`` the element offset of (0, 0).
    """

    device: "Device"
    addr: int
    dtype: nx.DType
    rows: int
    cols: int
    layout: str = "ND"
    row_stride: int = 0
    col_stride: int = 1
    offset: int = 0

    @staticmethod
    def nd(t: GlobalTensor) -> "GmMatrix":
        """The ND matrix a 2-D GlobalTensor views (its strides and offset are kept)."""
        if len(t.shape) != 2:
            raise SimulatorError(f"a cube operand must be 2-D, got shape {t.shape}")
        return GmMatrix(t.device, t.addr, t.dtype, t.shape[0], t.shape[1], "ND", t.strides[0],
                        t.strides[1], t.offset)

    @staticmethod
    def nz(device: "Device", addr: int, dtype: Any, rows: int, cols: int) -> "GmMatrix":
        """An NZ matrix (a workspace written by the vector side) at ``addr``."""
        return GmMatrix(device, addr, nx.dtype(dtype), rows, cols, "NZ")

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Storage bytes (NZ: with the padding of rows and columns to 16)."""
        if self.layout == "NZ":
            return nz_bytes(self.rows, self.cols, self.itemsize)
        return self.rows * self.cols * self.itemsize

    def _check_block(self, r0: int, nr: int, c0: int, nc: int) -> None:
        if nr <= 0 or nc <= 0 or r0 < 0 or c0 < 0 or r0 + nr > self.rows or c0 + nc > self.cols:
            raise MemoryFault(f"block rows [{r0}, {r0 + nr}) x cols [{c0}, {c0 + nc}) is outside the "
                              f"{self.rows} x {self.cols} {self.layout} matrix at {self.addr:#x}",
                              address=self.addr)
        if self.layout == "NZ" and c0 % FRACTAL:
            raise SimulatorError(f"an NZ block must start on a 16-column boundary, got column {c0}")

    def run_geometry(self, r0: int, nr: int, c0: int, nc: int) -> tuple[int, int, int, int]:
        """(first address, stride, bytes per run, runs): a block is equally spaced runs."""
        item = self.dtype.itemsize      # (the itemsize property and align16 inline: per cube copy)
        if self.layout == "NZ":
            r16 = -(-self.rows // FRACTAL) * FRACTAL
            nblk = ceil_div(c0 % FRACTAL + nc, FRACTAL)
            lo = self.addr + (self.offset + (c0 // FRACTAL) * r16 * FRACTAL + r0 * FRACTAL) * item
            if nr == r16:   # whole columns of blocks are contiguous
                return lo, 0, nblk * r16 * FRACTAL * item, 1
            return lo, r16 * FRACTAL * item, nr * FRACTAL * item, nblk
        rs, cs = self.row_stride, self.col_stride
        base = self.addr + (self.offset + r0 * rs + c0 * cs) * item
        if cs == 1 and (rs == nc or nr == 1):   # whole rows (or one row): one run
            return base, 0, nr * nc * item, 1
        return base, rs * item, ((nc - 1) * cs + 1) * item, nr

    def runs(self, r0: int, nr: int, c0: int, nc: int) -> list[tuple[int, int]]:
        """The contiguous (address, bytes) runs of a block, in address order."""
        a0, stride, run, count = self.run_geometry(r0, nr, c0, nc)
        return [(a0 + i * stride, run) for i in range(count)]

    def span(self, r0: int, nr: int, c0: int, nc: int) -> tuple[int, int]:
        """[lo, hi): the bytes from the first to the last element of the block."""
        item = self.dtype.itemsize      # (the itemsize property and align16 inline: per cube copy)
        if self.layout == "NZ":
            r16 = -(-self.rows // FRACTAL) * FRACTAL
            first, last = c0 // FRACTAL, (c0 + nc - 1) // FRACTAL
            lo = self.addr + (self.offset + first * r16 * FRACTAL + r0 * FRACTAL) * item
            hi = self.addr + (self.offset + last * r16 * FRACTAL + (r0 + nr) * FRACTAL) * item
            return lo, hi
        rs, cs = self.row_stride, self.col_stride
        lo = self.addr + (self.offset + r0 * rs + c0 * cs) * item
        hi = self.addr + (self.offset + (r0 + nr - 1) * rs + (c0 + nc - 1) * cs + 1) * item
        return lo, hi

    def _view(self, r0: int, nr: int, c0: int, nc: int, write: bool) -> np.ndarray:
        """A (nr, nc) numpy view of the block in device memory (NZ: of its 16-column blocks)."""
        lo, hi = self.span(r0, nr, c0, nc)
        raw = self.device.global_view(lo, hi - lo, write=write).view(self.dtype.np_dtype)
        item = self.itemsize
        if self.layout == "NZ":
            r16 = align16(self.rows)
            nblk = ceil_div(nc, FRACTAL)
            return np.lib.stride_tricks.as_strided(
                raw, shape=(nblk, nr, FRACTAL), strides=(r16 * FRACTAL * item, FRACTAL * item, item),
                writeable=write)
        return np.lib.stride_tricks.as_strided(
            raw, shape=(nr, nc), strides=(self.row_stride * item, self.col_stride * item), writeable=write)

    def read(self, r0: int, nr: int, c0: int, nc: int) -> np.ndarray:
        """The block as an (nr, nc) array (a copy)."""
        self._check_block(r0, nr, c0, nc)
        v = self._view(r0, nr, c0, nc, write=False)
        if self.layout == "NZ":
            return v.transpose(1, 0, 2).reshape(nr, -1)[:, :nc].copy()
        return v.copy()

    def write(self, r0: int, c0: int, values: np.ndarray) -> None:
        """Store an (nr, nc) array at (r0, c0) (NZ: whole 16-column blocks, the tail padded)."""
        nr, nc = values.shape
        self._check_block(r0, nr, c0, min(nc, self.cols - c0) if self.layout == "NZ" else nc)
        v = self._view(r0, nr, c0, nc, write=True)
        if self.layout == "NZ":
            nblk = ceil_div(nc, FRACTAL)
            pad = np.zeros((nr, nblk * FRACTAL), dtype=self.dtype.np_dtype)
            pad[:, :nc] = values
            v[...] = pad.reshape(nr, nblk, FRACTAL).transpose(1, 0, 2)
        else:
            v[...] = values


def _l2_geometry(device: "Device", geometry: tuple[int, int, int, int]) -> tuple[int, int, int, int] | None:
    """The runs the L2 model is shown for a strided transfer of equally spaced runs
    ``geometry`` = (first address, stride, bytes per run, runs), as such a geometry (None
    without an L2).

    Runs closer together than one L2 line are merged: no line lies wholly in such a gap, so
    the merged run touches exactly the lines the runs touch (the hit fraction is then taken
    over the merged bytes; Device.gm_transfer scales it to the transfer, and samples the lines
    in a launch with ``l2_sample``).
    """
    a0, stride, run, count = geometry
    l2 = device.l2
    if l2 is None or count == 0:
        return None
    if count > 1 and stride - run < l2.chunk:   # gaps shorter than a line: one run
        run, count = (count - 1) * stride + run, 1
    return a0, stride, run, count


@functools.lru_cache(maxsize=1024)
def _shared_line_bytes(pieces: tuple[tuple[int, int, int, int], ...], phase: int, line: int) -> int:
    """Bytes of each piece (equally spaced runs: offset from the first piece's address, stride,
    bytes per run, runs) in a ``line``-byte line that the piece before touches, the first
    piece's address being ``phase`` bytes into a line. Pieces share no bytes, so a shared line
    holds the end or the start of a run of each: only the runs' first and last lines count."""
    total = 0
    prev: np.ndarray | None = None
    for off, stride, run, count in pieces:
        starts = phase + off + stride * np.arange(count, dtype=np.int64)
        ends = starts + run
        first, last = starts // line, (ends - 1) // line
        if prev is not None:
            head = np.isin(first, prev)
            total += int(np.minimum(run, (first + 1) * line - starts)[head].sum())
            tail = np.isin(last, prev) & (last != first)
            total += int((ends - last * line)[tail].sum())
        prev = np.concatenate((first, last))
    return total


def _fit(t: LocalTensor, need: int, what: str, *args: Any) -> None:
    """A tile of ``need`` bytes must fit the buffer ``t`` (and its memory). ``what`` names the
    tile in the message, formatted with ``args`` only when there is one to make (every cube
    instruction's issue checks its tiles; formatting the names each time cost more than the
    checks)."""
    region = t.region
    if need <= region.size and need <= t.count * t.dtype.itemsize:
        return
    if args:
        what = what.format(*args)
    if need > region.size:
        raise CapacityError(f"{what} needs {need} B of {region.name}, which holds {region.size} B",
                            buffer=region.name, needed=need, available=region.size)
    have = t.count * t.dtype.itemsize
    if need > have:
        raise MemoryFault(f"{what} needs {need} B, more than its {region.name} buffer of {have} B "
                          f"at {t.addr:#x}", address=t.addr)


def _gm_accesses(m: GmMatrix, r0: int, nr: int, c0: int, nc: int,
                 write: bool) -> list[tuple[str, int, int, bool]]:
    """``Instruction.accesses`` entries of a block of a GM matrix (its runs; NZ: whole
    16-column blocks, padding included, as the transfer writes them)."""
    return [("GM", a, n, write) for a, n in m.runs(r0, nr, c0, nc)]


def _local_bytes(t: LocalTensor, nbytes: int, write: bool) -> tuple[str, int, int, bool]:
    """An access of ``nbytes`` from the start of ``t`` (at most the tensor)."""
    return (t.memory_name, t.addr, min(nbytes, t.count * t.dtype.itemsize), write)


def _need_region(t: LocalTensor, names: tuple[str, ...], what: str) -> None:
    if t.region.name not in names:
        raise SimulatorError(f"{what} must be in {' or '.join(names)}, got a {t.region.name} tensor")


def _timing_only(pipe: "Pipe", instr: "CubeInstruction") -> None:
    if instr.repeat > 1 and pipe.core.device.functional:
        raise SimulatorError(f"{instr.name} with repeat={instr.repeat} is a timing-only coarse "
                             f"instruction; numeric runs issue one instruction per tile")


def cube_load_model(spec: Any) -> DmaModel:
    """GM -> L1 on a cube core: the per-AI-core INI ddr_read_rate (assumption A-3) with the
    calibrated MTE2 start-up and head; L2 hits go at rates.l2_read (Device.gm_transfer)."""
    m = spec.mte2
    return DmaModel(base=spec.rates.gm_read or m.base, startup=m.startup, head=m.head,
                    head_per_block=m.head_per_block, head_large=m.head_large,
                    head_large_per_block=m.head_large_per_block, head_large_from=m.head_large_from)


# Costs that depend only on the device spec and an instruction's shape, computed once per
# (spec, shape): every L1 chunk of a tiled matmul issues the same handful of shapes, and
# recomputing them was a visible share of the cube instructions' issue cost. The spec is kept
# in the value so that its id is not reused while the entry lives.
_SPEC_MEMO: dict[int, tuple[Any, dict]] = {}
# (the spec of the latest _spec_memo call, its memo): the cube instructions of a run all ask
# for the same spec, and an issue tests ``spec is _LAST[0]`` instead of making the call. One
# tuple, read once and replaced whole: two globals could be paired across threads
_LAST: tuple[Any, dict] = (None, {})


def _spec_memo(spec: Any) -> dict:
    """The per-spec memo of shape-derived costs (``cube_load_model``, Mmad cycles, MTE1 rates)."""
    global _LAST
    entry = _SPEC_MEMO.get(id(spec))
    if entry is None or entry[0] is not spec:
        if len(_SPEC_MEMO) > 64:
            _SPEC_MEMO.clear()
        entry = _SPEC_MEMO[id(spec)] = (spec, {})
    _LAST = (spec, entry[1])
    return entry[1]


def _cube_load_model_of(spec: Any) -> DmaModel:
    """:func:`cube_load_model`, made once per spec (a frozen value)."""
    memo = _spec_memo(spec)
    model = memo.get("load")
    if model is None:
        model = memo["load"] = cube_load_model(spec)
    return model


class CubeInstruction(Instruction):
    """Base of the cube instructions: a ``repeat`` count (coarse timing-only instructions)."""

    __slots__ = ("repeat",)

    def __init__(self, repeat: int = 1) -> None:
        super().__init__()
        if repeat < 1:
            raise SimulatorError(f"repeat must be >= 1, got {repeat}")
        self.repeat = int(repeat)


# ---------------------------------------------------------------------------------------------
# MTE2: GM -> L1 (ND -> NZ on the way)
# ---------------------------------------------------------------------------------------------

class CopyGmToL1(CubeInstruction):
    """``DataCopy`` GM -> L1 of the block rows [r0, r0+nr) x cols [c0, c0+nc) of ``src``.

    L1 receives the NZ image of the block (rows and columns padded to 16 with zeros): an ND
    source is converted on the way (Nd2NzParams), an NZ source is copied block by block.
    With ``repeat`` > 1 the block is ``repeat`` equal pieces along ``repeat_axis`` ("cols" or
    "rows"), each of which must fit ``dst``.
    """

    __slots__ = ("dst", "src", "r0", "nr", "c0", "nc", "repeat_axis", "_nbytes")
    pipe = "MTE2"
    name = "DataCopy"

    def __init__(self, dst: LocalTensor, src: GmMatrix, r0: int, nr: int, c0: int, nc: int, *,
                 repeat: int = 1, repeat_axis: str = "cols") -> None:
        # CubeInstruction.__init__ inline (here and in LoadData, Mmad): one call per instruction
        self.tile, self.origin = -1, None
        if repeat < 1:
            raise SimulatorError(f"repeat must be >= 1, got {repeat}")
        # int() only where an operand is not an int already (a numpy integer, a bool): the
        # kernels pass ints, and the conversions were a C call per field (here, in LoadData and
        # Mmad: 54 per FLCE L1 chunk); the stored values are the same
        if not (type(r0) is type(nr) is type(c0) is type(nc) is type(repeat) is int):
            r0, nr, c0, nc, repeat = int(r0), int(nr), int(c0), int(nc), int(repeat)
        self.repeat = repeat
        self.dst, self.src = dst, src
        self.r0, self.nr, self.c0, self.nc = r0, nr, c0, nc
        self.repeat_axis = repeat_axis
        self._nbytes = self.nr * self.nc * src.dtype.itemsize

    def piece(self) -> tuple[int, int]:
        """Rows x cols of one repeat."""
        if self.repeat_axis == "rows":
            return ceil_div(self.nr, self.repeat), self.nc
        return self.nr, ceil_div(self.nc, self.repeat)

    def issue(self, pipe: "Pipe") -> simpy.Event:
        # the checks in the order they always ran, each helper called only where it raises;
        # the piece and its NZ bytes from the per-spec memo (two per L1 chunk, a few shapes)
        if self.repeat > 1:
            _timing_only(pipe, self)
        dst, src = self.dst, self.src
        reg = dst.region
        if reg.name != "L1":
            _need_region(dst, ("L1",), "DataCopy GM->L1 destination")
        item = src.dtype.itemsize
        if dst.dtype.itemsize != item:
            raise SimulatorError(f"DataCopy between {src.dtype} and {dst.dtype}: DMA does not convert")
        r0, nr, c0, nc = self.r0, self.nr, self.c0, self.nc
        if (nr <= 0 or nc <= 0 or r0 < 0 or c0 < 0 or r0 + nr > src.rows or c0 + nc > src.cols
                or (src.layout == "NZ" and c0 % FRACTAL)):
            src._check_block(r0, nr, c0, nc)    # raises
        device = pipe.core.device
        spec = device.spec
        last = _LAST
        memo = last[1] if last[0] is spec else _spec_memo(spec)
        key = ("CopyGmToL1", nr, nc, self.repeat, self.repeat_axis, item)
        try:                    # (a subscript, not memo.get: no call on a hit)
            plan = memo[key]
        except KeyError:
            pr, pc = self.piece()
            plan = memo[key] = (pr, pc, nz_bytes(pr, pc, item))
        pr, pc, need = plan
        if need > reg.size or need > dst.count * item:
            _fit(dst, need, "DataCopy of a {} x {} {} block", pr, pc, src.dtype)    # raises
        # LocalTensor.check, inline where it would pass (as in Mmad.issue; the count fits)
        addr = dst.addr
        if (reg.backing == "allocation" or addr % reg.alignment or addr < reg.base or addr + need > reg.end
                or reg.read_only):
            dst.check(need // item, write=True)
        lo, hi = src.span(r0, nr, c0, nc)
        gm = device.gm
        if gm.base <= lo < hi <= gm.end:     # Device.check_global in one call (as GlobalSlice.check)
            gm._locate(lo, hi - lo, False, 1)
        else:
            device.check_global(lo, hi - lo, write=False)
        model = memo["load"] if "load" in memo else _cube_load_model_of(spec)
        geo = _l2_geometry(device, src.run_geometry(r0, nr, c0, nc))
        rehit = self._rehit(device.l2.chunk, pr, pc) if self.repeat > 1 and device.l2 is not None else 0
        return device.gm_transfer(pipe, lo, self._nbytes, write=False, model=model, geometry=geo, rehit=rehit,
                                  # one load is one repeat's piece (the head's load size, A-10)
                                  startup_extra=(pipe.head_cycles(pr * pc * item) if pipe.head_pending else 0)
                                  + (self.repeat - 1) * model.startup)

    def _rehit(self, line: int, pr: int, pc: int) -> int:
        """Bytes of this coarse copy's pieces (``repeat`` of ``pr`` x ``pc``) that lie in an L2
        line the piece before also touches: the exact schedule loads the pieces one by one, so
        its later piece finds such a line in the L2 (the earlier one brought it in); the coarse
        copy walks the line once (Device.gm_transfer). Rows whose byte stride is not a multiple
        of the line (H = 4000 bf16: 8000 B) share a line at every K-chunk boundary; at a
        512 B K-chunk of 512 B lines that is half the exact schedule's bytes."""
        src = self.src
        r0, nr, c0, nc = self.r0, self.nr, self.c0, self.nc
        if self.repeat_axis == "rows":
            pieces = [src.run_geometry(r, min(pr, r0 + nr - r), c0, nc) for r in range(r0, r0 + nr, pr)]
        else:
            pieces = [src.run_geometry(r0, nr, c, min(pc, c0 + nc - c)) for c in range(c0, c0 + nc, pc)]
        a0 = pieces[0][0]
        return _shared_line_bytes(tuple((a - a0, st, run, n) for a, st, run, n in pieces), a0 % line, line)

    @data_only
    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        block = self.src.read(self.r0, self.nr, self.c0, self.nc)
        img = nd_to_nz(block).reshape(-1)
        self.dst.reinterpret(self.src.dtype).array(img.size)[...] = img

    def accesses(self, pipe: "Pipe") -> tuple[tuple[str, int, int, bool], ...]:
        pr, pc = self.piece()
        return (*_gm_accesses(self.src, self.r0, self.nr, self.c0, self.nc, False),
                _local_bytes(self.dst, nz_bytes(pr, pc, self.src.itemsize), True))

    def describe(self) -> str:
        kind = "ND2NZ" if self.src.layout == "ND" else "NZ"
        return f"DataCopy(GM->L1 {kind}, {self.nr} x {self.nc} {self.src.dtype}, repeat {self.repeat})"

    def trace_args(self) -> tuple[int, int, int, str]:
        # the profiler asks every copy for its bytes: the detail text is made once per shape
        src = self.src
        key = (src.layout, self.nr, self.nc, src.dtype.name)
        detail = _COPY_DETAIL.get(key)
        if detail is None:
            detail = _COPY_DETAIL[key] = (f"GM->L1 {'ND2NZ' if src.layout == 'ND' else 'NZ'} "
                                          f"{self.nr}x{self.nc} {src.dtype}")
        return self.nr * self.nc, self._nbytes, src.span(self.r0, 1, self.c0, self.nc)[0], detail


_COPY_DETAIL: dict[tuple[str, int, int, str], str] = {}


# ---------------------------------------------------------------------------------------------
# MTE1: L1 -> L0A / L0B
# ---------------------------------------------------------------------------------------------

class LoadData(CubeInstruction):
    """``LoadData`` L1 -> L0A (left matrix, zZ) or L0B (right matrix, nZ) on MTE1.

    ``src`` holds the NZ image of a ``src_rows`` x ``src_cols`` block (as ``CopyGmToL1`` left
    it); the tile is its rows [r0, r0+nr) x cols [c0, c0+nc), transposed if ``transpose``
    (LoadData2DParams.ifTranspose). For L0A the tile is m x k, for L0B k x n. With ``repeat``
    > 1 the K extent is the total of ``repeat`` equal loads.
    """

    __slots__ = ("dst", "src", "src_rows", "src_cols", "r0", "nr", "c0", "nc", "transpose", "_bytes")
    pipe = "MTE1"
    name = "LoadData"

    def __init__(self, dst: LocalTensor, src: LocalTensor, src_rows: int, src_cols: int, r0: int, nr: int,
                 c0: int, nc: int, *, transpose: bool = False, repeat: int = 1) -> None:
        self.tile, self.origin = -1, None
        if repeat < 1:
            raise SimulatorError(f"repeat must be >= 1, got {repeat}")
        # int() and bool() only where needed, as in CopyGmToL1
        if not (type(src_rows) is type(src_cols) is type(r0) is type(nr) is type(c0) is type(nc)
                is type(repeat) is int):
            src_rows, src_cols, repeat = int(src_rows), int(src_cols), int(repeat)
            r0, nr, c0, nc = int(r0), int(nr), int(c0), int(nc)
        self.repeat = repeat
        self.dst, self.src = dst, src
        self.src_rows, self.src_cols = src_rows, src_cols
        self.r0, self.nr, self.c0, self.nc = r0, nr, c0, nc
        self.transpose = transpose if type(transpose) is bool else bool(transpose)
        # nz_bytes of tile_shape(), inline (one LoadData per base-K slice of every L1 chunk)
        self._bytes = -(-self.nr // FRACTAL) * FRACTAL * (-(-self.nc // FRACTAL) * FRACTAL) * src.dtype.itemsize

    def tile_shape(self) -> tuple[int, int]:
        return (self.nc, self.nr) if self.transpose else (self.nr, self.nc)

    def piece(self) -> tuple[int, int]:
        rows, cols = self.tile_shape()
        if self.dst.region.name == "L0B":   # k x n: K is the rows
            return ceil_div(rows, self.repeat), cols
        return rows, ceil_div(cols, self.repeat)

    def issue(self, pipe: "Pipe") -> int:
        """The checks and cost of :meth:`_issue_checked`, with the shape-derived numbers taken
        from a per-spec memo; any check that would fail goes the long way, which raises the
        same error in the same order."""
        if self.repeat > 1:
            _timing_only(pipe, self)
        dst, src = self.dst, self.src
        dreg, item = dst.region, src.dtype.itemsize
        dname = dreg.name
        spec = pipe.core.device.spec
        last = _LAST
        memo = last[1] if last[0] is spec else _spec_memo(spec)
        key = ("LoadData", dname, self.transpose, self.nr, self.nc, self.repeat, self.src_rows, self.src_cols,
               item, self._bytes)
        try:                    # (a subscript, not memo.get: no call on a hit)
            plan = memo[key]
        except KeyError:
            plan = memo[key] = self._plan(spec, dname, item)
        if (plan[2] < 0 or src.region.name != "L1" or dst.dtype.itemsize != item
                or plan[0] > dreg.size or plan[0] > dst.count * item):
            return self._issue_checked(pipe)
        need, have, cost = plan
        # LocalTensor.check of both tiles, inline where it would pass (as in Mmad.issue)
        addr = dst.addr
        if (dreg.backing == "allocation" or addr % dreg.alignment or addr < dreg.base or addr + need > dreg.end
                or dreg.read_only):
            dst.check(need // item, write=True)
        if self.repeat == 1:
            sreg = src.region
            if (self.r0 < 0 or self.c0 < 0 or self.r0 + self.nr > self.src_rows
                    or self.c0 + self.nc > self.src_cols or have > sreg.size or have > src.count * item):
                return self._issue_checked(pipe)
            addr = src.addr
            if sreg.backing == "allocation" or addr % sreg.alignment or addr < sreg.base or addr + have > sreg.end:
                src.check(have // item, write=False)
        return cost + (pipe.head_cycles() if pipe.head_pending else 0)   # (a call only while due)

    def _plan(self, spec: Any, dname: str, item: int) -> tuple[int, int, int]:
        """(bytes of one repeat's tile, bytes of the L1 block, cycles without the head) of this
        shape on ``spec``; cycles -1 where :meth:`_issue_checked` raises (no rate, not a L0
        destination)."""
        rows, cols = self.tile_shape()
        pr, pc = (ceil_div(rows, self.repeat), cols) if dname == "L0B" else (rows, ceil_div(cols, self.repeat))
        need = nz_bytes(pr, pc, item)
        have = nz_bytes(self.src_rows, self.src_cols, item)
        if dname not in ("L0A", "L0B"):
            return need, have, -1
        rate = (spec.rates.l1_to_l0a if dname == "L0A" else spec.rates.l1_to_l0b) or (
            spec.mte1.base if spec.mte1 is not None else 0.0)
        if rate <= 0:
            return need, have, -1
        startup = spec.mte1.startup if spec.mte1 is not None else 0
        return need, have, math.ceil(self._bytes / rate) + self.repeat * startup

    def _issue_checked(self, pipe: "Pipe") -> int:
        _timing_only(pipe, self)
        dst, src = self.dst, self.src
        _need_region(src, ("L1",), "LoadData source")
        _need_region(dst, ("L0A", "L0B"), "LoadData destination")
        if dst.dtype.itemsize != src.dtype.itemsize:
            raise SimulatorError(f"LoadData between {src.dtype} and {dst.dtype}: MTE1 does not convert")
        pr, pc = self.piece()
        need = nz_bytes(pr, pc, src.dtype.itemsize)
        _fit(dst, need, "LoadData of a {} x {} {} tile", pr, pc, src.dtype)
        dst.check(need // dst.dtype.itemsize, write=True)
        if self.repeat == 1:
            if (self.r0 < 0 or self.c0 < 0 or self.r0 + self.nr > self.src_rows
                    or self.c0 + self.nc > self.src_cols):
                raise MemoryFault(f"LoadData tile rows [{self.r0}, {self.r0 + self.nr}) x cols "
                                  f"[{self.c0}, {self.c0 + self.nc}) is outside the {self.src_rows} x "
                                  f"{self.src_cols} L1 block", address=src.addr)
            have = nz_bytes(self.src_rows, self.src_cols, src.dtype.itemsize)
            _fit(src, have, "the {} x {} L1 block", self.src_rows, self.src_cols)
            src.check(have // src.dtype.itemsize, write=False)
        spec = pipe.core.device.spec
        to_a = dst.region.name == "L0A"
        rate = (spec.rates.l1_to_l0a if to_a else spec.rates.l1_to_l0b) or (
            spec.mte1.base if spec.mte1 is not None else 0.0)
        if rate <= 0:
            raise UnsupportedInstruction(f"{spec.name} has no L1->{dst.region.name} rate "
                                         f"(rates.l1_to_l0a/l1_to_l0b or [mte1])")
        startup = spec.mte1.startup if spec.mte1 is not None else 0
        return math.ceil(self._bytes / rate) + self.repeat * startup + pipe.head_cycles()

    @data_only
    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        dt = self.src.dtype
        r16, c16 = align16(self.src_rows), align16(self.src_cols)
        img = self.src.array(r16 * c16).reshape(c16 // FRACTAL, r16, FRACTAL)
        first, last = self.c0 // FRACTAL, ceil_div(self.c0 + self.nc, FRACTAL)
        sub = img[first:last, self.r0:self.r0 + self.nr, :].transpose(1, 0, 2).reshape(self.nr, -1)
        off = self.c0 % FRACTAL
        tile = sub[:, off:off + self.nc]
        if self.transpose:
            tile = tile.T
        out = _to_zz(tile) if self.dst.region.name == "L0A" else _to_nz_l0b(tile)
        flat = out.reshape(-1)
        self.dst.reinterpret(dt).array(flat.size)[...] = flat

    def accesses(self, pipe: "Pipe") -> tuple[tuple[str, int, int, bool], ...]:
        pr, pc = self.piece()
        item = self.src.dtype.itemsize
        # the L1 block is read as a whole NZ image (as issue checks it)
        return (_local_bytes(self.src, nz_bytes(self.src_rows, self.src_cols, item), False),
                _local_bytes(self.dst, nz_bytes(pr, pc, item), True))

    def describe(self) -> str:
        rows, cols = self.tile_shape()
        return (f"LoadData(L1->{self.dst.region.name}, {rows} x {cols} {self.src.dtype}"
                f"{', transpose' if self.transpose else ''}, repeat {self.repeat})")

    def trace_args(self) -> tuple[int, int, int, str]:
        rows, cols = self.tile_shape()
        # the profiler asks every LoadData for its bytes: the detail text is made once per shape
        key = (self.dst.region.name, rows, cols, self.transpose)
        detail = _LOAD_DETAIL.get(key)
        if detail is None:
            detail = _LOAD_DETAIL[key] = f"L1->{key[0]} {rows}x{cols}" + (" T" if self.transpose else "")
        return rows * cols, self._bytes, self.dst.addr, detail


_LOAD_DETAIL: dict[tuple[str, int, int, bool], str] = {}


# ---------------------------------------------------------------------------------------------
# CUBE: Mmad
# ---------------------------------------------------------------------------------------------

class Mmad(CubeInstruction):
    """``Mmad(c, a, b, {m, k, n})``: c (L0C, fp32) = [c +] a (L0A, m x k) . b (L0B, k x n).

    Inputs fp16/bf16 (their products are exact in fp32), accumulation in fp32 in L0C;
    ``accumulate`` False overwrites (cmatrixInitVal), True adds to what L0C holds. Costs the
    padded 16x16x16 fractals at ``cube.macs_per_cycle[dtype]`` MACs per cycle.
    """

    __slots__ = ("c", "a", "b", "m", "k", "n", "accumulate")
    pipe = "CUBE"
    name = "Mmad"

    def __init__(self, c: LocalTensor, a: LocalTensor, b: LocalTensor, m: int, k: int, n: int, *,
                 accumulate: bool, repeat: int = 1) -> None:
        self.tile, self.origin = -1, None
        if repeat < 1:
            raise SimulatorError(f"repeat must be >= 1, got {repeat}")
        # int() and bool() only where needed, as in CopyGmToL1
        if not (type(m) is type(k) is type(n) is type(repeat) is int):
            m, k, n, repeat = int(m), int(k), int(n), int(repeat)
        self.repeat = repeat
        self.c, self.a, self.b = c, a, b
        self.m, self.k, self.n = m, k, n
        self.accumulate = accumulate if type(accumulate) is bool else bool(accumulate)

    def cycles(self, spec: Any) -> int:
        cube = spec.cube
        if cube is None:
            raise UnsupportedInstruction(f"{spec.name} has no cube unit")
        dt = self.a.dtype.name
        macs = cube.macs_per_cycle.get(dt)
        if macs is None:
            raise UnsupportedInstruction(f"Mmad on {dt} is not a cube instruction of {spec.name} "
                                         f"(macs_per_cycle for {', '.join(cube.macs_per_cycle)})", dtype=dt)
        fractals = ceil_div(self.m, cube.m) * ceil_div(self.k, cube.k) * ceil_div(self.n, cube.n)
        return math.ceil(fractals * cube.m * cube.k * cube.n / macs)

    def issue(self, pipe: "Pipe") -> int:
        """The checks and cost of :meth:`_issue_checked`, with the shape-derived numbers taken
        from a per-spec memo; any check that would fail goes the long way, which raises the
        same error in the same order."""
        if self.repeat > 1:
            _timing_only(pipe, self)
        a, b, c = self.a, self.b, self.c
        adt = a.dtype
        spec = pipe.core.device.spec
        last = _LAST
        memo = last[1] if last[0] is spec else _spec_memo(spec)
        key = ("Mmad", self.m, self.k, self.n, self.repeat, adt.name)
        try:                    # (a subscript, not memo.get: no call on a hit)
            plan = memo[key]
        except KeyError:
            plan = memo[key] = self._plan(spec)
        a_bytes, b_bytes, c_bytes, cycles = plan
        item = adt.itemsize
        if (cycles < 0 or a.region.name != "L0A" or b.region.name != "L0B" or c.region.name != "L0C"
                or (b.dtype is not adt and b.dtype != adt) or (c.dtype is not nx.FP32 and c.dtype != nx.FP32)
                or a_bytes > a.region.size or a_bytes > a.count * item
                or b_bytes > b.region.size or b_bytes > b.count * b.dtype.itemsize
                or c_bytes > c.region.size or c_bytes > c.count * 4):
            return self._issue_checked(pipe)
        # LocalTensor.check of the three tiles, inline: its verdict for a flat or sparse local
        # region (the counts fit, tested above); whatever it would not pass through -- an
        # allocation-backed or read-only region, a misaligned or out-of-range tile -- takes the
        # call, which raises (or checks the allocation) as before, in the same order
        reg, addr = a.region, a.addr
        if reg.backing == "allocation" or addr % reg.alignment or addr < reg.base or addr + a_bytes > reg.end:
            a.check(a_bytes // item, write=False)
        reg, addr = b.region, b.addr
        if reg.backing == "allocation" or addr % reg.alignment or addr < reg.base or addr + b_bytes > reg.end:
            b.check(b_bytes // item, write=False)
        reg, addr = c.region, c.addr
        if (reg.backing == "allocation" or addr % reg.alignment or addr < reg.base or addr + c_bytes > reg.end
                or reg.read_only):
            c.check(c_bytes // 4, write=True)
        return cycles

    def _plan(self, spec: Any) -> tuple[int, int, int, int]:
        """(L0A, L0B, L0C bytes, cycles) of this shape on ``spec``; cycles -1 where
        :meth:`_issue_checked` raises (a bad shape, no cube, a dtype it does not take)."""
        if min(self.m, self.k, self.n) <= 0:
            return 0, 0, 0, -1
        kr = ceil_div(self.k, self.repeat)
        item = self.a.dtype.itemsize
        try:
            cycles = self.cycles(spec)
        except SimulatorError:
            cycles = -1
        return nz_bytes(self.m, kr, item), nz_bytes(kr, self.n, item), nz_bytes(self.m, self.n, 4), cycles

    def _issue_checked(self, pipe: "Pipe") -> int:
        _timing_only(pipe, self)
        a, b, c = self.a, self.b, self.c
        _need_region(a, ("L0A",), "Mmad left matrix")
        _need_region(b, ("L0B",), "Mmad right matrix")
        _need_region(c, ("L0C",), "Mmad result")
        if a.dtype != b.dtype:
            raise SimulatorError(f"Mmad mixes {a.dtype} and {b.dtype}")
        if c.dtype != nx.FP32:
            raise SimulatorError(f"Mmad accumulates in fp32 in L0C, got a {c.dtype} result tensor")
        if min(self.m, self.k, self.n) <= 0:
            raise SimulatorError(f"Mmad with m={self.m}, k={self.k}, n={self.n}")
        kr = ceil_div(self.k, self.repeat)
        item = a.dtype.itemsize
        a_bytes, b_bytes, c_bytes = nz_bytes(self.m, kr, item), nz_bytes(kr, self.n, item), nz_bytes(self.m, self.n, 4)
        _fit(a, a_bytes, "Mmad left tile {} x {}", self.m, kr)
        _fit(b, b_bytes, "Mmad right tile {} x {}", kr, self.n)
        _fit(c, c_bytes, "Mmad result tile {} x {} fp32", self.m, self.n)
        a.check(a_bytes // item, write=False)
        b.check(b_bytes // item, write=False)
        c.check(c_bytes // 4, write=True)
        return self.cycles(pipe.core.device.spec)

    @data_only
    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        m, k, n = self.m, self.k, self.n
        item = self.a.dtype.itemsize
        a = _from_zz(self.a.array(nz_bytes(m, k, item) // item), m, k).astype(np.float32)
        b = _from_nz_l0b(self.b.array(nz_bytes(k, n, item) // item), k, n).astype(np.float32)
        # fp32 accumulation of the exact fp16/bf16 products. einsum rather than BLAS: no thread
        # pool (a multi-threaded BLAS on a busy host is slower than this for tile-sized products)
        prod = np.einsum("mk,kn->mn", a, b)
        n16 = align16(n)
        full = np.zeros((m, n16), dtype=np.float32)
        full[:, :n] = prod
        c = self.c.array(nz_bytes(m, n, 4) // 4).reshape(n16 // FRACTAL, align16(m), FRACTAL)
        part = full.reshape(m, n16 // FRACTAL, FRACTAL).transpose(1, 0, 2)
        if self.accumulate:
            c[:, :m, :] += part
        else:
            c[:, :m, :] = part

    def accesses(self, pipe: "Pipe") -> tuple[tuple[str, int, int, bool], ...]:
        kr = ceil_div(self.k, self.repeat)
        item = self.a.dtype.itemsize
        c_bytes = nz_bytes(self.m, self.n, 4)
        out = [_local_bytes(self.a, nz_bytes(self.m, kr, item), False),
               _local_bytes(self.b, nz_bytes(kr, self.n, item), False)]
        if self.accumulate:
            out.append(_local_bytes(self.c, c_bytes, False))
        out.append(_local_bytes(self.c, c_bytes, True))
        return tuple(out)

    def describe(self) -> str:
        return (f"Mmad({self.m}x{self.k}x{self.n} {self.a.dtype}, "
                f"{'accumulate' if self.accumulate else 'overwrite'}, repeat {self.repeat})")

    def trace_args(self) -> tuple[int, int, int, str]:
        return self.m * self.k * self.n, 0, self.c.addr, f"{self.m}x{self.k}x{self.n} {self.a.dtype}" + (
            " acc" if self.accumulate else "")


# ---------------------------------------------------------------------------------------------
# FIXP: L0C -> GM
# ---------------------------------------------------------------------------------------------

class Fixpipe(CubeInstruction):
    """``Fixpipe`` L0C -> GM: the m x n fp32 result at (r0, c0) of an ND ``dst``, rounded once
    to ``dst``'s dtype (``round_mode``, RINT by default) on the way."""

    __slots__ = ("dst", "r0", "c0", "src", "m", "n", "round_mode", "_nbytes")
    pipe = "FIXP"
    name = "Fixpipe"

    def __init__(self, dst: GmMatrix, r0: int, c0: int, src: LocalTensor, m: int, n: int, *,
                 round_mode: str = "rint") -> None:
        self.tile, self.origin, self.repeat = -1, None, 1     # CubeInstruction.__init__(1) inline
        if round_mode not in nx.ROUND_MODES:
            raise SimulatorError(f"Fixpipe round mode {round_mode!r} is not one of {', '.join(nx.ROUND_MODES)}")
        self.dst, self.src = dst, src
        self.r0, self.c0, self.m, self.n = int(r0), int(c0), int(m), int(n)
        self.round_mode = round_mode
        self._nbytes = self.m * self.n * dst.dtype.itemsize

    def issue(self, pipe: "Pipe") -> simpy.Event:
        # the checks in the order they always ran, each helper called only where it raises
        # (their verdicts inline, as in LoadData.issue): one Fixpipe per output tile
        src, dst = self.src, self.dst
        reg = src.region
        if reg.name != "L0C":
            _need_region(src, ("L0C",), "Fixpipe source")     # raises
        if src.dtype is not nx.FP32 and src.dtype != nx.FP32:
            raise SimulatorError(f"Fixpipe reads fp32 from L0C, got {src.dtype}")
        if dst.layout != "ND":
            raise SimulatorError("Fixpipe here writes ND matrices only")
        m, n, r0, c0 = self.m, self.n, self.r0, self.c0
        need = -(-m // FRACTAL) * FRACTAL * (-(-n // FRACTAL) * FRACTAL) * 4     # nz_bytes(m, n, 4)
        if need > reg.size or need > src.count * src.dtype.itemsize:
            _fit(src, need, "Fixpipe of a {} x {} fp32 tile", m, n)    # raises
        # LocalTensor.check (its count fits: tested just above), inline where it would pass
        addr = src.addr
        if (reg.backing == "allocation" or addr % reg.alignment or need < 0 or addr < reg.base
                or addr + need > reg.end):
            src.check(need // 4, write=False)
        if m <= 0 or n <= 0 or r0 < 0 or c0 < 0 or r0 + m > dst.rows or c0 + n > dst.cols:
            dst._check_block(r0, m, c0, n)     # raises (ND: no NZ column rule)
        device = pipe.core.device
        lo, hi = dst.span(self.r0, self.m, self.c0, self.n)
        gm = device.gm
        if gm.base <= lo < hi <= gm.end:     # Device.check_global in one call (as GlobalSlice.check)
            gm._locate(lo, hi - lo, True, 1)
        else:
            device.check_global(lo, hi - lo, write=True)
        model = device.spec.fixp
        if model is None:
            raise UnsupportedInstruction(f"{device.spec.name} has no [fixp] (L0C->GM) model")
        geo = _l2_geometry(device, dst.run_geometry(self.r0, self.m, self.c0, self.n))
        return device.gm_transfer(pipe, lo, self._nbytes, write=True, model=model, geometry=geo,
                                  startup_extra=pipe.head_cycles() if pipe.head_pending else 0)

    @data_only
    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        m, n = self.m, self.n
        c = self.src.array(nz_bytes(m, n, 4) // 4)
        vals = nz_to_nd(c, m, n)
        if self.dst.dtype != nx.FP32:
            vals = nx.cast(vals, self.dst.dtype, self.round_mode)
        self.dst.write(self.r0, self.c0, vals)

    def accesses(self, pipe: "Pipe") -> tuple[tuple[str, int, int, bool], ...]:
        return (_local_bytes(self.src, nz_bytes(self.m, self.n, 4), False),
                *_gm_accesses(self.dst, self.r0, self.m, self.c0, self.n, True))

    def describe(self) -> str:
        return f"Fixpipe(L0C->GM, {self.m} x {self.n} fp32->{self.dst.dtype})"

    def trace_args(self) -> tuple[int, int, int, str]:
        return (self.m * self.n, self._nbytes, self.dst.span(self.r0, 1, self.c0, self.n)[0],
                f"L0C->GM {self.m}x{self.n} fp32->{self.dst.dtype}")


# ---------------------------------------------------------------------------------------------
# Vector side: UB -> GM in NZ
# ---------------------------------------------------------------------------------------------

class CopyUbToNz(Instruction):
    """``DataCopy`` UB -> GM of one row chunk into an NZ matrix (the vector side of a mixed
    kernel writes the cube's operand in NZ): ``n`` elements of row ``row`` from column ``c0``
    (a multiple of 16) go out as ceil(n/16) 32 B blocks at the NZ block stride
    (blockCount = ceil(n/16), dstStride = R16 - 1 blocks). The tail of the last block is
    padding (columns >= cols of the matrix are never read by the cube).

    ``l2_rows``: the L2 model is shown the runs of rows (row - l2_rows, row] of these columns
    (default: this row). A kernel writing consecutive rows passes 0 for all but the last row
    of a batch and the batch size there: the batch's blocks are then one run per column block
    instead of one per row and column block (the cube reads them only after the whole batch).
    """

    __slots__ = ("dst", "row", "c0", "src", "n", "l2_rows", "_nbytes")
    name = "DataCopy"

    def __init__(self, dst: GmMatrix, row: int, c0: int, src: LocalTensor, n: int, *,
                 l2_rows: int = 1) -> None:
        self.tile, self.origin = -1, None     # Instruction.__init__ inline: one per row chunk
        self.dst, self.row, self.c0, self.src, self.n = dst, int(row), int(c0), src, int(n)
        self.l2_rows = int(l2_rows)
        self._nbytes = -(-self.n // FRACTAL) * FRACTAL * dst.dtype.itemsize   # align16(n) x itemsize

    @property
    def pipe(self) -> str:  # type: ignore[override]
        return self.src.core.store_pipe

    def issue(self, pipe: "Pipe") -> simpy.Event:
        dst, src = self.dst, self.src
        if dst.layout != "NZ":
            raise SimulatorError("CopyUbToNz writes an NZ matrix")
        if src.dtype.itemsize != dst.itemsize:
            raise SimulatorError(f"DataCopy between {src.dtype} and {dst.dtype}: DMA does not convert; Cast first")
        dst._check_block(self.row, 1, self.c0, self.n)
        if align16(self.n) > src.count:
            raise MemoryFault(f"DataCopy of {align16(self.n)} elements (whole 16-element blocks) overruns "
                              f"{src!r}", address=src.addr)
        src.check(align16(self.n), write=False)
        device = pipe.core.device
        lo, hi = dst.span(self.row, 1, self.c0, self.n)
        gm = device.gm
        if gm.base <= lo < hi <= gm.end:     # Device.check_global in one call (as GlobalSlice.check)
            gm._locate(lo, hi - lo, True, 1)
        else:
            device.check_global(lo, hi - lo, write=True)
        geo = None                               # not a batch's last row: that one shows the L2 the batch
        if self.l2_rows > 0:
            first = max(0, self.row - self.l2_rows + 1)
            geo = _l2_geometry(device, dst.run_geometry(first, self.row + 1 - first, self.c0, self.n))
        return device.gm_transfer(pipe, lo, self._nbytes, write=True, geometry=geo,
                                  ranges=None if geo is not None else [],
                                  startup_extra=pipe.head_cycles() if pipe.head_pending else 0)

    @data_only
    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        vals = self.src.array(align16(self.n)).reshape(1, -1)
        self.dst.write(self.row, self.c0, vals)

    def accesses(self, pipe: "Pipe") -> tuple[tuple[str, int, int, bool], ...]:
        return (self.src.access(align16(self.n), False),
                *_gm_accesses(self.dst, self.row, 1, self.c0, self.n, True))

    def describe(self) -> str:
        return f"DataCopy(UB->GM ND2NZ, row {self.row}, {self.n} x {self.src.dtype})"

    def trace_args(self) -> tuple[int, int, int, str]:
        return self.n, self._nbytes, self.dst.span(self.row, 1, self.c0, 16)[0], f"UB->GM NZ {self.src.dtype}"


# ---------------------------------------------------------------------------------------------
# Cross-core flags
# ---------------------------------------------------------------------------------------------

CROSS_CORE_FLAG_IDS = 16   # flag ids 0..15 (Ascend C CrossCoreSetFlag flagId)


def _cross_keys(pipe: "Pipe", flag_id: int, mode: int, setting: bool) -> tuple[list[tuple], int]:
    """(keys, per): the flag-table keys an instruction sets or waits on, and what a wait needs."""
    core = pipe.core
    launch = core.launch
    if launch is None:
        raise SimulatorError("a cross-core flag outside a launch")
    if not 0 <= flag_id < CROSS_CORE_FLAG_IDS:
        raise SimulatorError(f"cross-core flag id {flag_id} is not in 0..{CROSS_CORE_FLAG_IDS - 1}")
    lid = id(launch)
    kind = core.kind
    mixed = launch.unit == "mix"
    ratio = core.device.mix_ratio if mixed else 1
    if mode == 0:   # every core of this kind in the launch
        per = launch.block_dim * (ratio if kind == "aiv" else 1)
        return [(lid, "all", kind, flag_id)], per
    if not mixed or core.name not in launch.roles:
        raise SimulatorError(f"cross-core flag mode {mode} needs a mixed AIC/AIV launch (unit='mix')")
    group, sub = launch.roles[core.name]
    if mode == 1:   # the vector cores of one group among themselves
        if kind != "aiv":
            raise SimulatorError("cross-core flag mode 1 synchronises the vector cores of a group")
        return [(lid, group, "aiv", flag_id)], ratio
    if mode != 2:
        raise SimulatorError(f"cross-core flag mode {mode} is not 0, 1 or 2")
    if kind == "aiv":
        # AIV -> AIC: the cube core passes once every vector core of its group has set it
        return ([(lid, group, "to_aic", flag_id)], 1) if setting else ([(lid, group, "to_aiv", sub, flag_id)], 1)
    if setting:     # AIC -> AIV: one set lets each vector core of the group pass once
        return [(lid, group, "to_aiv", s, flag_id) for s in range(ratio)], 1
    return [(lid, group, "to_aic", flag_id)], ratio


class CrossCoreSetFlag(Instruction):
    """``CrossCoreSetFlag<mode, pipe>(flag_id)``: runs on ``pipe`` once its earlier work is done.

    mode 0: all cores of this kind in the launch (with the matching wait, a barrier such as
    SyncAll); mode 1: the vector cores of a group; mode 2: a cube core and its vector cores.
    """

    __slots__ = ("flag_id", "mode", "_pipe")
    busy = False
    name = "CrossCoreSetFlag"

    def __init__(self, flag_id: int, mode: int = 2, pipe: str = "MTE3") -> None:
        super().__init__()
        self.flag_id, self.mode, self._pipe = int(flag_id), int(mode), pipe

    @property
    def pipe(self) -> str:  # type: ignore[override]
        return self._pipe

    def complete(self, pipe: "Pipe") -> None:
        keys, _ = _cross_keys(pipe, self.flag_id, self.mode, setting=True)
        table = pipe.core.device.cross_flags
        for key in keys:
            table.set(key, pipe.last_slice)

    def sync_keys(self, pipe: "Pipe") -> list[tuple]:
        """The flag-table keys this set adds to (execution clients: the sanitizer)."""
        return _cross_keys(pipe, self.flag_id, self.mode, setting=True)[0]

    def describe(self) -> str:
        return f"CrossCoreSetFlag<{self.mode}, {self._pipe}>({self.flag_id})"


class CrossCoreWaitFlag(Instruction):
    """``CrossCoreWaitFlag(flag_id)``: blocks ``pipe`` until the flag set with ``mode`` is set
    (mode 0: by every core of this kind; mode 2 on a cube core: by all its vector cores)."""

    __slots__ = ("flag_id", "mode", "_pipe", "_key")
    busy = False
    name = "CrossCoreWaitFlag"

    def __init__(self, flag_id: int, mode: int = 2, pipe: str = "MTE2") -> None:
        super().__init__()
        self.flag_id, self.mode, self._pipe = int(flag_id), int(mode), pipe
        self._key: tuple | None = None

    @property
    def pipe(self) -> str:  # type: ignore[override]
        return self._pipe

    def issue(self, pipe: "Pipe") -> simpy.Event | None:
        keys, per = _cross_keys(pipe, self.flag_id, self.mode, setting=False)
        self._key = keys[0]
        return pipe.core.device.cross_flags.wait(keys[0], pipe.core.name, per)

    def trace_sync(self, pipe: "Pipe") -> None:
        # a flow arrow from the work before the (latest) set on the other core to this pipe's next slice
        src = pipe.core.device.cross_flags.setter_slice(self._key) if self._key is not None else -1
        if src >= 0:
            pipe.flow_from = src

    def sync_need(self, pipe: "Pipe") -> tuple[tuple, int] | None:
        """(key, sets of the key this wait needed), once it has passed (the sanitizer)."""
        if self._key is None:
            return None
        _, per = _cross_keys(pipe, self.flag_id, self.mode, setting=False)
        return self._key, pipe.core.device.cross_flags._done.get((self._key, pipe.core.name), 1) * per

    def describe(self) -> str:
        return f"CrossCoreWaitFlag<{self.mode}, {self._pipe}>({self.flag_id})"

"""The cube API of the low-level path: GM -> L1 (``data_copy`` with ``Nd2NzParams``), L1 ->
L0A/L0B (``load_data``), ``mmad`` into L0C and L0C -> GM (``fixpipe``, or ``data_copy`` with
``DataCopyCO12DstParams``), over the cube model of simulator/cube.py.

Layouts are the hardware's (simulator/cube.py): L1 holds NZ images, L0A zZ, L0B nZ (load them
with ``if_transpose=True`` from an NZ image of the k x n matrix), L0C NZ in fp32.
"""
from __future__ import annotations

from typing import Any

from opsim.asc import _core
from opsim.asc.tensor import GlobalAddress, GlobalTensor, LocalTensor
from opsim.asc.types import DataCopyCO12DstParams, FixpipeParamsV220, LoadData2DParams, MmadParams, Nd2NzParams
from opsim.simulator import numerics as nx
from opsim.simulator.cube import CopyGmToL1, Fixpipe, GmMatrix, Mmad, align16
from opsim.simulator.isa_ext import LoadData2D

def set_sys_workspace(workspace: Any) -> None:
    """``SetSysWorkspace``: the Matmul API's message/workspace area. opsim keeps its matmul
    workspace in its own device allocations, so the call only records it."""
    if _core.in_kernel():
        _core.current().launch.workspace = workspace


def get_sys_workspace() -> Any:
    return _core.current().launch.workspace


def gm_matrix(g: GlobalTensor | GlobalAddress, rows: int, cols: int, row_stride: int | None = None) -> GmMatrix:
    """The rows x cols ND matrix at a GM view (row stride in elements, default ``cols``)."""
    if isinstance(g, GlobalAddress):
        dev, addr, dt = g.device, g.addr, g.dtype.sim
    else:
        a = g._addr
        dev, addr, dt = a.device, g.address, a.dtype.sim
    return GmMatrix(dev, addr, dt, int(rows), int(cols), "ND", int(cols if row_stride is None else row_stride), 1, 0)


def data_copy_cube(state: _core.BlockState, dst: Any, src: Any, params: Any) -> None:
    if isinstance(params, Nd2NzParams):
        if not (isinstance(dst, LocalTensor) and isinstance(src, GlobalTensor)):
            raise _core.unsupported("data_copy with Nd2NzParams other than GM -> L1")
        p = params
        if p.nd_num != 1:
            raise _core.unsupported(f"data_copy with Nd2NzParams nd_num {p.nd_num} (one matrix per call is modelled)")
        if p.dst_nz_n_stride != 1 or p.dst_nz_c0_stride != align16(p.n_value):
            raise _core.unsupported(
                f"Nd2NzParams with dst_nz_c0_stride {p.dst_nz_c0_stride} / dst_nz_n_stride {p.dst_nz_n_stride}",
                f"the modelled NZ image has c0 stride ceil(n_value/16)*16 = {align16(p.n_value)} and n stride 1")
        mat = gm_matrix(src, p.n_value, p.d_value, p.src_d_value or p.d_value)
        state.emit(CopyGmToL1(dst.sim, mat, 0, p.n_value, 0, p.d_value))
        return
    if isinstance(params, DataCopyCO12DstParams):
        if not (isinstance(dst, GlobalTensor) and isinstance(src, LocalTensor)):
            raise _core.unsupported("data_copy with DataCopyCO12DstParams other than L0C -> GM")
        co = params
        if not co.nz2nd_en:
            raise _core.unsupported("L0C -> GM in NZ (nz2nd_en=False)")
        _fixpipe(state, dst, src, co.m_size, co.n_size, co.src_stride, co.dst_stride, bool(co.relu_pre))
        return
    raise _core.unsupported(f"data_copy with {type(params).__name__}")


def local_copy(state: _core.BlockState, dst: LocalTensor, src: LocalTensor, count: int) -> None:
    raise _core.unsupported(f"data_copy {src.sim.region.name} -> {dst.sim.region.name}",
                            "the modelled local copies are UB -> UB; L1 -> L0 goes through load_data")


def load_data(dst: LocalTensor, src: Any, params: LoadData2DParams) -> None:
    """``LoadData(dst, src, LoadData2DParams)`` L1 -> L0A/L0B, fractal by fractal."""
    state = _core.current()
    if not isinstance(params, LoadData2DParams):
        raise _core.unsupported(f"load_data with {type(params).__name__}")
    if not isinstance(src, LocalTensor):
        raise _core.unsupported("load_data from GM (LoadData G2L)")
    state.emit(LoadData2D(dst.sim, src.sim, params.start_index, params.repeat_times, params.src_stride,
                          params.dst_gap, params.if_transpose))


def mmad(dst: LocalTensor, fm: LocalTensor, filter: LocalTensor, *args: Any) -> None:  # noqa: A002
    """``Mmad(dst, fm, filter, MmadParams(m, n, k))``: L0C (fp32) = [L0C +] L0A . L0B."""
    state = _core.current()
    if len(args) != 1 or not isinstance(args[0], MmadParams):
        raise _core.unsupported("mmad with a bias tensor", "put the bias in L0C first") if len(args) == 2 \
            else TypeError("mmad(dst, fm, filter, MmadParams(m, n, k))")
    p = args[0]
    state.emit(Mmad(dst.sim, fm.sim, filter.sim, p.m, p.k, p.n, accumulate=not p.cmatrix_init_val))


def _fixpipe(state: _core.BlockState, dst: GlobalTensor, src: LocalTensor, m: int, n: int, src_stride: int,
             dst_stride: int, relu: bool) -> None:
    if relu:
        raise _core.unsupported("fixpipe with relu")
    if src_stride not in (0, align16(m)):
        raise _core.unsupported(f"fixpipe with src_stride {src_stride}",
                                f"the modelled L0C tile has ceil(m/16)*16 = {align16(m)} rows")
    if src.sim.dtype != nx.FP32:
        src = src.reinterpret_cast("fp32")
    state.emit(Fixpipe(gm_matrix(dst, m, n, dst_stride or n), 0, 0, src.sim, m, n))


def fixpipe(dst: GlobalTensor, src: LocalTensor, params: FixpipeParamsV220, *args: Any, **kwargs: Any) -> None:
    """``Fixpipe(dst, src, FixpipeParamsV220(n_size, m_size, src_stride, dst_stride))`` L0C -> GM
    (ND), rounding once to the GM dtype."""
    state = _core.current()
    if not isinstance(params, FixpipeParamsV220):
        raise _core.unsupported(f"fixpipe with {type(params).__name__}")
    _fixpipe(state, dst, src, params.m_size, params.n_size, params.src_stride, params.dst_stride, params.relu_en)

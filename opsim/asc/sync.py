"""Synchronisation: ``set_flag``/``wait_flag`` with a HardEvent, ``pipe_barrier``, the
``ascend_is_aic``/``ascend_is_aiv`` switches, cross-core flags and the block index."""
from __future__ import annotations

from typing import Any

from opsim.asc import _core
from opsim.asc.enums import PIPE_OF_ID, HardEvent, PipeID, event_pipes
from opsim.simulator.cube import CrossCoreSetFlag, CrossCoreWaitFlag
from opsim.simulator.errors import SimulatorError
from opsim.simulator.isa import SetAtomicAdd, SetAtomicNone, SetFlag, WaitFlag


def _check_pipes(state: _core.BlockState, pipes: tuple[str, ...], what: str) -> None:
    for p in pipes:
        if p not in state.core.pipes:
            raise _core.unsupported(f"{what} on pipe {p}, which {state.core.name} does not have "
                                    f"(pipes: {', '.join(state.core.pipes)})")


def set_flag(event: HardEvent, event_id: int = 0) -> None:
    """``SetFlag<event>(event_id)``: runs on the source pipe once its earlier work is done."""
    state = _core.current()
    src, dst = event_pipes(event)
    _check_pipes(state, (src, dst), f"set_flag(HardEvent.{HardEvent(event).name})")
    state.emit(SetFlag(src, dst, int(event_id)))


def wait_flag(event: HardEvent, event_id: int = 0) -> None:
    """``WaitFlag<event>(event_id)``: blocks the destination pipe until the flag is set."""
    state = _core.current()
    src, dst = event_pipes(event)
    _check_pipes(state, (src, dst), f"wait_flag(HardEvent.{HardEvent(event).name})")
    state.emit(WaitFlag(src, dst, int(event_id)))


def pipe_barrier(pipe: PipeID) -> None:
    """``PipeBarrier<pipe>``. The simulator's pipes execute strictly in order, so a barrier on one
    pipe orders nothing more; ``PIPE_ALL`` makes every pipe wait until all earlier work of every
    pipe is done (flags to and from the scalar pipe)."""
    state = _core.current()
    pipe = PipeID(pipe)
    if pipe != PipeID.PIPE_ALL:
        if pipe not in PIPE_OF_ID:
            raise _core.unsupported(f"pipe_barrier(PipeID.{pipe.name})")
        return
    _barrier_all(state, _core.call_site())


def _barrier_all(state: _core.BlockState, site: str) -> None:
    """Every pipe waits until all earlier work of every pipe is done (flags via SCALAR)."""
    pipes = [p for p in state.core.pipes if p != "SCALAR"]
    ids = {p: state.reserved_event(p, "SCALAR") for p in pipes}
    for p in pipes:
        state.emit(SetFlag(p, "SCALAR", ids[p]), site)
    for p in pipes:
        state.emit(WaitFlag(p, "SCALAR", ids[p]), site)
    back = {p: state.reserved_event("SCALAR", p) for p in pipes}
    for p in pipes:
        state.emit(SetFlag("SCALAR", p, back[p]), site)
    for p in pipes:
        state.emit(WaitFlag("SCALAR", p, back[p]), site)


def data_sync_barrier(*args: Any) -> None:
    """``DataSyncBarrier``: memory ordering of the scalar unit; nothing to order in the model."""


def get_block_idx() -> int:
    return _core.current().ctx.block_idx


def get_block_num() -> int:
    return _core.current().launch.block_dim


def get_sub_block_idx() -> int:
    return _core.current().ctx.sub_block_idx


def get_sub_block_num() -> int:
    return _core.current().ctx.sub_block_num


def ascend_is_aic() -> bool:
    return _core.current().role in ("aic", "aicore")


def ascend_is_aiv() -> bool:
    return _core.current().role in ("aiv", "aicore")


def cross_core_set_flag(flag_id: int, mode_id: int = 2, pipe: PipeID = PipeID.PIPE_MTE3) -> None:
    """``CrossCoreSetFlag<mode, pipe>(flag_id)`` of a mixed kernel (simulator/cube.py): mode 0
    all cores of this kind, 1 the vector cores of a group, 2 a cube core and its vector cores."""
    mode = mode_id
    state = _core.current()
    p = PIPE_OF_ID.get(PipeID(pipe))
    if p is None or p not in state.core.pipes:
        raise _core.unsupported(f"cross_core_set_flag on PipeID.{PipeID(pipe).name} of {state.core.name}")
    state.emit(CrossCoreSetFlag(int(flag_id), int(mode), p))


def cross_core_wait_flag(flag_id: int, mode_id: int = 2, pipe: PipeID = PipeID.PIPE_MTE2) -> None:
    """``CrossCoreWaitFlag(flag_id)`` on ``pipe``; ``mode_id`` must match the setter's."""
    mode = mode_id
    state = _core.current()
    p = PIPE_OF_ID.get(PipeID(pipe))
    if p is None or p not in state.core.pipes:
        raise _core.unsupported(f"cross_core_wait_flag on PipeID.{PipeID(pipe).name} of {state.core.name}")
    state.emit(CrossCoreWaitFlag(int(flag_id), int(mode), p))


def sync_all(gm_workspace: Any = None, ub_workspace: Any = None, used_cores: int = 0,
             is_aiv_only: bool = True) -> None:
    """``SyncAll``: every core of this kind in the launch waits for all the others (the soft
    form with workspaces behaves the same here; it uses cross-core flag id 15).

    A barrier of the whole core on both sides: the core signals once all its earlier work on
    every pipe is done, and none of its pipes goes on before every core has signalled. (The
    flag on the store pipe alone ordered only that pipe: a load issued after sync_all could
    read GM before another core's store from before it.)"""
    state = _core.current()
    site = _core.call_site()
    resident = state.launch.resident_blocks()
    if state.launch.block_dim > resident:
        # the blocks of the first wave would wait forever for blocks that only start on a core
        # one of them frees
        raise SimulatorError(f"sync_all in a launch of block_dim {state.launch.block_dim} on "
                             f"{resident} cores: every block must be running at once for all of them "
                             f"to meet, so block_dim must be <= {resident} (at {site})")
    p = state.core.store_pipe
    _barrier_all(state, site)
    state.emit(CrossCoreSetFlag(15, 0, p), site)
    state.emit(CrossCoreWaitFlag(15, 0, p), site)
    _barrier_all(state, site)


def set_atomic_add(dtype: Any = None) -> None:
    """``SetAtomicAdd<T>``: later UB -> GM copies of this core add into GM (as ``dtype``, which
    must be the stored tensor's dtype) instead of overwriting, at the moment each completes."""
    from opsim.asc.dtype import sim_dtype
    state = _core.current()
    state.emit(SetAtomicAdd(sim_dtype(dtype if dtype is not None else "fp32"), state.core.store_pipe))


def set_atomic_none() -> None:
    """``SetAtomicNone``: GM stores overwrite again."""
    state = _core.current()
    state.emit(SetAtomicNone(state.core.store_pipe))

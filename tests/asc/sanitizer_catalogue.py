"""A catalogue of the bugs Ascend C kernel authors make, each as a minimal ``opsim.asc`` kernel
with the bug (``<name>_bug``) and its fixed twin (``<name>_fixed``), for
tests/asc/test_sanitizer_catalogue.py.

Every kernel takes ``(x, y, z, block_length)``: x and y are inputs, z the output, ``block_length``
elements per block, tiles of ``TILE`` fp32. The line with the bug carries ``# BUG``, the line
that fixes it ``# FIX``, and ``# SEEN`` marks the line the report names when that is another
one: the tests look the lines up by these markers, so the kernels can move.
"""
from __future__ import annotations

import opsim.asc as asc

TILE = 256                      # fp32 elements per tile: 1 KiB
E = asc.HardEvent


def _views(x, y, z, block_length):
    start = asc.get_block_idx() * block_length
    xg, yg, zg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x + start, block_length)
    yg.set_global_buffer(y + start, block_length)
    zg.set_global_buffer(z + start, block_length)
    return xg, yg, zg


def _ub():
    return (asc.LocalTensor(asc.float32, asc.TPosition.VECIN, 0, TILE),
            asc.LocalTensor(asc.float32, asc.TPosition.VECIN, TILE * 4, TILE),
            asc.LocalTensor(asc.float32, asc.TPosition.VECOUT, 2 * TILE * 4, TILE))


# ---------------------------------------------------------------------------------------------
# memory: GM out of bounds, UB overflow, misalignment, uninitialised reads
# ---------------------------------------------------------------------------------------------

@asc.jit
def gm_read_oob_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    # the tile loop runs one tile too many: the last block's last load reads past the end of y
    for i in range(block_length // TILE + 1):
        asc.data_copy(a, yg[i * TILE:], TILE)                  # BUG
        asc.set_flag(E.MTE2_MTE3, 0)
        asc.wait_flag(E.MTE2_MTE3, 0)
        asc.data_copy(zg[(i % (block_length // TILE)) * TILE:], a, TILE)
        asc.set_flag(E.MTE3_MTE2, 0)
        asc.wait_flag(E.MTE3_MTE2, 0)


@asc.jit
def gm_read_oob_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    for i in range(block_length // TILE):
        asc.data_copy(a, yg[i * TILE:], TILE)                  # FIX
        asc.set_flag(E.MTE2_MTE3, 0)
        asc.wait_flag(E.MTE2_MTE3, 0)
        asc.data_copy(zg[(i % (block_length // TILE)) * TILE:], a, TILE)
        asc.set_flag(E.MTE3_MTE2, 0)
        asc.wait_flag(E.MTE3_MTE2, 0)


@asc.jit
def gm_write_oob_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    for i in range(block_length // TILE):
        asc.data_copy(a, xg[i * TILE:], TILE)
        asc.set_flag(E.MTE2_MTE3, 0)
        asc.wait_flag(E.MTE2_MTE3, 0)
        asc.data_copy(zg[(i + 1) * TILE:], a, TILE)            # BUG
        asc.set_flag(E.MTE3_MTE2, 0)
        asc.wait_flag(E.MTE3_MTE2, 0)


@asc.jit
def gm_write_oob_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    for i in range(block_length // TILE):
        asc.data_copy(a, xg[i * TILE:], TILE)
        asc.set_flag(E.MTE2_MTE3, 0)
        asc.wait_flag(E.MTE2_MTE3, 0)
        asc.data_copy(zg[i * TILE:], a, TILE)                  # FIX
        asc.set_flag(E.MTE3_MTE2, 0)
        asc.wait_flag(E.MTE3_MTE2, 0)


@asc.jit
def gm_view_overrun_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    # block 0 loads its part of x from one tile in: its last tile comes from block 1's part,
    # inside x's allocation, so the machine does not fault
    xg, yg, zg = _views(x, y, z, block_length)
    a = asc.LocalTensor(asc.float32, asc.TPosition.VECIN, 0, block_length)
    first = TILE if asc.get_block_idx() == 0 else 0
    asc.data_copy(a, xg[first:], block_length)                 # BUG
    asc.set_flag(E.MTE2_MTE3, 0)
    asc.wait_flag(E.MTE2_MTE3, 0)
    asc.data_copy(zg, a, block_length)


@asc.jit
def gm_view_overrun_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a = asc.LocalTensor(asc.float32, asc.TPosition.VECIN, 0, block_length)
    asc.data_copy(a, xg, block_length)                         # FIX
    asc.set_flag(E.MTE2_MTE3, 0)
    asc.wait_flag(E.MTE2_MTE3, 0)
    asc.data_copy(zg, a, block_length)


@asc.jit
def ub_overflow_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    # a copy of two tiles into a one-tile tensor runs over into the tensor after it (y's)
    xg, yg, zg = _views(x, y, z, block_length)
    a, b, c = _ub()
    asc.data_copy(b, yg, TILE)
    asc.data_copy(a, xg, 2 * TILE)                             # BUG
    asc.set_flag(E.MTE2_V, 0)
    asc.wait_flag(E.MTE2_V, 0)
    asc.add(c, a, b, TILE)
    asc.set_flag(E.V_MTE3, 0)
    asc.wait_flag(E.V_MTE3, 0)
    asc.data_copy(zg, c, TILE)


@asc.jit
def ub_overflow_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, b, c = _ub()
    asc.data_copy(b, yg, TILE)
    asc.data_copy(a, xg, TILE)                                 # FIX
    asc.set_flag(E.MTE2_V, 0)
    asc.wait_flag(E.MTE2_V, 0)
    asc.add(c, a, b, TILE)
    asc.set_flag(E.V_MTE3, 0)
    asc.wait_flag(E.V_MTE3, 0)
    asc.data_copy(zg, c, TILE)


@asc.jit
def ub_misaligned_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a = asc.LocalTensor(asc.float32, asc.TPosition.VECIN, 16, TILE)       # BUG
    asc.data_copy(a, xg, TILE)
    asc.set_flag(E.MTE2_MTE3, 0)
    asc.wait_flag(E.MTE2_MTE3, 0)
    asc.data_copy(zg, a, TILE)


@asc.jit
def ub_misaligned_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a = asc.LocalTensor(asc.float32, asc.TPosition.VECIN, 32, TILE)       # FIX
    asc.data_copy(a, xg, TILE)
    asc.set_flag(E.MTE2_MTE3, 0)
    asc.wait_flag(E.MTE2_MTE3, 0)
    asc.data_copy(zg, a, TILE)


@asc.jit
def copy_not_whole_blocks_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    # data_copy moves whole 32 B blocks: a 10-element fp32 tail (40 B) needs data_copy_pad
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    asc.data_copy(a, xg, 10)                                   # BUG
    asc.set_flag(E.MTE2_MTE3, 0)
    asc.wait_flag(E.MTE2_MTE3, 0)
    asc.data_copy(zg, a, 8)


@asc.jit
def copy_not_whole_blocks_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    asc.data_copy_pad(a, xg, asc.DataCopyExtParams(1, 10 * 4, 0, 0, 0),   # FIX
                      asc.DataCopyPadExtParams(False, 0, 0, 0))
    asc.set_flag(E.MTE2_MTE3, 0)
    asc.wait_flag(E.MTE2_MTE3, 0)
    asc.data_copy(zg, a, 8)


@asc.jit
def uninitialized_read_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, b, c = _ub()
    asc.data_copy(a, xg, TILE)
    asc.data_copy(b, yg, TILE // 2)                            # BUG: half of y loaded, all of it added
    asc.set_flag(E.MTE2_V, 0)
    asc.wait_flag(E.MTE2_V, 0)
    asc.add(c, a, b, TILE)                                     # SEEN
    asc.set_flag(E.V_MTE3, 0)
    asc.wait_flag(E.V_MTE3, 0)
    asc.data_copy(zg, c, TILE)


@asc.jit
def uninitialized_read_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, b, c = _ub()
    asc.data_copy(a, xg, TILE)
    asc.data_copy(b, yg, TILE)                                 # FIX
    asc.set_flag(E.MTE2_V, 0)
    asc.wait_flag(E.MTE2_V, 0)
    asc.add(c, a, b, TILE)
    asc.set_flag(E.V_MTE3, 0)
    asc.wait_flag(E.V_MTE3, 0)
    asc.data_copy(zg, c, TILE)


@asc.jit
def ub_oversubscribed_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    pipe = asc.TPipe()
    qx, qz = asc.TQue(asc.TPosition.VECIN, 2), asc.TQue(asc.TPosition.VECOUT, 2)
    pipe.init_buffer(qx, 2, 64 * 1024)
    pipe.init_buffer(qz, 2, 64 * 1024)                         # BUG: 256 KiB of queues in a 192 KiB UB
    _copy_through(xg, zg, qx, qz, block_length)


@asc.jit
def ub_oversubscribed_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    pipe = asc.TPipe()
    qx, qz = asc.TQue(asc.TPosition.VECIN, 2), asc.TQue(asc.TPosition.VECOUT, 2)
    pipe.init_buffer(qx, 2, 32 * 1024)
    pipe.init_buffer(qz, 2, 32 * 1024)                         # FIX
    _copy_through(xg, zg, qx, qz, block_length)


@asc.jit
def _copy_through(xg: asc.GlobalTensor, zg: asc.GlobalTensor, qx: asc.TQue, qz: asc.TQue, block_length: int):
    for i in range(block_length // TILE):
        a = qx.alloc_tensor(asc.float32)
        asc.data_copy(a, xg[i * TILE:], TILE)
        qx.enque(a)
        a = qx.deque(asc.float32)
        c = qz.alloc_tensor(asc.float32)
        asc.muls(c, a, 2.0, TILE)
        qz.enque(c)
        qx.free_tensor(a)
        c = qz.deque(asc.float32)
        asc.data_copy(zg[i * TILE:], c, TILE)
        qz.free_tensor(c)


# ---------------------------------------------------------------------------------------------
# races between the pipes of a core
# ---------------------------------------------------------------------------------------------

@asc.jit
def missing_mte2_v_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, b, c = _ub()
    for i in range(block_length // TILE):
        asc.data_copy(a, xg[i * TILE:], TILE)
        asc.data_copy(b, yg[i * TILE:], TILE)
        asc.set_flag(E.MTE2_V, 0)
        asc.add(c, a, b, TILE)                                 # BUG: wait_flag(MTE2_V) missing
        asc.wait_flag(E.MTE2_V, 0)
        asc.set_flag(E.V_MTE3, 0)
        asc.wait_flag(E.V_MTE3, 0)
        asc.data_copy(zg[i * TILE:], c, TILE)
        asc.set_flag(E.MTE3_MTE2, 0)
        asc.wait_flag(E.MTE3_MTE2, 0)


@asc.jit
def missing_mte2_v_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, b, c = _ub()
    for i in range(block_length // TILE):
        asc.data_copy(a, xg[i * TILE:], TILE)
        asc.data_copy(b, yg[i * TILE:], TILE)
        asc.set_flag(E.MTE2_V, 0)
        asc.wait_flag(E.MTE2_V, 0)                             # FIX
        asc.add(c, a, b, TILE)
        asc.set_flag(E.V_MTE3, 0)
        asc.wait_flag(E.V_MTE3, 0)
        asc.data_copy(zg[i * TILE:], c, TILE)
        asc.set_flag(E.MTE3_MTE2, 0)
        asc.wait_flag(E.MTE3_MTE2, 0)


@asc.jit
def missing_v_mte3_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, b, c = _ub()
    for i in range(block_length // TILE):
        asc.data_copy(a, xg[i * TILE:], TILE)
        asc.data_copy(b, yg[i * TILE:], TILE)
        asc.set_flag(E.MTE2_V, 0)
        asc.wait_flag(E.MTE2_V, 0)
        asc.add(c, a, b, TILE)
        asc.data_copy(zg[i * TILE:], c, TILE)                  # BUG: no V -> MTE3 flag before the store
        asc.set_flag(E.MTE3_MTE2, 0)
        asc.wait_flag(E.MTE3_MTE2, 0)
        asc.pipe_barrier(asc.PipeID.PIPE_ALL)


@asc.jit
def missing_v_mte3_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, b, c = _ub()
    for i in range(block_length // TILE):
        asc.data_copy(a, xg[i * TILE:], TILE)
        asc.data_copy(b, yg[i * TILE:], TILE)
        asc.set_flag(E.MTE2_V, 0)
        asc.wait_flag(E.MTE2_V, 0)
        asc.add(c, a, b, TILE)
        asc.set_flag(E.V_MTE3, 0)                              # FIX
        asc.wait_flag(E.V_MTE3, 0)
        asc.data_copy(zg[i * TILE:], c, TILE)
        asc.set_flag(E.MTE3_MTE2, 0)
        asc.wait_flag(E.MTE3_MTE2, 0)
        asc.pipe_barrier(asc.PipeID.PIPE_ALL)


@asc.jit
def missing_v_mte2_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    # the next tile's load overwrites a and b while the add of this tile may still read them
    # (write after read): each tile needs a V -> MTE2 hand-back before its buffers are refilled
    xg, yg, zg = _views(x, y, z, block_length)
    a, b, c = _ub()
    for i in range(block_length // TILE):
        asc.data_copy(a, xg[i * TILE:], TILE)                  # BUG: no wait_flag(V_MTE2) before the reload
        asc.data_copy(b, yg[i * TILE:], TILE)
        asc.set_flag(E.MTE2_V, 0)
        asc.wait_flag(E.MTE2_V, 0)
        asc.add(c, a, b, TILE)
        asc.set_flag(E.V_MTE3, 0)
        asc.wait_flag(E.V_MTE3, 0)
        asc.data_copy(zg[i * TILE:], c, TILE)
        asc.set_flag(E.MTE3_V, 0)
        asc.wait_flag(E.MTE3_V, 0)


@asc.jit
def missing_v_mte2_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, b, c = _ub()
    asc.set_flag(E.V_MTE2, 0)
    for i in range(block_length // TILE):
        asc.wait_flag(E.V_MTE2, 0)                             # FIX
        asc.data_copy(a, xg[i * TILE:], TILE)
        asc.data_copy(b, yg[i * TILE:], TILE)
        asc.set_flag(E.MTE2_V, 0)
        asc.wait_flag(E.MTE2_V, 0)
        asc.add(c, a, b, TILE)
        asc.set_flag(E.V_MTE2, 0)
        asc.set_flag(E.V_MTE3, 0)
        asc.wait_flag(E.V_MTE3, 0)
        asc.data_copy(zg[i * TILE:], c, TILE)
        asc.set_flag(E.MTE3_V, 0)
        asc.wait_flag(E.MTE3_V, 0)
    asc.wait_flag(E.V_MTE2, 0)


# ---------------------------------------------------------------------------------------------
# races between cores (GM)
# ---------------------------------------------------------------------------------------------

@asc.jit
def core_overlap_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    # the block offset uses the tile, not the block length: blocks 0 and 1 write the same bytes
    start = asc.get_block_idx() * TILE                         # BUG
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x + start, block_length)
    zg.set_global_buffer(z + start, block_length)
    a, _, c = _ub()
    for i in range(block_length // TILE):
        asc.data_copy(a, xg[i * TILE:], TILE)
        asc.set_flag(E.MTE2_MTE3, 0)
        asc.wait_flag(E.MTE2_MTE3, 0)
        asc.data_copy(zg[i * TILE:], a, TILE)                  # SEEN: the race of the two stores
        asc.set_flag(E.MTE3_MTE2, 0)
        asc.wait_flag(E.MTE3_MTE2, 0)


@asc.jit
def core_overlap_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    start = asc.get_block_idx() * block_length                 # FIX
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x + start, block_length)
    zg.set_global_buffer(z + start, block_length)
    a, _, c = _ub()
    for i in range(block_length // TILE):
        asc.data_copy(a, xg[i * TILE:], TILE)
        asc.set_flag(E.MTE2_MTE3, 0)
        asc.wait_flag(E.MTE2_MTE3, 0)
        asc.data_copy(zg[i * TILE:], a, TILE)
        asc.set_flag(E.MTE3_MTE2, 0)
        asc.wait_flag(E.MTE3_MTE2, 0)


@asc.jit
def core_handoff_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    # each block writes 2x its part of x into y (a GM workspace), then reads its neighbour's part
    xg, yg, zg = _views(x, y, z, block_length)
    n = asc.get_block_num()
    nxt = asc.GlobalTensor()
    nxt.set_global_buffer(y + ((asc.get_block_idx() + 1) % n) * block_length, block_length)
    a, _, c = _ub()
    asc.data_copy(a, xg, TILE)
    asc.set_flag(E.MTE2_V, 0)
    asc.wait_flag(E.MTE2_V, 0)
    asc.muls(c, a, 2.0, TILE)
    asc.set_flag(E.V_MTE3, 0)
    asc.wait_flag(E.V_MTE3, 0)
    asc.data_copy(yg, c, TILE)
    asc.pipe_barrier(asc.PipeID.PIPE_ALL)                      # BUG: orders this core only, not the neighbour
    asc.data_copy(a, nxt, TILE)                                # SEEN
    asc.set_flag(E.MTE2_MTE3, 0)
    asc.wait_flag(E.MTE2_MTE3, 0)
    asc.data_copy(zg, a, TILE)


@asc.jit
def core_handoff_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    n = asc.get_block_num()
    nxt = asc.GlobalTensor()
    nxt.set_global_buffer(y + ((asc.get_block_idx() + 1) % n) * block_length, block_length)
    a, _, c = _ub()
    asc.data_copy(a, xg, TILE)
    asc.set_flag(E.MTE2_V, 0)
    asc.wait_flag(E.MTE2_V, 0)
    asc.muls(c, a, 2.0, TILE)
    asc.set_flag(E.V_MTE3, 0)
    asc.wait_flag(E.V_MTE3, 0)
    asc.data_copy(yg, c, TILE)
    asc.sync_all()                                             # FIX
    asc.data_copy(a, nxt, TILE)
    asc.set_flag(E.MTE2_MTE3, 0)
    asc.wait_flag(E.MTE2_MTE3, 0)
    asc.data_copy(zg, a, TILE)


@asc.jit
def atomic_mixed_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    # every block adds its first tile of x into z[0:TILE]; block 0 first clears z[0:TILE] with a
    # plain store, which nothing orders before the other blocks' atomic adds
    xg, yg, zg = _views(x, y, z, block_length)
    acc = asc.GlobalTensor()
    acc.set_global_buffer(z, TILE)
    a, _, c = _ub()
    if asc.get_block_idx() == 0:
        asc.duplicate(c, 0.0, TILE)
        asc.set_flag(E.V_MTE3, 0)
        asc.wait_flag(E.V_MTE3, 0)
        asc.data_copy(acc, c, TILE)                            # BUG: no sync_all after the clearing store
    asc.data_copy(a, xg, TILE)
    asc.set_flag(E.MTE2_MTE3, 0)
    asc.wait_flag(E.MTE2_MTE3, 0)
    asc.set_atomic_add(asc.float32)
    asc.data_copy(acc, a, TILE)
    asc.set_atomic_none()


@asc.jit
def atomic_mixed_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    acc = asc.GlobalTensor()
    acc.set_global_buffer(z, TILE)
    a, _, c = _ub()
    if asc.get_block_idx() == 0:
        asc.duplicate(c, 0.0, TILE)
        asc.set_flag(E.V_MTE3, 0)
        asc.wait_flag(E.V_MTE3, 0)
        asc.data_copy(acc, c, TILE)
    asc.sync_all()                                             # FIX
    asc.data_copy(a, xg, TILE)
    asc.set_flag(E.MTE2_MTE3, 0)
    asc.wait_flag(E.MTE2_MTE3, 0)
    asc.set_atomic_add(asc.float32)
    asc.data_copy(acc, a, TILE)
    asc.set_atomic_none()


# ---------------------------------------------------------------------------------------------
# synchronisation: flags that never pair up
# ---------------------------------------------------------------------------------------------

@asc.jit
def set_without_wait_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    asc.data_copy(a, xg, TILE)
    asc.set_flag(E.MTE2_MTE3, 0)
    asc.wait_flag(E.MTE2_MTE3, 0)
    asc.set_flag(E.MTE2_V, 1)                                  # BUG: nobody waits for it
    asc.data_copy(zg, a, TILE)


@asc.jit
def set_without_wait_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    asc.data_copy(a, xg, TILE)
    asc.set_flag(E.MTE2_MTE3, 0)
    asc.wait_flag(E.MTE2_MTE3, 0)
    asc.data_copy(zg, a, TILE)                                 # FIX: the stray set_flag is gone


@asc.jit
def wait_without_set_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    asc.data_copy(a, xg, TILE)
    asc.wait_flag(E.MTE2_MTE3, 0)                              # BUG: its set_flag is missing
    asc.data_copy(zg, a, TILE)


@asc.jit
def wait_without_set_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    asc.data_copy(a, xg, TILE)
    asc.set_flag(E.MTE2_MTE3, 0)                               # FIX
    asc.wait_flag(E.MTE2_MTE3, 0)
    asc.data_copy(zg, a, TILE)


@asc.jit
def reversed_event_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    asc.data_copy(a, xg, TILE)
    asc.set_flag(E.MTE2_V, 0)
    asc.wait_flag(E.V_MTE2, 0)                                 # BUG: the pipes of the event swapped
    asc.muls(c, a, 2.0, TILE)
    asc.set_flag(E.V_MTE3, 0)
    asc.wait_flag(E.V_MTE3, 0)
    asc.data_copy(zg, c, TILE)


@asc.jit
def reversed_event_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    asc.data_copy(a, xg, TILE)
    asc.set_flag(E.MTE2_V, 0)
    asc.wait_flag(E.MTE2_V, 0)                                 # FIX
    asc.muls(c, a, 2.0, TILE)
    asc.set_flag(E.V_MTE3, 0)
    asc.wait_flag(E.V_MTE3, 0)
    asc.data_copy(zg, c, TILE)


@asc.jit
def loop_reverse_sync_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    # the loop waits at its top for the MTE3 -> MTE2 flag of the previous tile's store; the first
    # tile has no previous store, so the flag must be set once before the loop
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    for i in range(block_length // TILE):                      # BUG: no set_flag(MTE3_MTE2) before the loop
        asc.wait_flag(E.MTE3_MTE2, 0)                          # SEEN
        asc.data_copy(a, xg[i * TILE:], TILE)
        asc.set_flag(E.MTE2_MTE3, 0)
        asc.wait_flag(E.MTE2_MTE3, 0)
        asc.data_copy(zg[i * TILE:], a, TILE)
        asc.set_flag(E.MTE3_MTE2, 0)
    asc.wait_flag(E.MTE3_MTE2, 0)


@asc.jit
def loop_reverse_sync_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    asc.set_flag(E.MTE3_MTE2, 0)                               # FIX
    for i in range(block_length // TILE):
        asc.wait_flag(E.MTE3_MTE2, 0)
        asc.data_copy(a, xg[i * TILE:], TILE)
        asc.set_flag(E.MTE2_MTE3, 0)
        asc.wait_flag(E.MTE2_MTE3, 0)
        asc.data_copy(zg[i * TILE:], a, TILE)
        asc.set_flag(E.MTE3_MTE2, 0)
    asc.wait_flag(E.MTE3_MTE2, 0)


@asc.jit
def loop_tail_wait_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    # the pre-set/loop pattern again, without the wait after the loop: the last tile's flag stays set
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    asc.set_flag(E.MTE3_MTE2, 0)
    for i in range(block_length // TILE):
        asc.wait_flag(E.MTE3_MTE2, 0)
        asc.data_copy(a, xg[i * TILE:], TILE)
        asc.set_flag(E.MTE2_MTE3, 0)
        asc.wait_flag(E.MTE2_MTE3, 0)
        asc.data_copy(zg[i * TILE:], a, TILE)
        asc.set_flag(E.MTE3_MTE2, 0)                           # BUG: the last one is never waited for


@asc.jit
def loop_tail_wait_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    asc.set_flag(E.MTE3_MTE2, 0)
    for i in range(block_length // TILE):
        asc.wait_flag(E.MTE3_MTE2, 0)
        asc.data_copy(a, xg[i * TILE:], TILE)
        asc.set_flag(E.MTE2_MTE3, 0)
        asc.wait_flag(E.MTE2_MTE3, 0)
        asc.data_copy(zg[i * TILE:], a, TILE)
        asc.set_flag(E.MTE3_MTE2, 0)
    asc.wait_flag(E.MTE3_MTE2, 0)                              # FIX


@asc.jit
def cross_core_wait_unset_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    # every block sets cross-core flag 3 (mode 0: all the vector cores) and waits on flag 4
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    asc.data_copy(a, xg, TILE)
    asc.set_flag(E.MTE2_MTE3, 0)
    asc.wait_flag(E.MTE2_MTE3, 0)
    asc.data_copy(zg, a, TILE)
    asc.cross_core_set_flag(3, 0, asc.PipeID.PIPE_MTE3)
    asc.cross_core_wait_flag(4, 0, asc.PipeID.PIPE_MTE3)       # BUG: flag 4, but flag 3 was set


@asc.jit
def cross_core_wait_unset_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    a, _, c = _ub()
    asc.data_copy(a, xg, TILE)
    asc.set_flag(E.MTE2_MTE3, 0)
    asc.wait_flag(E.MTE2_MTE3, 0)
    asc.data_copy(zg, a, TILE)
    asc.cross_core_set_flag(3, 0, asc.PipeID.PIPE_MTE3)
    asc.cross_core_wait_flag(3, 0, asc.PipeID.PIPE_MTE3)       # FIX


# ---------------------------------------------------------------------------------------------
# TQue misuse
# ---------------------------------------------------------------------------------------------

def _queues(buffer_num: int = 1):
    pipe = asc.TPipe()
    qx, qz = asc.TQue(asc.TPosition.VECIN, buffer_num), asc.TQue(asc.TPosition.VECOUT, buffer_num)
    pipe.init_buffer(qx, buffer_num, TILE * 4)
    pipe.init_buffer(qz, buffer_num, TILE * 4)
    return qx, qz


@asc.jit
def tque_alloc_over_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    qx, qz = _queues(1)
    a = qx.alloc_tensor(asc.float32)
    b = qx.alloc_tensor(asc.float32)                           # BUG: buffer_num is 1
    asc.data_copy(a, xg, TILE)
    asc.data_copy(b, yg, TILE)


@asc.jit
def tque_alloc_over_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    qx, qz = _queues(2)                                        # FIX
    a = qx.alloc_tensor(asc.float32)
    b = qx.alloc_tensor(asc.float32)
    asc.data_copy(a, xg, TILE)
    asc.data_copy(b, yg, TILE)
    qx.enque(a)
    qx.enque(b)
    qx.free_tensor(qx.deque(asc.float32))
    qx.free_tensor(qx.deque(asc.float32))


@asc.jit
def tque_double_free_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    qx, qz = _queues(1)
    a = qx.alloc_tensor(asc.float32)
    asc.data_copy(a, xg, TILE)
    qx.enque(a)
    a = qx.deque(asc.float32)
    qx.free_tensor(a)
    qx.free_tensor(a)                                          # BUG: freed twice


@asc.jit
def tque_double_free_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    qx, qz = _queues(1)
    a = qx.alloc_tensor(asc.float32)
    asc.data_copy(a, xg, TILE)
    qx.enque(a)
    a = qx.deque(asc.float32)
    qx.free_tensor(a)                                          # FIX: once


@asc.jit
def tque_deque_empty_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    qx, qz = _queues(1)
    a = qx.alloc_tensor(asc.float32)
    asc.data_copy(a, xg, TILE)
    a = qx.deque(asc.float32)                                  # BUG: never enqueued
    qx.free_tensor(a)


@asc.jit
def tque_deque_empty_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    qx, qz = _queues(1)
    a = qx.alloc_tensor(asc.float32)
    asc.data_copy(a, xg, TILE)
    qx.enque(a)                                                # FIX
    a = qx.deque(asc.float32)
    qx.free_tensor(a)


@asc.jit
def tque_never_freed_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    qx, qz = _queues(1)
    a = qx.alloc_tensor(asc.float32)                           # BUG: never freed
    asc.data_copy(a, xg, TILE)
    qx.enque(a)
    a = qx.deque(asc.float32)


@asc.jit
def tque_never_freed_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    qx, qz = _queues(1)
    a = qx.alloc_tensor(asc.float32)
    asc.data_copy(a, xg, TILE)
    qx.enque(a)
    a = qx.deque(asc.float32)
    qx.free_tensor(a)                                          # FIX


@asc.jit
def tque_use_after_free_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    qx, qz = _queues(1)
    a = qx.alloc_tensor(asc.float32)
    asc.data_copy(a, xg, TILE)
    qx.enque(a)
    a = qx.deque(asc.float32)
    c = qz.alloc_tensor(asc.float32)
    qx.free_tensor(a)
    asc.muls(c, a, 2.0, TILE)                                  # BUG: a was freed on the line above
    qz.enque(c)
    c = qz.deque(asc.float32)
    asc.data_copy(zg, c, TILE)
    qz.free_tensor(c)


@asc.jit
def tque_use_after_free_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    qx, qz = _queues(1)
    a = qx.alloc_tensor(asc.float32)
    asc.data_copy(a, xg, TILE)
    qx.enque(a)
    a = qx.deque(asc.float32)
    c = qz.alloc_tensor(asc.float32)
    asc.muls(c, a, 2.0, TILE)
    qx.free_tensor(a)                                          # FIX: after its last use
    qz.enque(c)
    c = qz.deque(asc.float32)
    asc.data_copy(zg, c, TILE)
    qz.free_tensor(c)


@asc.jit
def tque_no_deque_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    # the consumer uses the producer's handle without deque: nothing waits for the load
    xg, yg, zg = _views(x, y, z, block_length)
    qx, qz = _queues(1)
    a = qx.alloc_tensor(asc.float32)
    asc.data_copy(a, xg, TILE)
    qx.enque(a)
    c = qz.alloc_tensor(asc.float32)
    asc.muls(c, a, 2.0, TILE)                                  # BUG: a used without qx.deque
    qz.enque(c)
    qx.free_tensor(a)
    c = qz.deque(asc.float32)
    asc.data_copy(zg, c, TILE)
    qz.free_tensor(c)


@asc.jit
def tque_no_deque_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    qx, qz = _queues(1)
    a = qx.alloc_tensor(asc.float32)
    asc.data_copy(a, xg, TILE)
    qx.enque(a)
    a = qx.deque(asc.float32)                                  # FIX
    c = qz.alloc_tensor(asc.float32)
    asc.muls(c, a, 2.0, TILE)
    qz.enque(c)
    qx.free_tensor(a)
    c = qz.deque(asc.float32)
    asc.data_copy(zg, c, TILE)
    qz.free_tensor(c)


@asc.jit
def tque_write_after_enque_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    # the producer keeps writing a buffer it has already handed to the consumer
    xg, yg, zg = _views(x, y, z, block_length)
    qx, qz = _queues(1)
    a = qx.alloc_tensor(asc.float32)
    asc.data_copy(a, xg, TILE // 2)
    qx.enque(a)
    asc.data_copy(a[TILE // 2:], xg[TILE // 2:], TILE // 2)    # BUG: after enque
    a = qx.deque(asc.float32)
    c = qz.alloc_tensor(asc.float32)
    asc.muls(c, a, 2.0, TILE)
    qz.enque(c)
    qx.free_tensor(a)
    c = qz.deque(asc.float32)
    asc.data_copy(zg, c, TILE)
    qz.free_tensor(c)


@asc.jit
def tque_write_after_enque_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    qx, qz = _queues(1)
    a = qx.alloc_tensor(asc.float32)
    asc.data_copy(a, xg, TILE // 2)
    asc.data_copy(a[TILE // 2:], xg[TILE // 2:], TILE // 2)    # FIX: before enque
    qx.enque(a)
    a = qx.deque(asc.float32)
    c = qz.alloc_tensor(asc.float32)
    asc.muls(c, a, 2.0, TILE)
    qz.enque(c)
    qx.free_tensor(a)
    c = qz.deque(asc.float32)
    asc.data_copy(zg, c, TILE)
    qz.free_tensor(c)


@asc.jit
def tbuf_overrun_bug(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    # a TBuf of one tile, used as two: the second half runs over into the queue after it
    xg, yg, zg = _views(x, y, z, block_length)
    pipe = asc.TPipe()
    tmp = asc.TBuf(asc.TPosition.VECCALC)
    pipe.init_buffer(tmp, TILE * 4)
    qz = asc.TQue(asc.TPosition.VECOUT, 1)
    pipe.init_buffer(qz, 1, TILE * 4)
    c = qz.alloc_tensor(asc.float32)
    t = tmp.get(asc.float32, 2 * TILE)                         # BUG: the TBuf holds TILE
    asc.data_copy(t, xg, 2 * TILE)
    asc.set_flag(E.MTE2_V, 0)
    asc.wait_flag(E.MTE2_V, 0)
    asc.add(c, t, t[TILE:], TILE)
    qz.enque(c)
    c = qz.deque(asc.float32)
    asc.data_copy(zg, c, TILE)
    qz.free_tensor(c)


@asc.jit
def tbuf_overrun_fixed(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    xg, yg, zg = _views(x, y, z, block_length)
    pipe = asc.TPipe()
    tmp = asc.TBuf(asc.TPosition.VECCALC)
    pipe.init_buffer(tmp, 2 * TILE * 4)                        # FIX
    qz = asc.TQue(asc.TPosition.VECOUT, 1)
    pipe.init_buffer(qz, 1, TILE * 4)
    c = qz.alloc_tensor(asc.float32)
    t = tmp.get(asc.float32, 2 * TILE)
    asc.data_copy(t, xg, 2 * TILE)
    asc.set_flag(E.MTE2_V, 0)
    asc.wait_flag(E.MTE2_V, 0)
    asc.add(c, t, t[TILE:], TILE)
    qz.enque(c)
    c = qz.deque(asc.float32)
    asc.data_copy(zg, c, TILE)
    qz.free_tensor(c)

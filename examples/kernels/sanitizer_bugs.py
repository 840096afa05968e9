"""Three synchronisation and memory bugs in a pyasc-style vector add, and what the sanitizer says.

``add`` is a correct vector add with hand-placed flags (the shape of pyasc tutorial 01_add):
each tile is loaded (MTE2), added (VECTOR) and stored (MTE3), ordered by set_flag/wait_flag.
The three others differ from it in one line each (marked ``# BUG``):

- ``add_missing_wait``: the MTE2 -> V wait_flag is gone. The add may run while the copy-in is
  still writing the UB: racecheck names the data_copy and the add.
- ``add_wrong_event``: the add waits on event 1, the copy-in set event 0: no pipe can make
  progress; synccheck reports the deadlock, naming each blocked pipe and the flag it waits on.
- ``add_out_of_bounds``: the last store goes one tile past the end of z: the machine faults
  (MemoryFault); memcheck names the line and the address.

All four are registered as operators (``opsim.register_operator``), so any of them runs as
``opsim check examples/kernels/sanitizer_bugs.py:add_missing_wait --shape 16384``.

Run: ``python examples/kernels/sanitizer_bugs.py`` -- runs all four under the sanitizer and
prints the reports.
"""
from __future__ import annotations

import numpy as np

import opsim
import opsim.asc as asc

TILE = 1024


@asc.jit
def add(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    start = asc.get_block_idx() * block_length
    xg, yg, zg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x + start, block_length)
    yg.set_global_buffer(y + start, block_length)
    zg.set_global_buffer(z + start, block_length)
    x_ub = asc.LocalTensor(x.dtype, asc.TPosition.VECIN, 0, TILE)
    y_ub = asc.LocalTensor(x.dtype, asc.TPosition.VECIN, TILE * 4, TILE)
    z_ub = asc.LocalTensor(x.dtype, asc.TPosition.VECOUT, 2 * TILE * 4, TILE)
    for i in range(block_length // TILE):
        asc.data_copy(x_ub, xg[i * TILE:], TILE)
        asc.data_copy(y_ub, yg[i * TILE:], TILE)
        asc.set_flag(asc.HardEvent.MTE2_V, 0)
        asc.wait_flag(asc.HardEvent.MTE2_V, 0)
        asc.add(z_ub, x_ub, y_ub, TILE)
        asc.set_flag(asc.HardEvent.V_MTE3, 0)
        asc.wait_flag(asc.HardEvent.V_MTE3, 0)
        asc.data_copy(zg[i * TILE:], z_ub, TILE)
        asc.set_flag(asc.HardEvent.MTE3_MTE2, 0)
        asc.wait_flag(asc.HardEvent.MTE3_MTE2, 0)


@asc.jit
def add_missing_wait(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    start = asc.get_block_idx() * block_length
    xg, yg, zg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x + start, block_length)
    yg.set_global_buffer(y + start, block_length)
    zg.set_global_buffer(z + start, block_length)
    x_ub = asc.LocalTensor(x.dtype, asc.TPosition.VECIN, 0, TILE)
    y_ub = asc.LocalTensor(x.dtype, asc.TPosition.VECIN, TILE * 4, TILE)
    z_ub = asc.LocalTensor(x.dtype, asc.TPosition.VECOUT, 2 * TILE * 4, TILE)
    for i in range(block_length // TILE):
        asc.data_copy(x_ub, xg[i * TILE:], TILE)
        asc.data_copy(y_ub, yg[i * TILE:], TILE)
        asc.set_flag(asc.HardEvent.MTE2_V, 0)
        # BUG: asc.wait_flag(asc.HardEvent.MTE2_V, 0) is missing
        asc.add(z_ub, x_ub, y_ub, TILE)
        asc.set_flag(asc.HardEvent.V_MTE3, 0)
        asc.wait_flag(asc.HardEvent.V_MTE3, 0)
        asc.data_copy(zg[i * TILE:], z_ub, TILE)
        asc.set_flag(asc.HardEvent.MTE3_MTE2, 0)
        asc.wait_flag(asc.HardEvent.MTE3_MTE2, 0)


@asc.jit
def add_wrong_event(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    start = asc.get_block_idx() * block_length
    xg, yg, zg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x + start, block_length)
    yg.set_global_buffer(y + start, block_length)
    zg.set_global_buffer(z + start, block_length)
    x_ub = asc.LocalTensor(x.dtype, asc.TPosition.VECIN, 0, TILE)
    y_ub = asc.LocalTensor(x.dtype, asc.TPosition.VECIN, TILE * 4, TILE)
    z_ub = asc.LocalTensor(x.dtype, asc.TPosition.VECOUT, 2 * TILE * 4, TILE)
    for i in range(block_length // TILE):
        asc.data_copy(x_ub, xg[i * TILE:], TILE)
        asc.data_copy(y_ub, yg[i * TILE:], TILE)
        asc.set_flag(asc.HardEvent.MTE2_V, 0)
        asc.wait_flag(asc.HardEvent.MTE2_V, 1)          # BUG: event 1, but event 0 was set
        asc.add(z_ub, x_ub, y_ub, TILE)
        asc.set_flag(asc.HardEvent.V_MTE3, 0)
        asc.wait_flag(asc.HardEvent.V_MTE3, 0)
        asc.data_copy(zg[i * TILE:], z_ub, TILE)
        asc.set_flag(asc.HardEvent.MTE3_MTE2, 0)
        asc.wait_flag(asc.HardEvent.MTE3_MTE2, 0)


@asc.jit
def add_out_of_bounds(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):
    start = asc.get_block_idx() * block_length
    xg, yg, zg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x + start, block_length)
    yg.set_global_buffer(y + start, block_length)
    zg.set_global_buffer(z + start, block_length + TILE)
    x_ub = asc.LocalTensor(x.dtype, asc.TPosition.VECIN, 0, TILE)
    y_ub = asc.LocalTensor(x.dtype, asc.TPosition.VECIN, TILE * 4, TILE)
    z_ub = asc.LocalTensor(x.dtype, asc.TPosition.VECOUT, 2 * TILE * 4, TILE)
    for i in range(block_length // TILE):
        asc.data_copy(x_ub, xg[i * TILE:], TILE)
        asc.data_copy(y_ub, yg[i * TILE:], TILE)
        asc.set_flag(asc.HardEvent.MTE2_V, 0)
        asc.wait_flag(asc.HardEvent.MTE2_V, 0)
        asc.add(z_ub, x_ub, y_ub, TILE)
        asc.set_flag(asc.HardEvent.V_MTE3, 0)
        asc.wait_flag(asc.HardEvent.V_MTE3, 0)
        asc.data_copy(zg[(i + 1) * TILE:], z_ub, TILE)  # BUG: one tile too far
        asc.set_flag(asc.HardEvent.MTE3_MTE2, 0)
        asc.wait_flag(asc.HardEvent.MTE3_MTE2, 0)


def tiling(spec, inputs, attrs):
    """Host tiling: as many blocks (up to the vector cores) as whole tiles allow."""
    n = inputs["x"].numel
    if n % TILE:
        raise ValueError(f"x has {n} elements; this add needs a multiple of {TILE}")
    tiles = n // TILE
    block_dim = max(d for d in range(1, min(spec.vector_cores, tiles) + 1) if tiles % d == 0)
    return {"block_dim": block_dim, "block_length": n // block_dim}


for _kernel in (add, add_missing_wait, add_wrong_event, add_out_of_bounds):
    opsim.register_operator(_kernel, inputs=("x", "y"), outputs=("z",), tiling=tiling,
                            golden=lambda x, y: {"z": x + y}, example_shape=(8 * TILE,))


def main() -> None:
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(8 * TILE).astype(np.float32) for _ in range(2))
    for name in ("add", "add_missing_wait", "add_wrong_event", "add_out_of_bounds"):
        try:
            res = opsim.run(name, x=x, y=y, sanitize=True)
            report = res.sanitizer
        except opsim.SimulatorError as exc:
            report = exc.sanitizer
        print(f"== {name}\n{report}\n")


if __name__ == "__main__":
    main()

"""opsim.asc front-end overhead: the same vector add as a pyasc kernel (greenlet bridge) and as
a native generator kernel (the built-in kernel language), on the same simulated device.

Both put the same instructions through the same dispatcher, so their cycles must be equal; the
wall-clock ratio of the two, measured in this one run, is the front-end's cost per launch.

    python benchmarks/asc_frontend.py [--n 2097152] [--tile 1024]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import opsim.asc as asc
from opsim.api import device_spec
from opsim.simulator import numerics as nx
from opsim.simulator.device import Device
from opsim.simulator.isa import Add, DataCopy
from opsim.simulator.tile import GlobalTensor


@asc.jit
def add_asc(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int,
            tile: asc.ConstExpr[int]):
    start = asc.get_block_idx() * block_length
    xg, yg, zg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x + start)
    yg.set_global_buffer(y + start)
    zg.set_global_buffer(z + start)
    pipe = asc.TPipe()
    qx, qy, qz = asc.TQue(asc.TPosition.VECIN, 2), asc.TQue(asc.TPosition.VECIN, 2), asc.TQue(asc.TPosition.VECOUT, 2)
    for q in (qx, qy, qz):
        pipe.init_buffer(q, 2, tile * 4)
    for i in range(block_length // tile):
        xl, yl = qx.alloc_tensor(asc.float32), qy.alloc_tensor(asc.float32)
        asc.data_copy(xl, xg[i * tile:], tile)
        asc.data_copy(yl, yg[i * tile:], tile)
        qx.enque(xl)
        qy.enque(yl)
        xl, yl = qx.deque(asc.float32), qy.deque(asc.float32)
        zl = qz.alloc_tensor(asc.float32)
        asc.add(zl, xl, yl, tile)
        qz.enque(zl)
        qx.free_tensor(xl)
        qy.free_tensor(yl)
        zl = qz.deque(asc.float32)
        asc.data_copy(zg[i * tile:], zl, tile)
        qz.free_tensor(zl)


def add_native(ctx, x, y, z, block_length, tile):
    """The same program in the generator kernel language (simulator/tile.py queues)."""
    start = ctx.block_idx * block_length
    qx, qy, qz = ctx.queue("VECIN", 2, tile * 4), ctx.queue("VECIN", 2, tile * 4), ctx.queue("VECOUT", 2, tile * 4)
    for i in range(block_length // tile):
        off = start + i * tile
        xl, yl = qx.alloc(nx.FP32), qy.alloc(nx.FP32)
        yield DataCopy(xl, x[off:off + tile], tile)
        yield DataCopy(yl, y[off:off + tile], tile)
        qx.enque(xl)
        qy.enque(yl)
        xl, yl = qx.deque(), qy.deque()
        zl = qz.alloc(nx.FP32)
        yield Add(zl, xl, yl, count=tile)
        qz.enque(zl)
        qx.free(xl)
        qy.free(yl)
        zl = qz.deque()
        yield DataCopy(z[off:off + tile], zl, tile)
        qz.free(zl)


def run_native(x: np.ndarray, y: np.ndarray, blocks: int, tile: int) -> tuple[int, np.ndarray]:
    dev = Device(device_spec("atlas-a2"))
    s = dev.create_stream()
    addrs = []
    for a in (x, y, np.zeros_like(x)):
        addr = dev.malloc(a.nbytes)
        dev.write(addr, a)
        addrs.append(GlobalTensor.contiguous(dev, addr, nx.FP32, (a.size,)))
    launch = dev.launch(s, add_native, blocks, *addrs, x.size // blocks, tile)
    dev.synchronize(s)
    z = dev.read(addrs[2].addr, x.nbytes).view(np.float32)
    return launch.cycles, z


def measure(n: int, tile: int, blocks: int = 8) -> dict:
    rng = np.random.default_rng(0)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    z = np.zeros_like(x)
    t0 = time.perf_counter()
    res = add_asc[blocks, None](x, y, z, n // blocks, tile, trace="off")
    t1 = time.perf_counter()
    native_cycles, zn = run_native(x, y, blocks, tile)
    t2 = time.perf_counter()
    return {"asc_cycles": res.cycles, "native_cycles": native_cycles, "same_bits": bool(np.array_equal(z, zn)),
            "instructions": res.stats["instructions"], "asc_s": t1 - t0, "native_s": t2 - t1,
            "ratio": (t1 - t0) / (t2 - t1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 21)
    ap.add_argument("--tile", type=int, default=1024)
    a = ap.parse_args()
    r = measure(a.n, a.tile)
    equal = r['asc_cycles'] == r['native_cycles']
    print(f"cycles: asc {r['asc_cycles']}, native {r['native_cycles']} (equal: {equal}); "
          f"bits equal: {r['same_bits']}")
    print(f"{r['instructions']} busy instructions: asc {r['asc_s']:.2f} s, native {r['native_s']:.2f} s, "
          f"front-end/native wall ratio {r['ratio']:.2f}")


if __name__ == "__main__":
    main()

"""Small generator kernels with synchronisation and memory bugs, for the sanitizer tests."""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from opsim import device_spec
from opsim.simulator import numerics as nx
from opsim.simulator.device import Device
from opsim.simulator.isa import Add, DataCopy
from opsim.simulator.sanitizer import Sanitizer
from opsim.simulator.tile import GlobalTensor, KernelContext
from opsim.traces.trace import Trace

N = 1024


def manual_add(ctx: KernelContext, x: GlobalTensor, y: GlobalTensor, z: GlobalTensor,
               bug: str = "", tiles: int = 1) -> Iterator[Any]:
    """z = x + y in ``tiles`` tiles of N elements with hand-written flags; ``bug`` breaks it:
    "no-wait" drops the MTE2 -> V wait, "wrong-event" waits on event 1 instead of 0,
    "oob-store" stores one tile past the end of z."""
    xl, yl, zl = (ctx.tbuf(N * 4, nx.FP32) for _ in range(3))
    for t in range(tiles):
        ctx.tile = t
        off = t * N
        if t:
            ctx.emit_wait("MTE3", "MTE2", 0)     # the previous store read zl... and x/y are free
        yield DataCopy(xl, x[off:off + N])
        yield DataCopy(yl, y[off:off + N])
        ctx.emit_set("MTE2", "VECTOR", 0)
        if bug != "no-wait":
            ctx.emit_wait("MTE2", "VECTOR", 1 if bug == "wrong-event" else 0)
        if t:
            ctx.emit_wait("MTE3", "VECTOR", 0)
        yield Add(zl, xl, yl)
        ctx.emit_set("VECTOR", "MTE3", 0)
        ctx.emit_wait("VECTOR", "MTE3", 0)
        dst = z[off + (N if bug == "oob-store" else 0):off + N + (N if bug == "oob-store" else 0)]
        yield DataCopy(dst, zl)
        if t + 1 < tiles:
            ctx.emit_set("MTE3", "MTE2", 0)
            ctx.emit_set("MTE3", "VECTOR", 0)


def run_add(bug: str = "", tiles: int = 1, sanitize: bool = True, trace: bool = False):
    """(device, sanitizer or None, x, y, z address, error or None) of one run of manual_add."""
    spec = device_spec("atlas-a2")
    dev = Device(spec, trace=Trace("instruction", spec.clock_hz) if trace else None)
    san = Sanitizer(dev) if sanitize else None
    rng = np.random.default_rng(0)
    n = N * tiles
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    tensors = []
    for a in (x, y, None):
        addr = dev.malloc(n * 4)
        if a is not None:
            dev.write(addr, a)
        tensors.append(addr)
    # z is viewed one tile longer than its allocation: the "oob-store" bug writes there
    gx, gy = (GlobalTensor.contiguous(dev, a, nx.FP32, (n,)) for a in tensors[:2])
    gz = GlobalTensor.contiguous(dev, tensors[2], nx.FP32, (n + N,))
    stream = dev.create_stream()
    dev.launch(stream, manual_add, 1, gx, gy, gz, bug, tiles)
    err = None
    try:
        dev.synchronize()
    except Exception as exc:  # the test looks at it
        err = exc
    return dev, san, x, y, tensors[2], err

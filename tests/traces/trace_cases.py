"""Real traces for the trace tests: small opsim runs of the registered operators, a DSP run."""
from __future__ import annotations

import numpy as np

from opsim import devices
import opsim
from opsim.kernels import registry
from opsim.simulator import numerics as nx
from opsim.simulator.device import Device
from opsim.simulator.isa import Add
from opsim.simulator.tile import GlobalTensor, elementwise_pipeline
from opsim.traces.trace import Trace


def mse_run(level: str = "instruction", n: int = 8192, dtype=np.float32, **tiling):
    rng = np.random.default_rng(7)
    g, x, y = (rng.standard_normal(n).astype(dtype) for _ in range(3))
    tiling = {"tile_length": 512, "buffer_num": 2, "block_dim": 4, **tiling}
    return opsim.run("mse_loss_backward", grad_output=g, self=x, target=y, reduction="mean",
                     trace=level, tiling=tiling)


def registered_cases() -> list[tuple[str, str, str]]:
    """(operator, device, dtype): every registered operator on one device per supported series,
    in its first and last supported dtype."""
    cases = []
    for name in registry.names():
        op = registry.get(name)
        seen = set()
        for dev in devices.catalogue():
            spec = devices.load(dev)
            if spec.series not in op.products or spec.series in seen:
                continue
            seen.add(spec.series)
            dts = op.dtypes(spec)
            for dt in sorted({dts[0], dts[-1]}):
                cases.append((name, dev, dt))
    return cases


def run_case(name: str, dev: str, dt: str, level: str = "instruction"):
    op = registry.get(name)
    kwargs = op.example(np.random.default_rng(0), devices.load(dev), dt)
    return opsim.run(name, device=dev, trace=level, **kwargs)


def dsp_add_trace(level: str = "instruction", n: int = 4096) -> Trace:
    """x + y on the 4 DSP cores of mt7004 through the shared element-wise pipeline (DMA pipe)."""
    spec = devices.load("mt7004")
    tr = Trace(level, spec.clock_hz, metadata={
        "device": "mt7004", "operator": "add", "shapes": {"x": [n]}, "dtypes": {"x": "fp32"},
        "opsim_version": "test"})
    dev = Device(spec, trace=tr)

    def gm(arr):
        addr = dev.malloc(arr.nbytes)
        dev.write(addr, arr)
        return GlobalTensor.contiguous(dev, addr, nx.FP32, arr.shape)
    x, y = gm(np.ones(n, np.float32)), gm(np.full(n, 2.0, np.float32))
    out = GlobalTensor.contiguous(dev, dev.malloc(n * 4), nx.FP32, (n,))

    def kernel(ctx):
        per = n // ctx.block_dim

        def compute(ctx, ins, o, k):
            yield Add(o, ins[0], ins[1], count=k)
        yield from elementwise_pipeline(ctx, inputs=[x, y], output=out, start=ctx.block_idx * per,
                                        length=per, tile_length=256, buffer_num=2, compute=compute)
    stream = dev.create_stream()
    dev.launch(stream, kernel, 4, unit="dsp", name="add")
    dev.synchronize(stream)
    assert float(dev.read(out.addr, 4).view(np.float32)[0]) == 3.0
    return tr

"""Pipe heads are paid once per core and pipe per launch, the MTE2 head priced for the blocks
running at once (docs/sources.md#mte-load-store: "once per kernel per pipe", MTE2
``15.89·blockDim + 882.09``), not once per block for every block queued on a core; a kernel whose
largest load is 25000 B or more pays the large-load form ``32.72·blockDim + 1575.03`` instead,
the difference with the first large load when small ones came first (assumption A-10).

The goldens are computed here from the published numbers and the core count of the part
(atlas-a2: 48 vector cores, docs/sources.md#soc-a2-a3), not read from the code under test.
"""
from __future__ import annotations

from typing import Any

import pytest

import opsim
from opsim import TensorSpec as T
from opsim.kernels.analytic import TileWork, pipeline_estimate
from opsim.simulator import numerics as nx
from opsim.simulator.device import Device
from opsim.simulator.isa import DataCopyPad, Muls
from opsim.simulator.replay import ReplayDevice, replay_launches
from opsim.simulator.tile import GlobalTensor, elementwise_pipeline

A2_VECTOR_CORES = 48
NO_MTE2_HEAD = {"mte2.head": 0, "mte2.head_per_block": 0, "mte2.head_large": 0, "mte2.head_large_per_block": 0}
LARGE_LOAD = 25000       # bytes: the published threshold of the large-load head
# the lockstep cores shift by the head; a few cycles of slack for rounding of shared link rates
SLACK = 16


def _mte2_head(concurrent: int) -> int:
    """The published small-load MTE2 head for ``concurrent`` cores loading at once."""
    return round(15.89 * concurrent + 882.09)


def _mte2_large_head(concurrent: int) -> int:
    """The published MTE2 head of a kernel whose largest load is 25000 B or more."""
    return round(32.72 * concurrent + 1575.03)


def _mse_cycles(mode: str, n: int, tiling: dict[str, Any], overrides: dict[str, Any] | None = None) -> int:
    s = T((n,), "fp32")
    res = opsim.run("mse_loss_backward", device="atlas-a2", mode=mode, grad_output=s, self=s, target=s,
                    tiling=tiling, device_overrides=overrides, **({"trace": "off"} if mode == "timing" else {}))
    assert res.stats["block_dim"] == tiling["block_dim"]
    return res.cycles


@pytest.mark.parametrize("mode", ["timing", "estimate"])
@pytest.mark.parametrize("block_dim", [48, 96, 480])
def test_the_mte2_head_is_paid_once_per_core_whatever_the_block_count(mode: str, block_dim: int) -> None:
    # 96 x 64 elements: the head dominates the load time. Every core runs block_dim / 48 blocks;
    # per block the head would cost (block_dim / 48) x (882.09 + 15.89 x block_dim) cycles
    n, tiling = 96 * 64, {"block_dim": block_dim}
    extra = _mse_cycles(mode, n, tiling) - _mse_cycles(mode, n, tiling, NO_MTE2_HEAD)
    assert abs(extra - _mte2_head(A2_VECTOR_CORES)) <= SLACK, (extra, _mte2_head(A2_VECTOR_CORES))


@pytest.mark.parametrize("mode", ["timing", "estimate"])
def test_the_mte2_head_is_priced_for_the_cores_the_core_mask_allows(mode: str) -> None:
    # 16 blocks on the 4 cores of the mask: four at a time, each core pays one head for 4 loaders
    tiling = {"block_dim": 16, "core_mask": 0b1010_0000_0000_0110}
    extra = _mse_cycles(mode, 16 * 64, tiling) - _mse_cycles(mode, 16 * 64, tiling, NO_MTE2_HEAD)
    assert abs(extra - _mte2_head(4)) <= SLACK, (extra, _mte2_head(4))


@pytest.mark.parametrize("mode", ["timing", "estimate"])
def test_more_blocks_than_cores_cost_about_as_much_as_one_block_per_core(mode: str) -> None:
    # the same 48000 elements in 1000 blocks (about 21 per core) or in 48: the extra blocks add
    # their copies' start-ups and vector call costs, not a head each (which made 1000 blocks
    # cost 87x the 48 of them)
    n = 48 * 1000
    many, few = _mse_cycles(mode, n, {"block_dim": 1000}), _mse_cycles(mode, n, {"block_dim": 48})
    assert few < many < 2 * few, (many, few)


@pytest.mark.parametrize("tile", [1024, 8192])
def test_the_closed_form_pays_the_heads_in_the_first_wave_only(tile: int) -> None:
    # kernels/analytic.pipeline_estimate against the simulator running the same pipeline with
    # 96 blocks on 48 cores (two waves), with and without the MTE2 head; tiles of 1024 fp32 load
    # 4 KiB (the small head), of 8192 fp32 32 KiB (the large one)
    blocks, per = 96, 2 * tile
    golden = _mte2_head if 4 * tile < LARGE_LOAD else _mte2_large_head
    got: dict[bool, tuple[int, int]] = {}
    for head in (True, False):
        spec = opsim.device_spec("atlas-a2", None if head else NO_MTE2_HEAD)
        dev = Device(spec, functional=False)
        stream = dev.create_stream()
        x = GlobalTensor.contiguous(dev, dev.malloc(4 * blocks * per), nx.FP32, (blocks * per,))
        y = GlobalTensor.contiguous(dev, dev.malloc(4 * blocks * per), nx.FP32, (blocks * per,))

        def kernel(ctx: Any, x: GlobalTensor, y: GlobalTensor) -> Any:
            def compute(ctx: Any, ins: Any, out: Any, m: int) -> Any:
                yield Muls(out, ins[0], scalar=2.0, count=m)
            yield from elementwise_pipeline(ctx, inputs=[x], output=y, start=ctx.block_idx * per, length=per,
                                            tile_length=tile, buffer_num=2, compute=compute)

        launch = dev.launch(stream, kernel, blocks, x, y)
        dev.synchronize(stream)
        est = pipeline_estimate(spec, block_dim=blocks, per_core=per, last_core=per, tile_length=tile,
                                buffer_num=2, work=lambda m: TileWork((4 * m,), (("Muls", "fp32", m),), (4 * m,)))
        got[head] = (launch.end - launch.issue, est.cycles)
        assert abs(est.cycles - got[head][0]) / got[head][0] < 0.10, got[head]
    for sim_or_est in (0, 1):
        extra = got[True][sim_or_est] - got[False][sim_or_est]
        assert abs(extra - golden(A2_VECTOR_CORES)) <= SLACK, (sim_or_est, got)


# -- the large-load MTE2 head (assumption A-10) --------------------------------------------------

@pytest.mark.parametrize("mode", ["timing", "estimate"])
def test_loads_of_25000_bytes_or_more_pay_the_large_mte2_head(mode: str) -> None:
    # tiles of 8192 fp32: every load is 32 KiB, one block per core on the 48 vector cores
    tiling = {"block_dim": 48, "tile_length": 8192, "buffer_num": 1}
    n = 48 * 8192
    extra = _mse_cycles(mode, n, tiling) - _mse_cycles(mode, n, tiling, NO_MTE2_HEAD)
    assert abs(extra - _mte2_large_head(A2_VECTOR_CORES)) <= SLACK, (extra, _mte2_large_head(A2_VECTOR_CORES))


@pytest.mark.parametrize("mode", ["timing", "estimate"])
def test_loads_under_25000_bytes_keep_the_small_mte2_head(mode: str) -> None:
    # tiles of 4096 fp32: 16 KiB loads
    tiling = {"block_dim": 48, "tile_length": 4096, "buffer_num": 1}
    n = 48 * 4096 * 2
    extra = _mse_cycles(mode, n, tiling) - _mse_cycles(mode, n, tiling, NO_MTE2_HEAD)
    assert abs(extra - _mte2_head(A2_VECTOR_CORES)) <= SLACK, (extra, _mte2_head(A2_VECTOR_CORES))


@pytest.mark.parametrize("mode", ["timing", "estimate"])
def test_the_large_mte2_head_is_priced_for_the_cores_the_core_mask_allows(mode: str) -> None:
    # 8 blocks of 32 KiB loads on the 4 cores of the mask: two waves, one large head per core for 4
    tiling = {"block_dim": 8, "tile_length": 8192, "buffer_num": 1, "core_mask": 0b1010_0000_0000_0110}
    n = 8 * 8192
    extra = _mse_cycles(mode, n, tiling) - _mse_cycles(mode, n, tiling, NO_MTE2_HEAD)
    assert abs(extra - _mte2_large_head(4)) <= SLACK, (extra, _mte2_large_head(4))


def _load_kernel_cycles(mode: str, loads: Any, block_dim: int, overrides: dict[str, Any] | None,
                        core_mask: int | None = None) -> int:
    """Cycles of a launch whose block ``b`` makes the loads ``loads(b)`` (bytes, whole fp32
    elements), one after the other into one UB buffer, each block from its own part of GM (so
    that every block misses the L2 alike)."""
    spec = opsim.device_spec("atlas-a2", overrides)
    dev = Device(spec, functional=False) if mode == "timing" else ReplayDevice(spec)
    stream = dev.create_stream()
    n = max(max(loads(b)) for b in range(block_dim)) // 4
    x = GlobalTensor.contiguous(dev, dev.malloc(4 * n * block_dim), nx.FP32, (n * block_dim,))

    def kernel(ctx: Any, x: GlobalTensor) -> Any:
        buf = ctx.tbuf(4 * n, nx.FP32)
        off = ctx.block_idx * n
        for nbytes in loads(ctx.block_idx):
            yield DataCopyPad(buf[0:nbytes // 4], x[off:off + nbytes // 4], nbytes // 4)

    launch = dev.launch(stream, kernel, block_dim, x, core_mask=core_mask)
    if mode == "timing":
        dev.synchronize(stream)
        return launch.end - launch.start
    return replay_launches(dev, [launch]).cycles - spec.launch.overhead


def _load_kernel_head(mode: str, loads: Any, block_dim: int, core_mask: int | None = None) -> int:
    return (_load_kernel_cycles(mode, loads, block_dim, None, core_mask)
            - _load_kernel_cycles(mode, loads, block_dim, NO_MTE2_HEAD, core_mask))


@pytest.mark.parametrize("mode", ["timing", "estimate"])
def test_a_large_load_after_small_ones_pays_the_difference_up_to_the_large_head(mode: str) -> None:
    # each core: two 4 KiB loads, then one of 32 KiB: the large head in total, not small + large
    extra = _load_kernel_head(mode, lambda b: [4096, 4096, 32768], 48)
    assert abs(extra - _mte2_large_head(A2_VECTOR_CORES)) <= SLACK, (extra, _mte2_large_head(A2_VECTOR_CORES))


@pytest.mark.parametrize("mode", ["timing", "estimate"])
def test_the_large_head_starts_at_25000_bytes(mode: str) -> None:
    # one load per core of 24992 B (small) or 25024 B (large), 4 blocks at once
    small = _load_kernel_head(mode, lambda b: [LARGE_LOAD - 8], 4)
    large = _load_kernel_head(mode, lambda b: [LARGE_LOAD + 24], 4)
    assert abs(small - _mte2_head(4)) <= SLACK, (small, _mte2_head(4))
    assert abs(large - _mte2_large_head(4)) <= SLACK, (large, _mte2_large_head(4))


@pytest.mark.parametrize("mode", ["timing", "estimate"])
def test_a_later_block_with_a_large_load_raises_its_cores_head(mode: str) -> None:
    # under a mask of 4 cores, 8 blocks: the first wave loads 4 KiB, the second 32 KiB; each core
    # pays the small head with its first block and the difference with its second, the large
    # head in total (A-10; the replay finds the small head its core paid with the first wave)
    mask = 0b1010_0000_0000_0110
    extra = _load_kernel_head(mode, lambda b: [4096] if b < 4 else [32768], 8, core_mask=mask)
    assert abs(extra - _mte2_large_head(4)) <= SLACK, (extra, _mte2_large_head(4))

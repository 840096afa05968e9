"""Pipe heads are paid once per core and pipe per launch, the MTE2 head priced for the blocks
running at once (docs/sources.md#mte-load-store: "once per kernel per pipe", MTE2
``15.89·blockDim + 882.09``), not once per block for every block queued on a core.

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
from opsim.simulator.isa import Muls
from opsim.simulator.tile import GlobalTensor, elementwise_pipeline

A2_VECTOR_CORES = 48
NO_MTE2_HEAD = {"mte2.head": 0, "mte2.head_per_block": 0}
# the lockstep cores shift by the head; a few cycles of slack for rounding of shared link rates
SLACK = 16


def _mte2_head(concurrent: int) -> int:
    """The published small-load MTE2 head for ``concurrent`` cores loading at once."""
    return round(15.89 * concurrent + 882.09)


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


def test_the_closed_form_pays_the_heads_in_the_first_wave_only() -> None:
    # kernels/analytic.pipeline_estimate against the simulator running the same pipeline with
    # 96 blocks on 48 cores (two waves), with and without the MTE2 head
    blocks, per, tile = 96, 2048, 1024
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
        assert abs(extra - _mte2_head(A2_VECTOR_CORES)) <= SLACK, (sim_or_est, got)

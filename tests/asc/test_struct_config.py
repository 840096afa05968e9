"""Kernel parameter structures as pyasc programs declare them (``asc.language.core.struct``,
used by pyasc's generalization/basic/test_vadd_tiling.py): built on the host, read in the kernel."""
import numpy as np
import pytest

import opsim.asc as asc
import opsim.asc.lib.runtime as rt
from opsim.asc.language.core.dtype import KnownTypes as KT
from opsim.asc.language.core.struct import Field, Struct, StructField


class BlockConfig(Struct):
    block_length = Field(dtype=KT.int32, default=0)


class TileConfig(Struct):
    tile_length = Field(dtype=KT.int32, default=0)
    tile_num = Field(dtype=KT.int32, default=0)


class KernelConfig(Struct):
    block = StructField(BlockConfig)
    tile = StructField(TileConfig)


@asc.jit
def add_kernel(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, cfg: KernelConfig):
    offset = asc.get_block_idx() * cfg.block.block_length
    xg, yg, zg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x + offset)
    yg.set_global_buffer(y + offset)
    zg.set_global_buffer(z + offset)
    n = cfg.tile.tile_length
    for i in range(cfg.tile.tile_num):
        xl, yl, zl = (asc.LocalTensorAuto(x.dtype, n) for _ in range(3))
        asc.data_copy(xl, xg[i * n:], count=n)
        asc.data_copy(yl, yg[i * n:], count=n)
        asc.add(zl, xl, yl, n)
        asc.data_copy(zg[i * n:], zl, count=n)


def test_a_struct_config_reaches_the_kernel():
    rng = np.random.default_rng(0)
    x, y = rng.random(16 * 1024, dtype=np.float32), rng.random(16 * 1024, dtype=np.float32)
    z = np.zeros_like(x)
    tile = TileConfig(tile_length=512, tile_num=0)
    tile.tile_num = 2                                  # set after construction, as the sample does
    cfg = KernelConfig(tile=tile)
    cfg.block = BlockConfig(block_length=1024)
    add_kernel[16, rt.current_stream()](x, y, z, cfg)
    assert np.array_equal(z, x + y)
    assert repr(cfg) == ("KernelConfig(block=BlockConfig(block_length=1024), "
                         "tile=TileConfig(tile_length=512, tile_num=2))")


def test_struct_fields_are_checked():
    assert TileConfig().tile_num == 0
    with pytest.raises(TypeError, match="TileConfig has no field 'tiles'; its fields: tile_length, tile_num"):
        TileConfig(tiles=3)
    with pytest.raises(TypeError, match="Struct field block is a BlockConfig; got TileConfig"):
        KernelConfig(block=TileConfig())

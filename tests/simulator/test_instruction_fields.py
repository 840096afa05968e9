"""Instruction constructors (simulator/isa.py, simulator/cube.py): the fields a new instruction
starts with (no tile, no source line, its pipe from its operands) and the operand errors they
raise, naming what was given."""
from __future__ import annotations

import numpy as np
import pytest

from opsim import devices
from opsim.simulator import numerics as nx
from opsim.simulator.cube import CopyGmToL1, Fixpipe, GmMatrix, LoadData, Mmad
from opsim.simulator.device import Device
from opsim.simulator.errors import SimulatorError
from opsim.simulator.isa import Adds, Cast, DataCopy, DataCopyPad, QueueFreeFlag, SetFlag, WaitFlag
from opsim.simulator.tile import GlobalTensor, LocalTensor


@pytest.fixture(scope="module")
def dev() -> Device:
    return Device(devices.load("atlas-a2"), functional=False)


def _ub(dev: Device, count: int = 256, dtype: nx.DType = nx.FP32) -> LocalTensor:
    core = dev.cores["vector"][0]
    return LocalTensor(core, core.memory("UB"), 0, dtype, count)


def _l(dev: Device, memory: str, dtype: nx.DType = nx.BF16, count: int = 4096) -> LocalTensor:
    core = dev.cores["cube"][0]
    return LocalTensor(core, core.memory(memory), 0, dtype, count)


def test_a_new_instruction_has_no_tile_and_no_source_line(dev: Device) -> None:
    g = GlobalTensor.contiguous(dev, dev.malloc(1024), nx.FP32, (256,))
    ub = _ub(dev)
    m = GmMatrix.nd(GlobalTensor.contiguous(dev, dev.malloc(64 * 64 * 2), nx.BF16, (64, 64)))
    made = [SetFlag("MTE2", "VECTOR", 0), WaitFlag("MTE2", "VECTOR", 0), QueueFreeFlag("VECTOR", "MTE2", 1),
            DataCopy(ub, g[0:256]), DataCopyPad(g[0:100], ub, 100), Adds(ub, ub, scalar=1.0),
            Cast(_ub(dev, dtype=nx.FP16), ub), CopyGmToL1(_l(dev, "L1"), m, 0, 16, 0, 64),
            LoadData(_l(dev, "L0A"), _l(dev, "L1"), 16, 64, 0, 16, 0, 64),
            Mmad(_l(dev, "L0C", nx.FP32), _l(dev, "L0A"), _l(dev, "L0B"), 16, 64, 16, accumulate=False),
            Fixpipe(m, 0, 0, _l(dev, "L0C", nx.FP32), 16, 16)]
    assert [(i.tile, i.origin) for i in made] == [(-1, None)] * len(made)
    assert [i.pipe for i in made] == ["MTE2", "VECTOR", "VECTOR", "MTE2", "MTE3", "VECTOR", "VECTOR",
                                      "MTE2", "MTE1", "CUBE", "FIXP"]
    copy_in, copy_out = made[3], made[4]
    assert (copy_in.count, copy_in._nbytes, copy_in.local is ub) == (256, 1024, True)
    assert (copy_out.count, copy_out._nbytes, copy_out.local is ub) == (100, 400, True)


def test_a_copy_needs_one_global_and_one_local_operand(dev: Device) -> None:
    ub = _ub(dev)
    with pytest.raises(SimulatorError, match="DataCopy needs one global and one local operand, got "
                                             "LocalTensor <- LocalTensor"):
        DataCopy(ub, ub)
    g = GlobalTensor.contiguous(dev, dev.malloc(1024), nx.FP32, (256,))
    with pytest.raises(SimulatorError, match="DataCopyPad needs one global and one local operand, got "
                                             "GlobalSlice <- GlobalSlice"):
        DataCopyPad(g[0:8], g[8:16])


def test_an_unknown_round_mode_is_refused_naming_it(dev: Device) -> None:
    with pytest.raises(SimulatorError, match="Cast round mode 'up' is not one of"):
        Cast(_ub(dev, dtype=nx.FP16), _ub(dev), "up")


@pytest.mark.parametrize("make", ["copy", "load", "mmad"])
def test_a_cube_repeat_below_one_is_refused_naming_it(dev: Device, make: str) -> None:
    m = GmMatrix.nd(GlobalTensor.contiguous(dev, dev.malloc(64 * 64 * 2), nx.BF16, (64, 64)))
    with pytest.raises(SimulatorError, match="repeat must be >= 1, got 0"):
        if make == "copy":
            CopyGmToL1(_l(dev, "L1"), m, 0, 16, 0, 64, repeat=0)
        elif make == "load":
            LoadData(_l(dev, "L0A"), _l(dev, "L1"), 16, 64, 0, 16, 0, 64, repeat=0)
        else:
            Mmad(_l(dev, "L0C", nx.FP32), _l(dev, "L0A"), _l(dev, "L0B"), 16, 64, 16, accumulate=True,
                 repeat=0)


def test_cube_instructions_keep_their_shape_fields_as_python_ints_and_bools(dev: Device) -> None:
    # a kernel may pass numpy integers (shapes read from arrays): the fields are plain ints and
    # bools all the same, equal to what plain ints give (the constructors convert only those)
    m = GmMatrix.nd(GlobalTensor.contiguous(dev, dev.malloc(64 * 64 * 2), nx.BF16, (64, 64)))
    for conv, flag in ((int, bool), (np.int64, np.bool_)):
        copy = CopyGmToL1(_l(dev, "L1"), m, conv(0), conv(16), conv(0), conv(64), repeat=conv(1))
        load = LoadData(_l(dev, "L0A"), _l(dev, "L1"), conv(16), conv(64), conv(0), conv(16), conv(0), conv(64),
                        transpose=flag(False), repeat=conv(1))
        mmad = Mmad(_l(dev, "L0C", nx.FP32), _l(dev, "L0A"), _l(dev, "L0B"), conv(16), conv(64), conv(16),
                    accumulate=flag(True), repeat=conv(1))
        ints = [copy.r0, copy.nr, copy.c0, copy.nc, copy.repeat, load.src_rows, load.src_cols, load.r0,
                load.nr, load.c0, load.nc, load.repeat, mmad.m, mmad.k, mmad.n, mmad.repeat]
        assert [type(v) for v in ints] == [int] * len(ints)
        assert ints == [0, 16, 0, 64, 1, 16, 64, 0, 16, 0, 64, 1, 16, 64, 16, 1]
        assert (type(load.transpose), load.transpose, type(mmad.accumulate), mmad.accumulate) == (bool, False, bool, True)
        assert (copy._nbytes, load._bytes) == (16 * 64 * 2, 16 * 64 * 2)

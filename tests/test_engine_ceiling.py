"""benchmarks/engine_ceiling.py: the skeleton has the instruction mix of the MSE launch it stands
for, and runs every instruction (a skeleton that deadlocked or dropped work would overstate the
ceiling it reports)."""
from __future__ import annotations

import collections
import importlib.util
import pathlib

import opsim
from opsim.simulator.device import Device
from opsim.simulator.isa import SetFlag

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "engine_ceiling.py"
_spec = importlib.util.spec_from_file_location("opsim_engine_ceiling", _PATH)
ceiling = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ceiling)


class _Mix:
    """Observer: busy instructions per pipe and flag sets per pipe."""

    def __init__(self) -> None:
        self.busy: collections.Counter = collections.Counter()
        self.sets: collections.Counter = collections.Counter()

    def on_instruction(self, core, pipe, instr, start, end) -> None:
        if instr.busy:
            self.busy[pipe.name] += 1
        elif isinstance(instr, SetFlag):
            self.sets[pipe.name] += 1


def test_skeleton_completes_every_busy_instruction():
    n, wall = ceiling.skeleton(cores=3, tiles=5, depth=16)
    assert n == 3 * 5 * 7
    assert wall > 0


def test_skeleton_tile_has_the_mix_of_opsims_mse_tile(monkeypatch):
    # MSE backward fp32: per tile 3 loads (MTE2), Sub/Mul/Muls (VECTOR), 1 store (MTE3); the sets
    # of its double-buffered queues: MTE2 1, VECTOR 2, MTE3 1 -- the skeleton's template
    mix = _Mix()
    original = Device.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.observers.append(mix)
    monkeypatch.setattr(Device, "__init__", init)
    spec = opsim.TensorSpec((48 * 6144 * 2,), "fp32")
    res = opsim.run("mse_loss_backward", device="atlas-a2", mode="timing", trace="off",
                    grad_output=spec, self=spec, target=spec, reduction="mean")
    tiles = res.tiling.block_dim * -(-res.tiling.per_core // res.tiling.tile_length)
    assert {p: c / tiles for p, c in mix.busy.items()} == {"MTE2": 3, "VECTOR": 3, "MTE3": 1}
    assert {p: c / tiles for p, c in mix.sets.items()} == {"MTE2": 1, "VECTOR": 2, "MTE3": 1}

"""The estimate replays the kernel program itself (simulator/replay.py): a user's own kernel,
registered with opsim.register_operator, gets an estimate with no model of its own, and it
agrees with the simulator on the example kernels of examples/kernels."""
from __future__ import annotations

import importlib.util
import pathlib
import re
import sys
from typing import Any, Iterator

import numpy as np
import pytest

import opsim
from opsim.api import TensorSpec
from opsim.kernels import registry

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "kernels"
MAX_ERROR = 0.08     # the estimate's stated worst case against the simulator (docs/estimate.md)


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Operators registered by a test vanish after it, so other test modules (e.g. the demo over
    every operator) see only the built-in ones."""
    registry.names()                                       # the built-ins are in before the copy
    monkeypatch.setattr(registry, "_OPS", dict(registry._OPS))
    monkeypatch.setattr(registry, "_FILES", dict(registry._FILES))
    yield


def _load(name: str) -> Any:
    path = EXAMPLES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"replay_example_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _register(op: str, kernel: Any, inputs: tuple, outputs: tuple, tiling: Any, **kw: Any) -> str:
    if op not in registry.names():
        opsim.register_operator(kernel, name=op, inputs=inputs, outputs=outputs, tiling=tiling, **kw)
    return op


def _vector_cases() -> list[tuple[str, str, dict, dict]]:
    """(operator, device, operands, tiling overrides) of the vector example kernels."""
    cases = []
    add = _load("add_tque")
    op = _register("replay_add_tque", add.add_kernel, ("x", "y"), ("z",),
                   lambda spec, ins, at: {"block_dim": 8, "block_length": ins["x"].numel // 8,
                                          "tile_length": 512, "buffer_num": 2})
    for n, bn in ((8 * 512 * 8, 2), (8 * 512 * 64, 1), (8 * 512 * 64, 2)):
        cases.append((op, "atlas-a2", {"x": (n,), "y": (n,)}, {"buffer_num": bn}))
    flags = _load("add_manual_flags")
    op = _register("replay_add_manual_flags", flags.add_kernel, ("x", "y"), ("z",),
                   lambda spec, ins, at: {"block_dim": 8, "block_length": ins["x"].numel // 8, "buffer_num": 2})
    cases.append((op, "atlas-a2", {"x": (8 * 2048,), "y": (8 * 2048,)}, {}))
    relu = _load("leaky_relu")
    op = _register("replay_leaky_relu", relu.leaky_relu_kernel, ("x",), ("y",),
                   lambda spec, ins, at: {"block_dim": 8, "block_length": ins["x"].numel // 8,
                                          "tile_length": 1024}, attrs={"alpha": 0.01})
    cases.append((op, "atlas-a2", {"x": (8 * 4096,)}, {}))
    op = _register("replay_leaky_relu_48", relu.leaky_relu_kernel, ("x",), ("y",),
                   lambda spec, ins, at: {"block_dim": 48, "block_length": ins["x"].numel // 48,
                                          "tile_length": 1024}, attrs={"alpha": 0.01})
    cases.append((op, "atlas-a3", {"x": (48 * 16384,)}, {}))
    soft = _load("softmax")
    op = _register("replay_softmax", soft.softmax_kernel, ("x",), ("y",),
                   lambda spec, ins, at: {"block_dim": 8, "rows_per_block": ins["x"].shape[0] // 8,
                                          "cols": ins["x"].shape[1]}, example_shape=(64, 256))
    cases.append((op, "atlas-a2", {"x": (64, 256)}, {}))
    return cases


@pytest.mark.parametrize("case", range(7))
def test_a_registered_example_kernel_is_estimated_within_the_stated_error(case: int) -> None:
    op, device, shapes, overrides = _vector_cases()[case]
    ops = {n: TensorSpec(s, "fp32") for n, s in shapes.items()}
    sim = opsim.run(op, device=device, mode="timing", trace="off", tiling=overrides, **ops)
    est = opsim.run(op, device=device, mode="estimate", tiling=overrides, **ops)
    assert est.stats["estimate_model"] == "replay"
    assert abs(est.cycles - sim.cycles) <= MAX_ERROR * sim.cycles, (est.cycles, sim.cycles)


# Cube kernels: the replay prices every sampled block as if all blocks loaded the same way at
# once; when the blocks share a matrix (matmul_cube_only reads all of A on every core) the
# simulator has one core miss the L2 and the others hit, so the replay overestimates: +8 % at
# the example's size, up to +18 % at 1024 x 1024 x 4096 (docs/estimate.md). Held to that bound.
CUBE_MAX_ERROR = 0.20


def _cube_example() -> tuple[str, dict[str, TensorSpec]]:
    """examples' matmul_cube_only registered on 8 blocks, and the example's operands."""
    mm = _load("matmul_cube_only")
    op = _register("replay_matmul_cube_only", mm.matmul_kernel, ("a", "b", "bias"), ("c",),
                   lambda spec, ins, at: {"block_dim": 8, "tiling": mm.plan(ins["a"].shape[0], ins["b"].shape[1],
                                                                           ins["a"].shape[1], 8, False)},
                   dtypes=("fp16", "fp32"),
                   infer=lambda spec, ins, at: {"c": ((ins["a"].shape[0], ins["b"].shape[1]), "fp32")})
    return op, {"a": TensorSpec((128, 64), "fp16"), "b": TensorSpec((64, 1024), "fp16"),
                "bias": TensorSpec((1, 1024), "fp32")}


def test_a_cube_example_kernel_is_estimated_within_its_known_bound() -> None:
    op, ops = _cube_example()
    sim = opsim.run(op, device="atlas-a2", mode="timing", trace="off", **ops)
    est = opsim.run(op, device="atlas-a2", mode="estimate", **ops)
    assert abs(est.cycles - sim.cycles) <= CUBE_MAX_ERROR * sim.cycles, (est.cycles, sim.cycles)


def test_a_kernel_that_waits_on_a_flag_nobody_sets_is_refused_as_a_deadlock() -> None:
    from opsim.simulator.errors import DeadlockError
    from opsim.simulator.isa import WaitFlag

    def stuck(ctx, x, out):
        yield WaitFlag("MTE3", "MTE2", 0)
    op = _register("replay_stuck", stuck, ("x",), ("out",), lambda spec, ins, at: {"block_dim": 1})
    with pytest.raises(DeadlockError, match="WaitFlag"):
        opsim.run(op, device="atlas-a2", mode="estimate", x=TensorSpec((64,), "fp32"))


def test_the_estimate_of_a_long_tile_loop_costs_as_much_as_a_short_one() -> None:
    # the steady state is extrapolated: 64x the tiles, not 64x the instructions replayed
    from opsim.simulator import replay
    calls = []
    orig = replay._Scheduler._start

    def counting(self, pipe, instr):
        calls.append(1)
        return orig(self, pipe, instr)
    counts = []
    for n in (48 * 8192, 64 * 48 * 8192):
        ops = {k: TensorSpec((n,), "fp32") for k in ("grad_output", "self", "target")}
        calls.clear()
        replay._Scheduler._start = counting
        try:
            opsim.run("mse_loss_backward", device="atlas-a2", mode="estimate", reduction="mean",
                      tiling={"tile_length": 1024}, **ops)
        finally:
            replay._Scheduler._start = orig
        counts.append(len(calls))
    assert counts[1] < 2 * counts[0], counts
    assert np.isfinite(counts[0])


def test_with_more_blocks_than_cores_the_busiest_core_counts_every_block_it_ran() -> None:
    # 96 blocks on the 48 vector cores of atlas-a2: each core runs two blocks, and the simulator
    # reports the busiest core's busy cycles over both (opsim/api.py collect_stats)
    s = TensorSpec((1 << 18,), "fp32")
    kw = dict(device="atlas-a2", grad_output=s, self=s, target=s, reduction="mean",
              tiling={"block_dim": 96, "tile_length": 1024})
    sim = opsim.run("mse_loss_backward", mode="timing", trace="off", **kw)
    est = opsim.run("mse_loss_backward", mode="estimate", **kw)
    for pipe in ("MTE2", "VECTOR", "MTE3"):
        want = sim.stats["pipe_busy"][pipe]
        assert abs(est.stats["pipe_busy"][pipe] - want) <= MAX_ERROR * want, (pipe, est.stats["pipe_busy"], want)


# (block_dim, core_mask) of launches with more blocks than the cores they may use, MSE and BCE
# backward of 48,000 elements on atlas-a2: one block after a full wave (it runs alone), a
# partial last wave, blocks of 48 fp32 elements (a 512 B L2 line read by three blocks), a
# masked launch. Before the replay placed the last blocks with the concurrency they see and
# shared the lines the blocks split: up to +19.8 % (MSE fp32 at 49 blocks: 6,039 against
# 5,041), +11.7 % at 1,000 blocks, +18.3 % at 1,000 blocks on 8 cores; now within 4.2 %.
# 4,800 blocks and the masked 1,000 take 10-25 s each to simulate: slow lane (CI runs it)
WAVES = [(49, None), (60, None), (100, None), (1000, None),
         pytest.param(4800, None, marks=pytest.mark.slow), pytest.param(1000, 0x5555, marks=pytest.mark.slow)]
WAVE_ERROR = 0.05


@pytest.mark.parametrize("op", ["mse_loss_backward", "binary_cross_entropy_backward"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("block_dim,core_mask", WAVES)
def test_blocks_in_waves_are_estimated_within_five_percent(op: str, dtype: str, block_dim: int,
                                                          core_mask: int | None) -> None:
    s = TensorSpec((48000,), dtype)
    tiling: dict[str, Any] = {"block_dim": block_dim}
    if core_mask is not None:
        tiling["core_mask"] = core_mask
    kw = dict(device="atlas-a2", grad_output=s, self=s, target=s, reduction="mean", tiling=tiling)
    # the simulator is the golden: it runs every block on the cores its free-core store hands out
    sim = opsim.run(op, mode="timing", trace="off", **kw)
    est = opsim.run(op, mode="estimate", **kw)
    assert abs(est.cycles - sim.cycles) <= WAVE_ERROR * sim.cycles, (est.cycles, sim.cycles)


# tiles that are not a whole number of 512 B L2 lines (atlas-a2): 4000 B tiles sit at the same
# line phase only every 16 tiles, 2016 B ones every 16. Before, the steady state looked back 4
# tiles and ignored addresses: it never skipped the 4000 B tiles (330-430 ms a call) and took a
# coincidence at a shorter period for the 2016 B ones (-0.45 % against the full replay)
@pytest.mark.parametrize("op,dtype,tiling", [
    ("mse_loss_backward", "fp32", {"block_dim": 7, "tile_length": 1000}),
    ("binary_cross_entropy_backward", "fp32", {"block_dim": 7, "tile_length": 1000}),
    ("binary_cross_entropy_backward", "fp16", {"block_dim": 5, "tile_length": 1008}),
])
def test_tiles_not_a_whole_number_of_lines_skip_at_the_line_period(op: str, dtype: str, tiling: dict,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from opsim.simulator import replay
    s = TensorSpec((4194304,), dtype)
    kw = dict(device="atlas-a2", mode="estimate", grad_output=s, self=s, target=s, reduction="mean", tiling=tiling)
    counts: list[tuple[int, int]] = []
    orig = replay._Steady.loop

    def counting(self: Any, count: int) -> Iterator[int]:
        yield from orig(self, count)
        counts.append((self.skipped_tiles, count))
    monkeypatch.setattr(replay._Steady, "loop", counting)
    est = opsim.run(op, **kw)
    skipped, tiles = map(sum, zip(*counts))
    assert skipped > tiles // 2, (skipped, tiles)
    counts.clear()
    monkeypatch.setattr(replay._Steady, "MAX_PERIOD", 0)       # the full replay: every tile scheduled
    full = opsim.run(op, **kw)
    assert sum(c[0] for c in counts) == 0
    # the skipped tiles are not in the L2 model: the tile after the jump misses the rest of the
    # line the last skipped one began (a few tens of cycles)
    assert abs(est.cycles - full.cycles) <= 0.001 * full.cycles, (est.cycles, full.cycles)


# -- the large-load MTE2 head of a later wave (assumption A-10) ------------------------------------

def _wave_sized_copy() -> Any:
    """A user's kernel whose block index decides its load: the blocks before ``first_large``
    copy ``small`` fp32 elements, the others ``large`` ones, each through one UB buffer."""
    import opsim.asc as asc

    @asc.jit
    def wave_sized_copy(x: asc.GlobalAddress, y: asc.GlobalAddress, small: int, large: int, first_large: int):
        b = asc.get_block_idx()
        n = large if b >= first_large else small
        xg, yg = asc.GlobalTensor(), asc.GlobalTensor()
        xg.set_global_buffer(x + b * large, n)
        yg.set_global_buffer(y + b * large, n)
        pipe = asc.TPipe()
        qin = asc.TQue(asc.TPosition.VECIN, 1)
        pipe.init_buffer(qin, 1, large * 4)
        t = qin.alloc_tensor(asc.float32)
        asc.data_copy(t, xg, n)
        qin.enque(t)
        t = qin.deque(asc.float32)
        asc.data_copy(yg, t, n)
        qin.free_tensor(t)

    return wave_sized_copy


def test_a_later_wave_with_a_large_load_raises_its_cores_mte2_head_in_the_estimate() -> None:
    # 96 blocks on the 48 vector cores of atlas-a2: the first wave loads 4 KiB (the small head),
    # the second 32 KiB, so each core pays the large head in total, the difference with its
    # second block. The simulator is the golden: it carries each core's head from block to
    # block (Core.begin_block). Before, the replay's second wave paid no head: 5,650 cycles
    # against 7,102 (-20 %); without the MTE2 head both give 4,495.
    op = _register("replay_wave_sized_copy", _wave_sized_copy(), ("x",), ("y",),
                   lambda spec, ins, at: {"block_dim": 96, "small": 1024, "large": 8192, "first_large": 48})
    x = TensorSpec((96 * 8192,), "fp32")
    sim = opsim.run(op, device="atlas-a2", mode="timing", trace="off", x=x).cycles
    est = opsim.run(op, device="atlas-a2", mode="estimate", x=x).cycles
    assert abs(est - sim) <= MAX_ERROR * sim, (est, sim)


# One core streaming past a write-back L2 (atlas-200i-500-a2: one vector core, 4 MiB L2, a
# 20.8 GB/s DDR link): its one replayed block is the whole call, so the block's own L2 model
# evicts every dirty line the simulator's does, on the DDR link. The replay's link bound added
# the call-wide write-back share of the stores on top: the write-backs counted twice, 2^20 fp32
# elements estimated +8 % above the simulator and 18 % at 2^22. What remains is an
# underestimate the replay's fixed transfer rates cannot see (docs/estimate.md, "Reading it").
@pytest.mark.parametrize("n", [1 << 20, 1 << 21])
def test_a_single_core_kernel_past_the_l2_prices_its_write_backs_once(n: int) -> None:
    add = _load("add_tque")
    op = _register("replay_add_tque_one_core", add.add_kernel, ("x", "y"), ("z",),
                   lambda spec, ins, at: {"block_dim": 1, "block_length": ins["x"].numel,
                                          "tile_length": 2048, "buffer_num": 2})
    ops = {k: TensorSpec((n,), "fp32") for k in ("x", "y")}
    sim = opsim.run(op, device="atlas-200i-500-a2", mode="timing", trace="off", **ops)
    est = opsim.run(op, device="atlas-200i-500-a2", mode="estimate", **ops)
    assert sim.stats["link_bytes"].get("DDR write", 0) > 0          # past the L2: lines written back
    # no schedule moves the simulator's DDR bytes (reads and write-backs) faster than the link
    ddr = sim.stats["links"]["DDR"]["bytes"]
    floor = ddr / (sim.stats["peak_bandwidth_GBps"] * 1e9 / sim.stats["clock_hz"])
    assert est.cycles >= floor, (est.cycles, floor)
    # and the estimate prices no DDR traffic beyond it: it is not above the simulator
    assert est.cycles <= sim.cycles, (est.cycles, sim.cycles)


def test_an_estimate_fault_names_the_unit_pipe_instruction_and_kernel_line_as_the_simulator() -> None:
    # on a part without a Fixpipe model the timing run stopped with "UnsupportedInstruction on
    # core3.cube pipe FIXP in Fixpipe(...): ... (kernel line ...)", the estimate with
    # "UnsupportedInstruction on core0.veccore0: ..." (no pipe, instruction or line)
    from opsim.simulator.errors import UnsupportedInstruction
    op, ops = _cube_example()
    for mode in ("timing", "estimate"):
        with pytest.raises(UnsupportedInstruction) as info:
            opsim.run(op, device="atlas-training", mode=mode, **ops)
        msg = str(info.value)
        assert re.match(r"UnsupportedInstruction on core\d+\.cube pipe FIXP in Fixpipe\(", msg), (mode, msg)
        assert "has no [fixp]" in msg and "(kernel line " in msg and "matmul_cube_only.py:" in msg, (mode, msg)

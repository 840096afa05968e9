"""The steady-state fast-forward (simulator/fastforward.py) changes nothing but the wall time.

Each case runs once step by step (``fast_forward=False``) and once with the fast-forward, and
compares what the run reports: cycles, every integer statistic (per-pipe busy cycles, per-core
busy, link bytes, GM bytes, L2 hit rate, issue starvation...), the output bits and the stream of
``on_instruction`` calls an observer sees (core, pipe, instruction, start, end, tile, operands).
The link-history statistics that are floating-point integrals of the bandwidth series
(``bandwidth_GBps``, ``window_bytes``...) are compared to 1e-9 relative: a skipped round copies
the recorded round's history, whose float rounding differs from the step-by-step run's in the
last bits (see the module docstring of simulator/fastforward.py).
"""
from __future__ import annotations

import hashlib
import importlib.util
import pathlib
import zlib
from typing import Any

import numpy as np
import pytest

import opsim
from opsim import api, devices
from opsim.kernels import registry

ROOT = pathlib.Path(__file__).resolve().parents[2]

FLOAT_STATS = {"bandwidth_GBps", "l2_bandwidth_GBps", "links", "fast_forward"}


class Recorder:
    """An observer that only adds up its calls, so the fast-forward may make them for skipped rounds."""

    fast_forward_safe = True

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.n = 0

    def on_instruction(self, core: Any, pipe: Any, instr: Any, start: int, end: int) -> None:
        self.h.update(f"{core.name}|{pipe.name}|{instr.name}|{start}|{end}|{instr.tile}|"
                      f"{instr.trace_args()}\n".encode())
        self.n += 1


class BusyRecorder(Recorder):
    """A ``busy_only`` observer (as the profiler is): shown busy instructions only, skipped or not."""

    busy_only = True

    def on_instruction(self, core: Any, pipe: Any, instr: Any, start: int, end: int) -> None:
        assert instr.busy, instr.describe()
        super().on_instruction(core, pipe, instr, start, end)


def _run(op: str, device: str, dtype: str, mode: str, example: dict, tiling: dict | None, ff: bool,
         monkeypatch: pytest.MonkeyPatch, trace: str = "off") -> tuple[Any, Recorder, Any]:
    o = registry.get(op)
    spec = devices.load(device)
    kwargs = o.example(np.random.default_rng(zlib.crc32(f"{op}{device}{dtype}{example}".encode())), spec,
                       dtype, **example)
    if mode == "timing":
        kwargs = {k: (opsim.TensorSpec(v.shape, v.dtype) if isinstance(v, np.ndarray)
                      and k in (*o.inputs, *o.optional) else v) for k, v in kwargs.items()}
    rec = Recorder()
    made: list = []
    real = api.Device

    def device_with_recorder(*a: Any, **kw: Any) -> Any:
        dev = real(*a, **kw)
        dev.observers.append(rec)
        made.append(dev)
        return dev

    with monkeypatch.context() as m:
        m.setattr(api, "Device", device_with_recorder)
        res = opsim.run(op, device=device, mode=mode, trace=trace, tiling=tiling, fast_forward=ff, **kwargs)
    return res, rec, made[0]


def assert_same_run(a: Any, ra: Recorder, b: Any, rb: Recorder) -> None:
    assert a.cycles == b.cycles
    for key in set(a.stats) | set(b.stats):
        if key not in FLOAT_STATS:
            assert a.stats.get(key) == b.stats.get(key), key
    for name, link in a.stats.get("links", {}).items():
        other = b.stats["links"][name]
        assert link["bytes"] == other["bytes"], name
        for f in ("window_bytes", "achieved_GBps", "max_rate_GBps"):
            assert other[f] == pytest.approx(link[f], rel=1e-9, abs=0), (name, f)
    assert set(a.outputs) == set(b.outputs)
    for name, out in a.outputs.items():
        x, y = np.asarray(out), np.asarray(b.outputs[name])
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes(), name
    assert (ra.n, ra.h.hexdigest()) == (rb.n, rb.h.hexdigest())


# (op, device, dtype, example, tiling): each of these repeats long enough to be skipped
SKIPPED = [
    ("mse_loss_backward", "atlas-a2", "fp32", {"shape": (40, 1000)}, {"block_dim": 1, "tile_length": 512}),
    ("mse_loss_backward", "atlas-a2", "fp16", {"shape": (7, 3001)}, {"block_dim": 1, "tile_length": 512}),
    ("mse_loss_backward", "atlas-training", "fp32", {"shape": (7, 3001)},
     {"block_dim": 1, "tile_length": 256, "buffer_num": 1}),
    ("mse_loss_backward", "atlas-inference", "fp32", {"shape": (40, 1000)},
     {"block_dim": 2, "tile_length": 256, "buffer_num": 1}),
    ("binary_cross_entropy_backward", "atlas-a2", "fp32", {"shape": (40, 1000)}, {"block_dim": 1, "tile_length": 512}),
    ("binary_cross_entropy_backward", "atlas-a3", "fp16", {"shape": (7, 3001)}, {"block_dim": 1, "tile_length": 384}),
]


@pytest.mark.parametrize("mode", ["timing", "full"])
@pytest.mark.parametrize("op,device,dtype,example,tiling", SKIPPED)
def test_skipped_rounds_change_nothing(op: str, device: str, dtype: str, example: dict, tiling: dict,
                                       mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    a, ra, _ = _run(op, device, dtype, mode, example, tiling, False, monkeypatch)
    b, rb, dev = _run(op, device, dtype, mode, example, tiling, True, monkeypatch)
    ff = b.stats["fast_forward"]
    assert ff["skipped_rounds"] > 0 and ff["skipped_cycles"] > 0, ff
    assert a.stats["fast_forward"] == {"enabled": False}
    assert_same_run(a, ra, b, rb)


@pytest.mark.parametrize("mode", ["timing", "full"])
@pytest.mark.parametrize("device,example,tiling", [
    ("ft78ne", {"size": 20011}, None),
    ("mt7004", {"size": 30000}, {"tile_length": 512}),
])
def test_dsp_operator_same_with_fast_forward(device: str, example: dict, tiling: dict | None, mode: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    a, ra, _ = _run("binarycrossentropygrad", device, "fp32", mode, example, tiling, False, monkeypatch)
    b, rb, _ = _run("binarycrossentropygrad", device, "fp32", mode, example, tiling, True, monkeypatch)
    assert_same_run(a, ra, b, rb)


def test_default_multicore_plans_same_with_fast_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many cores that drift against each other through the shared links never repeat exactly:
    the run is stepped (and still equal)."""
    for op in ("mse_loss_backward", "binary_cross_entropy_backward"):
        a, ra, _ = _run(op, "atlas-a2", "fp32", "full", {"shape": (7, 3001)}, None, False, monkeypatch)
        b, rb, _ = _run(op, "atlas-a2", "fp32", "full", {"shape": (7, 3001)}, None, True, monkeypatch)
        assert_same_run(a, ra, b, rb)


def test_a_second_steady_state_after_the_l2_fills_is_skipped_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight cores on slices that start 32 B aligned: the first jump stops where the L2 fills
    and starts evicting dirty lines (the outcomes differ from there); the machine then settles
    into a new repeating round, which is skipped as well (the first jump read the programs
    ahead, so the round marker is the dispatcher's tile, not the program's). Equal to stepping."""
    case = ("mse_loss_backward", "atlas-inference", "fp32", "timing", {"shape": (8, 262144)}, None)
    a, ra, _ = _run(*case, False, monkeypatch)
    b, rb, _ = _run(*case, True, monkeypatch)
    ff = b.stats["fast_forward"]
    assert ff["jumps"] >= 2 and ff["skipped_rounds"] > 0, ff
    assert_same_run(a, ra, b, rb)


@pytest.mark.slow
def test_a_six_tile_period_of_48_cores_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """48 cores on equal, aligned slices run in lockstep; once the L2 evicts dirty lines the
    links repeat every 3 tiles and the double-buffered cores every 2: the machine repeats
    every 6 tiles, which the fast-forward proves and skips. Equal to stepping."""
    case = ("mse_loss_backward", "atlas-a2", "fp32", "timing", {"shape": (48, 1 << 20)}, None)
    a, ra, _ = _run(*case, False, monkeypatch)
    b, rb, _ = _run(*case, True, monkeypatch)
    ff = b.stats["fast_forward"]
    assert 6 in ff["period_tiles"] and ff["skipped_cycles"] > b.cycles // 2, ff
    assert_same_run(a, ra, b, rb)


def test_trace_is_never_summarised(monkeypatch: pytest.MonkeyPatch) -> None:
    """A recorded trace keeps every slice: the engine steps every round and says why."""
    case = SKIPPED[0]
    a, ra, _ = _run(*case[:3], "timing", *case[3:], False, monkeypatch, trace="tile")
    b, rb, _ = _run(*case[:3], "timing", *case[3:], True, monkeypatch, trace="tile")
    assert b.stats["fast_forward"]["skipped_rounds"] == 0
    assert "trace" in b.stats["fast_forward"]["reason"]
    assert_same_run(a, ra, b, rb)
    assert len(a.trace.s_start) == len(b.trace.s_start)


def test_an_observer_that_needs_every_instruction_live_stops_it() -> None:
    case = SKIPPED[0]
    o = registry.get(case[0])
    kwargs = o.example(np.random.default_rng(0), devices.load(case[1]), case[2], **case[3])
    res = opsim.run(case[0], device=case[1], trace="off", tiling=case[4], sanitize=True, fast_forward=True,
                    **kwargs)
    ff = res.stats["fast_forward"]
    assert ff["skipped_rounds"] == 0 and "Sanitizer" in ff["reason"]


def test_data_dependent_kernel_is_stepped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedding backward reads indices (scalar GetValue, GM reads while its program runs):
    never skipped, and equal."""
    args = ("embedding_dense_backward", "atlas-a2", "fp32", "full", {"shape": (256, 96)}, {"block_dim": 2})
    a, ra, _ = _run(*args, False, monkeypatch)
    b, rb, _ = _run(*args, True, monkeypatch)
    ff = b.stats["fast_forward"]
    assert ff["skipped_rounds"] == 0 and ff["reason"], ff
    assert_same_run(a, ra, b, rb)


def test_cube_and_atomic_kernel_is_stepped(monkeypatch: pytest.MonkeyPatch) -> None:
    args = ("fused_linear_cross_entropy_loss_grad", "atlas-a2", "bf16", "timing", {"shape": (8, 32, 256)}, None)
    a, ra, _ = _run(*args, False, monkeypatch)
    b, rb, _ = _run(*args, True, monkeypatch)
    ff = b.stats["fast_forward"]
    assert ff["skipped_rounds"] == 0 and ff["reason"], ff
    assert_same_run(a, ra, b, rb)


def test_asc_kernel_same_with_fast_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's own element-wise kernel (opsim.asc, hand-placed flags, fixed UB addresses)."""
    import opsim.asc.lib.runtime as rt
    jit = importlib.import_module("opsim.asc.jit")   # the module (opsim.asc.jit is also the decorator)

    # the example kernel of examples/kernels (manual flags, double-buffered UB halves)
    spec = importlib.util.spec_from_file_location("ff_add_manual_flags",
                                                  ROOT / "examples" / "kernels" / "add_manual_flags.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    add_kernel = example.add_kernel

    rng = np.random.default_rng(0)
    x = rng.random(2 * 256 * 40, dtype=np.float32)
    y = rng.random(x.size, dtype=np.float32)
    results = {}
    busy = {}
    for ff in (False, True):
        rec = Recorder()
        busy[ff] = brec = BusyRecorder()

        def device(*a: Any, _ff: bool = ff, _rec: Recorder = rec, _brec: Recorder = brec,
                   _real: Any = jit.Device, **kw: Any) -> Any:
            dev = _real(*a, **kw, fast_forward=_ff)
            dev.observers.extend((_rec, _brec))
            return dev

        z = np.zeros_like(x)
        with monkeypatch.context() as m:
            m.setattr(jit, "Device", device)
            res = add_kernel[2, rt.current_stream()](x, y, z, x.size // 2, 2, trace="off")
        results[ff] = (res, rec, z)
    (a, ra, za), (b, rb, zb) = results[False], results[True]
    assert np.array_equal(za, x + y) and za.tobytes() == zb.tobytes()
    assert b.stats["fast_forward"]["skipped_rounds"] > 0, b.stats["fast_forward"]
    assert a.cycles == b.cycles and (ra.n, ra.h.hexdigest()) == (rb.n, rb.h.hexdigest())
    # a busy_only observer sees the same busy completions, in the skipped rounds too, and no flag
    assert 0 < busy[False].n < ra.n
    assert (busy[False].n, busy[False].h.hexdigest()) == (busy[True].n, busy[True].h.hexdigest())
    for key in ("pipe_busy", "pipe_busy_total", "per_core", "bytes_read", "bytes_written", "issue_starved"):
        assert a.stats[key] == b.stats[key], key


def test_l2_state_round_trips() -> None:
    from opsim.simulator.l2 import L2Cache
    l2 = L2Cache(8 * 512, 512, write_back=True)
    l2.access(0, 4096, write=True)
    saved = l2.save_state()
    before = (l2.lru_order(), l2.dirty_lines(), l2.hit_bytes, l2.miss_bytes, l2.writeback_bytes)
    l2.access(8192, 4096, write=False)
    assert l2.take_writeback() > 0
    l2.restore_state(saved)
    assert (l2.lru_order(), l2.dirty_lines(), l2.hit_bytes, l2.miss_bytes, l2.writeback_bytes) == before


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["timing", "full"])
@pytest.mark.parametrize("device", ["atlas-a2", "atlas-training", "atlas-inference", "atlas-a3"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("op", ["mse_loss_backward", "binary_cross_entropy_backward"])
def test_matrix_same_with_fast_forward(op: str, dtype: str, device: str, mode: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    spec = devices.load(device)
    if spec.product not in registry.get(op).products and spec.series not in registry.get(op).products:
        pytest.skip(f"{op} is not supported on {device}")
    for example in ({"shape": (40, 1000)}, {"shape": (7, 3001)}):
        for tiling in (None, {"block_dim": 1, "tile_length": 512}, {"block_dim": 2, "tile_length": 256, "buffer_num": 1},
                       {"block_dim": 3, "tile_length": 384}):
            try:
                a, ra, _ = _run(op, device, dtype, mode, example, tiling, False, monkeypatch)
            except opsim.OpError:
                pytest.skip(f"{op} refuses {device} {dtype}")
            b, rb, _ = _run(op, device, dtype, mode, example, tiling, True, monkeypatch)
            assert_same_run(a, ra, b, rb)


@pytest.mark.slow
def test_corpus_configurations_same_with_fast_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every configuration of the regression corpus, without a trace (so the fast-forward may
    skip), equal with and without it. (Its shapes are small: few of their rounds repeat.)"""
    path = ROOT / "benchmarks" / "corpus.py"
    spec = importlib.util.spec_from_file_location("corpus_for_ff", path)
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    for cfg in corpus.configs():
        runs = []
        for ff in (False, True):
            rec = Recorder()
            real = api.Device

            def device(*a: Any, _rec: Recorder = rec, _real: Any = real, **kw: Any) -> Any:
                dev = _real(*a, **kw)
                dev.observers.append(_rec)
                return dev

            with monkeypatch.context() as m:
                m.setattr(api, "Device", device)
                try:
                    res = opsim.run(cfg["op"], device=cfg["device"], mode=cfg["mode"], trace="off",
                                    tiling=cfg["tiling"], fast_forward=ff, **corpus._operands(cfg))
                except opsim.OpError:
                    res = None
            runs.append((res, rec))
        (a, ra), (b, rb) = runs
        if a is None:
            assert b is None, cfg["id"]
            continue
        assert_same_run(a, ra, b, rb)


def _elementwise_device_run(fail_at: int | None, ff: bool) -> tuple[Any, str]:
    """A hand-written element-wise kernel on a bare Device (one core, double-buffered TQue
    pipeline); ``fail_at`` makes the program raise at that tile, long after the steady state."""
    from opsim.simulator import numerics as nx
    from opsim.simulator.device import Device
    from opsim.simulator.errors import SimulatorError
    from opsim.simulator.isa import Adds
    from opsim.simulator.tile import GlobalTensor, elementwise_pipeline

    dev = Device(devices.load("atlas-a2"), fast_forward=ff)
    n, tile = 64 * 512, 512
    x = GlobalTensor.contiguous(dev, dev.malloc(n * 4), nx.FP32, (n,))
    out = GlobalTensor.contiguous(dev, dev.malloc(n * 4), nx.FP32, (n,))
    dev.write(x.addr, np.arange(n, dtype=np.float32))

    def compute(ctx: Any, ins: list, o: Any, count: int) -> Any:
        if fail_at is not None and ctx.tile == fail_at:
            raise SimulatorError(f"tile {ctx.tile} refused")
        yield Adds(o, ins[0], scalar=1.0, count=count)

    def kernel(ctx: Any) -> Any:
        yield from elementwise_pipeline(ctx, inputs=[x], output=out, start=0, length=n, tile_length=tile,
                                        buffer_num=2, compute=compute)

    stream = dev.create_stream()
    dev.launch(stream, kernel, 1)
    try:
        dev.synchronize(stream)
    except SimulatorError as exc:
        return dev, f"{type(exc).__name__}: {exc}"
    return dev, dev.read(out.addr, n * 4).view(np.float32).tobytes().hex()[:64] + f" {dev.now}"


@pytest.mark.parametrize("fail_at", [None, 50])
def test_program_error_ahead_is_raised_where_the_step_run_raises_it(fail_at: int | None) -> None:
    """The fast-forward reads programs ahead; an error there surfaces at the same point."""
    dev_off, off = _elementwise_device_run(fail_at, False)
    dev_on, on = _elementwise_device_run(fail_at, True)
    assert on == off
    assert dev_on.now == dev_off.now
    assert dev_on.ff.rounds > 0


def test_fast_forward_outside_full_and_timing_mode_is_refused_naming_the_mode() -> None:
    s = opsim.TensorSpec((1024,), "fp32")
    with pytest.raises(ValueError, match="fast_forward=True needs mode 'full' or 'timing'.*'estimate'"):
        opsim.run("mse_loss_backward", mode="estimate", fast_forward=True, grad_output=s, self=s, target=s)

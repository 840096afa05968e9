"""The launch: devices, determinism, errors from the kernel, the sanitizer hook."""
import sys
import types

import numpy as np
import pytest

import opsim.asc as asc
from opsim.simulator.errors import MemoryFault


@asc.jit
def scale_kernel(x: asc.GlobalAddress, z: asc.GlobalAddress, n: int, bug: bool = False):
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x + asc.get_block_idx() * n)
    zg.set_global_buffer(z + asc.get_block_idx() * n)
    pipe = asc.TPipe()
    q = asc.TQue(asc.TPosition.VECIN, 2)
    o = asc.TQue(asc.TPosition.VECOUT, 2)
    pipe.init_buffer(q, 2, n * 4)
    pipe.init_buffer(o, 2, n * 4)
    if bug:
        _ = n.no_such_attribute                 # a plain Python bug in the kernel
    t = q.alloc_tensor(asc.float32)
    asc.data_copy(t, xg, n)
    q.enque(t)
    t = q.deque(asc.float32)
    u = o.alloc_tensor(asc.float32)
    asc.muls(u, t, 3.0, n)
    o.enque(u)
    q.free_tensor(t)
    u = o.deque(asc.float32)
    asc.data_copy(zg, u, n)
    o.free_tensor(u)


def _arrays(blocks=4, n=512):
    x = np.random.default_rng(7).standard_normal(blocks * n).astype(np.float32)
    return x, np.zeros_like(x)


def test_same_inputs_give_identical_results_and_traces():
    runs = []
    for _ in range(2):
        x, z = _arrays()
        r = scale_kernel[4, None](x, z, 512)
        runs.append((r.cycles, z.copy(), [(s.process, s.thread, s.name, s.start, s.end) for s in r.trace.slices()]))
    assert runs[0][0] == runs[1][0]
    assert np.array_equal(runs[0][1], runs[1][1])
    assert runs[0][2] == runs[1][2]


def test_a_kernel_trace_passes_the_trace_schema_and_names_its_arrays(tmp_path):
    # the trace of an opsim.asc launch once lacked the shapes, dtypes and opsim version that
    # traces.schema (and the HTML report's run facts) expect of every exported trace
    import json

    from opsim.traces.schema import check_chrome
    x, z = _arrays()
    r = scale_kernel[4, None](x, z, 512)
    r.trace.to_chrome_json(str(tmp_path / "k.json"))
    with open(tmp_path / "k.json", encoding="utf-8") as f:
        doc = json.load(f)
    assert check_chrome(doc) == []
    assert doc["otherData"]["shapes"] == {"x": [2048], "z": [2048]}
    assert doc["otherData"]["dtypes"] == {"x": "fp32", "z": "fp32"}


def test_inputs_are_left_alone_and_outputs_copied_back_in_place():
    x, z = _arrays()
    x0 = x.copy()
    r = scale_kernel[4, None](x, z, 512)
    assert np.array_equal(x, x0)
    assert np.array_equal(z, x * np.float32(3.0))
    assert list(r.outputs) == ["z"] and r.outputs["z"] is z


def test_device_option_and_set_device():
    x, z = _arrays()
    r = scale_kernel[4, None](x, z, 512, device="atlas-a3")
    assert r.device == "atlas-a3"
    asc.set_device("atlas-training")
    try:
        x, z = _arrays()
        r = scale_kernel[4, None](x, z, 512)
        assert r.device == "atlas-training"
        assert np.array_equal(z, x * np.float32(3.0))
    finally:
        asc.set_device("atlas-a2")
    with pytest.raises(Exception, match="atlas-zz"):
        asc.set_device("atlas-zz")


def test_a_python_bug_in_the_kernel_surfaces_as_itself():
    x, z = _arrays()
    with pytest.raises(AttributeError, match="no_such_attribute"):
        scale_kernel[4, None](x, z, 512, True)


def test_a_python_bug_in_the_kernel_names_its_kernel_line():
    # the exception comes back through the simulator's processes, which drop the kernel's frames
    # from its traceback: nothing said where in the kernel it arose
    x, z = _arrays()
    with pytest.raises(AttributeError) as err:
        scale_kernel[4, None](x, z, 512, True)
    notes = getattr(err.value, "__notes__", [])
    assert len(notes) == 1 and notes[0].startswith("at kernel line ") and "test_launch.py:" in notes[0], notes
    line = int(notes[0].rsplit(":", 1)[1])
    assert "_ = n.no_such_attribute" in open(__file__).read().splitlines()[line - 1]


def test_out_of_bounds_copy_faults_and_names_the_address():
    x, z = _arrays()
    with pytest.raises(MemoryFault) as err:
        scale_kernel[5, None](x, z, 512)        # block 4 reads past the end of x
    assert "MTE2" in str(err.value) or "DataCopy" in str(err.value)
    assert err.value.address is not None
    line = int(str(err.value).split("test_launch.py:")[1].split(")")[0])
    # the load past the end of x lands in the next allocation (no fault, as on the device); the
    # store past the end of z faults, and the message names its line
    assert "asc.data_copy(zg, u, n)" in open(__file__).read().splitlines()[line - 1]
    assert not z.any()


def test_sanitize_true_attaches_the_sanitizer_and_returns_its_report(monkeypatch):
    calls = []

    class FakeSanitizer:
        def __init__(self, device):
            calls.append("init")
            self.seen = 0
            device.observers.append(self)

        def on_instruction(self, core, pipe, instr, start, end):
            self.seen += 1

        def finish(self):
            calls.append("finish")
            return types.SimpleNamespace(findings=[], ok=True, seen=self.seen)

    mod = types.ModuleType("opsim.simulator.sanitizer")
    mod.Sanitizer = FakeSanitizer
    monkeypatch.setitem(sys.modules, "opsim.simulator.sanitizer", mod)
    x, z = _arrays()
    r = scale_kernel[4, None](x, z, 512, sanitize=True)
    assert calls == ["init", "finish"]
    assert r.sanitizer.ok and r.sanitizer.seen > 0
    assert r.stats["sanitizer"] is r.sanitizer


@pytest.mark.parametrize("name", ["add_tque", "matmul_leaky_relu"])
def test_examples_run_clean_under_the_sanitizer_with_the_same_cycles(example, name):
    mod = example(name)
    if name == "add_tque":
        plain, checked = mod.run(8 * 2048, 8, 2), mod.run(8 * 2048, 8, 2, sanitize=True)
    else:
        plain = mod.run(m=256, k=128, n=256, base_m=64)[0]
        checked = mod.run(m=256, k=128, n=256, base_m=64, sanitize=True)[0]
    assert checked.sanitizer.ok, checked.sanitizer.findings
    assert checked.cycles == plain.cycles


def test_an_array_passed_twice_is_one_device_buffer():
    x, _ = _arrays()
    x0 = x.copy()
    scale_kernel[4, None](x, x, 512)            # in place: z is x
    assert np.array_equal(x, x0 * np.float32(3.0))


@asc.jit
def accumulate_kernel(x: asc.GlobalAddress, z: asc.GlobalAddress, n: int):
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x + asc.get_block_idx() * n)
    zg.set_global_buffer(z)                     # every block adds into the same n elements
    t = asc.LocalTensor(asc.float32, asc.TPosition.VECIN, 0, n)
    asc.data_copy(t, xg, n)
    asc.set_flag(asc.HardEvent.MTE2_MTE3, 0)
    asc.wait_flag(asc.HardEvent.MTE2_MTE3, 0)
    asc.set_atomic_add(asc.float32)
    asc.data_copy(zg, t, n)
    asc.set_atomic_none()


def test_atomic_add_accumulates_the_blocks_into_gm():
    x = np.arange(4 * 64, dtype=np.float32)
    z = np.ones(64, np.float32)
    accumulate_kernel[4, None](x, z, 64)
    assert np.array_equal(z, 1 + x.reshape(4, 64).sum(axis=0))


@asc.jit
def bad_local_kernel(x: asc.GlobalAddress):
    asc.LocalTensor(asc.float32, asc.TPosition.VECIN, 190 * 1024, 4096)


def test_a_local_tensor_beyond_ub_is_refused_at_its_line():
    with pytest.raises(MemoryFault, match="test_launch.py:") as err:
        bad_local_kernel[1, None](np.zeros(8, np.float32))
    assert "UB holds 196608 B" in str(err.value)


class _CpuTensor:
    """The parts of a CPU torch tensor the launch uses (torch itself is not a dependency)."""

    def __init__(self, a):
        self._a = a
        self.dtype = f"torch.{a.dtype}"
        self.device = types.SimpleNamespace(type="cpu")

    def detach(self):
        return self

    def numpy(self):
        return self._a                            # shares memory, as torch's .numpy() does


_CpuTensor.__module__ = "torch"


def test_cpu_tensors_play_the_gm_tensors_and_are_written_in_place():
    x, z = _arrays()
    tz = _CpuTensor(z)
    scale_kernel[4, None](_CpuTensor(x), tz, 512)
    assert np.array_equal(tz.numpy(), x * np.float32(3.0))
    gpu = _CpuTensor(z)
    gpu.device = types.SimpleNamespace(type="npu")
    with pytest.raises(ValueError, match="CPU tensors"):
        scale_kernel[4, None](_CpuTensor(x), gpu, 512)


@asc.jit
def yielding_kernel(x: asc.GlobalAddress, z: asc.GlobalAddress):
    zg = asc.GlobalTensor()
    zg.set_global_buffer(z)
    t = asc.LocalTensor(asc.float32, asc.TPosition.VECOUT, 0, 8)
    asc.duplicate(t, 1.0, 8)
    asc.pipe_barrier(asc.PipeID.PIPE_ALL)
    yield asc.data_copy(zg, t, 8)             # generator-kernel habit: the body would never run


@asc.jit
def yielding_helper(t):
    yield asc.duplicate(t, 1.0, 8)


@asc.jit
def calls_yielding_helper(z: asc.GlobalAddress):
    yielding_helper(asc.LocalTensor(asc.float32, asc.TPosition.VECOUT, 0, 8))


def test_a_kernel_that_yields_is_refused_instead_of_running_nothing():
    # calling a generator function runs none of its body: the launch used to "succeed" in a
    # few hundred cycles with z untouched
    z = np.zeros(8, np.float32)
    with pytest.raises(TypeError, match=r"yielding_kernel \(.*test_launch.py:\d+\) contains `yield`"):
        yielding_kernel[1, None](np.zeros(8, np.float32), z)
    assert not z.any()
    with pytest.raises(TypeError, match="yielding_helper .* contains `yield`"):
        calls_yielding_helper[1, None](z)


@asc.jit
def oversubscribed_ub_kernel(x: asc.GlobalAddress):
    pipe = asc.TPipe()
    q = asc.TQue(asc.TPosition.VECIN, 2)
    pipe.init_buffer(q, 2, 128 * 1024)          # 256 KiB of queue buffers in a 192 KiB UB


def test_a_queue_that_does_not_fit_the_ub_names_the_kernel_line():
    from opsim.simulator.errors import CapacityError

    src = open(__file__).read().splitlines()
    line = next(i for i, text in enumerate(src, 1) if "256 KiB of queue buffers" in text)
    with pytest.raises(CapacityError, match=f"kernel line .*test_launch.py:{line}") as err:
        oversubscribed_ub_kernel[1, None](np.zeros(8, np.float32), sanitize=True)
    (finding,) = err.value.sanitizer.findings
    assert finding.kind == "over-capacity"
    # the line of the kernel, not of the opsim.asc frame that allocated the buffer
    assert finding.lines[0].endswith(f"test_launch.py:{line}")

"""DSP binarycrossentropygrad: the fp_/hp_ _s/_p library functions and the opsim OpDef."""
from __future__ import annotations

import numpy as np
import pytest

import opsim
from opsim.kernels import dsp
from opsim.kernels.dsp import DspLibrary, DspStatus
from opsim import TensorSpec
from opsim.simulator import numerics as nx
from opsim.simulator.hthread import HThread
from opsim.simulator.memory import AddressSpace

SHARED = {"input_x": 0xA0000000, "input_y": 0xB0000000, "weight": 0xC0000000, "dloss": 0xD0000000,
          "dx": 0xE0000000}                                    # the seed's _s addresses (DDR)
PRIVATE = {"input_x": 0x10000000, "input_y": 0x11000000, "weight": 0x12000000, "dloss": 0x13000000,
           "dx": 0x14000000}                                   # the seed's _p addresses (L2)
TARGETS = [("ft78ne", np.float32), ("mt7004", np.float32), ("mt7004", np.float16)]


def make_data(n: int, dtype, reduction: int, seed: int = 0, endpoints: bool = True) -> dict[str, np.ndarray]:
    """x in (0, 1) with x = 0 and x = 1 included (where the + eps matters; y = x there, so the
    exact result 0 is representable in every dtype), labels and weights, dloss per reduction."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.01, 0.99, n).astype(np.float32)
    y = rng.uniform(0.0, 1.0, n).astype(np.float32)
    if endpoints:
        x[:4] = y[:4] = [0.0, 1.0, 0.0, 1.0]
    w = rng.uniform(0.5, 2.0, n).astype(np.float32)
    # mean divides dloss[0] by N: scale it so fp16 results stay normal numbers
    dl = rng.uniform(0.5, 2.0, n if reduction == 0 else 1).astype(np.float32) * (n if reduction == 1 else 1)
    return {k: v.astype(dtype) for k, v in (("input_x", x), ("input_y", y), ("weight", w), ("dloss", dl))}


def open_rt(device: str) -> tuple[HThread, DspLibrary]:
    rt = HThread(device, trace_level="off")
    assert rt.hthread_dev_open(0) == 0
    return rt, DspLibrary(rt)


def put(rt: HThread, data: dict, addrs: dict, core: int = -1, weight: bool = True) -> None:
    for k, v in data.items():
        if k != "weight" or weight:
            assert rt.hthread_mem_write(0, addrs[k], v, core_id=core) == 0


def get_dx(rt: HThread, addr: int, n: int, dtype, core: int = -1) -> np.ndarray:
    raw, ret = rt.hthread_mem_read(0, addr, n * np.dtype(dtype).itemsize, core_id=core)
    assert ret == 0
    return raw.view(dtype).copy()


def call_s(lib, dtype, n, red, addrs, wd, mask) -> int:
    fn = lib.hp_binarycrossentropygrad_s if dtype == np.float16 else lib.fp_binarycrossentropygrad_s
    return fn(n, red, addrs["input_x"], addrs["input_y"], addrs["weight"], addrs["dloss"], addrs["dx"], wd, mask)


def call_p(lib, dtype, n, red, addrs, wd, core=0) -> int:
    fn = lib.hp_binarycrossentropygrad_p if dtype == np.float16 else lib.fp_binarycrossentropygrad_p
    return fn(n, red, addrs["input_x"], addrs["input_y"], addrs["weight"], addrs["dloss"], addrs["dx"], wd,
              core=core)


def golden(data: dict, red: int, wd: int) -> np.ndarray:
    a = dict(data) if wd else {k: v for k, v in data.items() if k != "weight"}
    return dsp.golden(a, {"reduction": red})["dx"]


def run_both(device, dtype, n, red, wd, mask=None, seed=0):
    rt, lib = open_rt(device)
    data = make_data(n, dtype, red, seed)
    put(rt, data, SHARED)
    put(rt, data, PRIVATE, core=0)
    full = (1 << rt.spec.cores.dsp) - 1
    assert call_s(lib, dtype, n, red, SHARED, wd, mask or full) == 0, rt.get_recent_err_msg()
    dx_s = get_dx(rt, SHARED["dx"], n, dtype)
    assert call_p(lib, dtype, n, red, PRIVATE, wd) == 0, rt.get_recent_err_msg()
    dx_p = get_dx(rt, PRIVATE["dx"], n, dtype, core=0)
    return data, dx_s, dx_p


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device,dtype", TARGETS, ids=["ft78ne-fp32", "mt7004-fp32", "mt7004-fp16"])
@pytest.mark.parametrize("red", [0, 1, 2])
@pytest.mark.parametrize("wd", [1, 0])
def test_s_and_p_give_identical_dx_equal_to_the_golden(device, dtype, red, wd):
    data, dx_s, dx_p = run_both(device, dtype, 1000, red, wd)
    np.testing.assert_array_equal(bits(dx_s), bits(dx_p))
    np.testing.assert_array_equal(bits(dx_s), bits(golden(data, red, wd)))


@pytest.mark.parametrize("device,dtype", TARGETS, ids=["ft78ne-fp32", "mt7004-fp32", "mt7004-fp16"])
@pytest.mark.parametrize("red", [0, 1, 2])
def test_dx_meets_the_ecosystem_standard_against_fp64(device, dtype, red):
    data, dx_s, _ = run_both(device, dtype, 2048, red, 1, seed=7)
    truth = dsp.truth(data, {"reduction": red})["dx"]
    ok, info = nx.ecosystem_check(dx_s, truth, nx.dtype(dtype))
    assert ok, info
    assert dx_s[0] == 0 and dx_s[1] == 0          # x = y = 0 and 1: 0 / (0 + eps), not NaN


def test_plus_eps_is_the_seeds_form_not_a_max():
    # x(1-x) = 1e-12 exactly would give the same result under max(.,eps); at x = 1e-13 the two
    # forms differ: max would divide by 1e-12, "+ eps" divides by ~1.1e-12
    rt, lib = open_rt("ft78ne")
    data = {"input_x": np.array([1e-13] * 32, np.float32), "input_y": np.zeros(32, np.float32),
            "weight": np.ones(32, np.float32), "dloss": np.ones(32, np.float32)}
    put(rt, data, SHARED)
    assert call_s(lib, np.float32, 32, 0, SHARED, 1, 0x1) == 0
    dx = get_dx(rt, SHARED["dx"], 32, np.float32)
    x = np.float32(1e-13)
    expected = x / (x * (np.float32(1) - x) + np.float32(1e-12))
    assert dx[0] == expected and dx[0] != x / np.float32(1e-12)


@pytest.mark.parametrize("device,masks", [("ft78ne", [0x1, 0x3, 0x81, 0xF0, 0xFF]), ("mt7004", [0x1, 0x5, 0xA, 0xF])])
def test_every_core_mask_gives_identical_results(device, masks):
    rt, lib = open_rt(device)
    data = make_data(1500, np.float32, 0, seed=3)
    put(rt, data, SHARED)
    results = []
    for mask in masks:
        assert call_s(lib, np.float32, 1500, 0, SHARED, 1, mask) == 0
        results.append(get_dx(rt, SHARED["dx"], 1500, np.float32))
        assert lib.last_tiling.block_dim == bin(mask).count("1")
    for r in results[1:]:
        np.testing.assert_array_equal(bits(r), bits(results[0]))


def test_many_double_buffered_tiles_per_core_give_the_one_tile_result():
    data = make_data(1000, np.float16, 0, seed=5)
    base = opsim.run("binarycrossentropygrad", device="mt7004", trace="off", reduction=0, core_mask=0x3, **data)
    tiled = opsim.run("binarycrossentropygrad", device="mt7004", trace="off", reduction=0, core_mask=0x3,
                      tiling={"tile_length": 64, "buffer_num": 2}, **data)
    assert base.tiling.tile_length >= 512 and tiled.tiling.tile_length == 64
    np.testing.assert_array_equal(bits(tiled.outputs["dx"]), bits(base.outputs["dx"]))


def test_without_weight_the_weight_pointer_is_never_read():
    rt, lib = open_rt("ft78ne")
    data = make_data(1024, np.float32, 1)
    put(rt, data, SHARED, weight=False)
    before = rt.device.bytes_read
    # a null weight, and a misaligned one outside every window, are both fine: not read
    for bogus in (0, 0x3):
        addrs = dict(SHARED, weight=bogus)
        assert call_s(lib, np.float32, 1024, 1, addrs, 0, 0xFF) == 0, rt.get_recent_err_msg()
    read = (rt.device.bytes_read - before) // 2
    assert read == 2 * 1024 * 4 + 8 * 4              # x and y, plus dloss[0] once per core
    np.testing.assert_array_equal(get_dx(rt, SHARED["dx"], 1024, np.float32), golden(data, 1, 0))


def test_the_seeds_mean_divides_dloss0_by_n_in_fp32():
    rt, lib = open_rt("ft78ne")
    n = 96
    data = {"input_x": np.full(n, 0.25, np.float32), "input_y": np.zeros(n, np.float32),
            "weight": np.ones(n, np.float32), "dloss": np.array([7.0], np.float32)}
    put(rt, data, SHARED)
    assert call_s(lib, np.float32, n, 1, SHARED, 1, 0x7) == 0
    f = np.float32
    value = (f(0.25) - f(0)) / (f(0.25) * (f(1) - f(0.25)) + f(1e-12))
    assert (get_dx(rt, SHARED["dx"], n, np.float32) == value * (f(7.0) / f(n))).all()


def test_hp_special_values_follow_fp32_compute_and_one_rne_rounding():
    # docs/sources.md#dsp-bce-seed-readings: half in, fp32 chain, one RNE rounding. The golden is
    # written out here, element by element in Python floats rounded to fp32 after every step
    f32 = np.float32
    xs = [0.0, 1.0, 0.5, 6e-8, 0.99951171875, -0.5, 2.0, 65504.0, np.inf, -np.inf, np.nan]
    ys = [0.0, 1.0, 0.25, np.nan, np.inf]
    x = np.array([a for a in xs for _ in ys], np.float16)
    y = np.array([b for _ in xs for b in ys], np.float16)
    w = np.resize(np.array([1.0, 3.0, -2.0, 1000.0], np.float16), x.size)
    dl = np.resize(np.array([1.0, 60000.0, -0.001, 0.0, 7.5], np.float16), x.size)
    rt, lib = open_rt("mt7004")
    put(rt, {"input_x": x, "input_y": y, "weight": w, "dloss": dl}, SHARED)
    assert call_s(lib, np.float16, x.size, 0, SHARED, 1, 0xF) == 0
    dx = get_dx(rt, SHARED["dx"], x.size, np.float16)
    with np.errstate(all="ignore"):
        for i in range(x.size):
            xi, yi = f32(x[i]), f32(y[i])
            den = f32(f32(xi * f32(f32(-1.0) * xi + f32(1.0))) + f32(1e-12))
            want = np.float16(f32(f32(f32(w[i]) * f32(xi - yi)) / den) * f32(dl[i]))
            assert (np.isnan(want) and np.isnan(dx[i])) or bits(dx[i:i + 1]).tobytes() == \
                bits(np.array([want])).tobytes(), (x[i], y[i], w[i], dl[i], dx[i], want)
    # x = y in {0, 1}: 0 (eps survives in fp32); x = 0, y = 1: -1e12 in fp32, -inf in half
    assert dx[0] == 0 and dx[len(ys) + 1] == 0 and dx[1] == -np.inf


def test_mean_converts_a_large_input_size_to_float_before_dividing():
    # dloss[0] / (float)N: N = 2^24 + 1 becomes 2^24 in fp32, so the scale is 3 / 2^24 exactly,
    # not the fp32 rounding of 3 / (2^24 + 1)
    n = 2 ** 24 + 1
    rt, lib = open_rt("ft78ne")
    put(rt, {"input_x": np.full(n, 0.25, np.float32), "input_y": np.zeros(n, np.float32),
             "dloss": np.array([3.0], np.float32)}, SHARED)
    assert call_s(lib, np.float32, n, 1, SHARED, 0, 0xFF) == 0
    f = np.float32
    value = f(0.25) / (f(0.25) * f(0.75) + f(1e-12))
    dx = get_dx(rt, SHARED["dx"], 64, np.float32)
    assert (dx == value * f(3.0 / 2 ** 24)).all() and value * f(3.0 / 2 ** 24) != value * f(3.0 / n)


@pytest.mark.parametrize("wd", [2, -1])
def test_any_non_zero_weight_defined_means_a_weight_is_given(wd):
    rt, lib = open_rt("ft78ne")
    data = make_data(100, np.float32, 2)
    put(rt, data, SHARED)
    assert call_s(lib, np.float32, 100, 2, SHARED, wd, 0xFF) == 0
    np.testing.assert_array_equal(bits(get_dx(rt, SHARED["dx"], 100, np.float32)), bits(golden(data, 2, 1)))
    assert call_s(lib, np.float32, 100, 2, dict(SHARED, weight=0), wd, 0xFF) == DspStatus.ERR_POINTER


# ---------------------------------------------------------------------------------------------
# bad input: a status code, a message naming parameter, value and what is allowed; no memory change
# ---------------------------------------------------------------------------------------------

def digests(rt: HThread, dx: tuple[int, int] | None = None, dx_core: int = -1,
            skip_work_area: bool = False) -> list[str]:
    """Checksums of all memory (DDR, SMC and every core's private memory) outside dx."""
    dev = rt.device
    shared_ex = [dx] if dx is not None and dx_core < 0 else []
    out = [dev.space.snapshot_digest(shared_ex)]
    spec = rt.spec
    work = (spec.private.base + spec.private.window - spec.private.capacity // 2, spec.private.capacity // 2)
    for c in dev.cores["dsp"]:
        ex = [dx] if dx is not None and dx_core == c.index else []
        if skip_work_area:
            ex.append(work)
        out.append(AddressSpace([c.memories["PRIVATE"]]).snapshot_digest(ex))
    return out


BAD_CASES = [
    # (id, device, storage, dtype, overrides of the call, code, words the message must contain)
    ("size-zero", "ft78ne", "s", np.float32, {"n": 0}, DspStatus.ERR_INPUT_SIZE, ["input_size is 0", "1..2147483647"]),
    ("size-negative", "ft78ne", "p", np.float32, {"n": -5}, DspStatus.ERR_INPUT_SIZE, ["input_size is -5"]),
    ("reduction-3", "ft78ne", "s", np.float32, {"red": 3}, DspStatus.ERR_REDUCTION, ["reduction is 3", "0 (none", "2 (sum"]),
    ("reduction-neg", "mt7004", "p", np.float16, {"red": -1}, DspStatus.ERR_REDUCTION, ["reduction is -1"]),
    ("misaligned", "ft78ne", "s", np.float32, {"input_y": 0xB0000002}, DspStatus.ERR_POINTER,
     ["input_y 0xb0000002", "4-byte aligned"]),
    ("out-of-window", "ft78ne", "s", np.float32, {"dloss": 0x40000000}, DspStatus.ERR_POINTER,
     ["dloss [0x40000000", "outside", "DDR [0x80000000"]),
    ("past-window-end", "mt7004", "s", np.float32, {"dx": 0xFFFFF800}, DspStatus.ERR_POINTER,
     ["dx [0xfffff800, 0x100000800)", "outside"]),
    ("mask-zero", "ft78ne", "s", np.float32, {"mask": 0}, DspStatus.ERR_CORE_MASK, ["core_mask 0x0 selects no core", "0x1..0xff"]),
    ("mask-beyond-ft78ne", "ft78ne", "s", np.float32, {"mask": 0x1FF}, DspStatus.ERR_CORE_MASK,
     ["core_mask 0x1ff", "beyond the 8 DSP cores", "0x1..0xff"]),
    ("mask-beyond-mt7004", "mt7004", "s", np.float32, {"mask": 0x10}, DspStatus.ERR_CORE_MASK,
     ["core_mask 0x10", "beyond the 4 DSP cores", "0x1..0xf"]),
    ("mask-none", "ft78ne", "s", np.float32, {"mask": None}, DspStatus.ERR_CORE_MASK,
     ["core_mask None is not an integer", "0x1..0xff"]),
    ("mask-float", "mt7004", "s", np.float32, {"mask": 3.0}, DspStatus.ERR_CORE_MASK,
     ["core_mask 3.0 is not an integer", "0x1..0xf"]),
    ("hp-s-on-ft78ne", "ft78ne", "s", np.float16, {}, DspStatus.ERR_UNSUPPORTED, ["fp16", "not supported on FT78NE", "fp32"]),
    ("hp-p-on-ft78ne", "ft78ne", "p", np.float16, {}, DspStatus.ERR_UNSUPPORTED, ["not supported on FT78NE"]),
    ("p-pointer-in-ddr", "ft78ne", "p", np.float32, {"input_x": 0xA0000000}, DspStatus.ERR_POINTER,
     ["input_x [0xa0000000", "outside dsp.core0's private memory"]),
    ("p-pointer-in-work-area", "mt7004", "p", np.float32, {"dx": 0x17FFF000}, DspStatus.ERR_POINTER,
     ["dx [0x17fff000", "working area"]),
    ("p-pointer-out-of-window", "mt7004", "p", np.float32, {"weight": 0x0F000000}, DspStatus.ERR_POINTER,
     ["weight [0xf000000", "outside dsp.core0's private memory"]),
    ("p-core-beyond", "ft78ne", "p", np.float32, {"core": 8}, DspStatus.ERR_CORE_MASK, ["core 8", "0..7"]),
    ("null-x", "ft78ne", "s", np.float32, {"input_x": 0}, DspStatus.ERR_POINTER, ["input_x is a null pointer"]),
    ("null-weight", "mt7004", "s", np.float32, {"weight": 0}, DspStatus.ERR_POINTER,
     ["weight is a null pointer", "weight_defined"]),
    ("dx-aliases-x", "ft78ne", "s", np.float32, {"dx": 0xA0000800}, DspStatus.ERR_POINTER, ["dx [0xa0000800", "overlaps input_x"]),
    ("weight-defined-type", "ft78ne", "s", np.float32, {"wd": "yes"}, DspStatus.ERR_INVALID_ARGUMENT,
     ["weight_defined is 'yes'"]),
    ("p-over-capacity", "ft78ne", "p", np.float32, {"n": 60000}, DspStatus.ERR_CAPACITY,
     ["private memory", "capacity is 524288 B"]),
    # docs/sources.md#dsp-bce-seed-readings
    ("size-beyond-int", "ft78ne", "s", np.float32, {"n": 2 ** 31}, DspStatus.ERR_INPUT_SIZE,
     ["input_size is 2147483648", "1..2147483647"]),
    ("mask-negative", "ft78ne", "s", np.float32, {"mask": -1}, DspStatus.ERR_CORE_MASK,
     ["core_mask -0x1", "beyond the 8 DSP cores", "0x1..0xff"]),
    ("half-on-2-bytes", "mt7004", "s", np.float16, {"weight": 0xC0000002}, DspStatus.ERR_POINTER,
     ["weight 0xc0000002 is not 4-byte aligned", "half operands"]),
    ("dx-in-place", "mt7004", "p", np.float16, {"dx": 0x10000000}, DspStatus.ERR_POINTER,
     ["dx [0x10000000", "overlaps input_x"]),
]


@pytest.mark.parametrize("case", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_input_gets_its_code_and_message_and_changes_nothing_outside_dx(case):
    _, device, storage, dtype, ov, code, words = case
    rt, lib = open_rt(device)
    data = make_data(1024, np.float32 if dtype == np.float16 and device == "ft78ne" else dtype, 1)
    put(rt, data, SHARED)
    for core in range(rt.spec.cores.dsp):                     # real data in every core's memory
        put(rt, data, PRIVATE, core=core)
    addrs = dict(SHARED if storage == "s" else PRIVATE)
    addrs.update({k: v for k, v in ov.items() if k in addrs})
    n, red, wd = ov.get("n", 1024), ov.get("red", 1), ov.get("wd", 1)
    item = np.dtype(dtype).itemsize
    dx_core = ov.get("core", 0) if storage == "p" else -1
    dx = (addrs["dx"], max(n, 0) * item)
    before = digests(rt, dx, dx_core)
    read0, written0 = rt.device.bytes_read, rt.device.bytes_written
    if storage == "s":
        ret = call_s(lib, dtype, n, red, addrs, wd, ov.get("mask", (1 << rt.spec.cores.dsp) - 1))
    else:
        ret = call_p(lib, dtype, n, red, addrs, wd, core=ov.get("core", 0))
    assert ret == code
    msg = rt.get_recent_err_msg()
    for w in words:
        assert w in msg, msg
    assert digests(rt, dx, dx_core) == before
    assert (rt.device.bytes_read, rt.device.bytes_written) == (read0, written0)


@pytest.mark.parametrize("storage,name,value", [("s", "input_x", 0), ("s", "dloss", None), ("s", "weight", 0),
                                                ("s", "dx", -4), ("p", "input_y", 0), ("p", "dx", 1.5)])
def test_a_null_or_non_address_pointer_is_told_where_it_must_point(storage, name, value):
    # the message names the parameter, its value and what is allowed: how many elements of which
    # dtype, in which memory window(s) -- the same windows a pointer outside them is shown
    rt, lib = open_rt("mt7004")
    addrs = dict(SHARED if storage == "s" else PRIVATE, **{name: value})
    n = 100
    ret = call_s(lib, np.float16, n, 0, addrs, 1, 0xF) if storage == "s" else \
        call_p(lib, np.float16, n, 0, addrs, 1)
    assert ret == DspStatus.ERR_POINTER
    msg = rt.get_recent_err_msg()
    assert f"{name} is " in msg and f"{n} elements of fp16" in msg, msg
    if storage == "s":
        assert "DDR [0x80000000, 0x100000000)" in msg and "SMC [0xc000000, 0xc600000)" in msg, msg
    else:
        assert "dsp.core0's private memory" in msg and "[0x10000000, 0x17fa0000)" in msg, msg


def test_a_successful_s_call_writes_dx_and_only_the_working_areas():
    rt, lib = open_rt("ft78ne")
    data = make_data(1024, np.float32, 0)
    put(rt, data, SHARED)
    for core in range(8):
        put(rt, data, PRIVATE, core=core)
    dx = (SHARED["dx"], 4096)
    before = digests(rt, dx, skip_work_area=True)
    assert call_s(lib, np.float32, 1024, 0, SHARED, 1, 0xFF) == 0
    assert digests(rt, dx, skip_work_area=True) == before


def test_a_successful_p_call_moves_no_ddr_bytes_and_writes_only_dx_and_its_working_area():
    rt, lib = open_rt("mt7004")
    data = make_data(1024, np.float16, 2)
    put(rt, data, SHARED)
    put(rt, data, PRIVATE, core=2)
    dx = (PRIVATE["dx"], 2048)
    before = digests(rt, dx, dx_core=2, skip_work_area=True)
    ddr = rt.device.gm_link
    carried = ddr.bytes_carried
    assert call_p(lib, np.float16, 1024, 2, PRIVATE, 1, core=2) == 0
    assert digests(rt, dx, dx_core=2, skip_work_area=True) == before
    assert rt.device.bytes_read == rt.device.bytes_written == 0 and ddr.bytes_carried == carried
    np.testing.assert_array_equal(bits(get_dx(rt, PRIVATE["dx"], 1024, np.float16, core=2)), bits(golden(data, 2, 1)))


def test_a_private_memory_already_full_of_data_is_refused_before_running():
    rt, lib = open_rt("ft78ne")
    data = make_data(1024, np.float32, 1)
    put(rt, data, PRIVATE, core=0)
    # fill the rest of core 0's capacity with other data, one byte per page
    filled = 0
    while rt.hthread_mem_write(0, 0x15000000 + filled * 4096, np.ones(1, np.uint8), core_id=0) == 0:
        filled += 1
    before = digests(rt, (PRIVATE["dx"], 4096), dx_core=0)
    assert call_p(lib, np.float32, 1024, 1, PRIVATE, 1) == DspStatus.ERR_CAPACITY
    assert "dsp.core0's private memory cannot hold" in rt.get_recent_err_msg()
    assert digests(rt, (PRIVATE["dx"], 4096), dx_core=0) == before


def test_calls_before_the_device_is_open_return_a_runtime_error():
    rt = HThread("ft78ne", trace_level="off")
    assert DspLibrary(rt).fp_binarycrossentropygrad_s(8, 0, *SHARED.values(), 1, 1) == DspStatus.ERR_RUNTIME
    assert "hthread_dev_open" in rt.get_recent_err_msg()


# ---------------------------------------------------------------------------------------------
# opsim.run
# ---------------------------------------------------------------------------------------------

def test_opsim_run_matches_the_library_for_both_storages():
    data = make_data(700, np.float16, 1)
    s = opsim.run("binarycrossentropygrad", device="mt7004", trace="off", storage="shared", reduction=1, **data)
    p = opsim.run("binarycrossentropygrad", device="mt7004", trace="off", storage="private", reduction=1,
                  core_mask=0x4, **data)
    np.testing.assert_array_equal(bits(s.outputs["dx"]), bits(golden(data, 1, 1)))
    np.testing.assert_array_equal(bits(p.outputs["dx"]), bits(s.outputs["dx"]))
    assert p.stats["bytes_read"] == p.stats["bytes_written"] == 0
    assert p.stats["links"]["DDR"]["bytes"] == 0
    assert list(p.stats["per_core"]) == ["dsp.core2"]            # the core of the one-bit mask


@pytest.mark.parametrize("kwargs,code,words", [
    ({"storage": "private", "core_mask": 0x3}, DspStatus.ERR_CORE_MASK, ["selects 2 cores", "one core"]),
    ({"storage": "ddr"}, DspStatus.ERR_INVALID_ARGUMENT, ["storage is 'ddr'", "'shared'", "'private'"]),
    ({"core_mask": 0x10}, DspStatus.ERR_CORE_MASK, ["beyond the 4 DSP cores"]),
    ({"reduction": 5}, DspStatus.ERR_REDUCTION, ["reduction is 5"]),
])
def test_opsim_run_rejects_bad_attributes_with_dsp_codes(kwargs, code, words):
    data = make_data(64, np.float32, 1)
    with pytest.raises(opsim.OpError) as exc:
        opsim.run("binarycrossentropygrad", device="mt7004", **{**data, **kwargs})
    assert exc.value.code == code
    for w in words:
        assert w in exc.value.message


def test_opsim_run_rejects_a_dsp_operator_on_an_npu_and_fp16_on_ft78ne():
    data = make_data(64, np.float16, 1)
    for device, words in (("atlas-a2", "FT78NE and MT7004 DSPs"), ("ft78ne", "not supported on FT78NE")):
        with pytest.raises(opsim.OpError) as exc:
            opsim.run("binarycrossentropygrad", device=device, **data)
        assert exc.value.code == DspStatus.ERR_UNSUPPORTED and words in exc.value.message


def test_operand_counts_must_agree_with_input_size():
    data = make_data(64, np.float32, 0)
    data["weight"] = data["weight"][:32]
    with pytest.raises(opsim.OpError) as exc:
        opsim.run("binarycrossentropygrad", device="ft78ne", reduction=0, **data)
    assert exc.value.code == DspStatus.ERR_INPUT_SIZE and "weight has 32 elements" in exc.value.message


def test_runs_are_deterministic():
    data = make_data(2000, np.float32, 0, seed=11)
    a = opsim.run("binarycrossentropygrad", device="ft78ne", trace="off", reduction=0, core_mask=0x55, **data)
    b = opsim.run("binarycrossentropygrad", device="ft78ne", trace="off", reduction=0, core_mask=0x55, **data)
    assert a.cycles == b.cycles
    np.testing.assert_array_equal(bits(a.outputs["dx"]), bits(b.outputs["dx"]))


def test_traces_show_dsp_cores_with_dma_vector_and_scalar_threads():
    data = make_data(512, np.float32, 1)
    res = opsim.run("binarycrossentropygrad", device="ft78ne", trace="instruction", reduction=1, core_mask=0x81,
                    **data)
    busy = {(s.process, s.thread) for s in res.trace.slices() if s.thread in ("DMA", "VECTOR", "SCALAR")}
    assert busy == {(c, t) for c in ("dsp.core0", "dsp.core7") for t in ("DMA", "VECTOR", "SCALAR")}
    # the scalar unit forms dL' = dloss[0] / N once per core, after its DMA and before the vector work
    for core in ("dsp.core0", "dsp.core7"):
        sl = [s for s in res.trace.slices() if s.process == core]
        scalar = [s for s in sl if s.thread == "SCALAR"]
        assert [s.name for s in scalar] == ["ScalarCompute"]
        first_dma = min(s.end for s in sl if s.thread == "DMA")
        first_vec = min(s.start for s in sl if s.thread == "VECTOR")
        assert first_dma <= scalar[0].start and scalar[0].end <= first_vec


def _occupancy(res, core: str) -> list[tuple[int, float]]:
    return [(t, v) for p, s, t, v in res.trace.counters() if p == core and s == "PRIVATE bytes"]


def test_a_dsp_trace_tracks_the_library_work_area_like_ub():
    # ft78ne fp32, 1024 elements on 8 cores (128 each, one tile), mean, with weight. The work
    # area is bump allocated in this order: dloss[0] as loaded (32 B), the fp32 scratch (128 x
    # 4 B), dL' (32 B), VECIN x/y/w (3 x 512 B), VECOUT (512 B); all of it dies with the block
    op = dsp.OP
    data = op.example(np.random.default_rng(0), opsim.device_spec("ft78ne"), "fp32")
    res = opsim.run("binarycrossentropygrad", device="ft78ne", trace="tile", **data)
    steps = [32, 32 + 512, 32 + 512 + 32, 576 + 3 * 512, 576 + 4 * 512]
    blocks = [(b.process, b.start, b.end) for b in res.trace.slices(thread="BLOCK")]
    assert len(blocks) == 8
    for core, t0, t1 in blocks:
        assert _occupancy(res, core) == [(t0, float(v)) for v in steps] + [(t1, 0.0)], core
        assert res.trace.metadata["local_peak_bytes"][core] == steps[-1]
    assert res.stats["ub_peak_bytes"] == res.trace.summary().ub_peak_bytes == steps[-1]


def test_a_p_calls_track_holds_its_operands_and_the_work_area_at_once():
    # _p on core 0: x, y, w, dx of 1024 fp32 (4096 B each) and dloss (4 B) sit in the private
    # memory from before the launch; the block adds its scratch (1024 x 4 B) and dL' (32 B),
    # which go at its end while the operands stay
    data = dsp.OP.example(np.random.default_rng(0), opsim.device_spec("ft78ne"), "fp32")
    res = opsim.run("binarycrossentropygrad", device="ft78ne", trace="tile", storage="private", core_mask=1,
                    **data)
    operands = 4 * 4096 + 4
    (core, t0, t1), = [(b.process, b.start, b.end) for b in res.trace.slices(thread="BLOCK")]
    pts = _occupancy(res, core)
    assert pts[-3:] == [(t0, operands + 4096.0), (t0, operands + 4096.0 + 32), (t1, float(operands))]
    assert res.stats["ub_peak_bytes"] == operands + 4096 + 32
    est = opsim.run("binarycrossentropygrad", device="ft78ne", mode="estimate", storage="private", core_mask=1,
                    **data)
    # the estimate's work area reserves the 32 B of a loaded dloss[0] that _p never loads
    assert est.stats["ub_peak_bytes"] == operands + 4096 + 2 * 32


# ---------------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------------

def timing_curve(device: str, dtype: str, n: int = 1 << 20) -> list:
    spec = opsim.device_spec(device)
    out = []
    for k in range(1, spec.cores.dsp + 1):
        r = opsim.run("binarycrossentropygrad", device=device, mode="timing", trace="off", reduction=0,
                      core_mask=(1 << k) - 1, input_x=TensorSpec((n,), dtype), input_y=TensorSpec((n,), dtype),
                      weight=TensorSpec((n,), dtype), dloss=TensorSpec((n,), dtype))
        out.append(r)
    return out


@pytest.mark.parametrize("device,dtype", [("ft78ne", "fp32"), ("mt7004", "fp32"), ("mt7004", "fp16")])
def test_s_speeds_up_with_cores_until_ddr_bandwidth_binds(device, dtype):
    spec = opsim.device_spec(device)
    curve = timing_curve(device, dtype)
    ddr = spec.bytes_per_cycle(spec.gm.bandwidth)
    item = nx.dtype(dtype).itemsize
    moved = (1 << 20) * item * 5                               # x, y, w, dloss in; dx out
    cycles = [r.cycles for r in curve]
    for r in curve:
        link = r.stats["links"]["DDR"]
        assert r.stats["bytes_read"] + r.stats["bytes_written"] == moved
        assert link["max_rate_GBps"] <= link["peak_GBps"] * (1 + 1e-9)   # never above the spec
        assert r.cycles >= spec.launch.overhead + moved / ddr              # the DDR bound holds
    # one core is limited by its own DMA engine (below the DDR rate): a second core nearly doubles
    assert spec.dma.base < ddr and cycles[0] / cycles[1] > 1.6
    # one core moves data at most at its DMA engine's rate
    assert moved / (cycles[0] - spec.launch.overhead) <= spec.dma.base * (1 + 1e-9)
    # from then on DDR binds: every further core gains less than the first one did, and with all
    # cores the kernel (after the launch) runs at >= 3/4 of the DDR peak; the rest is the DMA
    # start-up gaps (A-D5) that a few cores cannot hide completely
    gains = [cycles[i] / cycles[i + 1] for i in range(len(cycles) - 1)]
    assert all(g < gains[0] for g in gains[1:])
    assert moved / (cycles[-1] - spec.launch.overhead) >= 0.75 * ddr
    assert all(a >= b for a, b in zip(cycles, cycles[1:]))


def _mean_run(device: str, dtype: str, n: int, cores: int, tiling: dict | None = None):
    return opsim.run("binarycrossentropygrad", device=device, mode="timing", trace="instruction", reduction=1,
                     core_mask=(1 << cores) - 1, tiling=tiling, input_x=TensorSpec((n,), dtype),
                     input_y=TensorSpec((n,), dtype), weight=TensorSpec((n,), dtype), dloss=TensorSpec((1,), dtype))


def _compute_with_dma_idle(res, core: str) -> int:
    """Cycles the core's VECTOR pipe works while its DMA pipe does nothing, from the trace."""
    def union(thread: str) -> list[list[int]]:
        out: list[list[int]] = []
        for a, b in sorted((s.start, s.end) for s in res.trace.slices(core, thread)):
            if out and a <= out[-1][1]:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        return out
    dma = union("DMA")
    return sum(e - s - sum(max(0, min(e, de) - max(s, ds)) for ds, de in dma) for s, e in union("VECTOR"))


@pytest.mark.parametrize("device,dtype", [("ft78ne", "fp32"), ("mt7004", "fp16")])
def test_s_gets_slower_with_a_core_only_where_a_whole_chunk_tile_exposes_its_compute(device, dtype):
    """Why a ``_s`` call can slow down with one more core (README, known limits): the plan runs a
    chunk that fits the working area as one single-buffered tile, so every core loads, computes
    and stores in turn and its compute is no longer hidden under the DMA of another tile. Not the
    split, the DDR link or the mean: those stay as they were across the step."""
    spec = opsim.device_spec(device)
    n = 65536
    runs = [_mean_run(device, dtype, n, k) for k in range(1, spec.cores.dsp + 1)]
    item = nx.dtype(dtype).itemsize
    rises = [k for k in range(1, len(runs)) if runs[k].cycles > runs[k - 1].cycles]
    assert rises, "65536 elements: the curve has a step up (the case the README explains)"
    for i, r in enumerate(runs):
        t = r.tiling
        whole = t.buffer_num == 1 and t.tile_length >= t.chunk
        # the split is even to one 32-element granule and only the last core takes less
        assert 0 <= t.chunk - n / t.block_dim < dsp.ALIGN_ELEMENTS
        assert t.total - (t.active_threads - 1) * t.chunk <= t.chunk
        # the DDR link carries the operands once and each core's dloss[0], never above its peak
        link = r.stats["links"]["DDR"]
        assert link["bytes"] == n * item * 4 + (i + 1) * item
        assert link["max_rate_GBps"] <= link["peak_GBps"] * (1 + 1e-9)
        for core, busy in r.stats["per_core"].items():
            idle_compute = _compute_with_dma_idle(r, core)
            if whole:      # one tile: the whole compute waits for the loads and holds the stores back
                assert idle_compute == busy["VECTOR"]
            else:          # two or more tiles: most of it runs under the DMA of another tile
                assert idle_compute < busy["VECTOR"] / 2
    for k in rises:
        slower, faster = runs[k], runs[k - 1]
        assert slower.tiling.buffer_num == 1 and slower.tiling.tile_length >= slower.tiling.chunk
        # the rise is no larger than the compute the whole-chunk tile left exposed
        core = max(slower.stats["per_core"], key=lambda c: max(s.end for s in slower.trace.slices(c)))
        assert slower.cycles - faster.cycles < _compute_with_dma_idle(slower, core)
    # and two double-buffered tiles per core at the first step up take back most of the rise
    k = rises[0]
    chunk = runs[k].tiling.chunk
    half = -(-chunk // 2 // dsp.ALIGN_ELEMENTS) * dsp.ALIGN_ELEMENTS
    forced = _mean_run(device, dtype, n, k + 1, {"buffer_num": 2, "tile_length": half})
    assert forced.tiling.buffer_num == 2 and -(-chunk // forced.tiling.tile_length) == 2
    assert runs[k].cycles - forced.cycles > 0.75 * (runs[k].cycles - runs[k - 1].cycles)


@pytest.mark.parametrize("device, dtype", TARGETS)
def test_a_p_call_too_big_for_the_private_memory_is_told_the_largest_input_size_that_fits(device, dtype):
    # the message named neither input_size nor what would fit; the size it names must run, and one
    # element more must be refused
    rt, lib = open_rt(device)
    assert call_p(lib, dtype, 200000, 1, PRIVATE, 1) == DspStatus.ERR_CAPACITY
    msg = rt.get_recent_err_msg()
    assert "input_size 200000:" in msg and f"capacity is {rt.spec.private.capacity} B" in msg
    largest = int(msg.split("the largest input_size that fits is ")[1].split()[0])
    for n, code in ((largest, 0), (largest + 1, DspStatus.ERR_CAPACITY)):
        rt, lib = open_rt(device)
        put(rt, make_data(n, dtype, 1), PRIVATE, core=0)
        assert call_p(lib, dtype, n, 1, PRIVATE, 1) == code, rt.get_recent_err_msg()


def test_run_with_private_storage_too_big_is_told_the_largest_input_x_size_that_fits():
    def run(n):
        ts = opsim.TensorSpec((n,), "fp32")
        return opsim.run("binarycrossentropygrad", device="mt7004", mode="timing", trace="off", storage="private",
                         input_x=ts, input_y=ts, weight=ts, dloss=opsim.TensorSpec((1,), "fp32"), reduction=1)
    with pytest.raises(opsim.OpError) as e:
        run(60000)
    assert e.value.code == DspStatus.ERR_CAPACITY and "input_x size 60000:" in e.value.message
    largest = int(e.value.message.split("the largest input_x size that fits is ")[1].split()[0])
    assert run(largest).cycles > 0
    with pytest.raises(opsim.OpError):
        run(largest + 1)

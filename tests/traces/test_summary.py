"""The summary computed from the trace alone agrees with the live device's statistics."""
from __future__ import annotations

import pytest

from opsim.traces.loader import load_chrome
from opsim.traces.summary import summarize
from opsim.traces.trace import Trace
from trace_cases import registered_cases, run_case


def test_summary_from_the_trace_file_matches_the_live_device(mse_runs, tmp_path):
    res = mse_runs["instruction"]
    path = tmp_path / "t.json"
    res.trace.to_chrome_json(str(path))
    s = load_chrome(str(path)).summary()      # nothing but the file
    st = res.stats
    assert s.cycles == st["cycles"] and s.launches == 1
    assert s.time_us == pytest.approx(st["time_us"])
    assert s.pipe_busy() == {p: b for p, b in st["pipe_busy"].items() if b}
    assert s.bound == st["bound"] == "memory"
    assert s.bound_reason.startswith(st["bound_reason"].split(";")[0])
    assert s.ub_peak_bytes == st["ub_peak_bytes"]
    assert s.l2_hit_rate == pytest.approx(st["l2_hit_rate"])
    hbm = next(u for u in s.links if u.name == "HBM")
    # the counter carries the allocated rate; bytes integrate to what the link carried to <1%
    assert hbm.bytes == pytest.approx(st["links"]["HBM"]["bytes"], rel=0.01)
    assert hbm.peak_GBps == pytest.approx(st["links"]["HBM"]["peak_GBps"])
    assert 0 < hbm.utilisation < 1
    per_core = {(u.core, u.pipe): u.busy_cycles for u in s.pipes}
    for core, busy in st["per_core"].items():
        for pipe, b in busy.items():
            assert per_core.get((core, pipe), 0) == b


@pytest.mark.parametrize("name,device,dtype", registered_cases()[:6])
def test_registered_operators_get_the_same_bound_from_the_trace_as_from_the_device(name, device, dtype):
    res = run_case(name, device, dtype)
    s = res.trace.summary()
    assert (s.bound, s.cycles) == (res.stats["bound"], res.stats["cycles"])


def test_a_run_dominated_by_launch_overhead_is_launch_bound_from_the_trace_too():
    import numpy as np
    import opsim
    x = np.ones(64, np.float32)
    res = opsim.run("mse_loss_backward", grad_output=x, self=x, target=x, reduction="none",
                    device_overrides={"launch.overhead": 100000})
    s = res.trace.summary()
    assert s.bound == res.stats["bound"] == "launch"
    assert s.bound_reason.startswith("launch overhead 100000 of")


def test_tile_level_busy_is_an_upper_bound_and_says_so(mse_runs):
    s_tile, s_instr = mse_runs["tile"].trace.summary(), mse_runs["instruction"].trace.summary()
    busy_i = {(u.core, u.pipe): u.busy_cycles for u in s_instr.pipes}
    assert all(u.busy_cycles >= busy_i[(u.core, u.pipe)] for u in s_tile.pipes)
    assert any("upper bound" in n for n in s_tile.notes)
    s_launch = mse_runs["launch"].trace.summary()
    assert s_launch.bound == "unknown" and not s_launch.pipes


def test_launch_level_summary_takes_link_bytes_from_the_run_and_places_no_roofline(mse_runs, tmp_path):
    # a launch-level trace has no bandwidth counters, but its metadata holds each link's exact
    # bytes: the summary (and so the report) said HBM 0 B, 0 GB/s and a roofline of 0 ops at
    # infinite intensity while the op_summary of the same file gave the real bandwidth
    res = mse_runs["launch"]
    path = tmp_path / "launch.json"
    res.trace.to_chrome_json(str(path))
    s = load_chrome(str(path)).summary()
    for name, link in res.stats["links"].items():
        u = next(u for u in s.links if u.name == name)
        assert u.bytes == pytest.approx(link["bytes"]) and u.bytes > 0
        assert u.achieved_GBps == pytest.approx(link["achieved_GBps"], rel=1e-3)
        assert u.achieved_GBps <= u.max_GBps <= u.peak_GBps
    assert s.roofline is None
    text = s.table()
    assert "roofline" not in text and "inf" not in text


def test_summary_table_lists_pipes_links_and_the_bound(mse_runs):
    text = mse_runs["instruction"].trace.summary().table()
    for fragment in ("bound      memory: MTE2 busy", "core0.veccore0", "MTE2  VECTOR  MTE3",
                     "HBM", "1382.4", "UB peak", "local memory peak per core"):
        assert fragment in text


def test_roofline_point_lies_under_the_roof(mse_runs):
    r = mse_runs["instruction"].trace.summary().roofline
    assert r.dtype == "fp32" and r.unit == "vector element-ops"
    assert r.ops == 8192 * 3                        # Sub, Muls, Mul over every element
    # three loads from HBM; the store is taken by the write-back L2 (it fits), so it is L2 bytes
    assert r.gm_bytes == pytest.approx(8192 * 4 * 3, rel=1e-9)   # integrated from rate counters
    assert r.l2_bytes == pytest.approx(8192 * 4, rel=1e-9)
    assert 0 < r.ops_per_s <= r.roof(r.intensity)


def test_summary_of_a_synthetic_vector_bound_trace():
    tr = Trace("instruction", 1e9, metadata={"launch_overhead_cycles": 10})
    host = tr.track("host", "stream0")
    v = tr.track("core0.veccore0", "VECTOR")
    m = tr.track("core0.veccore0", "MTE2")
    tr.add_slice(m, "DataCopy", 10, 30, nbytes=64)
    tr.add_slice(v, "Exp", 30, 90, elements=16)
    tr.add_slice(host, "k", 0, 100)
    s = summarize(tr)
    assert s.bound == "vector" and "VECTOR busy 60 of 100 cycles (60%)" in s.bound_reason


@pytest.mark.parametrize("name,device,dtype", registered_cases())
def test_every_registered_operator_run_lies_under_its_roof(name, device, dtype):
    r = run_case(name, device, dtype).trace.summary().roofline
    assert r is not None and r.ops > 0 and r.peak_ops_per_s and r.peak_bytes_per_s
    assert r.ops_per_s <= r.roof(r.intensity) * (1 + 1e-9)


def test_cube_work_places_the_run_by_its_flops_against_the_cube_peak():
    tr = Trace("instruction", 1e9, metadata={"cube_cores": 2, "cube_macs_per_cycle": {"fp16": 4096},
                                              "vector_cores": 4, "vector_peak_elements_per_cycle": {"fp32": 64},
                                              "gm_link": "HBM", "link_capacity_GBps": {"HBM": 100.0}})
    tr.add_slice(tr.track("host", "stream0"), "k", 0, 1000)
    tr.add_slice(tr.track("core0.cubecore0", "MTE2"), "DataCopy", 0, 100, nbytes=8192)
    tr.add_slice(tr.track("core0.cubecore0", "CUBE"), "Mmad", 100, 200, elements=64 * 64 * 64,
                 detail="64x64x64 fp16 acc")
    tr.add_slice(tr.track("core0.veccore0", "VECTOR"), "Exp", 200, 300, elements=4096, detail="fp32")
    r = summarize(tr).roofline
    assert r.unit == "cube flops" and r.dtype == "fp16"
    assert r.ops == 2 * 64 ** 3 and r.gm_bytes == 8192
    assert r.peak_ops_per_s == 2 * 4096 * 2 * 1e9 and r.peak_bytes_per_s == 100e9
    assert r.ops_per_s == pytest.approx(2 * 64 ** 3 / 1e-6)


def test_a_dsp_trace_names_its_private_memory_not_a_ub():
    # a DSP core has no UB: the summary of an mt7004 run said "UB peak 196672 B" of its private memory
    import opsim
    n = 4096
    res = opsim.run("binarycrossentropygrad", device="mt7004", mode="timing",
                    input_x=opsim.TensorSpec((n,), "fp16"), input_y=opsim.TensorSpec((n,), "fp16"),
                    dloss=opsim.TensorSpec((1,), "fp16"))
    s = res.trace.summary()
    text = s.table()
    assert s.ub_peak_bytes and "UB" not in text
    assert f"local peak {s.ub_peak_bytes} B (DSP private memory)" in text

"""Every exported trace passes the schema; JSON -> Trace -> JSON is byte-identical."""
from __future__ import annotations

import copy
import json
import re

import pytest

from opsim.traces import chrome
from opsim.traces.loader import load_chrome
from opsim.traces.schema import check_chrome
from opsim.traces.trace import Trace
from trace_cases import dsp_add_trace, registered_cases, run_case

LEVELS = ("launch", "tile", "instruction")


@pytest.mark.parametrize("name,device,dtype", registered_cases())
def test_every_registered_operator_exports_a_trace_that_passes_the_schema(name, device, dtype):
    for level in LEVELS:
        res = run_case(name, device, dtype, level)
        doc = res.trace.to_chrome_json()
        assert check_chrome(doc) == [], (name, device, dtype, level)
        assert doc["otherData"]["operator"] == name and doc["otherData"]["device"] == device


@pytest.mark.parametrize("level", LEVELS)
def test_mse_traces_pass_the_schema_at_every_level(mse_runs, level):
    assert check_chrome(mse_runs[level].trace.to_chrome_json()) == []


def test_dsp_trace_has_one_process_per_dsp_core_with_a_dma_pipe_and_passes_the_schema():
    doc = dsp_add_trace().to_chrome_json()
    assert check_chrome(doc) == []
    names = _names(doc)
    assert {"dsp.core0", "dsp.core1", "dsp.core2", "dsp.core3", "host", "memory"} <= set(names["procs"])
    assert {"DMA", "VECTOR", "BLOCK"} <= set(names["threads"]["dsp.core3"])
    assert "DDR" in {e["name"] for e in doc["traceEvents"] if e["ph"] == "C"}


@pytest.mark.parametrize("level", LEVELS)
def test_round_trip_json_to_trace_to_json_is_byte_identical(mse_runs, tmp_path, level):
    first = tmp_path / "a.json"
    second = tmp_path / "b.json.gz"
    mse_runs[level].trace.to_chrome_json(str(first))
    loaded = load_chrome(str(first))
    loaded.to_chrome_json(str(second))
    again = load_chrome(str(second))
    assert chrome.dumps(again) == first.read_text()
    assert len(loaded) == len(mse_runs[level].trace)
    assert list(loaded.flows()) == list(mse_runs[level].trace.flows())
    assert list(loaded.counters()) == list(mse_runs[level].trace.counters())


def test_a_gzip_trace_written_twice_is_byte_identical(mse_runs, tmp_path, monkeypatch):
    # gzip's header once carried the write time: the same run gave different .json.gz bytes
    import time as _time
    path = tmp_path / "t.json.gz"
    mse_runs["instruction"].trace.to_chrome_json(str(path))
    first = path.read_bytes()
    monkeypatch.setattr(_time, "time", lambda: 2_000_000_000.0)    # a later "now"
    mse_runs["instruction"].trace.to_chrome_json(str(path))
    assert path.read_bytes() == first
    assert first[4:8] == b"\0\0\0\0"                             # MTIME field: none recorded


def test_round_trip_of_a_dsp_trace_is_identical():
    tr = dsp_add_trace("tile")
    text = chrome.dumps(tr)
    assert chrome.dumps(load_chrome(json.loads(text))) == text


def _names(doc):
    procs = {}
    threads: dict[str, list[str]] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            procs[e["pid"]] = e["args"]["name"]
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "thread_name":
            threads.setdefault(procs[e["pid"]], []).append(e["args"]["name"])
    return {"procs": list(procs.values()), "threads": threads, "pid": {v: k for k, v in procs.items()}}


def test_layout_is_the_vendor_one_host_first_cores_in_order_pipes_as_threads(mse_runs):
    doc = mse_runs["instruction"].trace.to_chrome_json()
    assert doc["displayTimeUnit"] == "ns" and doc["profilingType"] == "op"
    names = _names(doc)
    assert names["procs"] == ["host", "core0.veccore0", "core0.veccore1", "core1.veccore0",
                              "core1.veccore1", "memory"]
    assert names["threads"]["core0.veccore0"] == ["BLOCK", "MTE2", "VECTOR", "MTE3"]
    assert names["threads"]["host"] == ["stream0"]
    sort = {e["pid"]: e["args"]["sort_index"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == "process_sort_index"}
    assert [sort[names["pid"][p]] for p in names["procs"]] == sorted(sort.values())
    meta = doc["otherData"]
    assert meta["shapes"]["self"] == [8192] and meta["dtypes"]["self"] == "fp32"
    assert meta["opsim_version"] and meta["clock_hz"] == 1.8e9
    assert meta["link_capacity_GBps"]["HBM"] == pytest.approx(1382.4)


def test_instruction_slices_carry_instruction_dtype_elements_bytes_tile_and_address_range(mse_runs):
    doc = mse_runs["instruction"].trace.to_chrome_json()
    tid_name = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
                if e["ph"] == "M" and e["name"] == "thread_name"}
    loads = [e for e in doc["traceEvents"] if e["ph"] == "X" and tid_name[(e["pid"], e["tid"])] == "MTE2"]
    vec = [e for e in doc["traceEvents"] if e["ph"] == "X" and tid_name[(e["pid"], e["tid"])] == "VECTOR"]
    assert loads and vec
    a = loads[0]["args"]
    assert a["instruction"] == "DataCopyPad" and a["dtype"] == "fp32" and a["elements"] == 512
    assert a["bytes"] == 2048 and a["tile"] in range(4)
    lo, hi = (int(x, 16) for x in a["addr_range"].split("-"))
    assert hi - lo == 2048
    assert {e["name"] for e in vec} == {"Sub", "Muls", "Mul"}
    v = vec[0]["args"]
    lo, hi = (int(x, 16) for x in v["addr_range"].split("-"))
    assert hi - lo == 512 * 4 and v["cycles"] == round(v["cycles"])
    assert all(abs(e["dur"] * 1e3 - e["args"]["cycles"] / 1.8) <= 1.0 for e in vec)


def test_flag_hand_offs_are_flows_from_producer_pipe_to_consumer_pipe(mse_runs):
    tr = mse_runs["instruction"].trace
    doc = tr.to_chrome_json()
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f"}
    assert starts and starts.keys() == ends.keys()
    assert {e["name"] for e in starts.values()} == {"MTE2->VECTOR", "VECTOR->MTE3", "VECTOR->MTE2",
                                                    "MTE3->VECTOR"}
    for i, s in starts.items():
        assert ends[i]["ts"] >= s["ts"] and ends[i]["cat"] == s["cat"] == "sync"
    # at tile level the flows join tile slices
    tile = mse_runs["tile"].trace
    assert len(tile.f_from) > 0
    assert all(tile.s_track[a] != tile.s_track[b] for a, b, _ in tile.flows())


def test_counters_give_link_bandwidth_l2_hit_rate_and_ub_occupancy(mse_runs):
    res = mse_runs["instruction"]
    doc = res.trace.to_chrome_json()
    names = _names(doc)
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    by_proc: dict[str, set] = {}
    for e in counters:
        by_proc.setdefault({v: k for k, v in names["pid"].items()}[e["pid"]], set()).add(
            (e["name"], *e["args"]))
    assert {("HBM", "GB/s"), ("L2 hit rate", "%")} <= by_proc["memory"]
    assert ("UB", "bytes") in by_proc["core0.veccore0"]
    ub = [e["args"]["bytes"] for e in counters if e["name"] == "UB"]
    assert max(ub) == res.stats["ub_peak_bytes"]
    hbm = [e["args"]["GB/s"] for e in counters if e["name"] == "HBM"]
    assert 0 < max(hbm) <= 1382.4 and hbm[-1] == 0.0
    # launch level records no counters; tile level does
    assert not [e for e in mse_runs["launch"].trace.to_chrome_json()["traceEvents"] if e["ph"] == "C"]
    assert [e for e in mse_runs["tile"].trace.to_chrome_json()["traceEvents"] if e["ph"] == "C"]


def test_overlapping_work_on_one_pipe_is_split_into_sub_lanes():
    tr = Trace("instruction", 1e9, metadata={"device": "x", "operator": "y", "shapes": {},
                                              "dtypes": {}, "opsim_version": "t"})
    t = tr.track("core0.cubecore0", "MTE1")
    tr.add_slice(t, "LoadData", 0, 100)
    tr.add_slice(t, "LoadData", 50, 150)     # overlaps the first
    tr.add_slice(t, "LoadData", 100, 120)    # fits after the first on lane 0
    doc = tr.to_chrome_json()
    assert check_chrome(doc) == []
    threads = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    lanes = [threads[e["tid"]] for e in doc["traceEvents"] if e["ph"] == "X"]
    assert lanes == ["MTE1", "MTE1#1", "MTE1"]
    assert chrome.dumps(load_chrome(doc)) == chrome.dumps(tr)


# -- the schema check itself catches what it is meant to catch --------------------------------

def _mutated(doc, fn):
    d = copy.deepcopy(doc)
    fn(d["traceEvents"], d)
    return check_chrome(d)


def _first(events, ph, thread=None):
    return next(e for e in events if e["ph"] == ph)


def test_schema_check_reports_each_kind_of_broken_trace(mse_runs):
    doc = mse_runs["instruction"].trace.to_chrome_json()
    assert check_chrome(doc) == []
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]

    def overlap(ev, d):
        rows = {}
        for e in ev:
            if e["ph"] == "X":
                rows.setdefault((e["pid"], e["tid"]), []).append(e)
        row = next(r for r in rows.values() if len(r) > 1)
        row[1]["ts"] = row[0]["ts"] + row[0]["dur"] / 2
    cases = {
        "no tid": lambda ev, d: _first(ev, "X").pop("tid"),
        "negative dur": lambda ev, d: _first(ev, "X").update(dur=-0.001),
        "overlapping": overlap,
        "flow without end": lambda ev, d: ev.remove(_first(ev, "f")),
        "negative counter": lambda ev, d: _first(ev, "C")["args"].update({"GB/s": -1.0}),
        "outside the run": lambda ev, d: _first(ev, "C").update(ts=1e6),
        "unnamed process": lambda ev, d: ev.append({**xs[0], "pid": 999}),
        "not the vendor name": lambda ev, d: _first(ev, "M").update(args={"name": "aicore0"}),
        "display unit": lambda ev, d: d.update(displayTimeUnit="ms"),
        "no metadata": lambda ev, d: d["otherData"].pop("operator"),
    }
    expected = {"no tid": "has no tid", "negative dur": "dur", "overlapping": "overlapping",
                "flow without end": "never ends", "negative counter": ">= 0",
                "outside the run": "outside the run", "unnamed process": "no process_name",
                "not the vendor name": "not coreN", "display unit": "displayTimeUnit",
                "no metadata": "operator"}
    for what, fn in cases.items():
        problems = _mutated(doc, fn)
        assert problems and any(re.search(re.escape(expected[what]), p) for p in problems), (what, problems)

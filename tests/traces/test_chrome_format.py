"""The Chrome trace-event JSON users open, read by an independent validator of the Trace Event
Format (not opsim's loader or traces/schema.py): phases, µs times, pid/tid, M metadata names and
sort order, C counters, s/f flows and what they bind to; the slices against the run's own
profile tables; .json and .json.gz; `opsim trace convert` round trips; determinism."""
from __future__ import annotations

import collections
import contextlib
import gzip
import io
import json
import math

import pytest

from opsim.cli import main as cli_main
from viewer_cases import CASES, LEVELS, PIPE_ORDER, cached_run, case_id, process_rank, profile_counts, \
    run, thread_rank

PHASES = {"X", "M", "C", "s", "f"}          # the phases this exporter is documented to write
METADATA = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}


def _ns(us: float) -> int:
    return int(math.floor(us * 1000 + 0.5))


def read_chrome(doc: dict) -> tuple[list[str], dict]:
    """Validate ``doc`` against the Trace Event Format rules; return (problems, a model of what a
    viewer shows: rows in display order, slices per row, counters, flows bound to slices)."""
    problems: list[str] = []
    if not isinstance(doc.get("traceEvents"), list):
        return ["no traceEvents array"], {}
    if doc.get("displayTimeUnit") not in ("ms", "ns"):
        problems.append(f"displayTimeUnit {doc.get('displayTimeUnit')!r} is neither 'ms' nor 'ns'")
    pname: dict[int, str] = {}
    psort: dict[int, int] = {}
    tname: dict[tuple[int, int], str] = {}
    tsort: dict[tuple[int, int], int] = {}
    for i, e in enumerate(doc["traceEvents"]):
        if e.get("ph") not in PHASES:
            problems.append(f"event {i}: phase {e.get('ph')!r}")
            continue
        if not all(type(e.get(k)) is int for k in ("pid", "tid")):
            problems.append(f"event {i}: pid/tid not integers: {e.get('pid')!r}/{e.get('tid')!r}")
        if e["ph"] == "M":
            if e.get("name") not in METADATA or not isinstance(e.get("args"), dict):
                problems.append(f"event {i}: metadata {e.get('name')!r} {e.get('args')!r}")
                continue
            key, a = (e["pid"], e["tid"]), e["args"]
            if e["name"] == "process_name":
                pname[e["pid"]] = a["name"]
            elif e["name"] == "process_sort_index":
                psort[e["pid"]] = a["sort_index"]
            elif e["name"] == "thread_name":
                tname[key] = a["name"]
            else:
                tsort[key] = a["sort_index"]
        elif not (isinstance(e.get("ts"), (int, float)) and math.isfinite(e["ts"]) and e["ts"] >= 0):
            problems.append(f"event {i}: ts {e.get('ts')!r} is not a finite time in µs")
    rows: dict[tuple[int, int], list[dict]] = collections.defaultdict(list)
    slices: list[dict] = []
    counters: dict[tuple[str, str], list[tuple[float, float]]] = collections.defaultdict(list)
    flow_ends: dict[str, dict] = {}
    for i, e in enumerate(doc["traceEvents"]):
        ph = e.get("ph")
        if ph in ("M", None) or ph not in PHASES:
            continue
        if e["pid"] not in pname:
            problems.append(f"event {i}: pid {e['pid']} has no process_name")
        if ph == "X":
            if not (isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0):
                problems.append(f"event {i}: dur {e.get('dur')!r}")
            if (e["pid"], e["tid"]) not in tname:
                problems.append(f"event {i}: tid {e['tid']} has no thread_name")
            e = dict(e, _index=len(slices), _t0=_ns(e["ts"]), _t1=_ns(e["ts"]) + _ns(e["dur"]))
            slices.append(e)
            rows[(e["pid"], e["tid"])].append(e)
        elif ph == "C":
            if not e.get("args") or not all(isinstance(v, (int, float)) and math.isfinite(v)
                                            for v in e["args"].values()):
                problems.append(f"event {i}: counter args {e.get('args')!r}")
            for key, v in e["args"].items():
                # viewers name the series "<name> <key>" within the process
                counters[(pname.get(e["pid"], "?"), f"{e['name']} {key}")].append((e["ts"], v))
        else:
            if "id" not in e or "cat" not in e:
                problems.append(f"event {i}: flow without id/cat")
            ident = f"{e.get('cat')}:{e.get('id')}"
            flow_ends.setdefault(ident, {})
            if ph in flow_ends[ident]:
                problems.append(f"flow {ident} has two {ph!r} events")
            flow_ends[ident][ph] = e
    flows = {}
    for ident, ends in flow_ends.items():
        if set(ends) != {"s", "f"}:
            problems.append(f"flow {ident} has only {sorted(ends)}")
            continue
        if ends["f"].get("bp") != "e":
            problems.append(f"flow {ident}: its 'f' does not bind to the enclosing slice (bp 'e')")
        bound = []
        for ph in ("s", "f"):
            e = ends[ph]
            t = _ns(e["ts"])
            # the enclosing slice; at a shared boundary the slice that starts there (as the
            # viewers' sorted, stable import opens it before the flow event of the same time)
            around = [s for s in rows[(e["pid"], e["tid"])] if s["_t0"] <= t <= s["_t1"]]
            around.sort(key=lambda s: (s["_t0"] != t or s["_t1"] == t, -s["_t0"]))
            if not around:
                problems.append(f"flow {ident}: its {ph!r} at {t} ns lies in no slice of its row")
                break
            bound.append(around[0])
        else:
            flows[ident] = tuple(bound)
    order = sorted(pname, key=lambda p: psort.get(p, 1 << 30))
    model = {"processes": [pname[p] for p in order], "psort": psort, "tsort": tsort,
             "threads": {pname[p]: [tname[k] for k in sorted((k for k in tname if k[0] == p),
                                                             key=lambda k: tsort.get(k, 1 << 30))]
                         for p in order},
             "rows": {(pname.get(k[0]), tname.get(k)): v for k, v in rows.items()},
             "slices": slices, "counters": dict(counters), "flows": flows,
             "other": doc.get("otherData") or {}}
    if set(psort) != set(pname):
        problems.append("a process has no process_sort_index")
    if set(tsort) != set(tname):
        problems.append("a thread has no thread_sort_index")
    return problems, model


def _lanes_of(model: dict, core: str, pipe: str) -> list[list[dict]]:
    return [v for (p, t), v in model["rows"].items() if p == core and t.partition("#")[0] == pipe]


@pytest.fixture(scope="module", params=[(*c, lvl) for c in CASES for lvl in LEVELS],
                ids=lambda p: f"{case_id(p[:3])}-{p[3]}")
def exported(request, tmp_path_factory):
    res = cached_run(*request.param)
    d = tmp_path_factory.mktemp("chrome")
    res.trace.to_chrome_json(str(d / "t.json"))
    res.trace.to_chrome_json(str(d / "t.json.gz"))
    with open(d / "t.json", encoding="utf-8") as fh:
        doc = json.load(fh)
    return request.param, res, d, doc


def test_the_file_follows_the_trace_event_format_and_the_documented_row_order(exported):
    (op, _, _, level), res, _, doc = exported
    problems, model = read_chrome(doc)
    assert problems == []
    assert model["processes"] == sorted(model["processes"], key=process_rank)
    for proc, threads in model["threads"].items():
        assert threads == sorted(threads, key=thread_rank), proc
        assert all(t and t.isprintable() for t in threads)
    # every core the run used has its BLOCK row, and (below launch level) a row per pipe it busied
    calls, _ = profile_counts(res)
    for core, pipe in calls:
        assert "BLOCK" in model["threads"][core]
        if level != "launch":
            assert _lanes_of(model, core, pipe), (core, pipe)


def test_slices_are_the_runs_instructions_at_cycles_over_the_clock(exported):
    (_, _, _, level), res, _, doc = exported
    _, model = read_chrome(doc)
    clock = model["other"]["clock_hz"]
    assert clock == res.trace.clock_hz
    for s in model["slices"]:
        a = s["args"]
        # ts/dur are µs: cycles / clock, on the whole-ns grid the exporter promises
        assert abs(s["ts"] - a["start_cycle"] / clock * 1e6) <= 0.0005 + 1e-12
        assert abs(s["ts"] + s["dur"] - (a["start_cycle"] + a["cycles"]) / clock * 1e6) <= 0.0005 + 1e-12
    if level != "instruction":
        return
    calls, cycles = profile_counts(res)
    got_calls: dict = collections.Counter()
    got_cycles: dict = collections.Counter()
    for (core, thread), row in model["rows"].items():
        pipe = thread.partition("#")[0]
        if pipe in PIPE_ORDER:
            got_calls[(core, pipe)] += len(row)
            for s in row:
                got_cycles[(core, pipe, s["name"])] += s["args"]["cycles"]
    assert dict(got_calls) == calls
    assert dict(got_cycles) == cycles


def test_no_pipe_row_has_negative_or_overlapping_slices(exported):
    _, _, _, doc = exported
    _, model = read_chrome(doc)
    for (core, thread), row in model["rows"].items():
        spans = sorted((s["_t0"], s["_t1"]) for s in row)
        assert all(b >= a for a, b in spans)
        assert all(n0 >= p1 for (_, p1), (n0, _) in zip(spans, spans[1:])), (core, thread)


def test_flows_bind_to_the_slices_they_name_and_run_forward_in_time(exported):
    _, _, _, doc = exported
    _, model = read_chrome(doc)
    ends = {(e["ph"], f"{e['cat']}:{e['id']}"): e for e in doc["traceEvents"] if e["ph"] in "sf"}
    assert len(model["flows"]) * 2 == len(ends)
    for ident, (producer, consumer) in model["flows"].items():
        # the viewer binds each end to the slice the exporter meant (its args.slice)
        assert producer["_index"] == ends[("s", ident)]["args"]["slice"]
        assert consumer["_index"] == ends[("f", ident)]["args"]["slice"]
        # a flag hand-off: the waiting pipe's slice starts once the setting pipe's slice is done
        a, b = producer["args"], consumer["args"]
        assert a["start_cycle"] + a["cycles"] <= b["start_cycle"], (producer["name"], consumer["name"])


def test_counters_stay_within_their_peak(exported):
    (_, _, _, level), res, _, doc = exported
    _, model = read_chrome(doc)
    other = model["other"]
    for (proc, series), points in model["counters"].items():
        values = [v for _, v in points]
        assert all(v >= 0 for v in values)
        assert [t for t, _ in points] == sorted(t for t, _ in points), series
        if series.endswith(" GB/s"):
            assert proc == "memory"
            assert max(values) <= other["link_capacity_GBps"][series[:-5]] * (1 + 1e-12), series
        elif series == "UB bytes":
            assert max(values) <= other["local_memory_bytes"], proc
    if level != "launch":
        assert any(s.endswith(" GB/s") for _, s in model["counters"])


def test_json_and_gzip_hold_the_same_events(exported):
    _, _, d, doc = exported
    with gzip.open(d / "t.json.gz", "rt", encoding="utf-8") as fh:
        assert json.load(fh) == doc


def _convert(src, dst) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli_main(["trace", "convert", str(src), "-o", str(dst)]) == 0


def test_trace_convert_between_json_and_gzip_loses_nothing(exported):
    _, _, d, doc = exported
    for src, dst in (("t.json", "c.json.gz"), ("t.json.gz", "c.json"), ("c.json.gz", "c2.json")):
        _convert(d / src, d / dst)
        opener = gzip.open if dst.endswith(".gz") else open
        with opener(d / dst, "rt", encoding="utf-8") as fh:
            assert json.load(fh) == doc, dst


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_two_identical_runs_write_byte_identical_files(case, tmp_path):
    pytest.importorskip("perfetto", reason="the optional 'perfetto' extra is not installed")
    level = "instruction"
    a, b = run(*case, level).trace, run(*case, level).trace
    for name in ("t.json", "t.json.gz", "t.pftrace"):
        for k, tr in enumerate((a, b)):
            (tmp_path / str(k)).mkdir(exist_ok=True)
            path = str(tmp_path / str(k) / name)
            tr.to_perfetto(path) if name.endswith(".pftrace") else tr.to_chrome_json(path)
        assert (tmp_path / "0" / name).read_bytes() == (tmp_path / "1" / name).read_bytes(), name


def test_a_gzip_trace_does_not_depend_on_its_file_name(mse_runs, tmp_path):
    # the gzip header may carry the file name and a time: neither belongs in a reproducible trace
    tr = mse_runs["instruction"].trace
    tr.to_chrome_json(str(tmp_path / "a.json.gz"))
    tr.to_chrome_json(str(tmp_path / "other-name.json.gz"))
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "other-name.json.gz").read_bytes()

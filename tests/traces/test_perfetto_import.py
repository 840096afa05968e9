"""The Perfetto protobuf users open, read the way trace processor imports it (not with opsim's
code): packets on one trusted sequence, interned names resolved through incremental state, track
descriptors before their events, slices nesting per track, counters only on counter tracks, flows
by id. Compared with the run (its instr_exe table, its cycles and clock) and with the Chrome JSON
of the same run, at every level, for every operator in full and timing mode and an opsim.asc
kernel. With a trace_processor binary (``OPSIM_TRACE_PROCESSOR``: its path) the same trace is
also loaded by Perfetto's own TraceProcessor and checked with SQL; nothing is downloaded."""
from __future__ import annotations

import collections
import contextlib
import io
import json
import os

import pytest

pytest.importorskip("perfetto", reason="the optional 'perfetto' extra is not installed")
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace as ProtoTrace  # noqa: E402

from opsim.cli import main as cli_main  # noqa: E402
from opsim.traces.trace import Trace  # noqa: E402
from viewer_cases import CASES, LEVELS, PIPE_ORDER, cached_run, case_id, process_rank, profile_counts, \
    thread_rank  # noqa: E402

BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4
CLEARED, NEEDS_STATE = 1, 2


def import_pftrace(data: bytes) -> tuple[list[str], dict]:
    """(errors an importer would report, the imported tables)."""
    errors: list[str] = []
    tracks: dict[int, object] = {}
    names: dict[int, str] = {}
    ann_names: dict[int, str] = {}
    state_valid = False
    slices: list[dict] = []
    open_on: dict[int, list[dict]] = collections.defaultdict(list)
    counters: dict[int, list[tuple[int, float]]] = collections.defaultdict(list)
    flow_out: dict[int, dict] = {}
    flows: list[tuple[dict, dict]] = []
    last_ts = 0
    for k, p in enumerate(ProtoTrace.FromString(data).packet):
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            if td.uuid in tracks:
                errors.append(f"packet {k}: track {td.uuid} described twice")
            if td.parent_uuid and td.parent_uuid not in tracks:
                errors.append(f"packet {k}: track {td.uuid} has an unknown parent {td.parent_uuid}")
            tracks[td.uuid] = td
            continue
        if p.sequence_flags & CLEARED:
            state_valid, names, ann_names = True, {}, {}
        if p.HasField("interned_data"):
            if not p.trusted_packet_sequence_id:
                errors.append(f"packet {k}: interned data off any sequence")
            names.update({n.iid: n.name for n in p.interned_data.event_names})
            ann_names.update({n.iid: n.name for n in p.interned_data.debug_annotation_names})
        if not p.HasField("track_event"):
            continue
        ev, ts = p.track_event, p.timestamp
        if not p.trusted_packet_sequence_id:
            errors.append(f"packet {k}: track event without a trusted sequence id")
        if ts < last_ts:
            errors.append(f"packet {k}: time goes back ({ts} < {last_ts})")
        last_ts = ts
        td = tracks.get(ev.track_uuid)
        if td is None:
            errors.append(f"packet {k}: event on track {ev.track_uuid} before its descriptor")
            continue
        is_counter = td.HasField("counter")
        if ev.type == COUNTER:
            if not is_counter:
                errors.append(f"packet {k}: counter value on {td.name!r}, which is not a counter track")
            counters[ev.track_uuid].append((ts, ev.double_counter_value))
            continue
        if is_counter:
            errors.append(f"packet {k}: a slice event on the counter track {td.name!r}")
        if ev.type == END:
            stack = open_on[ev.track_uuid]
            if not stack:
                errors.append(f"packet {k}: slice end without a begin on {ev.track_uuid}")
                continue
            s = stack.pop()
            s["dur"] = ts - s["ts"]
            continue
        if ev.name_iid:
            if not (p.sequence_flags & NEEDS_STATE) or not state_valid or ev.name_iid not in names:
                errors.append(f"packet {k}: name iid {ev.name_iid} cannot be resolved")
            name = names.get(ev.name_iid, "")
        else:
            name = ev.name
        args = {}
        for a in ev.debug_annotations:
            key = ann_names.get(a.name_iid, "") if a.name_iid else a.name
            if not key:
                errors.append(f"packet {k}: annotation name iid {a.name_iid} cannot be resolved")
            args[key] = getattr(a, a.WhichOneof("value"))
        s = {"track": ev.track_uuid, "name": name, "ts": ts, "dur": None, "args": args,
             "depth": len(open_on[ev.track_uuid])}
        if ev.type == BEGIN:
            open_on[ev.track_uuid].append(s)
        slices.append(s)
        for f in ev.terminating_flow_ids:
            if f not in flow_out:
                errors.append(f"packet {k}: flow {f} ends before it starts")
            else:
                flows.append((flow_out.pop(f), s))
        for f in ev.flow_ids:
            if f in flow_out:
                errors.append(f"packet {k}: flow {f} started twice")
            flow_out[f] = s
    errors += [f"slice {s['name']!r} never ends" for st in open_on.values() for s in st]
    errors += [f"flow {f} never ends" for f in flow_out]

    def row_of(uuid: int) -> tuple[str, str]:
        td = tracks[uuid]
        if td.HasField("thread"):
            return tracks[td.parent_uuid].process.process_name, td.thread.thread_name
        parent = tracks.get(td.parent_uuid)
        return (parent.process.process_name if parent is not None else ""), td.name
    return errors, {"tracks": tracks, "row_of": row_of, "slices": [s for s in slices if s["dur"] is not None],
                    "instants": [s for s in slices if s["dur"] is None], "counters": counters, "flows": flows}


@pytest.fixture(scope="module", params=[(*c, lvl) for c in CASES for lvl in LEVELS],
                ids=lambda p: f"{case_id(p[:3])}-{p[3]}")
def imported(request):
    res = cached_run(*request.param)
    errors, model = import_pftrace(res.trace.to_perfetto())
    return request.param, res, errors, model


def test_the_protobuf_imports_without_errors(imported):
    _, _, errors, _ = imported
    assert errors == []


def test_every_core_and_pipe_has_a_named_track_ordered_as_documented(imported):
    (_, _, _, level), res, _, model = imported
    tracks = model["tracks"]
    procs = sorted((td for td in tracks.values() if td.HasField("process")), key=lambda td: td.process.pid)
    order = [td.process.process_name for td in sorted(procs, key=lambda td: td.process.legacy_sort_index)]
    assert order == sorted(order, key=process_rank)
    for pt in procs:
        threads = sorted((td for td in tracks.values() if td.HasField("thread") and td.parent_uuid == pt.uuid),
                         key=lambda td: td.thread.legacy_sort_index)
        rows = [td.thread.thread_name for td in threads]
        assert rows == sorted(rows, key=thread_rank) and all(r.isprintable() and r for r in rows)
        assert all(td.thread.pid == pt.process.pid for td in threads)
    rows = {model["row_of"](u) for u, td in tracks.items() if td.HasField("thread")}
    calls, _ = profile_counts(res)
    for core, pipe in calls:
        assert (core, "BLOCK") in rows
        if level != "launch":
            assert (core, pipe) in rows


def test_slices_match_the_run_and_its_json(imported):
    (_, _, _, level), res, _, model = imported
    tr = res.trace
    json_slices = [e for e in tr.to_chrome_json()["traceEvents"] if e["ph"] == "X"]
    assert len(model["slices"]) == len(json_slices) == len(tr)
    # the same slices at the same whole-ns times: cycles / clock, rounded to the ns
    # the same slices on the same rows at the same times: cycles / clock, rounded to whole ns
    got = sorted((*model["row_of"](s["track"]), s["name"], s["ts"], s["dur"]) for s in model["slices"])
    pids = {e["pid"]: e["args"]["name"] for e in tr.to_chrome_json()["traceEvents"]
            if e["ph"] == "M" and e["name"] == "process_name"}
    tids = {(e["pid"], e["tid"]): e["args"]["name"] for e in tr.to_chrome_json()["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}
    want = []
    for e in json_slices:
        a = e["args"]
        t0 = round(a["start_cycle"] * 1e9 / tr.clock_hz)
        t1 = round((a["start_cycle"] + a["cycles"]) * 1e9 / tr.clock_hz)
        want.append((pids[e["pid"]], tids[(e["pid"], e["tid"])], e["name"], t0, t1 - t0))
    assert got == sorted(want)
    assert all(s["dur"] >= 0 and s["depth"] == 0 for s in model["slices"])
    if level == "instruction":
        calls, _ = profile_counts(res)
        per_pipe: dict = collections.Counter()
        for s in model["slices"]:
            core, thread = model["row_of"](s["track"])
            if thread.partition("#")[0] in PIPE_ORDER:
                per_pipe[(core, thread.partition("#")[0])] += 1
        assert dict(per_pipe) == calls


def test_annotations_say_what_they_hold(imported):
    _, _, _, model = imported
    dtypes = {"fp32", "fp16", "bf16", "fp64", "int8", "uint8", "int16", "int32", "int64", "bool"}
    for s in model["slices"]:
        dt = s["args"].get("dtype")
        if dt is not None:
            # a dtype, or a Cast's source->destination dtypes
            assert set(dt.split("->")) <= dtypes, (s["name"], dt)


def test_counters_are_on_counter_tracks_within_their_peak(imported):
    (_, _, _, level), res, _, model = imported
    meta = res.trace.metadata
    for uuid, points in model["counters"].items():
        proc, series = model["row_of"](uuid)
        values = [v for _, v in points]
        assert min(values) >= 0
        if series.endswith(" GB/s"):
            assert proc == "memory" and max(values) <= meta["link_capacity_GBps"][series[:-5]] * (1 + 1e-12)
        if series == "UB bytes":
            assert max(values) <= meta["local_memory_bytes"]
    assert sum(len(p) for p in model["counters"].values()) == len(res.trace.c_track)


def test_flows_connect_the_producer_to_the_consumer(imported):
    _, res, _, model = imported
    tr = res.trace
    assert len(model["flows"]) == len(tr.f_from)
    key = lambda s: (model["row_of"](s["track"]), s["name"], s["ts"])   # noqa: E731
    got = sorted((key(a), key(b)) for a, b in model["flows"])
    ns = lambda c: round(c * 1e9 / tr.clock_hz)   # noqa: E731
    want = sorted((((tr.track_names(tr.s_track[a])), tr.string(tr.s_name[a]), ns(tr.s_start[a])),
                   ((tr.track_names(tr.s_track[b])), tr.string(tr.s_name[b]), ns(tr.s_start[b])))
                  for a, b, _ in tr.flows())
    assert got == want
    for a, b in model["flows"]:
        assert a["ts"] + a["dur"] <= b["ts"]


def test_a_counter_series_without_a_unit_is_still_a_counter_track():
    tr = Trace("tile", 1e9)
    tr.add_slice(tr.track("core0.veccore0", "VECTOR"), "Add", 0, 10)
    tr.add_counter("memory", "outstanding", 0, 2.0)     # no unit: the series name alone
    tr.add_counter("memory", "outstanding", 5, 0.0)
    errors, model = import_pftrace(tr.to_perfetto())
    assert errors == []
    assert [v for _, v in next(iter(model["counters"].values()))] == [2.0, 0.0]


def test_convert_from_json_gives_the_same_protobuf_content(tmp_path):
    res = cached_run("fused_linear_cross_entropy_loss_grad", "atlas-a2", "full", "instruction")
    res.trace.to_chrome_json(str(tmp_path / "t.json"))
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli_main(["trace", "convert", str(tmp_path / "t.json"), "-o", str(tmp_path / "t.pftrace")]) == 0
    direct = import_pftrace(res.trace.to_perfetto())[1]
    converted = import_pftrace((tmp_path / "t.pftrace").read_bytes())[1]

    def content(m):
        return (sorted((m["row_of"](s["track"]), s["name"], s["ts"], s["dur"], sorted(s["args"].items()))
                       for s in m["slices"]),
                sorted((m["row_of"](u), p) for u, p in m["counters"].items()),
                sorted(((m["row_of"](a["track"]), a["ts"]), (m["row_of"](b["track"]), b["ts"]))
                       for a, b in m["flows"]))
    assert content(converted) == content(direct)


# -- Perfetto's own trace processor, when a binary is at hand (never downloaded here) ------------

def _trace_processor_binary() -> str | None:
    path = os.environ.get("OPSIM_TRACE_PROCESSOR")
    return path if path and os.path.isfile(path) else None


@pytest.mark.skipif(_trace_processor_binary() is None,
                    reason="set OPSIM_TRACE_PROCESSOR to a trace_processor_shell binary to load traces "
                           "with Perfetto's own importer")
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_perfetto_trace_processor_loads_the_trace_as_the_run_says(case, tmp_path):
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig
    res = cached_run(*case, "instruction")
    path = tmp_path / "t.pftrace"
    res.trace.to_perfetto(str(path))
    calls, _ = profile_counts(res)
    config = TraceProcessorConfig(bin_path=_trace_processor_binary())
    with TraceProcessor(trace=str(path), config=config) as tp:
        bad = tp.query("SELECT name, idx, severity, value FROM stats "
                       "WHERE severity != 'info' AND value > 0").as_pandas_dataframe()
        assert bad.empty, bad.to_string()
        rows = tp.query("SELECT p.name AS core, t.name AS pipe, COUNT(s.id) AS n FROM slice s "
                        "JOIN thread_track tt ON s.track_id = tt.id JOIN thread t USING (utid) "
                        "JOIN process p USING (upid) GROUP BY p.name, t.name").as_pandas_dataframe()
        got = {(r.core, r.pipe): int(r.n) for r in rows.itertuples() if r.pipe in PIPE_ORDER}
        assert got == calls
        n_flows = tp.query("SELECT COUNT(*) AS n FROM flow").as_pandas_dataframe()["n"][0]
        assert int(n_flows) == len(res.trace.f_from)
        n_points = tp.query("SELECT COUNT(*) AS n FROM counter").as_pandas_dataframe()["n"][0]
        assert int(n_points) == len(res.trace.c_track)


def test_opsim_run_trace_writes_the_format_its_file_name_asks_for(tmp_path):
    common = ["run", "mse_loss_backward", "--device", "atlas-a2", "--shape", "2048", "--dtype", "fp32"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli_main([*common, "--trace", str(tmp_path / "t.pftrace")]) == 0
        assert cli_main([*common, "--trace", str(tmp_path / "t.json")]) == 0
    data = (tmp_path / "t.pftrace").read_bytes()
    assert not data.lstrip().startswith(b"{")          # not JSON under a protobuf name
    errors, model = import_pftrace(data)
    assert errors == [] and model["slices"]
    with open(tmp_path / "t.json", encoding="utf-8") as fh:
        assert len(model["slices"]) == sum(e["ph"] == "X" for e in json.load(fh)["traceEvents"])

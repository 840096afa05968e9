"""Perfetto protobuf export (runs when the optional `perfetto` package is installed)."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("perfetto", reason="the optional 'perfetto' extra is not installed")
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace as ProtoTrace  # noqa: E402

from opsim.traces.layout import PIPES  # noqa: E402
from trace_cases import dsp_add_trace  # noqa: E402

BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4


def _parse(data: bytes):
    pt = ProtoTrace.FromString(data)
    tracks, names, events = {}, {}, []
    for p in pt.packet:
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            tracks[td.uuid] = td
        if p.HasField("interned_data"):
            names.update({n.iid: n.name for n in p.interned_data.event_names})
        if p.HasField("track_event"):
            events.append((p.timestamp, p.track_event))
    return tracks, names, events


def test_protobuf_has_the_same_rows_slices_flows_and_counters_as_the_trace(mse_runs, tmp_path):
    tr = mse_runs["instruction"].trace
    path = tmp_path / "t.pftrace"
    data = tr.to_perfetto(str(path))
    assert path.read_bytes() == data
    tracks, names, events = _parse(data)
    procs = {td.process.process_name for td in tracks.values() if td.HasField("process")}
    assert procs == {"host", "core0.veccore0", "core0.veccore1", "core1.veccore0", "core1.veccore1", "memory"}
    threads = {td.thread.thread_name for td in tracks.values() if td.HasField("thread")}
    assert threads == {"stream0", "BLOCK", "MTE2", "VECTOR", "MTE3"}
    begins = [e for _, e in events if e.type == BEGIN]
    ends = [e for _, e in events if e.type == END]
    assert len(begins) == len(ends) == len(tr)
    assert sorted(names[e.name_iid] for e in begins) == sorted(s.name for s in tr.slices())
    assert sum(1 for _, e in events if e.type == COUNTER) == len(tr.c_track)
    out = [f for e in begins for f in e.flow_ids]
    inn = [f for e in begins for f in e.terminating_flow_ids]
    assert sorted(out) == sorted(inn) == list(range(1, len(tr.f_from) + 1))
    meta = next(e for _, e in events if e.type == INSTANT)
    got = {a.name: a.string_value for a in meta.debug_annotations}
    assert json.loads(got["shapes"]) == tr.metadata["shapes"] and got["operator"] == "mse_loss_backward"


def test_protobuf_slices_nest_strictly_on_every_track_in_packet_order(mse_runs):
    tr = mse_runs["instruction"].trace
    tracks, _, events = _parse(tr.to_perfetto())
    last_ts = -1
    open_on: dict[int, int] = {}
    for ts, e in events:
        assert ts >= last_ts          # packets are written in time order
        last_ts = ts
        if e.type == BEGIN:
            assert e.track_uuid not in open_on, "a slice began before the previous one ended"
            open_on[e.track_uuid] = ts
        elif e.type == END:
            assert open_on.pop(e.track_uuid) <= ts
    assert not open_on
    pipe_tracks = [td for td in tracks.values() if td.HasField("thread") and td.thread.thread_name in PIPES]
    assert pipe_tracks and all(td.parent_uuid in tracks for td in pipe_tracks)


def test_dsp_trace_exports_to_protobuf_with_dma_rows():
    tracks, _, events = _parse(dsp_add_trace("tile").to_perfetto())
    rows = {(tracks[td.parent_uuid].process.process_name, td.thread.thread_name)
            for td in tracks.values() if td.HasField("thread")}
    assert ("dsp.core2", "DMA") in rows and ("dsp.core2", "VECTOR") in rows
    assert any(e.type == COUNTER for _, e in events)

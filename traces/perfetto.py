"""Perfetto TrackEvent protobuf export, for traces too large for JSON viewers.

Same rows as the JSON export (:mod:`traces.layout`): a process track per core with its
``process_name`` and sort index, a thread track per pipe (sub-lanes ``PIPE#k`` where work
overlaps), a ``host`` process with a thread per stream, counter tracks (link GB/s, L2 hit
rate, UB bytes) under their process. Slices are ``SLICE_BEGIN``/``SLICE_END`` pairs with interned
names and a few debug annotations (elements, bytes, tile, dtype, address, detail); flag
hand-offs are flows (``flow_ids`` on the producer slice, ``terminating_flow_ids`` on the consumer).
The run's metadata rides on one instant event of an ``opsim`` track.

Needs the ``perfetto`` package (optional extra ``opsim[perfetto]``); it is pure Python and writes
the file offline with its ``TraceProtoBuilder``.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from opsim.traces.chrome import split_detail, split_series
from opsim.traces.layout import PIPES, layout
from opsim.traces.trace import Trace

SEQ_ID = 1
SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2
TYPE_SLICE_BEGIN = 1
TYPE_SLICE_END = 2
TYPE_INSTANT = 3
TYPE_COUNTER = 4
_PROCESS_UUID = 1 << 40
_COUNTER_UUID = 2 << 40
_META_UUID = 3 << 40
# per-slice arguments (exact cycles are left to the JSON export: the protobuf is the lean format);
# a slice's detail splits as in the JSON: the dtype(s) of a pipe instruction under ``dtype``, the
# rest (a Cast's rounding, ``atomic add``, a launch's ``block_dim=…``) under ``detail``
_ANNOTATIONS = ("elements", "bytes", "tile", "dtype", "addr", "detail")


def builder_class() -> Any:
    try:
        from perfetto.trace_builder.proto_builder import TraceProtoBuilder
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError("Perfetto protobuf export needs the 'perfetto' package "
                          "(pip install 'opsim[perfetto]')") from exc
    return TraceProtoBuilder


def to_perfetto(trace: Trace, path: str | None = None) -> bytes:
    """Serialise ``trace`` as a Perfetto protobuf trace; also write it to ``path`` if given."""
    builder = builder_class()()
    lay = layout(trace)
    strings = trace._strings

    # incremental state: interned event and annotation names
    first = builder.add_packet()
    first.trusted_packet_sequence_id = SEQ_ID
    first.sequence_flags = SEQ_INCREMENTAL_STATE_CLEARED
    name_ids = sorted({int(i) for i in np.unique(np.asarray(trace.s_name, dtype=np.int64))}) if len(trace) else []
    for iid in name_ids:
        first.interned_data.event_names.add(iid=iid + 1, name=strings[iid])
    for k, ann in enumerate(_ANNOTATIONS):   # iids 1..6 in this order, used below
        first.interned_data.debug_annotation_names.add(iid=k + 1, name=ann)

    # track descriptors
    for pid, proc in enumerate(lay.processes, start=1):
        td = builder.add_packet().track_descriptor
        td.uuid = _PROCESS_UUID + pid
        td.process.pid = pid
        td.process.process_name = proc
        td.process.legacy_sort_index = pid
        for k, (row, tid) in enumerate(lay.threads[pid]):
            td = builder.add_packet().track_descriptor
            td.uuid = tid
            td.parent_uuid = _PROCESS_UUID + pid
            td.thread.pid = pid
            td.thread.tid = tid
            td.thread.thread_name = row
            td.thread.legacy_sort_index = k
    for c, (_p, s) in enumerate(trace._counter_tracks):
        td = builder.add_packet().track_descriptor
        td.uuid = _COUNTER_UUID + c
        td.parent_uuid = _PROCESS_UUID + lay.counter_pid[c]
        td.name = strings[s]
        # the counter descriptor makes it a counter track, with a unit or without one
        td.counter.SetInParent()
        name, unit = split_series(strings[s])
        if unit != "value":
            td.counter.unit_name = unit
    td = builder.add_packet().track_descriptor
    td.uuid = _META_UUID
    td.name = "opsim"
    pk = builder.add_packet()
    pk.timestamp = 0
    pk.trusted_packet_sequence_id = SEQ_ID
    ev = pk.track_event
    ev.type = TYPE_INSTANT
    ev.track_uuid = _META_UUID
    ev.name = "run metadata"
    meta: dict[str, Any] = {"clock_hz": trace.clock_hz, "level": trace.level, **trace.metadata}
    for key, v in meta.items():
        a = ev.debug_annotations.add()
        a.name = str(key)
        a.string_value = json.dumps(v, default=str) if not isinstance(v, str) else v

    # flows: producer slice -> ids it starts, consumer slice -> ids it ends
    flows_out: dict[int, list[int]] = {}
    flows_in: dict[int, list[int]] = {}
    for n, (a, b, _) in enumerate(trace.flows()):
        flows_out.setdefault(a, []).append(n + 1)
        flows_in.setdefault(b, []).append(n + 1)

    # One time-ordered stream: at equal times ends of earlier slices come before begins of later
    # ones (a zero-length slice begins and ends in between), counters first.
    n = len(trace)
    nc = len(trace.c_track)
    c_ns = np.rint(np.asarray(trace.c_time, dtype=np.float64) * (1e9 / trace.clock_hz)).astype(np.int64)
    zero = lay.end_ns == lay.start_ns
    ts = np.concatenate([lay.start_ns, lay.end_ns, c_ns])
    phase = np.concatenate([np.where(zero, 2, 3), np.where(zero, 2, 1), np.zeros(nc, np.int64)])
    kind = np.concatenate([np.zeros(n, np.int64), np.ones(n, np.int64), np.full(nc, 2, np.int64)])
    ident = np.concatenate([np.arange(n), np.arange(n), np.arange(nc)])
    order = np.lexsort((kind, ident, phase, ts))

    s_track, s_name, s_el, s_by, s_tile, s_addr, s_det = (trace.s_track, trace.s_name, trace.s_elements,
                                                          trace.s_bytes, trace.s_tile, trace.s_addr,
                                                          trace.s_detail)
    tids = lay.slice_tid.tolist()
    pipe_track = [th in PIPES for _, th in trace.tracks]
    details: dict[tuple[int, bool], tuple[str, str]] = {}
    ts_l, kind_l, ident_l = ts.tolist(), kind.tolist(), ident.tolist()
    c_track, c_value = trace.c_track, trace.c_value
    for j in order.tolist():
        k, i = kind_l[j], ident_l[j]
        pk = builder.add_packet()
        pk.timestamp = ts_l[j]
        pk.trusted_packet_sequence_id = SEQ_ID
        ev = pk.track_event
        if k == 2:
            ev.type = TYPE_COUNTER
            ev.track_uuid = _COUNTER_UUID + c_track[i]
            ev.double_counter_value = c_value[i]
            continue
        ev.track_uuid = tids[i]
        if k == 1:
            ev.type = TYPE_SLICE_END
            continue
        pk.sequence_flags = SEQ_NEEDS_INCREMENTAL_STATE
        ev.type = TYPE_SLICE_BEGIN
        ev.name_iid = s_name[i] + 1
        anns = ev.debug_annotations
        if s_el[i]:
            anns.add(name_iid=1, int_value=s_el[i])
        if s_by[i]:
            anns.add(name_iid=2, int_value=s_by[i])
        if s_tile[i] >= 0:
            anns.add(name_iid=3, int_value=s_tile[i])
        d = s_det[i]
        dtype, rest = "", ""
        if d >= 0:
            on_pipe = pipe_track[s_track[i]]
            known = details.get((d, on_pipe))
            if known is None:
                known = details[(d, on_pipe)] = split_detail(strings[d]) if on_pipe else ("", strings[d])
            dtype, rest = known
        if dtype:
            anns.add(name_iid=4, string_value=dtype)
        if s_addr[i] >= 0:
            anns.add(name_iid=5, pointer_value=s_addr[i])
        if rest:
            anns.add(name_iid=6, string_value=rest)
        out = flows_out.get(i)
        if out:
            ev.flow_ids.extend(out)
        inn = flows_in.get(i)
        if inn:
            ev.terminating_flow_ids.extend(inn)
    data = builder.serialize()
    if path is not None:
        with open(path, "wb") as fh:
            fh.write(data)
    return data

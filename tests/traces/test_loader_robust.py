"""Trace loading and conversion: malformed files, compressed input and gzip bombs give clear
errors (TraceFormatError / exit status 2 with a message), and overlapping slices are laid out in
n log n, the same lanes the greedy rule gives."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest

from opsim import cli
from opsim.traces.layout import _lanes
from opsim.traces.loader import TraceFormatError, load_chrome

META = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "core0.veccore0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "MTE2"}}]


def _slice(**kw):
    ev = {"ph": "X", "name": "DataCopy", "pid": 1, "tid": 1, "ts": 0.0, "dur": 1.0}
    ev.update(kw)
    return ev


def _doc(*events, **top):
    return json.dumps({"traceEvents": [*META, *events], **top})


# name -> (file content, what the message says)
MALFORMED = {
    "not json": (b"this is not a trace", "not a readable JSON trace"),
    "truncated json": (_doc(_slice())[:-10].encode(), "not a readable JSON trace"),
    "not utf-8": (b'{"traceEvents": ["\xff\xfe"]}', "not a readable JSON trace"),
    "top level is a number": (b"42", "no traceEvents array"),
    "traceEvents is an object": (b'{"traceEvents": {"a": 1}}', "no traceEvents array"),
    "event is a number": (json.dumps({"traceEvents": [1, 2]}).encode(), "event 0 is int, not a JSON object"),
    "ts is a string": (_doc(_slice(ts="soon")).encode(), "event 2: 'ts' must be a number"),
    "ts is infinite": (_doc(_slice(ts=1e400)).encode(), "event 2: 'ts' = inf is not a finite number"),
    "ts is huge": (_doc(_slice(ts=1e300)).encode(), "event 2: 'ts' = 1e+300 is not a finite number"),
    # a slice with no time or length was read as time 0 (or 0 long)
    "slice without ts or dur": (_doc({"ph": "X"}).encode(), "event 2: a 'X' event needs 'ts'; it has none"),
    "slice without dur": (_doc({"ph": "X", "name": "D", "pid": 1, "tid": 1, "ts": 3.0}).encode(),
                          "event 2: a 'X' event needs 'dur'; it has none"),
    "counter without ts": (_doc({"ph": "C", "name": "bw", "pid": 1, "args": {"v": 1}}).encode(),
                           "event 2: a 'C' event needs 'ts'; it has none"),
    "negative duration": (_doc(_slice(dur=-5)).encode(), "event 2: 'dur' = -5"),
    "args is a list": (_doc(_slice(args=[1, 2])).encode(), "event 2: 'args' must be a JSON object"),
    "start_cycle not a number": (_doc(_slice(args={"start_cycle": "x"})).encode(),
                                 "event 2: args.start_cycle must be an integer"),
    "cycles overflow": (_doc(_slice(args={"start_cycle": 0, "cycles": 10 ** 30})).encode(),
                        "event 2: args.cycles = "),
    "bad address": (_doc(_slice(args={"addr": "zz"})).encode(), "event 2: args.addr must be an integer"),
    "counter value is text": (_doc({"ph": "C", "name": "bw", "pid": 1, "ts": 0, "args": {"v": "fast"}}).encode(),
                              "event 2: counter args.v"),
    "flow bound to no slice": (_doc(_slice(), {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 0,
                                               "args": {"slice": 99}}).encode(), "event 3: args.slice = 99"),
    "unhashable ids": (_doc(_slice(pid={"a": 1}, tid=[1])).encode(), None),
    "clock is zero": (_doc(_slice(), otherData={"clock_hz": 0}).encode(), "otherData.clock_hz = 0"),
    "otherData is a list": (_doc(_slice(), otherData=[1]).encode(), "'otherData' must be a JSON object"),
    "deeply nested": (b'{"traceEvents": ' + b"[" * 200000 + b"]" * 200000 + b"}", "nested too deeply"),
    "bad gzip": (b"\x1f\x8b\x08\x00garbage that is not deflate", "not a readable JSON trace"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_trace_is_a_clear_error_from_the_loader_and_the_cli(tmp_path, capsys, case):
    content, message = MALFORMED[case]
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    if message is None:   # valid after all: ids of another tool's shape still load
        assert len(load_chrome(str(path))) == 1
        return
    with pytest.raises(TraceFormatError, match=None) as info:
        load_chrome(str(path))
    assert message in str(info.value)
    for command in (["trace", "summary", str(path)], ["trace", "convert", str(path), "-o", str(tmp_path / "o.pftrace")]):
        assert cli.main(command) == 2
        err = capsys.readouterr().err
        assert err.startswith("opsim trace: ") and message in err


def test_times_written_as_decimal_strings_are_read(tmp_path):
    path = tmp_path / "strings.json"
    path.write_text(_doc(_slice(ts="2.5", dur="1.5")))
    cols = load_chrome(str(path)).columns()
    assert int(cols["start"][0]) == 2500 and int(cols["end"][0]) == 4000   # 1 GHz default clock


def test_a_gzip_trace_is_read_whatever_its_name(tmp_path):
    doc = _doc(_slice(args={"start_cycle": 10, "cycles": 5}))
    path = tmp_path / "plain-name.json"
    path.write_bytes(gzip.compress(doc.encode()))
    trace = load_chrome(str(path))
    assert len(trace) == 1 and int(trace.columns()["end"][0]) == 15


def _bomb(path, decompressed_gib):
    """A gzip file of whitespace: a few KiB that decompress to ``decompressed_gib`` GiB (gzip
    members concatenate, so one compressed MiB repeated makes it without compressing GiBs)."""
    member = gzip.compress(b" " * (1 << 20) * 16, compresslevel=9)
    with open(path, "wb") as f:
        f.write(gzip.compress(b'{"traceEvents": ['))
        for _ in range(decompressed_gib * 64):
            f.write(member)


def test_a_gzip_bomb_is_refused_at_the_size_limit(tmp_path, monkeypatch):
    path = tmp_path / "bomb.json.gz"
    _bomb(path, 4)
    assert path.stat().st_size < 8 << 20
    monkeypatch.setenv("OPSIM_MAX_TRACE_BYTES", str(64 << 20))
    monkeypatch.setattr("opsim.traces.loader._BOMB_RATIO", 10 ** 6)   # only the size limit
    with pytest.raises(TraceFormatError, match="decompresses to more than 67108864 bytes"):
        load_chrome(str(path))


def test_a_gzip_bomb_is_refused_by_its_compression_ratio_long_before_the_size_limit(tmp_path):
    path = tmp_path / "bomb.json.gz"
    _bomb(path, 8)
    res = subprocess.run([sys.executable, "-m", "opsim", "trace", "summary", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "decompresses more than 200 times its compressed size" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_large_gzip_trace_of_ordinary_compressibility_is_read(tmp_path, monkeypatch):
    # 10 MB of JSON with random numbers: compresses a few times, well under the bomb ratio
    rng = np.random.default_rng(0)
    events = [*META, *({"ph": "X", "name": "D", "pid": 1, "tid": 1, "ts": float(t), "dur": 0.001}
                       for t in np.cumsum(rng.random(100_000)))]
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode(), compresslevel=1))
    monkeypatch.setattr("opsim.traces.loader._BOMB_MIN", 1 << 20)
    assert len(load_chrome(str(path))) == 100_000


def test_a_device_node_is_not_read(capsys):
    assert cli.main(["trace", "summary", "/dev/zero"]) == 2
    assert "not a regular file" in capsys.readouterr().err


# -- overlapping slices --------------------------------------------------------------------------

def _greedy(track, start, end):
    """The layout rule written plainly: in start order, the lowest lane whose slice has ended."""
    lanes = np.zeros(len(track), np.int64)
    for tr in np.unique(track):
        idx = sorted(np.flatnonzero(track == tr), key=lambda i: (start[i], i))
        ends: list[int] = []
        for i in idx:
            free = [k for k, e in enumerate(ends) if e <= start[i]]
            if free:
                lanes[i] = free[0]
                ends[free[0]] = end[i]
            else:
                lanes[i] = len(ends)
                ends.append(end[i])
    return lanes


def test_overlapping_slices_get_the_lowest_free_lane_on_every_track():
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(2, 80))
        track = rng.integers(0, 4, n).astype(np.int32)
        start = rng.integers(0, 60, n).astype(np.int64)
        end = start + rng.integers(0, 25, n)
        assert (_lanes(track, start, end) == _greedy(track, start, end)).all()


@pytest.mark.slow
def test_two_hundred_thousand_nested_slices_convert_and_nest_in_their_lanes(tmp_path):
    n = 200_000
    events = [*META, *({"ph": "X", "name": "D", "pid": 1, "tid": 1, "ts": i * 0.01, "dur": 1000.0 + (i % 7)}
                       for i in range(n))]
    src = tmp_path / "big.json"
    src.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "big.json.gz"
    assert cli.main(["trace", "convert", str(src), "-o", str(out)]) == 0
    back = json.loads(gzip.decompress(out.read_bytes()))
    per_thread: dict = {}
    for ev in back["traceEvents"]:
        if ev.get("ph") == "X":
            # in whole nanoseconds, as viewers convert ts and dur
            ts, dur = round(ev["ts"] * 1000), round(ev["dur"] * 1000)
            per_thread.setdefault(ev["tid"], []).append((ts, ts + dur))
    assert sum(map(len, per_thread.values())) == n
    for spans in per_thread.values():   # Perfetto's rule: slices on one thread never overlap
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_a_perfetto_protobuf_file_is_named_as_such_not_as_bad_utf8(tmp_path, capsys):
    # `opsim run --trace t.pftrace` writes protobuf, which `opsim trace` cannot read back: it said
    # "not a readable JSON trace ('utf-8' codec can't decode byte 0x8b in position 1 ...)"
    pb = tmp_path / "t.pftrace"
    pb.write_bytes(b"\x0a\x8b\x08\x50\x01\x62\x84\x08\x12\x0f")   # the opening bytes of one
    want = (f"{pb}: not a JSON trace (a Perfetto protobuf file?); opsim trace reads the Chrome JSON of "
            f"`opsim run --trace F.json` (or .json.gz)")
    with pytest.raises(TraceFormatError) as exc:
        load_chrome(str(pb))
    assert str(exc.value) == want
    for command in (["trace", "summary", str(pb)], ["trace", "convert", str(pb), "-o", str(tmp_path / "o.json")]):
        assert cli.main(command) == 2
        err = capsys.readouterr().err
        assert want in err and "utf-8" not in err, err

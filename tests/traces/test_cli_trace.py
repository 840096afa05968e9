"""`opsim trace summary|plot|convert` on a trace file written by a real run."""
from __future__ import annotations

import argparse
import gzip
import json

import pytest

from opsim import cli_trace
from opsim.traces.loader import load_chrome


def _main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="opsim")
    cli_trace.register(ap.add_subparsers(dest="command", required=True))
    args = ap.parse_args(argv)
    return args.func(args)


@pytest.fixture(scope="module")
def trace_file(mse_runs, tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "mse.json"
    mse_runs["instruction"].trace.to_chrome_json(str(path))
    return str(path)


def test_summary_prints_the_tables_and_the_bound(trace_file, capsys, mse_runs):
    assert _main(["trace", "summary", trace_file]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mse_loss_backward on atlas-a2 (instruction level)")
    assert f"run        {mse_runs['instruction'].cycles} cycles" in out
    assert "bound      memory: MTE2 busy" in out and "achieved GB/s" in out


def test_summary_as_json(trace_file, capsys):
    assert _main(["trace", "summary", trace_file, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["bound"] == "memory" and d["ub_peak_bytes"] > 0 and d["roofline"]["ops"] == 3 * 8192


@pytest.mark.parametrize("kind", ["timeline", "bandwidth", "utilisation", "roofline"])
def test_plot_writes_a_png_of_each_kind(trace_file, tmp_path, kind, capsys):
    out = tmp_path / f"{kind}.png"
    assert _main(["trace", "plot", trace_file, "--kind", kind, "-o", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert f"{kind} -> {out}" in capsys.readouterr().out


def test_plot_timeline_window_and_bad_window(trace_file, tmp_path, capsys):
    out = tmp_path / "w.png"
    assert _main(["trace", "plot", trace_file, "--window", "0:1.5", "-o", str(out)]) == 0
    assert out.exists()
    assert _main(["trace", "plot", trace_file, "--window", "3:1", "-o", str(out)]) == 2
    assert "END must be greater than START" in capsys.readouterr().err
    assert _main(["trace", "plot", trace_file, "--kind", "roofline", "--window", "0:1",
                  "-o", str(out)]) == 2
    assert "--window applies to --kind timeline" in capsys.readouterr().err


def test_plot_refuses_a_window_outside_the_trace(trace_file, tmp_path, capsys):
    # a window past the end wrote an empty timeline (0 bars) with status 0
    doc = json.load(open(trace_file))
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    first, last = min(e["ts"] for e in slices), max(e["ts"] + e["dur"] for e in slices)
    out = tmp_path / "w.png"
    for window in (f"{last * 2}:{last * 3}", f"{first - 2}:{first - 1}"):
        assert _main(["trace", "plot", trace_file, f"--window={window}", "-o", str(out)]) == 2, window
        err = capsys.readouterr().err
        lo, hi = (float(x) for x in window.split(":"))
        assert err == (f"opsim trace: timeline window {lo:g}:{hi:g} us lies outside the trace, which spans "
                       f"{first:g}:{last:g} us\n"), err
        assert not out.exists()
    # a window reaching into the trace from past either end still draws it
    assert _main(["trace", "plot", trace_file, f"--window={first - 1}:{last * 3}", "-o", str(out)]) == 0
    assert out.exists()


def test_a_missing_or_foreign_file_is_an_error_not_a_traceback(tmp_path, capsys):
    assert _main(["trace", "summary", str(tmp_path / "nope.json")]) == 2
    assert "nope.json: not a readable JSON trace" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    assert _main(["trace", "summary", str(other)]) == 2
    assert "no traceEvents array" in capsys.readouterr().err


def test_convert_to_gzip_json_round_trips_and_to_protobuf(trace_file, tmp_path):
    gz = tmp_path / "t.json.gz"
    assert _main(["trace", "convert", trace_file, "-o", str(gz)]) == 0
    with gzip.open(gz, "rt", encoding="utf-8") as fh:
        assert fh.read() == open(trace_file, encoding="utf-8").read()
    assert len(load_chrome(str(gz))) == len(load_chrome(trace_file))
    pytest.importorskip("perfetto", reason="the optional 'perfetto' extra is not installed")
    pb = tmp_path / "t.pftrace"
    assert _main(["trace", "convert", trace_file, "-o", str(pb)]) == 0
    assert pb.stat().st_size > 0


@pytest.mark.parametrize("command", ["plot", "convert"])
def test_an_unwritable_output_names_the_option_and_the_path(trace_file, tmp_path, capsys, command):
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "sub" / ("t.png" if command == "plot" else "t.pftrace")
    assert _main(["trace", command, trace_file, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"-o {out}: Not a directory" in err and "Errno" not in err


@pytest.mark.parametrize("command", ["plot", "convert", "summary"])
def test_an_output_in_a_missing_directory_is_written_with_its_directories(trace_file, tmp_path, capsys, command):
    # the directories were not made: "-o .../no-such-dir/t.png: No such file or directory"
    if command == "plot":
        pytest.importorskip("matplotlib")
    out = tmp_path / "no-such-dir" / "deeper" / {"plot": "t.png", "convert": "t.json", "summary": "t.csv"}[command]
    argv = ["trace", command, trace_file] + (["--csv", str(out)] if command == "summary" else ["-o", str(out)])
    assert _main(argv) == 0, capsys.readouterr().err
    assert out.is_file() and out.stat().st_size > 0


@pytest.mark.parametrize("name", ["t.svg", "t.pdf", "t.jpg", "t"])
def test_plot_refuses_an_output_name_that_is_not_png(trace_file, tmp_path, capsys, name):
    # it wrote PNG bytes under whatever name it was given: a t.svg no SVG viewer opens
    out = tmp_path / name
    assert _main(["trace", "plot", trace_file, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"-o {out}: opsim trace plot writes PNG; give a file name ending in .png" in err, err
    assert not out.exists()



TRACE_NAMES = ("give a file name ending in .json or .json.gz (Chrome JSON), .pftrace or .perfetto-trace "
               "(Perfetto protobuf)")


@pytest.mark.parametrize("name", ["t.txt", "t", "t.pb"])
def test_run_and_convert_refuse_a_trace_name_of_no_known_format_alike(trace_file, tmp_path, capsys, name):
    # `opsim run --trace t.txt` wrote Chrome JSON, `opsim trace convert F -o t.txt` Perfetto protobuf
    from opsim.cli import main
    out = tmp_path / name
    assert _main(["trace", "convert", trace_file, "-o", str(out)]) == 2
    assert capsys.readouterr().err == f"opsim trace: -o {out}: {TRACE_NAMES}\n"
    assert main(["run", "mse_loss_backward", "--shape", "64", "--trace", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"opsim: --trace {out}: {TRACE_NAMES}\n" and captured.out == ""
    assert not out.exists()


def test_run_and_convert_write_the_same_format_for_each_known_name(trace_file, tmp_path):
    from opsim.cli import main
    pytest.importorskip("perfetto", reason="the optional 'perfetto' extra is not installed")
    for name in ("t.json", "t.json.gz", "t.pftrace", "t.perfetto-trace"):
        ran, converted = tmp_path / f"run-{name}", tmp_path / f"conv-{name}"
        assert main(["run", "mse_loss_backward", "--shape", "64", "--trace", str(ran)]) == 0
        assert _main(["trace", "convert", trace_file, "-o", str(converted)]) == 0
        # Chrome JSON starts with '{', gzip with 0x1f, a protobuf trace with its packet's field tag '\n'
        first = {ran.read_bytes()[:1], converted.read_bytes()[:1]}
        assert len(first) == 1 and first <= {b"{", b"\x1f", b"\n"}, (name, first)


@pytest.mark.parametrize("name, first", [("t.JSON", b"{"), ("t.Json.GZ", b"\x1f"), ("t.json.Gz", b"\x1f"),
                                         ("t.PFTRACE", b"\n"), ("t.Perfetto-Trace", b"\n")])
def test_run_and_convert_take_a_trace_ending_in_any_case(trace_file, tmp_path, name, first):
    # the endings were matched as written: `--trace t.JSON` or `-o t.PFTRACE` was refused
    from opsim.cli import main
    if first == b"\n":
        pytest.importorskip("perfetto", reason="the optional 'perfetto' extra is not installed")
    ran, converted = tmp_path / f"run-{name}", tmp_path / f"conv-{name}"
    assert main(["run", "mse_loss_backward", "--shape", "64", "--trace", str(ran)]) == 0
    assert _main(["trace", "convert", trace_file, "-o", str(converted)]) == 0
    # Chrome JSON starts with '{', gzip with 0x1f, a protobuf trace with its packet's field tag '\n'
    assert ran.read_bytes()[:1] == first and converted.read_bytes()[:1] == first
    if first != b"\n":
        assert load_chrome(str(converted)).to_chrome_json() == load_chrome(trace_file).to_chrome_json()


@pytest.mark.parametrize("name", ["t.TXT", "t.JSONX", "t.GZ"])
def test_a_trace_name_of_no_known_format_is_refused_in_any_case(trace_file, tmp_path, capsys, name):
    out = tmp_path / name
    assert _main(["trace", "convert", trace_file, "-o", str(out)]) == 2
    assert capsys.readouterr().err == f"opsim trace: -o {out}: {TRACE_NAMES}\n"
    assert not out.exists()

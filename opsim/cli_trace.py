"""``opsim trace summary|plot|convert`` and the report helpers the CLI and the demo call.

``register(subparsers)`` adds the ``trace`` command to the ``opsim`` parser:

- ``opsim trace summary FILE [--json]`` prints per core and pipe busy %, achieved vs peak
  bandwidth per link, UB peak, L2 hit rate and the bound with its reason, from the trace alone;
- ``opsim trace plot FILE --kind timeline|bandwidth|utilisation|roofline -o out.png
  [--window START:END]`` (window in µs, timeline only);
- ``opsim trace convert FILE -o out.pftrace`` writes Perfetto protobuf (or ``.json[.gz]``).

``report_for_result`` / ``write_report`` write the HTML report of an ``opsim.RunResult``,
``write_index_page`` / ``write_index`` the demo's index page (:mod:`traces.report`).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from opsim.traces.loader import TraceFormatError, load_chrome
from opsim.traces.plots import KINDS, plot
from opsim.traces.report import write_index, write_report

__all__ = ["register", "report_for_result", "write_report", "write_index", "write_index_page"]


def report_for_result(result: Any, path: str, spec: Any = None) -> str:
    """The HTML report of one ``opsim.RunResult`` (see :func:`traces.report.write_report`)."""
    return write_report(result, path, spec)


def write_index_page(entries: list[dict[str, Any]], path: str) -> str:
    """The index page linking several reports (see :func:`traces.report.write_index`)."""
    return write_index(entries, path)


def _fail(message: str) -> int:
    print(f"opsim trace: {message}", file=sys.stderr)
    return 2


def cmd_summary(args: argparse.Namespace) -> int:
    try:
        trace = load_chrome(args.file)
    except TraceFormatError as exc:
        return _fail(str(exc))
    s = trace.summary()
    if args.csv:
        from opsim.cli import make_parent_dirs
        from opsim.traces.tables import records_from_trace, write_tables
        try:
            make_parent_dirs(args.csv)
            files = write_tables(records_from_trace(trace), args.csv, str(trace.metadata.get("gm_link", "HBM")))
        except OSError as exc:
            return _fail(f"--csv {args.csv}: {exc.strerror or exc}")
        print(f"tables: {', '.join(files.values())}", file=sys.stderr)
    if args.json:
        print(json.dumps(s.as_dict(), default=str, indent=1))
    else:
        print(s.table(), end="")
    return 0


def _window(text: str | None) -> tuple[float, float] | None:
    if not text:
        return None
    try:
        lo, hi = (float(x) for x in text.split(":"))
    except ValueError:
        raise ValueError(f"--window {text!r} must be START:END in microseconds, e.g. 0:2.5") from None
    if not hi > lo:
        raise ValueError(f"--window {text!r}: END must be greater than START")
    return lo, hi


def _output_error(path: str, exc: OSError) -> int:
    return _fail(f"-o {path}: {exc.strerror or exc}")


def cmd_plot(args: argparse.Namespace) -> int:
    from opsim.cli import make_parent_dirs
    if not args.output.lower().endswith(".png"):
        # the picture is PNG whatever the name: a t.svg would hold PNG bytes
        return _fail(f"-o {args.output}: opsim trace plot writes PNG; give a file name ending in .png")
    try:
        trace = load_chrome(args.file)
        options = {}
        window = _window(args.window)
        if window is not None:
            if args.kind != "timeline":
                return _fail(f"--window applies to --kind timeline, not {args.kind}")
            options["window"] = window
        make_parent_dirs(args.output)
        pic = plot(trace, args.kind, args.output, **options)
    except OSError as exc:   # the trace is read by load_chrome (TraceFormatError): this is the output
        return _output_error(args.output, exc)
    except (TraceFormatError, ValueError, ImportError) as exc:
        return _fail(str(exc))
    extra = f", {pic.info['bars']} bars" if args.kind == "timeline" else ""
    print(f"{args.kind} -> {args.output}{extra}")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from opsim.cli import TRACE_NAMES, make_parent_dirs, trace_format, write_trace
    out = args.output
    if trace_format(out) is None:
        return _fail(f"-o {out}: {TRACE_NAMES}")
    try:
        trace = load_chrome(args.file)
        make_parent_dirs(out)
        write_trace(trace, out)
    except OSError as exc:
        return _output_error(args.output, exc)
    except (TraceFormatError, ImportError) as exc:
        return _fail(str(exc))
    print(f"{args.file} -> {out} ({len(trace)} slices, {len(trace.c_track)} counter points)")
    return 0


def register(subparsers: Any) -> None:
    """Add ``trace`` with ``summary``, ``plot`` and ``convert`` to an argparse sub-parser set."""
    t = subparsers.add_parser("trace", help="summarise, plot or convert a trace file",
                              description="Read a trace written by `opsim run --trace FILE` "
                                          "(Chrome JSON, optionally .gz).")
    sub = t.add_subparsers(dest="trace_command", required=True)
    s = sub.add_parser("summary", help="busy %%, bandwidth, UB peak and the bound, as tables")
    s.add_argument("file", help="trace file (.json or .json.gz)")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.add_argument("--csv", help="write the op_summary CSV (one row per launch) to this file, and the "
                                 "per-core and instruction tables beside it (docs/profiling.md)")
    s.set_defaults(func=cmd_summary)
    p = sub.add_parser("plot", help="draw a PNG picture of the trace")
    p.add_argument("file", help="trace file (.json or .json.gz)")
    p.add_argument("--kind", choices=KINDS, default="timeline")
    p.add_argument("-o", "--output", required=True, help="PNG file to write")
    p.add_argument("--window", help="timeline time window START:END in microseconds")
    p.set_defaults(func=cmd_plot)
    c = sub.add_parser("convert", help="write the trace as Perfetto protobuf (.pftrace) or JSON")
    c.add_argument("file", help="trace file (.json or .json.gz)")
    c.add_argument("-o", "--output", required=True,
                   help=".json or .json.gz: Chrome JSON; .pftrace or .perfetto-trace: Perfetto protobuf")
    c.set_defaults(func=cmd_convert)

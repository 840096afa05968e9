"""The ``opsim`` command line: run, demo, devices, ops (plus trace, sweep, capacity when present)."""
from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from typing import Any, NoReturn, Sequence

# the trace formats by file name, for `opsim run --trace` and `opsim trace convert -o` alike;
# another name is refused (a .txt of Chrome JSON from one and of protobuf from the other)
TRACE_SUFFIXES = {".json": "chrome", ".json.gz": "chrome", ".pftrace": "perfetto", ".perfetto-trace": "perfetto"}
TRACE_NAMES = ("give a file name ending in .json or .json.gz (Chrome JSON), .pftrace or .perfetto-trace "
               "(Perfetto protobuf)")


def trace_format(path: str) -> str | None:
    """"chrome" or "perfetto": the format a trace file of this name is written in (its ending
    in any case); None for a name of neither (the caller refuses it with :data:`TRACE_NAMES`)."""
    # any case (t.JSON, t.Json.GZ): the Chrome writer gzips a name ending in .gz in any case too
    name = path.lower()
    return next((fmt for suffix, fmt in TRACE_SUFFIXES.items() if name.endswith(suffix)), None)


def write_trace(trace: Any, path: str) -> None:
    """Write ``trace`` in the format its file name asks for (:func:`trace_format`)."""
    if trace_format(path) == "perfetto":
        trace.to_perfetto(path)
    else:
        trace.to_chrome_json(path)


def _parse_shape(text: str) -> tuple[int, ...]:
    if text in ("", "scalar", "()"):
        return ()
    try:
        shape = tuple(int(p) for p in text.lower().replace("*", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r} must look like 64x4096") from None
    if any(s < 0 for s in shape):
        raise argparse.ArgumentTypeError(f"shape {text!r} has a negative dimension")
    return shape


def _parse_seed(text: str) -> int:
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer (a seed is an integer >= 0)") from None
    if seed < 0:
        raise argparse.ArgumentTypeError(f"{seed} must be an integer >= 0")
    return seed


def parse_workers(text: str) -> int:
    """``--workers N`` of ``opsim demo`` and ``opsim sweep``: N worker processes, 1 to the sweep's
    cap (0 is no count of processes: the demo took it as the default, the sweep refused it)."""
    from opsim.sweep import MAX_WORKERS
    try:
        workers = int(text)
    except ValueError:
        workers = 0
    if not 1 <= workers <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of worker processes; give an integer "
                                         f"from 1 to {MAX_WORKERS} (default: the CPU count)")
    return workers


def _parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(text, 0) if conv is int else conv(text)
        except ValueError:
            pass
    return text


def _reduction_value(text: str) -> Any:
    """A reduction as typed: 0/1/2 or its name; "none" is the name, not Python's None."""
    text = text.strip()
    return int(text) if text.isdigit() else text


def _parse_pairs(items: Sequence[str] | None, what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or ():
        for part in item.split(","):
            if not part:
                continue
            key, sep, val = part.partition("=")
            if not sep:
                usage_error(f"opsim: {what} {part!r} must be KEY=VALUE")
            key = key.strip()
            # the reduction's names include "none", which _parse_value would make None
            out[key] = _reduction_value(val) if key == "reduction" else _parse_value(val.strip())
    return out


def usage_error(message: str) -> NoReturn:
    """Print ``message`` and leave with status 2, argparse's status for a malformed option
    (``SystemExit(message)`` would leave with 1, which ``opsim check`` documents as findings)."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def build_operands(op_name: str, device: str, dtype: str | None, shape: tuple[int, ...] | None, seed: int,
                   mode: str, attrs: dict[str, Any], overrides: dict[str, Any] | None = None,
                   operands: Sequence[str] = ()) -> dict[str, Any]:
    """Operands of the requested shape and dtype from the operator's example recipe: random data
    in full/numeric mode, shapes only (no host data) in timing/estimate mode; ``operands`` are
    ``--operand NAME=SPEC`` overrides (see :mod:`opsim.cli_operands`)."""
    from opsim.api import device_spec
    from opsim.cli_operands import build
    return build(op_name, device_spec(device, overrides), dtype, shape, seed, mode, attrs, operands)


def format_result(res: Any) -> str:
    s = res.stats
    lines = [f"operator      {res.op} on {res.device} ({res.mode} mode)"]
    if res.mode != "numeric":   # numeric mode has no timing; it prints its check instead
        lines.append(f"cycles        {res.cycles}   ({res.time_us:.3f} us)")
    if s.get("empty"):
        lines.append("empty         an operand has no elements: the call succeeds and launches nothing")
    if s.get("block_dim") is not None:
        # a plan without a tile length or buffer count (the embedding's row plans) shows none
        parts = [f"block_dim     {s['block_dim']}"] + [f"{k} {s[k]}" for k in ("tile_length", "buffer_num")
                                                      if s.get(k) is not None]
        lines.append("   ".join(parts))
    if "bytes_read" in s:
        # the DSPs have no L2: their GM bytes all cross the DDR link
        where = "GM addresses, L2 hits included" if "L2" in (s.get("links") or {}) else "GM addresses"
        lines.append(f"bytes moved   {s['bytes_read']} read, {s['bytes_written']} written ({where})")
        lines.extend(format_links(s))
    if s.get("pipe_utilisation"):
        util = ", ".join(f"{p} {100 * u:.0f}%" for p, u in sorted(s["pipe_utilisation"].items()))
        # each pipe's figure is from its own busiest core (stats["pipe_busy"]), not one core's
        lines.append(f"pipes busy    {util}  (each pipe's busiest core)")
    if "ub_peak_bytes" in s:
        if s.get("local_memory") == "private memory":     # a DSP core has no UB
            lines.append(f"local peak    {s['ub_peak_bytes']} B (DSP private memory)")
        else:
            lines.append(f"UB peak       {s['ub_peak_bytes']} B")
    if "bound" in s:
        lines.append(f"bound         {s['bound']}: {s.get('bound_reason', '')}")
    return "\n".join(lines)


def format_links(s: dict[str, Any]) -> list[str]:
    """One line per link: the bytes it carried and its achieved rate against its own peak."""
    out = []
    by = s.get("link_bytes") or {}
    links = s.get("links") or {}
    gm = s.get("gm_link") or "GM"
    if not links:    # statistics without per-link figures (older results): the GM link's alone
        links = {gm: {"achieved_GBps": s.get("bandwidth_GBps", 0.0), "peak_GBps": s.get("peak_bandwidth_GBps")}}
    for name, l in links.items():
        peak = l.get("peak_GBps") or 0.0
        moved = ", ".join(f"{k.split(' ', 1)[1]} {by[k]}" for k in sorted(by) if k.split(" ", 1)[0] == name and by[k])
        lines = f"{name + ' link':13s} {l['achieved_GBps']:.1f} GB/s achieved of {peak:.1f} GB/s peak " \
                f"({100 * l['achieved_GBps'] / max(peak, 1e-9):.0f}%)"
        out.append(lines + (f"; {moved} B" if moved else ""))
    on_chip = s.get("on_chip_bytes") or {}
    if on_chip:
        out.append("on-chip       " + ", ".join(f"{k} {v} B" for k, v in on_chip.items()))
    return out


def error_text(exc: BaseException) -> str:
    """One line for a refused command: a SimulatorError's message (it starts with the machine
    fault's kind), a ValueError's message (a value the user gave is refused: SpecError, CliError,
    an operator's shape check -- the message says what is allowed; a Python class name would only
    puzzle a command-line user), a KeyError's message without the quotes ``str(KeyError)`` adds (an
    unknown operator is a mistyped name), otherwise ``Class: message`` (a TypeError or the like is
    a bug somewhere, and its class says which kind)."""
    from opsim.simulator.errors import SimulatorError
    if isinstance(exc, (SimulatorError, ValueError)):
        return str(exc)
    if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        return exc.args[0]
    return f"{type(exc).__name__}: {exc}"


def output_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be written, or None: checked before a run so that a mistyped
    directory is refused at once, not after minutes of simulation (writing can still fail
    later, e.g. on a full disk, and is reported then). Missing parent directories are no
    problem: :func:`make_parent_dirs` creates them when the file is written (as ``sweep --db``);
    the nearest one that exists must be a writable directory."""
    if os.path.isdir(path):
        return "is a directory; give a file name"
    existing = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)      # ends at the root, which exists
    if not os.path.isdir(existing):
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"directory {existing} is not writable"
    return None


def make_parent_dirs(path: str) -> None:
    """Create the missing parent directories of the output file ``path`` (every file the CLI
    writes goes through this, so ``-o new/dir/t.json`` works like ``sweep --db new/dir/x.db``);
    an OSError (a parent that is a file, no permission) is the caller's to report."""
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
    except FileExistsError:
        # a regular file where a directory belongs: said as opening the file would say it
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), parent) from None


def cmd_run(args: argparse.Namespace) -> int:
    import opsim
    from opsim.kernels.common import OpError
    from opsim.simulator.errors import SimulatorError
    attrs = _parse_pairs(args.attr, "--attr")
    if args.reduction is not None:
        attrs["reduction"] = _reduction_value(args.reduction)
    overrides = _parse_pairs(args.set, "--set")
    tiling = _parse_pairs(args.tiling, "--tiling")
    if args.kernel:
        if args.op:
            print(f"opsim: give an operator name ({args.op}) or --kernel {args.kernel}, not both",
                  file=sys.stderr)
            return 2
        args.op = args.kernel          # a custom operator: path/to/file.py:name
    if not args.op:
        print("opsim: name an operator (see `opsim ops`) or --kernel FILE.py:name", file=sys.stderr)
        return 2
    for opt in ("csv", "trace", "report"):
        path = getattr(args, opt)
        problem = output_path_problem(path) if path else None
        if opt == "trace" and path and not problem and trace_format(path) is None:
            problem = TRACE_NAMES
        if problem:
            print(f"opsim: --{opt} {path}: {problem}", file=sys.stderr)
            return 2
    no_trace = (f"--mode {args.mode}" if args.mode in ("numeric", "estimate")
                else "--trace-level off" if args.trace_level == "off" else None)
    if args.csv and args.mode in ("numeric", "estimate"):
        # refused before the run, as --trace is: the run would print its result, then fail
        article = "an" if args.mode == "estimate" else "a"
        print(f"opsim: --csv {args.csv}: {article} {args.mode}-mode run launches no kernels, so there is no "
              f"op_summary; use --mode full or timing", file=sys.stderr)
        return 2
    if args.trace and no_trace:
        # the run would succeed and leave no file, without a word
        print(f"opsim: --trace {args.trace}: {no_trace} records no trace; use --mode full or timing "
              f"and a --trace-level other than off", file=sys.stderr)
        return 2
    try:
        kwargs = build_operands(args.op, args.device, args.dtype, args.shape, args.seed, args.mode, attrs, overrides,
                                getattr(args, "operand", None) or ())
        common = dict(device=args.device, tiling=tiling or None, seed=args.seed,
                      device_overrides=overrides or None, **kwargs)
        show = args.progress if args.progress is not None else sys.stderr.isatty()
        progress = None
        if show and args.mode in ("full", "timing"):
            from opsim.progress import RunProgress

            def total() -> int:
                return opsim.run(args.op, mode="estimate", trace="off", **common).cycles
            progress = RunProgress(total)
        try:
            res = opsim.run(args.op, mode=args.mode, trace=args.trace_level,
                            source_lines=args.source_lines, progress=progress, **common)
        finally:
            if progress is not None:
                progress.close()
    except OpError as exc:
        print(f"opsim: rejected with status {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    except (SimulatorError, KeyError, TypeError, ValueError) as exc:
        print(f"opsim: {error_text(exc)}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"op": res.op, "device": res.device, "mode": res.mode, "cycles": res.cycles,
                          "time_us": res.time_us, "stats": res.stats}, default=str, indent=1))
    else:
        print(format_result(res))
    # with --json, stdout is the JSON document alone: the files written are named on stderr
    notes = sys.stderr if args.json else sys.stdout
    if args.csv:
        from opsim.traces.tables import write_tables
        if not res.launch_records:
            print(f"opsim: --csv {args.csv}: the call launched no kernels (an empty call), so there is no "
                  f"op_summary", file=sys.stderr)
            return 2
        try:
            make_parent_dirs(args.csv)
            files = write_tables(list(res.launch_records), args.csv, res.stats.get("gm_link", "HBM"))
        except OSError as exc:
            print(f"opsim: --csv {args.csv}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"tables        {', '.join(files.values())}", file=notes)
    if args.trace and res.trace is not None:
        try:
            make_parent_dirs(args.trace)
            write_trace(res.trace, args.trace)
        except ImportError as exc:
            print(f"opsim: --trace {args.trace}: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"opsim: --trace {args.trace}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"trace         {args.trace} ({len(res.trace)} slices)", file=notes)
    if args.report:
        from opsim.cli_trace import report_for_result
        try:
            make_parent_dirs(args.report)
            report_for_result(res, args.report)
        except OSError as exc:
            print(f"opsim: --report {args.report}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"report        {args.report}", file=notes)
    if not args.json:
        _print_operands_and_check(kwargs, res)
    return 0


def _print_operands_and_check(kwargs: dict[str, Any], res: Any) -> None:
    from opsim.cli_operands import format_check, format_operands
    text = format_operands(kwargs, res.outputs)
    if text:
        print(text)
    if res.mode == "numeric":
        print(format_check(res))


def cmd_devices(args: argparse.Namespace) -> int:
    from opsim.devices import SpecError, catalogue_table
    try:
        text = catalogue_table(args.names or None, provenance=not args.brief, every_field=args.all)
    except SpecError as exc:
        print(f"opsim devices: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0


def cmd_ops(args: argparse.Namespace) -> int:
    from opsim.kernels import registry
    if args.names:
        from opsim.cli_operands import describe
        try:
            print("\n\n".join(describe(n, args.device) for n in args.names))
        except (KeyError, ValueError) as exc:
            print(f"opsim ops: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
            return 2
        return 0
    for name in registry.names():
        op = registry.get(name)
        print(f"{name:40s} products: {', '.join(op.products)}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from opsim.demo import run_demo
    return run_demo(out_dir=args.out, reports=not args.no_report, workers=args.workers, ops=args.kernel)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="opsim", description="Ascend-style operator simulator and emulator",
                                 epilog="Output files (--trace, --report, --csv, -o, --db) are created with any "
                                        "missing parent directories; a path that is a directory or cannot be "
                                        "written is refused.")
    ap.add_argument("--version", action="version", version=f"opsim {_opsim_version()}")
    sub = ap.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run one operator on a simulated device")
    r.add_argument("op", nargs="?", help="operator name (see `opsim ops`)")
    r.add_argument("--kernel", help="a custom operator: FILE.py:name registered with opsim.register_operator")
    r.add_argument("--device", default="atlas-a2",
                   help="device name or TOML path (see `opsim devices`; default: atlas-a2)")
    r.add_argument("--shape", type=_parse_shape, default=None, help="main operand shape, e.g. 64x4096")
    r.add_argument("--dtype", default=None, help="fp32, fp16 or bf16 (default: fp32, or the operator's first dtype)")
    r.add_argument("--reduction", default=None, help="none, mean or sum (or 0/1/2)")
    r.add_argument("--attr", action="append", help="operator attribute KEY=VALUE (repeatable)")
    r.add_argument("--mode", default="full", choices=("full", "timing", "numeric", "estimate"),
                   help="full: numbers and timing (default); timing: shapes only; numeric: the golden only; "
                        "estimate: a fast replay without the event loop")
    r.add_argument("--tiling", action="append", help="tiling override, e.g. block_dim=8,tile_length=4096")
    r.add_argument("--set", "--override", action=DeviceOverride, dest="set", metavar="KEY=VALUE",
                   help="device field override, e.g. ub.size=262144 (repeatable; --override is a deprecated alias)")
    r.add_argument("--operand", action="append", metavar="NAME=SPEC",
                   help="one operand: 64x128, 64x128:fp16, :int32, none or @file.npy (repeatable; see `opsim ops OP`)")
    r.add_argument("--seed", type=_parse_seed, default=0, help="seed of the random operands (an integer >= 0)")
    r.add_argument("--trace", help="write the trace to this file: Chrome JSON (.json, .json.gz: "
                                   "ui.perfetto.dev or chrome://tracing) or Perfetto protobuf (.pftrace, "
                                   ".perfetto-trace)")
    r.add_argument("--trace-level", default="instruction", choices=("off", "launch", "tile", "instruction"),
                   help="detail of the trace (default: instruction)")
    r.add_argument("--report", help="write a self-contained HTML report to this file")
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    r.add_argument("--csv", help="write the op_summary CSV (one row per launch) to this file, and the "
                                 "per-core and hot-spot tables beside it (docs/profiling.md)")
    r.add_argument("--source-lines", action="store_true",
                   help="stamp instructions with their kernel source line (the code_exe table)")
    r.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a status line on stderr while a long run simulates: cycles, share of the "
                        "estimate, seconds (default: on when stderr is a terminal)")
    r.set_defaults(func=cmd_run)

    d = sub.add_parser("devices", help="print the device catalogue with provenance")
    d.add_argument("names", nargs="*", help="devices to show (default: all)")
    d.add_argument("--brief", action="store_true", help="omit the source/assumption texts")
    d.add_argument("--all", action="store_true",
                   help="also list every number of the device file (dotted field, value, tag), "
                        "the vector cost table included")
    d.set_defaults(func=cmd_devices)

    o = sub.add_parser("ops", help="list the operators, or describe one: operands, attributes, --shape")
    o.add_argument("names", nargs="*", help="operators to describe (default: list all)")
    o.add_argument("--device", help="show the dtypes on this device only")
    o.set_defaults(func=cmd_ops)

    m = sub.add_parser("demo", help="run every operator on every product that supports it and check goldens")
    m.add_argument("--out", default="opsim-out", help="directory for traces and reports (default: opsim-out)")
    m.add_argument("--no-report", action="store_true", help="skip the HTML reports")
    m.add_argument("--workers", type=parse_workers, default=None, help="worker processes (default: CPU count)")
    m.add_argument("--kernel", action="append", help="only this operator (repeatable); custom ones as FILE.py:name")
    m.set_defaults(func=cmd_demo)

    from opsim import cli_check, cli_study, cli_trace
    cli_trace.register(sub)
    cli_study.register(sub)
    cli_check.register(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()


def _quiet_broken_pipe() -> int:
    """The reader of our output went away (``opsim devices | head -1``): stop quietly. stdout is
    pointed at /dev/null so that the interpreter's final flush does not complain either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):   # stdout is not a file (e.g. captured)
        pass
    return 0


class DeviceOverride(argparse.Action):
    """``--set KEY=VALUE`` (repeatable), the one flag for device field overrides; ``--override``
    is accepted as its deprecated spelling."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if option_string == "--override":
            print("opsim: --override is deprecated; use --set KEY=VALUE", file=sys.stderr)
        items = list(getattr(namespace, self.dest, None) or [])
        items.append(values)
        setattr(namespace, self.dest, items)


def _opsim_version() -> str:
    from opsim.api import _version
    return _version()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

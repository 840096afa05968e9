"""The study commands of the CLI: ``opsim sweep`` and ``opsim capacity``.

``register(subparsers)`` adds both to the main parser; each sets ``func`` (``args -> exit
code``), the argparse convention the main CLI dispatches on. ``python -m opsim.cli_study``
runs them on their own.

    opsim sweep examples/studies/elementwise_tiling_a2_a3.toml --db out.sqlite --confirm-top 5 --plot plots/
    opsim sweep study.toml --db out.sqlite --resume            # after an interruption
    opsim sweep study.toml --executor dask --scheduler tcp://10.0.0.1:8786
    opsim capacity embedding_dense_backward --device atlas-training
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from typing import Any, Mapping, Sequence

__all__ = ["register", "main"]


def _parse_value(text: str) -> Any:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _overrides(items: Sequence[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            from opsim.cli import usage_error
            usage_error(f"opsim capacity: --set {item!r} must be KEY=VALUE (e.g. ub.size=262144)")
        out[key.strip()] = _parse_value(value.strip())
    return out


def _cmd_sweep(args: argparse.Namespace) -> int:
    from opsim.cli import make_parent_dirs
    from opsim.sweep import StudyError, sweep
    try:
        res = sweep(args.study, args.db, resume=args.resume, overwrite=args.overwrite,
                    executor=args.executor, workers=args.workers, scheduler=args.scheduler,
                    confirm_top=args.confirm_top, mode=args.mode, quiet=args.quiet,
                    strict=not args.allow_unknown_operators)
    except StudyError as exc:
        print(f"opsim sweep: {exc.cli_message()}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError, sqlite3.DatabaseError) as exc:
        print(f"opsim sweep: {exc}", file=sys.stderr)
        return 1
    if args.csv:
        try:
            make_parent_dirs(args.csv)
            res.to_csv(args.csv)
        except OSError as exc:   # the rows are safe in the database: say so, no traceback
            print(f"opsim sweep: --csv {args.csv}: {exc.strerror or exc} (the {res.points} rows are in "
                  f"{res.path}; rerun with --resume and another --csv to export them)", file=sys.stderr)
            return 2
    if args.plot:   # after the CSV: a picture that cannot be drawn loses nothing else
        from opsim.study_plots import plot_study
        try:
            plot_study(res, args.plot)
        except (OSError, ImportError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            print(f"opsim sweep: --plot {args.plot}: {why} (the {res.points} rows are in {res.path}; "
                  f"rerun with --resume and another --plot to draw them)", file=sys.stderr)
            return 2
    rows = res.rows()
    ok = [r for r in rows if r["status"] == "ok"]
    print(f"study {res.study.name}: {res.points} points, {len(rows)} rows in {res.path} "
          f"(ran {res.ran}, skipped {res.skipped} already done, {res.failed} failed this run)")
    if ok:
        best = min(ok, key=lambda r: r["time_us"])
        # an empty point (a zero dimension) launches nothing and has no bound
        bound = f"{best['bound']}-bound" if best["bound"] else "empty: nothing launched"
        print(f"fastest: {best['time_us']:.3f} us ({best['cycles']} cycles, {bound}) "
              f"at {best['operator']} on {best['device']}{point_text(res.study, best)}")
    confirmed = [r for r in rows if r.get("confirmed_cycles") is not None]
    if confirmed:
        print("confirmed with the simulator (timing mode):")
        print(f"  {'idx':>5} {'estimate':>12} {'simulator':>12} {'error':>8}")
        for r in sorted(confirmed, key=lambda r: r["confirmed_time_us"]):
            print(f"  {r['idx']:>5} {r['cycles']:>12} {r['confirmed_cycles']:>12} "
                  f"{100 * r['estimate_error']:>+7.2f}%")
    if args.csv:
        print(f"CSV: {args.csv}")
    if args.plot:
        print(f"plots: {args.plot}")
    return 0


def point_text(study: Any, row: Mapping[str, Any]) -> str:
    """": shape 64x4096, dtype fp16, tiling.block_dim 8" -- the row's value of each axis of the
    study other than operator and device (named before it), as a study file or the CLI writes it;
    "" when the study has no other axis. An axis the study lacks is left out (it has no value the
    user chose: a missing dtype is not "null")."""
    params = json.loads(row["params"])
    parts = []
    for key in study.axis_keys():
        if key in ("operator", "device"):
            continue
        group, _, field = key.partition(".")
        value = params[_PARAM_GROUPS[group]][field] if field else params[key]
        parts.append(f"{key} {_axis_value(value)}")
    return (": " + ", ".join(parts)) if parts else ""


# the parameter table of a point that holds a prefixed axis' values (sweep.canonical_params)
_PARAM_GROUPS = {"tiling": "tiling", "override": "overrides", "attr": "attrs"}


def _axis_value(value: Any) -> str:
    """One axis value as the user writes it: a shape 64x4096 (as --shape), true/false, a table of
    operands name=value ..."""
    if isinstance(value, Mapping):
        return " ".join(f"{k}={_axis_value(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "x".join(str(d) for d in value) if value else "scalar"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _cmd_capacity(args: argparse.Namespace) -> int:
    from opsim.capacity import capacity, format_table
    try:
        rows = capacity(args.op, args.device, args.dtype, _overrides(args.override))
    except (KeyError, ValueError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"opsim capacity: {msg}", file=sys.stderr)
        return 2
    title = f"{args.op} on {args.device}" + (f" ({args.dtype})" if args.dtype else "")
    if args.override:
        title += f" with {', '.join(args.override)}"
    print(format_table(rows, title))
    return 0


def register(subparsers: Any) -> None:
    """Add the ``sweep`` and ``capacity`` commands to an argparse subparsers object."""
    from opsim.cli import DeviceOverride, parse_workers
    p = subparsers.add_parser("sweep", help="run a capacity/tiling study (a TOML file) into SQLite",
                              description="Run the cross product of a study's axes; one SQLite row "
                                          "per point, committed as it finishes.")
    p.add_argument("study", help="study file (TOML); see examples/studies/")
    p.add_argument("--db", help="SQLite database (default: the study's database key, a path inside the "
                                "working directory, or <name>.sqlite there)")
    again = p.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                   help="skip points already in the database (refused if the study has changed since)")
    again.add_argument("--overwrite", action="store_true",
                   help="discard an existing database of the same study first (never another file)")
    p.add_argument("--mode", choices=("estimate", "timing", "full"),
                   help="override the study's mode (refused if the study has a mode axis)")
    p.add_argument("--confirm-top", type=int, default=0, metavar="K",
                   help="estimate every point, then run the simulator on the K fastest")
    p.add_argument("--executor", choices=("local", "serial", "dask"), default="local",
                   help="local worker processes (default), in-process, or a dask.distributed cluster")
    p.add_argument("--workers", type=parse_workers, help="local worker processes (default: CPU count)")
    p.add_argument("--scheduler", help="dask scheduler address (with --executor dask)")
    p.add_argument("--plot", metavar="DIR", help="draw the study's heat maps and scaling lines here")
    p.add_argument("--csv", metavar="PATH", help="also export every row to CSV")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--allow-unknown-operators", action="store_true",
                   help="record points of operators this build lacks as errors instead of refusing")
    p.set_defaults(func=_cmd_sweep)

    c = subparsers.add_parser("capacity", help="what fits: UB tiles, device memory, documented limits",
                              description="The largest tile per core, the largest shapes that fit "
                                          "device memory and the documented limits, from the spec.")
    c.add_argument("op", help="operator name (opsim.operators())")
    c.add_argument("--device", required=True, help="device name or device TOML file")
    c.add_argument("--dtype", help="operand dtype (fp32, fp16, bf16)")
    c.add_argument("--set", "--override", action=DeviceOverride, dest="override", metavar="KEY=VALUE",
                   help="what-if device field, e.g. ub.size=262144 (repeatable; --override is a deprecated alias)")
    c.set_defaults(func=_cmd_capacity)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="opsim")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
